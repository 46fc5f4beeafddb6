//! Box lifecycle commands as docker users type them: `create`, `start`,
//! `stop`, `rm` (several names each), `ps`/`ls` with `-a -q --filter`,
//! `inspect` of several boxes with `--format`, and `prune`.
//!
//! Invariants: a create never changes or removes a box it did not make
//! unless `--replace` says so (a name with another spec is refused with
//! exit 125, naming each difference); a command on several boxes goes on
//! past a failure, reports each, and exits 1 if any failed.

use std::io::{BufRead, IsTerminal, Write};

use boxd_client::boxes::{BoxSpec, Created};
use boxd_client::untrusted::{escape, escape_lines};
use boxd_client::{Client, ErrorKind, spec, tonic::Status, v1};
use clap::Args;

use crate::{BoxFlags, Ctx, Failure, output, template::Template, words};

/// Exit code of a create or run that boxd refused (docker's 125).
const CREATE_FAILED: u8 = 125;

/// The box a `create` or `run` names.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// `None`: a generated name, which must be new.
    pub name: Option<String>,
    pub image: String,
}

/// `create|run [--name NAME] IMAGE` or the older `create|run NAME --image
/// IMAGE`: which word is the image and which the name.
pub fn target(flags: &BoxFlags, first: Option<String>) -> Result<Target, Failure> {
    match (&flags.image, first) {
        (Some(image), first) => {
            let name = match (&flags.name, first) {
                (Some(n), None) => n.clone(),
                (None, Some(n)) => n,
                (Some(_), Some(word)) => {
                    return Err(Failure::usage(format!(
                        "both --name and --image are given: {word:?} is neither (give IMAGE as the first word, or leave out --name)"
                    )));
                }
                (None, None) => {
                    return Err(Failure::usage("--image needs a box name: give --name NAME"));
                }
            };
            Ok(Target {
                name: Some(name),
                image: image.clone(),
            })
        }
        (None, Some(image)) => Ok(Target {
            name: flags.name.clone(),
            image,
        }),
        (None, None) => Err(Failure::usage("give an IMAGE")),
    }
}

/// The spec of `flags` (plus a box environment and working directory).
/// `--cpus` (rounded up to whole CPUs, with a note) and `--memory` (or the
/// older `--memory-mib`) as boxd takes them.
fn limits(
    cpus: Option<&str>,
    memory: Option<&str>,
    memory_mib: Option<u32>,
) -> Result<(Option<u32>, Option<u32>), Failure> {
    let cpus = match cpus {
        None => None,
        Some(w) => {
            let (n, note) = words::cpus(w).map_err(Failure::usage)?;
            if let Some(note) = note {
                eprintln!("boxctl: {note}");
            }
            Some(n)
        }
    };
    let memory_mib = match memory {
        Some(w) => Some(words::memory_mib(w).map_err(Failure::usage)?),
        None => memory_mib,
    };
    Ok((cpus, memory_mib))
}

pub fn box_spec(
    flags: &BoxFlags,
    image: &str,
    env: &[String],
    workdir: Option<&str>,
) -> Result<BoxSpec, Failure> {
    let (cpus, memory_mib) = limits(
        flags.cpus.as_deref(),
        flags.memory.as_deref(),
        flags.memory_mib,
    )?;
    let words = spec::SpecWords {
        image,
        cpus,
        memory_mib,
        disk_size_gb: flags.disk_gb,
        mounts: &flags.mounts,
        allow_net: &flags.allow_net,
        env,
        working_dir: workdir,
        secrets: &flags.secrets,
        publish: &flags.publish,
        userns: flags.userns.as_deref(),
    };
    Ok(words.parse()?)
}

/// Creates the box of `target`, or reuses the one of that name when its
/// spec is the same; pulls the image first when boxd lacks it.
pub async fn create(
    ctx: &Ctx,
    client: &mut Client,
    flags: &BoxFlags,
    target: &Target,
    env: &[String],
    workdir: Option<&str>,
) -> Result<Created, Failure> {
    let spec = box_spec(flags, &target.image, env, workdir)?;
    let fail = |s: Status| -> Failure {
        let mut f = Failure::from(s);
        f.code = CREATE_FAILED;
        f
    };
    let Some(name) = &target.name else {
        // A generated name must be new: draw again on a clash.
        for _ in 0..8 {
            let name = words::generated_name();
            match crate::create(client, &name, spec.clone(), v1::IfExists::Fail, ctx.json).await {
                Err(f) if f.kind == Some(ErrorKind::AlreadyExists) => continue,
                other => {
                    return other.map_err(|mut f| {
                        f.code = CREATE_FAILED;
                        f
                    });
                }
            }
        }
        return Err(fail(Status::already_exists(
            "no free generated name; give --name",
        )));
    };
    let mode = if flags.replace {
        v1::IfExists::Replace
    } else {
        v1::IfExists::SameSpec
    };
    match crate::create(client, name, spec, mode, ctx.json).await {
        Ok(c) => Ok(c),
        Err(mut f) => {
            if f.code != 2 {
                f.code = CREATE_FAILED;
            }
            if f.kind == Some(ErrorKind::AlreadyExists) {
                f.message = format!(
                    "{}; to use that box as it is, exec in it (boxctl exec {name} ...); otherwise pick another --name, remove it (boxctl rm -f {name}), or pass --replace",
                    f.message
                );
            }
            Err(f)
        }
    }
}

/// The box `name`, or a not-found failure that names the closest box.
pub async fn must_exist(client: &mut Client, name: &str) -> Result<v1::BoxInfo, Failure> {
    match client
        .inspect_box(v1::InspectBoxRequest { name: name.into() })
        .await
    {
        Ok(r) => Ok(r.into_inner()),
        Err(s) => Err(not_found(client, name, s).await),
    }
}

/// `s` as a failure; a box that is not there gets "did you mean".
pub async fn not_found(client: &mut Client, name: &str, s: Status) -> Failure {
    let mut f = Failure::from(s);
    if f.kind == Some(ErrorKind::NotFound) {
        f.message = format!("no box named {name}");
        if let Ok(list) = client.list_boxes(v1::ListBoxesRequest {}).await {
            let boxes = list.into_inner().boxes;
            if let Some(close) = words::did_you_mean(name, boxes.iter().map(|b| b.name.as_str())) {
                f.message.push_str(&format!(" (did you mean {close}?)"));
            }
        }
    }
    f
}

/// Runs `one` for each name, going on past failures (each reported on
/// stderr); exits 1 if any failed, as docker does.
async fn each<F, Fut>(client: &mut Client, names: &[String], mut one: F) -> Result<u8, Failure>
where
    F: FnMut(Client, String) -> Fut,
    Fut: std::future::Future<Output = Result<(), Status>>,
{
    let mut failed: Option<Failure> = None;
    for name in names {
        if let Err(s) = one(client.clone(), name.clone()).await {
            let f = not_found(client, name, s).await;
            if names.len() > 1 {
                eprintln!("boxctl: {}", escape_lines(&f.message));
            }
            failed = Some(f);
        }
    }
    match failed {
        None => Ok(0),
        Some(f) if names.len() == 1 => Err(f),
        Some(f) => Err(Failure {
            message: "some boxes failed (see above)".into(),
            ..f
        }),
    }
}

pub async fn start(ctx: &Ctx, names: &[String]) -> Result<u8, Failure> {
    let mut client = ctx.client().await?;
    each(&mut client, names, |mut c, name| async move {
        let reply = c
            .start_box(v1::StartBoxRequest { name })
            .await?
            .into_inner();
        output::started(ctx, &reply);
        Ok(())
    })
    .await
}

pub async fn stop(ctx: &Ctx, names: &[String], force: bool) -> Result<u8, Failure> {
    let mut client = ctx.client().await?;
    each(&mut client, names, |mut c, name| async move {
        let reply = c
            .stop_box(v1::StopBoxRequest { name, force })
            .await?
            .into_inner();
        output::one_box(ctx, reply.r#box.as_ref());
        Ok(())
    })
    .await
}

pub async fn restart(ctx: &Ctx, names: &[String]) -> Result<u8, Failure> {
    let mut client = ctx.client().await?;
    each(&mut client, names, |mut c, name| async move {
        c.stop_box(v1::StopBoxRequest {
            name: name.clone(),
            force: false,
        })
        .await?;
        let reply = c
            .start_box(v1::StartBoxRequest { name })
            .await?
            .into_inner();
        output::started(ctx, &reply);
        Ok(())
    })
    .await
}

#[derive(Args, Debug)]
pub struct UpdateArgs {
    /// Box names or ids.
    #[arg(required = true, value_name = "BOX", add = crate::complete::boxes())]
    pub names: Vec<String>,
    /// CPUs the box may use (whole CPUs; 0.5 is rounded up to 1).
    #[arg(long, value_name = "N")]
    pub cpus: Option<String>,
    /// Memory limit: 512m, 2g, or bytes (docker's units).
    #[arg(short = 'm', long = "memory", value_name = "SIZE")]
    pub memory: Option<String>,
    /// Memory limit in MiB (the older spelling of --memory).
    #[arg(long = "memory-mib", value_name = "MIB", conflicts_with = "memory")]
    pub memory_mib: Option<u32>,
    /// The box's new allow-list, replacing the old one (repeatable: host
    /// names, *.suffix, IPs, CIDRs). Applies from the box's next start.
    #[arg(long = "allow-net", value_name = "HOST")]
    pub allow_net: Vec<String>,
    /// No network at all from the next start (an empty allow-list).
    #[arg(long, conflicts_with = "allow_net")]
    pub no_net: bool,
}

pub async fn update(ctx: &Ctx, args: UpdateArgs) -> Result<u8, Failure> {
    let (cpus, memory_mib) = limits(
        args.cpus.as_deref(),
        args.memory.as_deref(),
        args.memory_mib,
    )?;
    let allow_net = (args.no_net || !args.allow_net.is_empty()).then(|| v1::AllowNet {
        hosts: args.allow_net.clone(),
    });
    if cpus.is_none() && memory_mib.is_none() && allow_net.is_none() {
        return Err(Failure::usage(
            "nothing to update: give --cpus, --memory, --allow-net or --no-net",
        ));
    }
    let mut client = ctx.client().await?;
    each(&mut client, &args.names, |mut c, name| {
        let allow_net = allow_net.clone();
        async move {
            let reply = c
                .update_box(v1::UpdateBoxRequest {
                    name,
                    cpus,
                    memory_mib,
                    allow_net,
                })
                .await?
                .into_inner();
            output::updated(ctx, &reply);
            Ok(())
        }
    })
    .await
}

pub async fn rm(ctx: &Ctx, names: &[String], force: bool) -> Result<u8, Failure> {
    let mut client = ctx.client().await?;
    each(&mut client, names, |mut c, name| async move {
        c.remove_box(v1::RemoveBoxRequest {
            name: name.clone(),
            force,
        })
        .await?;
        output::removed(ctx, &name);
        Ok(())
    })
    .await
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Every box (`ps` shows running ones only without it, as docker's;
    /// `ls` always shows all).
    #[arg(short, long)]
    pub all: bool,
    /// Only names, one per line (what `rm`, `stop` and `exec` take).
    #[arg(short, long)]
    pub quiet: bool,
    /// KEY=VALUE (repeatable, all must hold): name= (part of the name),
    /// id= (prefix), status= (created, running, stopped, failed),
    /// ancestor= (image), isolation= (namespace, microvm).
    #[arg(short, long, value_name = "KEY=VALUE")]
    pub filter: Vec<String>,
}

pub async fn list(ctx: &Ctx, args: ListArgs, running_only: bool) -> Result<u8, Failure> {
    let filters: Vec<(String, String)> = args
        .filter
        .iter()
        .map(|f| {
            let (k, v) = f
                .split_once('=')
                .ok_or_else(|| Failure::usage(format!("invalid filter {f:?}: use KEY=VALUE")))?;
            let k = k.to_ascii_lowercase();
            if !["name", "id", "status", "ancestor", "isolation"].contains(&k.as_str()) {
                return Err(Failure::usage(format!(
                    "unknown filter {k:?}: use name, id, status, ancestor or isolation"
                )));
            }
            Ok((k, v.to_owned()))
        })
        .collect::<Result<_, _>>()?;
    let mut boxes = ctx
        .client()
        .await?
        .list_boxes(v1::ListBoxesRequest {})
        .await?
        .into_inner()
        .boxes;
    boxes.retain(|b| {
        let state = output::state(b.state);
        (args.all || !running_only || state == "running")
            && filters.iter().all(|(k, v)| match k.as_str() {
                "name" => b.name.contains(v.as_str()),
                "id" => b.id.starts_with(v.as_str()),
                "status" => state == v || (v == "exited" && state == "stopped"),
                "ancestor" => b.image == *v || b.image.starts_with(&format!("{v}:")),
                _ => b.isolation == *v,
            })
    });
    if args.quiet {
        for b in &boxes {
            println!("{}", escape(&b.name));
        }
    } else {
        output::list(ctx, &boxes);
    }
    Ok(0)
}

/// A box by name, or by id (whole, or a prefix that names one box).
async fn find(client: &mut Client, word: &str) -> Result<v1::BoxInfo, Failure> {
    match client
        .inspect_box(v1::InspectBoxRequest { name: word.into() })
        .await
    {
        Ok(r) => Ok(r.into_inner()),
        Err(s)
            if ErrorKind::of_status(&s) == ErrorKind::NotFound
                || ErrorKind::of_status(&s) == ErrorKind::InvalidArgument =>
        {
            let boxes = client
                .list_boxes(v1::ListBoxesRequest {})
                .await?
                .into_inner()
                .boxes;
            let by_id: Vec<_> = boxes.iter().filter(|b| b.id.starts_with(word)).collect();
            match by_id.as_slice() {
                [one] if !word.is_empty() => Ok((*one).clone()),
                _ => Err(not_found(client, word, s).await),
            }
        }
        Err(s) => Err(s.into()),
    }
}

pub async fn inspect(ctx: &Ctx, names: &[String], format: Option<&str>) -> Result<u8, Failure> {
    let template = format
        .map(Template::parse)
        .transpose()
        .map_err(Failure::usage)?;
    let mut client = ctx.client().await?;
    let mut found = Vec::new();
    let mut failed = None;
    for name in names {
        match find(&mut client, name).await {
            Ok(b) => found.push(b),
            Err(f) => {
                if names.len() > 1 {
                    eprintln!("boxctl: {}", escape_lines(&f.message));
                }
                failed = Some(f);
            }
        }
    }
    let mut out = std::io::stdout().lock();
    match &template {
        Some(t) => {
            for b in &found {
                // A template prints strings unquoted: what it renders is
                // escaped but for newlines and tabs (a PEM in an env value
                // prints as docker prints it; `{{json}}` is escaped by serde
                // already, so it stays exact JSON).
                let text = t.render(&output::box_json(b)).map_err(Failure::usage)?;
                let _ = writeln!(out, "{}", escape_lines(&text));
            }
        }
        None if names.len() > 1 => {
            // docker's shape: a list, one object per box asked for.
            let all: Vec<_> = found.iter().map(output::box_json).collect();
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&all).unwrap_or_default()
            );
        }
        None => {
            for b in &found {
                output::inspect(ctx, b);
            }
        }
    }
    match failed {
        None => Ok(0),
        Some(f) => Err(Failure {
            message: if names.len() > 1 {
                "some boxes were not found (see above)".into()
            } else {
                f.message.clone()
            },
            ..f
        }),
    }
}

/// Asks "are you sure" on the terminal; `-f` (or a non-terminal stdin
/// that says `y`) answers for the user.
fn confirm(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    if !std::io::stdin().is_terminal() && line.is_empty() {
        eprintln!();
    }
    matches!(line.trim(), "y" | "Y" | "yes" | "Yes")
}

/// `box prune` (and `system prune`, which also prunes unused images):
/// removes every box that is not running.
pub async fn prune(ctx: &Ctx, force: bool, images: bool) -> Result<u8, Failure> {
    let what = if images {
        "all boxes that are not running and all images no box uses"
    } else {
        "all boxes that are not running, with their files"
    };
    if !force && !confirm(&format!("WARNING! This removes {what}. Continue?")) {
        return Err(Failure {
            code: 1,
            message: "nothing removed (pass -f to prune without asking)".into(),
            kind: None,
        });
    }
    let mut client = ctx.client().await?;
    let boxes = client
        .list_boxes(v1::ListBoxesRequest {})
        .await?
        .into_inner()
        .boxes;
    let mut removed = Vec::new();
    for b in boxes
        .iter()
        .filter(|b| !matches!(output::state(b.state), "running" | "starting" | "stopping"))
    {
        match client
            .remove_box(v1::RemoveBoxRequest {
                name: b.name.clone(),
                force: false,
            })
            .await
        {
            Ok(_) => removed.push(b.name.clone()),
            // Started since it was listed: it stays.
            Err(s) => eprintln!(
                "boxctl: kept box {}: {}",
                escape(&b.name),
                escape_lines(&boxd_client::status_message(&s))
            ),
        }
    }
    let images = if images {
        Some(
            client
                .prune_images(v1::PruneImagesRequest {})
                .await?
                .into_inner(),
        )
    } else {
        None
    };
    if ctx.json {
        println!(
            "{}",
            serde_json::json!({"removedBoxes": removed, "removedImages": images.as_ref().map(|i| i.deleted.clone()).unwrap_or_default()})
        );
    } else {
        for name in &removed {
            println!("removed box {}", escape(name));
        }
        if let Some(i) = &images {
            for r in &i.deleted {
                println!("removed image {}", escape(r));
            }
        }
        println!("{} boxes removed", removed.len());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(image: Option<&str>, name: Option<&str>) -> BoxFlags {
        BoxFlags {
            image: image.map(str::to_owned),
            name: name.map(str::to_owned),
            ..BoxFlags::default()
        }
    }

    #[test]
    fn docker_shape_and_the_older_form_name_the_same_box() {
        let t = |f: BoxFlags, first: Option<&str>| target(&f, first.map(str::to_owned));
        assert_eq!(
            t(flags(None, Some("web")), Some("alpine")).unwrap(),
            Target {
                name: Some("web".into()),
                image: "alpine".into()
            }
        );
        assert_eq!(
            t(flags(None, None), Some("alpine")).unwrap(),
            Target {
                name: None,
                image: "alpine".into()
            }
        );
        assert_eq!(
            t(flags(Some("alpine"), None), Some("web")).unwrap(),
            Target {
                name: Some("web".into()),
                image: "alpine".into()
            }
        );
        assert_eq!(
            t(flags(Some("alpine"), Some("web")), None).unwrap(),
            Target {
                name: Some("web".into()),
                image: "alpine".into()
            }
        );
        assert!(t(flags(Some("alpine"), Some("web")), Some("x")).is_err());
        assert!(t(flags(Some("alpine"), None), None).is_err());
        assert!(t(flags(None, None), None).is_err());
    }
}
