//! The input half of an exec: every [`ExecInput`] sends into one channel
//! that outlives reconnections; an uplink task writes it to whichever
//! `Exec` call is current, keeping the stdin it sent so that a reattached
//! call can be given again what the command did not get.
//!
//! Stdin is numbered as the daemon numbers it: from the stdin offset the
//! call began at (`ExecStarted.stdin_offset`), in bytes.
//!
//! Invariants:
//! - while a call is open, input goes out in the order it was sent, one
//!   message at a time (the uplink takes the next once the last is in the
//!   call's queue, so the command's pace holds senders back); signals and
//!   resizes alone may overtake stdin held back by the window;
//! - on a resumable call at most [`STDIN_WINDOW`] bytes of stdin are in
//!   flight beyond what the daemon says the command was given
//!   (`ExecResponse.stdin_offset`), so the daemon never waits to queue
//!   stdin and what follows it on the call (acknowledgements) gets through;
//! - after a reattach the call first gets stdin from the offset the daemon
//!   names, then the EOF if one was sent, then the signals and resizes
//!   sent meanwhile, then new input;
//! - stdin is never dropped silently: the last [`STDIN_KEPT`] bytes sent
//!   are kept, and a reattach that needs older ones fails with
//!   [`ResendError`];
//! - input is taken from senders only within bounds ([`AWAY_STDIN`],
//!   [`AWAY_CONTROLS`]) while it cannot go out; beyond them senders wait.

use std::collections::VecDeque;

use boxd_proto::bytes::Bytes;
use boxd_proto::tonic::Status;
use boxd_proto::v1::{self, exec_request::Msg};
use tokio::sync::{mpsc, oneshot, watch};

/// Stdin bytes kept after they were sent, for a reattached call.
pub const STDIN_KEPT: u64 = 4 << 20;
/// Stdin bytes a resumable call has in flight beyond what the daemon says
/// the command was given (the daemon queues no more for it).
pub const STDIN_WINDOW: u64 = 1 << 20;
/// Stdin bytes taken from senders that cannot go out yet.
const AWAY_STDIN: u64 = 1 << 20;
/// Signals and resizes taken that cannot go out yet.
const AWAY_CONTROLS: usize = 64;
/// Input messages between the senders and the uplink, per channel.
const INPUT_QUEUE: usize = 16;
/// The most stdin one message carries: a caller's larger buffer goes as
/// several, so no message nears the 16 MiB gRPC bound and the in-flight
/// window and the resend buffer work in pieces they can hold.
pub const STDIN_CHUNK: usize = 256 << 10;

/// The sending half of an exec; cheap to clone. It stays valid across
/// reconnections; its calls fail once the [`super::ExecStream`] is dropped.
/// Stdin and its EOF travel on one channel, in order; signals and resizes
/// on another, so that they are never stuck behind stdin the command does
/// not read.
#[derive(Clone, Debug)]
pub struct ExecInput {
    data: mpsc::Sender<Input>,
    controls: mpsc::Sender<Input>,
}

#[derive(Debug)]
enum Input {
    Stdin(Bytes),
    Close,
    Signal(String),
    Resize(v1::TtySize),
}

impl ExecInput {
    async fn send(&self, input: Input) -> Result<(), Status> {
        let tx = match input {
            Input::Stdin(_) | Input::Close => &self.data,
            Input::Signal(_) | Input::Resize(_) => &self.controls,
        };
        tx.send(input)
            .await
            .map_err(|_| Status::cancelled("the exec stream has ended"))
    }

    /// Sends bytes to the command's stdin; waits while the command is not
    /// reading (backpressure) or while boxd is being reattached. Bytes sent
    /// after [`ExecInput::close_stdin`] are dropped (the command's stdin is
    /// closed). Any size: a large buffer is sent in pieces of at most
    /// [`STDIN_CHUNK`] bytes.
    pub async fn stdin(&self, data: Vec<u8>) -> Result<(), Status> {
        let data = Bytes::from(data);
        let mut at = 0;
        while at < data.len() {
            let end = (at + STDIN_CHUNK).min(data.len());
            self.send(Input::Stdin(data.slice(at..end))).await?;
            at = end;
        }
        Ok(())
    }

    pub async fn close_stdin(&self) -> Result<(), Status> {
        self.send(Input::Close).await
    }

    /// Sends the command a signal. One sent while boxd is away is delivered
    /// after the reattach; one sent at the very moment the connection breaks
    /// may be lost with it.
    pub async fn signal(&self, signal: impl Into<String>) -> Result<(), Status> {
        self.send(Input::Signal(signal.into())).await
    }

    pub async fn resize(&self, rows: u32, cols: u32) -> Result<(), Status> {
        self.send(Input::Resize(v1::TtySize { rows, cols })).await
    }
}

/// A reattach needs stdin this client no longer has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the command was given {at} bytes of stdin before boxd went away, and only bytes from {kept} on are still kept here: {} bytes of stdin are lost",
    kept - at
)]
pub struct ResendError {
    pub at: u64,
    pub kept: u64,
}

/// Stdin as a stream of numbered bytes: those sent to the current call
/// (the last [`STDIN_KEPT`] of them kept), then those not sent yet.
///
/// Invariants: `start <= sent <= end`; `chunks` hold exactly the bytes
/// `start..end`, none empty.
#[derive(Debug)]
pub struct StdinLog {
    chunks: VecDeque<Bytes>,
    start: u64,
    sent: u64,
    end: u64,
    keep: u64,
}

impl StdinLog {
    /// An empty log whose first byte will be byte `at` of the stdin stream.
    pub fn new(keep: u64, at: u64) -> StdinLog {
        StdinLog {
            chunks: VecDeque::new(),
            start: at,
            sent: at,
            end: at,
            keep,
        }
    }

    /// The offset of the next byte to send to the current call.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Appends bytes to send.
    pub fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.end += data.len() as u64;
            self.chunks.push_back(data);
        }
    }

    /// Bytes taken but not sent to the current call.
    pub fn unsent(&self) -> u64 {
        self.end - self.sent
    }

    /// The next bytes to send (from `sent` to the end of their chunk).
    pub fn next_unsent(&self) -> Option<Bytes> {
        if self.sent == self.end {
            return None;
        }
        let mut at = self.start;
        for c in &self.chunks {
            let len = c.len() as u64;
            if self.sent < at + len {
                return Some(c.slice((self.sent - at) as usize..));
            }
            at += len;
        }
        None
    }

    /// `n` more bytes went to the current call; forgets what is now more
    /// than [`STDIN_KEPT`] behind.
    pub fn mark_sent(&mut self, n: u64) {
        self.sent = (self.sent + n).min(self.end);
        let keep_from = self.sent.saturating_sub(self.keep);
        while self.start < keep_from {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            let drop = (keep_from - self.start).min(front.len() as u64);
            if drop == front.len() as u64 {
                self.chunks.pop_front();
            } else {
                *front = front.slice(drop as usize..);
            }
            self.start += drop;
        }
    }

    /// A new call, whose command was given `at` bytes: send from there
    /// again. Returns how many bytes that resends. A daemon ahead of what
    /// was sent here had stdin from elsewhere too (`SendInput`, another
    /// client): nothing is resent, and this log's numbering moves up to
    /// the daemon's.
    pub fn rewind(&mut self, at: u64) -> Result<u64, ResendError> {
        if at < self.start {
            return Err(ResendError {
                at,
                kept: self.start,
            });
        }
        if at > self.sent {
            let shift = at - self.sent;
            self.start += shift;
            self.sent += shift;
            self.end += shift;
            return Ok(0);
        }
        let resent = self.sent - at;
        self.sent = at;
        Ok(resent)
    }
}

/// A new call for the uplink (after a reattach).
pub struct Relink {
    pub call: Call,
    /// Stdin bytes the command has been given (`ExecStarted.stdin_offset`).
    pub stdin_offset: u64,
    /// Whether the uplink can resend from there (and how many bytes).
    pub reply: oneshot::Sender<Result<u64, ResendError>>,
}

/// The request side of one `Exec` call, as the uplink writes it.
pub struct Call {
    pub tx: mpsc::Sender<v1::ExecRequest>,
    /// Fired when the call stops taking requests (its request side ended).
    pub broken: oneshot::Sender<()>,
}

pub enum Ctrl {
    Relink(Relink),
    /// The current call failed: hold input until the next.
    Unlink,
}

/// How the [`super::ExecStream`] reaches its uplink.
pub struct Handle {
    pub input: ExecInput,
    ctrl: mpsc::Sender<Ctrl>,
    /// Stdin bytes the daemon says the command was given.
    given: watch::Sender<u64>,
}

impl Handle {
    /// Starts the uplink on the first call, which began at `stdin_offset`;
    /// with `window`, stdin in flight is bounded by [`STDIN_WINDOW`] (the
    /// daemon reports what the command was given only to resumable calls).
    /// It ends when the handle is dropped.
    pub fn spawn(call: Call, stdin_offset: u64, window: bool) -> Handle {
        let (data, data_rx) = mpsc::channel(INPUT_QUEUE);
        let (controls, controls_rx) = mpsc::channel(INPUT_QUEUE);
        let (ctrl, ctrl_rx) = mpsc::channel(4);
        let (given, given_rx) = watch::channel(stdin_offset);
        let uplink = Uplink {
            data: data_rx,
            data_open: true,
            control_inputs: controls_rx,
            control_inputs_open: true,
            ctrl: ctrl_rx,
            given: given_rx,
            window: window.then_some(stdin_offset),
            call: Some(call),
            log: StdinLog::new(STDIN_KEPT, stdin_offset),
            close: Close::default(),
            controls: VecDeque::new(),
        };
        tokio::spawn(uplink.run());
        Handle {
            input: ExecInput { data, controls },
            ctrl,
            given,
        }
    }

    /// The daemon says the command has been given `stdin_offset` bytes.
    pub fn given(&self, stdin_offset: u64) {
        self.given.send_replace(stdin_offset);
    }

    /// Stops writing to the current call (it failed).
    pub fn unlink(&self) {
        let _ = self.ctrl.try_send(Ctrl::Unlink);
    }

    /// Hands the uplink a new call; returns how many stdin bytes it resends.
    pub async fn relink(&self, call: Call, stdin_offset: u64) -> Result<u64, Status> {
        // What the old call said no longer counts.
        self.given(stdin_offset);
        let (reply, answer) = oneshot::channel();
        let relink = Relink {
            call,
            stdin_offset,
            reply,
        };
        let gone = || Status::internal("the exec's input task has ended");
        self.ctrl
            .send(Ctrl::Relink(relink))
            .await
            .map_err(|_| gone())?;
        match answer.await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(Status::data_loss(e.to_string())),
            Err(_) => Err(gone()),
        }
    }
}

#[derive(Debug, Default)]
struct Close {
    /// A sender closed stdin.
    requested: bool,
    /// The current call has been sent the EOF.
    sent: bool,
}

struct Uplink {
    data: mpsc::Receiver<Input>,
    data_open: bool,
    control_inputs: mpsc::Receiver<Input>,
    control_inputs_open: bool,
    ctrl: mpsc::Receiver<Ctrl>,
    given: watch::Receiver<u64>,
    /// With a window: the stdin offset the command was given, as last
    /// reported.
    window: Option<u64>,
    call: Option<Call>,
    log: StdinLog,
    close: Close,
    /// Signals and resizes not sent yet.
    controls: VecDeque<Msg>,
}

impl Uplink {
    async fn run(mut self) {
        loop {
            let out = self.call.as_ref().and_then(|_| self.next_out());
            let idle = out.is_none();
            let tx = self.call.as_ref().map(|c| c.tx.clone());
            tokio::select! {
                biased;
                ctrl = self.ctrl.recv() => match ctrl {
                    None => return, // the ExecStream is gone
                    Some(Ctrl::Unlink) => self.unlink(),
                    Some(Ctrl::Relink(r)) => self.relink(r),
                },
                Ok(()) = self.given.changed() => {
                    let given = *self.given.borrow_and_update();
                    if let Some(w) = self.window.as_mut() {
                        *w = given;
                    }
                }
                permit = reserve(tx.as_ref()), if out.is_some() => match (permit, out) {
                    (Ok(permit), Some(msg)) => {
                        self.sent(&msg);
                        permit.send(v1::ExecRequest { msg: Some(msg) });
                    }
                    _ => self.broke(),
                },
                () = closed(tx.as_ref()), if tx.is_some() => self.broke(),
                input = self.data.recv(), if self.data_open && idle && self.data_room() => {
                    match input {
                        None => self.data_open = false,
                        Some(input) => self.take(input),
                    }
                }
                input = self.control_inputs.recv(),
                    if self.control_inputs_open && idle && self.control_room() =>
                {
                    match input {
                        None => self.control_inputs_open = false,
                        Some(input) => self.take(input),
                    }
                }
            }
        }
    }

    /// Whether stdin may go out now: no window, or less than
    /// [`STDIN_WINDOW`] in flight beyond what the command was given.
    fn window_open(&self) -> bool {
        self.window
            .is_none_or(|given| self.log.sent().saturating_sub(given) < STDIN_WINDOW)
    }

    /// What the current call may be sent now: stdin first (a resend after
    /// a reattach), then the EOF, then signals and resizes (which alone
    /// overtake stdin the window holds back).
    fn next_out(&self) -> Option<Msg> {
        if self.log.unsent() > 0 {
            if self.window_open() {
                return self.log.next_unsent().map(Msg::Stdin);
            }
        } else if self.close.requested && !self.close.sent {
            return Some(Msg::CloseStdin(true));
        }
        self.controls.front().cloned()
    }

    fn sent(&mut self, msg: &Msg) {
        match msg {
            Msg::Stdin(data) => self.log.mark_sent(data.len() as u64),
            Msg::CloseStdin(_) => self.close.sent = true,
            _ => {
                self.controls.pop_front();
            }
        }
    }

    /// Whether to take more stdin while nothing can go out now (no call,
    /// or stdin held back by the window): within bounds.
    fn data_room(&self) -> bool {
        self.log.unsent() < AWAY_STDIN
    }

    fn control_room(&self) -> bool {
        self.controls.len() < AWAY_CONTROLS
    }

    fn take(&mut self, input: Input) {
        match input {
            // The command's stdin is closed; the daemon would refuse these.
            Input::Stdin(_) if self.close.requested => {}
            Input::Stdin(data) => self.log.push(data),
            Input::Close => self.close.requested = true,
            Input::Signal(signal) => self.controls.push_back(Msg::Signal(v1::Signal { signal })),
            Input::Resize(size) => {
                // Only the latest size matters.
                self.controls.retain(|m| !matches!(m, Msg::Resize(_)));
                self.controls.push_back(Msg::Resize(size));
            }
        }
    }

    fn unlink(&mut self) {
        self.call = None;
    }

    /// The current call stopped taking requests: say so, hold input.
    fn broke(&mut self) {
        if let Some(call) = self.call.take() {
            let _ = call.broken.send(());
        }
    }

    fn relink(&mut self, r: Relink) {
        match self.log.rewind(r.stdin_offset) {
            Ok(resent) => {
                self.call = Some(r.call);
                self.close.sent = false;
                self.given.borrow_and_update();
                if let Some(w) = self.window.as_mut() {
                    *w = r.stdin_offset;
                }
                let _ = r.reply.send(Ok(resent));
            }
            Err(e) => {
                self.call = None;
                let _ = r.reply.send(Err(e));
            }
        }
    }
}

async fn reserve(
    tx: Option<&mpsc::Sender<v1::ExecRequest>>,
) -> Result<mpsc::Permit<'_, v1::ExecRequest>, ()> {
    match tx {
        Some(tx) => tx.reserve().await.map_err(|_| ()),
        None => std::future::pending().await,
    }
}

async fn closed(tx: Option<&mpsc::Sender<v1::ExecRequest>>) {
    match tx {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn sent_all(log: &mut StdinLog) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(c) = log.next_unsent() {
            out.extend_from_slice(&c);
            log.mark_sent(c.len() as u64);
        }
        out
    }

    #[test]
    fn resends_from_an_offset_inside_a_chunk() {
        let mut log = StdinLog::new(STDIN_KEPT, 0);
        log.push(b("hello "));
        log.push(b("world"));
        assert_eq!(sent_all(&mut log), b"hello world");
        assert_eq!(log.unsent(), 0);
        assert_eq!(log.rewind(3), Ok(8));
        log.push(b("!"));
        assert_eq!(sent_all(&mut log), b"lo world!");
        // Resending nothing is fine too.
        assert_eq!(log.rewind(12), Ok(0));
        assert_eq!(log.next_unsent(), None);
    }

    #[test]
    fn numbers_stdin_from_where_the_call_began() {
        // Attached to an exec whose command had 100 bytes already.
        let mut log = StdinLog::new(STDIN_KEPT, 100);
        log.push(b("ab"));
        assert_eq!(sent_all(&mut log), b"ab");
        assert_eq!(log.sent(), 102);
        assert_eq!(log.rewind(101), Ok(1));
        assert_eq!(sent_all(&mut log), b"b");
        assert_eq!(log.rewind(99), Err(ResendError { at: 99, kept: 100 }));
        // A daemon that had stdin from elsewhere too: nothing to resend,
        // and what follows is numbered from its offset.
        assert_eq!(log.rewind(110), Ok(0));
        log.push(b("c"));
        assert_eq!(sent_all(&mut log), b"c");
        assert_eq!(log.sent(), 111);
        assert_eq!(log.rewind(110), Ok(1));
    }

    #[test]
    fn keeps_the_last_bytes_sent_and_refuses_older_offsets() {
        let mut log = StdinLog::new(10, 0);
        for s in ["abcd", "efgh", "ijkl", "mnop"] {
            log.push(b(s));
        }
        // Unsent bytes are never dropped, however many.
        log.mark_sent(0);
        assert_eq!(log.start, 0);
        sent_all(&mut log);
        // 16 sent, 10 kept: 6.. (inside the second chunk).
        assert_eq!(log.start, 6);
        assert_eq!(log.rewind(5), Err(ResendError { at: 5, kept: 6 }));
        assert!(
            ResendError { at: 5, kept: 6 }
                .to_string()
                .contains("1 bytes of stdin are lost")
        );
        assert_eq!(log.rewind(6), Ok(10));
        assert_eq!(sent_all(&mut log), b"ghijklmnop");
    }

    /// A fake call: what the uplink writes to it.
    fn call() -> (Call, mpsc::Receiver<v1::ExecRequest>, oneshot::Receiver<()>) {
        let (tx, rx) = mpsc::channel(64);
        let (broken, broken_rx) = oneshot::channel();
        (Call { tx, broken }, rx, broken_rx)
    }

    async fn recv(rx: &mut mpsc::Receiver<v1::ExecRequest>) -> Msg {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a request")
            .expect("the call is open")
            .msg
            .expect("a message")
    }

    #[tokio::test]
    async fn input_held_while_away_follows_the_resent_stdin() {
        let (first, mut rx1, broken1) = call();
        let h = Handle::spawn(first, 0, false);
        let input = h.input.clone();
        input.stdin(b"hello ".to_vec()).await.unwrap();
        input.signal("SIGINT").await.unwrap();
        assert_eq!(recv(&mut rx1).await, Msg::Stdin(b("hello ")));
        assert_eq!(
            recv(&mut rx1).await,
            Msg::Signal(v1::Signal {
                signal: "SIGINT".into()
            })
        );
        // The call goes away: the uplink says so.
        drop(rx1);
        tokio::time::timeout(Duration::from_secs(5), broken1)
            .await
            .unwrap()
            .unwrap();
        // Meanwhile: more stdin, the EOF, a signal, a resize.
        input.stdin(b"world".to_vec()).await.unwrap();
        input.close_stdin().await.unwrap();
        input.stdin(b"dropped".to_vec()).await.unwrap();
        input.signal("SIGTERM").await.unwrap();
        input.resize(30, 40).await.unwrap();
        // The command had been given 3 bytes.
        let (second, mut rx2, _broken2) = call();
        assert_eq!(h.relink(second, 3).await.unwrap(), 3);
        assert_eq!(recv(&mut rx2).await, Msg::Stdin(b("lo ")));
        assert_eq!(recv(&mut rx2).await, Msg::Stdin(b("world")));
        assert_eq!(recv(&mut rx2).await, Msg::CloseStdin(true));
        assert_eq!(
            recv(&mut rx2).await,
            Msg::Signal(v1::Signal {
                signal: "SIGTERM".into()
            })
        );
        assert_eq!(
            recv(&mut rx2).await,
            Msg::Resize(v1::TtySize { rows: 30, cols: 40 })
        );
        // Then new input, in order.
        input.signal("SIGUSR1").await.unwrap();
        assert!(matches!(recv(&mut rx2).await, Msg::Signal(_)));
        // Once the stream is gone, input fails.
        drop(h);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(input.signal("SIGKILL").await.is_err());
    }

    #[tokio::test]
    async fn stdin_in_flight_stays_within_the_window_and_signals_overtake_it() {
        let (first, mut rx, _broken) = call();
        let h = Handle::spawn(first, 0, true);
        // A window's worth and one piece more, sent as one buffer: it goes
        // in pieces of STDIN_CHUNK.
        let pieces = (STDIN_WINDOW as usize) / STDIN_CHUNK;
        let input = h.input.clone();
        tokio::spawn(async move {
            input
                .stdin(vec![b'x'; (pieces + 1) * STDIN_CHUNK])
                .await
                .unwrap();
        });
        for _ in 0..pieces {
            assert!(matches!(recv(&mut rx).await, Msg::Stdin(d) if d.len() == STDIN_CHUNK));
        }
        // A window's worth in flight: the last piece waits, a signal does not.
        h.input.signal("SIGINT").await.unwrap();
        assert!(matches!(recv(&mut rx).await, Msg::Signal(_)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err(), "held by the window");
        // The command took the first piece.
        h.given(STDIN_CHUNK as u64);
        assert!(matches!(recv(&mut rx).await, Msg::Stdin(d) if d.len() == STDIN_CHUNK));
        // The EOF follows the stdin, once it is sent.
        h.input.close_stdin().await.unwrap();
        assert_eq!(recv(&mut rx).await, Msg::CloseStdin(true));
    }

    #[tokio::test]
    async fn resizes_held_while_away_are_coalesced() {
        let (_tx, data) = mpsc::channel(1);
        let (_tx2, control_inputs) = mpsc::channel(1);
        let (_ctrl, ctrl) = mpsc::channel(1);
        let (_given, given) = watch::channel(0);
        let mut u = Uplink {
            data,
            data_open: true,
            control_inputs,
            control_inputs_open: true,
            ctrl,
            given,
            window: None,
            call: None,
            log: StdinLog::new(STDIN_KEPT, 0),
            close: Close::default(),
            controls: VecDeque::new(),
        };
        u.take(Input::Resize(v1::TtySize { rows: 1, cols: 2 }));
        u.take(Input::Signal("SIGINT".into()));
        u.take(Input::Resize(v1::TtySize { rows: 3, cols: 4 }));
        let held: Vec<Msg> = u.controls.iter().cloned().collect();
        assert_eq!(
            held,
            vec![
                Msg::Signal(v1::Signal {
                    signal: "SIGINT".into()
                }),
                Msg::Resize(v1::TtySize { rows: 3, cols: 4 })
            ]
        );
        // Bounded: no more is taken once AWAY_CONTROLS are held.
        assert!(u.control_room());
        for _ in 0..AWAY_CONTROLS {
            u.take(Input::Signal("SIGINT".into()));
        }
        assert!(!u.control_room());
        assert!(u.data_room());
    }

    #[tokio::test]
    async fn a_reattach_without_the_stdin_it_needs_fails() {
        let (first, mut rx1, _broken1) = call();
        let h = Handle::spawn(first, 0, false);
        // 5 MiB in 1 MiB writes (each sent in pieces): the first MiB is no
        // longer kept.
        for _ in 0..5 {
            h.input.stdin(vec![b'x'; 1 << 20]).await.unwrap();
            for _ in 0..(1 << 20) / STDIN_CHUNK {
                assert!(matches!(recv(&mut rx1).await, Msg::Stdin(_)));
            }
        }
        h.unlink();
        let (second, _rx2, _broken2) = call();
        let e = h.relink(second, (1 << 20) - 1).await.unwrap_err();
        assert_eq!(e.code(), boxd_proto::tonic::Code::DataLoss);
        assert!(e.message().contains("1 bytes of stdin are lost"), "{e:?}");
        let (third, mut rx3, _broken3) = call();
        assert_eq!(h.relink(third, 1 << 20).await.unwrap(), 4 << 20);
        assert!(matches!(recv(&mut rx3).await, Msg::Stdin(d) if d.len() == STDIN_CHUNK));
    }
}
