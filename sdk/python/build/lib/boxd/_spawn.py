"""Starting boxd when nothing answers, as ``boxd-client`` does
(``client/src/spawn.rs``): ``boxd --socket S --home H``, detached in a
session of its own, its stderr appended to ``HOME/logs/boxd.stderr``;
waiting until it answers, and reporting at once, with the last line it
logged, a daemon that exits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from typing import Optional

from . import trust
from .errors import DaemonNotRunning, DaemonStartFailed
from .paths import Paths, lock_holder

#: How long to wait for a freshly started daemon to answer (s).
START_TIMEOUT = 20.0


def _last_line(log: str) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - 65536, 0))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _answering(socket: str) -> Optional[str]:
    """The resolved socket when a trusted daemon answers there, else None."""
    try:
        return trust.check(socket)
    except DaemonNotRunning:
        return None


def start_daemon(paths: Paths, boxd_bin: Optional[str]) -> str:
    """Starts boxd for ``paths`` unless one holds the home already, waits
    until it answers, and returns its (checked) socket."""
    # A daemon of this home serving another socket: go there when the
    # socket was only derived, else say so.
    holder = lock_holder(paths.home)
    serving = holder[1] if holder is not None else None
    if serving is not None and serving != paths.socket:
        if paths.socket_is_default:
            found = _answering(serving)
            if found is not None:
                return found
        raise DaemonStartFailed(
            f"boxd (pid {holder[0] if holder else '?'}) serves {paths.home} on {serving}, not on {paths.socket}; "
            f"connect to {serving} (or leave the socket out)"
        )
    binary = boxd_bin or shutil.which("boxd")
    if binary is None:
        raise DaemonNotRunning(
            f"boxd is not running (nothing answers on {paths.socket}) and no boxd binary is "
            "on PATH to start: install boxd, or pass boxd_bin="
        )
    logs = os.path.join(paths.home, "logs")
    old = os.umask(0o077)
    try:
        os.makedirs(logs, mode=0o700, exist_ok=True)
        log = os.path.join(logs, "boxd.stderr")
        stderr = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    finally:
        os.umask(old)
    try:
        child = subprocess.Popen(
            [binary, "--socket", paths.socket, "--home", paths.home],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        raise DaemonStartFailed(f"cannot run {binary}: {e}") from None
    finally:
        os.close(stderr)
    deadline = time.monotonic() + START_TIMEOUT
    ours_exited = False
    while time.monotonic() < deadline:
        found = _answering(paths.socket)
        if found is not None:
            # Reap our child whenever it exits (it lost a race, or lives on).
            threading.Thread(target=child.wait, daemon=True).start()
            return found
        if not ours_exited and child.poll() is not None:
            ours_exited = True
            # Another boxd holding the home means another client won the
            # race: wait for that one. Otherwise ours failed.
            if lock_holder(paths.home) is None:
                raise DaemonStartFailed(
                    f"boxd exited (status {child.returncode}): {_last_line(log)} (log: {log})"
                )
        time.sleep(0.02)
    raise DaemonStartFailed(f"boxd did not answer within {START_TIMEOUT:.0f} s; see {log}")
