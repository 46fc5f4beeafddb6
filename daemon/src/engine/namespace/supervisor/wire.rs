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

use bytes::{Buf, Bytes, BytesMut};
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
    /// [`super::serve::REFUSAL_QUIET`] for the same target and reason);
    /// `why`: the event's text (none from older supervisors: not on the
    /// allow-list).
    Refused {
        host: String,
        port: u16,
        #[serde(default)]
        why: Option<String>,
    },
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

/// Writes one frame (not flushed: wrap the writer as needed): its head
/// and its body in one vectored write where the writer takes it, the
/// body never copied.
pub async fn write<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> std::io::Result<()> {
    // Length, kind, then the stream byte or the stdin offset.
    let mut head = [0u8; 13];
    let (kind, head_len, body) = match frame {
        Frame::Json(b) => (b'J', 5, b),
        Frame::Output(stream, b) => {
            head[5] = match stream {
                Stream::Stdout => 0,
                Stream::Stderr => 1,
            };
            (b'O', 6, b)
        }
        Frame::Stdin(at, b) => {
            head[5..13].copy_from_slice(&at.to_be_bytes());
            (b'I', 13, b)
        }
    };
    let len = head_len - 4 + body.len();
    if len > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    head[..4].copy_from_slice(&(len as u32).to_be_bytes());
    head[4] = kind;
    write_both(w, &head[..head_len], body).await
}

/// Writes `head` then `body`, both whole.
async fn write_both<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut head: &[u8],
    mut body: &[u8],
) -> std::io::Result<()> {
    while !head.is_empty() || !body.is_empty() {
        let n = if head.is_empty() {
            w.write(body).await?
        } else {
            let parts = [std::io::IoSlice::new(head), std::io::IoSlice::new(body)];
            w.write_vectored(&parts).await?
        };
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        body = &body[n - from_head..];
    }
    Ok(())
}

/// Reads one frame, exactly (nothing after it is read); `None` at a
/// clean end of the connection.
pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Option<Frame>> {
    let len = match r.read_u32().await {
        Ok(n) => n as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    };
    check_len(len)?;
    // Read into fresh space, not zeroed first.
    let mut buf = BytesMut::with_capacity(len);
    while buf.len() < len {
        let want = (len - buf.len()) as u64;
        if (&mut *r).take(want).read_buf(&mut buf).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    parse(buf.freeze())
}

/// The frames of one connection that carries many (output, stdin), read
/// through a buffer kept between them: a read takes what the socket has
/// (several small frames, or most of a large one), and each frame's body
/// is split off the buffer without a copy; its space is reused once the
/// bodies are dropped.
pub struct Reader<R> {
    r: R,
    buf: BytesMut,
}

/// What a [`Reader`] asks the socket for at least, per read.
const READ_AHEAD: usize = 64 << 10;

impl<R: AsyncRead + Unpin> Reader<R> {
    pub fn new(r: R) -> Reader<R> {
        Reader {
            r,
            buf: BytesMut::new(),
        }
    }

    /// The next frame; `None` at a clean end of the connection.
    pub async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        while self.buf.len() < 4 {
            if self.fill(4).await? == 0 {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(std::io::ErrorKind::UnexpectedEof.into()),
                };
            }
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        check_len(len)?;
        while self.buf.len() < 4 + len {
            if self.fill(4 + len).await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        self.buf.advance(4);
        parse(self.buf.split_to(len).freeze())
    }

    /// One read, with room for `want` bytes in all (and some to read ahead).
    async fn fill(&mut self, want: usize) -> std::io::Result<usize> {
        let need = want.saturating_sub(self.buf.len()).max(READ_AHEAD);
        self.buf.reserve(need);
        self.r.read_buf(&mut self.buf).await
    }
}

fn check_len(len: usize) -> std::io::Result<()> {
    if len == 0 || len > MAX_FRAME {
        return Err(invalid(format!("bad frame length {len}")));
    }
    Ok(())
}

/// A frame from its body (kind byte first).
fn parse(mut body: Bytes) -> std::io::Result<Option<Frame>> {
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

    /// Through a pipe that takes a few bytes at a time, so that every
    /// write and read is partial, heads and bodies split anywhere.
    #[tokio::test]
    async fn frames_survive_short_writes_and_reads() {
        let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7) as u8).collect();
        let frames = vec![
            Frame::Output(Stream::Stdout, Bytes::from(big.clone())),
            Frame::Stdin(42, Bytes::from(big)),
            Frame::json(&Reply::Taken(7)),
            Frame::Output(Stream::Stderr, Bytes::from_static(b"e")),
        ];
        let (mut a, mut b) = tokio::io::duplex(7);
        let sent = frames.clone();
        let writer = tokio::spawn(async move {
            for f in &sent {
                write(&mut a, f).await.unwrap();
            }
        });
        let mut reader = Reader::new(&mut b);
        for f in &frames {
            assert_eq!(reader.next().await.unwrap().as_ref(), Some(f));
        }
        writer.await.unwrap();
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_reader_reads_what_read_reads() {
        let frames = vec![
            Frame::Output(Stream::Stdout, Bytes::from(vec![7u8; 200 << 10])),
            Frame::json(&Up::Ack(Offsets::default())),
            Frame::Output(Stream::Stderr, Bytes::from_static(b"x")),
        ];
        let mut buf = Vec::new();
        for f in &frames {
            write(&mut buf, f).await.unwrap();
        }
        let mut reader = Reader::new(&buf[..]);
        for f in &frames {
            assert_eq!(reader.next().await.unwrap().as_ref(), Some(f));
        }
        assert_eq!(reader.next().await.unwrap(), None);
        // Cut anywhere, it is an error (or a clean end at a boundary).
        for cut in [1, 3, 4, 5, 100, buf.len() - 1] {
            let mut reader = Reader::new(&buf[..cut]);
            let mut result = Ok(None);
            for _ in 0..4 {
                result = reader.next().await;
                if !matches!(result, Ok(Some(_))) {
                    break;
                }
            }
            assert!(result.is_err(), "cut at {cut}: {result:?}");
        }
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
            assert!(Reader::new(bytes).next().await.is_err(), "{bytes:?}");
        }
    }
}
