//! Getting the box ready: the daemon (started when nothing answers), the
//! box (created or reused), started, probed and provisioned; and what the
//! box really has, which a reused box may not share with the flags.

use std::sync::Arc;
use std::time::Instant;

use boxd_client::untrusted::{escape, escape_lines};
use boxd_client::{Client, ErrorKind, Paths, boxes, spawn, spec, v1};
use tokio::sync::Notify;

use crate::acp::mounts::{Mount, Mounts};
use crate::{Args, ProxyError, ready};

/// A box ready for the command.
pub struct Ready {
    pub client: Client,
    /// Where the daemon answered (reconnect there).
    pub socket: std::path::PathBuf,
    pub box_name: String,
    /// The box as boxd has it (its spec: mounts, network).
    pub info: v1::BoxInfo,
    /// Mounts the flags ask for that the box does not have, as `HOST:GUEST`.
    pub missing_mounts: Vec<String>,
}

impl Ready {
    /// The box's mounts, as the ACP relay maps paths through them.
    pub fn mounts(&self) -> Mounts {
        let spec = self.info.spec.clone().unwrap_or_default();
        Mounts::new(
            spec.mounts
                .into_iter()
                .map(|m| Mount {
                    host: m.host_path.into(),
                    guest: m.guest_path.into(),
                    read_only: m.read_only,
                })
                .collect(),
        )
    }

    pub fn allow_net(&self) -> Vec<String> {
        self.info
            .spec
            .as_ref()
            .map(|s| s.allow_net.clone())
            .unwrap_or_default()
    }
}

/// Daemon, box, start, probe and provisioning. `client_gone` (ACP mode)
/// stops provisioning when the client closes stdin before or while it runs.
pub async fn prepare(args: &Args, client_gone: Option<Arc<Notify>>) -> Result<Ready, ProxyError> {
    let begin = Instant::now();
    let env = spec::parse_env(&args.env)?;
    let name = args.box_name()?;
    let mounts = args.mount_words()?;
    let workdir = args.workdir()?;
    let paths = Paths::resolve(args.socket.clone(), None)?.following_lock();
    let running = spawn::ensure_running(&paths, &spawn::boxd_binary(None), &[]).await?;
    let socket = running.socket.clone();
    let mut client = running.client;
    if running.origin == spawn::Origin::Started {
        tracing::info!(
            "started boxd {} (pid {}, {} engine) on {}",
            escape(&running.describe.daemon_version),
            running.describe.pid,
            escape(&running.describe.engine),
            socket.display()
        );
    } else if socket != paths.socket {
        tracing::debug!("boxd serves this home on {}", socket.display());
    }
    tracing::debug!("daemon ready after {:?}", begin.elapsed());

    let wanted = spec::SpecWords {
        image: args.image.as_deref().unwrap_or_default(),
        cpus: args.cpus,
        memory_mib: args.memory_mib,
        mounts: &mounts,
        allow_net: &args.allow_net,
        env: &args.env,
        working_dir: workdir.as_deref(),
        secrets: &args.secrets,
        publish: &args.publish,
        userns: args.userns.as_deref(),
        ..Default::default()
    }
    .parse()?;
    let wanted_mounts = wanted.clone().build().mounts;
    let info = match &args.image {
        Some(image) => {
            // A missing image is pulled first; its steps are told with -v.
            let on_pull = |e: &boxes::PullEvent| {
                if let Some(step) = pull_step(e) {
                    tracing::debug!("pulling {image}: {step}");
                }
                std::future::ready(())
            };
            let created = boxes::create_or_reuse(&mut client, &name, wanted, on_pull).await?;
            for w in &created.warnings {
                tracing::warn!("{}", escape_lines(w));
            }
            tracing::debug!(
                "box {name} {} after {:?}",
                match created.outcome {
                    boxes::Outcome::Created => "created",
                    boxes::Outcome::Reused => "reused",
                },
                begin.elapsed()
            );
            created.info
        }
        None => {
            let found = client
                .inspect_box(v1::InspectBoxRequest { name: name.clone() })
                .await;
            if matches!(&found, Err(s) if ErrorKind::of_status(s) == ErrorKind::NotFound) {
                return Err(ProxyError::NoImage(name));
            }
            found?.into_inner()
        }
    };
    let missing_mounts = missing(
        &wanted_mounts,
        info.spec.as_ref().map_or(&[][..], |s| &s.mounts),
    );
    if !missing_mounts.is_empty() {
        // Said even with -q: the agent would otherwise fail later, and
        // misleadingly, on a path the box cannot see.
        tracing::error!(
            "box {name} already exists without the mounts asked for ({}); it keeps the ones it was made with. Remove it (boxctl rm -f {name}) or choose another --box",
            missing_mounts.join(", ")
        );
    }
    let started = client
        .start_box(v1::StartBoxRequest { name: name.clone() })
        .await?
        .into_inner();
    tracing::debug!(
        "box {name} running after {:?} (boot {} ms)",
        begin.elapsed(),
        started.boot_ms
    );
    logs_note(&name);
    let shell = ready::Shell {
        box_name: &name,
        env: &env,
        workdir: workdir.as_deref(),
    };
    ready::ensure(
        &mut client,
        &shell,
        args.probe.as_deref(),
        args.provision.as_deref(),
        client_gone,
    )
    .await?;
    Ok(Ready {
        client,
        socket,
        box_name: name,
        info: started.r#box.unwrap_or(info),
        missing_mounts,
    })
}

/// Where dropped diagnostics can be read in full.
fn logs_note(name: &str) {
    boxd_client::stderr::Sink::global().set_note(format!(
        "`boxctl logs {name}` shows what the box's commands printed"
    ));
}

/// The wanted mounts the box lacks (same guest path, host directory and
/// mode), as `HOST:GUEST[:ro]`.
fn missing(wanted: &[v1::Mount], has: &[v1::Mount]) -> Vec<String> {
    wanted
        .iter()
        .filter(|w| {
            let host = std::path::Path::new(&w.host_path);
            let host = host.canonicalize().unwrap_or_else(|_| host.to_path_buf());
            !has.iter().any(|h| {
                std::path::Path::new(&h.host_path) == host
                    && h.guest_path.trim_end_matches('/') == w.guest_path.trim_end_matches('/')
                    && h.read_only == w.read_only
            })
        })
        .map(|w| {
            format!(
                "{}:{}{}",
                w.host_path,
                w.guest_path,
                if w.read_only { ":ro" } else { "" }
            )
        })
        .collect()
}

/// One step of a pull, in words, for the verbose log (byte counts left
/// out: they come many times a second).
fn pull_step(e: &boxes::PullEvent) -> Option<String> {
    use boxes::PullEvent;
    Some(match e {
        PullEvent::Started(s) => format!("{} layers, {} bytes", s.layers.len(), s.total_bytes),
        PullEvent::Progress(_) => return None,
        PullEvent::LayerDone(d) => format!("layer {} done", escape(d)),
        PullEvent::Unpacking(_) => "unpacking".into(),
        PullEvent::Done(i) => format!("done ({})", escape(&i.digest)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(host: &str, guest: &str, ro: bool) -> v1::Mount {
        v1::Mount {
            host_path: host.into(),
            guest_path: guest.into(),
            read_only: ro,
        }
    }

    #[test]
    fn mounts_the_box_lacks_are_named() {
        let has = [m("/srv/a", "/workspace", false)];
        assert!(missing(&[m("/srv/a", "/workspace/", false)], &has).is_empty());
        assert_eq!(
            missing(&[m("/srv/b", "/workspace", false)], &has),
            ["/srv/b:/workspace"]
        );
        assert_eq!(
            missing(&[m("/srv/a", "/workspace", true)], &has),
            ["/srv/a:/workspace:ro"]
        );
        assert_eq!(missing(&[m("/srv/a", "/w2", false)], &has), ["/srv/a:/w2"]);
    }
}
