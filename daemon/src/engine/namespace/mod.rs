//! The namespace engine: OCI images run under bubblewrap.
//!
//! A started box is one `bwrap` process tree in a user namespace of 65,536
//! ids that are never the host's root ([`idmap`]): mount, pid, ipc, uts and
//! network namespaces (only loopback, plus the egress proxy's port when
//! the box may reach hosts), the box's root filesystem, and a static init
//! that keeps them alive. Each running box has a [`supervisor`], a process
//! of its own outside the daemon's tree that starts it (the boot helper,
//! [`boot`], assembles the root and the user namespace, then becomes
//! bubblewrap), serves its egress proxy and holds its execs' stdio, so
//! that boxes and execs outlive the daemon, which finds them again at
//! start ([`Engine::adopt`]). Every exec is forked by the box's zygote
//! ([`nsexec`]), already inside its namespaces, so all processes of a box
//! share one pid namespace and die with it.
//!
//! Invariants:
//! - no process outlives its box: stopping kills bwrap, whose pid 1 dies
//!   with it (`--die-with-parent`), which ends the pid namespace;
//! - a box lives as long as its supervisor, not as long as the daemon;
//! - no process of a box runs as host root, holds the daemon's environment
//!   or a descriptor of the daemon's ([`helper`]);
//! - a box's files are the image, shared read-only by every box of it, under
//!   `BOX/upper`, the box's own writes (an overlay), or where overlays
//!   cannot be mounted, `BOX/rootfs`, a full copy; either survives stop,
//!   start and daemon restarts until the box is removed.

pub mod archive;
pub mod boot;
pub mod builtin;
pub mod cgroup;
mod confine;
mod copy;
mod disk_cache;
pub mod egress;
mod fdpass;
mod finish;
pub mod helper;
pub mod idmap;
pub mod nsexec;
pub mod options;
mod sandbox;
mod setid;
mod slots;
mod snapshots;
pub mod supervisor;
mod treecopy;
pub mod usage;
pub mod userns;
mod users;

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Adopted, Created, Engine, EngineBox, EngineInfo, ExecSpec, Images, InUse, Isolation, Report,
    Snapshot,
};
use crate::error::{Error, Result};
use crate::image::local::LocalImages;
use crate::image::{ImageConfig, Owners, Ownership};
use crate::model::BoxRecord;
use boot::{Plan, Root};
use idmap::IdMap;
use supervisor::Supervisor;

/// Runs the helper `mode` names (`boxd __MODE …`), if it names one of
/// this engine's; returns otherwise. Called first thing in `main`, while
/// the process is single-threaded.
pub fn helper_main(mode: &str, args: impl FnOnce() -> Vec<OsString>) {
    match mode {
        nsexec::HELPER_ARG => nsexec::helper_main(args()),
        supervisor::serve::HELPER_ARG => supervisor::serve::helper_main(),
        boot::HELPER_ARG => boot::helper_main(args()),
        userns::HELPER_ARG => userns::helper_main(args()),
        archive::HELPER_ARG => archive::helper_main(args()),
        treecopy::HELPER_ARG => treecopy::helper_main(args()),
        _ => {}
    }
}

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub struct NamespaceEngine {
    info: EngineInfo,
    bwrap: PathBuf,
    images: LocalImages,
    /// Bounds on box archives an import reads (`max-image-size`).
    archive_limits: crate::image::ImageLimits,
    /// The ids of every box.
    ids: IdMap,
    /// boxd runs as root (so it assembles boxes before their user
    /// namespace exists, and shows ordinary users' mounts as box root's).
    privileged: bool,
    /// `None`: boxes are overlays; `Some(why)`: full copies, and why.
    copies: Option<String>,
    /// Where boxes' cgroups go, if anywhere.
    cgroups: cgroup::Cgroups,
    /// What each box's own files take, measured in the background.
    disk: disk_cache::DiskCache,
    running: Arc<Mutex<HashMap<String, Running>>>,
    ended_tx: tokio::sync::mpsc::UnboundedSender<Report>,
    ended_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Report>>>,
}

/// A started box: its supervisor, and the image defaults its execs use.
struct Running {
    sup: Arc<Supervisor>,
    config: Arc<ImageConfig>,
    cgroup: Arc<cgroup::BoxCgroup>,
}

impl NamespaceEngine {
    /// Finds bubblewrap, decides the boxes' ids and root filesystems (by
    /// trying them once, see [`probe`]) and prepares the image cache under
    /// `home`, whose unpacks and imports run under `limits`
    /// (`max-image-size`, and the daemon's stop signal).
    pub async fn new(home: &Path, limits: crate::image::ImageLimits) -> Result<NamespaceEngine> {
        let bwrap = find_bwrap().ok_or_else(|| {
            Error::FailedPrecondition(
                "bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: apt-get install bubblewrap)".into(),
            )
        })?;
        let version = std::process::Command::new(&bwrap)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        let privileged = nix::unistd::geteuid().is_root();
        let mut ids = IdMap::detect();
        let mut copies = None;
        let probe_dir = home.join("probe");
        match probe(&probe_dir, &ids, privileged).await {
            Probe::Ok => {}
            Probe::NoOverlay(why) => copies = Some(why),
            Probe::NoMap(why) if ids.is_range() => {
                tracing::warn!(%why, "the boxes' id range does not work here; each box gets one id");
                ids = ids.single(&why);
                match probe(&probe_dir, &ids, privileged).await {
                    Probe::Ok => {}
                    Probe::NoOverlay(why) => copies = Some(why),
                    Probe::NoMap(why) => {
                        return Err(Error::FailedPrecondition(format!(
                            "boxes cannot get a user namespace here: {why}"
                        )));
                    }
                }
            }
            Probe::NoMap(why) => {
                return Err(Error::FailedPrecondition(format!(
                    "boxes cannot get a user namespace here: {why}"
                )));
            }
        }
        if copies.is_none() && privileged && ids.slots > 1 {
            // A range per box needs the shared image idmapped under each.
            let one = ids.for_slot(1).root();
            let lower_ids = boot::LowerIds {
                from: ids.root(),
                to: one,
                count: idmap::RANGE,
            };
            if let Probe::NoMap(why) | Probe::NoOverlay(why) =
                probe_with(&probe_dir, &ids.for_slot(1), privileged, Some(lower_ids)).await
            {
                tracing::warn!(%why, "an idmapped image cannot be mounted here; boxes share one range of ids");
                ids.slots = 1;
                ids.source.push_str(&format!(
                    "; one range for every box, since an idmapped image cannot be mounted here: {why}"
                ));
            }
        }
        let _ = std::fs::remove_dir_all(&probe_dir);
        if let Some(why) = &copies {
            tracing::warn!(%why, "overlays cannot be mounted here; every box gets a full copy of its image");
        }
        let ownership = ownership(&ids, privileged);
        let cgroups = cgroup::Cgroups::detect();
        match &cgroups {
            cgroup::Cgroups::None(why) => {
                tracing::warn!(%why, "no cgroups: box memory and cpu limits are not enforced")
            }
            other => tracing::debug!(cgroups = %other.describe(), "cgroups"),
        }
        tracing::debug!(helpers = %helper::describe(), "the per-box processes run");
        let info = EngineInfo {
            name: "namespace",
            version,
            isolation: Isolation::Namespace,
            capabilities: super::capabilities(&[
                "output.binary",
                "image.pull",
                "image.import",
                "image.prune",
                "net.allowlist",
                "net.secrets",
                "exec.reattach",
                "box.snapshot",
                "box.clone",
                "box.archive",
            ]),
            notes: vec![
                "boxes run in Linux namespaces under bubblewrap, not in microVMs".into(),
                format!(
                    "box ids: {} ids{} from {}{}",
                    ids.uid.iter().map(|e| e.count).sum::<u32>(),
                    if privileged && ids.slots > 1 {
                        format!(" of its own for each box (a pool of {} ranges after the images' own)", ids.slots - 1)
                    } else {
                        String::new()
                    },
                    ids.source,
                    if privileged {
                        "; box root is never host root"
                    } else {
                        ""
                    }
                ),
                match &copies {
                    None => "box roots: copy-on-write overlays over one shared, read-only copy of each image".into(),
                    Some(why) => format!("box roots: a full copy of the image per box (overlays cannot be mounted here: {why})"),
                },
                "allow-net is enforced: a box has no route out; an HTTP(S) proxy run by boxd reaches only the listed hosts (names, *.wildcards, IP addresses, CIDRs); an empty list means no network at all".into(),
                "secrets stay in boxd: the box holds a placeholder, which the proxy replaces in requests to the secret's hosts only, HTTPS included (boxd answers TLS to those hosts with a CA of the box's own, which the box trusts; every other host is a blind tunnel)".into(),
                format!("limits: {}; every box may run at most {DEFAULT_PIDS} processes", cgroups.describe()),
                if privileged && ids.is_range() && copies.is_none() {
                    "disk size: a box created with one writes into a file system of that size of its own (writes past it fail with \"no space left\")".into()
                } else {
                    "disk size is recorded but not enforced (a file system per box needs boxd as root): a box's writes go to boxd's home until its disk is full".into()
                },
            ],
            network_filtering: true,
            create_warning: None,
            boxes_outlive_daemon: true,
            execs_outlive_daemon: true,
            host: None,
        };
        let (ended_tx, ended_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(NamespaceEngine {
            info,
            bwrap,
            archive_limits: limits.clone(),
            images: LocalImages::new(home.join("images"), limits, ownership),
            ids,
            privileged,
            copies,
            cgroups,
            disk: Default::default(),
            running: Arc::default(),
            ended_tx,
            ended_rx: Mutex::new(Some(ended_rx)),
        })
    }

    /// Records why `auto` chose this engine instead of microVMs: first in
    /// `Describe`'s notes and a warning on every create.
    pub fn chosen_because(mut self, reason: String) -> NamespaceEngine {
        let why = format!("boxes run in Linux namespaces, not microVMs: {reason}");
        self.info.notes[0] = why.clone();
        self.info.create_warning = Some(why);
        self
    }

    /// The running box's supervisor, and its image's defaults.
    fn target(&self, id: &str) -> Result<(Arc<Supervisor>, Arc<ImageConfig>)> {
        let running = self.running.lock().expect("sandbox table");
        let r = running
            .get(id)
            .ok_or_else(|| Error::FailedPrecondition("the box is not running".into()))?;
        Ok((r.sup.clone(), r.config.clone()))
    }

    /// Takes in a running box: watches its end and its memory.
    fn keep(&self, record: &BoxRecord, sup: Arc<Supervisor>, cgroup: Arc<cgroup::BoxCgroup>) {
        let config: ImageConfig = std::fs::read(image_config_path(record))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let limits = box_limits(&record.spec);
        self.watch_memory(record, &cgroup, &limits, sup.ended());
        self.watch_refusals(record, &sup);
        let init = sup.init;
        let ended = sup.ended();
        self.running.lock().expect("sandbox table").insert(
            record.id.clone(),
            Running {
                sup,
                config: Arc::new(config),
                cgroup,
            },
        );
        self.watch_box(record, init, ended);
    }

    /// Forgets a box whose sandbox ended without a stop, and reports it.
    /// A stop removes the box from the table first, so it is not reported.
    fn watch_box(
        &self,
        record: &BoxRecord,
        init_pid: i32,
        mut ended: tokio::sync::watch::Receiver<Option<String>>,
    ) {
        let (id, name) = (record.id.clone(), record.name.clone());
        let running = self.running.clone();
        let report = self.ended_tx.clone();
        tokio::spawn(async move {
            let reason = match ended.wait_for(Option::is_some).await {
                Ok(r) => r.clone().unwrap_or_default(),
                Err(_) => return,
            };
            let gone = {
                let mut table = running.lock().expect("sandbox table");
                let ours = table.get(&id).is_some_and(|r| r.sup.init == init_pid);
                ours.then(|| table.remove(&id))
            };
            if gone.is_some() {
                tracing::warn!(box_id = %id, %reason, "box ended");
                let _ = report.send(Report {
                    id,
                    name,
                    message: reason,
                    ended: true,
                });
            }
        });
    }
}

fn find_bwrap() -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("bwrap"));
    from_path
        .chain([
            PathBuf::from("/usr/bin/bwrap"),
            PathBuf::from("/usr/local/bin/bwrap"),
        ])
        .find(|p| p.is_file())
}

/// A box's full copy of its image (overlays cannot be mounted here, or
/// the box was made before boxd used overlays).
fn rootfs(record: &BoxRecord) -> PathBuf {
    record.dir.join("rootfs")
}

/// A box's own writes over the shared image, and the overlay's work
/// directory.
fn upper(record: &BoxRecord) -> PathBuf {
    record.dir.join("upper")
}

fn work(record: &BoxRecord) -> PathBuf {
    record.dir.join("work")
}

/// A box's disk, when it has a disk size (see `make_disk`).
fn disk_image(record: &BoxRecord) -> PathBuf {
    record.dir.join("disk.img")
}

/// How the id map and overlays fared when tried.
enum Probe {
    Ok,
    /// The user namespace could not be mapped (why).
    NoMap(String),
    /// Mapped, but no overlay could be mounted (why).
    NoOverlay(String),
}

/// Tries, once per daemon, what every box start does: the boot helper
/// maps a user namespace with `ids` and mounts an overlay of empty
/// directories under `dir`, then exits instead of starting bubblewrap.
async fn probe(dir: &Path, ids: &IdMap, privileged: bool) -> Probe {
    probe_with(dir, ids, privileged, None).await
}

/// [`probe`], the image's ids shown as `lower_ids` say.
async fn probe_with(
    dir: &Path,
    ids: &IdMap,
    privileged: bool,
    lower_ids: Option<boot::LowerIds>,
) -> Probe {
    let _ = std::fs::remove_dir_all(dir);
    let made = ["lower", "upper", "work"]
        .iter()
        .try_for_each(|d| std::fs::create_dir_all(dir.join(d)));
    if let Err(e) = made {
        return Probe::NoOverlay(format!("cannot create {}: {e}", dir.display()));
    }
    let root = Root::Overlay {
        lower: dir.join("lower"),
        upper: dir.join("upper"),
        work: dir.join("work"),
        disk: None,
        lower_ids,
    };
    match sandbox::probe(&root, ids, privileged).await {
        Ok(()) => Probe::Ok,
        Err(sandbox::ProbeError::Map(why)) => Probe::NoMap(why),
        Err(sandbox::ProbeError::Mount(why)) => Probe::NoOverlay(why),
    }
}

/// Whether a box's overlay root can be mounted here with `ids` (for
/// `doctor`): `Err` says why not.
pub async fn overlays_mount(
    dir: &Path,
    ids: &IdMap,
    privileged: bool,
) -> std::result::Result<(), String> {
    match probe(&dir.join("probe"), ids, privileged).await {
        Probe::Ok => Ok(()),
        Probe::NoMap(why) | Probe::NoOverlay(why) => Err(why),
    }
}

/// How the image store owns what it unpacks, for boxes of `ids`.
fn ownership(ids: &IdMap, privileged: bool) -> Ownership {
    if !ids.is_range() {
        return Ownership::default();
    }
    if privileged {
        let (uid, gid) = ids.root();
        let count = ids
            .uid
            .iter()
            .map(|e| e.count)
            .sum::<u32>()
            .min(idmap::RANGE);
        return Ownership {
            owners: Owners::Shift { uid, gid, count },
            tag: ids.tag(),
            as_box_root: None,
        };
    }
    let map = ids.clone();
    Ownership {
        owners: Owners::Keep,
        tag: ids.tag(),
        as_box_root: Some(Arc::new(move |argv: Vec<OsString>| {
            let map = map.clone();
            Box::pin(async move {
                userns::run_as_box_root(&map, &argv)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
        })),
    }
}

/// The command to run: the one given, or (none given) the image's
/// Entrypoint followed by `args`, or by its Cmd when `args` is empty.
fn default_command(
    config: &ImageConfig,
    command: String,
    args: Vec<String>,
) -> Result<(String, Vec<String>)> {
    if !command.is_empty() {
        return Ok((command, args));
    }
    let mut argv = config.entrypoint.clone();
    argv.extend(if args.is_empty() {
        config.cmd.clone()
    } else {
        args
    });
    if argv.is_empty() {
        return Err(Error::InvalidArgument(
            "no command given, and the box's image has no Entrypoint or Cmd".into(),
        ));
    }
    let command = argv.remove(0);
    Ok((command, argv))
}

fn image_config_path(record: &BoxRecord) -> PathBuf {
    record.dir.join("image.json")
}

#[async_trait]
impl Engine for NamespaceEngine {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn images(&self) -> &dyn Images {
        self
    }

    async fn create(&self, record: &BoxRecord) -> Result<Created> {
        self.keep_id_possible(&record.spec)?;
        let image = self.images.for_create(&record.spec.image).await?;
        self.claim_ids(record)?;
        match &self.copies {
            None if self.disk_budgets() && record.spec.disk_size_gb.is_some() => {
                self.make_disk(record).await?
            }
            None => self.make_upper(record)?,
            Some(_) => match self.swap_of(&record.spec) {
                Some(swap) => {
                    self.copy_tree_swapping(
                        &image.rootfs,
                        &rootfs(record),
                        swap,
                        "copying the image into the box",
                    )
                    .await?
                }
                None => self.copy_image(&image.rootfs, &rootfs(record)).await?,
            },
        }
        let config =
            serde_json::to_vec(&image.config).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(image_config_path(record), config)
            .map_err(|e| Error::io("write image.json", e))?;

        let spec = &record.spec;
        let mut warnings: Vec<String> = self
            .unenforced(
                spec.cpus.is_some(),
                spec.memory_mib.is_some(),
                spec.disk_size_gb.is_some(),
            )
            .into_iter()
            .collect();
        egress::box_ca(record)?;
        warnings.extend(self.mount_warnings(record));
        Ok(Created {
            image_digest: image.digest,
            warnings,
        })
    }

    async fn start(&self, record: &BoxRecord) -> Result<()> {
        if self
            .running
            .lock()
            .expect("sandbox table")
            .contains_key(&record.id)
        {
            return Ok(());
        }
        if self.per_box_ids() && slots::of(&record.dir) == 0 {
            // Made before boxes had ranges of their own: it gets one now,
            // and its files move there (`root_of`).
            self.claim_ids(record)?;
        }
        let box_range = self.range_of(record);
        let root = self.root_of(record, &box_range).await?;
        let hosts = match record.spec.allow_net.is_empty() {
            true => None,
            false => Some(egress::hosts_file(&record.dir)?),
        };
        self.keep_id_possible(&record.spec)?;
        let (privileged, range) = (self.privileged, self.ids.is_range());
        let ids = self.ids_of(&record.spec, box_range);
        let box_root = ids.root();
        let as_box = record.spec.keep_id.map_or((0, 0), |k| (k.uid, k.gid));
        // Boxd as root idmaps every mount: its ordinary owner, or (root's
        // and the box's own files) the box's own id, is the one box id
        // that writes there.
        let own = (box_root.0 + as_box.0, box_root.1 + as_box.1);
        let mounts = options::plan_mounts(&record.spec, hosts.as_deref(), |path| {
            (privileged && range).then(|| boot::MountOwner {
                host: boot::mount_owner(path, box_root, idmap::RANGE).unwrap_or(own),
                as_box,
            })
        });
        let limits = box_limits(&record.spec);
        let nproc = (!self.cgroups.enforces("pids"))
            .then_some(limits.pids)
            .flatten();
        let plan = Plan {
            root,
            mounts,
            range,
            privileged,
            box_root,
            bwrap: self.bwrap.clone(),
            bwrap_args: options::bwrap_args(&record.name, Path::new(boot::STAGE))
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            nproc,
            probe: false,
            trust: egress::box_ca(record)?,
        };
        let cgroup = Arc::new(self.cgroups.create(&record.id, &limits)?);
        let start = supervisor::wire::Start {
            box_id: record.id.clone(),
            box_name: record.name.clone(),
            dir: record.dir.clone(),
            plan,
            ids,
            cgroup: (*cgroup).clone(),
            limits,
            nproc,
            egress: (!record.spec.allow_net.is_empty()).then(|| supervisor::wire::Egress {
                allow_net: record.spec.allow_net.clone(),
                secrets: record.spec.secrets.clone(),
            }),
            ports: record.spec.ports.clone(),
        };
        let (sup, warnings, _) = match Supervisor::spawn(&start).await {
            Ok(s) => s,
            Err(e) => {
                cgroup.remove();
                return Err(e);
            }
        };
        for w in warnings {
            tracing::warn!(box_name = %record.name, "{w}");
        }
        self.keep(record, sup, cgroup);
        Ok(())
    }

    async fn stop(&self, record: &BoxRecord, force: bool) -> Result<()> {
        let sb = self
            .running
            .lock()
            .expect("sandbox table")
            .remove(&record.id);
        if let Some(r) = sb {
            r.sup.stop(force).await?;
            r.cgroup.remove();
        }
        Ok(())
    }

    fn published(&self, record: &BoxRecord) -> Vec<crate::model::PortMapping> {
        self.running
            .lock()
            .expect("sandbox table")
            .get(&record.id)
            .map(|r| r.sup.ports.clone())
            .unwrap_or_default()
    }

    async fn adopt(&self, record: &BoxRecord) -> Option<Vec<Adopted>> {
        let (sup, execs) = match Supervisor::connect(&record.dir).await {
            Ok(v) => v,
            Err(e) => {
                tracing::info!(box_name = %record.name, error = %e, "box not found running");
                return None;
            }
        };
        if sup.ended().borrow().is_some() {
            return None;
        }
        let cgroup = Arc::new(sup.cgroup.clone());
        // A copy's caller went with the old daemon: the copy goes too.
        use super::exec::ExecHandle as _;
        let (copies, execs): (Vec<_>, Vec<_>) =
            execs.into_iter().partition(|e| copy::is_copy(&e.id));
        for e in copies.into_iter().filter(|e| e.exit.is_none()) {
            tracing::info!(box_name = %record.name, exec_id = %e.id, "killing a copy whose caller is gone");
            let _ = sup.exec(&e.id).signal(libc::SIGKILL).await;
        }
        let adopted = execs
            .into_iter()
            .map(|e| Adopted {
                handle: sup.exec(&e.id),
                id: e.id,
                command: e.command,
                args: e.args,
                tty: e.tty,
                detach: e.detach,
                started_at_ms: e.started_at_ms,
                exit: e.exit,
            })
            .collect();
        tracing::info!(box_name = %record.name, pid1 = sup.pid1, "box found running");
        self.keep(record, sup, cgroup);
        Some(adopted)
    }

    async fn remove(&self, record: &BoxRecord) -> Result<()> {
        self.stop(record, true).await?;
        self.disk.forget(&record.id);
        if self.per_box_ids() {
            slots::release(Path::new(slots::REGISTRY), &self.pool(), &record.dir);
        }
        self.remove_tree(&record.dir).await
    }

    async fn list(&self) -> Result<Vec<EngineBox>> {
        Ok(self
            .running
            .lock()
            .expect("sandbox table")
            .keys()
            .map(|id| EngineBox {
                id: id.clone(),
                running: true,
            })
            .collect())
    }

    async fn update_running(
        &self,
        record: &BoxRecord,
        new: &crate::model::BoxSpec,
    ) -> Result<Vec<String>> {
        let limits = box_limits(new);
        if box_limits(&record.spec) != limits {
            // The cgroups the box runs in take the new limits now.
            self.cgroups.create(&record.id, &limits)?;
        }
        let mut warnings = super::changes_at_next_start(&record.spec, new, false);
        warnings.extend(self.unenforced(
            new.cpus != record.spec.cpus,
            new.memory_mib != record.spec.memory_mib,
            false,
        ));
        Ok(warnings)
    }

    async fn exec(&self, record: &BoxRecord, spec: ExecSpec) -> Result<super::exec::Started> {
        let (sup, config) = self.target(&record.id)?;
        let mut env = config.env.clone();
        for (k, v) in egress::exec_env(&record.spec).into_iter().chain(spec.env) {
            env.retain(|(key, _)| *key != k);
            env.push((k, v));
        }
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), DEFAULT_PATH.into()));
        }
        let working_dir = Some(spec.working_dir.clone())
            .filter(|d| !d.is_empty())
            .or(config.working_dir.clone().filter(|d| !d.is_empty()))
            .unwrap_or_else(|| "/".into());
        let (command, args) = default_command(&config, spec.command.clone(), spec.args.clone())?;
        // `-u` first, then the keep-id user (whose writes in mounts land as
        // their owners), then the image's.
        let user = spec
            .user
            .clone()
            .or_else(|| record.spec.keep_id.map(|k| format!("{}:{}", k.uid, k.gid)))
            .or_else(|| config.user.clone().filter(|u| !u.is_empty()));
        sup.run(supervisor::wire::RunSpec {
            spec: ExecSpec {
                env,
                working_dir,
                command,
                args,
                user,
                ..spec
            },
            started_at_ms: crate::model::now_ms(),
        })
        .await
    }

    async fn copy_out(
        &self,
        record: &BoxRecord,
        path: &str,
        follow_symlinks: bool,
    ) -> Result<super::ByteStream> {
        let (sup, _) = self.target(&record.id)?;
        copy::copy_out(&sup, path, follow_symlinks).await
    }

    async fn copy_in(
        &self,
        record: &BoxRecord,
        path: &str,
        archive: super::ByteStream,
    ) -> Result<u64> {
        let (sup, _) = self.target(&record.id)?;
        copy::copy_in(&sup, path, archive).await
    }

    async fn disk_usage(&self, record: &BoxRecord) -> Option<u64> {
        let image = disk_image(record);
        if let Ok(meta) = std::fs::metadata(&image) {
            // What the disk's file takes (it is sparse), not its size.
            return Some(meta.blocks() * 512);
        }
        let own = [upper(record), rootfs(record)]
            .into_iter()
            .find(|d| d.is_dir())?;
        let (ids, privileged) = (self.ids.clone(), self.privileged);
        self.disk
            .get(&record.id, measure(ids, privileged, own))
            .await
    }

    async fn snapshot_create(&self, record: &BoxRecord, name: &str) -> Result<Snapshot> {
        self.snapshot_create_impl(record, name).await
    }

    async fn snapshot_list(&self, record: &BoxRecord) -> Result<Vec<Snapshot>> {
        self.snapshot_list_impl(record)
    }

    async fn snapshot_restore(&self, record: &BoxRecord, name: &str) -> Result<()> {
        self.snapshot_restore_impl(record, name).await
    }

    async fn snapshot_remove(&self, record: &BoxRecord, name: &str) -> Result<()> {
        self.snapshot_remove_impl(record, name).await
    }

    async fn clone_box(&self, source: &BoxRecord, target: &BoxRecord) -> Result<Created> {
        self.clone_impl(source, target).await
    }

    async fn export(&self, record: &BoxRecord, path: &Path) -> Result<u64> {
        self.export_impl(record, path).await
    }

    async fn archive_spec(&self, path: &Path) -> Result<crate::model::BoxSpec> {
        let path = path.to_path_buf();
        let manifest = tokio::task::spawn_blocking(move || archive::read_manifest(&path))
            .await
            .map_err(|e| Error::Internal(e.to_string()))??;
        Ok(manifest.spec)
    }

    async fn import(&self, path: &Path, target: &BoxRecord) -> Result<Created> {
        self.import_impl(path, target).await
    }

    async fn stats(&self, record: &BoxRecord) -> Result<super::Stats> {
        let (sup, _) = self.target(&record.id)?;
        let u = sup.usage().await?;
        let limits = box_limits(&record.spec);
        Ok(super::Stats {
            cpu_usec: Some(u.cpu_usec),
            cpu_percent: None,
            memory_bytes: u.memory_bytes,
            memory_limit_bytes: limits
                .memory_bytes
                .filter(|_| self.cgroups.enforces("memory")),
            pids: u.pids,
            net_rx_bytes: u.net_rx_bytes,
            net_tx_bytes: u.net_tx_bytes,
        })
    }

    fn reports(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Report>> {
        self.ended_rx.lock().expect("ended receiver").take()
    }

    async fn shutdown(&self) {
        // Boxes run on under their supervisors, for the next daemon to
        // find; only the daemon's handles go.
        self.running.lock().expect("sandbox table").clear();
    }
}

/// Every box may run at most this many processes (a fork bomb stops there).
pub const DEFAULT_PIDS: u64 = 4096;

/// What a box may use: its spec's memory and cpus, and [`DEFAULT_PIDS`].
fn box_limits(spec: &crate::model::BoxSpec) -> cgroup::Limits {
    cgroup::Limits {
        pids: Some(DEFAULT_PIDS),
        memory_bytes: spec.memory_mib.map(|m| u64::from(m) << 20),
        cpus: spec.cpus.map(f64::from),
    }
}

/// Why the kernel killed a process of a box with `limits`.
pub(super) fn out_of_memory(limits: &cgroup::Limits) -> String {
    match limits.memory_bytes {
        Some(b) => format!(
            "killed: the box ran out of memory (its limit is {} MiB)",
            b >> 20
        ),
        None => "killed: the box ran out of memory".into(),
    }
}

impl NamespaceEngine {
    /// Reports each kill of a box's process for memory, while the box runs
    /// (a box event, its reason included).
    /// Reports each connection the box's egress proxy refuses (a target
    /// once per ten seconds), while the box runs: a box event, and a line
    /// in the daemon's log, with the box, the host and the port.
    fn watch_refusals(&self, record: &BoxRecord, sup: &Supervisor) {
        let (id, name) = (record.id.clone(), record.name.clone());
        let (mut refusals, report) = (sup.refusals(), self.ended_tx.clone());
        let mut ended = sup.ended();
        tokio::spawn(async move {
            loop {
                let refusal = tokio::select! {
                    r = refusals.recv() => r,
                    _ = ended.wait_for(Option::is_some) => return,
                };
                let refusal = match refusal {
                    Ok(refusal) => refusal,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                tracing::info!(box_name = %name, host = refusal.host, port = refusal.port, "{}", refusal.why);
                let _ = report.send(Report {
                    id: id.clone(),
                    name: name.clone(),
                    message: refusal.why,
                    ended: false,
                });
            }
        });
    }

    fn watch_memory(
        &self,
        record: &BoxRecord,
        cgroup: &Arc<cgroup::BoxCgroup>,
        limits: &cgroup::Limits,
        mut ended: tokio::sync::watch::Receiver<Option<String>>,
    ) {
        if limits.memory_bytes.is_none() || !self.cgroups.enforces("memory") {
            return;
        }
        let (id, name) = (record.id.clone(), record.name.clone());
        let (cgroup, limits, report) = (cgroup.clone(), *limits, self.ended_tx.clone());
        tokio::spawn(async move {
            let mut seen = cgroup.oom_kills();
            loop {
                tokio::select! {
                    _ = ended.wait_for(Option::is_some) => return,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                }
                let now = cgroup.oom_kills();
                if now > seen {
                    seen = now;
                    tracing::warn!(box_name = %name, "a process of the box was killed for memory");
                    let _ = report.send(Report {
                        id: id.clone(),
                        name: name.clone(),
                        message: format!("a process of the box was {}", out_of_memory(&limits)),
                        ended: false,
                    });
                }
            }
        });
    }
}

/// Why a command killed by a signal died, when it was its box ending: the
/// box's pid 1 is gone (it goes first), and the sandbox's watcher says how
/// (it may take a moment to hear of it). `None` while the box runs.
pub(super) async fn box_ended(
    pid1: i32,
    mut ended: tokio::sync::watch::Receiver<Option<String>>,
) -> Option<String> {
    // A command killed as its box ends may be reaped before the box's
    // pid 1 is a zombie (it is still killing the rest): exiting counts.
    if ended.borrow().is_none() && sandbox::process_alive(pid1) && !sandbox::process_exiting(pid1) {
        return None;
    }
    let wait = ended.wait_for(Option::is_some);
    match tokio::time::timeout(std::time::Duration::from_secs(2), wait).await {
        Ok(Ok(reason)) => reason
            .clone()
            .map(|r| format!("the command was killed because its box ended: {r}")),
        _ => None,
    }
}

impl NamespaceEngine {
    /// Makes a new box's (empty) upper and work directories, owned by box
    /// root; the upper one is the box's `/` over the image, so it has the
    /// mode of one.
    fn make_upper(&self, record: &BoxRecord) -> Result<()> {
        self.make_root_dir(record, &upper(record), 0o755)?;
        self.make_work(record)
    }

    /// Makes a box's (empty) overlay work directory.
    fn make_work(&self, record: &BoxRecord) -> Result<()> {
        self.make_root_dir(record, &work(record), 0o700)
    }

    /// Makes a directory owned by the root of the box of `record`.
    fn make_root_dir(&self, record: &BoxRecord, dir: &Path, mode: u32) -> Result<()> {
        let (uid, gid) = self.range_of(record).root();
        std::fs::create_dir(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)))
            .and_then(|()| std::os::unix::fs::lchown(dir, Some(uid), Some(gid)))
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))
    }

    /// Whether boxes' disk sizes are enforced: each box with one gets a
    /// file system of that size for its writes (root alone may mount one).
    fn disk_budgets(&self) -> bool {
        self.privileged && self.ids.is_range() && self.copies.is_none()
    }

    /// A new box's disk: a sparse file of its disk size holding an ext4
    /// file system whose root is box root's; the boot helper mounts it
    /// and makes the overlay's directories in it.
    async fn make_disk(&self, record: &BoxRecord) -> Result<()> {
        let gib = u64::from(record.spec.disk_size_gb.unwrap_or(1));
        let image = disk_image(record);
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(gib << 30))
            .map_err(|e| Error::io(format!("create {}", image.display()), e))?;
        let (uid, gid) = self.range_of(record).root();
        let mke2fs = crate::host_programs::find_on_path("mke2fs")
            .or_else(|| {
                ["/usr/sbin/mke2fs", "/sbin/mke2fs"]
                    .iter()
                    .map(PathBuf::from)
                    .find(|p| p.is_file())
            })
            .ok_or_else(|| {
                Error::FailedPrecondition(
                    "a disk size needs mke2fs (Debian: apt-get install e2fsprogs)".into(),
                )
            })?;
        let out = tokio::process::Command::new(mke2fs)
            .args(["-q", "-F", "-t", "ext4", "-m", "0", "-J", "size=4", "-E"])
            .arg(format!(
                "root_owner={uid}:{gid},lazy_itable_init=1,lazy_journal_init=1"
            ))
            .arg(&image)
            .output()
            .await
            .map_err(|e| Error::io("run mke2fs", e))?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&image);
            return Err(Error::Engine(format!(
                "making the box's disk failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// A full copy of an unpacked image, owners and modes kept (as box
    /// root where only box root can give files the boxes' ids).
    async fn copy_image(&self, image: &Path, target: &Path) -> Result<()> {
        self.copy_tree(image, target, "copying the image into the box")
            .await
    }

    /// Copies `source` (a directory or a file) to `target` (which must not
    /// exist) with `cp -a`: owners, modes, times, xattrs (overlay ones
    /// included), whiteouts (character devices) and hard links kept,
    /// shared extents where the file system can (`--reflink=auto`) and
    /// holes kept as holes (`--sparse=always`); as box root where only box
    /// root may read and give the boxes' ids.
    async fn copy_tree(&self, source: &Path, target: &Path, what: &str) -> Result<()> {
        self.copy_tree_swapping(source, target, treecopy::Swap::default(), what)
            .await
    }

    /// [`Self::copy_tree`], with two owners exchanged as `swap` says.
    async fn copy_tree_swapping(
        &self,
        source: &Path,
        target: &Path,
        swap: treecopy::Swap,
        what: &str,
    ) -> Result<()> {
        // By descriptor, never following a symlink the box may have
        // swapped in (treecopy.rs); as box root for an unprivileged boxd
        // with a range, where the box's ids are its own.
        if !self.privileged && self.ids.is_range() {
            let exe = std::env::current_exe().map_err(|e| Error::io("find the boxd binary", e))?;
            let mut argv: Vec<OsString> = vec![
                exe.into_os_string(),
                treecopy::HELPER_ARG.into(),
                source.into(),
                target.into(),
            ];
            if swap != treecopy::Swap::default() {
                argv.push(swap.arg().into());
            }
            return userns::run_as_box_root(&self.ids, &argv).await.map(drop);
        }
        let (source, target) = (source.to_path_buf(), target.to_path_buf());
        let copied = tokio::task::spawn_blocking(move || {
            treecopy::copy_tree_swapping(&source, &target, swap)
        })
        .await
        .map_err(|e| Error::Internal(format!("{what}: {e}")))?;
        copied.map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => Error::no_space(what),
            _ => Error::Internal(format!("{what} failed: {e}")),
        })
    }

    /// The box's root (its files owned by `range`, the box's ids): its
    /// overlay over the image, or its own copy (made
    /// before boxd used overlays, or where they cannot be mounted).
    async fn root_of(&self, record: &BoxRecord, range: &IdMap) -> Result<Root> {
        let image = disk_image(record);
        if upper(record).is_dir() || image.is_file() {
            if let Some(why) = &self.copies {
                return Err(Error::FailedPrecondition(format!(
                    "this box is an overlay, and overlays cannot be mounted here now: {why}"
                )));
            }
            let lower = self
                .images
                .for_start(&record.image_digest, &record.spec.image)
                .await?;
            let lower_ids = self.lower_ids(range);
            if image.is_file() {
                let at = record.dir.join("disk");
                return Ok(Root::Overlay {
                    lower,
                    upper: at.join("upper"),
                    work: at.join("work"),
                    disk: Some((image, at)),
                    lower_ids,
                });
            }
            let lower = match self.swap_of(&record.spec) {
                Some(swap) => self.keep_id_lower(&lower, swap).await?,
                None => lower,
            };
            self.own_files(record, &upper(record), range.root()).await?;
            return Ok(Root::Overlay {
                lower,
                upper: upper(record),
                work: work(record),
                disk: None,
                lower_ids,
            });
        }
        let dir = rootfs(record);
        if self.privileged && self.ids.is_range() {
            let (uid, gid) = range.root();
            let owner = std::fs::symlink_metadata(&dir).map(|m| m.uid()).ok();
            if owner == Some(0) {
                // Made by an older boxd whose boxes ran as host root: hand
                // its files to box root, once.
                tracing::info!(box_name = %record.name, "moving the box's files from host root to box root");
                let dir = dir.clone();
                tokio::task::spawn_blocking(move || shift_root_owned(&dir, uid, gid))
                    .await
                    .map_err(|e| Error::Internal(e.to_string()))?
                    .map_err(|e| Error::io("hand the box's files to box root", e))?;
            }
            self.own_files(record, &dir, range.root()).await?;
        }
        Ok(Root::Dir(dir))
    }

    /// How the image's files (owned by the pool's first range) show in a
    /// box with a range of its own: an idmapped mount of the one shared
    /// copy, never a copy per box.
    fn lower_ids(&self, range: &IdMap) -> Option<boot::LowerIds> {
        let (from, to) = (self.ids.root(), range.root());
        (self.per_box_ids() && from != to).then_some(boot::LowerIds {
            from,
            to,
            count: idmap::RANGE,
        })
    }

    /// The warning for asked-for limits this host does not enforce.
    fn unenforced(&self, cpus: bool, memory: bool, disk: bool) -> Option<String> {
        let unenforced: Vec<&str> = [
            (cpus && !self.cgroups.enforces("cpu")).then_some("cpus"),
            (memory && !self.cgroups.enforces("memory")).then_some("memory"),
            (disk && !self.disk_budgets()).then_some("disk size"),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!unenforced.is_empty()).then(|| {
            format!(
                "not enforced on this host: {} (boxctl doctor says why)",
                unenforced.join(", ")
            )
        })
    }

    /// keep-id needs a range of ids: idmapped mounts (a root-run boxd), or
    /// a map of the user's subordinate ids in which the user is the keep-id
    /// user (a user-run one). A single-id map cannot: refused, before
    /// anything is made.
    fn keep_id_possible(&self, spec: &crate::model::BoxSpec) -> Result<()> {
        match spec.keep_id {
            Some(k) if !self.ids.is_range() => Err(Error::FailedPrecondition(format!(
                "keep-id (mount owners as box user {}:{}) needs a range of ids, and this boxd (uid {}) has a single one: {}; add a range to /etc/subuid and /etc/subgid (boxctl doctor says how)",
                k.uid,
                k.gid,
                nix::unistd::getuid(),
                self.ids.source,
            ))),
            _ => Ok(()),
        }
    }

    /// What a user-run boxd exchanges in a keep-id box's files: box root
    /// and the keep-id user (a root-run one idmaps its mounts instead).
    fn swap_of(&self, spec: &crate::model::BoxSpec) -> Option<treecopy::Swap> {
        match spec.keep_id {
            Some(k) if !self.privileged && self.ids.is_range() => {
                Some(treecopy::Swap::root_and(k.uid, k.gid))
            }
            _ => None,
        }
    }

    /// The box's id map: the daemon's, or (keep-id, user-run) the same
    /// host ids with box root and the keep-id user exchanged, so that the
    /// user's files are the keep-id user's.
    ///
    /// A root-run boxd gives each box a range of its own ([`slots`]).
    fn ids_of(&self, spec: &crate::model::BoxSpec, range: IdMap) -> IdMap {
        match (self.swap_of(spec), spec.keep_id) {
            (Some(_), Some(k)) => self.ids.swapped(k.uid, k.gid),
            _ => range,
        }
    }

    /// The box's range of host ids, keep-id aside: the daemon's map, or
    /// (root-run) the box's own range of its pool. What owns the box's
    /// files on the host.
    fn range_of(&self, record: &BoxRecord) -> IdMap {
        match self.per_box_ids() {
            true => self.ids.for_slot(slots::of(&record.dir)),
            false => self.ids.clone(),
        }
    }

    /// Whether each box gets a range of ids of its own: boxd is root and
    /// its pool holds more than one range.
    fn per_box_ids(&self) -> bool {
        self.privileged && self.ids.slots > 1 && self.ids.writer == idmap::Writer::Direct
    }

    /// The name of this daemon's id pool in the host's slot registry.
    fn pool(&self) -> String {
        let (uid, gid) = self.ids.root();
        format!("{uid}-{gid}")
    }

    /// Claims a range of ids for a new box (made, cloned or imported), and
    /// records it in its directory.
    fn claim_ids(&self, record: &BoxRecord) -> Result<()> {
        if self.per_box_ids() {
            slots::claim(
                Path::new(slots::REGISTRY),
                &self.pool(),
                self.ids.slots,
                &record.dir,
            )?;
        }
        Ok(())
    }

    /// The box's files belong to another range of the pool than the box's
    /// (`to`, its box root's uid and gid): a clone's or an import's copy,
    /// a box made before boxes had ranges of their own. Moves them to the
    /// box's, once, before it starts.
    async fn own_files(&self, record: &BoxRecord, dir: &Path, to: (u32, u32)) -> Result<()> {
        if !self.per_box_ids() {
            return Ok(());
        }
        let Ok(meta) = std::fs::symlink_metadata(dir) else {
            return Ok(());
        };
        let from = (meta.uid(), meta.gid());
        if self.ids.slot_of_uid(from.0).is_none() || !idmap::ranges_apart(from, to) {
            return Ok(());
        }
        tracing::info!(box_name = %record.name, from = from.0, to = to.0, "moving the box's files to its own ids");
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || treecopy::shift_owners(&dir, from, to))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
            .map(drop)
            .map_err(|e| Error::io("move the box's files to its own ids", e))
    }

    /// The image's files as a keep-id box of a user-run boxd must see them
    /// through its exchanged map ([`Self::ids_of`]): a copy with the two
    /// ids exchanged, made once per image and user next to the image's
    /// own files (and removed with them).
    async fn keep_id_lower(&self, lower: &Path, swap: treecopy::Swap) -> Result<PathBuf> {
        let name = format!(
            "{}-keep-id-{}-{}",
            lower
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("rootfs"),
            swap.uids.1,
            swap.gids.1
        );
        let copy = lower.with_file_name(name);
        if copy.is_dir() {
            return Ok(copy);
        }
        let partial = copy.with_extension(format!("partial-{}", std::process::id()));
        let _ = self.remove_tree(&partial).await;
        self.copy_tree_swapping(lower, &partial, swap, "copying the image for keep-id")
            .await?;
        if std::fs::rename(&partial, &copy).is_err() {
            // Another start made it meanwhile.
            let _ = self.remove_tree(&partial).await;
        }
        Ok(copy)
    }

    /// Warnings about mounts whose files box root cannot write.
    fn mount_warnings(&self, record: &BoxRecord) -> Vec<String> {
        if !self.privileged {
            // Box root is this user: another owner's files are nobody's.
            let me = nix::unistd::getuid().as_raw();
            return record
                .spec
                .mounts
                .iter()
                .filter(|m| !m.read_only)
                .filter_map(|m| {
                    let owner = std::fs::metadata(&m.host_path).ok()?.uid();
                    (owner != me).then(|| {
                        format!(
                            "mount {} belongs to uid {owner}, not to uid {me} who runs boxd: the box sees its files as nobody's and can write there only what others may",
                            m.host_path.display()
                        )
                    })
                })
                .collect();
        }
        if !self.ids.is_range() {
            return Vec::new();
        }
        record
            .spec
            .mounts
            .iter()
            .filter(|m| !m.read_only)
            .filter(|m| std::fs::metadata(&m.host_path).is_ok_and(|meta| meta.uid() == 0))
            .map(|m| {
                format!(
                    "mount {} belongs to root: boxes never write as host root, so this box sees its files as nobody's (it can write there only what others may); chown it to an ordinary user, or run boxd as that user",
                    m.host_path.display()
                )
            })
            .collect()
    }

    /// Bytes on disk under `own` (as box root where only box root may
    /// read every directory of it).
    async fn measure(&self, own: PathBuf) -> Option<u64> {
        measure(self.ids.clone(), self.privileged, own).await
    }

    /// Deletes a box directory (or a file of it): as box root where only box root may
    /// delete its files; else directly, making read-only directories
    /// writable first where the plain removal is refused.
    async fn remove_tree(&self, dir: &Path) -> Result<()> {
        if !self.privileged && self.ids.is_range() {
            if !dir.exists() {
                return Ok(());
            }
            let argv: Vec<OsString> = vec![
                "rm".into(),
                "-rf".into(),
                "--one-file-system".into(),
                dir.into(),
            ];
            return userns::run_as_box_root(&self.ids, &argv).await.map(drop);
        }
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || {
            if std::fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
                // A file (a disk image): removed as one.
                return std::fs::remove_file(&dir)
                    .map_err(|e| Error::io(format!("remove {}", dir.display()), e));
            }
            if std::fs::remove_dir_all(&dir).is_ok() || !dir.exists() {
                return Ok(());
            }
            let _ = std::process::Command::new("chmod")
                .arg("-R")
                .arg("u+rwX")
                .arg(&dir)
                .status();
            std::fs::remove_dir_all(&dir)
                .map_err(|e| Error::io(format!("remove {}", dir.display()), e))
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?
    }
}

/// Bytes on disk under `own`: walked here, or as box root (`du`) where
/// only box root may read every directory of it.
async fn measure(ids: IdMap, privileged: bool, own: PathBuf) -> Option<u64> {
    if !privileged && ids.is_range() {
        let argv: Vec<OsString> = vec![
            "du".into(),
            "-s".into(),
            "-B1".into(),
            "-x".into(),
            own.into(),
        ];
        let out = userns::run_as_box_root(&ids, &argv).await.ok()?;
        return String::from_utf8_lossy(&out)
            .split_whitespace()
            .next()?
            .parse()
            .ok();
    }
    tokio::task::spawn_blocking(move || disk_used(&own))
        .await
        .ok()
}

/// Bytes allocated on disk under `dir` (hard links counted once, other
/// file systems not entered), as `du -s` counts them.
fn disk_used(dir: &Path) -> u64 {
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut seen = std::collections::HashSet::new();
    let (mut total, mut todo) = (0u64, vec![dir.to_path_buf()]);
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != top.dev() || (meta.nlink() > 1 && !seen.insert(meta.ino())) {
            continue;
        }
        total += meta.blocks() * 512;
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            todo.extend(entries.flatten().map(|e| e.path()));
        }
    }
    total
}

/// Gives every file of `dir` owned by host uid or gid 0 to box root
/// (`uid`, `gid`), keeping setuid and setgid bits.
fn shift_root_owned(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        let new_uid = (meta.uid() == 0).then_some(uid);
        let new_gid = (meta.gid() == 0).then_some(gid);
        if new_uid.is_some() || new_gid.is_some() {
            std::os::unix::fs::lchown(&path, new_uid, new_gid)?;
            if !meta.file_type().is_symlink() && meta.mode() & 0o6000 != 0 {
                std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode(meta.mode() & 0o7777),
                )?;
            }
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                todo.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// The namespace engine keeps its own images (`image::local`).
#[async_trait]
impl Images for NamespaceEngine {
    async fn pull(
        &self,
        reference: &str,
        progress: crate::image::pull::Progress,
    ) -> Result<crate::model::ImageInfo> {
        Ok(self.images.pull(reference, progress).await?)
    }

    async fn list(&self) -> Result<Vec<crate::model::ImageInfo>> {
        Ok(self.images.list().await)
    }

    async fn inspect(&self, reference: &str) -> Result<crate::model::ImageInfo> {
        Ok(self.images.inspect(reference).await?)
    }

    async fn remove(
        &self,
        reference: &str,
        in_use: &InUse,
        force: bool,
    ) -> Result<crate::model::RemovedImage> {
        Ok(self.images.remove(reference, in_use, force).await?)
    }

    async fn prune(&self, in_use: &InUse) -> Result<crate::model::Pruned> {
        Ok(self.images.prune(in_use).await?)
    }

    async fn import(
        &self,
        path: &Path,
        reference: Option<&str>,
    ) -> Result<crate::model::ImageInfo> {
        Ok(self.images.import(path, reference).await?)
    }
}
