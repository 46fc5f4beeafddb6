//! `BoxStats`: samples of what running boxes use.

use boxd_proto::tonic::Status;
use boxd_proto::v1;

use super::{Service, Stream2};
use crate::error::Error;

impl Service {
    pub(super) async fn serve_stats(
        &self,
        _req: v1::BoxStatsRequest,
    ) -> Result<Stream2<v1::BoxStatsResponse>, Status> {
        Err(Error::Unimplemented("BoxStats is not built yet".into()).into())
    }
}
