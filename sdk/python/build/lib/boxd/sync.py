"""The blocking client: :class:`Client`, :class:`Box`, :class:`Files`,
:class:`Process`.

Each runs the coroutines of :mod:`boxd.aio` on a private event loop in a
background thread (one per client), so the blocking and the asyncio API
are one implementation: the same requests, errors, trust checks and exec
reattachment. A client may be used from several threads at once.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import (
    Any,
    AsyncIterator,
    Coroutine,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from ._exec import Gap
from .aio import Argv, AsyncBox, AsyncClient, AsyncFiles, AsyncProcess, Data
from .types import (
    BoxEvent,
    BoxInfo,
    BoxStat,
    DaemonInfo,
    ExecExit,
    ExecInfo,
    ExecResult,
    FileEntry,
    IfExists,
    ImageInfo,
    Output,
    PortMapping,
    SnapshotInfo,
)

__all__ = ["Client", "Box", "Files", "Process", "connect"]

T = TypeVar("T")
PathArg = Union[str, "os.PathLike[str]"]


class _Loop:
    """An event loop on a thread of its own, running coroutines for callers
    on other threads."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="boxd-client", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking boxd.Client call from its own event loop: use boxd.AsyncClient")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        try:
            while True:
                try:
                    yield self.run(agen.__anext__())  # type: ignore[arg-type]
                except StopAsyncIteration:
                    return
        finally:
            aclose = getattr(agen, "aclose", None)
            if aclose is not None and self._loop.is_running():
                self.run(aclose())

    def stop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()


class Client:
    """A blocking connection to the user's boxd.

    ``Client()`` connects as :meth:`boxd.AsyncClient.connect` does (same
    arguments: socket, home, start, boxd_bin), checking the socket and the
    daemon first. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        socket: Optional[PathArg] = None,
        *,
        home: Optional[PathArg] = None,
        start: bool = True,
        boxd_bin: Optional[PathArg] = None,
    ) -> None:
        self._loop = _Loop()
        try:
            self._a = self._loop.run(AsyncClient.connect(socket, home=home, start=start, boxd_bin=boxd_bin))
        except BaseException:
            self._loop.stop()
            raise

    @property
    def socket(self) -> str:
        """The (resolved) socket this client talks to."""
        return self._a.socket

    @property
    def daemon(self) -> DaemonInfo:
        """What the daemon said of itself when connected."""
        return self._a.daemon

    def close(self) -> None:
        """Closes the connection and its event loop thread."""
        try:
            self._loop.run(self._a.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def describe(self) -> DaemonInfo:
        """See :meth:`boxd.AsyncClient.describe`."""
        return self._loop.run(self._a.describe())

    def box(self, name: str) -> "Box":
        """A handle on the box ``name`` (nothing is asked of boxd until used)."""
        return Box(self, self._a.box(name))

    def boxes(self) -> List[BoxInfo]:
        """Every box of this user."""
        return self._loop.run(self._a.boxes())

    def create_box(
        self, name: str, image: str, *, if_exists: IfExists = IfExists.REUSE, **options: Any
    ) -> "Box":
        """See :meth:`boxd.AsyncClient.create_box` for the options."""
        return Box(self, self._loop.run(self._a.create_box(name, image, if_exists=if_exists, **options)))

    def create_or_reuse(self, name: str, image: str, **options: Any) -> "Box":
        """See :meth:`boxd.AsyncClient.create_or_reuse`."""
        return Box(self, self._loop.run(self._a.create_or_reuse(name, image, **options)))

    def import_box(
        self, path: str, name: str, *, allow_net: Sequence[str] = (), ports: Sequence[Any] = ()
    ) -> "Box":
        """See :meth:`boxd.AsyncClient.import_box`."""
        return Box(self, self._loop.run(self._a.import_box(path, name, allow_net=allow_net, ports=ports)))

    def events(self, *, initial: bool = False, since_ms: int = 0, until_ms: int = 0) -> Iterator[BoxEvent]:
        """See :meth:`boxd.AsyncClient.events`; close the iterator to stop."""
        return self._loop.iterate(self._a.events(initial=initial, since_ms=since_ms, until_ms=until_ms))

    def stats(self, names: Sequence[str] = ()) -> List[BoxStat]:
        """See :meth:`boxd.AsyncClient.stats`."""
        return self._loop.run(self._a.stats(names))

    def execs(self, box: str = "") -> List[ExecInfo]:
        """See :meth:`boxd.AsyncClient.execs`."""
        return self._loop.run(self._a.execs(box))

    def send_input(self, exec_id: str, data: Data = b"", *, close: bool = False) -> None:
        """See :meth:`boxd.AsyncClient.send_input`."""
        self._loop.run(self._a.send_input(exec_id, data, close=close))

    def signal_exec(self, exec_id: str, signal: Union[int, str]) -> None:
        """See :meth:`boxd.AsyncClient.signal_exec`."""
        self._loop.run(self._a.signal_exec(exec_id, signal))

    def attach(self, exec_id: str) -> "Process":
        """See :meth:`boxd.AsyncClient.attach`."""
        return Process(self._loop, self._loop.run(self._a.attach(exec_id)))

    def images(self) -> List[ImageInfo]:
        """Every image in boxd's store."""
        return self._loop.run(self._a.images())

    def inspect_image(self, reference: str) -> ImageInfo:
        """See :meth:`boxd.AsyncClient.inspect_image`."""
        return self._loop.run(self._a.inspect_image(reference))

    def pull(self, reference: str, on_progress: Optional[Any] = None) -> ImageInfo:
        """See :meth:`boxd.AsyncClient.pull` (``on_progress`` runs on the
        client's loop thread)."""
        return self._loop.run(self._a.pull(reference, on_progress))

    def import_image(self, path: str, reference: str = "") -> ImageInfo:
        """See :meth:`boxd.AsyncClient.import_image`."""
        return self._loop.run(self._a.import_image(path, reference))

    def remove_image(self, reference: str, *, force: bool = False) -> Tuple[List[str], List[str]]:
        """See :meth:`boxd.AsyncClient.remove_image`."""
        return self._loop.run(self._a.remove_image(reference, force=force))


class Box:
    """A box by name (see :class:`boxd.AsyncBox`, whose methods these are)."""

    def __init__(self, client: Client, box: AsyncBox) -> None:
        self.client = client
        self._a = box
        self._loop = client._loop
        #: Its files: read, write, list, copy in and out.
        self.files = Files(self._loop, box.files)

    def __repr__(self) -> str:
        return f"Box({self.name!r})"

    @property
    def name(self) -> str:
        return self._a.name

    @property
    def created(self) -> Optional[bool]:
        """False when the create reused an existing box; None without a create."""
        return self._a.created

    @property
    def warnings(self) -> Tuple[str, ...]:
        """What the create did not apply, or warns of."""
        return self._a.warnings

    def inspect(self) -> BoxInfo:
        return self._loop.run(self._a.inspect())

    def start(self) -> BoxInfo:
        return self._loop.run(self._a.start())

    def stop(self, *, force: bool = False) -> BoxInfo:
        return self._loop.run(self._a.stop(force=force))

    def remove(self, *, force: bool = False) -> None:
        self._loop.run(self._a.remove(force=force))

    def update(
        self,
        *,
        cpus: Optional[int] = None,
        memory: Optional[int] = None,
        allow_net: Optional[Sequence[str]] = None,
    ) -> Tuple[BoxInfo, Tuple[str, ...]]:
        return self._loop.run(self._a.update(cpus=cpus, memory=memory, allow_net=allow_net))

    def ports(self) -> Tuple[PortMapping, ...]:
        return self._loop.run(self._a.ports())

    def stats(self) -> BoxStat:
        return self._loop.run(self._a.stats())

    def snapshot(self, name: str) -> SnapshotInfo:
        return self._loop.run(self._a.snapshot(name))

    def snapshots(self) -> List[SnapshotInfo]:
        return self._loop.run(self._a.snapshots())

    def restore(self, snapshot: str) -> BoxInfo:
        return self._loop.run(self._a.restore(snapshot))

    def remove_snapshot(self, snapshot: str) -> None:
        self._loop.run(self._a.remove_snapshot(snapshot))

    def clone(self, name: str) -> "Box":
        return Box(self.client, self._loop.run(self._a.clone(name)))

    def export(self, path: str) -> int:
        return self._loop.run(self._a.export(path))

    def spawn(self, argv: Argv, **options: Any) -> "Process":
        """See :meth:`boxd.AsyncBox.spawn` for the options."""
        return Process(self._loop, self._loop.run(self._a.spawn(argv, **options)))

    def exec(
        self,
        argv: Argv,
        *,
        stdin: Optional[Data] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: str = "",
        timeout: Optional[float] = None,
        user: str = "",
    ) -> ExecResult:
        """See :meth:`boxd.AsyncBox.exec`."""
        return self._loop.run(self._a.exec(argv, stdin=stdin, env=env, cwd=cwd, timeout=timeout, user=user))


for _name in (
    "inspect", "start", "stop", "remove", "update", "ports", "stats", "snapshot", "snapshots", "restore",
    "remove_snapshot", "clone", "export",
):  # fmt: skip
    getattr(Box, _name).__doc__ = getattr(AsyncBox, _name).__doc__


class Files:
    """A box's files (see :class:`boxd.AsyncFiles`)."""

    def __init__(self, loop: _Loop, files: AsyncFiles) -> None:
        self._loop = loop
        self._a = files

    def read(self, path: str) -> bytes:
        return self._loop.run(self._a.read(path))

    def write(self, path: str, data: Data, *, mode: int = 0o644) -> None:
        self._loop.run(self._a.write(path, data, mode=mode))

    def list(self, path: str) -> List[FileEntry]:
        return self._loop.run(self._a.list(path))

    def copy_in(self, host_path: str, box_path: str) -> int:
        return self._loop.run(self._a.copy_in(host_path, box_path))

    def copy_out(self, box_path: str, host_dir: str) -> List[str]:
        return self._loop.run(self._a.copy_out(box_path, host_dir))


for _name in ("read", "write", "list", "copy_in", "copy_out"):
    getattr(Files, _name).__doc__ = getattr(AsyncFiles, _name).__doc__


class Process:
    """A command running in a box (see :class:`boxd.AsyncProcess`): iterate
    for :class:`boxd.Output` chunks."""

    def __init__(self, loop: _Loop, process: AsyncProcess) -> None:
        self._loop = loop
        self._a = process

    def __repr__(self) -> str:
        return f"Process({list(self.argv)!r}, exec_id={self.exec_id!r})"

    @property
    def argv(self) -> Tuple[str, ...]:
        return self._a.argv

    @property
    def exec_id(self) -> str:
        return self._a.exec_id

    @property
    def exit(self) -> Optional[ExecExit]:
        """How it ended, once it has."""
        return self._a.exit

    @property
    def gaps(self) -> List[Gap]:
        """Output lost while reattached."""
        return self._a.gaps

    @property
    def reattached(self) -> int:
        """How many times it reattached after losing boxd."""
        return self._a.reattached

    def __iter__(self) -> Iterator[Output]:
        return self._loop.iterate(self._a)

    def write(self, data: Data) -> None:
        self._loop.run(self._a.write(data))

    def close_stdin(self) -> None:
        self._loop.run(self._a.close_stdin())

    def signal(self, signal: Union[int, str]) -> None:
        self._loop.run(self._a.signal(signal))

    def resize(self, rows: int, cols: int) -> None:
        self._loop.run(self._a.resize(rows, cols))

    def wait(self) -> ExecResult:
        return self._loop.run(self._a.wait())

    def communicate(self, stdin: Optional[Data] = None) -> ExecResult:
        return self._loop.run(self._a.communicate(stdin))

    def cancel(self) -> None:
        self._loop.run(self._a.cancel())


for _name in ("write", "close_stdin", "signal", "resize", "wait", "communicate", "cancel"):
    getattr(Process, _name).__doc__ = getattr(AsyncProcess, _name).__doc__


def connect(
    socket: Optional[PathArg] = None,
    *,
    home: Optional[PathArg] = None,
    start: bool = True,
    boxd_bin: Optional[PathArg] = None,
) -> Client:
    """A blocking :class:`Client` (see :meth:`boxd.AsyncClient.connect`)."""
    return Client(socket, home=home, start=start, boxd_bin=boxd_bin)
