//! A stderr that never blocks whoever writes to it.
//!
//! A process whose stdout is a protocol (`harness-box-exec`, `boxctl
//! jsonl`) is often spawned by a host that pipes its stderr and never
//! reads it: the official Python ACP SDK does. Once the pipe's 64 KiB are
//! full, a plain `write(2)` to stderr blocks, and with it whatever was
//! writing: a provisioning step's output, a log line, and so the protocol.
//!
//! [`Sink`] queues what is written (at most [`CAPACITY`] bytes) for one
//! thread that does the blocking writes; what does not fit is dropped
//! whole and counted, and once the reader catches up one line says how
//! much was lost and where the whole of it is kept ([`Sink::set_note`]).
//! [`Sink::flush`] waits a bounded time for the queue to drain, so a
//! process that exits loses nothing a reader would have taken.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The most bytes queued for stderr at once.
pub const CAPACITY: usize = 1 << 20;

/// A handle on this process's non-blocking stderr; clones share it.
#[derive(Clone)]
pub struct Sink {
    shared: Arc<Shared>,
}

struct Shared {
    capacity: usize,
    state: Mutex<State>,
    /// Signalled when there is something to write.
    ready: Condvar,
    /// Signalled when the queue is empty and nothing is being written.
    idle: Condvar,
}

#[derive(Default)]
struct State {
    chunks: VecDeque<Vec<u8>>,
    queued: usize,
    /// Bytes dropped since the last notice.
    dropped: u64,
    /// The writer thread is in a `write(2)`.
    writing: bool,
    /// The reader went away (EPIPE or another error): drop everything.
    broken: bool,
    /// Said after a drop count: where the whole output is kept.
    note: String,
}

impl Sink {
    /// The process's stderr (one writer thread per process, started on
    /// first use).
    pub fn global() -> Sink {
        static GLOBAL: OnceLock<Sink> = OnceLock::new();
        GLOBAL
            .get_or_init(|| Sink::over(Box::new(std::io::stderr()), CAPACITY))
            .clone()
    }

    /// A sink over any writer (tests give it a pipe), queueing at most
    /// `capacity` bytes.
    pub fn over(out: Box<dyn Write + Send>, capacity: usize) -> Sink {
        let shared = Arc::new(Shared {
            capacity,
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            idle: Condvar::new(),
        });
        let writer = shared.clone();
        std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || writer.run(out))
            .expect("start the stderr thread");
        Sink { shared }
    }

    /// Queues `bytes` (never blocks). Dropped whole, and counted, when the
    /// queue has no room for them.
    pub fn write(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut st = self.shared.lock();
        if st.broken {
            return;
        }
        if st.queued + bytes.len() > self.shared.capacity {
            st.dropped += bytes.len() as u64;
            return;
        }
        st.queued += bytes.len();
        st.chunks.push_back(bytes.to_vec());
        drop(st);
        self.shared.ready.notify_one();
    }

    /// What the drop notice adds: where the whole output can be read.
    pub fn set_note(&self, note: impl Into<String>) {
        self.shared.lock().note = note.into();
    }

    /// Bytes dropped and not yet reported.
    pub fn dropped(&self) -> u64 {
        self.shared.lock().dropped
    }

    /// Waits at most `within` for everything queued to be written.
    pub fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut st = self.shared.lock();
        while !st.broken && (st.writing || !st.chunks.is_empty()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st = match self.shared.idle.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(_) => return,
            };
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Sink::write(self, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The writer thread: takes what is queued and writes it, blocking as
    /// long as the reader makes it; then says what was dropped meanwhile.
    fn run(&self, mut out: Box<dyn Write + Send>) {
        loop {
            let mut st = self.lock();
            while st.chunks.is_empty() {
                st.writing = false;
                self.idle.notify_all();
                st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            let chunks: Vec<Vec<u8>> = st.chunks.drain(..).collect();
            st.writing = true;
            drop(st);
            let mut ok = true;
            for c in &chunks {
                if out.write_all(c).is_err() {
                    ok = false;
                    break;
                }
            }
            let mut st = self.lock();
            st.queued -= chunks.iter().map(Vec::len).sum::<usize>();
            if !ok {
                st.broken = true;
                st.chunks.clear();
                st.queued = 0;
                st.writing = false;
                self.idle.notify_all();
                return;
            }
            if st.dropped > 0 {
                let notice = drop_notice(st.dropped, &st.note);
                st.dropped = 0;
                drop(st);
                let _ = out.write_all(notice.as_bytes());
            }
            let _ = out.flush();
        }
    }
}

fn drop_notice(dropped: u64, note: &str) -> String {
    let sep = if note.is_empty() { "" } else { "; " };
    format!(
        "[{dropped} bytes of diagnostics were dropped: nothing read this stderr in time{sep}{note}]\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A pipe nobody reads until told to: a writer over it blocks once its
    /// kernel buffer is full, which the sink must never do.
    fn pipe() -> (std::fs::File, std::fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: pipe writes two new descriptors into a valid array; each
        // is owned by exactly one File.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    #[test]
    fn a_reader_that_never_reads_blocks_nothing_and_hears_the_count_later() {
        let (mut r, w) = pipe();
        let sink = Sink::over(Box::new(w), 4096);
        sink.set_note("see the box's logs");
        // 64 MiB offered to a pipe that holds 64 KiB and is never read:
        // a blocking write would hang the test here.
        let line = vec![b'x'; 1000];
        for _ in 0..65_536 {
            sink.write(&line);
        }
        assert!(sink.dropped() > 0, "most of it was dropped");
        sink.write(b"the end\n");
        // Now read it all: what was kept, then the notice.
        drop(sink);
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let deadline = Instant::now() + Duration::from_secs(20);
        while !String::from_utf8_lossy(&got).contains("see the box's logs]") {
            assert!(Instant::now() < deadline, "no notice");
            let n = r.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("bytes of diagnostics were dropped"), "{text}");
        assert!(got.len() < 1 << 20, "only what fit was kept");
    }

    #[test]
    fn flush_waits_for_a_reader_and_not_forever_without_one() {
        let (mut r, w) = pipe();
        let sink = Sink::over(Box::new(w), CAPACITY);
        sink.write(b"hello\n");
        sink.flush(Duration::from_secs(5));
        let mut buf = [0u8; 6];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello\n");
        // Fill the pipe and more; nobody reads: flush returns all the
        // same (waiting forever would hang the test here).
        for _ in 0..200 {
            sink.write(&[b'y'; 1024]);
        }
        sink.flush(Duration::from_millis(200));
        assert!(sink.shared.lock().queued > 0, "still queued: nobody read");
    }

    #[test]
    fn a_closed_reader_makes_writes_free() {
        let (r, w) = pipe();
        drop(r);
        let sink = Sink::over(Box::new(w), CAPACITY);
        for _ in 0..1000 {
            sink.write(b"nobody hears this\n");
        }
        sink.flush(Duration::from_secs(5));
        assert!(sink.shared.lock().broken);
    }
}
