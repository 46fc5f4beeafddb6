//! Snapshots of a box's files, clones, and box archives.

use boxd_proto::tonic::Status;
use boxd_proto::v1;

use super::Service;
use crate::error::Error;

fn not_yet<T>(what: &str) -> Result<T, Status> {
    Err(Error::Unimplemented(format!("{what} is not built yet")).into())
}

impl Service {
    pub(super) async fn serve_create_snapshot(
        &self,
        _req: v1::CreateSnapshotRequest,
    ) -> Result<v1::SnapshotInfo, Status> {
        not_yet("CreateSnapshot")
    }

    pub(super) async fn serve_list_snapshots(
        &self,
        _req: v1::ListSnapshotsRequest,
    ) -> Result<v1::ListSnapshotsResponse, Status> {
        not_yet("ListSnapshots")
    }

    pub(super) async fn serve_restore_snapshot(
        &self,
        _req: v1::RestoreSnapshotRequest,
    ) -> Result<v1::RestoreSnapshotResponse, Status> {
        not_yet("RestoreSnapshot")
    }

    pub(super) async fn serve_remove_snapshot(
        &self,
        _req: v1::RemoveSnapshotRequest,
    ) -> Result<v1::RemoveSnapshotResponse, Status> {
        not_yet("RemoveSnapshot")
    }

    pub(super) async fn serve_clone(
        &self,
        _req: v1::CloneBoxRequest,
    ) -> Result<v1::CreateBoxResponse, Status> {
        not_yet("CloneBox")
    }

    pub(super) async fn serve_export(
        &self,
        _req: v1::ExportBoxRequest,
    ) -> Result<v1::ExportBoxResponse, Status> {
        not_yet("ExportBox")
    }

    pub(super) async fn serve_import(
        &self,
        _req: v1::ImportBoxRequest,
    ) -> Result<v1::CreateBoxResponse, Status> {
        not_yet("ImportBox")
    }
}
