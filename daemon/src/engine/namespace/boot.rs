//! Starting a box: its root assembled in a private mount namespace, its
//! user namespace mapped, then bubblewrap.
//!
//! `boxd __box PLAN` is a single-threaded helper the daemon starts for
//! every box start, with an empty environment and no descriptors but its
//! channel (fd 3) and those bubblewrap needs. It
//!
//! 1. in a mount namespace of its own, opens every host mount source
//!    (`O_PATH`, no symlink on the way: sources are stored resolved at
//!    create, so a symlink a box planted in a writable mount since cannot
//!    redirect a mount);
//! 2. mounts the box's root on the stage directory [`STAGE`]: an overlay
//!    of the image (shared, read-only) and the box's upper directory, or
//!    the box's own copy; then binds the mounts onto their guest paths,
//!    resolved inside that root;
//! 3. joins a new user namespace that the daemon maps ([`super::userns`]);
//! 4. executes bubblewrap, which binds the stage as `/` and does the rest
//!    (pid, ipc, uts and network namespaces, `/proc`, `/dev`, seccomp,
//!    the box's init).
//!
//! When boxd runs as root, steps 1–2 run as the host's root, before the
//! user namespace exists: the box never holds host privileges, and
//! bubblewrap finds the box's root at `/tmp` in its mount namespace (the
//! daemon's home may be unreachable for box root). A mount whose source
//! belongs to an ordinary host user is idmapped so that the user's files
//! are box root's and box root writes as that user, never as host root.
//! When boxd is an ordinary user, steps 1–2 run as box root after step 3
//! (mounting needs the namespace's capabilities), and the overlay keeps
//! its metadata in `user.*` attributes (`userxattr`).
//!
//! The helper reports `warn …` lines and `fail …` on the channel (`fail
//! precondition …` for what the box's spec asks and cannot be, `fail
//! overlay …` when no overlay mounts); the channel closes when bubblewrap
//! runs.

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use serde::{Deserialize, Serialize};

/// The argument that selects [`helper_main`] in `main`.
pub const HELPER_ARG: &str = "__box";
/// Where the box's root is assembled in the helper's own mount namespace
/// (covering the host's `/tmp` there only).
pub const STAGE: &str = "/tmp";
const CHANNEL_FD: RawFd = 3;

/// What the helper does, serialized as its argument.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Plan {
    pub root: Root,
    pub mounts: Vec<PlannedMount>,
    /// Whether the user namespace has a range (`setgroups` allowed).
    pub range: bool,
    /// boxd is root: assemble before the user namespace exists.
    pub privileged: bool,
    /// Host uid and gid of box root (owner of the mount points made here).
    pub box_root: (u32, u32),
    pub bwrap: PathBuf,
    pub bwrap_args: Vec<String>,
    /// `RLIMIT_NPROC` for the box's processes (per uid in the box).
    pub nproc: Option<u64>,
    /// Only try: exit once the root is mounted and the user namespace
    /// mapped, without starting bubblewrap.
    pub probe: bool,
    /// The box's CA (PEM), when it has secrets: the box is made to trust
    /// it ([`install_trust`]).
    #[serde(default)]
    pub trust: Option<String>,
}

/// The box's root filesystem.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Root {
    /// The image (read-only, shared by every box of it) under the box's
    /// own upper directory.
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        /// The box's disk: a file system image of its disk budget, mounted
        /// (loop) where `upper` and `work` are, so that writes past the
        /// budget fail with "no space left" (boxd as root only).
        disk: Option<(PathBuf, PathBuf)>,
        /// The image's ids as the box's (a box with a range of its own,
        /// boxd as root): the lower layer is an idmapped mount.
        #[serde(default)]
        lower_ids: Option<LowerIds>,
    },
    /// A directory of the box's own (a full copy of the image).
    Dir(PathBuf),
}

/// The image's files belong to the pool's first range (`from`, box root's
/// uid and gid there); a box with a range of its own sees them as its
/// (`to`), through an idmapped mount of the one shared copy.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct LowerIds {
    pub from: (u32, u32),
    pub to: (u32, u32),
    pub count: u32,
}

/// A host path bound into the box.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlannedMount {
    /// Resolved at create: opened with no symlink allowed.
    pub host_path: PathBuf,
    /// Absolute and normalized; symlinks are resolved inside the box here.
    pub guest_path: String,
    pub read_only: bool,
    /// Show the source's files of this host owner as a box user's (an
    /// idmapped mount; boxd as root only).
    pub owner: Option<MountOwner>,
}

/// An idmapped mount's owner: host ids `host` are box ids `as_box` (box
/// root, or the keep-id user); the box's other ids write as themselves
/// (their unprivileged host ids), and nothing else is mapped.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct MountOwner {
    pub host: (u32, u32),
    pub as_box: (u32, u32),
}

/// `boxd __box PLAN-JSON`.
pub fn helper_main(args: Vec<OsString>) -> ! {
    // SAFETY: fd 3 was set up by the daemon for us.
    let mut channel = unsafe { UnixStream::from_raw_fd(CHANNEL_FD) };
    let result = args
        .first()
        .and_then(|a| serde_json::from_slice::<Plan>(a.as_bytes()).ok())
        .ok_or_else(|| "bad helper arguments".to_owned())
        .and_then(|plan| boot(&plan, &mut channel));
    let Err(why) = result;
    let _ = writeln!(channel, "fail {}", why.replace('\n', " "));
    std::process::exit(125)
}

fn boot(plan: &Plan, channel: &mut UnixStream) -> Result<std::convert::Infallible, String> {
    // Sources are opened in the new mount namespace (a mount of another
    // namespace cannot be bound) and before the root covers the stage.
    let sources = || {
        plan.mounts
            .iter()
            .map(|m| open_source(&m.host_path))
            .collect::<Result<Vec<_>, _>>()
    };
    if plan.privileged {
        private_mounts()?;
        assemble(plan, &sources()?, channel)?;
        // The box's namespace is box root's, not host root's.
        super::userns::enter(channel, plan.range, Some(plan.box_root))?;
    } else {
        super::userns::enter(channel, plan.range, None)?;
        private_mounts()?;
        assemble(plan, &sources()?, channel)?;
    }
    box_limits(channel);
    if plan.probe {
        std::process::exit(0);
    }
    if let Some(ca) = &plan.trust {
        // As box root, in the box's own root: nothing here is the host's.
        for warning in install_trust(Path::new(STAGE), ca) {
            let _ = writeln!(channel, "warn {warning}");
        }
    }
    if let Some(n) = plan.nproc {
        let lim = libc::rlimit {
            rlim_cur: n,
            rlim_max: n,
        };
        // SAFETY: setrlimit with a valid pointer.
        unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &lim) };
    }
    nix::unistd::chdir("/").map_err(|e| format!("chdir /: {e}"))?;
    // bubblewrap needs these to set the box up, and drops them all (but
    // from the bounding set) for the box's processes: keep no more.
    for cap in 0..64u32 {
        if BWRAP_CAPS & (1 << cap) == 0 {
            // SAFETY: prctl with integer arguments.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        }
    }
    let mut argv = vec![plan.bwrap.as_os_str().as_bytes().to_vec()];
    argv.extend(plan.bwrap_args.iter().map(|a| a.as_bytes().to_vec()));
    let argv: Vec<CString> = argv
        .into_iter()
        .map(CString::new)
        .collect::<Result<_, _>>()
        .map_err(|_| "a NUL byte in bubblewrap's arguments".to_owned())?;
    // The set-id filter ([`super::setid`]), for bubblewrap and everything
    // it starts: box root may install it (CAP_SYS_ADMIN in its own
    // namespace); its listener goes to the supervisor, never into the box.
    let listener = super::setid::install(&super::setid::program())
        .map_err(|e| format!("install the set-id seccomp filter: errno {e}"))?;
    super::setid::pass_boot_listener(listener)?;
    // The channel closes as bubblewrap starts: nothing in the box may
    // hold it.
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(CHANNEL_FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    let env: [CString; 0] = [];
    let err = nix::unistd::execve(&argv[0], &argv, &env).unwrap_err();
    Err(format!("cannot run {}: {err}", plan.bwrap.display()))
}

/// Makes the box at `root` trust its CA `ca` beside its own roots
/// ([`boxd_egress::trust`]): each bundle the image has (a plain file,
/// reached with no symlink: a link such as Alpine's `cert.pem` leads to
/// one that is written) becomes the merged bundle; boxd's own copies go to
/// `/etc/boxd` and the CA to `/usr/local/share/ca-certificates` (where
/// `update-ca-certificates` keeps it). Run as box root after the root is
/// assembled, so every path is the box's own and resolved beneath it.
/// Returns what could not be done.
fn install_trust(root: &Path, ca: &str) -> Vec<String> {
    use boxd_egress::trust;
    use boxd_fs::roots::{Found, Root};
    let mut warnings = Vec::new();
    // Readable by every user of the box (boxd's umask is private).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let root = match Root::open(root) {
        Ok(root) => root,
        Err(e) => return vec![format!("the box's CA is not installed: {e}")],
    };
    let rel = |abs: &str| PathBuf::from(abs.trim_start_matches('/'));
    let mut image: Option<Vec<u8>> = None;
    let mut targets = Vec::new();
    for path in trust::BUNDLE_PATHS {
        if root.find(&rel(path)) == Found::File {
            if image.is_none() {
                image = root.read(&rel(path), trust::MAX_BUNDLE as u64).ok();
            }
            targets.push(*path);
        }
    }
    // No bundle in the image: the host's roots (read as boxd's user could).
    let host = match image {
        Some(_) => Vec::new(),
        None => trust::BUNDLE_PATHS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .unwrap_or_default(),
    };
    let Some(bundle) = trust::merged(image.as_deref(), &host, ca) else {
        return vec![
            "neither the image nor the host has a CA bundle: HTTPS to the box's secrets' hosts will not verify".into(),
        ];
    };
    let mut write = |path: &str, text: &str| {
        let rel = rel(path);
        let made = match rel.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => root.make_dirs(dir),
            _ => Ok(()),
        };
        let written = made
            .and_then(|()| root.write(&rel, text.as_bytes()))
            .and_then(|()| root.open_at(&rel, nix::fcntl::OFlag::O_RDONLY))
            .and_then(|fd| {
                nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_truncate(0o644))
                    .map_err(|e| root.failure(&rel, e))
            });
        if let Err(e) = written {
            warnings.push(format!(
                "cannot write {path} for the box's CA: {}",
                e.message
            ));
        }
    };
    for path in targets {
        write(path, &bundle);
    }
    write(trust::BOXD_BUNDLE, &bundle);
    write(trust::BOXD_CA, ca);
    write(trust::LOCAL_CA, ca);
    warnings
}

/// What one box may take of the per-user resources the kernel counts in
/// its user namespace (`/proc/sys/user/*`, written as the namespace's root
/// before anything of the box runs): every box's share of its owner's
/// host-wide count is bounded, so one box cannot use up the instances and
/// watches of everything else its owner runs.
pub const BOX_LIMITS: &[(&str, u64)] = &[
    ("max_inotify_instances", 64),
    ("max_inotify_watches", 65536),
];

fn box_limits(channel: &mut UnixStream) {
    for (name, value) in BOX_LIMITS {
        let path = format!("/proc/sys/user/{name}");
        if let Err(e) = std::fs::write(&path, value.to_string()) {
            let _ = writeln!(channel, "warn cannot bound the box's {name}: {e}");
        }
    }
}

/// A mount namespace of the helper's own, receiving the host's mount
/// events but sending none back.
fn private_mounts() -> Result<(), String> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("cannot create a mount namespace: {e}"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(|e| format!("make / a slave mount: {e}"))
}

/// Opens a mount source with no symlink anywhere in its path.
fn open_source(path: &Path) -> Result<OwnedFd, String> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| "a NUL byte in a path")?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: openat2 with a valid path and a correctly sized struct.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c.as_ptr(),
            &how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(match err.raw_os_error() {
            Some(libc::ELOOP) => format!(
                "precondition mount {}: a part of this path became a symbolic link after the box was created; recreate the box to mount where it now leads",
                path.display()
            ),
            Some(libc::ENOENT) => format!(
                "precondition mount {}: no such file or directory on the host",
                path.display()
            ),
            _ => format!("precondition mount {}: {err}", path.display()),
        });
    }
    // SAFETY: the kernel just returned this descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The root on [`STAGE`], then every mount on its resolved guest path.
fn assemble(plan: &Plan, sources: &[OwnedFd], channel: &mut UnixStream) -> Result<(), String> {
    let stage = Path::new(STAGE);
    match &plan.root {
        Root::Overlay {
            lower,
            upper,
            work,
            disk,
            lower_ids,
        } => {
            if let Some((image, at)) = disk {
                mount_disk(image, at, plan.box_root)
                    .map_err(|e| format!("mount the box's disk {}: {e}", image.display()))?;
                move_disk_files(upper, plan.box_root)
                    .map_err(|e| format!("move the files of the box's disk to its ids: {e}"))?;
            }
            // The overlay's options show in the box's mountinfo: they name
            // neutral paths (binds on a scratch tmpfs of this namespace),
            // never boxd's home or the box's id.
            // Opened first: the scratch tmpfs covers the host's /tmp, where
            // boxd's home may be.
            // overlayfs wants upper and work on one mount: their directory
            // is bound, as `b`.
            let (Some(own), Some(up), Some(wk)) = (
                upper.parent().filter(|p| Some(*p) == work.parent()),
                upper.file_name(),
                work.file_name(),
            ) else {
                return Err("the overlay's upper and work directories must be side by side".into());
            };
            let own = own.to_path_buf();
            let dirs = [(lower, "l"), (&own, "b")]
                .into_iter()
                .map(|(dir, name)| {
                    nix::fcntl::open(
                        dir.as_path(),
                        nix::fcntl::OFlag::O_PATH
                            | nix::fcntl::OFlag::O_DIRECTORY
                            | nix::fcntl::OFlag::O_CLOEXEC,
                        nix::sys::stat::Mode::empty(),
                    )
                    .map(|fd| (fd, dir, name))
                    .map_err(|e| format!("open {}: {e}", dir.display()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            mount(
                Some("boxd-stage"),
                stage,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some("mode=0700,size=64k"),
            )
            .map_err(|e| format!("mount the stage's scratch tmpfs: {e}"))?;
            for (fd, dir, name) in &dirs {
                let at = stage.join(name);
                std::fs::create_dir(&at).map_err(|e| format!("create {}: {e}", at.display()))?;
                if let (Some(ids), "l") = (lower_ids, *name) {
                    // The shared image, its ids moved to the box's range.
                    let userns = id_userns(
                        &range_lines(ids.from.0, ids.to.0, ids.count),
                        &range_lines(ids.from.1, ids.to.1, ids.count),
                    )
                    .map_err(|e| format!("a user namespace for the image's ids: {e}"))?;
                    let target = nix::fcntl::open(
                        &at,
                        nix::fcntl::OFlag::O_PATH
                            | nix::fcntl::OFlag::O_DIRECTORY
                            | nix::fcntl::OFlag::O_NOFOLLOW
                            | nix::fcntl::OFlag::O_CLOEXEC,
                        nix::sys::stat::Mode::empty(),
                    )
                    .map_err(|e| format!("open {}: {e}", at.display()))?;
                    bind(fd, &target, true, Some(userns.as_raw_fd()))
                        .map_err(|e| format!("idmap the image {}: {e}", dir.display()))?;
                    continue;
                }
                let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
                mount(
                    Some(source.as_str()),
                    &at,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(|e| format!("bind {}: {e}", dir.display()))?;
            }
            let root = stage.join("r");
            std::fs::create_dir(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
            let mut data = format!(
                "lowerdir={s}/l,upperdir={s}/b/{u},workdir={s}/b/{w}",
                s = stage.display(),
                u = up.to_string_lossy(),
                w = wk.to_string_lossy()
            );
            if !plan.privileged {
                data.push_str(",userxattr");
            }
            mount(
                Some("overlay"),
                &root,
                Some("overlay"),
                MsFlags::empty(),
                Some(data.as_str()),
            )
            .map_err(|e| format!("overlay mount the box's overlay root: {e}"))?;
            // The overlay becomes the stage (over the scratch tmpfs).
            mount(
                Some(root.as_path()),
                stage,
                None::<&str>,
                MsFlags::MS_MOVE,
                None::<&str>,
            )
            .map_err(|e| format!("move the box's overlay root onto the stage: {e}"))?;
        }
        Root::Dir(dir) => mount(
            Some(dir.as_path()),
            stage,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| format!("bind the box's root: {e}"))?,
    }
    let mut idmaps: Vec<(MountOwner, OwnedFd)> = Vec::new();
    for (m, source) in plan.mounts.iter().zip(sources) {
        let guest = super::options::resolve_target(stage, &m.guest_path)
            .map_err(|e| format!("precondition {e}"))?;
        let is_dir = nix::sys::stat::fstat(source)
            .map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map_err(|e| format!("stat {}: {e}", m.host_path.display()))?;
        let target = mount_point(stage, &guest, is_dir, plan.box_root)?;
        let idmap = match m.owner {
            Some(owner) => match idmaps.iter().find(|(o, _)| *o == owner) {
                Some((_, fd)) => Some(fd.as_raw_fd()),
                None => match idmap_userns(owner, plan.box_root) {
                    Ok(fd) => {
                        idmaps.push((owner, fd));
                        idmaps.last().map(|(_, fd)| fd.as_raw_fd())
                    }
                    Err(e) => {
                        let _ = writeln!(
                            channel,
                            "warn mount {}: cannot map its owner to box root ({e}); the box sees its files as nobody's",
                            m.host_path.display()
                        );
                        None
                    }
                },
            },
            None => None,
        };
        match bind(source, &target, m.read_only, idmap) {
            Err(e) if idmap.is_some() && e.contains("mount_setattr") => {
                // A file system that cannot be idmapped (FUSE, NFS, …).
                let _ = writeln!(
                    channel,
                    "warn mount {}: its file system cannot be idmapped ({e}); the box writes there as its own ids",
                    m.host_path.display()
                );
                bind(source, &target, m.read_only, None)
            }
            other => other,
        }
        .map_err(|e| format!("mount {} on {guest}: {e}", m.host_path.display()))?;
    }
    Ok(())
}

/// After [`mount_disk`]: the files on the box's disk belong to another
/// range of the pool than the box's (a clone's copy of another box's
/// disk): moved to the box's, once.
fn move_disk_files(upper: &Path, box_root: (u32, u32)) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(upper).map_err(|e| e.to_string())?;
    let from = (meta.uid(), meta.gid());
    if !super::idmap::ranges_apart(from, box_root) {
        return Ok(());
    }
    let disk = upper.parent().unwrap_or(upper);
    super::treecopy::shift_owners(disk, from, box_root)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Attaches `image` to a free loop device (cleared when unmounted) and
/// mounts its ext4 file system on `at`, then makes the overlay's upper and
/// work directories in it, owned by box root.
fn mount_disk(image: &Path, at: &Path, owner: (u32, u32)) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(image)
        .map_err(|e| e.to_string())?;
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| format!("/dev/loop-control: {e}"))?;
    let mut device = None;
    for _ in 0..32 {
        // SAFETY: ioctl without a pointer argument.
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(format!(
                "no free loop device: {}",
                std::io::Error::last_os_error()
            ));
        }
        let path = format!("/dev/loop{n}");
        let Ok(loop_dev) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        let mut config = LoopConfig {
            fd: file.as_raw_fd() as u32,
            block_size: 0,
            info: [0u8; 232],
            reserved: [0u64; 8],
        };
        // lo_flags is the u32 at byte 52 of loop_info64.
        config.info[52..56].copy_from_slice(&LO_FLAGS_AUTOCLEAR.to_ne_bytes());
        // SAFETY: LOOP_CONFIGURE reads a loop_config from a valid pointer.
        if unsafe { libc::ioctl(loop_dev.as_raw_fd(), LOOP_CONFIGURE, &config) } == 0 {
            device = Some((path, loop_dev));
            break;
        }
        // Taken by someone else meanwhile (EBUSY): the next free one.
    }
    let (path, _device) = device.ok_or("no loop device could be configured")?;
    std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
    mount(
        Some(path.as_str()),
        at,
        Some("ext4"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        // Space the box frees goes back to the host (the file is sparse).
        Some("discard"),
    )
    .map_err(|e| format!("mount {path}: {e}"))?;
    for (dir, mode) in [("upper", 0o755), ("work", 0o700)] {
        let dir = at.join(dir);
        if !dir.is_dir() {
            std::fs::create_dir(&dir)
                .and_then(|()| {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))
                })
                .and_then(|()| std::os::unix::fs::lchown(&dir, Some(owner.0), Some(owner.1)))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    /// struct loop_info64.
    info: [u8; 232],
    reserved: [u64; 8],
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// Opens the mount point `guest` (resolved inside the box) beneath the
/// stage, one component at a time, never following a symlink, making what
/// is missing (directories, or an empty file last for a file mount) owned
/// by box root. The box's own files (and those of other boxes, in shared
/// mounts) may change meanwhile: a component that became a symlink since
/// `guest` was resolved is an error, never followed, so nothing is ever
/// made outside the box's root. Returns an `O_PATH` descriptor of it.
fn mount_point(
    stage: &Path,
    guest: &str,
    is_dir: bool,
    owner: (u32, u32),
) -> Result<OwnedFd, String> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    let look = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut at: OwnedFd = nix::fcntl::open(stage, look | OFlag::O_DIRECTORY, Mode::empty())
        .map_err(|e| format!("open the stage: {e}"))?;
    let parts: Vec<&str> = guest.split('/').filter(|c| !c.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let dir = !last || is_dir;
        let flags = if dir { look | OFlag::O_DIRECTORY } else { look };
        let changed = || {
            format!(
                "the mount point {guest} changed while the box started ({part} is now a symlink or not a directory); start it again"
            )
        };
        let next = match openat(at.as_fd(), *part, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::errno::Errno::ENOENT) => {
                let made = if dir {
                    nix::sys::stat::mkdirat(at.as_fd(), *part, Mode::from_bits_truncate(0o755))
                } else {
                    openat(
                        at.as_fd(),
                        *part,
                        OFlag::O_WRONLY
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        Mode::from_bits_truncate(0o644),
                    )
                    .map(drop)
                };
                match made {
                    Ok(()) => {
                        let _ = nix::unistd::fchownat(
                            at.as_fd(),
                            *part,
                            Some(owner.0.into()),
                            Some(owner.1.into()),
                            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                        );
                    }
                    Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => return Err(format!("create the mount point {guest} ({part}): {e}")),
                }
                openat(at.as_fd(), *part, flags, Mode::empty()).map_err(|_| changed())?
            }
            Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => return Err(changed()),
            Err(e) => return Err(format!("open the mount point {guest} ({part}): {e}")),
        };
        at = next;
    }
    Ok(at)
}

/// Binds `source` on `target`: recursively, or (idmapped) just that mount;
/// then no setuid, no devices, and read-only when asked, throughout.
fn bind(
    source: &OwnedFd,
    target: &OwnedFd,
    read_only: bool,
    idmap: Option<RawFd>,
) -> Result<(), String> {
    let mut attr = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if read_only {
        attr |= MOUNT_ATTR_RDONLY;
    }
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as u32
        | libc::AT_EMPTY_PATH as u32
        | if idmap.is_none() {
            libc::AT_RECURSIVE as u32
        } else {
            0
        };
    // SAFETY: open_tree on a descriptor we own, with an empty path.
    let tree = unsafe { libc::syscall(SYS_OPEN_TREE, source.as_raw_fd(), c"".as_ptr(), flags) };
    if tree < 0 {
        return Err(format!("open_tree: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as RawFd) };
    let mut set = MountAttr {
        attr_set: attr,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    if let Some(userns) = idmap {
        set.attr_set |= MOUNT_ATTR_IDMAP;
        set.userns_fd = userns as u64;
    }
    let recursive = if idmap.is_none() {
        libc::AT_RECURSIVE
    } else {
        0
    };
    // SAFETY: mount_setattr on a detached tree we own, valid struct.
    let rc = unsafe {
        libc::syscall(
            SYS_MOUNT_SETATTR,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | recursive) as u32,
            &set,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount_setattr: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: move_mount of a detached tree we own onto the mount point's
    // descriptor (no path is resolved again).
    let rc = unsafe {
        libc::syscall(
            SYS_MOVE_MOUNT,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return Err(format!("move_mount: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// A user namespace for the idmapped mount of a host mount's source
/// ([`idmap_lines`]).
fn idmap_userns(owner: MountOwner, box_root: (u32, u32)) -> Result<OwnedFd, String> {
    id_userns(
        &idmap_lines(owner.host.0, owner.as_box.0, box_root.0),
        &idmap_lines(owner.host.1, owner.as_box.1, box_root.1),
    )
}

/// `count` ids from `from` (on disk) shown as the ids from `to`.
fn range_lines(from: u32, to: u32, count: u32) -> String {
    format!("{from} {to} {count}\n")
}

/// A user namespace with the maps `uid_map` and `gid_map`, to idmap a
/// mount with: made by a child that unshares and waits while this
/// (privileged) process writes its maps.
fn id_userns(uid_map: &str, gid_map: &str) -> Result<OwnedFd, String> {
    let (ready_r, ready_w) = nix::unistd::pipe().map_err(|e| e.to_string())?;
    let (hold_r, hold_w) = nix::unistd::pipe().map_err(|e| e.to_string())?;
    // SAFETY: this helper is single-threaded; the child only makes raw
    // system calls.
    match unsafe { nix::unistd::fork() }.map_err(|e| e.to_string())? {
        nix::unistd::ForkResult::Child => {
            drop((ready_r, hold_w));
            // SAFETY: raw system calls in the forked child.
            unsafe {
                let ok = libc::unshare(libc::CLONE_NEWUSER) == 0;
                libc::write(ready_w.as_raw_fd(), [u8::from(ok)].as_ptr().cast(), 1);
                let mut b = [0u8; 1];
                libc::read(hold_r.as_raw_fd(), b.as_mut_ptr().cast(), 1);
                libc::_exit(0)
            }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop((ready_w, hold_r));
            let mut ok = [0u8; 1];
            let _ = nix::unistd::read(&ready_r, &mut ok);
            let result = (|| {
                if ok[0] != 1 {
                    return Err("cannot create a user namespace".to_owned());
                }
                let write = |file: &str, text: String| {
                    std::fs::write(format!("/proc/{child}/{file}"), text)
                        .map_err(|e| format!("{file}: {e}"))
                };
                write("uid_map", uid_map.to_owned())?;
                write("gid_map", gid_map.to_owned())?;
                std::fs::File::open(format!("/proc/{child}/ns/user"))
                    .map(OwnedFd::from)
                    .map_err(|e| e.to_string())
            })();
            drop(hold_w);
            let _ = nix::sys::wait::waitpid(child, None);
            result
        }
    }
}

/// The map of an idmapped mount of a host directory, as `uid_map` lines
/// (inside: ids on the disk; outside: the box's host ids from `base`):
/// the host `owner` is box id `as_box`, and nothing else is mapped. So
/// the box writes there only as that one id (any other box id gets
/// `EOVERFLOW`), and a `chown` to any other id fails: nothing a box leaves
/// in a mount belongs to an id of any box. Host root is never mapped.
fn idmap_lines(owner: u32, as_box: u32, base: u32) -> String {
    format!("{owner} {} 1\n", base + as_box)
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// bubblewrap's required capabilities: sys_admin, sys_chroot, net_admin,
/// setuid, setgid, sys_ptrace (its `REQUIRED_CAPS`).
pub const BWRAP_CAPS: u64 = 1 << 21 | 1 << 18 | 1 << 12 | 1 << 7 | 1 << 6 | 1 << 19;

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const OPEN_TREE_CLONE: u32 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
const MOUNT_ATTR_RDONLY: u64 = 0x01;
const MOUNT_ATTR_NOSUID: u64 = 0x02;
const MOUNT_ATTR_NODEV: u64 = 0x04;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
// The new mount API's numbers are the same on every architecture.
const SYS_OPEN_TREE: libc::c_long = 428;
const SYS_MOVE_MOUNT: libc::c_long = 429;
const SYS_MOUNT_SETATTR: libc::c_long = 442;

/// The owner of `path` when boxd (as root) should show its files as box
/// root's: an ordinary user's, with their group (or, for a directory of
/// root's group, the user's primary group). `None` for root's files (a box
/// never writes as host root) and for files already in the box's range:
/// the mount then maps the box's own id alone.
pub fn mount_owner(path: &Path, box_root: (u32, u32), range: u32) -> Option<(u32, u32)> {
    let meta = std::fs::metadata(path).ok()?;
    let in_range = |id: u32, base: u32| id >= base && id - base < range;
    if meta.uid() == 0 || in_range(meta.uid(), box_root.0) {
        return None;
    }
    let gid = match meta.gid() {
        0 => nix::unistd::User::from_uid(meta.uid().into())
            .ok()
            .flatten()
            .map(|u| u.gid.as_raw())
            .filter(|g| *g != 0)
            .unwrap_or(meta.uid()),
        g => g,
    };
    Some((meta.uid(), gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_maps_its_owner_as_one_box_id_and_nothing_else() {
        let base = 0x7001_0000;
        assert_eq!(idmap_lines(1000, 0, base), format!("1000 {base} 1\n"));
        assert_eq!(
            idmap_lines(1000, 1000, base),
            format!("1000 {} 1\n", base + 1000)
        );
        // A root-owned source: the box's own id alone.
        assert_eq!(idmap_lines(base, 0, base), format!("{base} {base} 1\n"));
        assert_eq!(
            range_lines(0x7000_0000, base, 65_536),
            format!("1879048192 {base} 65536\n")
        );
    }
}
