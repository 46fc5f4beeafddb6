//! `boxctl daemon install|uninstall|logs`: boxd as a per-user service.
//!
//! Linux: systemd user units (`boxd.socket`, `boxd.service`) in
//! `$XDG_CONFIG_HOME/systemd/user/`, enabled with `systemctl --user`.
//! macOS: the LaunchAgent `com.qoder.harness-studio.boxd` in
//! `~/Library/LaunchAgents/`, loaded with `launchctl bootstrap gui/$UID`.
//! The templates live in `launchd/`; `--no-start` writes the files only.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Ctx, Failure};

pub const LABEL: &str = "com.qoder.harness-studio.boxd";
const PLIST: &str = include_str!("../../launchd/com.qoder.harness-studio.boxd.plist");
const SOCKET_UNIT: &str = include_str!("../../launchd/boxd.socket");
const SERVICE_UNIT: &str = include_str!("../../launchd/boxd.service");

/// What a template is filled with.
pub struct Values {
    pub boxd: PathBuf,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub idle_exit: u64,
}

fn fill(template: &str, v: &Values) -> String {
    template
        .replace("@BOXD@", &v.boxd.display().to_string())
        .replace("@SOCKET@", &v.socket.display().to_string())
        .replace("@LOG@", &v.log.display().to_string())
        .replace("@IDLE@", &v.idle_exit.to_string())
        .replace("@DOCS@", "/usr/share/doc/boxd/service.md")
}

/// The files to write for this platform: (path, contents).
pub fn files(v: &Values) -> Result<Vec<(PathBuf, String)>, Failure> {
    let base = directories::BaseDirs::new()
        .ok_or_else(|| failure("cannot determine the home directory"))?;
    if cfg!(target_os = "macos") {
        let dir = base.home_dir().join("Library/LaunchAgents");
        Ok(vec![(dir.join(format!("{LABEL}.plist")), fill(PLIST, v))])
    } else {
        let dir = base.config_dir().join("systemd/user");
        Ok(vec![
            (dir.join("boxd.socket"), fill(SOCKET_UNIT, v)),
            (dir.join("boxd.service"), fill(SERVICE_UNIT, v)),
        ])
    }
}

fn failure(message: impl Into<String>) -> Failure {
    Failure {
        code: 1,
        message: message.into(),
        kind: None,
    }
}

/// Runs a service-manager command, failing with its stderr.
fn run(cmd: &mut Command) -> Result<(), Failure> {
    let what = format!("{cmd:?}").replace('"', "");
    let out = cmd
        .output()
        .map_err(|e| failure(format!("cannot run {what}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(failure(format!(
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

pub fn install(
    ctx: &Ctx,
    boxd: Option<PathBuf>,
    idle_exit: u64,
    start: bool,
) -> Result<u8, Failure> {
    let boxd = boxd_client::spawn::boxd_binary(boxd);
    let boxd = std::fs::canonicalize(&boxd)
        .map_err(|e| failure(format!("boxd binary {}: {e}", boxd.display())))?;
    let values = Values {
        boxd,
        socket: ctx.paths.socket.clone(),
        log: ctx.paths.home.join("logs/boxd.stderr"),
        idle_exit,
    };
    let files = files(&values)?;
    for (path, text) in &files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| failure(format!("create {}: {e}", dir.display())))?;
        }
        std::fs::write(path, text)
            .map_err(|e| failure(format!("write {}: {e}", path.display())))?;
        println!("wrote {}", path.display());
    }
    if !start {
        return Ok(0);
    }
    if cfg!(target_os = "macos") {
        std::fs::create_dir_all(ctx.paths.home.join("logs"))
            .map_err(|e| failure(format!("create the log directory: {e}")))?;
        if let Some(dir) = ctx.paths.socket.parent() {
            // launchd creates the socket, not its directory; clients use
            // the socket only in a directory of theirs alone (0700).
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| failure(format!("create {}: {e}", dir.display())))?;
            // One made by an earlier install (0755) is closed too.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| failure(format!("chmod 700 {}: {e}", dir.display())))?;
        }
        let domain = format!("gui/{}", uid());
        let _ = Command::new("launchctl")
            .args(["bootout", &format!("{domain}/{LABEL}")])
            .output();
        run(Command::new("launchctl")
            .args(["bootstrap", &domain])
            .arg(&files[0].0))?;
        println!("loaded {LABEL} into {domain}");
    } else {
        run(Command::new("systemctl").args(["--user", "daemon-reload"]))?;
        run(Command::new("systemctl").args(["--user", "enable", "--now", "boxd.socket"]))?;
        println!("enabled boxd.socket: boxd starts on the first connection");
    }
    Ok(0)
}

pub fn uninstall() -> Result<u8, Failure> {
    let dummy = Values {
        boxd: PathBuf::new(),
        socket: PathBuf::new(),
        log: PathBuf::new(),
        idle_exit: 0,
    };
    if cfg!(target_os = "macos") {
        let _ = Command::new("launchctl")
            .args(["bootout", &format!("gui/{}/{LABEL}", uid())])
            .output();
    } else {
        let _ = Command::new("systemctl")
            .args(["--user", "disable", "--now", "boxd.socket", "boxd.service"])
            .output();
    }
    for (path, _) in files(&dummy)? {
        match std::fs::remove_file(&path) {
            Ok(()) => println!("removed {}", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failure(format!("remove {}: {e}", path.display()))),
        }
    }
    if !cfg!(target_os = "macos") {
        let _ = Command::new("systemctl")
            .args(["--user", "daemon-reload"])
            .output();
    }
    Ok(0)
}

/// One line on the installed service: its files and what the service
/// manager says.
pub fn status_line() -> Option<String> {
    let dummy = Values {
        boxd: PathBuf::new(),
        socket: PathBuf::new(),
        log: PathBuf::new(),
        idle_exit: 0,
    };
    let files = files(&dummy).ok()?;
    let installed = files.iter().all(|(p, _)| p.is_file());
    if !installed {
        return Some("service: not installed (boxctl daemon install)".into());
    }
    let state = if cfg!(target_os = "macos") {
        Command::new("launchctl")
            .args(["print", &format!("gui/{}/{LABEL}", uid())])
            .output()
            .ok()
            .map(|o| {
                if o.status.success() {
                    "loaded"
                } else {
                    "not loaded"
                }
                .to_owned()
            })
    } else {
        Command::new("systemctl")
            .args(["--user", "is-active", "boxd.socket"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    Some(format!(
        "service: installed ({}); {}",
        files[0]
            .0
            .parent()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default(),
        state.unwrap_or_else(|| "service manager not reachable".into())
    ))
}

/// Prints the last `lines` lines of the daemon's log, then follows it.
pub async fn logs(ctx: &Ctx, lines: usize, follow: bool) -> Result<u8, Failure> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let dir = ctx.paths.home.join("logs");
    let path =
        newest_log(&dir).ok_or_else(|| failure(format!("no log in {} yet", dir.display())))?;
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    for l in &all[all.len().saturating_sub(lines)..] {
        println!("{l}");
    }
    if !follow {
        return Ok(0);
    }
    let mut f =
        std::fs::File::open(&path).map_err(|e| failure(format!("{}: {e}", path.display())))?;
    let mut pos = f.seek(SeekFrom::End(0)).unwrap_or(0);
    let mut buf = Vec::new();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if len < pos {
            pos = 0; // rotated or truncated
        }
        f.seek(SeekFrom::Start(pos)).ok();
        buf.clear();
        let n = f.read_to_end(&mut buf).unwrap_or(0);
        pos += n as u64;
        if std::io::stdout()
            .write_all(&buf)
            .and_then(|_| std::io::stdout().flush())
            .is_err()
        {
            return Ok(0);
        }
    }
}

/// The daemon's log: `boxd.log`, or the newest dated one.
fn newest_log(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("boxd.log"))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        Values {
            boxd: PathBuf::from("/opt/boxd/bin/boxd"),
            socket: PathBuf::from("/var/folders/x/T/boxd-501/boxd.sock"),
            log: PathBuf::from("/Users/me/Library/Application Support/boxd/logs/boxd.stderr"),
            idle_exit: 300,
        }
    }

    #[test]
    fn the_launch_agent_is_socket_activated_and_restarts_only_after_a_crash() {
        let text = fill(PLIST, &values());
        let plist: plist::Value = plist::from_bytes(text.as_bytes()).expect("a valid plist");
        let d = plist.as_dictionary().unwrap();
        assert_eq!(d["Label"].as_string(), Some(LABEL));
        let args: Vec<&str> = d["ProgramArguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_string().unwrap())
            .collect();
        assert_eq!(args, ["/opt/boxd/bin/boxd", "--idle-exit", "300"]);
        let listeners = d["Sockets"].as_dictionary().unwrap()["Listeners"]
            .as_dictionary()
            .unwrap();
        assert_eq!(
            listeners["SockPathName"].as_string(),
            Some("/var/folders/x/T/boxd-501/boxd.sock")
        );
        assert_eq!(listeners["SockPathMode"].as_signed_integer(), Some(0o600));
        let keep = d["KeepAlive"].as_dictionary().unwrap();
        assert_eq!(keep["SuccessfulExit"].as_boolean(), Some(false));
        assert_eq!(d["ProcessType"].as_string(), Some("Interactive"));
        assert!(
            d.get("RunAtLoad").is_none(),
            "started on demand, not at load"
        );
        assert!(!text.contains('@'), "every placeholder filled");
    }

    #[test]
    fn the_systemd_units_name_the_socket_every_client_uses() {
        let socket = fill(SOCKET_UNIT, &values());
        assert!(socket.contains("ListenStream=%t/boxd/boxd.sock"));
        assert!(socket.contains("SocketMode=0600"));
        let service = fill(SERVICE_UNIT, &values());
        assert!(service.contains("ExecStart=/opt/boxd/bin/boxd --idle-exit 300"));
        assert!(service.contains("Type=notify"));
        assert!(!socket.contains('@') && !service.contains('@'));
    }
}
