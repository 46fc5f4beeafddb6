//! The front door: what one client's bytes on the socket may make boxd
//! hold. Each test starts boxd under an address-space limit (so memory it
//! is made to take shows as boxd aborting, not as a slow host), runs a
//! bystander's exec in a busybox box on a connection of its own, sends an
//! attack over another connection, and checks that the attacker got an
//! error, boxd still serves, and the bystander's exec ran to its end with
//! its output.
//!
//! - A header block of indexed references to a 4 KB dynamic-table entry
//!   (one byte each: a 1 MiB block names ~4.3 GB of header list), and
//!   header lists exactly at and one past the bound.
//! - Many unary calls on one connection, each declaring a 16 MiB - 1
//!   message and sending all but its last byte.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use boxd_client::tonic;
use boxd_tests::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// The header list boxd takes, as HTTP/2 counts it (name + value + 32 per
/// field): `boxd::authority::MAX_HEADER_LIST`.
const MAX_HEADER_LIST: usize = 16 << 10;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer (RFC 7541 §5.1) after the bits `first` sets.
fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u8, mut v: usize) {
    let max = (1usize << prefix) - 1;
    if v < max {
        out.push(first | v as u8);
        return;
    }
    out.push(first | max as u8);
    v -= max;
    while v >= 128 {
        out.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    out.push(v as u8);
}

/// An HPACK string literal, not Huffman-coded.
fn hpack_string(out: &mut Vec<u8>, s: &[u8]) {
    hpack_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// A request's header block of literals (no indexing, new names) and its
/// header list's size as HTTP/2 counts it.
fn request_block(path: &str, pad: usize) -> (Vec<u8>, usize) {
    let pad = vec![b'p'; pad];
    let fields: [(&[u8], &[u8]); 7] = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.as_bytes()),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        (b"x-pad", &pad),
    ];
    let mut block = Vec::new();
    let mut size = 0;
    for (name, value) in fields {
        block.push(0x00);
        hpack_string(&mut block, name);
        hpack_string(&mut block, value);
        size += name.len() + value.len() + 32;
    }
    (block, size)
}

/// How a stream on a raw connection ended (printed whole).
#[derive(Debug)]
#[allow(dead_code)]
enum Outcome {
    /// Answered to its end: response header blocks (the last with
    /// END_STREAM) and this many DATA bytes.
    Answered { header_blocks: usize, data: usize },
    /// RST_STREAM with this error code.
    Reset(u32),
    /// GOAWAY with this error code and debug data.
    GoAway(u32, String),
    /// The connection ended (EOF, or the error reading it).
    Closed(String),
}

type Frame = (u8, u8, u32, Vec<u8>);

/// A raw HTTP/2 connection to boxd: frames written and read by hand.
struct Raw {
    s: UnixStream,
    /// The SETTINGS boxd sent first: (identifier, value).
    settings: Vec<(u16, u32)>,
}

impl Raw {
    /// Connects, sends the preface and empty SETTINGS, reads boxd's
    /// SETTINGS and acknowledges them.
    fn open(socket: &Path) -> std::io::Result<Raw> {
        let mut s = UnixStream::connect(socket)?;
        // A guard against a hang, not a timing: boxd answers or closes
        // long before.
        s.set_read_timeout(Some(Duration::from_secs(300)))?;
        s.write_all(PREFACE)?;
        s.write_all(&frame(SETTINGS, 0, 0, &[]))?;
        let mut raw = Raw {
            s,
            settings: Vec::new(),
        };
        loop {
            match raw.read_frame() {
                Ok(Some((SETTINGS, flags, _, p))) if flags & ACK == 0 => {
                    raw.settings = p
                        .chunks_exact(6)
                        .map(|c| {
                            (
                                u16::from_be_bytes([c[0], c[1]]),
                                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
                            )
                        })
                        .collect();
                    raw.s.write_all(&frame(SETTINGS, ACK, 0, &[]))?;
                    return Ok(raw);
                }
                Ok(Some(_)) => {}
                Ok(None) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Err(e) => return Err(e),
            }
        }
    }

    fn setting(&self, id: u16) -> Option<u32> {
        self.settings.iter().find(|s| s.0 == id).map(|s| s.1)
    }

    /// The next frame; `None` at the end of the connection.
    fn read_frame(&mut self) -> std::io::Result<Option<Frame>> {
        let mut head = [0u8; 9];
        match self.s.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        self.s.read_exact(&mut payload)?;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        Ok(Some((head[3], head[4], stream, payload)))
    }

    /// Sends `block` as HEADERS and CONTINUATION frames of 16 KiB.
    fn send_block(&mut self, stream: u32, flags: u8, block: &[u8]) -> std::io::Result<()> {
        let mut pieces = block.chunks(16 << 10).peekable();
        let mut kind = HEADERS;
        let mut first_flags = flags;
        let mut out = Vec::with_capacity(block.len() + block.len() / 1000 + 64);
        while let Some(piece) = pieces.next() {
            let end = if pieces.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            out.extend(frame(kind, first_flags | end, stream, piece));
            kind = CONTINUATION;
            first_flags = 0;
        }
        self.s.write_all(&out)
    }

    /// Reads until `stream` ends, or the connection does.
    fn outcome(&mut self, stream: u32) -> Outcome {
        let (mut header_blocks, mut data) = (0, 0);
        loop {
            match self.read_frame() {
                Ok(None) => return Outcome::Closed("end of file".into()),
                Err(e) => return Outcome::Closed(e.to_string()),
                Ok(Some((kind, flags, s, p))) => match kind {
                    DATA if s == stream => {
                        data += p.len();
                        if flags & END_STREAM != 0 {
                            return Outcome::Answered {
                                header_blocks,
                                data,
                            };
                        }
                    }
                    HEADERS if s == stream => {
                        header_blocks += 1;
                        if flags & END_STREAM != 0 {
                            return Outcome::Answered {
                                header_blocks,
                                data,
                            };
                        }
                    }
                    RST_STREAM if s == stream => {
                        return Outcome::Reset(u32::from_be_bytes(p[..4].try_into().unwrap()));
                    }
                    GOAWAY => {
                        let code = u32::from_be_bytes(p[4..8].try_into().unwrap());
                        return Outcome::GoAway(code, String::from_utf8_lossy(&p[8..]).into());
                    }
                    PING if flags & ACK == 0 => {
                        let _ = self.s.write_all(&frame(PING, ACK, 0, &p));
                    }
                    SETTINGS if flags & ACK == 0 => {
                        let _ = self.s.write_all(&frame(SETTINGS, ACK, 0, &[]));
                    }
                    _ => {}
                },
            }
        }
    }
}

/// Sends one ListBoxes request whose header list is `size` bytes as
/// HTTP/2 counts it, on a connection of its own; how boxd answered.
fn list_boxes_with_header_list(socket: &Path, size: usize) -> Outcome {
    let (_, base) = request_block("/boxd.v1.Boxd/ListBoxes", 0);
    let (block, counted) = request_block("/boxd.v1.Boxd/ListBoxes", size - base);
    assert_eq!(counted, size);
    let mut raw = match Raw::open(socket) {
        Ok(raw) => raw,
        Err(e) => return Outcome::Closed(format!("connecting: {e}")),
    };
    if let Err(e) = raw.send_block(1, 0, &block) {
        return Outcome::Closed(format!("writing the headers: {e}"));
    }
    // An empty ListBoxesRequest: a five-byte gRPC message.
    if let Err(e) = raw.s.write_all(&frame(DATA, END_STREAM, 1, &[0; 5])) {
        return Outcome::Closed(format!("writing the message: {e}"));
    }
    raw.outcome(1)
}

/// A long-running exec in a box of its own, on a connection of its own:
/// `cat`, which prints what it is given and ends at EOF.
struct Bystander {
    exec: ExecStream,
}

impl Bystander {
    async fn start(c: &mut Client, name: &str) -> Bystander {
        up(c, name, busybox_spec()).await;
        let mut req = start_req(name, &["cat"]);
        req.stdin = true;
        let exec = ExecStream::start(c, req)
            .await
            .expect("start the bystander's exec");
        Bystander { exec }
    }

    /// Gives the command a line and EOF; what it printed, or why not.
    async fn finish(mut self) -> Result<Output, String> {
        let input = self.exec.input();
        input
            .stdin(b"the bystander's line\n".to_vec())
            .await
            .map_err(|e| format!("stdin: {e}"))?;
        input
            .close_stdin()
            .await
            .map_err(|e| format!("closing stdin: {e}"))?;
        let mut out = Output::default();
        loop {
            match self.exec.next().await {
                Ok(Some(ExecEvent::Stdout(b))) => out.stdout.extend_from_slice(&b),
                Ok(Some(ExecEvent::Stderr(b))) => out.stderr.extend_from_slice(&b),
                Ok(Some(ExecEvent::Exit(e))) => {
                    out.exit = e;
                    return Ok(out);
                }
                Ok(None) => return Err("the exec's stream ended without an exit".into()),
                Err(e) => return Err(format!("the exec's stream: {e}")),
            }
        }
    }
}

/// Whether boxd still serves a new connection: the boxes it lists.
async fn still_serving(d: &Daemon) -> Result<usize, String> {
    let mut c = boxd_client::connect(&d.socket)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let boxes = c
        .list_boxes(v1::ListBoxesRequest {})
        .await
        .map_err(|e| format!("ListBoxes: {e}"))?;
    Ok(boxes.into_inner().boxes.len())
}

/// A process's state, peak address space, peak and current resident
/// memory, for printing.
fn memory_of(pid: u32) -> String {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return "gone".into();
    };
    status
        .lines()
        .filter(|l| {
            ["State:", "VmPeak:", "VmHWM:", "VmRSS:"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the raw client")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_block_of_indexed_references_ends_only_its_own_connection() {
    let limit = 3u64 << 30;
    let d = Daemon::with_address_space_limit(limit);
    println!("boxd under a {} GiB address-space limit", limit >> 30);
    let mut c = d.client().await;
    let bystander = Bystander::start(&mut c, "bystander").await;

    // The attack: a literal with incremental indexing of a 4000-byte value
    // (a 4037-byte dynamic-table entry), then one byte (0xBE: index 62,
    // that entry) over and over, to a 1 MiB block.
    let socket = d.socket.clone();
    let (settings, sent, attacked) = blocking(move || {
        let mut raw = Raw::open(&socket).expect("connect to boxd");
        let mut block = vec![0x40];
        hpack_string(&mut block, b"x-big");
        hpack_string(&mut block, &[b'a'; 4000]);
        let head = block.len();
        block.resize(1 << 20, 0xBE);
        println!(
            "attacker: a {} byte header block: a {head}-byte literal, then {} indexed references to it (a {} byte header list)",
            block.len(),
            block.len() - head,
            (block.len() - head + 1) * (5 + 4000 + 32)
        );
        let sent = raw.send_block(1, END_STREAM, &block);
        let settings = (raw.setting(0x3), raw.setting(0x6));
        (settings, sent, raw.outcome(1))
    })
    .await;
    println!(
        "boxd's SETTINGS: MAX_CONCURRENT_STREAMS {:?}, MAX_HEADER_LIST_SIZE {:?}",
        settings.0, settings.1
    );
    println!("attacker's connection: sent {sent:?}; then {attacked:?}");
    println!("boxd after the attack: {}", memory_of(d.pid()));

    // Header lists at the bound and one past it, each on a connection of
    // its own: both layers (boxd's rewriter and h2) take the first.
    let socket = d.socket.clone();
    let at = blocking(move || list_boxes_with_header_list(&socket, MAX_HEADER_LIST)).await;
    println!("a ListBoxes with a header list of exactly {MAX_HEADER_LIST} bytes: {at:?}");
    let socket = d.socket.clone();
    let over = blocking(move || list_boxes_with_header_list(&socket, MAX_HEADER_LIST + 1)).await;
    println!(
        "a ListBoxes with a header list of {} bytes: {over:?}",
        MAX_HEADER_LIST + 1
    );

    let serving = still_serving(&d).await;
    println!("a new client's ListBoxes: {serving:?}");
    let done = bystander.finish().await;
    println!(
        "the bystander's exec: {:?}",
        done.as_ref().map(|o| (o.stdout_str(), o.exit.code))
    );
    println!("boxd at the end: {}", memory_of(d.pid()));

    assert!(
        matches!(attacked, Outcome::Closed(_)),
        "the attacker's connection was not ended: {attacked:?}"
    );
    assert_eq!(serving, Ok(1), "boxd no longer serves");
    let done = done.expect("the bystander's exec did not complete");
    assert_eq!(done.stdout_str(), "the bystander's line\n");
    assert_eq!(done.exit.code, Some(0));
    assert!(
        matches!(at, Outcome::Answered { data: 1.., .. }),
        "a header list at the bound was not served: {at:?}"
    );
    assert!(
        matches!(over, Outcome::Closed(_)),
        "a header list past the bound was not refused: {over:?}"
    );
    assert_eq!(settings.1, Some(MAX_HEADER_LIST as u32 + 1));
}

/// A channel (one connection) of no checks to the socket.
async fn one_connection(socket: &Path) -> tonic::transport::Channel {
    let socket = socket.to_path_buf();
    tonic::transport::Endpoint::from_static("http://boxd.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .expect("a channel to boxd")
}

/// A unary call to `path` whose request declares a message of `declared`
/// bytes and sends all of it but the last byte, then nothing (the stream
/// stays open). How it ended: its gRPC status, or the transport's error.
async fn unary_never_finished(
    mut channel: tonic::transport::Channel,
    path: &str,
    declared: usize,
) -> Result<tonic::Status, String> {
    use tokio_stream::StreamExt;
    use tonic::codegen::Body as _;
    use tonic::codegen::Bytes;
    use tower::{Service, ServiceExt};
    let mut prefix = vec![0u8];
    prefix.extend_from_slice(&(declared as u32).to_be_bytes());
    let zeros = Bytes::from(vec![0u8; 1 << 20]);
    let body = declared - 1;
    let pieces = std::iter::once(Bytes::from(prefix)).chain(
        (0..body)
            .step_by(1 << 20)
            .map(move |at| zeros.slice(..(body - at).min(1 << 20))),
    );
    let stream =
        tokio_stream::iter(pieces.map(Ok::<_, std::io::Error>)).chain(tokio_stream::pending());
    let req = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://boxd.invalid{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(
            tonic::service::AxumBody::from_stream(stream),
        ))
        .unwrap();
    let channel = channel.ready().await.map_err(|e| e.to_string())?;
    let resp = channel.call(req).await.map_err(|e| format!("{e:?}"))?;
    if let Some(status) = tonic::Status::from_header_map(resp.headers()) {
        return Ok(status);
    }
    let mut body = resp.into_body();
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Err("the response ended without a status".into()),
            Some(Err(e)) => return Err(format!("the response: {e}")),
            Some(Ok(f)) => {
                if let Ok(trailers) = f.into_trailers() {
                    return tonic::Status::from_header_map(&trailers)
                        .ok_or_else(|| "trailers without a status".into());
                }
            }
        }
    }
}

/// `call`, or an error after 300 s: a guard against a hang (boxd answers
/// or fails each call long before), not a timing.
async fn guarded(
    call: impl std::future::Future<Output = Result<tonic::Status, String>>,
) -> Result<tonic::Status, String> {
    tokio::time::timeout(Duration::from_secs(300), call)
        .await
        .unwrap_or_else(|_| Err("no answer within 300 s".into()))
}

/// How many calls ended which way, for printing.
fn tally(results: &[Result<tonic::Status, String>]) -> Vec<(String, usize)> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for r in results {
        let key = match r {
            Ok(s) => format!("{:?}: {}", s.code(), s.message()),
            Err(e) => format!("no status: {e}"),
        };
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => seen.push((key, 1)),
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn unary_calls_that_never_finish_arriving_are_refused_not_buffered() {
    let limit = 2u64 << 30;
    let d = Daemon::with_address_space_limit(limit);
    println!("boxd under a {} GiB address-space limit", limit >> 30);
    let mut c = d.client().await;
    let bystander = Bystander::start(&mut c, "bystander").await;

    // The attack: one connection, 160 unary calls, each declaring a
    // 16 MiB - 1 message (the largest the bulk methods take) and sending
    // all of it but its last byte.
    const CALLS: usize = 160;
    let declared = (16 << 20) - 1;
    let channel = one_connection(&d.socket).await;
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        let channel = channel.clone();
        calls.push(tokio::spawn(guarded(unary_never_finished(
            channel,
            "/boxd.v1.Boxd/SendInput",
            declared,
        ))));
    }
    // And the same message to methods whose messages are small.
    let mut small = Vec::new();
    for path in ["/boxd.v1.Boxd/ListBoxes", "/boxd.v1.Boxd/CreateBox"] {
        small.push((
            path,
            guarded(unary_never_finished(channel.clone(), path, declared)).await,
        ));
    }
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.unwrap());
    }
    println!(
        "attacker: {CALLS} SendInput calls on one connection, each declaring {declared} bytes and sending all but the last:"
    );
    for (what, n) in tally(&results) {
        println!("  {n} × {what}");
    }
    for (path, r) in &small {
        let r = r
            .as_ref()
            .map(|s| format!("{:?}: {}", s.code(), s.message()));
        println!("  {path} declaring {declared} bytes: {r:?}");
    }
    println!("boxd after the attack: {}", memory_of(d.pid()));

    let serving = still_serving(&d).await;
    println!("a new client's ListBoxes: {serving:?}");
    let done = bystander.finish().await;
    println!(
        "the bystander's exec: {:?}",
        done.as_ref().map(|o| (o.stdout_str(), o.exit.code))
    );

    assert_eq!(serving, Ok(1), "boxd no longer serves");
    let done = done.expect("the bystander's exec did not complete");
    assert_eq!(done.stdout_str(), "the bystander's line\n");
    assert_eq!(done.exit.code, Some(0));
    // Every call got an error of its own, over the connection that stayed.
    for r in &results {
        let status = r.as_ref().expect("a call lost its connection");
        assert!(
            matches!(
                status.code(),
                tonic::Code::ResourceExhausted | tonic::Code::DeadlineExceeded
            ),
            "{status:?}"
        );
    }
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Ok(s) if s.code() == tonic::Code::ResourceExhausted)),
        "no call was refused for the connection's bound"
    );
    for (path, r) in &small {
        let status = r.as_ref().expect("a call lost its connection");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{path}");
    }
}
