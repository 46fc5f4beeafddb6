//! The tools that make, list, run and remove boxes, and snapshot and clone
//! them.

use std::collections::HashMap;

use boxd_client::{BoxSpec, v1};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{Meta, ProgressNotificationParam, ProgressToken};
use rmcp::{Json, Peer, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Answer, BoxName, Boxes, Done, MARK, made_by_mcp, refused, status};

#[derive(Debug, Serialize, JsonSchema)]
struct BoxSummary {
    name: String,
    id: String,
    /// created, running, stopped, failed, ...
    state: String,
    image: String,
    /// `namespace` or `microvm`.
    isolation: String,
    /// Made through MCP (the agent may use it).
    made_by_mcp: bool,
    /// Published ports, `HOST_IP:HOST_PORT -> BOX_PORT`.
    ports: Vec<String>,
    /// Hosts the box may reach.
    allow_net: Vec<String>,
    mounts: Vec<MountSpec>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct BoxList {
    boxes: Vec<BoxSummary>,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct MountSpec {
    /// Absolute host directory (it must be one the user allowed).
    host_path: String,
    /// Absolute path inside the box.
    box_path: String,
    #[serde(default)]
    read_only: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CreateBox {
    /// 1 to 64 characters of [A-Za-z0-9_.-]; a box of that name with the
    /// same spec is reused.
    name: String,
    /// An OCI image reference (pulled when missing), or an absolute path
    /// to an OCI layout.
    image: String,
    /// Host directories to mount (only those the user allowed).
    #[serde(default)]
    mounts: Vec<MountSpec>,
    /// Environment of every command in the box.
    #[serde(default)]
    env: HashMap<String, String>,
    /// Hosts the box may reach through its egress proxy (only those the
    /// user allowed); nothing else is reachable.
    #[serde(default)]
    allow_net: Vec<String>,
    /// Ports to publish on the host, `[HOST_IP:]HOST_PORT:BOX_PORT`
    /// (only when the user allowed publishing).
    #[serde(default)]
    publish: Vec<String>,
    memory_mib: Option<u32>,
    cpus: Option<u32>,
    /// Working directory of commands (default the image's).
    working_dir: Option<String>,
    /// Start the box at once (default true).
    start: Option<bool>,
}

fn summary(info: v1::BoxInfo) -> BoxSummary {
    let spec = info.spec.clone().unwrap_or_default();
    BoxSummary {
        made_by_mcp: made_by_mcp(&info),
        state: info.state().label().to_owned(),
        name: info.name,
        id: info.id,
        image: info.image,
        isolation: info.isolation,
        ports: info
            .ports
            .iter()
            .map(|p| format!("{}:{} -> {}", p.host_ip, p.host_port, p.box_port))
            .collect(),
        allow_net: spec.allow_net,
        mounts: spec
            .mounts
            .into_iter()
            .map(|m| MountSpec {
                host_path: m.host_path,
                box_path: m.guest_path,
                read_only: m.read_only,
            })
            .collect(),
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Snapshot {
    #[serde(rename = "box")]
    box_name: String,
    /// The snapshot's name (as a box name).
    name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SnapshotSummary {
    name: String,
    #[serde(rename = "box")]
    box_name: String,
    /// Unix time in milliseconds.
    created_at_ms: i64,
    size_bytes: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct SnapshotList {
    snapshots: Vec<SnapshotSummary>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct CloneBox {
    /// The box to copy (running or not).
    source: String,
    /// The new box's name; it must not exist.
    name: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Stats {
    name: String,
    /// Over the last second; 100 = one core.
    cpu_percent: f64,
    cpu_seconds: f64,
    memory_bytes: u64,
    memory_limit_bytes: Option<u64>,
    processes: u32,
    /// Bytes the box's own files take.
    disk_bytes: Option<u64>,
    net_rx_bytes: u64,
    net_tx_bytes: u64,
}

/// An image pull's progress as an MCP progress notification, when the
/// client asked for them (a progress token on the call); `last` keeps the
/// figure rising (the unpack phase repeats the downloaded total).
fn pull_progress(
    peer: &Peer<RoleServer>,
    token: Option<ProgressToken>,
    event: &boxd_client::boxes::PullEvent,
    last: &mut f64,
) -> impl std::future::Future<Output = ()> + use<> {
    use boxd_client::boxes::PullEvent;
    let note = token.and_then(|token| {
        let (progress, total, message) = match event {
            PullEvent::Started(s) => (
                0.0,
                Some(s.total_bytes as f64),
                format!("pulling {}", s.reference),
            ),
            PullEvent::Progress(p) => (
                p.done_bytes as f64,
                Some(p.total_bytes as f64),
                format!("downloaded {} of {} bytes", p.done_bytes, p.total_bytes),
            ),
            PullEvent::Unpacking(_) => (*last, None, "unpacking".to_owned()),
            _ => return None,
        };
        *last = last.max(progress);
        let mut n = ProgressNotificationParam::new(token, *last);
        n.total = total;
        n.message = Some(message);
        Some(n)
    });
    let peer = peer.clone();
    async move {
        if let Some(n) = note {
            let _ = peer.notify_progress(n).await;
        }
    }
}

fn snapshot(s: v1::SnapshotInfo) -> SnapshotSummary {
    SnapshotSummary {
        name: s.name,
        box_name: s.box_name,
        created_at_ms: s.created_at_ms,
        size_bytes: s.size_bytes,
    }
}

impl Boxes {
    /// A box spec within the user's policy (a clone copies its source's:
    /// with `--any-box`, a box the user made may reach more).
    fn within_policy(&self, spec: &v1::BoxSpec) -> Result<(), String> {
        let p = &self.policy;
        p.image(&spec.image).map_err(refused)?;
        p.allow_net(&spec.allow_net).map_err(refused)?;
        p.publish(spec.ports.len()).map_err(refused)?;
        p.existing_resources(spec.memory_mib, spec.cpus)
            .map_err(refused)?;
        for m in &spec.mounts {
            p.mount_path(&m.host_path).map_err(refused)?;
        }
        Ok(())
    }
}

#[tool_router(router = box_tools, vis = "pub(super)")]
impl Boxes {
    #[tool(
        description = "List boxes (hardware- or namespace-isolated sandboxes, each with its own files, processes and network policy): name, state, image, mounts, network allow-list, published ports, and whether it was made through MCP (only those can be used unless the user allowed every box)."
    )]
    async fn list_boxes(&self) -> Answer<BoxList> {
        let mut client = self.client().await?;
        let list = client
            .list_boxes(v1::ListBoxesRequest {})
            .await
            .map_err(status)?
            .into_inner();
        Ok(Json(BoxList {
            boxes: list.boxes.into_iter().map(summary).collect(),
        }))
    }

    #[tool(
        description = "Create a box from an image and start it (a box of that name with the same spec is reused, one with another spec is an error). A box reaches no network unless hosts are listed in allow_net, and sees no host files unless directories are mounted; both only as far as the user who started this server allows. The image is pulled when missing."
    )]
    async fn create_box(
        &self,
        meta: Meta,
        client_peer: Peer<RoleServer>,
        Parameters(req): Parameters<CreateBox>,
    ) -> Answer<BoxSummary> {
        let p = &self.policy;
        p.image(&req.image).map_err(refused)?;
        p.allow_net(&req.allow_net).map_err(refused)?;
        p.publish(req.publish.len()).map_err(refused)?;
        let (memory_mib, cpus) = p.resources(req.memory_mib, req.cpus).map_err(refused)?;
        let mut mounts = Vec::new();
        for m in &req.mounts {
            let host = p.mount_path(&m.host_path).map_err(refused)?;
            mounts.push(v1::Mount {
                host_path: host.to_string_lossy().into_owned(),
                guest_path: m.box_path.clone(),
                read_only: m.read_only,
            });
        }
        let mut ports = Vec::new();
        for word in &req.publish {
            ports.push(boxd_client::spec::parse_publish(word).map_err(|e| e.to_string())?);
        }
        // The mark is the server's to set: one the agent gives is replaced.
        let mut env = req.env.clone();
        env.insert(MARK.0.into(), MARK.1.into());
        let mut client = self.client().await?;
        let exists = self.inspect(&mut client, &req.name).await.ok();
        match &exists {
            Some(info) => p.may_use(&req.name, made_by_mcp(info)).map_err(refused)?,
            None => p
                .one_more_box(self.made_here(&mut client).await?)
                .map_err(refused)?,
        }
        let spec = BoxSpec::new(boxd_client::spec::image_arg(&req.image))
            .mounts(mounts)
            .envs(env)
            .allow_net(req.allow_net.clone())
            .ports(ports)
            .memory_mib(memory_mib)
            .cpus(cpus)
            .working_dir(req.working_dir.clone());
        let created =
            boxd_client::boxes::create(&mut client, &req.name, spec, v1::IfExists::SameSpec, {
                let mut last = 0.0;
                move |event| {
                    pull_progress(&client_peer, meta.get_progress_token(), event, &mut last)
                }
            })
            .await
            .map_err(status)?;
        let mut info = created.info;
        if req.start.unwrap_or(true) && info.state() != v1::BoxState::Running {
            info = client
                .start_box(v1::StartBoxRequest {
                    name: req.name.clone(),
                })
                .await
                .map_err(status)?
                .into_inner()
                .r#box
                .unwrap_or(info);
        }
        Ok(Json(summary(info)))
    }

    #[tool(description = "Start a stopped box (its files are as they were).")]
    async fn start_box(&self, Parameters(b): Parameters<BoxName>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        let info = client
            .start_box(v1::StartBoxRequest {
                name: b.name.clone(),
            })
            .await
            .map_err(status)?
            .into_inner()
            .r#box;
        Ok(Json(Done::of(b.name, info)))
    }

    #[tool(description = "Stop a running box: every process in it ends; its files stay.")]
    async fn stop_box(&self, Parameters(b): Parameters<BoxName>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        let info = client
            .stop_box(v1::StopBoxRequest {
                name: b.name.clone(),
                force: false,
            })
            .await
            .map_err(status)?
            .into_inner()
            .r#box;
        Ok(Json(Done::of(b.name, info)))
    }

    #[tool(
        description = "Remove a box with its files (stopping it first). Mounted host directories are not touched."
    )]
    async fn remove_box(&self, Parameters(b): Parameters<BoxName>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        client
            .remove_box(v1::RemoveBoxRequest {
                name: b.name.clone(),
                force: true,
            })
            .await
            .map_err(status)?;
        Ok(Json(Done {
            name: b.name,
            state: "removed".into(),
        }))
    }

    #[tool(
        description = "Snapshot a box's files under a name (the box may be running); restore it later with snapshot_restore."
    )]
    async fn snapshot_create(
        &self,
        Parameters(req): Parameters<Snapshot>,
    ) -> Answer<SnapshotSummary> {
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let info = client
            .create_snapshot(v1::CreateSnapshotRequest {
                box_name: req.box_name,
                name: req.name,
            })
            .await
            .map_err(status)?
            .into_inner();
        Ok(Json(snapshot(info)))
    }

    #[tool(description = "List a box's snapshots.")]
    async fn snapshot_list(&self, Parameters(b): Parameters<BoxName>) -> Answer<SnapshotList> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        let list = client
            .list_snapshots(v1::ListSnapshotsRequest { box_name: b.name })
            .await
            .map_err(status)?
            .into_inner();
        Ok(Json(SnapshotList {
            snapshots: list.snapshots.into_iter().map(snapshot).collect(),
        }))
    }

    #[tool(
        description = "Put a box's files back as a snapshot had them (the box must be stopped: stop_box first, start_box after)."
    )]
    async fn snapshot_restore(&self, Parameters(req): Parameters<Snapshot>) -> Answer<Done> {
        let mut client = self.client().await?;
        self.usable(&mut client, &req.box_name).await?;
        let info = client
            .restore_snapshot(v1::RestoreSnapshotRequest {
                box_name: req.box_name.clone(),
                name: req.name,
            })
            .await
            .map_err(status)?
            .into_inner()
            .r#box;
        Ok(Json(Done::of(req.box_name, info)))
    }

    #[tool(
        description = "Make a new box that is a copy of another (its files, image and spec), not started."
    )]
    async fn clone_box(&self, Parameters(req): Parameters<CloneBox>) -> Answer<BoxSummary> {
        let mut client = self.client().await?;
        let source = self.usable(&mut client, &req.source).await?;
        self.within_policy(&source.spec.clone().unwrap_or_default())?;
        self.policy
            .one_more_box(self.made_here(&mut client).await?)
            .map_err(refused)?;
        let made = client
            .clone_box(v1::CloneBoxRequest {
                source: req.source,
                name: req.name,
            })
            .await
            .map_err(status)?
            .into_inner();
        Ok(Json(summary(made.r#box.unwrap_or_default())))
    }

    #[tool(
        description = "What a running box uses now: CPU, memory, processes, disk and network bytes."
    )]
    async fn box_stats(&self, Parameters(b): Parameters<BoxName>) -> Answer<Stats> {
        let mut client = self.client().await?;
        self.usable(&mut client, &b.name).await?;
        let mut stream = client
            .box_stats(v1::BoxStatsRequest {
                names: vec![b.name.clone()],
                stream: false,
                interval_ms: 0,
            })
            .await
            .map_err(status)?
            .into_inner();
        let sample = stream
            .message()
            .await
            .map_err(status)?
            .and_then(|r| r.boxes.into_iter().next())
            .ok_or_else(|| format!("box {} is not running", b.name))?;
        Ok(Json(Stats {
            name: sample.name,
            cpu_percent: sample.cpu_percent,
            cpu_seconds: sample.cpu_usec as f64 / 1e6,
            memory_bytes: sample.memory_bytes,
            memory_limit_bytes: sample.memory_limit_bytes,
            processes: sample.pids,
            disk_bytes: sample.disk_bytes,
            net_rx_bytes: sample.net_rx_bytes,
            net_tx_bytes: sample.net_tx_bytes,
        }))
    }
}
