//! What a running box uses, for `BoxStats`: its cgroups' counters where
//! boxd has them, else its processes' own from `/proc` (the box's pid 1
//! and its zygote, and everything below them).
//!
//! From `/proc`, CPU time is each process's user and system time plus its
//! reaped children's, so work of commands that already ended counts too;
//! memory is the processes' resident set.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::cgroup::BoxCgroup;

/// A box's use of the host, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub cpu_usec: u64,
    pub memory_bytes: u64,
    pub pids: u32,
    /// Bytes the box's egress proxy received from and sent to the network.
    pub net_rx_bytes: u64,
    pub net_tx_bytes: u64,
}

/// Measures the box whose process trees start at `roots` (host pids).
pub fn measure(cgroup: &BoxCgroup, roots: &[i32]) -> Usage {
    let counted = cgroup.usage();
    let procs = match (counted.cpu_usec, counted.memory_bytes, counted.pids) {
        (Some(_), Some(_), Some(_)) => ProcUsage::default(),
        _ => ProcUsage::of_trees(&read_proc(), roots),
    };
    Usage {
        cpu_usec: counted.cpu_usec.unwrap_or(procs.cpu_usec),
        memory_bytes: counted.memory_bytes.unwrap_or(procs.rss_bytes),
        pids: counted.pids.unwrap_or(procs.count),
        ..Usage::default()
    }
}

/// One process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: i32,
    ppid: i32,
    /// utime + stime + cutime + cstime, in clock ticks.
    ticks: u64,
    rss_pages: u64,
}

/// Parses a `/proc/PID/stat` line (the command name may hold spaces and
/// parentheses: fields are counted after its last `)`).
fn parse_stat(line: &str) -> Option<Stat> {
    let (head, tail) = line.rsplit_once(')')?;
    let pid = head.split_once(' ')?.0.trim().parse().ok()?;
    // tail: " S ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime stime cutime cstime priority nice threads itreal
    // starttime vsize rss ..."
    let f: Vec<&str> = tail.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Stat {
        pid,
        ppid: f.get(1)?.parse().ok()?,
        ticks: num(11)? + num(12)? + num(13)? + num(14)?,
        rss_pages: num(21)?,
    })
}

fn read_proc() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|line| parse_stat(&line))
        .collect()
}

#[derive(Debug, Default, PartialEq, Eq)]
struct ProcUsage {
    cpu_usec: u64,
    rss_bytes: u64,
    count: u32,
}

impl ProcUsage {
    /// Sums the processes of the trees rooted at `roots`.
    fn of_trees(all: &[Stat], roots: &[i32]) -> ProcUsage {
        let mut children: HashMap<i32, Vec<&Stat>> = HashMap::new();
        for s in all {
            children.entry(s.ppid).or_default().push(s);
        }
        let mut todo: Vec<&Stat> = all.iter().filter(|s| roots.contains(&s.pid)).collect();
        let (mut ticks, mut pages, mut count) = (0u64, 0u64, 0u32);
        let mut seen = std::collections::HashSet::new();
        while let Some(s) = todo.pop() {
            if !seen.insert(s.pid) {
                continue;
            }
            ticks += s.ticks;
            pages += s.rss_pages;
            count += 1;
            todo.extend(children.get(&s.pid).into_iter().flatten());
        }
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&n| n > 0)
            .unwrap_or(100) as u64;
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .filter(|&n| n > 0)
            .unwrap_or(4096) as u64;
        ProcUsage {
            cpu_usec: ticks * 1_000_000 / hz,
            rss_bytes: pages * page,
            count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_command_names() {
        let line = "4242 (a) b (c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 123 4096 300 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                pid: 4242,
                ppid: 17,
                ticks: 310,
                rss_pages: 300
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn trees_sum_their_processes_only() {
        let s = |pid, ppid, ticks, rss_pages| Stat {
            pid,
            ppid,
            ticks,
            rss_pages,
        };
        // 10 → 11 → 12, 20 → 21; 30 is elsewhere.
        let all = [
            s(10, 1, 1, 1),
            s(11, 10, 2, 2),
            s(12, 11, 4, 4),
            s(20, 1, 8, 8),
            s(21, 20, 16, 16),
            s(30, 1, 32, 32),
        ];
        let u = ProcUsage::of_trees(&all, &[10, 20]);
        assert_eq!(u.count, 5);
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .unwrap()
            .unwrap() as u64;
        assert_eq!(u.cpu_usec, 31 * 1_000_000 / hz);
        assert_eq!(ProcUsage::of_trees(&all, &[99]).count, 0);
    }

    #[test]
    fn this_process_is_measured() {
        let me = std::process::id() as i32;
        let u = measure(&BoxCgroup::default(), &[me]);
        assert!(u.pids >= 1, "{u:?}");
        assert!(u.memory_bytes > 0, "{u:?}");
    }
}
