//! The proxy's flags, and what follows from them: the mode, the mounts
//! (`--mount-cwd` included) and the box's name when none is given.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Parser;
use sha2::{Digest, Sha256};

#[derive(Parser, Debug, Clone)]
#[command(name = "harness-box-exec", version, about, long_about = None)]
pub struct Args {
    /// The box to run in; created when it does not exist, reused when it
    /// does. Default: one box per project, named after the mounted
    /// directory (`acp-NAME-HASH`).
    #[arg(long = "box", value_name = "NAME")]
    pub box_name: Option<String>,
    /// A registry reference or an OCI image layout directory (needed to
    /// create the box; optional when it exists).
    #[arg(long, value_name = "REF|LAYOUT")]
    pub image: Option<String>,
    /// HOST:GUEST[:ro] (repeatable).
    #[arg(long = "mount", value_name = "HOST:GUEST[:ro]")]
    pub mounts: Vec<String>,
    /// Mount this process's working directory (where an editor starts its
    /// agent: the project) at the same path in the box, and work there
    /// unless --workdir says otherwise.
    #[arg(long)]
    pub mount_cwd: bool,
    /// Working directory inside the box, for the box and every command.
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<String>,
    /// A host the box may reach: a name, *.suffix, an IP address or CIDR
    /// (repeatable). None: no network.
    #[arg(long = "allow-net", value_name = "HOST")]
    pub allow_net: Vec<String>,
    /// NAME:HOST[,HOST...][@FILE]: a credential the box sees only as a
    /// placeholder in $NAME; its value (from this environment's $NAME, or
    /// FILE) goes only to those hosts, in plain HTTP (repeatable).
    #[arg(long = "secret", value_name = "NAME:HOSTS[@FILE]")]
    pub secrets: Vec<String>,
    /// Publish a box port on the host (repeatable); the host address
    /// defaults to 127.0.0.1, host port 0 (or none) means any free port.
    #[arg(long = "publish", value_name = "[HOST_IP:]HOST_PORT:BOX_PORT")]
    pub publish: Vec<String>,
    /// keep-id[:uid=N[,gid=M]]: mounted directories' owners become box user
    /// N (default: your uid), who runs the command, so an agent that will
    /// not run as root writes in the project as you (podman's
    /// --userns=keep-id).
    #[arg(long, value_name = "keep-id[:uid=N[,gid=M]]")]
    pub userns: Option<String>,
    /// K=V for the probe, the provisioning command, the command and the
    /// agent's terminals (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// A shell command that exits 0 when the box is ready.
    #[arg(long, value_name = "CMD")]
    pub probe: Option<String>,
    /// A shell command that makes the box ready; run only when the probe fails.
    #[arg(long, value_name = "CMD")]
    pub provision: Option<String>,
    #[arg(long)]
    pub cpus: Option<u32>,
    #[arg(long, value_name = "MIB")]
    pub memory_mib: Option<u32>,
    /// Pass stdin and stdout through byte for byte, for a command that is
    /// not an ACP agent (the default is ACP: the box is the agent's world).
    #[arg(long)]
    pub raw: bool,
    /// The daemon's socket [env: BOXD_SOCKET; default: the per-user socket].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Only errors on stderr.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Also report each step and its timing on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run in the box, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How stdio is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// ACP between the client on stdio and the agent in the box.
    Acp,
    /// Byte for byte; on a pseudo-terminal when stdin is a terminal (a
    /// person, or a client running an agent's terminal login).
    Raw { tty: bool },
}

/// Why the flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ArgsError {
    #[error("cannot read the working directory: {0}")]
    Cwd(std::io::Error),
    #[error(
        "--mount-cwd would mount {0} into the box: start harness-box-exec in the project's directory, or give --mount"
    )]
    CwdTooWide(PathBuf),
    #[error("give --box NAME, or a --mount (or --mount-cwd) to name the box after")]
    NoName,
}

impl Args {
    pub fn mode(&self) -> Mode {
        let tty = std::io::stdin().is_terminal();
        if self.raw || tty {
            Mode::Raw { tty }
        } else {
            Mode::Acp
        }
    }

    /// The `--mount` words, with `--mount-cwd`'s added.
    pub fn mount_words(&self) -> Result<Vec<String>, ArgsError> {
        let mut words = self.mounts.clone();
        if let Some(cwd) = self.mounted_cwd()? {
            let cwd = cwd.display();
            words.push(format!("{cwd}:{cwd}"));
        }
        Ok(words)
    }

    /// The working directory: `--workdir`, else the mounted cwd.
    pub fn workdir(&self) -> Result<Option<String>, ArgsError> {
        if self.workdir.is_some() {
            return Ok(self.workdir.clone());
        }
        Ok(self.mounted_cwd()?.map(|c| c.display().to_string()))
    }

    /// `--mount-cwd`'s directory: never `/` or the home directory itself
    /// (an agent with the whole home is no agent in a box).
    fn mounted_cwd(&self) -> Result<Option<PathBuf>, ArgsError> {
        if !self.mount_cwd {
            return Ok(None);
        }
        let cwd = std::env::current_dir().map_err(ArgsError::Cwd)?;
        let cwd = cwd.canonicalize().unwrap_or(cwd);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let home = home.map(|h| h.canonicalize().unwrap_or(h));
        if cwd == Path::new("/") || Some(&cwd) == home.as_ref() {
            return Err(ArgsError::CwdTooWide(cwd));
        }
        Ok(Some(cwd))
    }

    /// `--box`, else a name derived from the project: the mounted working
    /// directory (`--mount-cwd`), else the first mounted host directory.
    pub fn box_name(&self) -> Result<String, ArgsError> {
        if let Some(b) = &self.box_name {
            return Ok(b.clone());
        }
        if let Some(cwd) = self.mounted_cwd()? {
            return Ok(project_box_name(&cwd));
        }
        let words = self.mount_words()?;
        let host = words
            .first()
            .and_then(|w| w.split(':').next())
            .filter(|h| !h.is_empty())
            .ok_or(ArgsError::NoName)?;
        let host = std::path::absolute(host).map_err(ArgsError::Cwd)?;
        let host = host.canonicalize().unwrap_or(host);
        Ok(project_box_name(&host))
    }
}

/// `acp-NAME-HASH`: the directory's name (characters boxd does not take in
/// names replaced by `-`, at most 40 of them) and 8 hex digits of its
/// path's SHA-256, so two projects of the same name get two boxes.
pub fn project_box_name(dir: &Path) -> String {
    let base: String = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let hash = Sha256::digest(dir.as_os_str().as_encoded_bytes());
    format!("acp-{base}-{}", hex::encode(&hash[..4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_name_their_boxes() {
        let a = project_box_name(Path::new("/home/me/my proj"));
        assert!(a.starts_with("acp-my-proj-"), "{a}");
        assert_eq!(a.len(), "acp-my-proj-".len() + 8);
        assert_ne!(
            a,
            project_box_name(Path::new("/srv/my proj")),
            "same name, other path"
        );
        assert_eq!(a, project_box_name(Path::new("/home/me/my proj")), "stable");
        let long = project_box_name(&Path::new("/x").join("é".repeat(100)));
        assert!(long.len() <= 64, "{long}");
        assert!(
            long.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        );
        assert!(project_box_name(Path::new("/")).starts_with("acp-root-"));
    }

    #[test]
    fn a_name_comes_from_the_first_mount() {
        let args = Args::parse_from([
            "harness-box-exec",
            "--mount",
            "/srv/app:/app",
            "--",
            "agent",
        ]);
        assert_eq!(
            args.box_name().unwrap(),
            project_box_name(Path::new("/srv/app"))
        );
        let none = Args::parse_from(["harness-box-exec", "--", "agent"]);
        assert!(matches!(none.box_name(), Err(ArgsError::NoName)));
        let named = Args::parse_from(["harness-box-exec", "--box", "b", "--", "agent"]);
        assert_eq!(named.box_name().unwrap(), "b");
    }
}
