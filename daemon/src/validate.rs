//! Checks on everything a client sends, before anything acts on it: each
//! request becomes the model ([`crate::model`]) here, parsed once.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use boxd_proto::v1;

use crate::error::{Error, Result};
use crate::model::{BoxName, BoxSpec, ExecRequest, Mount, PortMapping};

/// At most this many bytes of environment (names, values) in a box spec
/// or an exec, and of command line in an exec: the kernel refuses an
/// `execve` whose arguments and environment pass about 2 MiB, so more
/// could never run.
pub const MAX_ENV_BYTES: usize = 1 << 20;
pub const MAX_ARGV_BYTES: usize = 1 << 20;
/// At most this many mounts, and allow-net entries, per box.
pub const MAX_MOUNTS: usize = 64;
pub const MAX_ALLOW_NET: usize = 256;
/// At most this many published ports per box.
pub const MAX_PORTS: usize = 64;

/// A whole box spec from a create request, checked and normalized.
/// `protected` are the host paths no mount may expose ([`host_path`]).
/// An `UpdateBox` request's changes, checked as a create checks them.
pub fn spec_update(r: &v1::UpdateBoxRequest) -> Result<crate::model::SpecUpdate> {
    if r.cpus == Some(0) || r.memory_mib == Some(0) {
        return Err(Error::InvalidArgument(
            "cpus and memory must be positive".into(),
        ));
    }
    let allow_net = match &r.allow_net {
        None => None,
        Some(a) => {
            if a.hosts.len() > MAX_ALLOW_NET {
                return Err(Error::InvalidArgument(format!(
                    "{} allow-net entries asked for; a box may have at most {MAX_ALLOW_NET}",
                    a.hosts.len()
                )));
            }
            crate::egress::AllowList::parse(&a.hosts)
                .map_err(|e| Error::InvalidArgument(format!("allow-net: {e}")))?;
            Some(a.hosts.clone())
        }
    };
    if r.cpus.is_none() && r.memory_mib.is_none() && allow_net.is_none() {
        return Err(Error::InvalidArgument(
            "nothing to update: give cpus, memory or an allow-list".into(),
        ));
    }
    Ok(crate::model::SpecUpdate {
        cpus: r.cpus,
        memory_mib: r.memory_mib,
        allow_net,
    })
}

pub fn box_spec(s: v1::BoxSpec, protected: &[(&str, &Path)]) -> Result<BoxSpec> {
    // A registry reference or a local layout's path (which may hold spaces).
    let image = s.image.trim().to_owned();
    if image.is_empty() {
        return Err(Error::InvalidArgument("image is required".into()));
    }
    if image.len() > 4096 || image.chars().any(char::is_control) {
        return Err(Error::InvalidArgument(format!(
            "invalid image {:?}",
            truncate(&image)
        )));
    }
    if s.mounts.len() > MAX_MOUNTS {
        return Err(Error::InvalidArgument(format!(
            "{} mounts asked for; a box may have at most {MAX_MOUNTS}",
            s.mounts.len()
        )));
    }
    let mut mounts: Vec<Mount> = Vec::with_capacity(s.mounts.len());
    for m in s.mounts {
        let guest_path = guest_path("mount guest path", &m.guest_path)?;
        mount_target(&guest_path)?;
        if mounts.iter().any(|o| o.guest_path == guest_path) {
            return Err(Error::InvalidArgument(format!(
                "two mounts at {guest_path} in one box"
            )));
        }
        let host_path = host_path(&m.host_path, protected)?;
        mounts.push(Mount {
            host_path,
            guest_path,
            read_only: m.read_only,
        });
    }
    env_size(s.env.iter())?;
    let mut env = BTreeMap::new();
    for (k, v) in s.env {
        env_var(&k, &v)?;
        env.insert(k, v);
    }
    if s.allow_net.len() > MAX_ALLOW_NET {
        return Err(Error::InvalidArgument(format!(
            "{} allow-net entries asked for; a box may have at most {MAX_ALLOW_NET}",
            s.allow_net.len()
        )));
    }
    let allow = crate::egress::AllowList::parse(&s.allow_net)
        .map_err(|e| Error::InvalidArgument(format!("allow-net: {e}")))?;
    let secrets = secrets(s.secrets, &allow)?;
    let ports = ports(s.ports)?;
    let working_dir = match s.working_dir.as_str() {
        "" => None,
        d => Some(guest_path("working directory", d)?),
    };
    if s.cpus == Some(0) || s.memory_mib == Some(0) || s.disk_size_gb == Some(0) {
        return Err(Error::InvalidArgument(
            "cpus, memory and disk size must be positive".into(),
        ));
    }
    let keep_id = match s.keep_id {
        None => None,
        Some(k) if (1..65_536).contains(&k.uid) && (1..65_536).contains(&k.gid) => {
            Some(crate::model::KeepId {
                uid: k.uid,
                gid: k.gid,
            })
        }
        Some(k) => {
            return Err(Error::InvalidArgument(format!(
                "keep-id {}:{}: the box user and group must be 1-65535 (box root already owns mounts without keep-id)",
                k.uid, k.gid
            )));
        }
    };
    Ok(BoxSpec {
        image,
        cpus: s.cpus,
        memory_mib: s.memory_mib,
        disk_size_gb: s.disk_size_gb,
        mounts,
        allow_net: s.allow_net,
        env,
        working_dir,
        secrets,
        ports,
        keep_id,
    })
}

/// Published ports: TCP only, a box port of 1-65535, a host port of
/// 0-65535 (0: any free one) on a host address (default 127.0.0.1), no
/// two on one host address and port (a wildcard address overlaps every
/// other).
pub fn ports(given: Vec<v1::PortMapping>) -> Result<Vec<PortMapping>> {
    if given.len() > MAX_PORTS {
        return Err(Error::InvalidArgument(format!(
            "{} published ports asked for; a box may publish at most {MAX_PORTS}",
            given.len()
        )));
    }
    let mut out: Vec<PortMapping> = Vec::with_capacity(given.len());
    for p in given {
        let protocol = p.protocol.trim().to_ascii_lowercase();
        if !matches!(protocol.as_str(), "" | "tcp") {
            return Err(Error::InvalidArgument(format!(
                "published port {}: protocol {:?} is not supported; only TCP is relayed",
                p.box_port,
                truncate(&p.protocol)
            )));
        }
        let box_port = match u16::try_from(p.box_port) {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "published box port {} is not in 1-65535",
                    p.box_port
                )));
            }
        };
        let host_port = u16::try_from(p.host_port).map_err(|_| {
            Error::InvalidArgument(format!(
                "published host port {} (for box port {box_port}) is not in 0-65535 (0: any free port)",
                p.host_port
            ))
        })?;
        let host_ip = match p.host_ip.trim() {
            "" => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            ip => ip
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| {
                    Error::InvalidArgument(format!(
                        "published port {box_port}: host address {:?} is not an IPv4 or IPv6 address",
                        truncate(ip)
                    ))
                })?,
        };
        let port = PortMapping {
            host_ip,
            host_port,
            box_port,
        };
        if let Some(other) = out.iter().find(|o| o.overlaps(&port)) {
            return Err(Error::InvalidArgument(format!(
                "published ports {other} and {port} both take host port {host_port}",
            )));
        }
        out.push(port);
    }
    Ok(out)
}

/// The default placeholder of a secret named `name`.
pub fn default_placeholder(name: &str) -> String {
    format!("BOXD_SECRET_PLACEHOLDER_{name}")
}

/// Secrets: environment-variable names, unique, each for hosts the box
/// may reach, with a value and a placeholder the proxy can find.
fn secrets(
    given: Vec<v1::Secret>,
    allow: &crate::egress::AllowList,
) -> Result<Vec<crate::egress::Secret>> {
    if given.len() > 64 {
        return Err(Error::InvalidArgument(format!(
            "{} secrets asked for; a box may have at most 64",
            given.len()
        )));
    }
    let mut out: Vec<crate::egress::Secret> = Vec::with_capacity(given.len());
    for s in given {
        let name_ok = s.name.len() <= 128
            && s.name
                .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && s.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(Error::InvalidArgument(format!(
                "invalid secret name {:?}: use an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                truncate(&s.name)
            )));
        }
        if out.iter().any(|o| o.name == s.name) {
            return Err(Error::InvalidArgument(format!(
                "secret {} given twice",
                s.name
            )));
        }
        if s.value.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "secret {} has no value",
                s.name
            )));
        }
        if s.hosts.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "secret {} names no host it may be sent to",
                s.name
            )));
        }
        for h in &s.hosts {
            // A wildcard is within the list when a name it covers is.
            let probe = match h.strip_prefix("*.") {
                Some(suffix) => format!("boxd-probe.{suffix}"),
                None => h.clone(),
            };
            if !allow.allows(&probe) {
                let listed = allow.to_string();
                return Err(Error::InvalidArgument(format!(
                    "secret {} is for {h}, which the box may not reach (allow-net: {listed})",
                    s.name
                )));
            }
        }
        let placeholder = if s.placeholder.is_empty() {
            default_placeholder(&s.name)
        } else {
            s.placeholder
        };
        out.push(crate::egress::Secret {
            name: s.name,
            hosts: s.hosts,
            placeholder,
            value: s.value,
        });
    }
    // The proxy's own checks (placeholders, values without CR/LF/NUL,
    // host syntax).
    crate::egress::Secrets::new(out.clone())
        .map_err(|e| Error::InvalidArgument(format!("secrets: {e}")))?;
    Ok(out)
}

/// An exec request parsed into the model: everything in it that does not
/// depend on the box is checked here, once.
pub fn exec_start(req: v1::ExecStart) -> Result<ExecRequest> {
    let name = box_name(&req.box_name)?;
    command(&req.command, &req.args)?;
    let argv: usize = req.command.len() + req.args.iter().map(|a| a.len() + 1).sum::<usize>();
    if argv > MAX_ARGV_BYTES {
        return Err(Error::InvalidArgument(format!(
            "the command line is {argv} bytes; at most {MAX_ARGV_BYTES} can run"
        )));
    }
    env_size(req.env.iter())?;
    for (k, v) in &req.env {
        env_var(k, v)?;
    }
    let working_dir = match req.working_dir.as_str() {
        "" => None,
        dir => Some(guest_path("working directory", dir)?),
    };
    let tty = if req.tty {
        let size = req.tty_size.unwrap_or(v1::TtySize { rows: 24, cols: 80 });
        Some(tty_size(size.rows, size.cols)?)
    } else {
        None
    };
    Ok(ExecRequest {
        box_name: name,
        command: req.command,
        args: req.args,
        env: req.env.into_iter().collect(),
        working_dir,
        timeout: (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms)),
        stdin: req.stdin,
        tty,
        detach: req.detach,
        resumable: req.resumable,
        user: exec_user(&req.user)?,
    })
}

/// `USER[:GROUP]` (names or numbers); empty is `None`.
pub fn exec_user(user: &str) -> Result<Option<String>> {
    if user.is_empty() {
        return Ok(None);
    }
    let ok = user.len() <= 256
        && user.split(':').count() <= 2
        && user.split(':').all(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-$".contains(&b))
        });
    if !ok {
        return Err(Error::InvalidArgument(format!(
            "invalid user {user:?}: use USER[:GROUP] or UID[:GID]"
        )));
    }
    Ok(Some(user.to_owned()))
}

/// A TTY's size: rows and columns, each 1 to 65535.
pub fn tty_size(rows: u32, cols: u32) -> Result<(u16, u16)> {
    match (u16::try_from(rows), u16::try_from(cols)) {
        (Ok(r), Ok(c)) if r > 0 && c > 0 => Ok((r, c)),
        _ => Err(Error::InvalidArgument(format!(
            "invalid TTY size {rows}x{cols}"
        ))),
    }
}

fn env_size<'a>(env: impl Iterator<Item = (&'a String, &'a String)>) -> Result<()> {
    let bytes: usize = env.map(|(k, v)| k.len() + v.len() + 2).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(Error::InvalidArgument(format!(
            "the environment is {bytes} bytes; at most {MAX_ENV_BYTES} are allowed"
        )));
    }
    Ok(())
}

/// Box names: 1 to 64 characters of `[A-Za-z0-9_.-]`, not starting with
/// `.` or `-`.
pub fn box_name(name: &str) -> Result<BoxName> {
    let ok_len = (1..=64).contains(&name.len());
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    let ok_start = !name.starts_with(['.', '-']);
    if ok_len && ok_chars && ok_start {
        Ok(BoxName::checked(name.to_owned()))
    } else {
        Err(Error::InvalidArgument(format!(
            "invalid box name {:?}: use 1 to 64 characters of A-Z a-z 0-9 _ . - not starting with '.' or '-'",
            truncate(name)
        )))
    }
}

/// Snapshot names follow the rules of box names.
pub fn snapshot_name(name: &str) -> Result<()> {
    box_name(name).map(drop).map_err(|_| {
        Error::InvalidArgument(format!(
            "invalid snapshot name {:?}: use 1 to 64 characters of A-Z a-z 0-9 _ . - not starting with '.' or '-'",
            truncate(name)
        ))
    })
}

/// Where to write a box archive: absolute, naming a file (not `/`, no
/// `..`) whose directory exists; the file itself must not.
pub fn export_path(path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    let bad =
        |why: &str| Error::InvalidArgument(format!("the archive path {why}: {:?}", truncate(path)));
    if !p.is_absolute() || path.contains('\0') {
        return Err(bad("must be absolute"));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(bad("must not contain '..'"));
    }
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return Err(bad("must name a file"));
    };
    let parent = parent
        .canonicalize()
        .map_err(|e| bad(&format!("has no usable directory ({e})")))?;
    let out = parent.join(name);
    if out.symlink_metadata().is_ok() {
        return Err(Error::AlreadyExists(format!(
            "{} exists; box archives are never written over a file",
            out.display()
        )));
    }
    Ok(out)
}

/// A path inside a box: absolute, normalized (no `.` or `..`), not `/`.
pub fn guest_path(what: &str, path: &str) -> Result<String> {
    let p = Path::new(path);
    let bad = || {
        Error::InvalidArgument(format!(
            "{what} must be an absolute path inside the box without '..': {:?}",
            truncate(path)
        ))
    };
    if !p.is_absolute() || path.contains('\0') {
        return Err(bad());
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => return Err(bad()),
        }
    }
    Ok(out.to_string_lossy().into_owned())
}

/// The longest path a copy may name (the kernel's `PATH_MAX`).
pub const MAX_COPY_PATH: usize = 4096;

/// A copy's path inside a box: absolute, without `..` or NUL, at most
/// [`MAX_COPY_PATH`] bytes. Kept as written: a trailing `/.` (a directory's
/// contents) or `/` (must be a directory) means something.
pub fn copy_path(path: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::InvalidArgument(format!("the path in the box {why}: {:?}", truncate(path)))
    };
    if !path.starts_with('/') {
        return Err(bad("must be absolute"));
    }
    if path.contains('\0') {
        return Err(bad("must not contain NUL"));
    }
    if path.len() > MAX_COPY_PATH {
        return Err(bad("is too long (at most 4096 bytes)"));
    }
    if path.split('/').any(|c| c == "..") {
        return Err(bad("must not contain '..'"));
    }
    Ok(path.to_owned())
}

/// A bind mount's host side: absolute, existing, canonicalized (so a
/// symlink is judged by where it leads), not in the host's `/proc`, `/sys`
/// or `/dev`, and neither inside nor a parent of any `protected` path:
/// boxd's state directory (other boxes' files) and its socket (a box that
/// reached it could drive boxd). A directory beside the socket is fine:
/// with `--socket ~/boxd.sock`, projects under the home may be mounted,
/// the home itself not.
pub fn host_path(path: &str, protected: &[(&str, &Path)]) -> Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() || path.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "mount host path must be absolute: {:?}",
            truncate(path)
        )));
    }
    // The host's kernel interfaces and devices: a box has its own /proc
    // and /dev, and the host's are not for it to reach (judged as given,
    // and where it leads).
    let kernel = |p: &Path| -> Result<()> {
        match ["/proc", "/sys", "/dev"]
            .into_iter()
            .find(|k| p.starts_with(k))
        {
            Some(k) => Err(Error::InvalidArgument(format!(
                "mount host path {} is in the host's {k}, which no box may mount",
                p.display()
            ))),
            None => Ok(()),
        }
    };
    kernel(p)?;
    let canon = p
        .canonicalize()
        .map_err(|e| Error::InvalidArgument(format!("mount host path {path:?}: {e}")))?;
    kernel(&canon)?;
    for (what, dir) in protected {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        if canon.starts_with(&dir) || dir.starts_with(&canon) {
            return Err(Error::InvalidArgument(format!(
                "mount host path {} would expose {what} {}",
                canon.display(),
                dir.display()
            )));
        }
    }
    Ok(canon)
}

/// An image reference or digest as a client typed it: non-empty, at most
/// 1 KiB, no whitespace or control characters. Its grammar is checked where
/// it is parsed (`image::pull::parse_reference`).
pub fn image_reference(s: &str) -> Result<String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(Error::InvalidArgument(
            "an image reference is required".into(),
        ));
    }
    if s.len() > 1024 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::InvalidArgument(format!(
            "invalid image reference {:?}",
            truncate(s)
        )));
    }
    Ok(s.to_owned())
}

/// A file or directory to import: absolute, existing.
pub fn import_path(path: &str) -> Result<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() || path.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "the path to import must be absolute: {:?}",
            truncate(path)
        )));
    }
    p.canonicalize()
        .map_err(|e| Error::InvalidArgument(format!("{path:?}: {e}")))
}

/// Guest mount points the engine itself provides.
pub fn mount_target(guest: &str) -> Result<()> {
    let reserved = ["/", "/proc", "/dev"];
    if reserved.contains(&guest) || guest.starts_with("/proc/") || guest.starts_with("/dev/") {
        return Err(Error::InvalidArgument(format!(
            "cannot mount over {guest} in a box"
        )));
    }
    Ok(())
}

/// Environment variable names: non-empty, no `=`, no NUL; values no NUL.
pub fn env_var(key: &str, value: &str) -> Result<()> {
    if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "invalid environment variable {:?}",
            truncate(key)
        )));
    }
    Ok(())
}

/// Command words cannot carry NUL bytes.
pub fn command(command: &str, args: &[String]) -> Result<()> {
    if command.contains('\0') || args.iter().any(|a| a.contains('\0')) {
        return Err(Error::InvalidArgument(
            "command and arguments cannot contain NUL bytes".into(),
        ));
    }
    Ok(())
}

/// A signal as a number (`15`) or a name (`SIGTERM`, `TERM`, `sigterm`).
/// Empty means SIGKILL.
pub fn signal(s: &str) -> Result<i32> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(libc::SIGKILL);
    }
    let parsed = match s.parse::<i32>() {
        Ok(n) => nix::sys::signal::Signal::try_from(n).ok(),
        Err(_) => {
            let upper = s.to_ascii_uppercase();
            let name = if upper.starts_with("SIG") {
                upper
            } else {
                format!("SIG{upper}")
            };
            name.parse::<nix::sys::signal::Signal>().ok()
        }
    };
    parsed
        .map(|sig| sig as i32)
        .ok_or_else(|| Error::InvalidArgument(format!("unknown signal {:?}", truncate(s))))
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_follow_box_names() {
        snapshot_name("s1").unwrap();
        snapshot_name("20261201-063000").unwrap();
        for bad in ["", "../x", "a/b", ".x", "-x", "sp ace", &"n".repeat(65)] {
            let e = snapshot_name(bad).unwrap_err();
            assert!(
                e.to_string().contains("invalid snapshot name"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn export_paths_are_absolute_new_files_in_existing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let new = dir.path().join("a.tgz");
        assert_eq!(
            export_path(new.to_str().unwrap()).unwrap(),
            dir.path().canonicalize().unwrap().join("a.tgz")
        );
        std::fs::write(&new, b"x").unwrap();
        assert!(matches!(
            export_path(new.to_str().unwrap()),
            Err(Error::AlreadyExists(_))
        ));
        let missing = dir.path().join("no/such/a.tgz");
        for bad in [
            "relative.tgz",
            "/",
            "/tmp/../etc/x",
            "/tmp/a\0b",
            missing.to_str().unwrap(),
        ] {
            assert!(
                matches!(export_path(bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn copy_paths() {
        for ok in ["/", "/a", "/a/.", "/a/", "/a/./b", "/..a/b..", "/a b/ü"] {
            assert_eq!(copy_path(ok).unwrap(), ok);
        }
        let long = format!("/{}", "x".repeat(MAX_COPY_PATH));
        for bad in ["", "a", "./a", "/a/../b", "/..", "/a/..", "/a\0b", &long] {
            assert!(copy_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "box-1", "A.b_c", &"x".repeat(64), "9"] {
            assert!(box_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "-flag",
            &"x".repeat(65),
            "a/b",
            "..",
            "a b",
            "ü",
            "a\0b",
            "../etc",
        ] {
            assert!(box_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn guest_paths() {
        assert_eq!(guest_path("p", "/workspace/").unwrap(), "/workspace");
        assert_eq!(guest_path("p", "/a/./b").unwrap(), "/a/b");
        assert!(guest_path("p", "relative").is_err());
        assert!(guest_path("p", "/a/../etc").is_err());
    }

    #[test]
    fn host_paths() {
        let state = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let run = tempfile::tempdir().unwrap();
        let socket = run.path().join("boxd.sock");
        std::fs::write(&socket, "").unwrap();
        let protected = [
            ("boxd's state directory", state.path()),
            ("boxd's socket", socket.as_path()),
        ];
        let check = |p: &Path| host_path(p.to_str().unwrap(), &protected);
        assert!(check(other.path()).is_ok());
        assert!(check(state.path()).is_err());
        assert!(check(&state.path().join("..")).is_err());
        assert!(check(state.path().parent().unwrap()).is_err());
        let err = check(run.path()).unwrap_err().to_string();
        assert!(err.contains("boxd's socket"), "{err}");
        assert!(check(&socket).is_err());
        // Beside the socket (a project in the home of `--socket ~/boxd.sock`).
        let project = run.path().join("project");
        std::fs::create_dir(&project).unwrap();
        assert_eq!(check(&project).unwrap(), project.canonicalize().unwrap());
        // A symlink is judged by where it leads.
        let link = other.path().join("sneaky");
        std::os::unix::fs::symlink(run.path(), &link).unwrap();
        assert!(check(&link).is_err());
        assert!(host_path("/definitely/not/here", &protected).is_err());
        assert!(host_path("rel/path", &protected).is_err());
        // The host's kernel interfaces and devices, also through a link.
        for kernel in [
            "/proc",
            "/proc/self",
            "/sys",
            "/sys/kernel",
            "/dev",
            "/dev/shm",
        ] {
            if Path::new(kernel).exists() {
                let err = host_path(kernel, &protected).unwrap_err().to_string();
                assert!(err.contains("no box may mount"), "{kernel}: {err}");
            }
        }
        let link = other.path().join("to-proc");
        std::os::unix::fs::symlink("/proc/1", &link).unwrap();
        assert!(check(&link).is_err());
    }

    #[test]
    fn signals() {
        assert_eq!(signal("").unwrap(), libc::SIGKILL);
        assert_eq!(signal("15").unwrap(), libc::SIGTERM);
        assert_eq!(signal("SIGTERM").unwrap(), libc::SIGTERM);
        assert_eq!(signal("term").unwrap(), libc::SIGTERM);
        assert_eq!(signal("SIGWINCH").unwrap(), libc::SIGWINCH);
        for bad in ["0", "999", "-1", "SIGNOPE", "KILLL"] {
            assert!(signal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn published_ports() {
        let p = |ip: &str, host: u32, port: u32, proto: &str| v1::PortMapping {
            host_ip: ip.into(),
            host_port: host,
            box_port: port,
            protocol: proto.into(),
        };
        let ok = ports(vec![
            p("", 0, 8000, ""),
            p("", 0, 8001, "TCP"),
            p("0.0.0.0", 8080, 80, "tcp"),
            p("::1", 8081, 80, ""),
            p("[::1]", 8082, 80, ""),
        ])
        .unwrap();
        assert_eq!(ok[0].host_ip.to_string(), "127.0.0.1");
        assert_eq!(ok[0].to_string(), "127.0.0.1:0->8000/tcp");
        assert_eq!(ok[3].to_string(), "[::1]:8081->80/tcp");
        // Any number of "any free port" mappings on one address.
        assert_eq!(ok.len(), 5);
        for (bad, why) in [
            (vec![p("", 70000, 80, "")], "not in 0-65535"),
            (vec![p("", 80, 0, "")], "not in 1-65535"),
            (vec![p("", 80, 70000, "")], "not in 1-65535"),
            (vec![p("", 80, 80, "udp")], "only TCP is relayed"),
            (vec![p("abc", 80, 80, "")], "not an IPv4 or IPv6 address"),
            (
                vec![p("", 8080, 80, ""), p("127.0.0.1", 8080, 81, "")],
                "both take host port 8080",
            ),
            (
                vec![p("0.0.0.0", 8080, 80, ""), p("", 8080, 81, "")],
                "both take host port 8080",
            ),
            (
                vec![p("::", 8080, 80, ""), p("10.0.0.1", 8080, 81, "")],
                "both take host port 8080",
            ),
            (
                (0..65).map(|i| p("", 0, 1000 + i, "")).collect(),
                "at most 64",
            ),
        ] {
            let e = ports(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        // Different addresses may share a port.
        assert!(ports(vec![p("127.0.0.1", 8080, 80, ""), p("::1", 8080, 80, "")]).is_ok());
    }

    #[test]
    fn reserved_targets() {
        for bad in ["/", "/proc", "/proc/1", "/dev", "/dev/shm"] {
            assert!(mount_target(bad).is_err(), "{bad}");
        }
        assert!(mount_target("/workspace").is_ok());
    }
}
