//! Snapshots of a box's files, clones, and box archives.

use std::time::Instant;

use boxd_proto::tonic::Status;
use boxd_proto::v1;

use super::Service;
use crate::engine::Snapshot;
use crate::registry::{BoxSpec, CreateOutcome};
use crate::validate;

fn snapshot_to_proto(box_name: &str, s: Snapshot) -> v1::SnapshotInfo {
    v1::SnapshotInfo {
        name: s.name,
        box_name: box_name.to_owned(),
        created_at_ms: s.created_at_ms,
        size_bytes: s.size_bytes,
    }
}

impl Service {
    pub(super) async fn serve_create_snapshot(
        &self,
        req: v1::CreateSnapshotRequest,
    ) -> Result<v1::SnapshotInfo, Status> {
        let box_name = validate::box_name(&req.box_name)?;
        validate::snapshot_name(&req.name)?;
        let s = self.registry.snapshot_create(&box_name, &req.name).await?;
        Ok(snapshot_to_proto(&req.box_name, s))
    }

    pub(super) async fn serve_list_snapshots(
        &self,
        req: v1::ListSnapshotsRequest,
    ) -> Result<v1::ListSnapshotsResponse, Status> {
        let box_name = validate::box_name(&req.box_name)?;
        let list = self.registry.snapshot_list(&box_name).await?;
        Ok(v1::ListSnapshotsResponse {
            snapshots: list
                .into_iter()
                .map(|s| snapshot_to_proto(&req.box_name, s))
                .collect(),
        })
    }

    pub(super) async fn serve_restore_snapshot(
        &self,
        req: v1::RestoreSnapshotRequest,
    ) -> Result<v1::RestoreSnapshotResponse, Status> {
        let box_name = validate::box_name(&req.box_name)?;
        validate::snapshot_name(&req.name)?;
        let record = self.registry.snapshot_restore(&box_name, &req.name).await?;
        Ok(v1::RestoreSnapshotResponse {
            r#box: Some(self.info(&record).await),
        })
    }

    pub(super) async fn serve_remove_snapshot(
        &self,
        req: v1::RemoveSnapshotRequest,
    ) -> Result<v1::RemoveSnapshotResponse, Status> {
        let box_name = validate::box_name(&req.box_name)?;
        validate::snapshot_name(&req.name)?;
        self.registry.snapshot_remove(&box_name, &req.name).await?;
        Ok(v1::RemoveSnapshotResponse {})
    }

    pub(super) async fn serve_clone(
        &self,
        req: v1::CloneBoxRequest,
    ) -> Result<v1::CreateBoxResponse, Status> {
        let begin = Instant::now();
        let source = validate::box_name(&req.source)?;
        let name = validate::box_name(&req.name)?;
        let out = self.registry.clone_box(&source, &name).await?;
        Ok(self.created(out, Vec::new(), begin).await)
    }

    pub(super) async fn serve_export(
        &self,
        req: v1::ExportBoxRequest,
    ) -> Result<v1::ExportBoxResponse, Status> {
        let name = validate::box_name(&req.name)?;
        let path = validate::export_path(&req.path)?;
        let size_bytes = self.registry.export(&name, &path).await?;
        Ok(v1::ExportBoxResponse { size_bytes })
    }

    pub(super) async fn serve_import(
        &self,
        req: v1::ImportBoxRequest,
    ) -> Result<v1::CreateBoxResponse, Status> {
        let begin = Instant::now();
        let name = validate::box_name(&req.name)?;
        let path = validate::import_path(&req.path)?;
        let archived = self.registry.engine().archive_spec(&path).await?;
        let (spec, warnings) = self.imported_spec(archived, req.allow_net, req.ports)?;
        let out = self.registry.import(&name, spec, &path).await?;
        Ok(self.created(out, warnings, begin).await)
    }

    /// An archive's spec, checked as a create's is. What belongs to the
    /// host it came from, or would let its author choose what this host
    /// exposes, is dropped with a warning: its mounts (host paths an
    /// archive's author chose), its secrets (whose values never leave the
    /// daemon that held them), its network allow-list and its published
    /// ports (in their place: what the importer gives, `allow_net` and
    /// `ports`).
    fn imported_spec(
        &self,
        mut spec: BoxSpec,
        allow_net: Vec<String>,
        ports: Vec<v1::PortMapping>,
    ) -> Result<(BoxSpec, Vec<String>), Status> {
        let mut warnings = Vec::new();
        if !spec.mounts.is_empty() {
            let list: Vec<String> = spec
                .mounts
                .drain(..)
                .map(|m| format!("{}:{}", m.host_path.display(), m.guest_path))
                .collect();
            warnings.push(format!(
                "the archive's mounts were not imported (host paths are the exporting host's): {}",
                list.join(", ")
            ));
        }
        if !spec.secrets.is_empty() {
            let names: Vec<String> = spec.secrets.drain(..).map(|s| s.name).collect();
            warnings.push(format!(
                "the archive's secrets were not imported (a secret's value never leaves the daemon that held it); recreate the box with these secrets to use them: {}",
                names.join(", ")
            ));
        }
        let mut wire = super::wire::box_spec(&spec);
        if !wire.allow_net.is_empty() && wire.allow_net != allow_net {
            warnings.push(format!(
                "the archive's network allow-list was not imported (an archive must not choose what this host lets a box reach); import again with --allow-net to give it: {}",
                wire.allow_net.join(", ")
            ));
        }
        if !wire.ports.is_empty() && wire.ports != ports {
            let list: Vec<String> = wire
                .ports
                .iter()
                .map(|p| {
                    let ip = if p.host_ip.is_empty() {
                        "127.0.0.1"
                    } else {
                        &p.host_ip
                    };
                    format!("{ip}:{}:{}", p.host_port, p.box_port)
                })
                .collect();
            warnings.push(format!(
                "the archive's published ports were not imported (an archive must not choose where this host listens); import again with --publish to give them: {}",
                list.join(", ")
            ));
        }
        wire.allow_net = allow_net;
        wire.ports = ports;
        let spec = self.spec_from_proto(wire)?;
        Ok((spec, warnings))
    }

    async fn created(
        &self,
        out: CreateOutcome,
        mut warnings: Vec<String>,
        begin: Instant,
    ) -> v1::CreateBoxResponse {
        warnings.extend(out.warnings);
        warnings.extend(self.isolation_warning());
        v1::CreateBoxResponse {
            r#box: Some(self.info(&out.record).await),
            created: out.created,
            warnings,
            elapsed_ms: begin.elapsed().as_millis() as u64,
            replaced: false,
        }
    }
}
