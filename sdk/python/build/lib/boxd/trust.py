"""Whether a socket may be trusted with this user's requests (and the
secrets some of them carry), checked as ``boxd-client`` checks it
(``fs/src/trust.rs``) before anything is sent:

- every directory looked into on the way (symlinks resolved one component
  at a time, as the kernel would) belongs to this user or root and, when
  others may write it, is sticky (like ``/tmp``);
- every symlink followed belongs to this user or root;
- the socket's own directory belongs to this user and is closed to group
  and others (0700);
- the socket belongs to this user and is not writable by group or others;
- the process answering on it runs as this user (``SO_PEERCRED`` of a probe
  connection; on macOS root too, since launchd listens for a LaunchAgent).

What this cannot cover: grpcio dials the socket itself, after the probe.
Someone who can swap the socket between the probe and grpcio's connection
could answer instead of boxd; the checks above are what makes such a swap
impossible for other users (only this user or root can change the path).
The daemon checks its side too: it refuses every request whose peer is
not its own uid (``PERMISSION_DENIED``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket as _socket
import stat
import struct
import sys
from typing import List, Tuple

from .errors import DaemonNotRunning, UntrustedSocket

__all__ = ["check_socket", "probe_peer", "check"]

_MAX_LINKS = 40
_TAKE = (
    "whoever owns it can put a socket of their own in boxd's place and read every "
    "request and secret sent to it"
)
_FIX = "set XDG_RUNTIME_DIR, BOXD_SOCKET or the socket argument to a directory of your own"


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _untrusted(message: str, other_uid: bool = False, fix: bool = True) -> UntrustedSocket:
    me = os.geteuid()
    if other_uid and me == 0:
        message += (
            "; root does not use a socket another user controls (that user's boxd would "
            "refuse root anyway): run this as that user, or give root a socket of its own "
            "(BOXD_SOCKET)"
        )
    elif fix:
        message += f"; {_FIX}"
    return UntrustedSocket(message)


def _me_or_root() -> str:
    me = os.geteuid()
    return _who(me) if me == 0 else f"{_who(me)} or root"


def _check_passage(path: str, st: os.stat_result) -> None:
    if not stat.S_ISDIR(st.st_mode):
        raise _untrusted(f"{path} is not a directory")
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        raise _untrusted(
            f"{path}, a directory on the socket's path, belongs to {_who(st.st_uid)}, "
            f"not to {_me_or_root()}: {_TAKE}",
            other_uid=True,
        )
    perms = stat.S_IMODE(st.st_mode)
    if perms & 0o022 and not perms & stat.S_ISVTX:
        raise _untrusted(
            f"{path}, a directory on the socket's path, is writable by other users and "
            f"not sticky (mode {perms:04o}): another user could replace what is in it "
            "with a socket of their own"
        )


def _check_symlink(path: str, st: os.stat_result) -> None:
    if st.st_uid not in (os.geteuid(), 0):
        raise _untrusted(
            f"{path}, a symlink on the socket's path, belongs to {_who(st.st_uid)}, "
            f"not to {_me_or_root()}: {_TAKE}",
            other_uid=True,
        )


def _socket_dir_problem(path: str, st: os.stat_result) -> Tuple[bool, str]:
    """(is it only too open, message), or raises nothing: returns ``(False, "")``
    when the directory is fine."""
    me = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        return False, f"{path} is not a directory"
    if st.st_uid != me:
        return False, (
            f"the socket's directory {path} belongs to {_who(st.st_uid)}, not to {_who(me)}: {_TAKE}"
        )
    perms = stat.S_IMODE(st.st_mode)
    if perms & 0o077:
        return True, (
            f"the socket's directory {path} is open to other users (mode {perms:04o}): "
            f"another user could put a socket in boxd's place; make it private "
            f"(`chmod 700 {path}`)"
        )
    return False, ""


def _check_socket_dir(path: str, st: os.stat_result) -> None:
    only_open, problem = _socket_dir_problem(path, st)
    if problem:
        raise _untrusted(problem, other_uid=not only_open and st.st_uid != os.geteuid())


def _check_socket_file(path: str, st: os.stat_result) -> None:
    me = os.geteuid()
    if not stat.S_ISSOCK(st.st_mode):
        raise _untrusted(f"{path} is not a socket")
    if st.st_uid != me:
        raise _untrusted(
            f"the socket {path} belongs to {_who(st.st_uid)}, not to {_who(me)}: {_TAKE}",
            other_uid=True,
        )
    perms = stat.S_IMODE(st.st_mode)
    if perms & 0o022:
        raise _untrusted(
            f"the socket {path} is writable by other users (mode {perms:04o}); boxd makes "
            f"it 0600: restart boxd or `chmod 600 {path}`"
        )


def _parts(path: str) -> List[str]:
    return [p for p in path.split("/") if p and p != "."]


def _resolve_dir(path: str) -> Tuple[str, os.stat_result]:
    """Resolves directory ``path`` one component at a time, checking every
    directory looked into and every symlink followed. Returns the resolved
    path and its ``lstat``."""
    todo = _parts(os.path.abspath(path))
    at = "/"
    at_stat = os.lstat(at)
    links = 0
    while todo:
        name = todo.pop(0)
        if name == "..":
            at = os.path.dirname(at) or "/"
            at_stat = os.lstat(at)
            continue
        _check_passage(at, at_stat)
        nxt = os.path.join(at, name)
        st = os.lstat(nxt)
        if stat.S_ISLNK(st.st_mode):
            _check_symlink(nxt, st)
            links += 1
            if links > _MAX_LINKS:
                raise _untrusted(f"{nxt}: too many levels of symlinks")
            target = os.readlink(nxt)
            if target.startswith("/"):
                at = "/"
                at_stat = os.lstat(at)
            todo[:0] = _parts(target)
            continue
        at, at_stat = nxt, st
    return at, at_stat


def check_socket(path: str) -> str:
    """Checks the path to the socket, its directory and the socket itself
    (see the module's docstring); returns the socket's resolved path.

    Raises :class:`UntrustedSocket`, or :class:`DaemonNotRunning` when there
    is no socket (once the directories on the way passed and its directory,
    if any, is this user's).
    """
    target = os.path.abspath(path)
    for _ in range(_MAX_LINKS + 1):
        parent, name = os.path.split(target)
        if not name:
            raise _untrusted(f"{target} is not a socket")
        try:
            directory, dir_stat = _resolve_dir(parent)
        except FileNotFoundError:
            raise DaemonNotRunning(_not_running(path)) from None
        sock = os.path.join(directory, name)
        try:
            st = os.lstat(sock)
        except FileNotFoundError:
            only_open, problem = _socket_dir_problem(directory, dir_stat)
            if problem and not only_open:
                raise _untrusted(problem, other_uid=stat.S_ISDIR(dir_stat.st_mode)) from None
            raise DaemonNotRunning(_not_running(path)) from None
        if not stat.S_ISLNK(st.st_mode):
            _check_socket_dir(directory, dir_stat)
            _check_socket_file(sock, st)
            return sock
        # A link at the socket's name: its directory is only on the way.
        _check_passage(directory, dir_stat)
        _check_symlink(sock, st)
        target = os.path.join(directory, os.readlink(sock))
    raise _untrusted(f"{path}: too many levels of symlinks")


def _not_running(path: str) -> str:
    return f"boxd is not running (nothing answers on {path}); start it with `boxctl daemon start`"


def _peer_uid(sock: _socket.socket) -> int:
    if hasattr(_socket, "SO_PEERCRED"):
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    uid = ctypes.c_uint32()
    gid = ctypes.c_uint32()
    if libc.getpeereid(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(uid.value)


def probe_peer(path: str) -> None:
    """Connects to ``path`` once and checks that the process answering runs
    as this user (``SO_PEERCRED``). Raises :class:`UntrustedSocket` or
    :class:`DaemonNotRunning`."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(5)
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise DaemonNotRunning(_not_running(path)) from None
        except OSError as e:
            raise DaemonNotRunning(f"cannot connect to boxd at {path}: {e}") from None
        peer = _peer_uid(s)
    finally:
        s.close()
    me = os.geteuid()
    if peer != me and not (sys.platform == "darwin" and peer == 0):
        raise _untrusted(
            f"the process answering on {path} runs as {_who(peer)}, not as {_who(me)}: "
            "another user's process must not receive this user's requests",
            other_uid=True,
        )


def check(path: str) -> str:
    """:func:`check_socket`, then :func:`probe_peer` on the resolved path;
    returns the resolved path (the one to dial)."""
    resolved = check_socket(path)
    probe_peer(resolved)
    return resolved
