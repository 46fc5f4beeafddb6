//! Named boxes: their records on disk, their lifecycle, their events.
//!
//! Invariants:
//! - a name maps to at most one box; `create` of an existing name reuses it;
//! - lifecycle operations on one box (create, start, stop, remove) run one
//!   at a time, under that box's own lock; different boxes never wait for
//!   each other;
//! - a record is written (atomically) before the operation that changed it
//!   is reported, so a daemon restart loses no box.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::broadcast;

use crate::engine::{Engine, Snapshot};
use crate::error::{Error, Result};
// The BoxLite engine's files still name the model through the registry.
use crate::model::{BoxEvent, BoxName, now_ms};
pub use crate::model::{BoxRecord, BoxSpec, Mount, PortMapping, State};

/// One box, behind the lock that serializes its lifecycle.
type Slot = tokio::sync::Mutex<BoxRecord>;

pub struct Registry {
    dir: PathBuf,
    engine: Arc<dyn Engine>,
    /// `max-boxes` (0: no limit).
    max_boxes: usize,
    events: broadcast::Sender<BoxEvent>,
    /// What watchers that ask for more than the live events are given;
    /// pushed and sent under this lock, so a watcher that reads it and
    /// subscribes under it misses none and sees none twice.
    kept: Mutex<Kept>,
    boxes: Mutex<BTreeMap<String, Arc<Slot>>>,
    /// Execs of boxes found running at start, until the exec table takes them.
    adopted: Mutex<Vec<(String, Vec<crate::engine::Adopted>)>>,
}

#[derive(Default)]
struct Kept {
    /// The last [`HISTORY`] events (`WatchBoxes.since_ms`).
    history: std::collections::VecDeque<BoxEvent>,
    /// Each box's last event, by name (`WatchBoxes.initial`).
    last: BTreeMap<String, BoxEvent>,
}

fn event(record: &BoxRecord, elapsed_ms: u64, message: &str) -> BoxEvent {
    BoxEvent {
        box_id: record.id.clone(),
        name: record.name.clone(),
        state: record.state,
        elapsed_ms,
        at_ms: now_ms(),
        message: message.to_owned(),
    }
}

/// How many past events the registry keeps for `WatchBoxes.since_ms`
/// (docker keeps 1000 too).
pub const HISTORY: usize = 1000;

/// How a new box gets its files.
enum Make<'a> {
    /// From its image.
    Create,
    /// A copy of another box's.
    Clone(&'a BoxRecord),
    /// From a box archive.
    Import(&'a std::path::Path),
}

/// The result of [`Registry::create`].
pub struct CreateOutcome {
    pub record: BoxRecord,
    pub created: bool,
    /// A box of that name was removed first ([`IfExists::Replace`]).
    pub replaced: bool,
    pub warnings: Vec<String>,
}

/// What a create does with an existing box of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfExists {
    /// Reuse it as it is (differences become warnings).
    Reuse,
    /// Reuse it only when its whole spec is the request's.
    SameSpec,
    /// Remove it (stopped first) and create anew.
    Replace,
    /// Refuse: the name must be new.
    Fail,
}

fn new_id() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut rng = rand::rng();
    (0..12)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

impl Registry {
    /// Loads every box under `dir` and reconciles it with the engine: a box
    /// recorded as running is found again ([`Engine::adopt`], with its
    /// execs) or, when the engine no longer runs it, stopped.
    pub async fn open(dir: PathBuf, engine: Arc<dyn Engine>, max_boxes: usize) -> Result<Registry> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        // An engine that cannot tell now (a remote server that does not
        // answer) leaves every record as it was: a box is marked stopped
        // only when the engine says it no longer runs.
        let running: Option<Vec<String>> = match engine.list().await {
            Ok(boxes) => Some(
                boxes
                    .into_iter()
                    .filter(|b| b.running)
                    .map(|b| b.id)
                    .collect(),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "the engine cannot list its boxes now; box states stay as recorded");
                None
            }
        };
        let mut boxes = BTreeMap::new();
        let mut adopted = Vec::new();
        let entries =
            std::fs::read_dir(&dir).map_err(|e| Error::io(format!("read {}", dir.display()), e))?;
        for entry in entries.flatten() {
            let path = entry.path().join("box.json");
            let text = match std::fs::read(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && entry.path().is_dir() => {
                    // A create that never finished (the record is written
                    // last): nothing refers to it.
                    tracing::info!(dir = %entry.path().display(), "removing an unfinished box");
                    let _ = std::fs::remove_dir_all(entry.path());
                    continue;
                }
                Err(_) => continue,
            };
            let mut record: BoxRecord = match serde_json::from_slice(&text) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "skipping unreadable box record");
                    continue;
                }
            };
            record.dir = entry.path();
            let was_running = matches!(
                record.state,
                State::Running | State::Starting | State::Stopping
            );
            // (A start or stop the old daemon did not finish: the box runs.)
            if was_running && let Some(execs) = engine.adopt(&record).await {
                if record.state != State::Running {
                    record.state = State::Running;
                    persist(&record)?;
                }
                adopted.push((record.name.clone(), execs));
                boxes.insert(record.name.clone(), Arc::new(Slot::new(record)));
                continue;
            }
            if was_running
                && running
                    .as_ref()
                    .is_some_and(|running| !running.contains(&record.id))
            {
                tracing::info!(name = %record.name, "box was running when boxd stopped; it is stopped now");
                record.state = State::Stopped;
                persist(&record)?;
            }
            boxes.insert(record.name.clone(), Arc::new(Slot::new(record)));
        }
        tracing::info!(boxes = boxes.len(), "box registry loaded");
        let (events, _) = broadcast::channel(1024);
        let mut kept = Kept::default();
        for slot in boxes.values() {
            let record = slot.try_lock().expect("a box just loaded");
            kept.last
                .insert(record.name.clone(), event(&record, 0, "loaded"));
        }
        Ok(Registry {
            dir,
            engine,
            max_boxes,
            events,
            kept: Mutex::new(kept),
            boxes: Mutex::new(boxes),
            adopted: Mutex::new(adopted),
        })
    }

    /// The execs of boxes found running at start, by box name (once).
    pub fn take_adopted(&self) -> Vec<(String, Vec<crate::engine::Adopted>)> {
        std::mem::take(&mut *self.adopted.lock().expect("adopted"))
    }

    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    pub fn subscribe(&self) -> broadcast::Receiver<BoxEvent> {
        self.events.subscribe()
    }

    /// The kept events at or after `since_ms` (Unix ms), then every later
    /// one, with no gap and no duplicate between them.
    pub fn subscribe_since(&self, since_ms: i64) -> (Vec<BoxEvent>, broadcast::Receiver<BoxEvent>) {
        let kept = self.kept.lock().expect("kept events");
        let past = kept
            .history
            .iter()
            .filter(|e| e.at_ms >= since_ms)
            .cloned()
            .collect();
        (past, self.events.subscribe())
    }

    /// Every box's last event (its state now), by name, then every later
    /// event, with no gap and no duplicate between them.
    pub fn subscribe_current(&self) -> (Vec<BoxEvent>, broadcast::Receiver<BoxEvent>) {
        let kept = self.kept.lock().expect("kept events");
        let now = kept.last.values().cloned().collect();
        (now, self.events.subscribe())
    }

    fn emit(&self, record: &BoxRecord, elapsed_ms: u64, message: &str) {
        let event = event(record, elapsed_ms, message);
        let mut kept = self.kept.lock().expect("kept events");
        if kept.history.len() == HISTORY {
            kept.history.pop_front();
        }
        kept.history.push_back(event.clone());
        if record.state == State::Removed {
            if kept
                .last
                .get(&record.name)
                .is_some_and(|e| e.box_id == record.id)
            {
                kept.last.remove(&record.name);
            }
        } else {
            kept.last.insert(record.name.clone(), event.clone());
        }
        let _ = self.events.send(event);
    }

    fn slot(&self, name: &str) -> Result<Arc<Slot>> {
        self.boxes
            .lock()
            .expect("registry lock")
            .get(name)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no box named {name:?}")))
    }

    /// Locks a box for a lifecycle operation. A box removed while the caller
    /// waited is reported as not found.
    async fn lock(&self, name: &str) -> Result<tokio::sync::OwnedMutexGuard<BoxRecord>> {
        let slot = self.slot(name)?;
        let guard = slot.lock_owned().await;
        if guard.state == State::Removed {
            return Err(Error::NotFound(format!("no box named {name:?}")));
        }
        Ok(guard)
    }

    /// Get-or-create by name (an existing box is reused as it is).
    pub async fn create(&self, name: &BoxName, spec: BoxSpec) -> Result<CreateOutcome> {
        self.create_with(name, spec, IfExists::Reuse).await
    }

    /// Creates `name`; what happens to an existing box of that name is
    /// `if_exists`'s to say. A refused clash changes nothing.
    pub async fn create_with(
        &self,
        name: &BoxName,
        spec: BoxSpec,
        if_exists: IfExists,
    ) -> Result<CreateOutcome> {
        let mut replaced = false;
        loop {
            let (slot, fresh) = {
                let mut boxes = self.boxes.lock().expect("registry lock");
                match boxes.get(name.as_str()) {
                    Some(slot) => (slot.clone(), None),
                    None => {
                        let (slot, guard) = self.reserve(&mut boxes, name, spec.clone())?;
                        (slot, Some(guard))
                    }
                }
            };
            if let Some(guard) = fresh {
                let mut out = self.create_new(slot, guard, Make::Create).await?;
                out.replaced = replaced;
                return Ok(out);
            }
            let mut guard = slot.lock_owned().await;
            if guard.state == State::Removed {
                // Removed (or its creation failed) while we waited: try again.
                continue;
            }
            match if_exists {
                IfExists::Reuse => {}
                IfExists::SameSpec => {
                    let differs = spec_differences(&guard.spec, &spec);
                    if !differs.is_empty() {
                        return Err(Error::AlreadyExists(format!(
                            "a box named {:?} exists with a different spec ({}); nothing was changed",
                            guard.name,
                            differs.join("; ")
                        )));
                    }
                }
                IfExists::Fail => {
                    return Err(Error::AlreadyExists(format!(
                        "a box named {:?} exists already",
                        guard.name
                    )));
                }
                IfExists::Replace => {
                    self.remove_locked(&mut guard, true).await?;
                    replaced = true;
                    continue;
                }
            }
            let warnings = reuse_warnings(&guard.spec, &spec);
            return Ok(CreateOutcome {
                record: guard.clone(),
                created: false,
                replaced: false,
                warnings,
            });
        }
    }

    /// A new box's record under `name` (which the map does not hold),
    /// published already locked, so that a concurrent create of the same
    /// name waits for this one to finish; counts against `max-boxes`.
    fn reserve(
        &self,
        boxes: &mut BTreeMap<String, Arc<Slot>>,
        name: &str,
        spec: BoxSpec,
    ) -> Result<(Arc<Slot>, tokio::sync::OwnedMutexGuard<BoxRecord>)> {
        if self.max_boxes > 0 && boxes.len() >= self.max_boxes {
            return Err(Error::ResourceExhausted(format!(
                "boxd holds {} boxes, its limit (max-boxes); remove some or raise the limit",
                boxes.len()
            )));
        }
        let id = new_id();
        let record = BoxRecord {
            dir: self.dir.join(&id),
            id,
            name: name.to_owned(),
            spec,
            image_digest: String::new(),
            created_at_ms: now_ms(),
            started_at_ms: 0,
            state: State::Created,
            error: String::new(),
        };
        let slot = Arc::new(Slot::new(record));
        let guard = slot.clone().try_lock_owned().expect("a new lock is free");
        boxes.insert(name.to_owned(), slot.clone());
        Ok((slot, guard))
    }

    /// Makes a box that must be new (a clone or an import): `name` taken
    /// is `AlreadyExists`.
    async fn create_only(
        &self,
        name: &str,
        spec: BoxSpec,
        make: Make<'_>,
    ) -> Result<CreateOutcome> {
        let (slot, guard) = {
            let mut boxes = self.boxes.lock().expect("registry lock");
            if boxes.contains_key(name) {
                return Err(Error::AlreadyExists(format!(
                    "a box named {name:?} exists already"
                )));
            }
            self.reserve(&mut boxes, name, spec)?
        };
        self.create_new(slot, guard, make).await
    }

    async fn create_new(
        &self,
        slot: Arc<Slot>,
        mut guard: tokio::sync::OwnedMutexGuard<BoxRecord>,
        make: Make<'_>,
    ) -> Result<CreateOutcome> {
        let result = async {
            std::fs::create_dir_all(&guard.dir)
                .map_err(|e| Error::io(format!("create {}", guard.dir.display()), e))?;
            let created = match make {
                Make::Create => self.engine.create(&guard).await?,
                Make::Clone(source) => self.engine.clone_box(source, &guard).await?,
                Make::Import(path) => self.engine.import(path, &guard).await?,
            };
            guard.image_digest = created.image_digest;
            persist(&guard)?;
            Ok::<_, Error>(created.warnings)
        }
        .await;
        match result {
            Ok(warnings) => {
                self.emit(&guard, 0, "created");
                Ok(CreateOutcome {
                    record: guard.clone(),
                    created: true,
                    replaced: false,
                    warnings,
                })
            }
            Err(e) => {
                guard.state = State::Removed;
                let _ = std::fs::remove_dir_all(&guard.dir);
                let mut boxes = self.boxes.lock().expect("registry lock");
                if boxes
                    .get(&guard.name)
                    .is_some_and(|s| Arc::ptr_eq(s, &slot))
                {
                    boxes.remove(&guard.name);
                }
                Err(e)
            }
        }
    }

    /// A new box `name` with `source`'s spec and a copy of its files
    /// (`source` may run; it stays locked while it is copied).
    pub async fn clone_box(&self, source: &BoxName, name: &BoxName) -> Result<CreateOutcome> {
        let src = self.lock(source).await?;
        self.create_only(name, src.spec.clone(), Make::Clone(&src))
            .await
    }

    /// A new box `name` from the archive at `path`, with `spec` (the
    /// archive's, as the caller checked it).
    pub async fn import(
        &self,
        name: &BoxName,
        spec: BoxSpec,
        path: &std::path::Path,
    ) -> Result<CreateOutcome> {
        self.create_only(name, spec, Make::Import(path)).await
    }

    /// Writes box `name` as an archive at `path`; returns its size.
    pub async fn export(&self, name: &BoxName, path: &std::path::Path) -> Result<u64> {
        let guard = self.lock(name).await?;
        self.engine.export(&guard, path).await
    }

    pub async fn snapshot_create(&self, name: &BoxName, snapshot: &str) -> Result<Snapshot> {
        let guard = self.lock(name).await?;
        self.engine.snapshot_create(&guard, snapshot).await
    }

    pub async fn snapshot_list(&self, name: &BoxName) -> Result<Vec<Snapshot>> {
        let guard = self.lock(name).await?;
        self.engine.snapshot_list(&guard).await
    }

    /// Puts a stopped box's files back as the snapshot holds them.
    pub async fn snapshot_restore(&self, name: &BoxName, snapshot: &str) -> Result<BoxRecord> {
        let guard = self.lock(name).await?;
        if matches!(
            guard.state,
            State::Running | State::Starting | State::Stopping
        ) {
            return Err(Error::FailedPrecondition(format!(
                "box {name:?} is {}; stop it before restoring a snapshot",
                guard.state.label()
            )));
        }
        self.engine.snapshot_restore(&guard, snapshot).await?;
        Ok(guard.clone())
    }

    pub async fn snapshot_remove(&self, name: &BoxName, snapshot: &str) -> Result<()> {
        let guard = self.lock(name).await?;
        self.engine.snapshot_remove(&guard, snapshot).await
    }

    /// Starts a box; a running box is a no-op with boot time 0.
    pub async fn start(&self, name: &BoxName) -> Result<(BoxRecord, u64)> {
        let mut guard = self.lock(name).await?;
        if guard.state == State::Running {
            return Ok((guard.clone(), 0));
        }
        let begin = Instant::now();
        let previous = guard.state;
        guard.state = State::Starting;
        self.emit(&guard, 0, "");
        match self.engine.start(&guard).await {
            Ok(()) => {
                let boot_ms = begin.elapsed().as_millis() as u64;
                guard.state = State::Running;
                guard.started_at_ms = now_ms();
                guard.error.clear();
                persist(&guard)?;
                self.emit(&guard, boot_ms, "");
                Ok((guard.clone(), boot_ms))
            }
            Err(e @ Error::FailedPrecondition(_)) => {
                // Refused before anything was tried: the box is as it was.
                guard.state = previous;
                self.emit(&guard, 0, &e.to_string());
                Err(e)
            }
            Err(e) => {
                guard.state = State::Failed;
                guard.error = e.to_string();
                persist(&guard)?;
                self.emit(
                    &guard,
                    begin.elapsed().as_millis() as u64,
                    &guard.error.clone(),
                );
                Err(e)
            }
        }
    }

    /// Changes a box's limits or allow-list (`docker update`): the spec is
    /// kept for every later start, and a running box takes what its engine
    /// can apply now; the warnings say what waits for the next start. A
    /// secret whose hosts the new allow-list drops is refused.
    pub async fn update(
        &self,
        name: &BoxName,
        change: crate::model::SpecUpdate,
    ) -> Result<(BoxRecord, Vec<String>)> {
        let mut guard = self.lock(name).await?;
        let mut spec = guard.spec.clone();
        spec.cpus = change.cpus.or(spec.cpus);
        spec.memory_mib = change.memory_mib.or(spec.memory_mib);
        if let Some(allow) = change.allow_net {
            spec.allow_net = allow;
        }
        for secret in &spec.secrets {
            if let Some(host) = secret.hosts.iter().find(|h| !spec.allow_net.contains(h)) {
                return Err(Error::InvalidArgument(format!(
                    "secret {} goes to {host}, which the new allow-list leaves out; keep {host} in it",
                    secret.name
                )));
            }
        }
        let warnings = match guard.state {
            State::Running | State::Starting => self.engine.update_running(&guard, &spec).await?,
            _ => Vec::new(),
        };
        guard.spec = spec;
        persist(&guard)?;
        Ok((guard.clone(), warnings))
    }

    /// Stops a box; a box that is not running is left as it is.
    pub async fn stop(&self, name: &BoxName, force: bool) -> Result<BoxRecord> {
        let mut guard = self.lock(name).await?;
        self.stop_locked(&mut guard, force).await?;
        Ok(guard.clone())
    }

    async fn stop_locked(&self, guard: &mut BoxRecord, force: bool) -> Result<()> {
        if !matches!(guard.state, State::Running | State::Starting) {
            return Ok(());
        }
        let begin = Instant::now();
        guard.state = State::Stopping;
        self.emit(guard, 0, "");
        self.engine.stop(guard, force).await?;
        guard.state = State::Stopped;
        persist(guard)?;
        self.emit(guard, begin.elapsed().as_millis() as u64, "");
        Ok(())
    }

    /// Removes a box and its files; a running box needs `force`.
    pub async fn remove(&self, name: &BoxName, force: bool) -> Result<BoxRecord> {
        let mut guard = self.lock(name).await?;
        self.remove_locked(&mut guard, force).await?;
        Ok(guard.clone())
    }

    async fn remove_locked(&self, guard: &mut BoxRecord, force: bool) -> Result<()> {
        if matches!(guard.state, State::Running | State::Starting) {
            if !force {
                return Err(Error::FailedPrecondition(format!(
                    "box {:?} is running; stop it first or remove it with force",
                    guard.name
                )));
            }
            self.stop_locked(guard, true).await?;
        }
        self.engine.remove(guard).await?;
        guard.state = State::Removed;
        self.boxes
            .lock()
            .expect("registry lock")
            .remove(guard.name.as_str());
        self.emit(guard, 0, "");
        Ok(())
    }

    /// A snapshot of one box, waiting for any lifecycle operation on it.
    pub async fn get(&self, name: &BoxName) -> Result<BoxRecord> {
        Ok(self.lock(name).await?.clone())
    }

    /// The box, if it is running; for exec. Does not wait behind a slow
    /// lifecycle operation on another box.
    pub async fn running(&self, name: &BoxName) -> Result<BoxRecord> {
        let record = self.get(name).await?;
        match record.state {
            State::Running => Ok(record),
            state => Err(Error::FailedPrecondition(format!(
                "box {name:?} is {}; start it first",
                state.label()
            ))),
        }
    }

    /// Every box's slot, taken under the map lock only.
    fn slots(&self) -> Vec<Arc<Slot>> {
        self.boxes
            .lock()
            .expect("registry lock")
            .values()
            .cloned()
            .collect()
    }

    /// Every box, by name.
    pub async fn list(&self) -> Vec<BoxRecord> {
        let slots = self.slots();
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots {
            let record = slot.lock().await;
            if record.state != State::Removed {
                out.push(record.clone());
            }
        }
        out
    }

    /// Records the boxes the engine reports as ended on their own (their
    /// init killed from outside): such a box is `failed`, with the reason,
    /// and can be started again.
    pub fn watch_ended(self: &Arc<Self>) {
        let Some(mut ended) = self.engine.reports() else {
            return;
        };
        let registry = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(e) = ended.recv().await {
                let Some(registry) = registry.upgrade() else {
                    return;
                };
                registry.box_ended(e).await;
            }
        });
    }

    async fn box_ended(&self, report: crate::engine::Report) {
        // The name finds the slot; the id makes sure it is still that box
        // (not one removed and created again under the same name).
        let Ok(slot) = self.slot(&report.name) else {
            return;
        };
        let mut guard = slot.lock().await;
        if guard.id != report.id || guard.state != State::Running {
            return;
        }
        if !report.ended {
            // The box runs on: an event says what happened.
            self.emit(&guard, 0, &report.message);
            return;
        }
        guard.state = State::Failed;
        guard.error = format!("the box ended on its own: {}", report.message);
        if let Err(e) = persist(&guard) {
            tracing::warn!(box_name = %guard.name, error = %e, "could not record that the box ended");
        }
        self.emit(&guard, 0, &guard.error.clone());
    }

    /// Daemon shutdown. Boxes whose engine keeps them running without the
    /// daemon (BoxLite's detached VMs, namespace boxes' supervisors) are left running, to be found again
    /// at the next start; the others are stopped, and their records say so.
    pub async fn shutdown(&self) {
        if self.engine.info().boxes_outlive_daemon {
            self.engine.shutdown().await;
            return;
        }
        // Names in the map were checked when their boxes were made.
        let names: Vec<BoxName> = self
            .boxes
            .lock()
            .expect("registry lock")
            .keys()
            .map(|n| BoxName::checked(n.clone()))
            .collect();
        for name in names {
            if let Err(e) = self.stop(&name, true).await {
                tracing::warn!(box_name = %name, error = %e, "could not stop box at shutdown");
            }
        }
        self.engine.shutdown().await;
    }
}

/// Writes `box.json` atomically.
pub fn persist(record: &BoxRecord) -> Result<()> {
    let path = record.dir.join("box.json");
    let tmp = record.dir.join("box.json.tmp");
    let text = serde_json::to_vec_pretty(record).map_err(|e| Error::Internal(e.to_string()))?;
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        std::io::Write::write_all(&mut f, &text)?;
        f.sync_data()
    });
    if let Err(e) = written {
        // The record as it was stays in place; drop the half-written one.
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(format!("write {}", tmp.display()), e));
    }
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(format!("write {}", path.display()), e))
}

/// Differences between a reused box and what the request asked for (only
/// what the request gives counts: an empty field asks for nothing).
pub fn reuse_warnings(have: &BoxSpec, want: &BoxSpec) -> Vec<String> {
    differences(have, want, true)
        .into_iter()
        .map(|d| format!("{d}; the box is reused as it is"))
        .collect()
}

/// Every way `want` is not the spec `have`, in words, the empty fields of
/// `want` included (`IfExists::SameSpec`).
pub fn spec_differences(have: &BoxSpec, want: &BoxSpec) -> Vec<String> {
    differences(have, want, false)
}

fn differences(have: &BoxSpec, want: &BoxSpec, given_only: bool) -> Vec<String> {
    let mut w = Vec::new();
    let mut differs = |what: &str, given: bool, same: bool, have: String, want: String| {
        if (given || !given_only) && !same {
            w.push(format!(
                "{what} differs: the box has {have}, the request asked for {want}"
            ));
        }
    };
    let opt = |v: Option<u32>| v.map_or("the default".to_owned(), |v| v.to_string());
    let none = |s: String| {
        if s == "[]" || s == "{}" {
            "none".to_owned()
        } else {
            s
        }
    };
    differs(
        "image",
        !want.image.is_empty(),
        want.image == have.image,
        have.image.clone(),
        want.image.clone(),
    );
    differs(
        "cpus",
        want.cpus.is_some(),
        want.cpus == have.cpus,
        opt(have.cpus),
        opt(want.cpus),
    );
    differs(
        "memory_mib",
        want.memory_mib.is_some(),
        want.memory_mib == have.memory_mib,
        opt(have.memory_mib),
        opt(want.memory_mib),
    );
    differs(
        "disk_size_gb",
        want.disk_size_gb.is_some(),
        want.disk_size_gb == have.disk_size_gb,
        opt(have.disk_size_gb),
        opt(want.disk_size_gb),
    );
    let mounts = |m: &[crate::model::Mount]| {
        let items: Vec<String> = m
            .iter()
            .map(|m| {
                format!(
                    "{}:{}{}",
                    m.host_path.display(),
                    m.guest_path,
                    if m.read_only { ":ro" } else { "" }
                )
            })
            .collect();
        none(format!("[{}]", items.join(", ")))
    };
    differs(
        "mounts",
        !want.mounts.is_empty(),
        want.mounts == have.mounts,
        mounts(&have.mounts),
        mounts(&want.mounts),
    );
    differs(
        "allow_net",
        !want.allow_net.is_empty(),
        want.allow_net == have.allow_net,
        none(format!("{:?}", have.allow_net)),
        none(format!("{:?}", want.allow_net)),
    );
    differs(
        "env",
        !want.env.is_empty(),
        want.env == have.env,
        none(format!("{:?}", have.env)),
        none(format!("{:?}", want.env)),
    );
    differs(
        "working_dir",
        want.working_dir.is_some(),
        want.working_dir == have.working_dir,
        have.working_dir
            .clone()
            .map_or("the image's".into(), |d| format!("{d:?}")),
        want.working_dir
            .clone()
            .map_or("the image's".into(), |d| format!("{d:?}")),
    );
    // Names only: values are never written anywhere a client reads.
    let names = |s: &[crate::egress::Secret]| {
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        none(format!("[{}]", names.join(", ")))
    };
    differs(
        "secrets (or their values)",
        !want.secrets.is_empty(),
        want.secrets == have.secrets,
        names(&have.secrets),
        names(&want.secrets),
    );
    let ports = |p: &[PortMapping]| {
        let items: Vec<String> = p.iter().map(ToString::to_string).collect();
        none(format!("[{}]", items.join(", ")))
    };
    differs(
        "ports",
        !want.ports.is_empty(),
        want.ports == have.ports,
        ports(&have.ports),
        ports(&want.ports),
    );
    let keep_id = |k: &Option<crate::model::KeepId>| {
        k.map_or("box root".to_owned(), |k| {
            format!("keep-id:uid={},gid={}", k.uid, k.gid)
        })
    };
    differs(
        "mount owners (userns)",
        want.keep_id.is_some(),
        want.keep_id == have.keep_id,
        keep_id(&have.keep_id),
        keep_id(&want.keep_id),
    );
    w
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn name(s: &str) -> BoxName {
        crate::validate::box_name(s).unwrap()
    }
    use crate::engine::fake::FakeEngine;

    async fn open(engine: &Arc<FakeEngine>) -> (tempfile::TempDir, Arc<Registry>) {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path().join("boxes"), engine.clone(), 0)
            .await
            .unwrap();
        (dir, Arc::new(registry))
    }

    fn spec() -> BoxSpec {
        BoxSpec {
            image: "/images/fake".into(),
            ..BoxSpec::default()
        }
    }

    #[tokio::test]
    async fn an_update_keeps_what_it_is_not_given_and_every_secrets_host() {
        let engine = Arc::new(FakeEngine::default());
        let (_dir, registry) = open(&engine).await;
        let mut s = spec();
        s.memory_mib = Some(256);
        s.allow_net = vec!["api.example.com".into(), "example.org".into()];
        s.secrets = vec![crate::egress::Secret {
            name: "TOKEN".into(),
            hosts: vec!["api.example.com".into()],
            placeholder: "PH".into(),
            value: "v".into(),
        }];
        registry.create(&name("u"), s).await.unwrap();
        let (record, warnings) = registry
            .update(
                &name("u"),
                crate::model::SpecUpdate {
                    cpus: Some(2),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(warnings.is_empty(), "a stopped box: {warnings:?}");
        assert_eq!(
            (record.spec.cpus, record.spec.memory_mib),
            (Some(2), Some(256))
        );
        assert_eq!(record.spec.allow_net.len(), 2);
        let dropped = registry
            .update(
                &name("u"),
                crate::model::SpecUpdate {
                    allow_net: Some(vec!["example.org".into()]),
                    ..Default::default()
                },
            )
            .await
            .unwrap_err();
        assert!(dropped.to_string().contains("TOKEN"), "{dropped}");
        // Nothing changed by the refused update, and the change persisted.
        let again = Registry::open(_dir.path().join("boxes"), engine.clone(), 0)
            .await
            .unwrap();
        let kept = again.get(&name("u")).await.unwrap();
        assert_eq!(kept.spec.cpus, Some(2));
        assert_eq!(kept.spec.allow_net.len(), 2);
    }

    #[tokio::test]
    async fn concurrent_creates_of_one_name_make_one_box() {
        let engine = Arc::new(FakeEngine::default());
        engine.script.lock().unwrap().create_delay = Duration::from_millis(50);
        let (_dir, registry) = open(&engine).await;
        let creates: Vec<_> = (0..8)
            .map(|_| {
                let r = registry.clone();
                tokio::spawn(async move { r.create(&name("same"), spec()).await.unwrap() })
            })
            .collect();
        let mut made = 0;
        let mut ids = std::collections::HashSet::new();
        for c in creates {
            let outcome = c.await.unwrap();
            made += usize::from(outcome.created);
            ids.insert(outcome.record.id);
        }
        assert_eq!(made, 1, "one create makes it, the others reuse it");
        assert_eq!(ids.len(), 1);
        assert_eq!(engine.creates.lock().unwrap().as_slice(), ["same"]);
    }

    #[tokio::test]
    async fn a_clash_with_another_spec_is_refused_and_changes_nothing() {
        let engine = Arc::new(FakeEngine::default());
        let (_dir, registry) = open(&engine).await;
        let first = registry.create(&name("p"), spec()).await.unwrap();
        registry.start(&name("p")).await.unwrap();
        // The same spec reuses it.
        let same = registry
            .create_with(&name("p"), spec(), IfExists::SameSpec)
            .await
            .unwrap();
        assert!(!same.created && !same.replaced);
        assert_eq!(same.record.id, first.record.id);
        // Another image, or a spec that leaves out what the box has, is
        // refused and names each difference.
        let other = BoxSpec {
            image: "/images/other".into(),
            memory_mib: Some(256),
            ..BoxSpec::default()
        };
        let e = registry
            .create_with(&name("p"), other.clone(), IfExists::SameSpec)
            .await
            .err()
            .unwrap();
        let Error::AlreadyExists(msg) = &e else {
            panic!("{e:?}")
        };
        assert!(
            msg.contains("image differs") && msg.contains("/images/other"),
            "{msg}"
        );
        assert!(msg.contains("memory_mib differs"), "{msg}");
        let kept = registry.get(&name("p")).await.unwrap();
        assert_eq!(
            (kept.id.as_str(), kept.state),
            (first.record.id.as_str(), State::Running)
        );
        let with_mount = BoxSpec {
            mounts: vec![crate::model::Mount {
                host_path: "/h".into(),
                guest_path: "/g".into(),
                read_only: false,
            }],
            ..spec()
        };
        registry.create(&name("m"), with_mount).await.unwrap();
        let e = registry
            .create_with(&name("m"), spec(), IfExists::SameSpec)
            .await
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("mounts differs: the box has [/h:/g]"),
            "{e}"
        );
        // Reuse (the JSONL driver's and harness-box-exec's) only warns.
        let reused = registry.create(&name("p"), other.clone()).await.unwrap();
        assert!(!reused.created);
        assert_eq!(reused.warnings.len(), 2, "{:?}", reused.warnings);
        // Replace removes the running box and makes a new one.
        let replaced = registry
            .create_with(&name("p"), other.clone(), IfExists::Replace)
            .await
            .unwrap();
        assert!(replaced.created && replaced.replaced);
        assert_ne!(replaced.record.id, first.record.id);
        assert_eq!(replaced.record.spec, other);
        assert_eq!(registry.list().await.len(), 2);
        // Replace with no box of that name just creates.
        let fresh = registry
            .create_with(&name("q"), spec(), IfExists::Replace)
            .await
            .unwrap();
        assert!(fresh.created && !fresh.replaced);
    }

    #[tokio::test]
    async fn a_failed_create_leaves_nothing_and_frees_the_name() {
        let engine = Arc::new(FakeEngine::default());
        let (dir, registry) = open(&engine).await;
        let mut events = registry.subscribe();
        engine.script.lock().unwrap().fail_create = Some(|| Error::Engine("no image".into()));
        let e = registry.create(&name("b"), spec()).await.err().unwrap();
        assert!(matches!(e, Error::Engine(_)), "{e:?}");
        assert!(registry.list().await.is_empty());
        let left: Vec<_> = std::fs::read_dir(dir.path().join("boxes"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "the box's directory went: {left:?}");
        assert!(events.try_recv().is_err(), "no created event");
        // The name is free again, and a restart finds nothing either.
        engine.script.lock().unwrap().fail_create = None;
        assert!(registry.create(&name("b"), spec()).await.unwrap().created);
        let again = Registry::open(dir.path().join("boxes"), engine.clone(), 0)
            .await
            .unwrap();
        assert_eq!(again.list().await.len(), 1);
    }

    #[tokio::test]
    async fn a_failed_start_is_recorded_and_a_refused_one_changes_nothing() {
        let engine = Arc::new(FakeEngine::default());
        let (dir, registry) = open(&engine).await;
        registry.create(&name("c"), spec()).await.unwrap();

        engine.script.lock().unwrap().fail_start =
            Some(|| Error::FailedPrecondition("cannot boot here".into()));
        assert!(registry.start(&name("c")).await.is_err());
        assert_eq!(
            registry.get(&name("c")).await.unwrap().state,
            State::Created
        );

        engine.script.lock().unwrap().fail_start = Some(|| Error::Engine("it broke".into()));
        assert!(registry.start(&name("c")).await.is_err());
        let r = registry.get(&name("c")).await.unwrap();
        assert_eq!((r.state, r.error.as_str()), (State::Failed, "it broke"));
        // Recorded on disk before it was reported.
        let again = Registry::open(dir.path().join("boxes"), engine.clone(), 0)
            .await
            .unwrap();
        assert_eq!(again.get(&name("c")).await.unwrap().state, State::Failed);

        engine.script.lock().unwrap().fail_start = None;
        let (r, _) = registry.start(&name("c")).await.unwrap();
        assert_eq!((r.state, r.error.as_str()), (State::Running, ""));
        let (_, boot_ms) = registry.start(&name("c")).await.unwrap();
        assert_eq!(boot_ms, 0, "starting a running box is a no-op");
    }

    #[tokio::test]
    async fn max_boxes_and_remove_of_a_running_box() {
        let engine = Arc::new(FakeEngine::default());
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::open(dir.path().join("boxes"), engine.clone(), 1)
            .await
            .unwrap();
        registry.create(&name("one"), spec()).await.unwrap();
        let e = registry.create(&name("two"), spec()).await.err().unwrap();
        assert!(matches!(e, Error::ResourceExhausted(_)), "{e:?}");
        registry.start(&name("one")).await.unwrap();
        let e = registry.remove(&name("one"), false).await.err().unwrap();
        assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
        registry.remove(&name("one"), true).await.unwrap();
        assert!(engine.running.lock().unwrap().is_empty(), "stopped first");
        assert!(matches!(
            registry.get(&name("one")).await.err().unwrap(),
            Error::NotFound(_)
        ));
        registry.create(&name("two"), spec()).await.unwrap();
    }
}
