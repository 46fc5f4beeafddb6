//! The model as the wire shows it: every conversion of boxd's own types
//! ([`crate::model`]) into `boxd_proto::v1` replies is here. (Requests go
//! the other way through `validate.rs`, which parses each value once.)
//!
//! **Invariant:** a secret's value never leaves the daemon: specs go out
//! with their secrets' names, hosts and placeholders only.

use boxd_proto::v1;

use crate::model::{
    BoxEvent, BoxSpec, ImageInfo, PortMapping, Pruned, PullEvent, PullLayer, RemovedImage, State,
};

impl From<State> for v1::BoxState {
    fn from(s: State) -> v1::BoxState {
        match s {
            State::Created => v1::BoxState::Created,
            State::Starting => v1::BoxState::Starting,
            State::Running => v1::BoxState::Running,
            State::Stopping => v1::BoxState::Stopping,
            State::Stopped => v1::BoxState::Stopped,
            State::Removed => v1::BoxState::Removed,
            State::Failed => v1::BoxState::Failed,
        }
    }
}

pub fn box_spec(s: &BoxSpec) -> v1::BoxSpec {
    v1::BoxSpec {
        image: s.image.clone(),
        cpus: s.cpus,
        memory_mib: s.memory_mib,
        disk_size_gb: s.disk_size_gb,
        mounts: s
            .mounts
            .iter()
            .map(|m| v1::Mount {
                host_path: m.host_path.to_string_lossy().into_owned(),
                guest_path: m.guest_path.clone(),
                read_only: m.read_only,
            })
            .collect(),
        allow_net: s.allow_net.clone(),
        env: s.env.clone().into_iter().collect(),
        working_dir: s.working_dir.clone().unwrap_or_default(),
        // Values are write-only.
        secrets: s
            .secrets
            .iter()
            .map(|x| v1::Secret {
                name: x.name.clone(),
                hosts: x.hosts.clone(),
                placeholder: x.placeholder.clone(),
                value: String::new(),
            })
            .collect(),
        ports: s.ports.iter().map(port).collect(),
        keep_id: s.keep_id.map(|k| v1::KeepId {
            uid: k.uid,
            gid: k.gid,
        }),
    }
}

pub fn port(p: &PortMapping) -> v1::PortMapping {
    v1::PortMapping {
        host_ip: p.host_ip.to_string(),
        host_port: p.host_port.into(),
        box_port: p.box_port.into(),
        protocol: "tcp".into(),
    }
}

impl From<BoxEvent> for v1::BoxEvent {
    fn from(e: BoxEvent) -> v1::BoxEvent {
        v1::BoxEvent {
            box_id: e.box_id,
            name: e.name,
            state: v1::BoxState::from(e.state) as i32,
            elapsed_ms: e.elapsed_ms,
            at_ms: e.at_ms,
            message: e.message,
            initial: false,
            synced: false,
        }
    }
}

impl From<ImageInfo> for v1::ImageInfo {
    fn from(i: ImageInfo) -> v1::ImageInfo {
        v1::ImageInfo {
            references: i.references,
            digest: i.digest,
            repo_digest: i.repo_digest,
            size: i.size,
            layers: i.layers,
            os: i.os,
            architecture: i.architecture,
            added_at_ms: i.added_at_ms,
            used_by: i.used_by,
            env: i.env,
            working_dir: i.working_dir,
            cmd: i.cmd,
            entrypoint: i.entrypoint,
        }
    }
}

impl From<RemovedImage> for v1::RemoveImageResponse {
    fn from(r: RemovedImage) -> v1::RemoveImageResponse {
        v1::RemoveImageResponse {
            untagged: r.untagged,
            deleted: r.deleted,
        }
    }
}

impl From<Pruned> for v1::PruneImagesResponse {
    fn from(p: Pruned) -> v1::PruneImagesResponse {
        v1::PruneImagesResponse {
            deleted: p.deleted,
            reclaimed_bytes: p.reclaimed_bytes,
        }
    }
}

impl From<PullEvent> for v1::PullImageEvent {
    fn from(e: PullEvent) -> v1::PullImageEvent {
        use v1::pull_image_event::Event;
        let event = match e {
            PullEvent::Started {
                reference,
                digest,
                layers,
                total_bytes,
            } => Event::Started(v1::PullStarted {
                reference,
                digest,
                layers: layers
                    .into_iter()
                    .map(
                        |PullLayer {
                             digest,
                             size,
                             cached,
                         }| v1::PullLayer {
                            digest,
                            size,
                            cached,
                        },
                    )
                    .collect(),
                total_bytes,
            }),
            PullEvent::Progress {
                layer_digest,
                layer_done,
                layer_size,
                done_bytes,
                total_bytes,
            } => Event::Progress(v1::PullProgress {
                layer_digest,
                layer_done,
                layer_size,
                done_bytes,
                total_bytes,
            }),
            PullEvent::LayerDone(digest) => Event::LayerDone(digest),
            PullEvent::Unpacking => Event::Unpacking(true),
        };
        v1::PullImageEvent { event: Some(event) }
    }
}
