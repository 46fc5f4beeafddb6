//! `CopyIn` and `CopyOut`: tar streams into and out of a running box.
//!
//! Both stream: the archive is never held whole. A client that goes away
//! mid-copy drops the stream (or the call), which kills the copy.

use boxd_proto::tonic::{Status, Streaming};
use boxd_proto::v1;
use futures::StreamExt;

use super::{Service, Stream2};
use crate::error::Error;
use crate::validate;

impl Service {
    pub(super) async fn serve_copy_out(
        &self,
        req: v1::CopyOutRequest,
    ) -> Result<Stream2<v1::CopyOutResponse>, Status> {
        let box_name = validate::box_name(&req.box_name)?;
        let path = validate::copy_path(&req.path)?;
        let record = self.registry.running(&box_name).await?;
        let archive = self
            .registry
            .engine()
            .copy_out(&record, &path, req.follow_symlinks)
            .await?;
        tracing::debug!(box_name = %req.box_name, %path, "copy out");
        Ok(Box::pin(archive.map(|chunk| {
            chunk
                .map(|data| v1::CopyOutResponse { data })
                .map_err(Status::from)
        })))
    }

    pub(super) async fn serve_copy_in(
        &self,
        mut inbound: Streaming<v1::CopyInRequest>,
    ) -> Result<v1::CopyInResponse, Status> {
        use v1::copy_in_request::Msg;
        let start = match inbound.message().await?.and_then(|r| r.msg) {
            Some(Msg::Start(start)) => start,
            _ => {
                return Err(Error::InvalidArgument(
                    "the first copy-in request must be `start`".into(),
                )
                .into());
            }
        };
        let box_name = validate::box_name(&start.box_name)?;
        let path = validate::copy_path(&start.path)?;
        let record = self.registry.running(&box_name).await?;
        let archive = futures::stream::unfold(inbound, |mut inbound| async move {
            let item = match inbound.message().await {
                Ok(None) => return None,
                Ok(Some(v1::CopyInRequest {
                    msg: Some(Msg::Data(data)),
                })) => Ok(data),
                Ok(Some(_)) => Err(Error::InvalidArgument(
                    "after `start`, copy-in requests carry `data` only".into(),
                )),
                Err(status) => Err(Error::FailedPrecondition(format!(
                    "the archive did not arrive whole: {}",
                    status.message()
                ))),
            };
            Some((item, inbound))
        })
        .boxed();
        tracing::debug!(box_name = %start.box_name, %path, "copy in");
        let bytes = self
            .registry
            .engine()
            .copy_in(&record, &path, archive)
            .await?;
        Ok(v1::CopyInResponse { bytes })
    }
}
