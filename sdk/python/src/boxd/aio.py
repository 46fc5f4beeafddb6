"""The asyncio client (``grpc.aio``): the one implementation of the SDK.

:class:`boxd.Client` (blocking) runs these same coroutines on an event loop
of its own, so both behave alike in every respect (trust checks, errors,
reattaching execs).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import time
from typing import (
    IO,
    Any,
    AsyncIterator,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import grpc
import grpc.aio

from . import _files, _spawn, trust
from ._exec import STDIN_CHUNK, STDIN_WINDOW, Gap, Position, StdinLog
from ._gen import boxd_pb2 as pb
from ._gen import boxd_pb2_grpc as pb_grpc
from .errors import (
    BoxdError,
    DaemonNotRunning,
    FailedPrecondition,
    Internal,
    NotFound,
    ProtocolMismatch,
    Unavailable,
    from_rpc_error,
)
from .paths import resolve
from .types import (
    BoxEvent,
    BoxInfo,
    BoxSpec,
    BoxStat,
    CreateResult,
    DaemonInfo,
    ExecExit,
    ExecInfo,
    ExecResult,
    FileEntry,
    IfExists,
    ImageInfo,
    KeepId,
    MountArg,
    Output,
    PortArg,
    PortMapping,
    Secret,
    SnapshotInfo,
    Stream,
    _env_map,
    _mount,
    _port,
    _secret,
    _strs,
)

__all__ = ["AsyncClient", "AsyncBox", "AsyncFiles", "AsyncProcess", "PROTOCOL", "RECONNECT_WITHIN"]

#: The API version this SDK speaks.
PROTOCOL = "boxd.v1"
#: How long a streaming exec tries to reach boxd again after losing it (s).
RECONNECT_WITHIN = 30.0
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 0.5
#: A gRPC message is at most 16 MiB either way; a little room for framing.
_MAX_MESSAGE = (16 << 20) + (64 << 10)
#: Archive bytes per CopyIn message.
_COPY_CHUNK = 1 << 20

_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    # A channel that lost boxd tries again soon, not after grpc's 1-120 s.
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    # Not a network: one connection per channel, no proxy.
    ("grpc.enable_http_proxy", 0),
    ("grpc.use_local_subchannel_pool", 1),
]

#: What a stream's read returns once the stream ended (grpc.aio.EOF).
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]

T = TypeVar("T")
Argv = Sequence[str]
Data = Union[bytes, bytearray, memoryview, str]


def _bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"data is bytes or str, not {type(data).__name__}")


def _argv(argv: Argv) -> Tuple[str, List[str]]:
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv is a list of words, e.g. ['ls', '-l'] (for a shell line: ['sh', '-c', LINE])")
    words = [str(a) for a in argv]
    return (words[0], words[1:]) if words else ("", [])


def _timeout_ms(timeout: Optional[float]) -> int:
    if timeout is None:
        return 0
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout}")
    return max(1, int(timeout * 1000))


def _signal(sig: Union[int, str]) -> pb.Signal:
    if isinstance(sig, bool) or not isinstance(sig, (int, str)):
        raise TypeError(f"a signal is a number or a name ('TERM', 'SIGKILL'), not {sig!r}")
    return pb.Signal(signal=str(int(sig)) if isinstance(sig, int) else sig)


def _is_connection_loss(err: grpc.RpcError) -> bool:
    """Whether a failed call means the connection to boxd is gone (worth
    reattaching), rather than boxd refusing the request."""
    return err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN) or (
        err.code() == grpc.StatusCode.INTERNAL and "RST_STREAM" in (err.details() or "")
    )


class AsyncClient:
    """A connection to the user's boxd (see :meth:`connect`).

    Every call raises a :class:`boxd.BoxdError` subclass on failure. Use it
    as an async context manager, or call :meth:`close`.
    """

    def __init__(self, socket: str, channel: grpc.aio.Channel, info: DaemonInfo) -> None:
        self.socket = socket
        self._channel = channel
        self._stub = pb_grpc.BoxdStub(channel)
        self._retired: List[grpc.aio.Channel] = []
        self._redial_lock = asyncio.Lock()
        #: What the daemon said of itself when connected.
        self.daemon = info

    @classmethod
    async def connect(
        cls,
        socket: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        home: Optional[Union[str, "os.PathLike[str]"]] = None,
        start: bool = True,
        boxd_bin: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> "AsyncClient":
        """Connects to boxd, after checking that the socket and the process
        answering on it are this user's (:mod:`boxd.trust`), and that it
        speaks ``boxd.v1``.

        ``socket`` and ``home`` default as boxd's own (:mod:`boxd.paths`).
        With ``start`` (the default), a daemon is started when nothing
        answers: ``boxd --socket S --home H``, detached in a session of its
        own, its stderr appended to ``HOME/logs/boxd.stderr``; ``boxd_bin``
        is the binary (default: ``boxd`` on ``PATH``).

        Raises :class:`boxd.UntrustedSocket`, :class:`boxd.DaemonNotRunning`,
        :class:`boxd.DaemonStartFailed` or :class:`boxd.ProtocolMismatch`.
        """
        paths = resolve(socket, home)
        try:
            resolved = trust.check(paths.socket)
        except DaemonNotRunning:
            if not start:
                raise
            resolved = await asyncio.get_running_loop().run_in_executor(
                None, _spawn.start_daemon, paths, os.fspath(boxd_bin) if boxd_bin else None
            )
        channel = grpc.aio.insecure_channel(f"unix:{resolved}", options=_CHANNEL_OPTIONS)
        try:
            info = await cls._describe(channel, resolved)
        except BaseException:
            await channel.close(None)
            raise
        return cls(resolved, channel, info)

    @staticmethod
    async def _describe(channel: grpc.aio.Channel, socket: str) -> DaemonInfo:
        try:
            reply = await pb_grpc.BoxdStub(channel).Describe(pb.DescribeRequest(), timeout=20)
        except grpc.RpcError as e:
            err = from_rpc_error(e)
            if isinstance(err, Unavailable):
                raise DaemonNotRunning(f"boxd at {socket} does not answer: {e.details()}") from None
            raise type(err)(f"boxd at {socket} refused: {err.message}", err.code) from None
        info = DaemonInfo._of(reply)
        if info.protocol != PROTOCOL:
            raise ProtocolMismatch(
                f"boxd at {socket} speaks protocol {info.protocol!r}, this SDK speaks {PROTOCOL!r}; "
                "use a daemon and an SDK of the same release (restart boxd after an upgrade)"
            )
        return info

    async def close(self) -> None:
        """Closes the connection (calls under way are cancelled)."""
        for ch in [self._channel, *self._retired]:
            await ch.close(None)
        self._retired.clear()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # -- calls -------------------------------------------------------------

    def _checked_stub(self) -> pb_grpc.BoxdStub:
        """The stub, once the socket was checked again if the channel is not
        connected (it is about to dial: after a restart of boxd, say)."""
        if self._channel.get_state(try_to_connect=False) != grpc.ChannelConnectivity.READY:
            trust.check(self.socket)
        return self._stub

    async def _unary(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        stub = self._checked_stub()
        try:
            return await getattr(stub, method)(request, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    async def _stream(self, method: str, request: Any) -> AsyncIterator[Any]:
        stub = self._checked_stub()
        call = getattr(stub, method)(request)
        try:
            async for item in call:
                yield item
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()

    async def _redial(self, broken: grpc.aio.Channel) -> pb_grpc.BoxdStub:
        """A stub on a fresh channel, made once per broken one: the socket is
        checked again and the daemon asked what it is."""
        async with self._redial_lock:
            if self._channel is broken:
                resolved = trust.check(self.socket)
                channel = grpc.aio.insecure_channel(f"unix:{resolved}", options=_CHANNEL_OPTIONS)
                try:
                    self.daemon = await self._describe(channel, resolved)
                except BaseException:
                    await channel.close(None)
                    raise
                self._retired.append(self._channel)
                self._channel = channel
                self._stub = pb_grpc.BoxdStub(channel)
            return self._stub

    # -- the daemon ------------------------------------------------------------

    async def describe(self) -> DaemonInfo:
        """What the daemon is: versions, pid, engine, isolation, capabilities."""
        self.daemon = DaemonInfo._of(await self._unary("Describe", pb.DescribeRequest()))
        return self.daemon

    # -- boxes -----------------------------------------------------------------

    def box(self, name: str) -> "AsyncBox":
        """A handle on the box ``name`` (nothing is asked of boxd until used)."""
        return AsyncBox(self, name)

    async def boxes(self) -> List[BoxInfo]:
        """Every box of this user."""
        reply = await self._unary("ListBoxes", pb.ListBoxesRequest())
        return [BoxInfo._of(b) for b in reply.boxes]

    async def create_box(
        self,
        name: str,
        image: str,
        *,
        if_exists: IfExists = IfExists.REUSE,
        start: bool = True,
        mounts: Sequence[MountArg] = (),
        allow_net: Sequence[str] = (),
        secrets: Sequence[Union[Secret, Tuple[str, Sequence[str], str]]] = (),
        env: Optional[Mapping[str, str]] = None,
        working_dir: str = "",
        memory: Optional[int] = None,
        cpus: Optional[int] = None,
        disk_size_gb: Optional[int] = None,
        ports: Sequence[PortArg] = (),
        keep_id: Optional[KeepId] = None,
    ) -> "AsyncBox":
        """Creates the box ``name`` from ``image`` (a registry reference or an
        absolute OCI layout path), or reuses the one of that name as
        ``if_exists`` says, and (with ``start``, the default) starts it.

        ``memory`` is in MiB. ``mounts`` are :class:`boxd.Mount` or
        ``(host, guest[, read_only])``; ``ports`` box port numbers,
        ``"HOST:BOX"``, ``"IP:HOST:BOX"`` or :class:`boxd.PortMapping`;
        ``secrets`` :class:`boxd.Secret` or ``(name, hosts, value)``.
        The returned box's :attr:`AsyncBox.created` and
        :attr:`AsyncBox.warnings` say what the daemon did.
        """
        spec = BoxSpec(
            image=image,
            cpus=cpus,
            memory_mib=memory,
            disk_size_gb=disk_size_gb,
            mounts=tuple(_mount(m) for m in mounts),
            allow_net=tuple(_strs("allow_net", allow_net)),
            env=_env_map(env),
            working_dir=working_dir,
            secrets=tuple(_secret(s) for s in secrets),
            ports=tuple(_port(p) for p in ports),
            keep_id=keep_id,
        )
        if not isinstance(if_exists, IfExists):
            raise TypeError(f"if_exists is a boxd.IfExists, not {if_exists!r}")
        request = pb.CreateBoxRequest(name=name, spec=spec._pb(), if_exists=if_exists.value)
        result = CreateResult._of(await self._unary("CreateBox", request))
        box = AsyncBox(self, name, result)
        if start:
            await box.start()
        return box

    async def create_or_reuse(self, name: str, image: str, **options: Any) -> "AsyncBox":
        """:meth:`create_box` with ``if_exists=IfExists.REUSE``: an existing box
        of that name is reused as it is (differences are in ``warnings``)."""
        return await self.create_box(name, image, if_exists=IfExists.REUSE, **options)

    async def import_box(
        self, path: str, name: str, *, allow_net: Sequence[str] = (), ports: Sequence[PortArg] = ()
    ) -> "AsyncBox":
        """A new box ``name`` from an archive :meth:`AsyncBox.export` wrote."""
        request = pb.ImportBoxRequest(
            path=os.path.abspath(path),
            name=name,
            allow_net=_strs("allow_net", allow_net),
            ports=[_port(p)._pb() for p in ports],
        )
        return AsyncBox(self, name, CreateResult._of(await self._unary("ImportBox", request)))

    async def events(
        self, *, initial: bool = False, since_ms: int = 0, until_ms: int = 0
    ) -> AsyncIterator[BoxEvent]:
        """Box state changes as they happen, until the iterator is closed.

        ``initial``: first one event per box as it is now (``initial`` set),
        then one with ``synced`` set naming no box, then the live changes.
        ``since_ms``: first the kept events from then on (not with
        ``initial``); ``until_ms``: the stream ends there.
        """
        request = pb.WatchBoxesRequest(initial=initial, since_ms=since_ms, until_ms=until_ms)
        async for event in self._stream("WatchBoxes", request):
            yield BoxEvent._of(event)

    async def stats(self, names: Sequence[str] = ()) -> List[BoxStat]:
        """One sample of what the running boxes named (default: all) use."""
        request = pb.BoxStatsRequest(names=_strs("names", names), stream=False)
        out: List[BoxStat] = []
        async for reply in self._stream("BoxStats", request):
            out.extend(BoxStat._of(s) for s in reply.boxes)
        return out

    # -- execs by id -----------------------------------------------------------

    async def execs(self, box: str = "") -> List[ExecInfo]:
        """The execs boxd knows (of box ``box`` when given)."""
        reply = await self._unary("ListExecs", pb.ListExecsRequest(box_name=box))
        return [ExecInfo._of(e) for e in reply.execs]

    async def send_input(self, exec_id: str, data: Data = b"", *, close: bool = False) -> None:
        """Gives a running exec stdin (and with ``close``, its EOF). An exec
        that exited is :class:`boxd.FailedPrecondition`."""
        await self._unary("SendInput", pb.SendInputRequest(exec_id=exec_id, data=_bytes(data), close=close))

    async def signal_exec(self, exec_id: str, signal: Union[int, str]) -> None:
        """Sends a running exec a signal (a number or a name)."""
        await self._unary("SignalExec", pb.SignalExecRequest(exec_id=exec_id, signal=_signal(signal)))

    async def attach(self, exec_id: str) -> "AsyncProcess":
        """Attaches to a running exec from the start of the output boxd keeps."""
        attach = pb.ExecAttach(exec_id=exec_id, resumable=True)
        return await AsyncProcess._open(self, pb.ExecRequest(attach=attach), ())

    # -- images ----------------------------------------------------------------

    async def images(self) -> List[ImageInfo]:
        """Every image in boxd's store."""
        reply = await self._unary("ListImages", pb.ListImagesRequest())
        return [ImageInfo._of(i) for i in reply.images]

    async def inspect_image(self, reference: str) -> ImageInfo:
        """An image by reference or digest."""
        return ImageInfo._of(await self._unary("InspectImage", pb.InspectImageRequest(reference=reference)))

    async def pull(
        self, reference: str, on_progress: Optional[Callable[[int, int], None]] = None
    ) -> ImageInfo:
        """Pulls an image; ``on_progress(done_bytes, total_bytes)`` is called as
        it downloads."""
        async for event in self._stream("PullImage", pb.PullImageRequest(reference=reference)):
            kind = event.WhichOneof("event")
            if kind == "progress" and on_progress is not None:
                on_progress(event.progress.done_bytes, event.progress.total_bytes)
            elif kind == "done":
                return ImageInfo._of(event.done)
        raise Internal(f"boxd ended the pull of {reference} without a result")

    async def import_image(self, path: str, reference: str = "") -> ImageInfo:
        """Imports an OCI layout directory or a ``docker save`` tarball."""
        request = pb.ImportImageRequest(path=os.path.abspath(path), reference=reference)
        return ImageInfo._of(await self._unary("ImportImage", request))

    async def remove_image(self, reference: str, *, force: bool = False) -> Tuple[List[str], List[str]]:
        """Untags ``reference``; returns (untagged, deleted)."""
        reply = await self._unary("RemoveImage", pb.RemoveImageRequest(reference=reference, force=force))
        return list(reply.untagged), list(reply.deleted)


class AsyncBox:
    """A box by name. Every method asks boxd afresh."""

    def __init__(self, client: AsyncClient, name: str, created: Optional[CreateResult] = None) -> None:
        self.client = client
        self.name = name
        #: What the create that made this handle said (None otherwise).
        self.create_result = created
        #: Its files: read, write, list, copy in and out.
        self.files = AsyncFiles(self)

    def __repr__(self) -> str:
        return f"AsyncBox({self.name!r})"

    @property
    def created(self) -> Optional[bool]:
        """False when the create reused an existing box; None without a create."""
        return self.create_result.created if self.create_result else None

    @property
    def warnings(self) -> Tuple[str, ...]:
        """What the create did not apply (options of a reused box), or warns of."""
        return self.create_result.warnings if self.create_result else ()

    async def inspect(self) -> BoxInfo:
        """The box as boxd reports it now."""
        return BoxInfo._of(await self.client._unary("InspectBox", pb.InspectBoxRequest(name=self.name)))

    async def start(self) -> BoxInfo:
        """Starts the box (a running box is left as it is)."""
        reply = await self.client._unary("StartBox", pb.StartBoxRequest(name=self.name))
        return BoxInfo._of(reply.box)

    async def stop(self, *, force: bool = False) -> BoxInfo:
        """Stops the box: SIGTERM to its processes, then a kill (``force``: at once)."""
        reply = await self.client._unary("StopBox", pb.StopBoxRequest(name=self.name, force=force))
        return BoxInfo._of(reply.box)

    async def remove(self, *, force: bool = False) -> None:
        """Removes the box and its files (a running box needs ``force``)."""
        await self.client._unary("RemoveBox", pb.RemoveBoxRequest(name=self.name, force=force))

    async def update(
        self,
        *,
        cpus: Optional[int] = None,
        memory: Optional[int] = None,
        allow_net: Optional[Sequence[str]] = None,
    ) -> Tuple[BoxInfo, Tuple[str, ...]]:
        """Changes limits (``memory`` in MiB) or the allow-list (``[]``: no
        network); ``None`` keeps. Returns the box and what waits for its
        next start."""
        request = pb.UpdateBoxRequest(name=self.name)
        if cpus is not None:
            request.cpus = cpus
        if memory is not None:
            request.memory_mib = memory
        if allow_net is not None:
            request.allow_net.CopyFrom(pb.AllowNet(hosts=_strs("allow_net", allow_net)))
        reply = await self.client._unary("UpdateBox", request)
        return BoxInfo._of(reply.box), tuple(reply.warnings)

    async def ports(self) -> Tuple[PortMapping, ...]:
        """The ports published now, with actual host ports (empty unless running)."""
        return (await self.inspect()).ports

    async def stats(self) -> BoxStat:
        """One sample of what the box uses (it must run)."""
        samples = await self.client.stats([self.name])
        for s in samples:
            if s.name == self.name:
                return s
        raise FailedPrecondition(f"box {self.name!r} is not running: no stats")

    # -- snapshots, clones, archives ---------------------------------------------

    async def snapshot(self, name: str) -> SnapshotInfo:
        """Keeps the box's files as snapshot ``name``."""
        reply = await self.client._unary(
            "CreateSnapshot", pb.CreateSnapshotRequest(box_name=self.name, name=name)
        )
        return SnapshotInfo._of(reply)

    async def snapshots(self) -> List[SnapshotInfo]:
        """The box's snapshots, oldest first."""
        reply = await self.client._unary("ListSnapshots", pb.ListSnapshotsRequest(box_name=self.name))
        return [SnapshotInfo._of(s) for s in reply.snapshots]

    async def restore(self, snapshot: str) -> BoxInfo:
        """Puts the (stopped) box's files back as the snapshot holds them."""
        request = pb.RestoreSnapshotRequest(box_name=self.name, name=snapshot)
        return BoxInfo._of((await self.client._unary("RestoreSnapshot", request)).box)

    async def remove_snapshot(self, snapshot: str) -> None:
        """Deletes a snapshot."""
        await self.client._unary(
            "RemoveSnapshot", pb.RemoveSnapshotRequest(box_name=self.name, name=snapshot)
        )

    async def clone(self, name: str) -> "AsyncBox":
        """A new box ``name`` with this one's spec and a copy of its files
        (created, not started)."""
        reply = await self.client._unary("CloneBox", pb.CloneBoxRequest(source=self.name, name=name))
        return AsyncBox(self.client, name, CreateResult._of(reply))

    async def export(self, path: str) -> int:
        """Writes the box to an archive at host ``path`` (which must not
        exist); returns its size."""
        request = pb.ExportBoxRequest(name=self.name, path=os.path.abspath(path))
        return int((await self.client._unary("ExportBox", request)).size_bytes)

    # -- commands ----------------------------------------------------------------

    async def spawn(
        self,
        argv: Argv,
        *,
        stdin: bool = True,
        env: Optional[Mapping[str, str]] = None,
        cwd: str = "",
        timeout: Optional[float] = None,
        user: str = "",
        tty: bool = False,
        tty_size: Tuple[int, int] = (24, 80),
        detach: bool = False,
        reconnect: bool = True,
    ) -> "AsyncProcess":
        """Starts ``argv`` in the box and returns once it runs.

        ``argv`` empty runs the image's default command. ``stdin``: the
        command gets a stdin to write (otherwise /dev/null). ``timeout`` (s):
        killed after it. ``tty``: on a terminal of ``tty_size`` (rows, cols),
        all output on stdout. ``detach``: keeps running if this client goes
        away. ``reconnect``: on losing boxd, reattach for up to 30 s.
        """
        command, args = _argv(argv)
        start = pb.ExecStart(
            box_name=self.name,
            command=command,
            args=args,
            env=_env_map(env),
            working_dir=cwd,
            timeout_ms=_timeout_ms(timeout),
            stdin=stdin,
            tty=tty,
            detach=detach,
            resumable=True,
            user=user,
        )
        if tty:
            start.tty_size.CopyFrom(pb.TtySize(rows=tty_size[0], cols=tty_size[1]))
        return await AsyncProcess._open(self.client, pb.ExecRequest(start=start), argv, reconnect)

    async def exec(
        self,
        argv: Argv,
        *,
        stdin: Optional[Data] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: str = "",
        timeout: Optional[float] = None,
        user: str = "",
    ) -> ExecResult:
        """Runs ``argv`` to the end and returns its output and how it ended.

        ``stdin`` (bytes or str) is written to the command, then closed;
        without it the command reads /dev/null. A command that fails is a
        result, not an exception: use :meth:`ExecResult.check`.
        """
        process = await self.spawn(
            argv, stdin=stdin is not None, env=env, cwd=cwd, timeout=timeout, user=user
        )
        return await process.communicate(stdin)


class AsyncFiles:
    """A box's files, through tar streams (the box must run). Paths are the
    box's, absolute, resolved inside the box."""

    def __init__(self, box: AsyncBox) -> None:
        self._box = box

    async def _copy_out(self, path: str, out: IO[bytes], follow_symlinks: bool) -> None:
        request = pb.CopyOutRequest(box_name=self._box.name, path=path, follow_symlinks=follow_symlinks)
        async for chunk in self._box.client._stream("CopyOut", request):
            out.write(chunk.data)

    async def _copy_in(self, path: str, archive: IO[bytes]) -> int:
        client = self._box.client
        stub = client._checked_stub()

        async def requests() -> AsyncIterator[pb.CopyInRequest]:
            yield pb.CopyInRequest(start=pb.CopyInStart(box_name=self._box.name, path=path))
            archive.seek(0)
            while True:
                data = archive.read(_COPY_CHUNK)
                if not data:
                    return
                yield pb.CopyInRequest(data=data)

        try:
            reply = await stub.CopyIn(requests())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return int(reply.bytes)

    async def read(self, path: str) -> bytes:
        """The contents of the file at ``path`` (symlinks followed in the box)."""
        with _files.spool() as buf:
            await self._copy_out(path, buf, follow_symlinks=True)
            return _files.read_one(buf, path)

    async def write(self, path: str, data: Data, *, mode: int = 0o644) -> None:
        """Writes ``data`` to the file ``path`` (its parent must exist), replacing it."""
        name = posixpath.basename(path.rstrip("/"))
        if not path.startswith("/") or not name:
            raise ValueError(f"a box path is absolute and names a file: {path!r}")
        with _files.spool() as buf:
            buf.write(_files.one_file(name, _bytes(data), mode))
            await self._copy_in(path, buf)

    async def list(self, path: str) -> List[FileEntry]:
        """The entries of directory ``path``, sorted by name. The whole tree
        under it travels: for a large one, run ``ls`` instead."""
        with _files.spool() as buf:
            await self._copy_out(path.rstrip("/") + "/.", buf, follow_symlinks=False)
            return _files.entries(buf)

    async def copy_in(self, host_path: str, box_path: str) -> int:
        """Copies a host file or tree (symlinks as links) to ``box_path``: into
        it when it is a directory, else as it. Returns archive bytes sent."""
        with _files.spool() as buf:
            await asyncio.get_running_loop().run_in_executor(None, _files.pack, host_path, buf)
            return await self._copy_in(box_path, buf)

    async def copy_out(self, box_path: str, host_dir: str) -> List[str]:
        """Copies ``box_path`` (a file or tree) into host directory
        ``host_dir``, safely (nothing lands outside it; see
        :mod:`boxd._files`). Returns the top-level names written."""
        with _files.spool() as buf:
            await self._copy_out(box_path, buf, follow_symlinks=False)
            return await asyncio.get_running_loop().run_in_executor(None, _files.extract, buf, host_dir)


class AsyncProcess:
    """A command running in a box (:meth:`AsyncBox.spawn`).

    Iterate over it for its output (:class:`boxd.Output` chunks, each byte
    once and in order); :meth:`write` and :meth:`close_stdin` feed it,
    :meth:`signal` and :meth:`resize` address it, :meth:`wait` waits for its
    end. Output must be read for the command to go on (boxd keeps at most
    1 MiB it has not been read). When boxd goes away, the next read
    reattaches to the exec (for up to 30 s), from the offsets read so far,
    and gives it again the stdin it had not received; the exec outlives the
    daemon by design. Bytes the new daemon no longer keeps are listed in
    :attr:`gaps`, never skipped silently.
    """

    def __init__(self, client: AsyncClient, call: Any, started: Any, argv: Argv, reconnect: bool) -> None:
        self._client = client
        self._call = call
        self._channel = client._channel
        self.argv = tuple(argv)
        #: The exec's id: address it from any client (:meth:`AsyncClient.signal_exec`).
        self.exec_id: str = started.exec_id
        #: Time from the request to the process running.
        self.launch_ms: int = started.launch_ms
        #: How it ended, once it has.
        self.exit: Optional[ExecExit] = None
        #: Output lost while reattached (see the class docstring).
        self.gaps: List[Gap] = []
        #: How many times it reattached after losing boxd.
        self.reattached = 0
        self._reconnect = reconnect
        self._position = Position(started.stdout_offset, started.stderr_offset)
        self._log = StdinLog(started.stdin_offset)
        self._given = started.stdin_offset
        self._linked = True
        self._close_requested = False
        self._close_sent = False
        self._controls: List[pb.ExecRequest] = []
        self._send_lock = asyncio.Lock()
        self._changed = asyncio.Condition()

    @classmethod
    async def _open(
        cls, client: AsyncClient, first: pb.ExecRequest, argv: Argv, reconnect: bool = True
    ) -> "AsyncProcess":
        try:
            call, started = await cls._call_with(client._checked_stub(), first)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None
        return cls(client, call, started, argv, reconnect)

    @staticmethod
    async def _call_with(stub: pb_grpc.BoxdStub, first: pb.ExecRequest) -> Tuple[Any, Any]:
        """Opens one Exec call with ``first``; waits for ``started``. Raises
        the call's :class:`grpc.RpcError`."""
        call = stub.Exec()
        try:
            await call.write(first)
            reply = await call.read()
        except BaseException:
            call.cancel()
            raise
        if reply is _EOF:
            call.cancel()
            raise Unavailable("boxd closed the exec stream before it started")
        if reply.WhichOneof("event") != "started":
            call.cancel()
            raise Internal(f"expected `started` on the exec stream, boxd sent {reply.WhichOneof('event')}")
        return call, reply.started

    def __repr__(self) -> str:
        return f"AsyncProcess({list(self.argv)!r}, exec_id={self.exec_id!r})"

    def __aiter__(self) -> "AsyncProcess":
        return self

    async def __anext__(self) -> Output:
        """The next chunk of output; ends after the exit (then in :attr:`exit`)."""
        while self.exit is None:
            try:
                reply = await self._call.read()
            except grpc.RpcError as e:
                # A write of ours (an ack, stdin) that meets a stream boxd
                # has just ended (the exit sent, then RST_STREAM(NO_ERROR),
                # as HTTP/2 allows) makes grpcio fail the whole call with
                # INTERNAL, hiding the output and exit already received:
                # attach again, from the offsets read, for the rest.
                broken_by_write = not self._linked
                if not (self._reconnect and (broken_by_write or _is_connection_loss(e))):
                    raise from_rpc_error(e) from None
                await self._reattach(from_rpc_error(e).message)
                continue
            if reply is _EOF:
                if not self._reconnect:
                    raise Unavailable("boxd ended the exec stream without an exit")
                await self._reattach("boxd ended the exec stream without an exit")
                continue
            kind = reply.WhichOneof("event")
            if kind in ("stdout", "stderr"):
                stream = Stream.STDOUT if kind == "stdout" else Stream.STDERR
                data, ack = self._position.take(stream, getattr(reply, kind))
                if ack is not None:
                    await self._send(
                        pb.ExecRequest(ack=pb.ExecAck(stdout_offset=ack[0], stderr_offset=ack[1]))
                    )
                if data:
                    return Output(stream, data)
            elif kind == "exit":
                self.exit = ExecExit._of(reply.exit)
                async with self._changed:
                    self._changed.notify_all()
                await self._after_exit()
            elif kind == "stdin_offset":
                async with self._changed:
                    self._given = reply.stdin_offset
                    self._changed.notify_all()
            else:
                raise Internal(f"unexpected message on the exec stream: {kind}")
        raise StopAsyncIteration

    async def _after_exit(self) -> None:
        """The exit came: boxd ends the stream next (anything more from it
        breaks the protocol)."""
        try:
            reply = await self._call.read()
        except grpc.RpcError:
            return
        if reply is not _EOF:
            self._call.cancel()
            raise Internal(f"boxd sent an event after the exit of exec {self.exec_id}")

    # -- input -------------------------------------------------------------------

    def _exited(self) -> FailedPrecondition:
        return FailedPrecondition(f"exec {self.exec_id} has exited")

    async def write(self, data: Data) -> None:
        """Writes to the command's stdin; waits while 1 MiB is in flight that
        the command has not read (so keep reading its output meanwhile)."""
        data = _bytes(data)
        for at in range(0, len(data), STDIN_CHUNK):
            async with self._changed:
                while self._log.end - self._given >= STDIN_WINDOW and self.exit is None:
                    await self._changed.wait()
            if self.exit is not None:
                raise self._exited()
            if self._close_requested:
                raise FailedPrecondition(f"the stdin of exec {self.exec_id} is closed")
            self._log.push(data[at : at + STDIN_CHUNK])
            await self._pump()

    async def close_stdin(self) -> None:
        """Closes the command's stdin (it reads EOF after what was written)."""
        if self.exit is not None:
            raise self._exited()
        self._close_requested = True
        await self._pump()

    async def signal(self, signal: Union[int, str]) -> None:
        """Sends the command a signal: a number or a name (``"TERM"``, ``"SIGKILL"``)."""
        await self._control(pb.ExecRequest(signal=_signal(signal)))

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the command's terminal (``tty=True``)."""
        await self._control(pb.ExecRequest(resize=pb.TtySize(rows=rows, cols=cols)))

    async def _control(self, request: pb.ExecRequest) -> None:
        if self.exit is not None:
            raise self._exited()
        if not await self._send(request):
            # Delivered after the reattach.
            self._controls.append(request)

    async def _send(self, request: pb.ExecRequest) -> bool:
        """Writes one request to the current call; False when it is broken
        (the reader reattaches)."""
        async with self._send_lock:
            return await self._send_locked(request)

    async def _send_locked(self, request: pb.ExecRequest) -> bool:
        if not self._linked:
            return False
        try:
            await self._call.write(request)
            return True
        except (grpc.RpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            self._linked = False
            return False

    async def _pump(self) -> None:
        """Sends the current call the stdin it has not had, then the EOF."""
        async with self._send_lock:
            while True:
                chunk = self._log.next_unsent()
                if chunk is None:
                    break
                if not await self._send_locked(pb.ExecRequest(stdin=chunk)):
                    return
                self._log.mark_sent(len(chunk))
            if self._close_requested and not self._close_sent:
                if await self._send_locked(pb.ExecRequest(close_stdin=True)):
                    self._close_sent = True

    # -- reattaching ---------------------------------------------------------------

    async def _reattach(self, error: str) -> None:
        """Finds boxd again and attaches from where the caller is; raises
        :class:`boxd.Unavailable` after :data:`RECONNECT_WITHIN`."""
        async with self._send_lock:
            self._linked = False
        self._call.cancel()
        deadline = time.monotonic() + RECONNECT_WITHIN
        pause = _BACKOFF_FIRST
        while True:
            left = deadline - time.monotonic()
            try:
                await asyncio.wait_for(self._try_reattach(), timeout=max(left, 0.001))
                self.reattached += 1
                return
            except _Retry as r:
                last = str(r)
            except asyncio.TimeoutError:
                last = "boxd did not answer"
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(
                    f"{error}; could not reattach to exec {self.exec_id} within "
                    f"{RECONNECT_WITHIN:.0f} s: {last}"
                )
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _BACKOFF_MAX)

    async def _try_reattach(self) -> None:
        try:
            stub = await self._client._redial(self._channel)
        except DaemonNotRunning as e:
            raise _Retry(e.message) from None
        except Unavailable as e:
            raise _Retry(e.message) from None
        channel = self._client._channel
        at = self._position.at
        attach = pb.ExecAttach(
            exec_id=self.exec_id,
            stdout_offset=at[Stream.STDOUT],
            stderr_offset=at[Stream.STDERR],
            resumable=True,
        )
        try:
            call, started = await self._call_with(stub, pb.ExecRequest(attach=attach))
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise NotFound(
                    f"exec {self.exec_id} is gone: the daemon that came back does not know it"
                ) from None
            if _is_connection_loss(e):
                raise _Retry(e.details() or "") from None
            raise from_rpc_error(e) from None
        except Unavailable as e:
            raise _Retry(e.message) from None
        if started.exec_id != self.exec_id:
            call.cancel()
            raise Internal(f"asked to attach to exec {self.exec_id}, boxd attached to {started.exec_id}")
        async with self._send_lock:
            self._log.rewind(started.stdin_offset)
            self._close_sent = False
            self._call = call
            self._channel = channel
            self._linked = True
        async with self._changed:
            self._given = started.stdin_offset
            self._changed.notify_all()
        self.gaps.extend(self._position.resume(started.stdout_offset, started.stderr_offset))
        await self._pump()
        controls, self._controls = self._controls, []
        for request in controls:
            await self._send(request)

    # -- waiting -------------------------------------------------------------------

    async def wait(self) -> ExecResult:
        """Reads the output not read yet until the command ends; returns it
        with how the command ended."""
        return await self.communicate(None)

    async def communicate(self, stdin: Optional[Data] = None) -> ExecResult:
        """Writes ``stdin`` (if any) then closes it, while reading the rest of
        the output; returns that output and how the command ended."""
        feeder: Optional[asyncio.Task[None]] = None
        if stdin is not None:
            data = _bytes(stdin)

            async def feed() -> None:
                await self.write(data)
                await self.close_stdin()

            feeder = asyncio.ensure_future(feed())
        out: Dict[Stream, List[bytes]] = {Stream.STDOUT: [], Stream.STDERR: []}
        try:
            async for chunk in self:
                out[chunk.stream].append(chunk.data)
        finally:
            if feeder is not None:
                await _settle(feeder)
        assert self.exit is not None  # the iteration ends only after the exit
        return ExecResult._of(
            self.argv, b"".join(out[Stream.STDOUT]), b"".join(out[Stream.STDERR]), self.exit
        )

    async def cancel(self) -> None:
        """Ends this client's stream; boxd kills the command unless it was
        started with ``detach``."""
        self._reconnect = False
        self._call.cancel()


async def _settle(task: "asyncio.Task[None]") -> None:
    """Ends a stdin feeder once the output ended (or failed): a command that
    exited without reading all of its stdin leaves it nothing to do, and an
    input error after that is no error of the command's."""
    if not task.done():
        task.cancel()
    try:
        await task
    except (asyncio.CancelledError, BoxdError):
        pass


class _Retry(Exception):
    """A reattach attempt that failed in a way worth another try."""
