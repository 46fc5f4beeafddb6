//! What a box made through `boxctl mcp` may touch: set by the person who
//! starts the server (flags), never by the agent that calls its tools.
//! Every check here is pure; a refusal says what the user would have to
//! allow.

use std::path::{Component, Path, PathBuf};

/// The user's ceiling for boxes made and used through MCP.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Host directories that may be mounted, or copied from and to (and
    /// anything beneath them). None by default.
    pub mounts: Vec<PathBuf>,
    /// Hosts a box may be allowed to reach. None by default.
    pub net: Vec<String>,
    /// Images that may be used (exact references, or a prefix ending in
    /// `*`); empty: any.
    pub images: Vec<String>,
    /// Whether boxes may publish ports on the host.
    pub publish: bool,
    /// The most boxes this server may have made and not removed.
    pub max_boxes: usize,
    /// The most memory (MiB) and CPUs a box may ask for.
    pub max_memory_mib: Option<u32>,
    pub max_cpus: Option<u32>,
    /// Whether the agent may stop, remove and use boxes this server did
    /// not make.
    pub any_box: bool,
}

/// A request past the policy: the message names what to allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Policy {
    /// A host path the agent names (to mount or copy): absolute, and
    /// beneath an allowed directory once `.`, `..` and every symlink of
    /// its existing part are resolved (a box with a mount can plant a
    /// symlink there, so the path as written proves nothing). Returns the
    /// resolved path, which is what goes to boxd.
    pub fn host_path(&self, path: &str) -> Result<PathBuf, Refused> {
        let p = Path::new(path);
        if !p.is_absolute() {
            return Err(Refused(format!(
                "host path {path:?} is not absolute: name it from /"
            )));
        }
        let normal = resolve(&normalize(p));
        if self.mounts.iter().any(|dir| normal.starts_with(dir)) {
            return Ok(normal);
        }
        Err(Refused(if self.mounts.is_empty() {
            format!(
                "host path {} is not allowed: this MCP server allows no host paths (start it with --allow-mount DIR)",
                normal.display()
            )
        } else {
            format!(
                "host path {} is outside what this MCP server allows ({}); start it with --allow-mount {} to allow it",
                normal.display(),
                self.mounts
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                normal.display()
            )
        }))
    }

    /// Hosts a box asks to reach.
    pub fn allow_net(&self, hosts: &[String]) -> Result<(), Refused> {
        let denied: Vec<&String> = hosts
            .iter()
            .filter(|h| !self.net.iter().any(|n| n.eq_ignore_ascii_case(h)))
            .collect();
        if denied.is_empty() {
            return Ok(());
        }
        let names = denied
            .iter()
            .map(|h| h.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        Err(Refused(format!(
            "network access to {names} is not allowed by this MCP server (start it with {})",
            denied
                .iter()
                .map(|h| format!("--allow-net {h}"))
                .collect::<Vec<_>>()
                .join(" ")
        )))
    }

    pub fn image(&self, image: &str) -> Result<(), Refused> {
        let ok = self.images.is_empty()
            || self
                .images
                .iter()
                .any(|allowed| match allowed.strip_suffix('*') {
                    Some(prefix) => image.starts_with(prefix),
                    None => image == allowed,
                });
        if ok {
            return Ok(());
        }
        Err(Refused(format!(
            "image {image} is not allowed by this MCP server (allowed: {}; start it with --allow-image {image})",
            self.images.join(", ")
        )))
    }

    pub fn publish(&self, ports: usize) -> Result<(), Refused> {
        if ports == 0 || self.publish {
            return Ok(());
        }
        Err(Refused(
            "publishing ports on the host is not allowed by this MCP server (start it with --allow-publish)"
                .into(),
        ))
    }

    /// Another box, when `made` boxes of this server exist.
    pub fn one_more_box(&self, made: usize) -> Result<(), Refused> {
        if made < self.max_boxes {
            return Ok(());
        }
        Err(Refused(format!(
            "this MCP server may have at most {} boxes (remove one, or start it with --max-boxes N)",
            self.max_boxes
        )))
    }

    pub fn resources(&self, memory_mib: Option<u32>, cpus: Option<u32>) -> Result<(), Refused> {
        if let (Some(max), Some(asked)) = (self.max_memory_mib, memory_mib)
            && asked > max
        {
            return Err(Refused(format!(
                "{asked} MiB of memory is more than this MCP server allows ({max} MiB; start it with --max-memory {asked}m)"
            )));
        }
        if let (Some(max), Some(asked)) = (self.max_cpus, cpus)
            && asked > max
        {
            return Err(Refused(format!(
                "{asked} CPUs is more than this MCP server allows ({max}; start it with --max-cpus {asked})"
            )));
        }
        Ok(())
    }

    /// A box the agent names for anything but reading its list.
    pub fn may_use(&self, name: &str, made_here: bool) -> Result<(), Refused> {
        if made_here || self.any_box {
            return Ok(());
        }
        Err(Refused(format!(
            "box {name} was not made through this MCP server, which may use only its own boxes (start it with --any-box to allow every box)"
        )))
    }
}

/// `path` (normalized) with its longest existing part resolved through
/// the file system (symlinks followed) and the rest appended as written.
pub fn resolve(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (
            existing.file_name().map(|n| n.to_owned()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// `path` with `.` and `..` taken out, without touching the disk (`..` at
/// the root stays at the root).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> Policy {
        Policy {
            mounts: vec![PathBuf::from("/home/me/proj")],
            net: vec!["registry.npmjs.org".into()],
            max_boxes: 2,
            ..Default::default()
        }
    }

    #[test]
    fn no_host_path_by_default() {
        let e = Policy::default().host_path("/home/me/proj").unwrap_err();
        assert!(e.0.contains("--allow-mount"), "{e}");
    }

    #[test]
    fn host_paths_stay_beneath_what_is_allowed() {
        let p = project();
        assert_eq!(
            p.host_path("/home/me/proj/src/../lib").unwrap(),
            PathBuf::from("/home/me/proj/lib")
        );
        assert!(p.host_path("/home/me/proj").is_ok());
        for bad in [
            "/home/me/proj/../.ssh",
            "/home/me/project2",
            "/home/me/proj/../../../etc",
            "relative/path",
            "/",
        ] {
            assert!(p.host_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_symlink_beneath_an_allowed_directory_does_not_lead_out() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        std::os::unix::fs::symlink("/etc", proj.join("evil")).unwrap();
        let p = Policy {
            mounts: vec![std::fs::canonicalize(&proj).unwrap()],
            ..Default::default()
        };
        let evil = proj.join("evil");
        assert!(p.host_path(evil.to_str().unwrap()).is_err());
        assert!(p.host_path(&format!("{}/passwd", evil.display())).is_err());
        let new = proj.join("new/file");
        assert!(p.host_path(new.to_str().unwrap()).is_ok());
    }

    #[test]
    fn the_network_ceiling_names_what_to_allow() {
        let p = project();
        assert!(p.allow_net(&["registry.npmjs.org".into()]).is_ok());
        assert!(p.allow_net(&[]).is_ok());
        let e = p
            .allow_net(&["registry.npmjs.org".into(), "evil.example".into()])
            .unwrap_err();
        assert!(e.0.contains("--allow-net evil.example"), "{e}");
        assert!(!e.0.contains("--allow-net registry"), "{e}");
    }

    #[test]
    fn images_ports_counts_and_sizes() {
        let mut p = project();
        assert!(p.image("anything:latest").is_ok());
        p.images = vec!["docker.io/library/node:*".into(), "alpine:3.20".into()];
        assert!(p.image("docker.io/library/node:22").is_ok());
        assert!(p.image("alpine:3.20").is_ok());
        assert!(p.image("alpine:3.21").is_err());
        assert!(p.publish(0).is_ok());
        assert!(p.publish(1).is_err());
        assert!(p.one_more_box(1).is_ok());
        assert!(p.one_more_box(2).is_err());
        p.max_memory_mib = Some(1024);
        assert!(p.resources(Some(1024), None).is_ok());
        assert!(
            p.resources(Some(2048), None)
                .unwrap_err()
                .0
                .contains("--max-memory 2048m")
        );
        assert!(p.may_use("x", true).is_ok());
        assert!(p.may_use("x", false).unwrap_err().0.contains("--any-box"));
    }
}
