//! `boxd`: the per-user box daemon. See docs/ARCHITECTURE.md for the map.

mod doctor;
mod engine;
mod error;
mod execs;
mod image;
mod listener;
mod lock;
mod logging;
mod registry;
mod service;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use boxd_client::Paths;
use boxd_proto::tonic::{service::interceptor::InterceptedService, transport::Server};
use boxd_proto::v1::boxd_server::BoxdServer;
use clap::{Parser, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::engine::Engine;

#[derive(Parser, Debug)]
#[command(
    name = "boxd",
    version,
    about = "The per-user box daemon: serves named boxes over gRPC on a Unix socket"
)]
struct Cli {
    /// The Unix socket to listen on [default: $XDG_RUNTIME_DIR/boxd/boxd.sock].
    #[arg(long, env = "BOXD_SOCKET")]
    socket: Option<PathBuf>,
    /// The state directory: boxes, images, logs [default: $XDG_DATA_HOME/boxd].
    #[arg(long, env = "BOXD_HOME")]
    home: Option<PathBuf>,
    /// Which engine runs boxes.
    #[arg(long, env = "BOXD_ENGINE", value_enum, default_value_t = EngineChoice::Auto)]
    engine: EngineChoice,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Check what this host can run and what is missing (boots nothing).
    Doctor {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum EngineChoice {
    /// The best engine this host can run.
    Auto,
    /// Linux namespaces under bubblewrap.
    Namespace,
    /// BoxLite microVMs.
    Boxlite,
}

fn main() -> ExitCode {
    let mut argv = std::env::args_os();
    if argv.nth(1).as_deref() == Some(std::ffi::OsStr::new(engine::namespace::nsexec::HELPER_ARG)) {
        // Must run before any thread exists: it joins a user namespace.
        engine::namespace::nsexec::helper_main(argv.collect());
    }
    // SAFETY: no other thread exists yet.
    unsafe { engine::boxlite::runtime_dir::export() };
    let cli = Cli::parse();
    if let Some(Sub::Doctor { json }) = cli.command {
        let paths = match Paths::resolve(cli.socket, cli.home) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("boxd: {e}");
                return ExitCode::from(2);
            }
        };
        return ExitCode::from(doctor::report(&doctor::run(&paths), json));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("boxd: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("boxd: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let paths = Paths::resolve(cli.socket, cli.home).map_err(|e| e.to_string())?;
    // Everything the daemon writes is private to its user.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o077) };
    std::fs::create_dir_all(&paths.home)
        .map_err(|e| format!("create {}: {e}", paths.home.display()))?;
    let _log_guard = logging::init(&paths.home.join("logs"));
    let _lock = lock::HomeLock::acquire(&paths.home).map_err(|e| e.to_string())?;

    let engine = select_engine(cli.engine, &paths)?;
    let info = engine.info();
    tracing::info!(engine = info.name, version = %info.version, isolation = info.isolation.as_str(), "engine ready");
    let registry = Arc::new(
        registry::Registry::open(paths.home.join("boxes"), engine)
            .await
            .map_err(|e| e.to_string())?,
    );
    let execs = execs::Execs::new(registry.clone());
    let listener = listener::bind(&paths.socket)
        .await
        .map_err(|e| e.to_string())?;
    let shutdown = CancellationToken::new();

    let service = service::Service {
        registry: registry.clone(),
        execs: execs.clone(),
        home: paths.home.clone(),
        socket: paths.socket.clone(),
        shutdown: shutdown.clone(),
    };
    let api = BoxdServer::new(service)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20);
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    let stop_serving = shutdown.clone();
    let mut server = tokio::spawn(
        Server::builder()
            .initial_stream_window_size(boxd_client::STREAM_WINDOW)
            .initial_connection_window_size(boxd_client::CONNECTION_WINDOW)
            .add_service(InterceptedService::new(api, listener::check_peer))
            .serve_with_incoming_shutdown(incoming, async move { stop_serving.cancelled().await }),
    );
    tracing::info!(socket = %paths.socket.display(), home = %paths.home.display(), pid = std::process::id(), "boxd is serving");

    let reason = tokio::select! {
        r = wait_for_signal() => r,
        r = &mut server => format!("the server stopped: {r:?}"),
    };
    tracing::info!(%reason, "shutting down");
    shutdown.cancel();
    execs.kill_all();
    if tokio::time::timeout(Duration::from_secs(3), registry.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("boxes did not stop within 3 s");
    }
    // Open streams can hold a graceful shutdown forever (tonic#1820); bound it.
    if tokio::time::timeout(Duration::from_secs(1), &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    let _ = std::fs::remove_file(&paths.socket);
    tracing::info!("boxd stopped");
    Ok(())
}

/// `auto`: BoxLite where the preflight says a VM can boot (and its runtime
/// opens), the namespace engine otherwise, saying why.
fn select_engine(choice: EngineChoice, paths: &Paths) -> Result<Arc<dyn Engine>, String> {
    let namespace = |why: Option<String>| -> Result<Arc<dyn Engine>, String> {
        let engine =
            engine::namespace::NamespaceEngine::new(&paths.home).map_err(|e| e.to_string())?;
        Ok(Arc::new(match why {
            Some(reason) => engine.chosen_because(reason),
            None => engine,
        }))
    };
    let boxlite = || engine::boxlite::BoxliteEngine::new(&paths.home).map_err(|e| e.to_string());
    match choice {
        EngineChoice::Namespace => namespace(None),
        EngineChoice::Boxlite => Ok(Arc::new(boxlite()?)),
        EngineChoice::Auto => {
            let verdict = engine::boxlite::preflight();
            if !verdict.can_boot {
                tracing::warn!(reason = %verdict.reason, "microVMs cannot boot here; using the namespace engine");
                return namespace(Some(format!(
                    "microVMs cannot boot here ({})",
                    verdict.reason
                )));
            }
            match boxlite() {
                Ok(engine) => Ok(Arc::new(engine)),
                Err(e) => {
                    tracing::warn!(error = %e, "the BoxLite engine did not open; using the namespace engine");
                    namespace(Some(format!("the BoxLite engine did not open ({e})")))
                }
            }
        }
    }
}

async fn wait_for_signal() -> String {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        std::future::pending::<()>().await;
        unreachable!()
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM".into(),
        _ = int.recv() => "SIGINT".into(),
    }
}
