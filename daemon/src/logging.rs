//! Logs go to stderr and to `HOME/logs/boxd.log`; `RUST_LOG` filters both
//! (default `info`).

use std::path::Path;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

/// Installs the subscriber; keep the guard alive so the file is flushed.
pub fn init(dir: &Path) -> Option<WorkerGuard> {
    let filter = || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter());
    let (file, guard) = match std::fs::create_dir_all(dir) {
        Ok(()) => {
            let (writer, guard) =
                tracing_appender::non_blocking(tracing_appender::rolling::never(dir, "boxd.log"));
            (
                Some(
                    fmt::layer()
                        .with_ansi(false)
                        .with_writer(writer)
                        .with_filter(filter()),
                ),
                Some(guard),
            )
        }
        Err(_) => (None, None),
    };
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
    guard
}

use tracing_subscriber::Layer as _;
