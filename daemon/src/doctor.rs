//! `boxd doctor`: what this host can run and what is missing, each failing
//! line with its fix. `boxctl doctor` runs it and adds the live daemon's view.
//!
//! Every check is built here, from facts the engines expose (the BoxLite
//! preflight and runtime directory, the namespace engine's id map, overlay
//! probe and cgroups): doctor depends on the engines, never the reverse.

use crate::error::escaped as shown;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use boxd_proto::paths::Paths;

use crate::host_programs::find_on_path;

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    /// `ok`, `warn` or `fail`.
    pub status: &'static str,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: "ok",
            detail: detail.into(),
            fix: None,
        }
    }
    pub fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: "warn",
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            status: "fail",
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Runs every check. None of them boots anything or needs the daemon.
pub fn run(paths: &Paths) -> Vec<Check> {
    let mut checks = vec![privileges(), bwrap(), user_namespaces(), box_ids()];
    checks.extend(box_roots_and_limits());
    checks.push(apparmor());
    checks.extend(engine());
    checks.push(tool("protoc", &["--version"], "needed only to build BoxLite (Debian: apt-get install protobuf-compiler; macOS: brew install protobuf)"));
    checks.push(socket(&paths.socket));
    checks.push(intercepted(&paths.home));
    checks
}

/// Which hosts boxd answers TLS for, per box: the hosts of each box's
/// secrets (read from the box records; values are never shown).
fn intercepted(home: &Path) -> Check {
    let mut boxes: Vec<String> = std::fs::read_dir(home.join("boxes"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let text = std::fs::read(entry.path().join("box.json")).ok()?;
            let record: crate::model::BoxRecord = serde_json::from_slice(&text).ok()?;
            let mut hosts: Vec<&str> = record
                .spec
                .secrets
                .iter()
                .flat_map(|s| s.hosts.iter().map(String::as_str))
                .collect();
            hosts.sort();
            hosts.dedup();
            (!hosts.is_empty()).then(|| format!("{}: {}", record.name, hosts.join(", ")))
        })
        .collect();
    boxes.sort();
    if boxes.is_empty() {
        Check::ok(
            "https interception",
            "no box has secrets: every HTTPS connection is a blind tunnel",
        )
    } else {
        Check::ok(
            "https interception",
            format!(
                "boxd answers TLS with each box's own CA for its secrets' hosts only ({})",
                boxes.join("; ")
            ),
        )
    }
}

/// Prints the checks; returns the exit code (1 when any check failed).
/// A detail quotes what host programs printed and paths from the
/// environment: printed with control characters escaped ([`shown`]);
/// JSON is escaped by serde.
pub fn report(checks: &[Check], json: bool) -> u8 {
    if json {
        println!("{}", serde_json::to_string(checks).unwrap_or_default());
    } else {
        for c in checks {
            println!("{:<5} {:<18} {}", c.status, c.name, shown(&c.detail));
            if let Some(fix) = &c.fix {
                println!("      {:<18} fix: {}", "", shown(fix));
            }
        }
    }
    u8::from(checks.iter().any(|c| c.status == "fail"))
}

fn first_line(out: &std::process::Output) -> String {
    let text = if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    };
    String::from_utf8_lossy(text)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_owned()
}

fn tool(name: &'static str, args: &[&str], fix: &str) -> Check {
    match find_on_path(name) {
        Some(p) => match Command::new(&p).args(args).output() {
            Ok(out) => Check::ok(name, format!("{} ({})", p.display(), first_line(&out))),
            Err(e) => Check::warn(name, format!("{} does not run: {e}", p.display()), fix),
        },
        None => Check::warn(name, "not found on PATH", fix),
    }
}

fn bwrap() -> Check {
    match find_on_path("bwrap")
        .or_else(|| Some(PathBuf::from("/usr/bin/bwrap")).filter(|p| p.is_file()))
    {
        Some(p) => {
            let version = Command::new(&p)
                .arg("--version")
                .output()
                .map(|o| first_line(&o))
                .unwrap_or_default();
            Check::ok("bwrap", format!("{} ({version})", p.display()))
        }
        None => Check::fail(
            "bwrap",
            "bubblewrap is not installed: the namespace engine cannot run",
            "apt-get install bubblewrap",
        ),
    }
}

fn user_namespaces() -> Check {
    let Some(bwrap) = find_on_path("bwrap") else {
        return Check::warn(
            "user namespaces",
            "not checked (no bwrap)",
            "apt-get install bubblewrap",
        );
    };
    let out = Command::new(bwrap)
        .args([
            "--unshare-user",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "true",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            Check::ok("user namespaces", "bubblewrap can create a sandbox")
        }
        Ok(o) => Check::fail(
            "user namespaces",
            format!("bubblewrap cannot create a sandbox: {}", first_line(&o)),
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or see the AppArmor line)",
        ),
        Err(e) => Check::fail(
            "user namespaces",
            format!("cannot run bwrap: {e}"),
            "reinstall bubblewrap",
        ),
    }
}

/// boxd as root works, with boxes on an unprivileged host range; it is
/// still a risk worth saying out loud.
fn privileges() -> Check {
    if !nix::unistd::geteuid().is_root() {
        return Check::ok("privileges", "boxd runs as an ordinary user");
    }
    Check::warn(
        "privileges",
        "boxd runs as root: boxes still run as unprivileged host ids (never host root), but a flaw in the kernel or bubblewrap would meet a root daemon",
        "run boxd as the user whose boxes they are (boxctl daemon install, as that user); give that user a subordinate id range for full boxes",
    )
}

/// Which host ids boxes get (see `engine/namespace/idmap.rs`).
#[cfg(target_os = "linux")]
fn box_ids() -> Check {
    use crate::engine::namespace::idmap::{IdMap, Writer};
    let ids = IdMap::detect();
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| nix::unistd::getuid().to_string());
    if let Writer::NewIdMap { newuidmap, .. } = &ids.writer {
        let setuid = std::fs::metadata(newuidmap)
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::mode(&m) & 0o4000 != 0);
        if !setuid {
            return Check::warn(
                "box ids",
                format!("{} is not setuid: boxes get one id", newuidmap.display()),
                "reinstall uidmap (apt-get install --reinstall uidmap)",
            );
        }
    }
    if ids.is_range() && ids.slots > 1 {
        let (uid, _) = ids.root();
        return Check::ok(
            "box ids",
            format!(
                "each box has 65,536 host ids of its own (a pool of {} ranges from {}; the first, from uid {uid}, owns the images)",
                ids.slots - 1,
                ids.source
            ),
        );
    }
    if ids.is_range() && ids.writer == Writer::Direct {
        let (uid, _) = ids.root();
        return Check::warn(
            "box ids",
            format!(
                "every box shares the 65,536 ids from {}; box root is host uid {uid}: a set-id file one box leaves on the host makes its runner a member of every box",
                ids.source
            ),
            "give root at least 131072 ids: root:1879048192:268435456 in /etc/subuid and /etc/subgid, or remove root's entry to use boxd's built-in pool",
        );
    }
    if ids.is_range() {
        let (uid, _) = ids.root();
        return Check::ok(
            "box ids",
            format!(
                "65,536 ids from {}; box root is host uid {uid} (you). Every box of yours shares these ids: a box needs all 65,536 (nobody is 65534), so a range of 65,536 cannot be split among boxes, and only root may hand out ids that are not yours; boxes cannot leave set-id files in mounts, so a box's ids reach no one on the host",
                ids.source
            ),
        );
    }
    Check::warn(
        "box ids",
        format!(
            "each box gets one id ({}): apt-get, su, chown and setgroups fail in boxes",
            ids.source
        ),
        format!(
            "apt-get install uidmap; sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}"
        ),
    )
}

/// Whether boxes can be copy-on-write overlays here (the engine's own
/// probe, in a temporary directory), and which limits are enforced.
#[cfg(target_os = "linux")]
fn box_roots_and_limits() -> Vec<Check> {
    use crate::engine::namespace::{self, cgroup::Cgroups, idmap::IdMap};
    let ids = IdMap::detect();
    let privileged = nix::unistd::geteuid().is_root();
    let probe = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|dir| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            Ok(rt.block_on(namespace::overlays_mount(dir.path(), &ids, privileged)))
        });
    let roots = match probe {
        Ok(Ok(())) => Check::ok(
            "box roots",
            "copy-on-write overlays over one shared copy of each image",
        ),
        Ok(Err(why)) | Err(why) => Check::warn(
            "box roots",
            format!(
                "each box gets a full copy of its image: overlays cannot be mounted here ({why})"
            ),
            "a kernel with overlayfs (5.11 or later for an unprivileged boxd), and boxd's home on a local file system",
        ),
    };
    let limits = match Cgroups::inspect() {
        Cgroups::None(why) => Check::warn(
            "limits",
            format!(
                "no cgroups ({why}): a box's processes are limited by RLIMIT_NPROC only; memory and cpus are not enforced"
            ),
            "run boxd as a systemd user service (boxctl daemon install: Delegate=yes) on a cgroup v2 host",
        ),
        other => Check::ok("limits", other.describe()),
    };
    vec![roots, limits]
}

#[cfg(not(target_os = "linux"))]
fn box_roots_and_limits() -> Vec<Check> {
    Vec::new()
}

#[cfg(not(target_os = "linux"))]
fn box_ids() -> Check {
    Check::ok("box ids", "not used on this platform (microVMs)")
}

fn apparmor() -> Check {
    let knob = Path::new("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    match std::fs::read_to_string(knob) {
        Ok(v) if v.trim() == "1" => Check::warn(
            "apparmor userns",
            "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+)",
            "add an AppArmor profile allowing userns for bwrap, or sysctl kernel.apparmor_restrict_unprivileged_userns=0",
        ),
        Ok(_) => Check::ok(
            "apparmor userns",
            "unprivileged user namespaces are not restricted",
        ),
        Err(_) => Check::ok(
            "apparmor userns",
            "no AppArmor user-namespace restriction on this kernel",
        ),
    }
}

/// The engine lines of `boxd doctor`: the microVM verdict, the BoxLite
/// runtime files and their `mke2fs`.
fn engine() -> Vec<Check> {
    use crate::engine::boxlite;
    let verdict = boxlite::preflight();
    let mut checks = vec![if verdict.can_boot {
        Check::ok(
            "engine",
            format!(
                "microVMs can boot here: boxes run in BoxLite VMs ({})",
                verdict.reason
            ),
        )
    } else {
        Check::warn(
            "engine",
            format!(
                "boxes run in Linux namespaces here, not microVMs: {}",
                verdict.reason
            ),
            "none needed to run boxes; for microVM isolation use a host with hardware virtualization (KVM with vmx/svm, or Apple Silicon)",
        )
    }];
    let fetch = "scripts/boxlite-runtime.sh (or set BOXLITE_RUNTIME_DIR)";
    match boxlite::runtime_dir::find() {
        None => checks.push(Check::warn(
            "boxlite runtime",
            format!(
                "no complete BoxLite {} runtime in {:?}",
                ::boxlite::VERSION,
                boxlite::runtime_dir::candidates()
            ),
            fetch,
        )),
        Some(dir) => {
            checks.push(Check::ok(
                "boxlite runtime",
                format!(
                    "BoxLite {} runtime in {}",
                    ::boxlite::VERSION,
                    dir.display()
                ),
            ));
            let mke2fs = dir.join("mke2fs");
            let out = std::process::Command::new(&mke2fs).arg("-V").output();
            let text = out.map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            });
            checks.push(
                match text.as_deref().map(boxlite::runtime_dir::identify_mke2fs) {
                    Ok(Ok(version)) => Check::ok(
                        "mke2fs",
                        format!(
                            "{} (e2fsprogs {version}), used by absolute path",
                            mke2fs.display()
                        ),
                    ),
                    Ok(Err(what)) => Check::fail(
                        "mke2fs",
                        format!("{} is not e2fsprogs: {what}", mke2fs.display()),
                        fetch,
                    ),
                    Err(e) => Check::fail(
                        "mke2fs",
                        format!("{} does not run: {e}", mke2fs.display()),
                        fetch,
                    ),
                },
            );
        }
    }
    checks
}

/// The socket judged as every client judges it (`boxd_fs::trust`).
fn socket(socket: &Path) -> Check {
    use boxd_fs::trust::{self, CheckError, Problem};
    let Some(dir) = socket.parent() else {
        return Check::fail(
            "socket",
            format!("{} has no directory", socket.display()),
            "pass a full --socket path",
        );
    };
    let me = trust::my_uid();
    let own = "use a directory of your own (XDG_RUNTIME_DIR, BOXD_SOCKET or --socket)";
    let untrusted = |u: trust::Untrusted| match u.problem {
        Problem::SocketDirOpen(mode) => Check::warn(
            "socket",
            format!(
                "{} is {mode:04o}: clients refuse it until boxd makes it 0700 when it starts",
                u.path.display()
            ),
            format!("chmod 700 {}", u.path.display()),
        ),
        Problem::SocketWritable(mode) => Check::warn(
            "socket",
            format!("{} is {mode:04o}: clients refuse it", u.path.display()),
            format!("chmod 600 {}", u.path.display()),
        ),
        _ => Check::fail("socket", u.to_string(), own),
    };
    let not_found = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    match trust::check_socket(&trust::RealFs, me, socket) {
        Ok(_) => Check::ok(
            "socket",
            format!("{} (this user's, directory 0700)", socket.display()),
        ),
        Err(CheckError::Untrusted(u)) => untrusted(u),
        Err(CheckError::Io(e)) if not_found(&e) => {
            match trust::resolve(&trust::RealFs, me, dir, false) {
                Ok((real, st)) => match trust::check_socket_dir(me, &real, st) {
                    Ok(()) => Check::ok(
                        "socket",
                        format!("{} (directory 0700; boxd not running)", socket.display()),
                    ),
                    Err(u) => untrusted(u),
                },
                Err(CheckError::Io(e)) if not_found(&e) => Check::ok(
                    "socket",
                    format!(
                        "{} does not exist yet; boxd creates it (0700)",
                        dir.display()
                    ),
                ),
                Err(CheckError::Untrusted(u)) => untrusted(u),
                Err(CheckError::Io(e)) => Check::fail(
                    "socket",
                    format!("cannot check {}: {e}", dir.display()),
                    own,
                ),
            }
        }
        Err(CheckError::Io(e)) => Check::fail(
            "socket",
            format!("cannot check {}: {e}", socket.display()),
            own,
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn details_reach_the_terminal_without_controls() {
        assert_eq!(
            super::shown("mke2fs \x1b]0;t\x07 1.47\r\n\u{9b}ok é"),
            "mke2fs \\u{1b}]0;t\\u{7} 1.47\\r\\n\\u{9b}ok é"
        );
    }
}
