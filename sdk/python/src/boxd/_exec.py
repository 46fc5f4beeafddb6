"""The bookkeeping of a resumable exec, free of any I/O, as in the Rust
client (``client/src/exec/acks.rs``, ``uplink.rs``):

- :class:`Position`: where the caller is in each output stream, what was
  acknowledged, and what a replay after a reattach repeats;
- :class:`StdinLog`: stdin numbered as the daemon numbers it, the last
  :data:`STDIN_KEPT` bytes sent kept to resend after a reattach.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from .errors import DataLoss
from .types import Stream

#: Acknowledge once this many output bytes were taken since the last
#: acknowledgement (well within the daemon's 1 MiB window).
ACK_EVERY = 64 << 10
#: Stdin bytes kept after they were sent, for a reattached call.
STDIN_KEPT = 4 << 20
#: Stdin bytes in flight beyond what the daemon says the command was given.
STDIN_WINDOW = 1 << 20
#: The most stdin one message carries.
STDIN_CHUNK = 256 << 10


@dataclass(frozen=True)
class Gap:
    """Output lost while reattaching: bytes ``start..end`` of ``stream`` are
    no longer kept by the daemon and will never arrive."""

    stream: Stream
    start: int
    end: int


class Position:
    """The caller's position in an exec's output."""

    def __init__(self, stdout: int, stderr: int) -> None:
        self.at: Dict[Stream, int] = {Stream.STDOUT: stdout, Stream.STDERR: stderr}
        self._acked = dict(self.at)
        self._skip = {Stream.STDOUT: 0, Stream.STDERR: 0}

    def take(self, stream: Stream, data: bytes) -> Tuple[bytes, Optional[Tuple[int, int]]]:
        """A chunk arrived: returns the part the caller does not have yet,
        and offsets to acknowledge when :data:`ACK_EVERY` bytes were taken
        since the last acknowledgement."""
        dropped = min(self._skip[stream], len(data))
        self._skip[stream] -= dropped
        data = data[dropped:]
        self.at[stream] += len(data)
        taken = sum(self.at.values()) - sum(self._acked.values())
        if taken >= ACK_EVERY:
            self._acked = dict(self.at)
            return data, (self.at[Stream.STDOUT], self.at[Stream.STDERR])
        return data, None

    def resume(self, stdout: int, stderr: int) -> List[Gap]:
        """Reattached from :attr:`at`; the daemon's output begins at these
        offsets. Later ones are gaps (returned; the position jumps over
        them); earlier ones are a replay, dropped by :meth:`take`."""
        gaps = []
        for stream, theirs in ((Stream.STDOUT, stdout), (Stream.STDERR, stderr)):
            ours = self.at[stream]
            if theirs > ours:
                gaps.append(Gap(stream, ours, theirs))
                self.at[stream] = theirs
                self._skip[stream] = 0
            else:
                self._skip[stream] = ours - theirs
        self._acked = dict(self.at)
        return gaps


class StdinLog:
    """Stdin as numbered bytes: those sent to the current call (the last
    ``keep`` of them kept), then those not sent yet.

    Invariants: ``start <= sent <= end``; the chunks hold exactly the bytes
    ``start..end``, none empty.
    """

    def __init__(self, at: int, keep: int = STDIN_KEPT) -> None:
        self._chunks: List[bytes] = []
        self.start = at
        self.sent = at
        self.end = at
        self._keep = keep

    def push(self, data: bytes) -> None:
        """Appends bytes to send."""
        if data:
            self._chunks.append(data)
            self.end += len(data)

    def next_unsent(self) -> Optional[bytes]:
        """The next bytes to send (from ``sent`` to the end of their chunk)."""
        at = self.start
        for chunk in self._chunks:
            if self.sent < at + len(chunk):
                return chunk[self.sent - at :]
            at += len(chunk)
        return None

    def mark_sent(self, n: int) -> None:
        """``n`` more bytes went out; forgets what is now more than ``keep``
        behind."""
        self.sent = min(self.sent + n, self.end)
        keep_from = max(self.sent - self._keep, 0)
        while self._chunks and self.start < keep_from:
            front = self._chunks[0]
            drop = min(keep_from - self.start, len(front))
            if drop == len(front):
                self._chunks.pop(0)
            else:
                self._chunks[0] = front[drop:]
            self.start += drop

    def rewind(self, at: int) -> int:
        """A new call, whose command was given ``at`` bytes: send from there
        again. Returns how many bytes that resends. Raises :class:`DataLoss`
        when bytes from ``at`` on are no longer kept."""
        if at < self.start:
            raise DataLoss(
                f"the command was given {at} bytes of stdin before boxd went away, and only "
                f"bytes from {self.start} on are still kept here: {self.start - at} bytes of "
                "stdin are lost"
            )
        if at > self.sent:
            # The daemon had stdin from elsewhere too (SendInput): renumber.
            shift = at - self.sent
            self.start += shift
            self.sent += shift
            self.end += shift
            return 0
        resent = self.sent - at
        self.sent = at
        return resent
