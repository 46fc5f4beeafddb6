//! The box's mounts as a two-way table between host paths and box paths,
//! and the host-side check that a mapped path stays inside its mount.
//!
//! Invariants: a path maps only through a mount it is inside, by whole
//! components (`/work2` is not inside `/work`), through the most specific
//! mount when mounts nest; a path with a `..` component never maps to the
//! host (the box resolves it its own way); a host path found inside a
//! mount by [`Mounts::resolve_on_host`] has no symlink and no `..` on its
//! way down from the mount's root, and ends at a regular file or at
//! nothing.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use boxd_fs::roots::{Found, Root};

/// One mount: a host directory (canonical, as boxd stores it) seen in the
/// box at `guest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host: PathBuf,
    pub guest: PathBuf,
    pub read_only: bool,
}

/// The mounts of one box, each with its host directory held open since
/// the proxy started (`None`: it could not be opened with no symlink on
/// the way, so nothing inside it is served on the host).
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    mounts: Vec<Mount>,
    roots: Vec<Option<Arc<Root>>>,
}

/// A box path inside a mount, with its host counterpart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped<'a> {
    pub mount: &'a Mount,
    /// The mount's host directory, held open.
    pub root: Option<&'a Arc<Root>>,
    /// Below the mount's root (empty: the root itself).
    pub rel: PathBuf,
    pub host: PathBuf,
}

/// What is at a mapped path on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnHost {
    /// A regular file, reached with no symlink on the way.
    File,
    /// Nothing yet; the part of the path that exists has no symlink and
    /// ends in a directory (a write may create it there).
    Missing,
    /// A symlink, a `..`, something that is not a regular file, or a
    /// component that is not a directory: the path would leave the mount
    /// (or reach a FIFO or a device), so the host must not open it.
    Leaves,
}

impl Mounts {
    /// The table, each mount's host directory opened once, now: outermost
    /// first, and a mount nested in another one's host directory beneath
    /// that one's descriptor with no symlink on the way (the box can
    /// rename what is inside the outer mount, and swap the inner one's
    /// root for a symlink to anywhere).
    pub fn new(mounts: Vec<Mount>) -> Mounts {
        let mut order: Vec<usize> = (0..mounts.len()).collect();
        order.sort_by_key(|&i| mounts[i].host.components().count());
        let mut roots: Vec<Option<Arc<Root>>> = vec![None; mounts.len()];
        for i in order {
            let host = &mounts[i].host;
            let outer = roots
                .iter()
                .flatten()
                .filter_map(|r| r.relative(host).map(|rel| (r.clone(), rel)))
                .filter(|(_, rel)| !rel.as_os_str().is_empty())
                .max_by_key(|(r, _)| r.path().components().count());
            roots[i] = match outer {
                Some((outer, rel)) => Root::open_beneath(&outer, &rel, host).ok(),
                None => Root::open(host).ok(),
            }
            .map(Arc::new);
        }
        Mounts { mounts, roots }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Mount> {
        self.mounts.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.mounts.is_empty()
    }

    /// "HOST → GUEST, …", for messages.
    pub fn describe(&self) -> String {
        if self.mounts.is_empty() {
            return "none".into();
        }
        self.mounts
            .iter()
            .map(|m| {
                format!(
                    "{} → {}{}",
                    m.host.display(),
                    m.guest.display(),
                    if m.read_only { " (read-only)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A path the client sent (a host path), as the box sees it: through
    /// the mount whose host side holds it, judged as written and, failing
    /// that, after the host's symlinks (an editor may name the project by a
    /// symlinked path). A path already inside a mount's guest side (a
    /// client that names box paths, like `/workspace`) is kept as it is.
    /// `None`: outside every mount.
    pub fn host_to_box(&self, path: &str) -> Option<String> {
        let clean = clean(path)?;
        if let Some(p) = self.through(&clean, |m| &m.host, |m| &m.guest) {
            return Some(p);
        }
        if let Ok(canon) = clean.canonicalize()
            && let Some(p) = self.through(&canon, |m| &m.host, |m| &m.guest)
        {
            return Some(p);
        }
        self.longest(&clean, |m| &m.guest)
            .map(|_| clean.to_string_lossy().into_owned())
    }

    /// A path the agent sent (a box path) inside a mount, with its host
    /// counterpart; `None` outside every mount or with a `..` component.
    pub fn box_to_host(&self, path: &str) -> Option<Mapped<'_>> {
        let clean = clean(path)?;
        let mount = self.longest(&clean, |m| &m.guest)?;
        let rel = clean.strip_prefix(&mount.guest).ok()?.to_path_buf();
        let host = if rel.as_os_str().is_empty() {
            mount.host.clone()
        } else {
            mount.host.join(&rel)
        };
        let root = self
            .mounts
            .iter()
            .position(|m| std::ptr::eq(m, mount))
            .and_then(|i| self.roots[i].as_ref());
        Some(Mapped {
            mount,
            root,
            rel,
            host,
        })
    }

    /// A box path for the client to show: its host path inside a mount,
    /// else unchanged (it names the box's own files; the client has no
    /// better name for them).
    pub fn display_on_host(&self, path: &str) -> String {
        match self.box_to_host(path) {
            Some(m) => m.host.to_string_lossy().into_owned(),
            None => path.to_owned(),
        }
    }

    /// A `file:` URI of the client's as the box names the file (other URIs,
    /// and files outside every mount, unchanged).
    pub fn uri_to_box(&self, uri: &str) -> Option<String> {
        let path = file_uri_path(uri)?;
        let mapped = self.host_to_box(&path)?;
        (mapped != path).then(|| path_to_uri(&mapped))?
    }

    /// A `file:` URI of the agent's as the host names the file.
    pub fn uri_to_host(&self, uri: &str) -> Option<String> {
        let path = file_uri_path(uri)?;
        let mapped = self.box_to_host(&path)?;
        let host = mapped.host.to_string_lossy();
        (host != path).then(|| path_to_uri(&host))?
    }

    /// What is at `mapped` on the host, resolved down from the mount's root
    /// one component at a time with no symlink (`boxd_fs::beneath`).
    pub fn resolve_on_host(mapped: &Mapped<'_>) -> OnHost {
        let Some(root) = mapped.root else {
            return OnHost::Leaves;
        };
        if mapped.rel.as_os_str().is_empty() {
            // The mount's root is a directory, never a file to read or write.
            return OnHost::Leaves;
        }
        match root.find(&mapped.rel) {
            Found::File => OnHost::File,
            Found::Missing => OnHost::Missing,
            Found::Dir | Found::Leaves => OnHost::Leaves,
        }
    }

    /// The mount whose `side` holds `path` with the most components.
    fn longest(&self, path: &Path, side: impl Fn(&Mount) -> &PathBuf) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| path.starts_with(side(m)))
            .max_by_key(|m| side(m).components().count())
    }

    /// `path` moved from one side of its mount to the other.
    fn through(
        &self,
        path: &Path,
        from: impl Fn(&Mount) -> &PathBuf,
        to: impl Fn(&Mount) -> &PathBuf,
    ) -> Option<String> {
        let m = self.longest(path, &from)?;
        let rel = path.strip_prefix(from(m)).ok()?;
        let out = if rel.as_os_str().is_empty() {
            to(m).clone()
        } else {
            to(m).join(rel)
        };
        Some(out.to_string_lossy().into_owned())
    }
}

/// An absolute path with `.` and repeated slashes removed; `None` when it
/// is not absolute or has a `..` component (its meaning then depends on
/// symlinks that only the box can resolve).
pub fn clean(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if !p.is_absolute() || path.contains('\0') {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// The path of a `file:` URI (local host only), percent-decoded.
fn file_uri_path(uri: &str) -> Option<String> {
    let url = url::Url::parse(uri).ok()?;
    if url.scheme() != "file" {
        return None;
    }
    let path = url.to_file_path().ok()?;
    path.to_str().map(str::to_owned)
}

fn path_to_uri(path: &str) -> Option<String> {
    url::Url::from_file_path(path).ok().map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn table() -> Mounts {
        Mounts::new(vec![
            Mount {
                host: "/home/me/proj".into(),
                guest: "/workspace".into(),
                read_only: false,
            },
            Mount {
                host: "/home/me/cache".into(),
                guest: "/workspace/cache".into(),
                read_only: true,
            },
            Mount {
                host: "/srv/same".into(),
                guest: "/srv/same".into(),
                read_only: false,
            },
        ])
    }

    #[test]
    fn host_paths_map_into_the_box_by_whole_components() {
        let t = table();
        let to_box = |p| t.host_to_box(p);
        assert_eq!(to_box("/home/me/proj").as_deref(), Some("/workspace"));
        assert_eq!(
            to_box("/home/me/proj/src/./a.rs").as_deref(),
            Some("/workspace/src/a.rs")
        );
        assert_eq!(
            to_box("/home/me/cache/x").as_deref(),
            Some("/workspace/cache/x")
        );
        assert_eq!(to_box("/srv/same/x").as_deref(), Some("/srv/same/x"));
        // Already a box path: kept.
        assert_eq!(to_box("/workspace/a").as_deref(), Some("/workspace/a"));
        for outside in [
            "/home/me/proj2",
            "/home/me",
            "/etc/passwd",
            "relative",
            "/home/me/proj/../x",
        ] {
            assert_eq!(to_box(outside), None, "{outside}");
        }
    }

    #[test]
    fn box_paths_map_to_the_host_through_the_most_specific_mount() {
        let t = table();
        let m = t.box_to_host("/workspace/cache/pkg/x.js").unwrap();
        assert_eq!(m.host, Path::new("/home/me/cache/pkg/x.js"));
        assert!(m.mount.read_only);
        let m = t.box_to_host("/workspace//src/a.rs").unwrap();
        assert_eq!(m.host, Path::new("/home/me/proj/src/a.rs"));
        assert_eq!(m.rel, Path::new("src/a.rs"));
        assert_eq!(t.box_to_host("/workspace").unwrap().rel, Path::new(""));
        for outside in [
            "/etc/passwd",
            "/workspaces/x",
            "/workspace/../etc/passwd",
            "x",
        ] {
            assert!(t.box_to_host(outside).is_none(), "{outside}");
        }
        assert_eq!(t.display_on_host("/workspace/a"), "/home/me/proj/a");
        assert_eq!(t.display_on_host("/root/a"), "/root/a");
    }

    #[test]
    fn file_uris_map_both_ways_with_their_escapes() {
        let t = table();
        assert_eq!(
            t.uri_to_box("file:///home/me/proj/a%20b.rs").as_deref(),
            Some("file:///workspace/a%20b.rs")
        );
        assert_eq!(
            t.uri_to_host("file:///workspace/a%20b.rs").as_deref(),
            Some("file:///home/me/proj/a%20b.rs")
        );
        assert_eq!(t.uri_to_box("https://example.com/home/me/proj"), None);
        assert_eq!(t.uri_to_box("file:///etc/passwd"), None);
        assert_eq!(t.uri_to_host("file:///srv/same/x"), None, "unchanged");
    }

    #[test]
    fn the_host_side_refuses_symlinks_and_odd_files() {
        let dir = tempfile::tempdir().unwrap();
        let proj = dir.path().join("proj");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(proj.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(proj.join("src/a.rs"), "fn main() {}").unwrap();
        std::fs::write(outside.join("secret"), "host only").unwrap();
        symlink(&outside, proj.join("out")).unwrap();
        symlink("src/a.rs", proj.join("inner-link")).unwrap();
        symlink(outside.join("secret"), proj.join("secret-link")).unwrap();
        nix::unistd::mkfifo(&proj.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let t = Mounts::new(vec![Mount {
            host: proj.clone(),
            guest: "/workspace".into(),
            read_only: false,
        }]);
        let on_host = |p: &str| Mounts::resolve_on_host(&t.box_to_host(p).unwrap());
        assert_eq!(on_host("/workspace/src/a.rs"), OnHost::File);
        assert_eq!(on_host("/workspace/src/new.rs"), OnHost::Missing);
        assert_eq!(on_host("/workspace/new/dir/file"), OnHost::Missing);
        for leaves in [
            "/workspace/out/secret",
            "/workspace/out/new-file",
            "/workspace/inner-link",
            "/workspace/secret-link",
            "/workspace/fifo",
            "/workspace/src",
            "/workspace/src/a.rs/below",
            "/workspace",
        ] {
            assert_eq!(on_host(leaves), OnHost::Leaves, "{leaves}");
        }
    }
}
