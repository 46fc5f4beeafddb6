//! The host processes a daemon keeps for its boxes, and what they cost:
//! read from `/proc`, for the tests of a box's footprint and the benches.

use std::path::Path;

/// A process's parent, from `/proc/PID/stat`.
fn parent(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name (the state is
/// the first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
    )
}

/// Every process below the box supervisors of the daemon whose home is
/// `home` (a supervisor's stderr is its box's `supervisor.log` there), the
/// supervisors included.
pub fn box_processes(home: &Path) -> Vec<u32> {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let boxes = home.join("boxes");
    let mut found: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/fd/2")).is_ok_and(|l| l.starts_with(&boxes))
                && std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.windows(11).any(|w| w == b"__supervise"))
        })
        .collect();
    loop {
        let more: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| !found.contains(p) && parent(*p).is_some_and(|pp| found.contains(&pp)))
            .collect();
        if more.is_empty() {
            return found;
        }
        found.extend(more);
    }
}

/// CPU seconds (user and system) these processes used so far, with their
/// children's that they reaped.
pub fn cpu_seconds(pids: &[u32]) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks: u64 = pids
        .iter()
        .filter_map(|p| stat_fields(*p))
        // utime, stime, cutime, cstime: fields 14 to 17 of stat.
        .map(|f| {
            f[11..15]
                .iter()
                .filter_map(|t| t.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum();
    ticks as f64 / hz
}

/// CPU seconds this process's reaped children used so far.
pub fn children_cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_CHILDREN)
}

/// CPU seconds the calling thread used so far.
pub fn thread_cpu_seconds() -> f64 {
    rusage_seconds(libc::RUSAGE_THREAD)
}

fn rusage_seconds(who: i32) -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}
