//! `boxctl snapshot …`, `clone`, `export` and `import-box`: a box's files
//! kept by name, copied into a new box, or written to an archive.

use boxd_client::untrusted::escape;
use boxd_client::v1;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::output::{created, size};
use crate::{Ctx, Failure};

#[derive(Subcommand, Debug)]
pub enum Action {
    /// Keep the box's files (its writes over its image) as a snapshot.
    Create {
        /// The box.
        #[arg(value_name = "BOX", add = crate::complete::boxes())]
        box_name: String,
        /// The snapshot's name [default: the time now, UTC, as 20261201-063000].
        name: Option<String>,
    },
    /// List a box's snapshots.
    #[command(alias = "list")]
    Ls {
        /// The box.
        #[arg(value_name = "BOX", add = crate::complete::boxes())]
        box_name: String,
    },
    /// Put a stopped box's files back as the snapshot holds them.
    Restore {
        /// The box.
        #[arg(value_name = "BOX", add = crate::complete::boxes())]
        box_name: String,
        /// The snapshot.
        name: String,
    },
    /// Remove a snapshot.
    #[command(alias = "remove")]
    Rm {
        /// The box.
        #[arg(value_name = "BOX", add = crate::complete::boxes())]
        box_name: String,
        /// The snapshot.
        name: String,
    },
}

/// Unix ms as `2026-12-01 06:30:00` (UTC).
pub fn utc(ms: i64) -> String {
    let (y, m, d, hh, mm, ss) = civil(ms.div_euclid(1000));
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}")
}

/// Unix seconds → (year, month, day, hour, minute, second), UTC
/// (Howard Hinnant's `civil_from_days`).
fn civil(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

fn default_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (y, m, d, hh, mm, ss) = civil(secs);
    format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}")
}

fn snapshot_json(s: &v1::SnapshotInfo) -> Value {
    json!({
        "name": s.name,
        "box": s.box_name,
        "createdAtMs": s.created_at_ms,
        "sizeBytes": s.size_bytes,
    })
}

pub async fn snapshot(ctx: &Ctx, action: Action) -> Result<u8, Failure> {
    let mut c = ctx.client().await?;
    match action {
        Action::Create { box_name, name } => {
            let s = c
                .create_snapshot(v1::CreateSnapshotRequest {
                    box_name,
                    name: name.unwrap_or_else(default_name),
                })
                .await?
                .into_inner();
            if ctx.json {
                println!("{}", snapshot_json(&s));
            } else {
                println!(
                    "snapshot {} of box {} ({})",
                    escape(&s.name),
                    escape(&s.box_name),
                    size(s.size_bytes)
                );
            }
        }
        Action::Ls { box_name } => {
            let list = c
                .list_snapshots(v1::ListSnapshotsRequest { box_name })
                .await?
                .into_inner()
                .snapshots;
            if ctx.json {
                println!("{}", Value::Array(list.iter().map(snapshot_json).collect()));
            } else {
                println!("{:<32} {:<19} {:>7}", "NAME", "CREATED (UTC)", "SIZE");
                for s in &list {
                    println!(
                        "{:<32} {:<19} {:>7}",
                        escape(&s.name),
                        utc(s.created_at_ms),
                        size(s.size_bytes)
                    );
                }
            }
        }
        Action::Restore { box_name, name } => {
            c.restore_snapshot(v1::RestoreSnapshotRequest {
                box_name: box_name.clone(),
                name: name.clone(),
            })
            .await?;
            if ctx.json {
                println!("{}", json!({"restored": name, "box": box_name}));
            } else {
                println!(
                    "restored box {} to snapshot {}",
                    escape(&box_name),
                    escape(&name)
                );
            }
        }
        Action::Rm { box_name, name } => {
            c.remove_snapshot(v1::RemoveSnapshotRequest {
                box_name: box_name.clone(),
                name: name.clone(),
            })
            .await?;
            if ctx.json {
                println!("{}", json!({"removed": name, "box": box_name}));
            } else {
                println!(
                    "removed snapshot {} of box {}",
                    escape(&name),
                    escape(&box_name)
                );
            }
        }
    }
    Ok(0)
}

pub async fn clone(ctx: &Ctx, source: String, name: String) -> Result<u8, Failure> {
    let reply = ctx
        .client()
        .await?
        .clone_box(v1::CloneBoxRequest { source, name })
        .await?
        .into_inner();
    created(ctx, &reply.into());
    Ok(0)
}

fn absolute(path: &std::path::Path) -> Result<String, Failure> {
    std::path::absolute(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

pub async fn export(ctx: &Ctx, name: String, file: std::path::PathBuf) -> Result<u8, Failure> {
    let path = absolute(&file)?;
    let reply = ctx
        .client()
        .await?
        .export_box(v1::ExportBoxRequest {
            name: name.clone(),
            path: path.clone(),
        })
        .await?
        .into_inner();
    if ctx.json {
        println!(
            "{}",
            json!({"box": name, "path": path, "sizeBytes": reply.size_bytes})
        );
    } else {
        println!(
            "exported box {} to {} ({})",
            escape(&name),
            escape(&path),
            size(reply.size_bytes)
        );
    }
    Ok(0)
}

pub async fn import(
    ctx: &Ctx,
    file: std::path::PathBuf,
    name: String,
    allow_net: Vec<String>,
    publish: Vec<String>,
) -> Result<u8, Failure> {
    let ports = publish
        .iter()
        .map(|p| boxd_client::spec::parse_publish(p))
        .collect::<Result<Vec<_>, _>>()?;
    let reply = ctx
        .client()
        .await?
        .import_box(v1::ImportBoxRequest {
            path: absolute(&file)?,
            name,
            allow_net,
            ports,
        })
        .await?
        .into_inner();
    created(ctx, &reply.into());
    Ok(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_times_read_as_calendar_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_796_106_600_000), "2026-12-01 06:30:00");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00");
    }
}
