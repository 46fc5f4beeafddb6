"""Tar archives to and from boxes (``CopyIn``/``CopyOut`` carry tar
streams), with the standard library's :mod:`tarfile`.

What a box sends is not trusted: :func:`extract` never writes outside the
destination: no absolute names, no ``..``, no hard link to anything outside
it, no write over a symlink or through one that leads out (symlinks are
made as links, wherever they point, and never followed out); it makes no device or FIFO, drops
setuid/setgid/sticky bits, and gives every file to the calling user.
"""

from __future__ import annotations

import copy
import io
import os
import posixpath
import tarfile
import tempfile
import time
from typing import IO, List, Optional

from .errors import BoxdError, InvalidArgument
from .types import FileEntry

__all__ = ["UnsafeArchive"]

#: Archive bytes kept in memory before spilling to a temporary file.
SPOOL_MAX = 16 << 20


class UnsafeArchive(BoxdError):
    """An archive from a box tried to leave its destination (or make a device)."""


def spool() -> "tempfile.SpooledTemporaryFile[bytes]":
    """A buffer for an archive: memory first, a private temporary file beyond
    :data:`SPOOL_MAX`."""
    return tempfile.SpooledTemporaryFile(max_size=SPOOL_MAX)


def one_file(name: str, data: bytes, mode: int) -> bytes:
    """A tar archive of one regular file ``name`` holding ``data``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode & 0o7777
        info.mtime = int(time.time())
        info.uid = 0
        info.gid = 0
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pack(host_path: str, out: IO[bytes]) -> None:
    """Writes a tar archive of ``host_path`` (a file or a tree; symlinks kept
    as links, never followed) to ``out``, its top entry named after
    ``host_path``'s last component."""
    path = os.path.abspath(host_path)
    name = os.path.basename(path.rstrip("/")) or "."
    if not os.path.lexists(path):
        raise FileNotFoundError(f"no such file or directory: {host_path}")
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, dereference=False) as tar:
        tar.add(path, arcname=name, recursive=True)


def _archive(src: IO[bytes]) -> tarfile.TarFile:
    src.seek(0)
    try:
        return tarfile.open(fileobj=src, mode="r:")
    except tarfile.TarError as e:
        raise UnsafeArchive(f"boxd sent an archive that is not tar: {e}") from None


def read_one(src: IO[bytes], path: str) -> bytes:
    """The contents of the one regular file in an archive ``CopyOut`` sent
    for ``path``."""
    with _archive(src) as tar:
        for member in tar:
            if member.isdir():
                raise InvalidArgument(f"{path} is a directory, not a file")
            if not member.isfile():
                raise InvalidArgument(f"{path} is not a regular file")
            f = tar.extractfile(member)
            assert f is not None  # a regular file always has contents
            return f.read()
    raise InvalidArgument(f"boxd sent no file for {path}")


def _kind(m: tarfile.TarInfo) -> str:
    if m.isdir():
        return "dir"
    if m.issym():
        return "symlink"
    if m.isfile():
        return "file"
    return "other"


def entries(src: IO[bytes]) -> List[FileEntry]:
    """The top-level entries of a directory's archive (``CopyOut`` of
    ``DIR/.``), sorted by name."""
    out = []
    with _archive(src) as tar:
        for m in tar:
            name = posixpath.normpath(m.name)
            if name in (".", "") or "/" in name.lstrip("./"):
                continue
            out.append(
                FileEntry(
                    name=name.lstrip("./") if name.startswith("./") else name,
                    kind=_kind(m),
                    size=m.size,
                    mode=m.mode & 0o7777,
                    mtime=int(m.mtime),
                    link_target=m.linkname if m.issym() else "",
                )
            )
    return sorted(out, key=lambda e: e.name)


def _within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _safe(member: tarfile.TarInfo, dest: str) -> Optional[tarfile.TarInfo]:
    """The member to extract into ``dest`` (owned by this user, no
    setuid/setgid/sticky bits), ``None`` to skip it (devices, FIFOs), or
    :class:`UnsafeArchive` when it would reach outside ``dest``."""
    name = member.name
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        raise UnsafeArchive(f"the box sent an entry outside the destination: {name!r}")
    target = os.path.join(dest, name)
    # Symlinks made by earlier entries are resolved: no write through one
    # that leads out.
    if not _within(dest, os.path.realpath(os.path.dirname(target))):
        raise UnsafeArchive(f"the box sent an entry through a link out of the destination: {name!r}")
    if os.path.islink(target):
        raise UnsafeArchive(f"the box sent an entry over a symlink: {name!r}")
    if member.islnk():
        link = member.linkname
        if (
            link.startswith("/")
            or ".." in link.split("/")
            or not _within(dest, os.path.realpath(os.path.join(dest, link)))
        ):
            raise UnsafeArchive(
                f"the box sent a hard link leading out of the destination: {name!r} -> {link!r}"
            )
    elif not (member.isfile() or member.isdir() or member.issym()):
        return None
    mode = member.mode & 0o777 | (0o700 if member.isdir() else 0)
    safe = copy.copy(member)
    safe.uid, safe.gid, safe.uname, safe.gname, safe.mode = os.geteuid(), os.getegid(), "", "", mode
    return safe


def extract(src: IO[bytes], dest: str) -> List[str]:
    """Unpacks an archive from a box into host directory ``dest`` (which must
    exist), safely (see the module's docstring). Returns the top-level names
    written."""
    root = os.path.realpath(dest)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"not a directory: {dest}")
    tops: List[str] = []
    with _archive(src) as tar:
        for member in tar:
            safe = _safe(member, root)
            if safe is None:
                continue
            kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "data_filter") else {}
            tar.extract(safe, root, **kwargs)  # type: ignore[arg-type]
            top = safe.name.split("/")[0]
            if top not in tops:
                tops.append(top)
    return tops
