//! What a box made through `boxctl mcp` may touch: set by the person who
//! starts the server (flags), never by the agent that calls its tools.
//! Every check here is pure; a refusal says what the user would have to
//! allow.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use boxd_client::roots::{self, Found, Root};

/// The user's ceiling for boxes made and used through MCP.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Host directories that may be mounted, or copied from and to (and
    /// anything beneath them), each held open since the server started:
    /// every use of a path beneath one walks down from its descriptor
    /// ([`boxd_client::roots`]). None by default.
    pub mounts: Vec<Arc<Root>>,
    /// Hosts a box may be allowed to reach. None by default.
    pub net: Vec<String>,
    /// Images that may be used (exact references, or a prefix ending in
    /// `*`); empty: any.
    pub images: Vec<String>,
    /// Whether boxes may publish ports on the host.
    pub publish: bool,
    /// The most boxes this server may have made and not removed.
    pub max_boxes: usize,
    /// The most memory (MiB) and CPUs a box may have: a box that asks for
    /// none gets the ceiling.
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
    /// beneath an allowed directory by whole components once `.` and `..`
    /// are taken out (lexically: never through the file system, where a
    /// box with a mount plants symlinks). What is returned is used only
    /// beneath that directory's descriptor, which follows no symlink.
    pub fn host_path(&self, path: &str) -> Result<HostPath, Refused> {
        let p = Path::new(path);
        if !p.is_absolute() {
            return Err(Refused(format!(
                "host path {path:?} is not absolute: name it from /"
            )));
        }
        let contents = boxd_client::archive::names_contents(path);
        if let Some((root, rel)) = roots::locate(&self.mounts, p) {
            let root = self
                .mounts
                .iter()
                .find(|r| std::ptr::eq(r.as_ref(), root))
                .expect("located among them")
                .clone();
            return Ok(HostPath {
                root,
                rel,
                contents,
            });
        }
        let normal = roots::normalize(p);
        Err(Refused(if self.mounts.is_empty() {
            format!(
                "host path {} is not allowed: this MCP server allows no host paths (the user would have to start it with --allow-mount DIR)",
                normal.display()
            )
        } else {
            format!(
                "host path {} is outside what this MCP server allows ({}); the user would have to start it with --allow-mount for that directory",
                normal.display(),
                self.mounts
                    .iter()
                    .map(|d| d.path().display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        }))
    }

    /// A host directory the agent names to mount: [`Policy::host_path`],
    /// and a plain directory there now, reached with no symlink (boxd
    /// binds it by the path returned).
    pub fn mount_path(&self, path: &str) -> Result<PathBuf, Refused> {
        let h = self.host_path(path)?;
        match h.root.find(&h.rel) {
            Found::Dir => Ok(h.path()),
            Found::Missing => Err(Refused(format!(
                "host path {} does not exist",
                h.path().display()
            ))),
            Found::File => Err(Refused(format!(
                "host path {} is not a directory",
                h.path().display()
            ))),
            Found::Leaves => Err(Refused(format!(
                "host path {} goes through a symlink or something that is not a directory, which this MCP server never follows",
                h.path().display()
            ))),
        }
    }

    /// The memory (MiB) and CPUs a box gets: what it asks for, the ceiling
    /// when it asks for none; more than the ceiling is refused.
    pub fn resources(
        &self,
        memory_mib: Option<u32>,
        cpus: Option<u32>,
    ) -> Result<(Option<u32>, Option<u32>), Refused> {
        self.within(memory_mib, cpus)?;
        Ok((memory_mib.or(self.max_memory_mib), cpus.or(self.max_cpus)))
    }

    /// A box that exists (a clone's source): within the ceiling, and
    /// limited wherever the ceiling is set (a box without a limit would
    /// have none).
    pub fn existing_resources(
        &self,
        memory_mib: Option<u32>,
        cpus: Option<u32>,
    ) -> Result<(), Refused> {
        self.within(memory_mib, cpus)?;
        if let (Some(max), None) = (self.max_memory_mib, memory_mib) {
            return Err(Refused(format!(
                "the box has no memory limit, and this MCP server allows at most {max} MiB a box (the user would have to start it without --max-memory)"
            )));
        }
        if let (Some(max), None) = (self.max_cpus, cpus) {
            return Err(Refused(format!(
                "the box has no CPU limit, and this MCP server allows at most {max} CPUs a box (the user would have to start it without --max-cpus)"
            )));
        }
        Ok(())
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

    fn within(&self, memory_mib: Option<u32>, cpus: Option<u32>) -> Result<(), Refused> {
        if let (Some(max), Some(asked)) = (self.max_memory_mib, memory_mib)
            && asked > max
        {
            return Err(Refused(format!(
                "{asked} MiB of memory is more than this MCP server allows ({max} MiB; the user would have to start it with --max-memory {asked}m)"
            )));
        }
        if let (Some(max), Some(asked)) = (self.max_cpus, cpus)
            && asked > max
        {
            return Err(Refused(format!(
                "{asked} CPUs is more than this MCP server allows ({max}; the user would have to start it with --max-cpus {asked})"
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

/// A host path beneath one of the policy's directories.
#[derive(Debug, Clone)]
pub struct HostPath {
    pub root: Arc<Root>,
    /// Below the root (empty: the root itself).
    pub rel: PathBuf,
    /// `DIR/.`: a directory's contents.
    pub contents: bool,
}

impl HostPath {
    /// The host path, for messages and for boxd's mounts.
    pub fn path(&self) -> PathBuf {
        if self.rel.as_os_str().is_empty() {
            self.root.path().to_path_buf()
        } else {
            self.root.path().join(&self.rel)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> (tempfile::TempDir, Policy) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proj/src")).unwrap();
        let root = Root::open(&dir.path().join("proj")).unwrap();
        let p = Policy {
            mounts: vec![Arc::new(root)],
            net: vec!["registry.npmjs.org".into()],
            max_boxes: 2,
            ..Default::default()
        };
        (dir, p)
    }

    #[test]
    fn no_host_path_by_default() {
        let e = Policy::default().host_path("/home/me/proj").unwrap_err();
        assert!(e.0.contains("--allow-mount"), "{e}");
    }

    #[test]
    fn host_paths_stay_beneath_what_is_allowed() {
        let (dir, p) = project();
        let proj = dir.path().join("proj").canonicalize().unwrap();
        let at = |rel: &str| format!("{}/{rel}", proj.display());
        let h = p.host_path(&at("src/../lib")).unwrap();
        assert_eq!(h.rel, PathBuf::from("lib"));
        assert_eq!(h.path(), proj.join("lib"));
        assert!(p.host_path(proj.to_str().unwrap()).is_ok());
        assert!(p.host_path(&at("src/.")).unwrap().contents);
        for bad in [
            at("../.ssh"),
            format!("{}2", proj.display()),
            at("../../../etc"),
            "relative/path".into(),
            "/".into(),
        ] {
            let e = p.host_path(&bad).unwrap_err();
            assert!(!e.0.contains(&format!("--allow-mount {bad}")), "{e}");
        }
    }

    #[test]
    fn a_symlink_beneath_an_allowed_directory_does_not_lead_out() {
        let (dir, p) = project();
        let proj = dir.path().join("proj");
        std::os::unix::fs::symlink("/etc", proj.join("evil")).unwrap();
        let evil = proj.join("evil");
        assert!(p.mount_path(evil.to_str().unwrap()).is_err());
        let h = p.host_path(&format!("{}/passwd", evil.display())).unwrap();
        assert!(
            h.root.read(&h.rel, 1 << 20).is_err(),
            "used beneath, never followed"
        );
        assert!(p.mount_path(proj.join("src").to_str().unwrap()).is_ok());
        assert!(p.mount_path(proj.join("new").to_str().unwrap()).is_err());
    }

    #[test]
    fn the_network_ceiling_names_what_to_allow() {
        let (_dir, p) = project();
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
        let (_dir, mut p) = project();
        assert!(p.image("anything:latest").is_ok());
        p.images = vec!["docker.io/library/node:*".into(), "alpine:3.20".into()];
        assert!(p.image("docker.io/library/node:22").is_ok());
        assert!(p.image("alpine:3.20").is_ok());
        assert!(p.image("alpine:3.21").is_err());
        assert!(p.publish(0).is_ok());
        assert!(p.publish(1).is_err());
        assert!(p.one_more_box(1).is_ok());
        assert!(p.one_more_box(2).is_err());
        assert_eq!(p.resources(None, None).unwrap(), (None, None));
        p.max_memory_mib = Some(1024);
        p.max_cpus = Some(2);
        assert_eq!(p.resources(Some(512), None).unwrap(), (Some(512), Some(2)));
        assert_eq!(
            p.resources(None, None).unwrap(),
            (Some(1024), Some(2)),
            "a box that asks for nothing gets the ceiling"
        );
        assert!(p.existing_resources(Some(1024), Some(1)).is_ok());
        assert!(
            p.existing_resources(None, Some(1)).is_err(),
            "an unlimited clone source"
        );
        assert!(p.existing_resources(Some(1024), None).is_err());
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
