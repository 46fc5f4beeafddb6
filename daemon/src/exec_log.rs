//! An exec's output as a log: every byte of stdout and stderr numbered by
//! its offset in its stream, kept until it is acknowledged and then for as
//! long as the last [`KEEP`] bytes reach back, and its exit.
//!
//! One log per exec, written by the pump that reads the command's pipes
//! and read by any number of subscriptions, each from offsets of its own
//! (a client that lost its daemon reattaches where it stopped).
//!
//! Invariants:
//! - chunks are read by every subscription in the order they were
//!   written, and the exit comes after the last of them;
//! - nothing a live subscription has not acknowledged is dropped; the
//!   writer waits (and so the command does) while the output is
//!   [`WINDOW`] bytes ahead of the slowest live subscription's
//!   acknowledgements;
//! - with no live subscription, a non-detached exec's output waits for
//!   one (its client is reattaching) once it is [`WINDOW`] ahead of the
//!   last acknowledgement, while a detached exec's runs on, keeping the
//!   last [`KEEP`] bytes;
//! - memory is bounded: at most `KEEP + WINDOW` bytes per exec.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::watch;

use crate::engine::ExitStatus;

/// Output kept for replay and for `logs` after it was acknowledged.
pub const KEEP: usize = 1 << 20;
/// How far output may run ahead of the acknowledgements.
pub const WINDOW: u64 = 1 << 20;
/// Exited execs kept (with their last output) for `attach` and `logs`, by
/// the daemon and by each box's supervisor alike.
pub const KEEP_EXITED: usize = 32;

/// Removes from `table` the oldest exited execs beyond [`KEEP_EXITED`];
/// `exited_at` gives an exec's start time when it has exited.
pub fn prune_exited<V>(
    table: &mut std::collections::HashMap<String, V>,
    exited_at: impl Fn(&V) -> Option<i64>,
) {
    let mut exited: Vec<(i64, String)> = table
        .iter()
        .filter_map(|(id, v)| Some((exited_at(v)?, id.clone())))
        .collect();
    if exited.len() <= KEEP_EXITED {
        return;
    }
    exited.sort();
    for (_, id) in &exited[..exited.len() - KEEP_EXITED] {
        table.remove(id);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn index(self) -> usize {
        self as usize
    }
}

/// Bytes of stdout and of stderr: a position in an exec's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Offsets {
    pub stdout: u64,
    pub stderr: u64,
}

impl Offsets {
    /// The position in the interleaved output: every prefix of the output
    /// holds exactly this many bytes of the two streams together.
    fn seq(self) -> u64 {
        self.stdout + self.stderr
    }

    fn get_mut(&mut self, s: Stream) -> &mut u64 {
        match s {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        }
    }
}

/// What a subscription reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Output(Stream, Bytes),
    /// Always the last event.
    Exit(ExitStatus),
}

#[derive(Debug)]
struct Chunk {
    stream: Stream,
    /// Its first byte's offset in its stream.
    offset: u64,
    /// Its first byte's position in the interleaved output.
    seq: u64,
    data: Bytes,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.seq + self.data.len() as u64
    }
}

#[derive(Debug, Default)]
struct State {
    chunks: VecDeque<Chunk>,
    kept: usize,
    /// Offsets of the next byte of each stream.
    next: [u64; 2],
    /// Live subscriptions and what each acknowledged (a `seq`).
    live: HashMap<u64, u64>,
    next_sub: u64,
    /// The furthest acknowledgement of any subscription, live or gone.
    acked: u64,
    detached: bool,
    exit: Option<ExitStatus>,
    /// Bytes of stdin given to the command.
    stdin: u64,
}

impl State {
    fn total(&self) -> u64 {
        self.next[0] + self.next[1]
    }

    /// Output before this may be dropped (beyond [`KEEP`]).
    fn floor(&self) -> u64 {
        match self.live.values().min() {
            Some(&slowest) => slowest,
            None if self.detached => self.total(),
            None => self.acked,
        }
    }

    fn trim(&mut self) {
        let floor = self.floor();
        while self.kept > KEEP {
            match self.chunks.front() {
                Some(c) if c.end() <= floor => {
                    self.kept -= c.data.len();
                    self.chunks.pop_front();
                }
                _ => break,
            }
        }
    }

    fn oldest(&self) -> u64 {
        self.chunks.front().map_or(self.total(), |c| c.seq)
    }

    /// Each stream's offset at interleaved position `seq` (kept or at the end).
    fn offsets_at(&self, seq: u64) -> Offsets {
        let mut at = Offsets {
            stdout: self.next[0],
            stderr: self.next[1],
        };
        for c in self.chunks.iter().rev() {
            if c.end() <= seq {
                break;
            }
            *at.get_mut(c.stream) = c.offset + seq.saturating_sub(c.seq);
        }
        at
    }
}

/// The log of one exec. See the module's invariants.
pub struct ExecLog {
    state: Mutex<State>,
    /// Bumped on every change a reader or the writer may wait for.
    changed: watch::Sender<u64>,
}

/// One reader's place in a log; acknowledge what it took with
/// [`ExecLog::ack_id`], and end it with [`ExecLog::leave`].
pub struct Cursor {
    id: u64,
    seq: u64,
    /// Where it began, in each stream.
    pub start: Offsets,
}

impl Cursor {
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl ExecLog {
    pub fn new(detached: bool) -> ExecLog {
        ExecLog {
            state: Mutex::new(State {
                detached,
                ..State::default()
            }),
            changed: watch::channel(0).0,
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("exec log")
    }

    /// Waits until output may be appended (see [`WINDOW`]).
    pub async fn room(&self) {
        let mut rx = self.changed.subscribe();
        loop {
            {
                let s = self.lock();
                if s.total() - s.floor() < WINDOW {
                    return;
                }
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    pub fn append(&self, stream: Stream, data: Bytes) {
        if data.is_empty() {
            return;
        }
        {
            let mut s = self.lock();
            let seq = s.total();
            let offset = s.next[stream.index()];
            s.next[stream.index()] += data.len() as u64;
            s.kept += data.len();
            s.chunks.push_back(Chunk {
                stream,
                offset,
                seq,
                data,
            });
            s.trim();
        }
        self.bump();
    }

    /// Records the exit, after the last output.
    pub fn finish(&self, status: ExitStatus) {
        self.lock().exit.get_or_insert(status);
        self.bump();
    }

    pub fn exit(&self) -> Option<ExitStatus> {
        self.lock().exit.clone()
    }

    pub fn add_stdin(&self, n: u64) {
        self.lock().stdin += n;
    }

    pub fn stdin_offset(&self) -> u64 {
        self.lock().stdin
    }

    /// Where the output ends now.
    pub fn end(&self) -> Offsets {
        let s = self.lock();
        Offsets {
            stdout: s.next[0],
            stderr: s.next[1],
        }
    }

    /// A new reader from `from`, or from the oldest byte kept when `from`
    /// is older (its `start` says where it really begins).
    pub fn join(&self, from: Offsets) -> Cursor {
        let mut s = self.lock();
        let seq = from.seq().clamp(s.oldest(), s.total());
        let id = s.next_sub;
        s.next_sub += 1;
        s.live.insert(id, seq);
        let start = s.offsets_at(seq);
        Cursor { id, seq, start }
    }

    /// Acknowledges everything up to `upto` (cumulative offsets) for the
    /// reader `id` ([`Cursor::id`]).
    pub fn ack_id(&self, id: u64, upto: Offsets) {
        let seq = upto.seq();
        {
            let mut s = self.lock();
            let total = s.total();
            if let Some(a) = s.live.get_mut(&id) {
                *a = (*a).max(seq.min(total));
            }
            s.acked = s.acked.max(seq.min(total));
            s.trim();
        }
        self.bump();
    }

    /// The reader is gone; what it did not acknowledge no longer holds the
    /// writer back (beyond the non-detached rule).
    pub fn leave(&self, cursor: &Cursor) {
        {
            let mut s = self.lock();
            s.live.remove(&cursor.id);
            s.trim();
        }
        self.bump();
    }

    pub fn readers(&self) -> usize {
        self.lock().live.len()
    }

    /// The next events for `cursor`: output from its position (all there
    /// is, cut into chunks as written), or the exit once the output is
    /// read; waits while there is neither. Empty only once the exit was
    /// returned.
    pub async fn next(&self, cursor: &mut Cursor) -> Vec<Event> {
        let mut rx = self.changed.subscribe();
        loop {
            {
                let s = self.lock();
                if cursor.seq == u64::MAX {
                    return Vec::new();
                }
                // Dropped under a reader only for a detached exec it
                // fell behind; it skips ahead.
                cursor.seq = cursor.seq.max(s.oldest());
                let mut out = Vec::new();
                for c in s.chunks.iter() {
                    if c.end() <= cursor.seq {
                        continue;
                    }
                    let skip = (cursor.seq - c.seq) as usize;
                    out.push(Event::Output(c.stream, c.data.slice(skip..)));
                    cursor.seq = c.end();
                }
                if !out.is_empty() {
                    return out;
                }
                if let Some(exit) = &s.exit {
                    cursor.seq = u64::MAX;
                    return vec![Event::Exit(exit.clone())];
                }
            }
            if rx.changed().await.is_err() {
                return Vec::new();
            }
        }
    }

    /// Resolves once the exit is recorded.
    pub async fn wait(&self) -> ExitStatus {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(e) = self.exit() {
                return e;
            }
            if rx.changed().await.is_err() {
                return ExitStatus::default();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(events: &[Event]) -> String {
        events
            .iter()
            .map(|e| match e {
                Event::Output(Stream::Stdout, b) => format!("o:{}", String::from_utf8_lossy(b)),
                Event::Output(Stream::Stderr, b) => format!("e:{}", String::from_utf8_lossy(b)),
                Event::Exit(s) => format!("exit:{:?}", s.code),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn exit(code: i32) -> ExitStatus {
        ExitStatus {
            code: Some(code),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn readers_see_output_in_order_then_the_exit() {
        let log = ExecLog::new(false);
        let mut a = log.join(Offsets::default());
        log.append(Stream::Stdout, Bytes::from_static(b"ab"));
        log.append(Stream::Stderr, Bytes::from_static(b"X"));
        log.append(Stream::Stdout, Bytes::from_static(b"cd"));
        log.finish(exit(3));
        assert_eq!(text(&log.next(&mut a).await), "o:ab e:X o:cd");
        assert_eq!(text(&log.next(&mut a).await), "exit:Some(3)");
        assert!(log.next(&mut a).await.is_empty());
    }

    #[tokio::test]
    async fn a_reader_rejoins_at_its_offsets_mid_chunk() {
        let log = ExecLog::new(false);
        log.append(Stream::Stdout, Bytes::from_static(b"hello"));
        log.append(Stream::Stderr, Bytes::from_static(b"ERR"));
        log.append(Stream::Stdout, Bytes::from_static(b"world"));
        // It had "hel" of stdout only.
        let mut b = log.join(Offsets {
            stdout: 3,
            stderr: 0,
        });
        assert_eq!(
            b.start,
            Offsets {
                stdout: 3,
                stderr: 0
            }
        );
        assert_eq!(text(&log.next(&mut b).await), "o:lo e:ERR o:world");
        // It had everything up to "wo".
        let mut c = log.join(Offsets {
            stdout: 7,
            stderr: 3,
        });
        assert_eq!(text(&log.next(&mut c).await), "o:rld");
    }

    #[tokio::test]
    async fn unacknowledged_output_holds_the_writer_and_is_never_dropped() {
        let log = std::sync::Arc::new(ExecLog::new(false));
        let reader = log.join(Offsets::default());
        let chunk = Bytes::from(vec![b'x'; 256 << 10]);
        for _ in 0..4 {
            log.room().await;
            log.append(Stream::Stdout, chunk.clone());
        }
        // 1 MiB ahead of nothing acknowledged: no room.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), log.room());
        assert!(waiting.await.is_err());
        // The reader goes (its daemon died): still no room, nothing dropped.
        log.leave(&reader);
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), log.room());
        assert!(waiting.await.is_err());
        let mut back = log.join(Offsets::default());
        assert_eq!(back.start, Offsets::default());
        let got: usize = log
            .next(&mut back)
            .await
            .iter()
            .map(|e| match e {
                Event::Output(_, b) => b.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(got, 1 << 20);
        log.ack_id(back.id(), log.end());
        log.room().await;
    }

    #[tokio::test]
    async fn a_detached_exec_with_no_reader_keeps_the_last_mebibyte() {
        let log = ExecLog::new(true);
        let chunk = Bytes::from(vec![b'y'; 256 << 10]);
        for _ in 0..8 {
            log.room().await;
            log.append(Stream::Stdout, chunk.clone());
        }
        let mut r = log.join(Offsets::default());
        assert_eq!(
            r.start.stdout,
            1 << 20,
            "replay begins at the oldest kept byte"
        );
        let n: usize = log
            .next(&mut r)
            .await
            .iter()
            .map(|e| match e {
                Event::Output(_, b) => b.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(n, KEEP);
    }

    #[tokio::test]
    async fn the_slowest_live_reader_sets_the_pace() {
        let log = ExecLog::new(true);
        let fast = log.join(Offsets::default());
        let _slow = log.join(Offsets::default());
        let chunk = Bytes::from(vec![b'z'; 512 << 10]);
        log.append(Stream::Stdout, chunk.clone());
        log.append(Stream::Stdout, chunk);
        log.ack_id(fast.id(), log.end());
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), log.room());
        assert!(
            waiting.await.is_err(),
            "the slow reader acknowledged nothing"
        );
    }
}
