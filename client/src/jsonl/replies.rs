//! The envelope's replies and events as typed structs, serialized by serde
//! (camelCase on the wire). Each is turned into a JSON value for the
//! driver's outbound queue with [`to_value`].
//!
//! Invariant: these are the shapes `docs/jsonl.md` gives: an optional field
//! is left out when it has nothing to say (`warnings`, `signal`, ...),
//! except where the spec shows `null` (`exitCode`, `boxlite`,
//! `servicePid`).

use serde::Serialize;
use serde_json::Value;

use crate::boxes::{Created, PullEvent};
use crate::v1;

/// A reply or event as a JSON value.
pub fn to_value(t: &impl Serialize) -> Value {
    serde_json::to_value(t).expect("replies have string keys")
}

fn state_label(s: i32) -> &'static str {
    v1::BoxState::try_from(s)
        .unwrap_or(v1::BoxState::Unspecified)
        .label()
}

/// `{ok: true}`.
#[derive(Debug, Serialize)]
pub struct Ok {
    ok: bool,
}

pub const OK: Ok = Ok { ok: true };

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Describe {
    pub protocol: String,
    pub pid: u32,
    /// The BoxLite version, or null where the engine is not BoxLite.
    pub boxlite: Option<String>,
    pub engine: String,
    pub isolation: String,
    pub capabilities: Vec<String>,
}

/// A published port as `box.list` and `box.start` report it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    host_ip: String,
    host_port: u32,
    box_port: u32,
    protocol: &'static str,
}

impl From<&v1::PortMapping> for Port {
    fn from(p: &v1::PortMapping) -> Port {
        Port {
            host_ip: p.host_ip.clone(),
            host_port: p.host_port,
            box_port: p.box_port,
            protocol: "tcp",
        }
    }
}

fn ports(ps: &[v1::PortMapping]) -> Vec<Port> {
    ps.iter().map(Port::from).collect()
}

/// The reply to a call that made a box (create, clone, import).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxCreated {
    box_id: String,
    name: String,
    created: bool,
    elapsed_ms: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

impl From<Created> for BoxCreated {
    fn from(c: Created) -> BoxCreated {
        BoxCreated {
            created: c.created(),
            box_id: c.info.id,
            name: c.info.name,
            elapsed_ms: c.elapsed_ms,
            warnings: c.warnings,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxStarted {
    box_id: String,
    boot_ms: u64,
    ports: Vec<Port>,
}

impl From<v1::StartBoxResponse> for BoxStarted {
    fn from(r: v1::StartBoxResponse) -> BoxStarted {
        let b = r.r#box.unwrap_or_default();
        BoxStarted {
            ports: ports(&b.ports),
            box_id: b.id,
            boot_ms: r.boot_ms,
        }
    }
}

/// A box in `box.list`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxSummary {
    box_id: String,
    name: String,
    state: &'static str,
    image: String,
    created_at: i64,
    isolation: String,
    disk_bytes: Option<u64>,
    ports: Vec<Port>,
}

impl From<v1::BoxInfo> for BoxSummary {
    fn from(b: v1::BoxInfo) -> BoxSummary {
        BoxSummary {
            state: state_label(b.state),
            ports: ports(&b.ports),
            box_id: b.id,
            name: b.name,
            image: b.image,
            created_at: b.created_at_ms,
            isolation: b.isolation,
            disk_bytes: b.disk_bytes,
        }
    }
}

/// A box's resource use as `box.stats` and `boxctl stats --json` show it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoxStat {
    box_id: String,
    name: String,
    cpu_percent: f64,
    cpu_usec: u64,
    memory_bytes: u64,
    memory_limit_bytes: Option<u64>,
    pids: u32,
    disk_bytes: Option<u64>,
    net_rx_bytes: u64,
    net_tx_bytes: u64,
    at_ms: i64,
}

impl From<&v1::BoxStat> for BoxStat {
    fn from(b: &v1::BoxStat) -> BoxStat {
        BoxStat {
            box_id: b.id.clone(),
            name: b.name.clone(),
            cpu_percent: b.cpu_percent,
            cpu_usec: b.cpu_usec,
            memory_bytes: b.memory_bytes,
            memory_limit_bytes: b.memory_limit_bytes,
            pids: b.pids,
            disk_bytes: b.disk_bytes,
            net_rx_bytes: b.net_rx_bytes,
            net_tx_bytes: b.net_tx_bytes,
            at_ms: b.at_ms,
        }
    }
}

/// A snapshot as the envelope shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    name: String,
    #[serde(rename = "box")]
    box_name: String,
    created_at: i64,
    size_bytes: u64,
}

impl From<v1::SnapshotInfo> for Snapshot {
    fn from(s: v1::SnapshotInfo) -> Snapshot {
        Snapshot {
            name: s.name,
            box_name: s.box_name,
            created_at: s.created_at_ms,
            size_bytes: s.size_bytes,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exported {
    pub size_bytes: u64,
}

/// `box.copyIn`/`box.copyOut`: the archive's bytes moved.
#[derive(Debug, Serialize)]
pub struct Copied {
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecStarted {
    pub exec_id: String,
    pub launch_ms: u64,
}

/// The frames with no id, tagged by `type`.
#[derive(Debug, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Event<'a> {
    Transport {
        /// The daemon's pid, or null when it could not be reached.
        service_pid: Option<u32>,
        bridge_pid: u32,
        transport: &'static str,
        socket: String,
    },
    BoxState {
        box_id: String,
        name: String,
        state: &'static str,
        elapsed_ms: u64,
    },
    Output {
        exec_id: &'a str,
        stream: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        data_base64: Option<String>,
    },
    Exit {
        exec_id: &'a str,
        /// Null when a signal killed the command, or the exec failed.
        exit_code: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_message: Option<String>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
    },
    ImagePull {
        request_id: &'a Value,
        name: &'a str,
        reference: &'a str,
        #[serde(flatten)]
        phase: PullPhase,
    },
}

impl Event<'_> {
    pub fn box_state(ev: v1::BoxEvent) -> Event<'static> {
        Event::BoxState {
            state: state_label(ev.state),
            box_id: ev.box_id,
            name: ev.name,
            elapsed_ms: ev.elapsed_ms,
        }
    }
}

/// Where a pull is, in an `imagePull` event.
#[derive(Debug, Serialize)]
#[serde(
    tag = "phase",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum PullPhase {
    Started {
        digest: String,
        total_bytes: u64,
        layers: usize,
        cached_layers: usize,
    },
    Progress {
        done_bytes: u64,
        total_bytes: u64,
    },
    LayerDone {
        layer: String,
    },
    Unpacking,
    Done {
        digest: String,
        size: u64,
    },
}

impl From<&PullEvent> for PullPhase {
    fn from(e: &PullEvent) -> PullPhase {
        match e {
            PullEvent::Started(s) => PullPhase::Started {
                digest: s.digest.clone(),
                total_bytes: s.total_bytes,
                layers: s.layers.len(),
                cached_layers: s.layers.iter().filter(|l| l.cached).count(),
            },
            PullEvent::Progress(p) => PullPhase::Progress {
                done_bytes: p.done_bytes,
                total_bytes: p.total_bytes,
            },
            PullEvent::LayerDone(d) => PullPhase::LayerDone { layer: d.clone() },
            PullEvent::Unpacking(_) => PullPhase::Unpacking,
            PullEvent::Done(i) => PullPhase::Done {
                digest: i.digest.clone(),
                size: i.size,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_are_the_documented_ones() {
        assert_eq!(to_value(&OK), json!({"ok": true}));
        let created = BoxCreated::from(Created::from(v1::CreateBoxResponse {
            r#box: Some(v1::BoxInfo {
                id: "i".into(),
                name: "n".into(),
                ..Default::default()
            }),
            created: true,
            warnings: vec![],
            elapsed_ms: 5,
            replaced: false,
        }));
        assert_eq!(
            to_value(&created),
            json!({"boxId": "i", "name": "n", "created": true, "elapsedMs": 5})
        );
        let exit = Event::Exit {
            exec_id: "e",
            exit_code: None,
            signal: Some(9),
            error_message: None,
            timed_out: false,
        };
        assert_eq!(
            to_value(&exit),
            json!({"type": "exit", "execId": "e", "exitCode": null, "signal": 9})
        );
        let id = json!(4);
        let pull = Event::ImagePull {
            request_id: &id,
            name: "b",
            reference: "r",
            phase: PullPhase::Unpacking,
        };
        assert_eq!(
            to_value(&pull),
            json!({"type": "imagePull", "requestId": 4, "name": "b", "reference": "r", "phase": "unpacking"})
        );
        let s = Snapshot::from(v1::SnapshotInfo {
            name: "s".into(),
            box_name: "b".into(),
            created_at_ms: 1,
            size_bytes: 2,
        });
        assert_eq!(
            to_value(&s),
            json!({"name": "s", "box": "b", "createdAt": 1, "sizeBytes": 2})
        );
    }
}
