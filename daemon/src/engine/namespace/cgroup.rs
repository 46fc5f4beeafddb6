//! Per-box limits on processes, memory and cpu, with cgroups where the
//! host lets boxd make them.
//!
//! - **cgroup v2** (one hierarchy): boxd needs a subtree of its own
//!   (systemd's `Delegate=yes`, which `boxctl daemon install` asks for;
//!   or root). boxd moves itself into `CG/daemon` (a cgroup with
//!   processes may not have children with controllers), enables `pids`,
//!   `memory` and `cpu` for `CG`'s children and makes `CG/box-ID` per box.
//! - **cgroup v1** (one hierarchy per controller, as on hybrid hosts):
//!   where the `pids`, `memory` and `cpu` hierarchies are writable (root),
//!   `CONTROLLER/OWN-PATH/boxd/ID` per box.
//! - **neither**: no cgroup; the process limit falls back to
//!   `RLIMIT_NPROC` in the box's user namespace (per box uid), memory and
//!   cpu are not enforced, and `Describe`, `doctor` and create replies say
//!   so.
//!
//! A box's boot helper joins its cgroups before it maps its user
//! namespace (so bubblewrap and everything in the box start inside), and
//! every exec helper joins them before it enters the box.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What a box may use. `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub pids: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub cpus: Option<f64>,
}

/// Where boxd makes boxes' cgroups.
#[derive(Debug, Clone)]
pub enum Cgroups {
    V2 {
        /// boxd's own cgroup directory; boxes are `box-ID` in it.
        base: PathBuf,
        /// The controllers enabled for boxes (of pids, memory, cpu).
        controllers: Vec<&'static str>,
    },
    V1 {
        /// `(controller, directory for boxes)`, for the writable ones.
        bases: Vec<(&'static str, PathBuf)>,
    },
    /// Not available, and why.
    None(String),
}

/// Counters of a box's cgroups; `None` where no cgroup of the box counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    pub cpu_usec: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u32>,
}

/// A box's cgroups.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct BoxCgroup {
    /// Every directory the box's processes belong to.
    pub dirs: Vec<PathBuf>,
    /// The memory controller's directory, and whether it is v2.
    memory: Option<(PathBuf, bool)>,
}

const CONTROLLERS: [&str; 3] = ["pids", "memory", "cpu"];
const CPU_PERIOD: u64 = 100_000;

impl Cgroups {
    /// Finds out what this host lets boxd do; makes boxd's own v2 layout.
    pub fn detect() -> Cgroups {
        Cgroups::find(true)
    }

    /// What [`Cgroups::detect`] would find, changing nothing (for `doctor`).
    pub fn inspect() -> Cgroups {
        Cgroups::find(false)
    }

    fn find(set_up: bool) -> Cgroups {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if let Some(root) = v2_mount(&mounts) {
            let path = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("/");
            let has_v1 = v1_mounts(&mounts)
                .iter()
                .any(|(c, _)| CONTROLLERS.contains(c));
            if !has_v1 {
                let own = root.join(path.trim_start_matches('/'));
                if !set_up {
                    let writable = nix::unistd::access(
                        &own.join("cgroup.subtree_control"),
                        nix::unistd::AccessFlags::W_OK,
                    );
                    return match writable {
                        Ok(()) => Cgroups::V2 {
                            base: own,
                            controllers: CONTROLLERS.to_vec(),
                        },
                        Err(e) => Cgroups::None(format!(
                            "boxd may not make cgroups under {} ({e}; a systemd service needs Delegate=yes)",
                            own.display()
                        )),
                    };
                }
                return match setup_v2(&own) {
                    Ok((base, controllers)) => Cgroups::V2 { base, controllers },
                    Err(why) => Cgroups::None(why),
                };
            }
        }
        let mut bases = Vec::new();
        let mut why = Vec::new();
        for (controller, mount) in v1_mounts(&mounts) {
            if !CONTROLLERS.contains(&controller) || bases.iter().any(|(c, _)| *c == controller) {
                continue;
            }
            let path = own
                .lines()
                .filter_map(|l| {
                    let mut parts = l.splitn(3, ':');
                    let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                    list.split(',').any(|c| c == controller).then_some(path)
                })
                .next()
                .unwrap_or("/");
            let base = mount.join(path.trim_start_matches('/')).join("boxd");
            // Writable here means a box's group can be made in it.
            let probe = base.join(format!("probe-{}", std::process::id()));
            let made = if set_up {
                std::fs::create_dir_all(&base)
                    .and_then(|()| std::fs::create_dir(&probe))
                    .and_then(|()| std::fs::remove_dir(&probe))
            } else {
                let at = if base.exists() {
                    base.clone()
                } else {
                    mount.join(path.trim_start_matches('/'))
                };
                nix::unistd::access(&at, nix::unistd::AccessFlags::W_OK)
                    .map_err(std::io::Error::from)
            };
            match made {
                Ok(()) => bases.push((controller, base)),
                Err(e) => why.push(format!("{}: {e}", base.display())),
            }
        }
        if bases.is_empty() {
            let why = if why.is_empty() {
                "no cgroup hierarchy with the pids, memory or cpu controller is mounted".into()
            } else {
                format!("boxd may not make cgroups ({})", why.join("; "))
            };
            return Cgroups::None(why);
        }
        Cgroups::V1 { bases }
    }

    /// What is enforced, for `Describe` and `doctor`.
    pub fn describe(&self) -> String {
        match self {
            Cgroups::V2 { base, controllers } => format!(
                "{} limits are enforced with cgroup v2 under {}",
                controllers.join(", "),
                base.display()
            ),
            Cgroups::V1 { bases } => format!(
                "{} limits are enforced with cgroup v1 ({})",
                bases.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", "),
                bases
                    .iter()
                    .map(|(_, b)| b.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Cgroups::None(why) => format!(
                "no cgroups ({why}): the process limit is RLIMIT_NPROC per box uid; memory and cpu are not enforced"
            ),
        }
    }

    /// Whether `controller` limits are enforced.
    pub fn enforces(&self, controller: &str) -> bool {
        match self {
            Cgroups::V2 { controllers, .. } => controllers.contains(&controller),
            Cgroups::V1 { bases } => bases.iter().any(|(c, _)| *c == controller),
            Cgroups::None(_) => false,
        }
    }

    /// Makes (or empties and reuses) the cgroups of box `id` with `limits`.
    pub fn create(&self, id: &str, limits: &Limits) -> Result<BoxCgroup> {
        let io = |what: &str, p: &Path, e: std::io::Error| {
            Error::Engine(format!("{what} {}: {e}", p.display()))
        };
        let write = |p: PathBuf, v: String| {
            std::fs::write(&p, &v).map_err(|e| io(&format!("write {v:?} to"), &p, e))
        };
        let mut out = BoxCgroup::default();
        match self {
            Cgroups::None(_) => {}
            Cgroups::V2 { base, controllers } => {
                let dir = base.join(format!("box-{id}"));
                make_dir(&dir).map_err(|e| io("create", &dir, e))?;
                let has = |c: &str| controllers.contains(&c);
                if let (Some(n), true) = (limits.pids, has("pids")) {
                    write(dir.join("pids.max"), n.to_string())?;
                }
                if let (Some(b), true) = (limits.memory_bytes, has("memory")) {
                    write(dir.join("memory.max"), b.to_string())?;
                    // No swapping past the limit either, where swap exists.
                    let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                }
                if let (Some(c), true) = (limits.cpus, has("cpu")) {
                    let quota = (c * CPU_PERIOD as f64).round().max(1000.0) as u64;
                    write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD}"))?;
                }
                if has("memory") {
                    out.memory = Some((dir.clone(), true));
                }
                out.dirs.push(dir);
            }
            Cgroups::V1 { bases } => {
                for (controller, base) in bases {
                    let dir = base.join(id);
                    make_dir(&dir).map_err(|e| io("create", &dir, e))?;
                    match *controller {
                        "pids" => {
                            let v = limits.pids.map_or("max".into(), |n| n.to_string());
                            write(dir.join("pids.max"), v)?;
                        }
                        "memory" => {
                            let v = limits.memory_bytes.map_or("-1".into(), |b| b.to_string());
                            write(dir.join("memory.limit_in_bytes"), v)?;
                            out.memory = Some((dir.clone(), false));
                        }
                        "cpu" => {
                            let quota = limits
                                .cpus
                                .map_or(-1, |c| (c * CPU_PERIOD as f64).round().max(1000.0) as i64);
                            write(dir.join("cpu.cfs_period_us"), CPU_PERIOD.to_string())?;
                            write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
                        }
                        _ => {}
                    }
                    out.dirs.push(dir);
                }
            }
        }
        Ok(out)
    }
}

impl BoxCgroup {
    /// Moves process `pid` (and, on v2, all its threads) into the box's
    /// cgroups.
    pub fn attach(&self, pid: i32) -> Result<()> {
        for dir in &self.dirs {
            let procs = dir.join("cgroup.procs");
            std::fs::write(&procs, pid.to_string()).map_err(|e| {
                Error::Engine(format!("join the box's cgroup {}: {e}", procs.display()))
            })?;
        }
        Ok(())
    }

    /// How many times the kernel killed a process of the box for memory.
    pub fn oom_kills(&self) -> u64 {
        let Some((dir, v2)) = &self.memory else {
            return 0;
        };
        let file = if *v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0)
    }

    /// What the box's cgroups count, where they count it: CPU time (v2
    /// only: v1's is cpuacct, which boxd does not use), memory in use
    /// (less inactive file cache, as `docker stats` shows it) and
    /// processes.
    pub fn usage(&self) -> CgroupUsage {
        let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).ok();
        let stat = |text: Option<String>, key: &str| -> Option<u64> {
            text?.lines().find_map(|l| {
                let (k, v) = l.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
        };
        let mut usage = CgroupUsage::default();
        for dir in &self.dirs {
            if let Some(n) = read(dir, "pids.current").and_then(|t| t.trim().parse().ok()) {
                usage.pids = Some(n);
            }
            if dir.join("cgroup.controllers").exists() {
                usage.cpu_usec = stat(read(dir, "cpu.stat"), "usage_usec");
            }
        }
        if let Some((dir, v2)) = &self.memory {
            let (current, inactive) = match v2 {
                true => ("memory.current", "inactive_file"),
                false => ("memory.usage_in_bytes", "total_inactive_file"),
            };
            if let Some(used) = read(dir, current).and_then(|t| t.trim().parse::<u64>().ok()) {
                let cache = stat(read(dir, "memory.stat"), inactive).unwrap_or(0);
                usage.memory_bytes = Some(used.saturating_sub(cache));
            }
        }
        usage
    }

    /// Removes the box's cgroups once its processes are gone (best effort:
    /// a directory still in use stays, and is reused at the next start).
    pub fn remove(&self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A cgroup directory, made if missing.
fn make_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Where the cgroup v2 hierarchy is mounted, if it is.
fn v2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next()? == "cgroup2").then(|| PathBuf::from(point))
    })
}

/// The v1 hierarchies: (controller, mount point) for each controller.
fn v1_mounts(mountinfo: &str) -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    for l in mountinfo.lines() {
        let Some((left, right)) = l.split_once(" - ") else {
            continue;
        };
        let mut r = right.split_whitespace();
        if r.next() != Some("cgroup") {
            continue;
        }
        let (Some(_source), Some(options)) = (r.next(), r.next()) else {
            continue;
        };
        let Some(point) = left.split_whitespace().nth(4) else {
            continue;
        };
        for c in CONTROLLERS {
            if options.split(',').any(|o| o == c) {
                out.push((c, PathBuf::from(point)));
            }
        }
    }
    out
}

/// Makes boxd's own v2 cgroup `own` a parent of box cgroups: boxd moves
/// into `own/daemon`, and whichever of pids, memory and cpu are delegated
/// to `own` are enabled for its children.
fn setup_v2(own: &Path) -> std::result::Result<(PathBuf, Vec<&'static str>), String> {
    let available = std::fs::read_to_string(own.join("cgroup.controllers")).map_err(|e| {
        format!(
            "cannot read {}: {e}",
            own.join("cgroup.controllers").display()
        )
    })?;
    let controllers: Vec<&'static str> = CONTROLLERS
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .collect();
    if controllers.is_empty() {
        return Err(format!(
            "no pids, memory or cpu controller is delegated to {} (a systemd service needs Delegate=yes)",
            own.display()
        ));
    }
    let daemon = own.join("daemon");
    make_dir(&daemon).map_err(|e| format!("cannot create {}: {e}", daemon.display()))?;
    std::fs::write(daemon.join("cgroup.procs"), std::process::id().to_string())
        .map_err(|e| format!("cannot move boxd into {}: {e}", daemon.display()))?;
    let enable: Vec<String> = controllers.iter().map(|c| format!("+{c}")).collect();
    std::fs::write(own.join("cgroup.subtree_control"), enable.join(" "))
        .map_err(|e| format!("cannot enable controllers in {}: {e}", own.display()))?;
    Ok((own.to_path_buf(), controllers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hierarchies_are_read_from_mountinfo() {
        let info = "\
30 25 0:26 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
33 25 0:29 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";
        let v1 = v1_mounts(info);
        assert!(v1.contains(&("pids", "/sys/fs/cgroup/pids".into())));
        assert!(v1.contains(&("cpu", "/sys/fs/cgroup/cpu,cpuacct".into())));
        assert!(v1.contains(&("memory", "/sys/fs/cgroup/memory".into())));
        assert_eq!(v2_mount(info), Some("/sys/fs/cgroup/unified".into()));
        assert_eq!(v2_mount("1 2 0:3 / /x rw - ext4 /dev/x rw\n"), None);
    }
}
