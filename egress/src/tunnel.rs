//! `CONNECT host:port`: once the host is allowed and reached, the proxy
//! answers `200 Connection Established` and hyper hands the client
//! connection over ([`hyper::upgrade::on`]); from then on it is a byte
//! tunnel to the upstream, relayed with [`COPY_BUFFER`]s.
//!
//! **Invariant:** the tunnel runs in the task that serves the client
//! connection, so it ends with it (and when [`super::Proxy::serve`]
//! returns); bytes the client sent right behind its head go through first.

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::ext::ReasonPhrase;
use hyper::http::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tracing::debug;

use super::client_io::ClientIo;
use super::forward::ReplyBody;
use super::traffic::Upstream;

/// Buffer per direction for relayed bytes: tokio's 8 KiB default holds a
/// download on loopback to about a tenth of a direct one.
const COPY_BUFFER: usize = 256 * 1024;

/// A tunnel whose upstream is connected, waiting for hyper to hand over
/// the client connection.
pub(super) struct Tunnel {
    pub(super) client: OnUpgrade,
    pub(super) upstream: Upstream,
    pub(super) host: String,
    pub(super) port: u16,
}

/// The answer that opens a tunnel.
pub(super) fn established() -> Response<ReplyBody> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::new())));
    response
        .extensions_mut()
        .insert(ReasonPhrase::from_static(b"Connection Established"));
    response
}

impl Tunnel {
    /// Relays bytes both ways until either side closes.
    pub(super) async fn run(self, box_name: &str) {
        let Tunnel {
            client,
            mut upstream,
            host,
            port,
        } = self;
        let upgraded = match client.await {
            Ok(upgraded) => upgraded,
            Err(e) => return debug!(box_name, host, port, "tunnel not opened: {e}"),
        };
        let Ok(parts) = upgraded.downcast::<TokioIo<ClientIo>>() else {
            return debug!(
                box_name,
                host, port, "tunnel not opened: not the proxy's connection"
            );
        };
        let mut client = parts.io.into_inner().into_stream();
        let relayed = async {
            upstream.write_all(&parts.read_buf).await?;
            tokio::io::copy_bidirectional_with_sizes(
                &mut client,
                &mut *upstream,
                COPY_BUFFER,
                COPY_BUFFER,
            )
            .await
        };
        if let Err(e) = relayed.await {
            debug!(box_name, host, port, "tunnel ended: {e}");
        }
    }
}
