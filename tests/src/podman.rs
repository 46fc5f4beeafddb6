//! Podman for the benches that compare with it (`lifecycle`, `cp`):
//! rootful when we are root, `--runtime runc` by default, with its own
//! `containers.conf` and storage under a temporary directory, so nothing
//! of the user's podman is read or written.

use std::path::Path;
use std::process::{Command, Stdio};

/// Podman with a configuration and storage of its own under a temporary
/// directory, removed at the end (`podman system reset`, then the files).
pub struct Podman {
    dir: tempfile::TempDir,
    pub version: String,
    pub runtime: String,
    pub runtime_version: String,
    pub driver: String,
    pub cgroups: String,
    pub cgroup_manager: String,
}

impl Podman {
    pub fn setup() -> Result<Podman, String> {
        for tool in ["podman", "skopeo"] {
            match Command::new(tool).arg("--version").output() {
                Ok(o) if o.status.success() => {}
                _ => {
                    return Err(format!(
                        "`{tool}` is not installed (scripts/install-bench-deps.sh installs it)"
                    ));
                }
            }
        }
        let runtime = std::env::var("BENCH_PODMAN_RUNTIME").unwrap_or_else(|_| "runc".into());
        let driver = std::env::var("BENCH_PODMAN_DRIVER").unwrap_or_else(|_| "overlay".into());
        let dir = tempfile::Builder::new()
            .prefix("boxd-bench-podman-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("temporary directory: {e}"))?;
        let p = dir.path();
        // Podman (as root) asks the runtime for nofile=1048576 and
        // nproc=4194304 by default; raising a hard limit needs
        // CAP_SYS_RESOURCE, which a container or sandbox may lack, so ask
        // for the limits boxd's boxes get: this process's own (podman
        // caps its own nproc at 32768, and the runtime inherits that).
        let (nofile, nproc) = (
            hard_limit(libc::RLIMIT_NOFILE),
            hard_limit(libc::RLIMIT_NPROC),
        );
        let nproc = nproc.min(32768);
        let conf = format!(
            "[containers]\n\
             default_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
             [engine]\n\
             cgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n\
             events_logfile_path = \"{p}/events.log\"\n\
             runtime = \"{runtime}\"\n\
             tmp_dir = \"{p}/tmp\"\n\
             image_copy_tmp_dir = \"{p}/tmp\"\n\
             [network]\n\
             network_config_dir = \"{p}/net\"\n",
            p = p.display()
        );
        let storage = format!(
            "[storage]\n\
             driver = \"{driver}\"\n\
             graphroot = \"{p}/root\"\n\
             runroot = \"{p}/run\"\n",
            p = p.display()
        );
        std::fs::write(p.join("containers.conf"), conf).map_err(|e| e.to_string())?;
        std::fs::write(p.join("storage.conf"), storage).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(p.join("tmp")).map_err(|e| e.to_string())?;
        let mut podman = Podman {
            dir,
            version: String::new(),
            runtime,
            runtime_version: String::new(),
            driver: String::new(),
            cgroups: String::new(),
            cgroup_manager: String::new(),
        };
        let info = podman
            .try_cmd(&[
                "info",
                "--format",
                "{{.Version.Version}}|{{.Host.OCIRuntime.Name}}|{{.Host.OCIRuntime.Version}}|\
                 {{.Store.GraphDriverName}}|{{.Host.CgroupsVersion}}|{{.Host.CgroupManager}}",
            ])
            .map_err(|e| format!("`podman info` fails here: {e}"))?;
        let f: Vec<&str> = info.trim().split('|').collect();
        if f.len() == 6 {
            podman.version = f[0].into();
            podman.runtime = f[1].into();
            // "runc version 1.1.5+ds1\ncommit: …": the first line.
            podman.runtime_version = f[2].lines().next().unwrap_or("").into();
            podman.driver = f[3].into();
            podman.cgroups = f[4].into();
            podman.cgroup_manager = f[5].into();
        }
        Ok(podman)
    }

    /// Its storage, configuration and temporary files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn cmd(&self) -> Command {
        let p = self.dir.path();
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", p.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", p.join("storage.conf"))
            .stdin(Stdio::null());
        cmd
    }

    /// Starts container `name` of `reference`, detached and with no
    /// network, its init a long `sleep`.
    pub fn run_sleeping(&self, name: &str, reference: &str) -> Result<String, String> {
        self.try_cmd(&[
            "run",
            "-d",
            "--pull",
            "never",
            "--network",
            "none",
            "--name",
            name,
            reference,
            "sleep",
            "1000000",
        ])
    }

    pub fn try_cmd(&self, args: &[&str]) -> Result<String, String> {
        let out = self.cmd().args(args).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Copies the image's OCI layout into podman's storage (untimed) and
    /// checks that a container of it runs; returns its reference.
    pub fn load(&self, label: &str, layout: &Path) -> Result<String, String> {
        let reference = format!("localhost/boxd-bench-{label}:latest");
        let p = self.dir.path();
        let out = Command::new("skopeo")
            .env("CONTAINERS_STORAGE_CONF", p.join("storage.conf"))
            .env("TMPDIR", p.join("tmp"))
            .args(["copy", "--quiet"])
            .arg(format!("oci:{}", layout.display()))
            .arg(format!("containers-storage:{reference}"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("skopeo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "skopeo copy of {} failed: {}",
                layout.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        self.try_cmd(&[
            "run",
            "--rm",
            "--pull",
            "never",
            "--network",
            "none",
            &reference,
            "true",
        ])
        .map_err(|e| format!("`podman run --rm {reference} true` fails here: {e}"))?;
        Ok(reference)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Containers, images, storage and its mounts; the temporary
        // directory then removes the configuration and the event log.
        let _ = self
            .cmd()
            .args(["rm", "--all", "--force", "-t", "0"])
            .output();
        let _ = self.cmd().args(["system", "reset", "--force"]).output();
        // What a reset that failed (podman half-working) left mounted
        // (the overlay driver bind-mounts its own directory), deepest
        // first, so that the directory can be removed.
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .map(unescape_mountinfo)
            .filter(|m| Path::new(m).starts_with(self.dir.path()))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            if let Ok(c) = std::ffi::CString::new(m) {
                // SAFETY: a valid C string; umount2 has no other preconditions.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

/// A mount point as `/proc/self/mountinfo` writes it: space, tab, newline
/// and backslash as `\NNN` octal.
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hard_limit(resource: libc::__rlimit_resource_t) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 {
        return 1024;
    }
    r.rlim_max
}
