//! Where a client is in an exec's output, and when to tell the daemon.
//!
//! Invariants:
//! - an acknowledgement names only bytes [`Position::take`] handed to the
//!   caller (or that the daemon said it no longer keeps: a gap);
//! - at most one acknowledgement per [`ACK_EVERY`] bytes taken, plus one
//!   per wait for output with something unacknowledged ([`Position::idle`]),
//!   so a caller that takes everything never leaves the daemon waiting on
//!   its window, and one whose output and exit arrive together sends none.

use boxd_proto::bytes::Bytes;
use boxd_proto::v1;

/// Acknowledge as soon as this many bytes (both streams) were taken since
/// the last acknowledgement: well within the daemon's 1 MiB window.
pub const ACK_EVERY: u64 = 64 << 10;

/// One of an exec's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl OutputStream {
    pub fn name(self) -> &'static str {
        match self {
            OutputStream::Stdout => "stdout",
            OutputStream::Stderr => "stderr",
        }
    }
}

/// Bytes of stdout and of stderr: a position in an exec's output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputOffsets {
    pub stdout: u64,
    pub stderr: u64,
}

impl OutputOffsets {
    fn get(&self, s: OutputStream) -> u64 {
        match s {
            OutputStream::Stdout => self.stdout,
            OutputStream::Stderr => self.stderr,
        }
    }

    fn get_mut(&mut self, s: OutputStream) -> &mut u64 {
        match s {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        }
    }

    fn total(&self) -> u64 {
        self.stdout + self.stderr
    }

    fn ack(&self) -> v1::ExecAck {
        v1::ExecAck {
            stdout_offset: self.stdout,
            stderr_offset: self.stderr,
        }
    }
}

/// Output lost while reattaching: the daemon keeps `stream` only from `to`
/// on; bytes `from..to` will never arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub stream: OutputStream,
    pub from: u64,
    pub to: u64,
}

/// The client's position in an exec's output: what it took, what it
/// acknowledged, and what a replay will repeat.
#[derive(Debug, Clone, Default)]
pub struct Position {
    /// The offset of the next byte the caller gets, per stream.
    at: OutputOffsets,
    /// What the daemon was last told (or, at attach, asked for).
    acked: OutputOffsets,
    /// Replayed bytes the caller already has: dropped as they arrive.
    skip: OutputOffsets,
}

impl Position {
    /// Output begins at `at` (`ExecStarted`'s offsets): nothing to
    /// acknowledge before it.
    pub fn new(at: OutputOffsets) -> Position {
        Position {
            at,
            acked: at,
            skip: OutputOffsets::default(),
        }
    }

    /// Where the caller is: the offsets to reattach from.
    pub fn at(&self) -> OutputOffsets {
        self.at
    }

    /// A chunk of `stream` arrived and is about to be handed to the caller.
    /// Returns the part the caller does not have yet (empty when it is all
    /// replay), and an acknowledgement to send when [`ACK_EVERY`] bytes
    /// were taken since the last one.
    pub fn take(&mut self, stream: OutputStream, mut data: Bytes) -> (Bytes, Option<v1::ExecAck>) {
        let skip = self.skip.get_mut(stream);
        let dropped = (*skip).min(data.len() as u64);
        *skip -= dropped;
        data = data.slice(dropped as usize..);
        *self.at.get_mut(stream) += data.len() as u64;
        let ack = (self.at.total() - self.acked.total() >= ACK_EVERY).then(|| {
            self.acked = self.at;
            self.at.ack()
        });
        (data, ack)
    }

    /// The caller is about to wait for output: an acknowledgement of what
    /// it took, if any of it is not acknowledged yet.
    pub fn idle(&mut self) -> Option<v1::ExecAck> {
        (self.at != self.acked).then(|| {
            self.acked = self.at;
            self.at.ack()
        })
    }

    /// Reattached, asking for [`Position::at`]; the daemon's output begins
    /// at `from`. Later than ours: the bytes between are lost (returned,
    /// and the position jumps over them). Earlier: the replay up to ours is
    /// dropped by [`Position::take`].
    pub fn resume(&mut self, from: OutputOffsets) -> Vec<Gap> {
        let mut gaps = Vec::new();
        for s in [OutputStream::Stdout, OutputStream::Stderr] {
            let (ours, theirs) = (self.at.get(s), from.get(s));
            if theirs > ours {
                gaps.push(Gap {
                    stream: s,
                    from: ours,
                    to: theirs,
                });
                *self.at.get_mut(s) = theirs;
                *self.skip.get_mut(s) = 0;
            } else {
                *self.skip.get_mut(s) = ours - theirs;
            }
        }
        // The attach told the daemon where we are.
        self.acked = self.at;
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OutputStream::{Stderr, Stdout};

    fn chunk(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    fn ack(stdout: u64, stderr: u64) -> v1::ExecAck {
        v1::ExecAck {
            stdout_offset: stdout,
            stderr_offset: stderr,
        }
    }

    #[test]
    fn acknowledges_every_64_kib_taken_across_both_streams() {
        let mut p = Position::default();
        let mut acks = Vec::new();
        for i in 0..20 {
            let s = if i % 4 == 3 { Stderr } else { Stdout };
            let (data, a) = p.take(s, chunk(10 << 10));
            assert_eq!(data.len(), 10 << 10);
            acks.extend(a);
        }
        // 200 KiB taken: an ack at 70, 140 KiB (7 chunks each), none more.
        assert_eq!(
            acks,
            vec![ack(60 << 10, 10 << 10), ack(110 << 10, 30 << 10)]
        );
        assert_eq!(
            p.at(),
            OutputOffsets {
                stdout: 150 << 10,
                stderr: 50 << 10
            }
        );
        // Waiting with 60 KiB unacknowledged: one ack, then none.
        assert_eq!(p.idle(), Some(ack(150 << 10, 50 << 10)));
        assert_eq!(p.idle(), None);
    }

    #[test]
    fn a_small_output_is_never_acknowledged_before_the_caller_waits() {
        let mut p = Position::default();
        let (_, a) = p.take(Stdout, chunk(6));
        assert_eq!(a, None);
        assert_eq!(p.idle(), Some(ack(6, 0)));
        // Nothing taken: nothing to say, even at a start past zero.
        let mut p = Position::new(OutputOffsets {
            stdout: 100,
            stderr: 7,
        });
        assert_eq!(p.idle(), None);
        let (_, a) = p.take(Stderr, chunk(ACK_EVERY as usize));
        assert_eq!(a, Some(ack(100, 7 + ACK_EVERY)));
    }

    #[test]
    fn a_later_start_on_reattach_is_a_gap_and_moves_the_position() {
        let mut p = Position::default();
        p.take(Stdout, chunk(100));
        p.take(Stderr, chunk(10));
        let gaps = p.resume(OutputOffsets {
            stdout: 250,
            stderr: 10,
        });
        assert_eq!(
            gaps,
            vec![Gap {
                stream: Stdout,
                from: 100,
                to: 250
            }]
        );
        assert_eq!(
            p.at(),
            OutputOffsets {
                stdout: 250,
                stderr: 10
            }
        );
        // The attach said where we are: nothing to acknowledge.
        assert_eq!(p.idle(), None);
        let (data, _) = p.take(Stdout, chunk(5));
        assert_eq!(data.len(), 5);
        assert_eq!(p.idle(), Some(ack(255, 10)));
    }

    #[test]
    fn an_earlier_start_on_reattach_drops_what_the_caller_has() {
        let mut p = Position::default();
        p.take(Stdout, Bytes::from_static(b"hello "));
        assert!(
            p.resume(OutputOffsets {
                stdout: 2,
                stderr: 0
            })
            .is_empty()
        );
        // "llo " again, then new bytes.
        let (data, _) = p.take(Stdout, Bytes::from_static(b"ll"));
        assert!(data.is_empty());
        let (data, _) = p.take(Stdout, Bytes::from_static(b"o world"));
        assert_eq!(&data[..], b"world");
        assert_eq!(p.at().stdout, 11);
        // Stderr had nothing to skip.
        let (data, _) = p.take(Stderr, Bytes::from_static(b"e"));
        assert_eq!(&data[..], b"e");
    }
}
