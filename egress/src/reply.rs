//! The proxy's own answers: a policy refusal (403) or an error (400, 431,
//! 502), each a short `text/plain` body starting `boxd:` and saying what to
//! do, marked `X-Boxd-Egress: refused` or `error` and `Connection: close`.
//!
//! A reply goes out as a hyper response when a request reached the proxy,
//! or straight onto the client socket ([`Reply::send`]) when hyper refused
//! the request head itself (hyper's own bare 400/431 is never sent, see
//! [`super::client_io`]). Either way the proxy then drains what the client
//! is still sending ([`drain`]) before it closes, so that closing with
//! unread bytes does not reset the connection before the reply was read.
//!
//! **Invariant:** a reply names hosts, the box and the allow-list, never a
//! header value or a secret.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::http::{HeaderName, HeaderValue, Response, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::policy::AllowList;

/// The request head (request line and headers) may not be longer.
pub(super) const HEAD_LIMIT: usize = 64 * 1024;
/// Header fields in a head; more is answered like an overlong head.
pub(super) const MAX_HEADERS: usize = 256;

/// A response the proxy gives itself, before any upstream byte was relayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    status: StatusCode,
    /// A policy refusal (`X-Boxd-Egress: refused`) rather than an error.
    refused: bool,
    body: String,
}

impl Reply {
    pub(super) fn bad_request(why: impl std::fmt::Display) -> Reply {
        Reply::error(StatusCode::BAD_REQUEST, why)
    }

    pub(super) fn bad_gateway(why: impl std::fmt::Display) -> Reply {
        Reply::error(StatusCode::BAD_GATEWAY, why)
    }

    fn error(status: StatusCode, why: impl std::fmt::Display) -> Reply {
        Reply {
            status,
            refused: false,
            body: format!("boxd: {why}\n"),
        }
    }

    /// The 503 for a connection that found all of the box's taken.
    pub(super) fn busy(box_name: &str, limit: usize) -> Reply {
        Reply::error(
            StatusCode::SERVICE_UNAVAILABLE,
            format_args!(
                "box {box_name} has {limit} connections open through its egress proxy, \
                 the most it may; close some (idle keep-alive ones too) and retry"
            ),
        )
    }

    pub(super) fn head_too_large() -> Reply {
        Reply::error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format_args!(
                "the request head exceeds {} KiB or {MAX_HEADERS} header fields",
                HEAD_LIMIT / 1024
            ),
        )
    }

    /// The 403 for a host not on the box's list: the host, the box, the list.
    pub(super) fn not_allowed(host: &str, box_name: &str, allow: &AllowList) -> Reply {
        Reply {
            status: StatusCode::FORBIDDEN,
            refused: true,
            body: format!(
                "boxd: {host} is not in the allow-net list of box {box_name}; allowed: {allow}\n"
            ),
        }
    }

    /// The 403 for a placeholder sent to a host its secret may not reach:
    /// the secret's name and hosts, never its value.
    pub(super) fn misplaced(secret: &str, hosts: &[String], host: &str) -> Reply {
        Reply {
            status: StatusCode::FORBIDDEN,
            refused: true,
            body: format!(
                "boxd: this request to {host} carries the placeholder of secret {secret}, which goes only to {}\n",
                hosts.join(", ")
            ),
        }
    }

    /// The reply to a request head hyper refused; `None` when there is
    /// nobody to answer (a timeout, a connection that failed).
    pub(super) fn for_head_error(e: &hyper::Error) -> Option<Reply> {
        if e.is_parse_too_large() {
            return Some(Reply::head_too_large());
        }
        if e.is_incomplete_message() {
            return Some(Reply::bad_request(
                "the connection ended inside the request head",
            ));
        }
        if !e.is_parse() {
            return None;
        }
        // hyper's kinds of header error are not public; its messages are.
        let text = e.to_string();
        Some(Reply::bad_request(
            if text.starts_with("invalid transfer-encoding") {
                "a request's Transfer-Encoding must end in chunked".to_owned()
            } else if text.starts_with("unexpected transfer-encoding") {
                "an HTTP/1.0 request may not carry Transfer-Encoding".to_owned()
            } else if text.starts_with("invalid content-length") {
                "bad or conflicting Content-Length".to_owned()
            } else {
                format!("malformed request head: {text}")
            },
        ))
    }

    pub fn status(&self) -> u16 {
        self.status.as_u16()
    }

    pub fn is_refusal(&self) -> bool {
        self.refused
    }

    /// The header fields of the reply, in order, names as sent.
    fn fields(&self) -> [(&'static str, String); 4] {
        [
            (
                "X-Boxd-Egress",
                if self.refused { "refused" } else { "error" }.to_owned(),
            ),
            ("Content-Type", "text/plain".to_owned()),
            ("Content-Length", self.body.len().to_string()),
            ("Connection", "close".to_owned()),
        ]
    }

    /// The reply as a response for hyper to send.
    pub(super) fn into_response(self) -> Response<Full<Bytes>> {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = self.status;
        for (name, value) in self.fields() {
            response.headers_mut().insert(
                HeaderName::from_bytes(name.as_bytes()).expect("a valid name"),
                HeaderValue::try_from(value).expect("a valid value"),
            );
        }
        *response.body_mut() = Full::new(Bytes::from(self.body));
        response
    }

    /// Writes the reply on the raw client socket, then closes its writing
    /// side and [`drain`]s it.
    pub(super) async fn send(&self, client: &mut TcpStream) {
        let mut reply = format!(
            "HTTP/1.1 {} {}\r\n",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or_default()
        );
        for (name, value) in self.fields() {
            reply.push_str(&format!("{name}: {value}\r\n"));
        }
        reply.push_str("\r\n");
        reply.push_str(&self.body);
        if client.write_all(reply.as_bytes()).await.is_err() || client.shutdown().await.is_err() {
            return;
        }
        drain(client).await;
    }
}

/// Reads and drops what the client is still sending, for up to a second
/// and 1 MiB, so that the close that follows does not reset a connection
/// whose reply the client has not read yet.
pub(super) async fn drain(client: &mut TcpStream) {
    let drain = async {
        let mut sink = [0; 8192];
        let mut left = 1usize << 20;
        while let Ok(n @ 1..) = client.read(&mut sink).await {
            left = left.saturating_sub(n);
            if left == 0 {
                break;
            }
        }
    };
    let _ = timeout(Duration::from_secs(1), drain).await;
}
