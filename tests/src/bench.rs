//! What the benches share: their knobs from the environment and a timed
//! run of a command that must succeed. Nothing here asserts a timing.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variable `name` parsed, else `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `cmd` (stdin closed) to completion, panicking with its stderr if
/// it fails; how long it took and its stdout.
pub fn timed(cmd: &mut Command) -> (Duration, String) {
    cmd.stdin(Stdio::null());
    let t = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let took = t.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (took, String::from_utf8_lossy(&out.stdout).into_owned())
}
