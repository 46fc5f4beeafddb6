//! What the daemon and a box's supervisor say to each other over the
//! supervisor's socket (`BOXDIR/supervisor.sock`), shared by both sides.
//!
//! Frames: a 4-byte big-endian length, a kind byte, the body.
//! - `J`: one JSON message ([`Request`] first on every connection, then
//!   [`Reply`]s and [`Push`]es from the supervisor, [`Up`] from the daemon);
//! - `O`: output: a stream byte (0 stdout, 1 stderr) and the bytes;
//! - `I`: stdin: the 8-byte big-endian offset of its first byte in the
//!   stdin stream, and the bytes.
//!
//! Each connection does one thing, decided by its first message: a
//! `Hello` connection is the daemon's watch on the box (exits and the
//! box's end are pushed on it); `Run` and `Attach` connections carry one
//! subscription's output (and its acknowledgements up); a `Stdin`
//! connection carries an exec's stdin, each frame answered when written;
//! the rest are one request and one reply.

use std::path::PathBuf;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::super::boot::Plan;
use super::super::cgroup::{BoxCgroup, Limits};
use super::super::idmap::IdMap;
use crate::engine::ExitStatus;
use crate::exec_log::{Offsets, Stream};

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 4 << 20;
/// This protocol's version: a daemon adopts only supervisors of its own.
pub const VERSION: u32 = 1;
/// The socket's name in the box's directory.
pub const SOCKET: &str = "supervisor.sock";

/// What the daemon hands a new supervisor on its channel (one line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Start {
    pub box_id: String,
    pub box_name: String,
    /// The box's directory: the socket and the log go there.
    pub dir: PathBuf,
    pub plan: Plan,
    pub ids: IdMap,
    pub cgroup: BoxCgroup,
    pub limits: Limits,
    /// Whether its processes are limited by `RLIMIT_NPROC` (no pids cgroup).
    pub nproc: Option<u64>,
    /// The box's egress allow-list and secrets, when it has a proxy.
    pub egress: Option<Egress>,
    /// The ports to publish (host port 0: any free one).
    #[serde(default)]
    pub ports: Vec<crate::model::PortMapping>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Egress {
    pub allow_net: Vec<String>,
    pub secrets: Vec<crate::egress::Secret>,
}

/// The supervisor's answer on its channel, once the box runs (or not).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Ready {
    Running {
        pid1: i32,
        init: i32,
        warnings: Vec<String>,
    },
    /// `kind`: `precondition` (the spec asks for what cannot be), or
    /// `engine`.
    Failed { kind: String, message: String },
}

/// A command to start in the box (environment and directory merged with
/// the image's and the box's).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunSpec {
    #[serde(flatten)]
    pub spec: crate::engine::ExecSpec,
    pub started_at_ms: i64,
}

/// An exec the supervisor holds, as `Hello` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecInfo {
    pub id: String,
    pub command: String,
    pub args: Vec<String>,
    pub tty: bool,
    pub detach: bool,
    pub stdin: bool,
    pub started_at_ms: i64,
    pub exit: Option<ExitStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    Hello,
    Run(RunSpec),
    Attach {
        id: String,
        from: Offsets,
    },
    Stdin {
        id: String,
    },
    CloseStdin {
        id: String,
    },
    Signal {
        id: String,
        signal: i32,
    },
    Resize {
        id: String,
        rows: u16,
        cols: u16,
    },
    Stop {
        force: bool,
    },
    /// What the box uses now.
    Usage,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    Hello {
        version: u32,
        pid1: i32,
        init: i32,
        cgroup: BoxCgroup,
        execs: Vec<ExecInfo>,
        /// The ports it publishes now (actual host ports).
        #[serde(default)]
        ports: Vec<crate::model::PortMapping>,
    },
    /// A subscription follows, from `start`.
    Subscribed {
        start: Offsets,
        stdin_offset: u64,
    },
    /// Stdin written up to this offset.
    Taken(u64),
    Usage(super::super::usage::Usage),
    Done,
    /// `code`: the gRPC-ish class (`not_found`, `precondition`, `invalid`,
    /// `engine`), for the daemon's error mapping.
    Error {
        code: String,
        message: String,
    },
}

impl Reply {
    /// The daemon's error as a `Reply::Error` (the inverse of
    /// [`Reply::into_error`]: the one mapping, both ways).
    pub fn error(e: &crate::error::Error) -> Reply {
        use crate::error::Error;
        let code = match e {
            Error::InvalidArgument(_) => "invalid",
            Error::NotFound(_) => "not_found",
            Error::FailedPrecondition(_) => "precondition",
            Error::AlreadyExists(_) => "exists",
            Error::ResourceExhausted(_) => "exhausted",
            _ => "engine",
        };
        Reply::Error {
            code: code.into(),
            message: e.to_string(),
        }
    }

    /// A `Reply::Error` as the daemon's error.
    pub fn into_error(code: &str, message: String) -> crate::error::Error {
        use crate::error::Error;
        match code {
            "invalid" => Error::InvalidArgument(message),
            "not_found" => Error::NotFound(message),
            "precondition" => Error::FailedPrecondition(message),
            "exists" => Error::AlreadyExists(message),
            "exhausted" => Error::ResourceExhausted(message),
            _ => Error::Engine(message),
        }
    }
}

/// What the supervisor says on its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Push {
    /// An exec ended (its output all logged).
    Exited { id: String, status: ExitStatus },
    /// The box ended, and why.
    Ended(String),
    /// A subscription's end: all output was sent before it.
    Exit(ExitStatus),
    /// The egress proxy refused a connection to `host:port` (once per
    /// [`super::serve::REFUSAL_QUIET`] for the same target).
    Refused { host: String, port: u16 },
}

/// What the daemon sends up a subscription.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Up {
    Ack(Offsets),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Json(Bytes),
    Output(Stream, Bytes),
    Stdin(u64, Bytes),
}

impl Frame {
    pub fn json<T: Serialize>(msg: &T) -> Frame {
        Frame::Json(serde_json::to_vec(msg).expect("serializable").into())
    }

    pub fn parse<T: for<'de> Deserialize<'de>>(&self) -> std::io::Result<T> {
        match self {
            Frame::Json(b) => serde_json::from_slice(b).map_err(invalid),
            _ => Err(invalid("expected a JSON frame")),
        }
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

/// Writes one frame (not flushed: wrap the writer as needed).
pub async fn write<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> std::io::Result<()> {
    let (kind, head, body): (u8, &[u8], &Bytes) = match frame {
        Frame::Json(b) => (b'J', &[], b),
        Frame::Output(s, b) => (
            b'O',
            match s {
                Stream::Stdout => &[0],
                Stream::Stderr => &[1],
            },
            b,
        ),
        Frame::Stdin(at, b) => {
            let mut buf = BytesMut::with_capacity(13 + b.len());
            buf.put_u32((9 + b.len()) as u32);
            buf.put_u8(b'I');
            buf.put_u64(*at);
            buf.put_slice(b);
            return w.write_all(&buf).await;
        }
    };
    let len = 1 + head.len() + body.len();
    if len > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    let mut buf = BytesMut::with_capacity(4 + len);
    buf.put_u32(len as u32);
    buf.put_u8(kind);
    buf.put_slice(head);
    buf.put_slice(body);
    w.write_all(&buf).await
}

/// Reads one frame; `None` at a clean end of the connection.
pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let len = match r.read_u32().await {
        Ok(n) => n as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    if len == 0 || len > MAX_FRAME {
        return Err(invalid(format!("bad frame length {len}")));
    }
    let mut buf = BytesMut::zeroed(len);
    r.read_exact(&mut buf).await?;
    let mut body = buf.freeze();
    let kind = body.get_u8();
    Ok(Some(match kind {
        b'J' => Frame::Json(body),
        b'O' if !body.is_empty() => {
            let stream = match body.get_u8() {
                0 => Stream::Stdout,
                1 => Stream::Stderr,
                s => return Err(invalid(format!("bad stream {s}"))),
            };
            Frame::Output(stream, body)
        }
        b'I' if body.len() >= 8 => {
            let at = body.get_u64();
            Frame::Stdin(at, body)
        }
        k => return Err(invalid(format!("bad frame kind {k}"))),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip() {
        let frames = vec![
            Frame::json(&Request::Signal {
                id: "x1".into(),
                signal: 9,
            }),
            Frame::Output(Stream::Stderr, Bytes::from_static(b"err")),
            Frame::Output(Stream::Stdout, Bytes::new()),
            Frame::Stdin(1 << 40, Bytes::from_static(b"in")),
        ];
        let mut buf = Vec::new();
        for f in &frames {
            write(&mut buf, f).await.unwrap();
        }
        let mut r = &buf[..];
        for f in &frames {
            assert_eq!(read(&mut r).await.unwrap().as_ref(), Some(f));
        }
        assert_eq!(read(&mut r).await.unwrap(), None);
    }

    #[tokio::test]
    async fn bad_frames_are_errors_not_panics() {
        for bytes in [
            &[0, 0, 0, 0][..],
            &[0xff, 0xff, 0xff, 0xff],
            &[0, 0, 0, 1, b'Z'],
            &[0, 0, 0, 2, b'O', 7],
            &[0, 0, 0, 3, b'I', 0, 0],
            &[0, 0, 0, 9, b'J'],
        ] {
            let mut r = bytes;
            assert!(read(&mut r).await.is_err(), "{bytes:?}");
        }
    }
}
