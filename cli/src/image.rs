//! `boxctl image …`, and the progress of the pull that `create` and `run`
//! do first when the daemon has no image for the reference
//! ([`boxd_client::boxes::create_or_reuse`] decides; [`PullView`] shows).
//!
//! Progress: bars on a terminal (indicatif), one line per step otherwise,
//! one JSON object per event with `--json`. Progress goes to stderr, except
//! for `image pull --json`, whose events are its output.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use boxd_client::boxes::{self, PullEvent};
use boxd_client::untrusted::escape;
use boxd_client::{Client, v1};
use clap::Subcommand;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use crate::{Ctx, Failure};

#[derive(Subcommand, Debug)]
pub enum Action {
    /// Pull an image from a registry (e.g. `alpine:3.20`, `localhost:5000/app@sha256:…`).
    Pull {
        /// A registry reference.
        reference: String,
    },
    /// List images.
    #[command(alias = "list")]
    Ls,
    /// Show one image (by reference or digest).
    Inspect {
        /// A reference or a digest.
        reference: String,
    },
    /// Remove a reference; the image goes when nothing names it and no box uses it.
    #[command(alias = "remove")]
    Rm {
        /// A reference or a digest.
        reference: String,
        /// Remove even if boxes were created from it (they keep their files).
        #[arg(short, long)]
        force: bool,
    },
    /// Remove every image nothing names and no box uses, and unused layers.
    Prune,
    /// Import an OCI image layout directory or a `docker save` tarball.
    Import {
        /// An OCI image layout directory or a `docker save` tarball.
        path: std::path::PathBuf,
        /// The reference to give it [default: the name it carries].
        #[arg(long)]
        tag: Option<String>,
    },
}

pub async fn run(ctx: &Ctx, action: Action) -> Result<u8, Failure> {
    let mut c = ctx.client().await?;
    match action {
        Action::Pull { reference } => {
            let where_to = if ctx.json {
                Show::JsonStdout
            } else {
                Show::auto()
            };
            let info = pull(&mut c, &reference, where_to).await?;
            if !ctx.json {
                println!(
                    "{} {}",
                    escape(&info.references.join(", ")),
                    escape(&info.digest)
                );
            }
        }
        Action::Ls => {
            let images = c
                .list_images(v1::ListImagesRequest {})
                .await?
                .into_inner()
                .images;
            if ctx.json {
                println!("{}", Value::Array(images.iter().map(image_json).collect()));
            } else {
                println!(
                    "{:<50} {:<19} {:>10} {:>6}  USED BY",
                    "REFERENCE", "DIGEST", "SIZE", "LAYERS"
                );
                for i in &images {
                    let names = if i.references.is_empty() {
                        vec!["<none>".to_owned()]
                    } else {
                        i.references.clone()
                    };
                    for r in names {
                        println!(
                            "{:<50} {:<19} {:>10} {:>6}  {}",
                            escape(&r),
                            short(&i.digest),
                            human(i.size),
                            i.layers,
                            escape(&i.used_by.join(","))
                        );
                    }
                }
            }
        }
        Action::Inspect { reference } => {
            let i = c
                .inspect_image(v1::InspectImageRequest { reference })
                .await?
                .into_inner();
            println!(
                "{}",
                serde_json::to_string_pretty(&image_json(&i)).unwrap_or_default()
            );
        }
        Action::Rm { reference, force } => {
            let r = c
                .remove_image(v1::RemoveImageRequest { reference, force })
                .await?
                .into_inner();
            if ctx.json {
                println!("{}", json!({"untagged": r.untagged, "deleted": r.deleted}));
            } else {
                for u in &r.untagged {
                    println!("untagged {}", escape(u));
                }
                for d in &r.deleted {
                    println!("deleted {}", escape(d));
                }
            }
        }
        Action::Prune => {
            let r = c
                .prune_images(v1::PruneImagesRequest {})
                .await?
                .into_inner();
            if ctx.json {
                println!(
                    "{}",
                    json!({"deleted": r.deleted, "reclaimedBytes": r.reclaimed_bytes})
                );
            } else {
                for d in &r.deleted {
                    println!("deleted {}", escape(d));
                }
                println!("reclaimed {}", human(r.reclaimed_bytes));
            }
        }
        Action::Import { path, tag } => {
            let path = std::path::absolute(&path)
                .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
            let i = c
                .import_image(v1::ImportImageRequest {
                    path: path.to_string_lossy().into_owned(),
                    reference: tag.unwrap_or_default(),
                })
                .await?
                .into_inner();
            if ctx.json {
                println!("{}", image_json(&i));
            } else {
                println!(
                    "imported {} {}",
                    escape(&i.references.join(", ")),
                    escape(&i.digest)
                );
            }
        }
    }
    Ok(0)
}

/// Where progress goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Bars,
    Lines,
    JsonStdout,
    JsonStderr,
}

impl Show {
    pub fn auto() -> Show {
        if std::io::stderr().is_terminal() {
            Show::Bars
        } else {
            Show::Lines
        }
    }
}

/// Pulls `reference`, showing progress, and returns the image.
pub async fn pull(c: &mut Client, reference: &str, show: Show) -> Result<v1::ImageInfo, Failure> {
    let mut view = PullView::new(reference, show);
    Ok(boxes::pull(c, reference, |e| {
        view.event(e);
        std::future::ready(())
    })
    .await?)
}

/// A pull's progress as `show` wants it: bars per layer, lines, or JSON.
pub struct PullView {
    reference: String,
    show: Show,
    bars: MultiProgress,
    layer_bars: HashMap<String, ProgressBar>,
    /// The spinner of the unpack, once the downloads are done.
    unpacking: Option<ProgressBar>,
    style: ProgressStyle,
}

impl PullView {
    pub fn new(reference: &str, show: Show) -> PullView {
        PullView {
            reference: reference.to_owned(),
            show,
            bars: MultiProgress::new(),
            layer_bars: HashMap::new(),
            unpacking: None,
            style: ProgressStyle::with_template(
                "{prefix:>19} [{bar:30}] {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        }
    }

    /// Shows one step of the pull.
    pub fn event(&mut self, event: &PullEvent) {
        let show = self.show;
        match show {
            // A reader that went away must not stop the pull.
            Show::JsonStdout => {
                let _ = writeln!(std::io::stdout(), "{}", event_json(event));
            }
            Show::JsonStderr => {
                let _ = writeln!(std::io::stderr(), "{}", event_json(event));
            }
            _ => {}
        }
        match event {
            PullEvent::Started(s) => {
                if show == Show::Lines {
                    let cached = s.layers.iter().filter(|l| l.cached).count();
                    eprintln!(
                        "pulling {}: {} layers ({} cached), {} to download",
                        escape(&s.reference),
                        s.layers.len(),
                        cached,
                        human(s.total_bytes)
                    );
                }
                if show == Show::Bars {
                    for l in &s.layers {
                        let bar = self.bars.add(ProgressBar::new(l.size));
                        bar.set_style(self.style.clone());
                        bar.set_prefix(short(&l.digest));
                        if l.cached {
                            bar.finish_with_message("cached");
                        }
                        self.layer_bars.insert(l.digest.clone(), bar);
                    }
                }
            }
            PullEvent::Progress(p) => {
                if let Some(bar) = self.layer_bars.get(&p.layer_digest) {
                    bar.set_position(p.layer_done);
                }
            }
            PullEvent::LayerDone(d) => {
                if let Some(bar) = self.layer_bars.get(d) {
                    bar.finish();
                }
                if show == Show::Lines {
                    eprintln!("layer {} done", short(d));
                }
            }
            PullEvent::Unpacking(_) => {
                if show == Show::Lines {
                    eprintln!("unpacking");
                }
                if show == Show::Bars {
                    // Downloads are done: what takes time now is the unpack.
                    for b in self.layer_bars.values() {
                        b.finish();
                    }
                    let spinner = self.bars.add(ProgressBar::new_spinner());
                    spinner.set_message("unpacking the layers");
                    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
                    self.unpacking = Some(spinner);
                }
            }
            PullEvent::Done(info) => {
                for b in self.layer_bars.values() {
                    b.finish();
                }
                if let Some(spinner) = self.unpacking.take() {
                    spinner.finish_with_message("unpacked");
                }
                if show == Show::Lines {
                    eprintln!(
                        "pulled {} ({})",
                        escape(&self.reference),
                        escape(&info.digest)
                    );
                }
            }
        }
    }
}

fn event_json(e: &PullEvent) -> Value {
    match e {
        PullEvent::Started(s) => {
            json!({"event": "started", "reference": s.reference, "digest": s.digest,
            "totalBytes": s.total_bytes,
            "layers": s.layers.iter().map(|l| json!({"digest": l.digest, "size": l.size, "cached": l.cached})).collect::<Vec<_>>()})
        }
        PullEvent::Progress(p) => {
            json!({"event": "progress", "layer": p.layer_digest, "layerDone": p.layer_done,
            "layerSize": p.layer_size, "doneBytes": p.done_bytes, "totalBytes": p.total_bytes})
        }
        PullEvent::LayerDone(d) => json!({"event": "layerDone", "layer": d}),
        PullEvent::Unpacking(_) => json!({"event": "unpacking"}),
        PullEvent::Done(i) => json!({"event": "done", "image": image_json(i)}),
    }
}

pub fn image_json(i: &v1::ImageInfo) -> Value {
    json!({
        "references": i.references,
        "digest": i.digest,
        "repoDigest": i.repo_digest,
        "size": i.size,
        "layers": i.layers,
        "os": i.os,
        "architecture": i.architecture,
        "addedAtMs": i.added_at_ms,
        "usedBy": i.used_by,
        "env": i.env,
        "workingDir": i.working_dir,
        "cmd": i.cmd,
        "entrypoint": i.entrypoint,
    })
}

/// `sha256:` and the first 12 characters of the digest (a registry's word:
/// escaped).
fn short(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let head: String = hex.chars().take(12).collect();
    format!("sha256:{}", escape(&head))
}

fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}
