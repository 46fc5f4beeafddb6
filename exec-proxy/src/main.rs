//! The `harness-box-exec` binary: flags, logging to a stderr that never
//! blocks, the runtime; the proxy itself is the library (`lib.rs`).

use std::process::ExitCode;
use std::time::Duration;

use boxd_client::stderr::Sink;
use boxd_client::stdio;
use clap::Parser;
use harness_box_exec::{Args, login, run};

fn main() -> ExitCode {
    // First, while this is the only thread: no loader variable reaches
    // anything this process starts, and a terminal login's arguments and
    // environment (as the rewritten auth method had the editor set them)
    // go to the command in the box.
    let carried = login::scrub();
    let mut args = Args::parse();
    args.command.extend(carried.args);
    args.env.splice(0..0, carried.env);
    let sink = Sink::global();
    init_logging(&args, sink.clone());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            sink.flush(Duration::from_millis(500));
            return ExitCode::from(stdio::EXEC_FAILED);
        }
    };
    let code = match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e}");
            stdio::EXEC_FAILED
        }
    };
    // A write to a client that stopped reading must not hold the exit.
    runtime.shutdown_timeout(Duration::from_millis(200));
    sink.flush(Duration::from_millis(500));
    ExitCode::from(code)
}

fn init_logging(args: &Args, sink: Sink) {
    let level = if args.quiet {
        "error"
    } else if args.verbose {
        "debug"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
            "harness_box_exec={level}"
        )))
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .init();
}
