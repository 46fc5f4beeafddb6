//! boxd's own model: boxes, their specs and states, events, exec requests,
//! images and pull progress, as the registry, the engines and the image
//! store speak of them. Requests become the model in `validate.rs` (each
//! value parsed once), the model becomes replies in `service/wire.rs`; the
//! only other place the wire (`boxd_proto::v1`) appears below the service
//! is an exec's output stream (`execs.rs`), whose messages go to the
//! client as they are made.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// A bind mount, validated and canonicalized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    pub host_path: PathBuf,
    pub guest_path: String,
    pub read_only: bool,
}

/// What a box was asked to be. Persisted in `box.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxSpec {
    pub image: String,
    pub cpus: Option<u32>,
    pub memory_mib: Option<u32>,
    pub disk_size_gb: Option<u32>,
    pub mounts: Vec<Mount>,
    pub allow_net: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<String>,
    /// Kept here, in the daemon's private state, and nowhere else: never
    /// in a reply, a log line or the box.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<crate::egress::Secret>,
    /// Box ports published on the host while the box runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PortMapping>,
    /// The box user that mounted directories' owners become (podman's
    /// `--userns=keep-id`), and the box's default user; `None`: box root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_id: Option<KeepId>,
}

/// What `UpdateBox` changes of a spec; `None`: kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecUpdate {
    pub cpus: Option<u32>,
    pub memory_mib: Option<u32>,
    pub allow_net: Option<Vec<String>>,
}

/// Box ids (1-65535) that the host owner of a mount becomes in the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepId {
    pub uid: u32,
    pub gid: u32,
}

/// A published port (TCP): connections to `host_ip:host_port` are relayed
/// to `box_port` inside the box. `host_port` 0 asks for any free port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    pub host_ip: std::net::IpAddr,
    pub host_port: u16,
    pub box_port: u16,
}

impl PortMapping {
    /// The host address to listen on.
    pub fn host_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.host_ip, self.host_port)
    }

    /// Whether both would listen on one host port: the same port (not 0)
    /// on the same address, or on a wildcard address (which takes the port
    /// on every address; `::` on IPv4 ones too).
    pub fn overlaps(&self, other: &PortMapping) -> bool {
        self.host_port != 0
            && self.host_port == other.host_port
            && (self.host_ip == other.host_ip
                || self.host_ip.is_unspecified()
                || other.host_ip.is_unspecified())
    }

    /// Reachable from other machines: published on a wildcard address or
    /// on one that is not loopback.
    pub fn is_public(&self) -> bool {
        !self.host_ip.is_loopback()
    }
}

/// `127.0.0.1:8080->80/tcp`, `[::1]:0->80/tcp`, as `docker ps` shows them.
impl std::fmt::Display for PortMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}->{}/tcp", self.host_addr(), self.box_port)
    }
}

/// The warnings of a create that publishes ports other machines can reach.
pub fn public_port_warnings(ports: &[PortMapping]) -> Vec<String> {
    ports
        .iter()
        .filter(|p| p.is_public())
        .map(|p| {
            let on = match (p.host_ip.is_unspecified(), p.host_port) {
                (true, 0) => format!("every address of this host ({})", p.host_ip),
                (true, port) => format!("port {port} of every address of this host ({})", p.host_ip),
                (false, 0) => p.host_ip.to_string(),
                (false, _) => p.host_addr().to_string(),
            };
            format!(
                "box port {} is published on {on}, which other machines can reach (use 127.0.0.1 to keep it to this host)",
                p.box_port
            )
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Created,
    Starting,
    Running,
    Stopping,
    Stopped,
    Removed,
    Failed,
}

impl State {
    /// The lower-case name, as in `box.json`, the CLI and the JSONL envelope.
    pub fn label(self) -> &'static str {
        match self {
            State::Created => "created",
            State::Starting => "starting",
            State::Running => "running",
            State::Stopping => "stopping",
            State::Stopped => "stopped",
            State::Removed => "removed",
            State::Failed => "failed",
        }
    }
}

/// A box as the daemon keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxRecord {
    pub id: String,
    pub name: String,
    pub spec: BoxSpec,
    pub image_digest: String,
    pub created_at_ms: i64,
    pub started_at_ms: i64,
    pub state: State,
    #[serde(default)]
    pub error: String,
    /// The box's own directory (`HOME/boxes/ID`); not persisted.
    #[serde(skip)]
    pub dir: PathBuf,
}

/// A box's name as `validate::box_name` accepted it: the registry takes
/// nothing else, so no unchecked name reaches a path, a lock or a log.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BoxName(String);

/// As the name in quotes (`"web"`): messages format names with `{:?}`,
/// and a person reads them.
impl std::fmt::Debug for BoxName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl BoxName {
    /// For `validate::box_name` only, which holds the rule.
    pub(crate) fn checked(name: String) -> BoxName {
        BoxName(name)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for BoxName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BoxName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A command to run in a box, as a client asked for it (validated: see
/// `validate::exec_start`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub box_name: BoxName,
    pub command: String,
    pub args: Vec<String>,
    /// Over the box's own environment.
    pub env: BTreeMap<String, String>,
    /// Normalized; `None`: the box's.
    pub working_dir: Option<String>,
    /// Killed after this long.
    pub timeout: Option<Duration>,
    pub stdin: bool,
    /// A TTY of this size (rows, columns).
    pub tty: Option<(u16, u16)>,
    /// Runs on when its clients go.
    pub detach: bool,
    /// The client acknowledges output and may reattach from an offset.
    pub resumable: bool,
    /// `USER[:GROUP]`; `None`: the image's user, else box root.
    pub user: Option<String>,
}

/// A change of a box's state, as `WatchBoxes` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoxEvent {
    pub box_id: String,
    pub name: String,
    pub state: State,
    /// How long the operation that ended in this state took.
    pub elapsed_ms: u64,
    pub at_ms: i64,
    pub message: String,
}

/// A stored image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// The references that name it (tags and digests), sorted.
    pub references: Vec<String>,
    /// The platform manifest's digest: what a box records.
    pub digest: String,
    /// The digest the registry gave for the reference (an index for
    /// multi-platform images), when pulled.
    pub repo_digest: String,
    /// Compressed bytes of its layers, as stored.
    pub size: u64,
    pub layers: u32,
    pub os: String,
    pub architecture: String,
    /// When it was pulled or imported, Unix ms.
    pub added_at_ms: i64,
    /// Names of the boxes created from it.
    pub used_by: Vec<String>,
    /// The image's default environment (`K=V`), working directory and
    /// command.
    pub env: Vec<String>,
    pub working_dir: String,
    pub cmd: Vec<String>,
    pub entrypoint: Vec<String>,
}

/// What removing an image did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemovedImage {
    /// References removed.
    pub untagged: Vec<String>,
    /// Images (digests) deleted.
    pub deleted: Vec<String>,
}

/// What pruning unused images did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    pub deleted: Vec<String>,
    pub reclaimed_bytes: u64,
}

/// One step of a pull, as it is reported while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullEvent {
    /// The manifest is read: what will be fetched.
    Started {
        reference: String,
        /// The platform manifest's digest.
        digest: String,
        layers: Vec<PullLayer>,
        /// Bytes to download (layers not cached).
        total_bytes: u64,
    },
    Progress {
        layer_digest: String,
        layer_done: u64,
        layer_size: u64,
        done_bytes: u64,
        total_bytes: u64,
    },
    /// A layer is downloaded and verified.
    LayerDone(String),
    /// Every layer is here; the image is being unpacked.
    Unpacking,
}

/// A layer of a pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullLayer {
    pub digest: String,
    pub size: u64,
    /// Already in the local blob store: nothing to download.
    pub cached: bool,
}

/// Now, in Unix milliseconds: the unit of every timestamp of the model.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
