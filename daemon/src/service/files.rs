//! `CopyIn` and `CopyOut`: tar streams into and out of a running box.

use boxd_proto::tonic::{Status, Streaming};
use boxd_proto::v1;

use super::{Service, Stream2};
use crate::error::Error;

impl Service {
    pub(super) async fn serve_copy_out(
        &self,
        _req: v1::CopyOutRequest,
    ) -> Result<Stream2<v1::CopyOutResponse>, Status> {
        Err(Error::Unimplemented("CopyOut is not built yet".into()).into())
    }

    pub(super) async fn serve_copy_in(
        &self,
        _req: Streaming<v1::CopyInRequest>,
    ) -> Result<v1::CopyInResponse, Status> {
        Err(Error::Unimplemented("CopyIn is not built yet".into()).into())
    }
}
