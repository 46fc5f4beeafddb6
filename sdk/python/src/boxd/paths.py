"""Where the daemon's socket and home are, found as boxd and ``boxctl`` find
them (``proto/src/paths.rs``):

- the socket: the one given, else ``$BOXD_SOCKET``; else, when ``$BOXD_HOME``
  is set, ``HOME/run/boxd.sock``; else ``$XDG_RUNTIME_DIR/boxd/boxd.sock``;
  else ``$TMPDIR/boxd-UID/boxd.sock`` when the temporary directory is this
  user's alone (macOS); else ``HOME/run/boxd.sock``. Never a shared
  directory such as ``/tmp``. A derived socket follows the home's lock to
  the socket its daemon actually serves.
- the home: the one given, else ``$BOXD_HOME``, else the platform data
  directory (``$XDG_DATA_HOME/boxd``, ``~/.local/share/boxd``,
  ``~/Library/Application Support/boxd``).
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional, Tuple, Union

__all__ = ["Paths", "resolve", "MAX_SOCKET_PATH"]

#: Longest socket path the platform accepts (``sun_path`` less the NUL).
MAX_SOCKET_PATH = 103 if sys.platform == "darwin" else 107

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Paths:
    """The daemon's socket and state directory."""

    socket: str
    home: str
    #: No argument or ``BOXD_SOCKET`` named the socket: it was derived.
    socket_is_default: bool


def _env(var: str) -> Optional[str]:
    value = os.environ.get(var)
    return value if value else None


def _default_home() -> str:
    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Application Support", "boxd")
    data = _env("XDG_DATA_HOME")
    if data is None or not os.path.isabs(data):
        data = os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "boxd")


def _private_to_me(directory: str) -> bool:
    try:
        st = os.stat(directory)
    except OSError:
        return False

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0


def _runtime_dir() -> Optional[str]:
    if sys.platform == "darwin":
        return None
    runtime = _env("XDG_RUNTIME_DIR")
    if runtime is None or not os.path.isabs(runtime):
        return None
    return os.path.join(runtime, "boxd")


def lock_holder(home: str) -> Optional[Tuple[str, Optional[str]]]:
    """``(pid, socket)`` of the daemon holding ``home``'s lock, when one holds
    it (a record left by a daemon that died is not believed); ``socket`` is
    None when it was not written (yet)."""
    try:
        fd = os.open(os.path.join(home, "boxd.lock"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return None  # nobody holds it
        except OSError:
            pass
        lines = os.read(fd, 4096).decode("utf-8", "replace").splitlines()
    finally:
        os.close(fd)
    pid = lines[0].strip() if lines else ""
    socket = lines[1].strip() if len(lines) >= 2 and lines[1].strip().startswith("/") else None
    return pid, socket


def resolve(socket: Optional[PathLike] = None, home: Optional[PathLike] = None) -> Paths:
    """Resolves the socket and home as described in this module's docstring.

    Raises :class:`ValueError` for a socket path longer than the platform
    allows.
    """
    sock = os.fspath(socket) if socket is not None else _env("BOXD_SOCKET")
    home_override = os.fspath(home) if home is not None else _env("BOXD_HOME")
    the_home = os.path.abspath(home_override) if home_override else _default_home()
    socket_is_default = sock is None
    if sock is not None:
        the_socket = os.path.abspath(sock)
    elif home_override:
        the_socket = os.path.join(the_home, "run", "boxd.sock")
    else:
        runtime = _runtime_dir()
        tmp = tempfile.gettempdir()
        if runtime is not None:
            the_socket = os.path.join(runtime, "boxd.sock")
        elif _private_to_me(tmp):
            the_socket = os.path.join(tmp, f"boxd-{os.geteuid()}", "boxd.sock")
        else:
            the_socket = os.path.join(the_home, "run", "boxd.sock")
        holder = lock_holder(the_home)
        if holder is not None and holder[1] is not None:
            the_socket = holder[1]
    if len(os.fsencode(the_socket)) > MAX_SOCKET_PATH:
        raise ValueError(
            f"socket path is {len(os.fsencode(the_socket))} bytes, longer than the "
            f"{MAX_SOCKET_PATH} this platform allows: {the_socket}; pass a shorter socket "
            "(or BOXD_SOCKET)"
        )
    return Paths(socket=the_socket, home=the_home, socket_is_default=socket_is_default)
