//! `boxd`: the per-user box daemon. See docs/ARCHITECTURE.md for the map.

use boxd::{
    activation, authority, config, discovery, doctor, engine, execs, intake, limits, listener,
    lock, logging, registry, service,
};

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use boxd::config::EngineChoice;
use boxd_proto::paths::Paths;
use boxd_proto::tonic::{service::interceptor::InterceptedService, transport::Server};
use boxd_proto::v1::boxd_server::BoxdServer;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use boxd::engine::Engine;

#[derive(Parser, Debug)]
#[command(
    name = "boxd",
    version,
    about = "The per-user box daemon: serves named boxes over gRPC on a Unix socket"
)]
struct Cli {
    /// The Unix socket to listen on (unless the service manager passes one)
    /// [default: $XDG_RUNTIME_DIR/boxd/boxd.sock].
    #[arg(long, env = "BOXD_SOCKET")]
    socket: Option<PathBuf>,
    /// The state directory: boxes, images, logs [default: $XDG_DATA_HOME/boxd].
    #[arg(long, env = "BOXD_HOME")]
    home: Option<PathBuf>,
    /// Which engine runs boxes [default: auto].
    #[arg(long, env = "BOXD_ENGINE", value_enum)]
    engine: Option<EngineChoice>,
    /// Exit after this many seconds with no client connected and no box
    /// running (0: never) [default: 0].
    #[arg(long, env = "BOXD_IDLE_EXIT", value_name = "SECS")]
    idle_exit: Option<u64>,
    /// The most boxes to hold at once; creates beyond it are refused
    /// (0: no limit) [default: 1000].
    #[arg(long, env = "BOXD_MAX_BOXES", value_name = "N")]
    max_boxes: Option<usize>,
    /// The most client connections served at once; one over it gets an
    /// error, and more are closed at once [default: 2048, at most three
    /// quarters of the open-file limit].
    #[arg(long, env = "BOXD_MAX_CONNECTIONS", value_name = "N")]
    max_connections: Option<usize>,
    /// The most one image may unpack to (bytes, or 512M, 32G...); an image
    /// or imported archive beyond it is refused (0: no limit) [default: 32G].
    #[arg(long, env = "BOXD_MAX_IMAGE_SIZE", value_name = "SIZE", value_parser = config::parse_size)]
    max_image_size: Option<u64>,
    /// Run boxes on the BoxLite REST server at this URL (`boxlite serve`,
    /// or a control plane) instead of on this host; implies `--engine
    /// boxlite`, and never falls back to local boxes.
    #[arg(long, env = "BOXD_BOXLITE_URL", value_name = "URL")]
    boxlite_url: Option<String>,
    /// The file whose first line is that server's API key [default: the
    /// environment's BOXD_BOXLITE_API_KEY, else no key].
    #[arg(long, env = "BOXD_BOXLITE_API_KEY_FILE", value_name = "PATH")]
    boxlite_api_key_file: Option<PathBuf>,
    /// The configuration file [default: $XDG_CONFIG_HOME/boxd/config.toml].
    #[arg(long, env = "BOXD_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the settings (flags, environment, file, defaults, merged) as
    /// TOML and exit.
    #[arg(long)]
    print_config: bool,
    #[command(subcommand)]
    command: Option<Sub>,
}

/// Flags and environment over the file over defaults.
fn settings(cli: &Cli) -> Result<config::Settings, String> {
    let (file, from) = config::load(cli.config.as_deref())?;
    let paths = Paths::resolve(
        cli.socket.clone().or(file.socket),
        cli.home.clone().or(file.home),
    )
    .map_err(|e| e.to_string())?;
    let engine = cli.engine.or(file.engine).unwrap_or(EngineChoice::Auto);
    let boxlite = file.boxlite.unwrap_or_default();
    let boxlite_url = cli.boxlite_url.clone().or(boxlite.url);
    if boxlite_url.is_some() && engine == EngineChoice::Namespace {
        return Err(
            "--boxlite-url runs boxes on a BoxLite server: it needs --engine boxlite (or auto), not namespace"
                .into(),
        );
    }
    Ok(config::Settings {
        socket: paths.socket,
        home: paths.home,
        engine,
        idle_exit: cli.idle_exit.or(file.idle_exit).unwrap_or(0),
        max_boxes: cli
            .max_boxes
            .or(file.max_boxes)
            .unwrap_or(config::DEFAULT_MAX_BOXES),
        max_connections: cli
            .max_connections
            .or(file.max_connections)
            .unwrap_or(listener::MAX_CONNECTIONS),
        max_image_size: cli
            .max_image_size
            .or(file.max_image_size.map(|s| s.0))
            .unwrap_or(config::DEFAULT_MAX_IMAGE_SIZE),
        boxlite_url,
        boxlite_api_key_file: cli.boxlite_api_key_file.clone().or(boxlite.api_key_file),
        config_file: from,
    })
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Check what this host can run and what is missing (boots nothing).
    Doctor {
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    // The helpers must run before any thread exists: they join a user
    // namespace.
    boxd::run_helper_mode();
    // SAFETY: no other thread exists yet.
    unsafe { engine::boxlite::runtime_dir::export() };
    let cli = Cli::parse();
    let settings = match settings(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("boxd: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.print_config {
        print!("{}", settings.to_toml());
        return ExitCode::SUCCESS;
    }
    if let Some(Sub::Doctor { json }) = cli.command {
        let paths = Paths {
            socket: settings.socket,
            home: settings.home,
            socket_is_default: false,
        };
        return ExitCode::from(doctor::report(&doctor::run(&paths), json));
    }
    // Before any thread exists: it edits the environment.
    let inherited = match activation::inherited() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("boxd: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Descriptors whoever started boxd left open are not boxd's to keep,
    // nor to hand to anything it starts: close them all but the socket.
    limits::close_inherited(inherited.as_ref().map(std::os::fd::AsRawFd::as_raw_fd));
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
    let result = runtime.block_on(run(settings, inherited));
    // Dropping the runtime would wait for every blocking task, however long
    // (an image being hashed or unpacked, a read that never returns):
    // image work was told to stop, and what has not stopped by now is
    // abandoned with the process.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("boxd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// After a burst of connections, the memory they took goes back to the
/// system (glibc keeps freed memory for reuse otherwise).
async fn give_back_memory(connections: Arc<listener::Connections>) {
    let mut peak = 0usize;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let open = connections.open();
        peak = peak.max(open);
        if peak >= 64 && open <= peak / 4 {
            peak = open;
            // SAFETY: malloc_trim has no preconditions.
            let _ = tokio::task::spawn_blocking(|| unsafe { libc::malloc_trim(0) }).await;
        }
    }
}

async fn run(
    settings: config::Settings,
    inherited: Option<std::os::unix::net::UnixListener>,
) -> Result<(), String> {
    let paths = Paths {
        socket: settings.socket.clone(),
        home: settings.home.clone(),
        socket_is_default: false,
    };
    // Everything the daemon writes is private to its user.
    // SAFETY: umask has no preconditions.
    unsafe { libc::umask(0o077) };
    std::fs::create_dir_all(&paths.home)
        .map_err(|e| format!("create {}: {e}", paths.home.display()))?;
    let _log_guard = logging::init(&paths.home.join("logs"));
    let _lock = lock::HomeLock::acquire(&paths.home, &paths.socket).map_err(|e| e.to_string())?;
    let open_files = limits::raise();
    tracing::debug!(open_files, "open-file limit");

    if nix::unistd::geteuid().is_root() {
        tracing::warn!(
            "boxd runs as root: boxes run as unprivileged host ids, never as host root, but run boxd as the user whose boxes they are where you can (boxctl doctor)"
        );
    }
    // Cancelled at shutdown; image work in blocking threads stops with it.
    let shutdown = CancellationToken::new();
    let limits = boxd::image::ImageLimits {
        max_size: settings.max_image_size,
        cancel: shutdown.child_token(),
    };
    let engine = match &settings.boxlite_url {
        Some(url) => {
            let remote = engine::boxlite::remote::Remote::new(
                url,
                settings.boxlite_api_key_file.as_deref(),
            )?;
            let engine = engine::boxlite::BoxliteEngine::remote(&paths.home, remote)
                .map_err(|e| e.to_string())?;
            match engine.reachable().await {
                Some(Err(why)) => {
                    tracing::warn!(%why, "the remote BoxLite runtime is not usable yet; boxd serves and tells clients (doctor, daemon status)")
                }
                Some(Ok(what)) => tracing::info!(%what, "remote BoxLite runtime"),
                None => {}
            }
            Arc::new(engine) as Arc<dyn Engine>
        }
        None => select_engine(settings.engine, &paths, limits).await?,
    };
    let info = engine.info();
    tracing::info!(engine = info.name, version = %info.version, isolation = info.isolation.as_str(), "engine ready");
    let registry = Arc::new(
        registry::Registry::open(paths.home.join("boxes"), engine, settings.max_boxes)
            .await
            .map_err(|e| e.to_string())?,
    );
    registry.watch_ended();
    let execs = execs::Execs::new(registry.clone());
    for (box_name, adopted) in registry.take_adopted() {
        execs.adopt(&box_name, adopted);
    }
    // A socket the service manager passed is its own: used as it is, never
    // removed.
    let activated = inherited.is_some();
    let listener = match inherited {
        Some(l) => {
            tokio::net::UnixListener::from_std(l).map_err(|e| format!("the passed socket: {e}"))?
        }
        None => listener::bind(&paths.socket)
            .await
            .map_err(|e| e.to_string())?,
    };
    let service = service::Service {
        registry: registry.clone(),
        execs: execs.clone(),
        home: paths.home.clone(),
        socket: paths.socket.clone(),
        shutdown: shutdown.clone(),
        protocol: service::Service::protocol(),
        isolation_warned: Default::default(),
    };
    let api = BoxdServer::new(service)
        .max_decoding_message_size(boxd_proto::wire::MAX_MESSAGE)
        .max_encoding_message_size(boxd_proto::wire::MAX_MESSAGE);
    let connections = Arc::new(listener::Connections::default());
    let max_connections = settings
        .max_connections
        .min((open_files as usize).saturating_mul(3) / 4)
        .max(1);
    let incoming = listener::tracked(listener, connections.clone(), max_connections);
    tokio::spawn(give_back_memory(connections.clone()));
    let stop_serving = shutdown.clone();
    let (health, health_service) = discovery::Health::serving().await;
    let reflection_v1 = discovery::reflection_v1()?;
    let reflection_v1alpha = discovery::reflection_v1alpha()?;
    let mut server = tokio::spawn(
        Server::builder()
            .initial_stream_window_size(boxd_proto::wire::STREAM_WINDOW)
            .initial_connection_window_size(boxd_proto::wire::CONNECTION_WINDOW)
            .max_frame_size(boxd_proto::wire::MAX_FRAME)
            // What one connection may make boxd hold (intake.rs). h2 takes a
            // header list smaller than its setting, the rewriter one up to
            // its bound: one more makes them take the same lists.
            .http2_max_header_list_size(authority::MAX_HEADER_LIST as u32 + 1)
            .max_concurrent_streams(intake::MAX_STREAMS)
            .add_service(intake::Bounded::new(InterceptedService::new(
                api,
                listener::check_peer,
            )))
            .add_service(intake::Bounded::new(InterceptedService::new(
                health_service,
                listener::check_peer,
            )))
            .add_service(intake::Bounded::new(InterceptedService::new(
                reflection_v1,
                listener::check_peer,
            )))
            .add_service(intake::Bounded::new(InterceptedService::new(
                reflection_v1alpha,
                listener::check_peer,
            )))
            .serve_with_incoming_shutdown(incoming, async move { stop_serving.cancelled().await }),
    );
    tracing::info!(socket = %paths.socket.display(), home = %paths.home.display(), pid = std::process::id(), activated, idle_exit = settings.idle_exit, "boxd is serving");
    activation::notify("READY=1");

    let idle = idle_exit(settings.idle_exit, connections, registry.clone());
    let reason = tokio::select! {
        r = wait_for_signal() => r,
        r = idle => r,
        r = &mut server => format!("the server stopped: {r:?}"),
    };
    tracing::info!(%reason, "shutting down");
    activation::notify("STOPPING=1");
    health.stopping().await;
    // Before the streams close: clients that lose this daemon come back to
    // the next, so their execs are not killed as abandoned.
    execs
        .stop(registry.engine().info().execs_outlive_daemon)
        .await;
    shutdown.cancel();
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
    if !activated {
        let _ = std::fs::remove_file(&paths.socket);
    }
    tracing::info!("boxd stopped");
    Ok(())
}

/// `auto`: BoxLite where the preflight says a VM can boot (and its runtime
/// opens), the namespace engine otherwise, saying why.
async fn select_engine(
    choice: EngineChoice,
    paths: &Paths,
    limits: boxd::image::ImageLimits,
) -> Result<Arc<dyn Engine>, String> {
    let namespace = async |why: Option<String>| -> Result<Arc<dyn Engine>, String> {
        let engine = engine::namespace::NamespaceEngine::new(&paths.home, limits.clone())
            .await
            .map_err(|e| e.to_string())?;
        let engine: Arc<dyn Engine> = Arc::new(match why {
            Some(reason) => engine.chosen_because(reason),
            None => engine,
        });
        Ok(engine)
    };
    let boxlite = || engine::boxlite::BoxliteEngine::new(&paths.home).map_err(|e| e.to_string());
    match choice {
        EngineChoice::Namespace => namespace(None).await,
        EngineChoice::Boxlite => Ok(Arc::new(boxlite()?)),
        EngineChoice::Auto => {
            let verdict = engine::boxlite::preflight();
            if !verdict.can_boot {
                tracing::warn!(reason = %verdict.reason, "microVMs cannot boot here; using the namespace engine");
                return namespace(Some(format!(
                    "microVMs cannot boot here ({})",
                    verdict.reason
                )))
                .await;
            }
            match boxlite() {
                Ok(engine) => Ok(Arc::new(engine)),
                Err(e) => {
                    tracing::warn!(error = %e, "the BoxLite engine did not open; using the namespace engine");
                    namespace(Some(format!("the BoxLite engine did not open ({e})"))).await
                }
            }
        }
    }
}

/// Resolves once the daemon has had no client connection and no running
/// box for `secs` seconds in a row; never when `secs` is 0.
async fn idle_exit(
    secs: u64,
    connections: Arc<listener::Connections>,
    registry: Arc<registry::Registry>,
) -> String {
    if secs == 0 {
        return std::future::pending().await;
    }
    let limit = Duration::from_secs(secs);
    let tick = Duration::from_millis(250).min(limit);
    let mut idle_since = std::time::Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let busy = connections.open() > 0
            || registry.list().await.iter().any(|r| {
                matches!(
                    r.state,
                    boxd::model::State::Starting
                        | boxd::model::State::Running
                        | boxd::model::State::Stopping
                )
            });
        if busy {
            idle_since = std::time::Instant::now();
        } else if idle_since.elapsed() >= limit {
            return format!("idle for {secs} s (no client, no running box)");
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
