//! boxd's egress, a crate of its own (as `fs/` is): the one way out of a
//! box, an HTTP proxy with a host allow-list and secret placeholders, and
//! the per-box certificate authority ([`ca`]) and trust bundle ([`trust`])
//! that HTTPS interception for a secret's hosts stands on.
//!
//! A box's network namespace has only loopback; the daemon listens on
//! 127.0.0.1 inside it and hands the listener to a [`Proxy`], which makes
//! every outbound connection from the daemon's own (host) namespace. The
//! guarantee: a request leaves only if the host it names is on the box's
//! [`AllowList`], and then only over TCP to that host, resolved on the host
//! side (aliases such as `host.boxd.internal` first). Everything else gets a
//! `403` naming the host, the box and the list, and is never connected.
//! `CONNECT host:port` opens a byte tunnel (HTTPS); an absolute-form plain
//! HTTP request (`GET http://host/path`) is forwarded in origin-form with
//! `Connection: close`: one request per client connection, simple and
//! correct (no keep-alive framing to get wrong). Secrets stay out of the box: it holds a
//! placeholder, and the proxy puts the value in place of the placeholder in
//! plain HTTP requests to that secret's hosts only (request target, header
//! values, and a `Content-Length` body up to 16 MiB); values are never
//! logged or printed. The honest limit: the proxy does not terminate TLS, so
//! inside a CONNECT tunnel it sees only the host name and port; a
//! placeholder in an HTTPS request is **not** replaced and goes out as the
//! placeholder. Also not replaced: chunked bodies and bodies over 16 MiB
//! (streamed through unchanged). Not defended: an allowed name that resolves
//! to an internal address (DNS rebinding), a TLS client sending another SNI
//! than the CONNECT host (it still reaches only the allowed host's
//! address), an allowed upstream that echoes a substituted value back.
//! An IP entry such as `127.0.0.1` names the host's loopback, not the box's.

pub mod ca;
mod client_io;
mod forward;
#[doc(hidden)]
pub mod fuzzing;
pub mod intercept;
mod policy;
mod proxy;
pub mod redact;
mod reply;
mod request;
mod traffic;
pub mod trust;
mod tunnel;
mod upstream;

pub use policy::{AllowList, PolicyError, Secret, Secrets};
pub use proxy::{MAX_CONNECTIONS, Proxy};
#[doc(hidden)]
pub use reply::Reply;
#[doc(hidden)]
pub use request::{BODY_LIMIT, BodyPlan, Forward, Plan, Refusal, Rules, Why};
pub use traffic::Traffic;
