"""The SDK's own types: enums and frozen dataclasses for what boxd sends
and takes, so that common use needs no protobuf.

Conventions: times are Unix milliseconds as ``int`` (``*_ms``); sizes are
bytes as ``int``; unset optional numbers are ``None``; output and file
contents are ``bytes``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._gen import boxd_pb2 as pb

__all__ = [
    "BoxState",
    "IfExists",
    "Stream",
    "Mount",
    "PortMapping",
    "Secret",
    "KeepId",
    "BoxSpec",
    "BoxInfo",
    "DaemonInfo",
    "BoxEvent",
    "ExecExit",
    "ExecResult",
    "ExecInfo",
    "Output",
    "ImageInfo",
    "BoxStat",
    "SnapshotInfo",
    "FileEntry",
]


class BoxState(enum.Enum):
    """A box's lifecycle state."""

    UNSPECIFIED = pb.BOX_STATE_UNSPECIFIED
    CREATED = pb.BOX_STATE_CREATED
    STARTING = pb.BOX_STATE_STARTING
    RUNNING = pb.BOX_STATE_RUNNING
    STOPPING = pb.BOX_STATE_STOPPING
    STOPPED = pb.BOX_STATE_STOPPED
    REMOVED = pb.BOX_STATE_REMOVED
    FAILED = pb.BOX_STATE_FAILED

    @classmethod
    def _of(cls, value: int) -> "BoxState":
        try:
            return cls(value)
        except ValueError:
            return cls.UNSPECIFIED


class IfExists(enum.Enum):
    """What a create does when a box of its name exists already."""

    #: Reuse it as it is; what differs from the request is in ``warnings``.
    REUSE = pb.IF_EXISTS_REUSE
    #: Reuse it only when its whole spec is the request's, else AlreadyExists.
    SAME_SPEC = pb.IF_EXISTS_SAME_SPEC
    #: Remove it (with its files) and create a new box.
    REPLACE = pb.IF_EXISTS_REPLACE
    #: Fail with AlreadyExists.
    FAIL = pb.IF_EXISTS_FAIL


class Stream(enum.Enum):
    """One of an exec's output streams."""

    STDOUT = "stdout"
    STDERR = "stderr"


@dataclass(frozen=True)
class Mount:
    """A host directory inside the box (``host_path`` absolute and existing)."""

    host_path: str
    guest_path: str
    read_only: bool = False

    def _pb(self) -> pb.Mount:
        return pb.Mount(host_path=self.host_path, guest_path=self.guest_path, read_only=self.read_only)

    @classmethod
    def _of(cls, m: pb.Mount) -> "Mount":
        return cls(m.host_path, m.guest_path, m.read_only)


@dataclass(frozen=True)
class PortMapping:
    """A box port published on the host; ``host_port`` 0 means any free one."""

    box_port: int
    host_port: int = 0
    host_ip: str = ""
    protocol: str = ""

    def _pb(self) -> pb.PortMapping:
        return pb.PortMapping(
            host_ip=self.host_ip, host_port=self.host_port, box_port=self.box_port, protocol=self.protocol
        )

    @classmethod
    def _of(cls, p: pb.PortMapping) -> "PortMapping":
        return cls(box_port=p.box_port, host_port=p.host_port, host_ip=p.host_ip, protocol=p.protocol)


@dataclass(frozen=True)
class Secret:
    """A credential kept out of the box: the box sees ``$name`` = the
    placeholder; boxd puts ``value`` in requests to ``hosts``. Replies carry
    ``value`` empty."""

    name: str
    hosts: Tuple[str, ...] = ()
    value: str = ""
    placeholder: str = ""

    def _pb(self) -> pb.Secret:
        return pb.Secret(
            name=self.name, hosts=list(self.hosts), placeholder=self.placeholder, value=self.value
        )

    @classmethod
    def _of(cls, s: pb.Secret) -> "Secret":
        return cls(name=s.name, hosts=tuple(s.hosts), value=s.value, placeholder=s.placeholder)


@dataclass(frozen=True)
class KeepId:
    """The box user that owners of mounted directories become (1-65535)."""

    uid: int
    gid: int


#: A port given as a box port number, ``"HOST:BOX"``, ``"IP:HOST:BOX"`` or a mapping.
PortArg = Union[int, str, PortMapping]
#: A mount given as ``(host, guest)``, ``(host, guest, read_only)`` or a Mount.
MountArg = Union[Mount, Tuple[str, str], Tuple[str, str, bool]]


def _port(p: PortArg) -> PortMapping:
    if isinstance(p, PortMapping):
        return p
    if isinstance(p, bool) or not isinstance(p, (int, str)):
        raise TypeError(f"a port is an int, a 'HOST:BOX' string or a PortMapping, not {p!r}")
    if isinstance(p, int):
        return PortMapping(box_port=p)
    spec, _, proto = p.partition("/")
    parts = spec.rsplit(":", 2)
    try:
        if len(parts) == 1:
            return PortMapping(box_port=int(parts[0]), protocol=proto)
        if len(parts) == 2:
            return PortMapping(box_port=int(parts[1]), host_port=int(parts[0]), protocol=proto)
        return PortMapping(box_port=int(parts[2]), host_port=int(parts[1]), host_ip=parts[0], protocol=proto)
    except ValueError:
        raise ValueError(f"not a port mapping: {p!r} (use BOX, HOST:BOX or IP:HOST:BOX)") from None


def _mount(m: MountArg) -> Mount:
    if isinstance(m, Mount):
        return m
    if isinstance(m, tuple) and len(m) in (2, 3):
        return Mount(str(m[0]), str(m[1]), bool(m[2]) if len(m) == 3 else False)
    raise TypeError(f"a mount is a Mount or a (host, guest[, read_only]) tuple, not {m!r}")


def _secret(s: Union[Secret, Tuple[str, Sequence[str], str]]) -> Secret:
    if isinstance(s, Secret):
        return s
    if isinstance(s, tuple) and len(s) == 3:
        return Secret(name=s[0], hosts=tuple(s[1]), value=s[2])
    raise TypeError(f"a secret is a Secret or a (name, hosts, value) tuple, not {s!r}")


@dataclass(frozen=True)
class BoxSpec:
    """What a box is made of. ``image`` is a registry reference or the
    absolute path of an OCI image layout directory."""

    image: str
    cpus: Optional[int] = None
    memory_mib: Optional[int] = None
    disk_size_gb: Optional[int] = None
    mounts: Tuple[Mount, ...] = ()
    allow_net: Tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    working_dir: str = ""
    secrets: Tuple[Secret, ...] = ()
    ports: Tuple[PortMapping, ...] = ()
    keep_id: Optional[KeepId] = None

    def _pb(self) -> pb.BoxSpec:
        spec = pb.BoxSpec(
            image=self.image,
            mounts=[m._pb() for m in self.mounts],
            allow_net=list(self.allow_net),
            env=dict(self.env),
            working_dir=self.working_dir,
            secrets=[s._pb() for s in self.secrets],
            ports=[p._pb() for p in self.ports],
        )
        if self.cpus is not None:
            spec.cpus = self.cpus
        if self.memory_mib is not None:
            spec.memory_mib = self.memory_mib
        if self.disk_size_gb is not None:
            spec.disk_size_gb = self.disk_size_gb
        if self.keep_id is not None:
            spec.keep_id.CopyFrom(pb.KeepId(uid=self.keep_id.uid, gid=self.keep_id.gid))
        return spec

    @classmethod
    def _of(cls, s: pb.BoxSpec) -> "BoxSpec":
        return cls(
            image=s.image,
            cpus=s.cpus if s.HasField("cpus") else None,
            memory_mib=s.memory_mib if s.HasField("memory_mib") else None,
            disk_size_gb=s.disk_size_gb if s.HasField("disk_size_gb") else None,
            mounts=tuple(Mount._of(m) for m in s.mounts),
            allow_net=tuple(s.allow_net),
            env=dict(s.env),
            working_dir=s.working_dir,
            secrets=tuple(Secret._of(x) for x in s.secrets),
            ports=tuple(PortMapping._of(p) for p in s.ports),
            keep_id=KeepId(s.keep_id.uid, s.keep_id.gid) if s.HasField("keep_id") else None,
        )


@dataclass(frozen=True)
class BoxInfo:
    """A box as boxd reports it (``InspectBox``, ``ListBoxes``)."""

    id: str
    name: str
    state: BoxState
    image: str
    image_digest: str
    created_at_ms: int
    started_at_ms: int
    isolation: str
    engine: str
    spec: BoxSpec
    running_execs: int
    #: Why the box is FAILED, when it is.
    error: str
    #: Bytes the box's own files take, when the engine can tell.
    disk_bytes: Optional[int]
    #: Ports published now (actual host ports), while the box runs.
    ports: Tuple[PortMapping, ...]

    @classmethod
    def _of(cls, b: pb.BoxInfo) -> "BoxInfo":
        return cls(
            id=b.id,
            name=b.name,
            state=BoxState._of(b.state),
            image=b.image,
            image_digest=b.image_digest,
            created_at_ms=b.created_at_ms,
            started_at_ms=b.started_at_ms,
            isolation=b.isolation,
            engine=b.engine,
            spec=BoxSpec._of(b.spec),
            running_execs=b.running_execs,
            error=b.error,
            disk_bytes=b.disk_bytes if b.HasField("disk_bytes") else None,
            ports=tuple(PortMapping._of(p) for p in b.ports),
        )


@dataclass(frozen=True)
class DaemonInfo:
    """What the daemon says of itself (``Describe``)."""

    protocol: str
    daemon_version: str
    pid: int
    engine: str
    engine_version: str
    isolation: str
    capabilities: Tuple[str, ...]
    notes: Tuple[str, ...]
    network_filtering: bool
    socket: str
    home: str

    @classmethod
    def _of(cls, d: pb.DescribeResponse) -> "DaemonInfo":
        return cls(
            protocol=d.protocol,
            daemon_version=d.daemon_version,
            pid=d.pid,
            engine=d.engine,
            engine_version=d.engine_version,
            isolation=d.isolation,
            capabilities=tuple(d.capabilities),
            notes=tuple(d.notes),
            network_filtering=d.network_filtering,
            socket=d.socket,
            home=d.home,
        )


@dataclass(frozen=True)
class BoxEvent:
    """A box's state change (``WatchBoxes``).

    With ``events(initial=True)`` the first events have ``initial`` set (each
    box as it was when the watch began), then one has ``synced`` set and
    names no box, then the live changes follow.
    """

    box_id: str
    name: str
    state: BoxState
    elapsed_ms: int
    at_ms: int
    message: str
    initial: bool
    synced: bool

    @classmethod
    def _of(cls, e: pb.BoxEvent) -> "BoxEvent":
        return cls(
            box_id=e.box_id,
            name=e.name,
            state=BoxState._of(e.state),
            elapsed_ms=e.elapsed_ms,
            at_ms=e.at_ms,
            message=e.message,
            initial=e.initial,
            synced=e.synced,
        )


@dataclass(frozen=True)
class ExecExit:
    """How a command ended: ``code`` when it exited, ``signal`` when a signal
    killed it; ``error`` when the engine could not run it (``code`` 126/127)
    or its box ended."""

    code: Optional[int]
    signal: Optional[int]
    error: str
    timed_out: bool

    @classmethod
    def _of(cls, e: pb.ExecExit) -> "ExecExit":
        return cls(
            code=e.code if e.HasField("code") else None,
            signal=e.signal if e.HasField("signal") else None,
            error=e.error,
            timed_out=e.timed_out,
        )


@dataclass(frozen=True)
class ExecResult:
    """A finished command: its whole output and how it ended."""

    argv: Tuple[str, ...]
    stdout: bytes
    stderr: bytes
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    #: Set when the engine could not run the command, or its box ended.
    error: str

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")

    def check(self) -> "ExecResult":
        """Returns this result when the command exited 0; otherwise raises
        :class:`boxd.ExecError` saying how it ended, with its stderr."""
        from .errors import ExecError

        if self.ok:
            return self
        if self.timed_out:
            how = "timed out"
        elif self.signal is not None:
            how = f"was killed by signal {self.signal}"
        else:
            how = f"exited {self.exit_code}"
        detail = self.error or self.stderr_text.strip()[-2000:]
        raise ExecError(f"{list(self.argv)} {how}" + (f": {detail}" if detail else ""), self)

    @classmethod
    def _of(cls, argv: Sequence[str], stdout: bytes, stderr: bytes, exit: ExecExit) -> "ExecResult":
        return cls(
            argv=tuple(argv),
            stdout=stdout,
            stderr=stderr,
            exit_code=exit.code,
            signal=exit.signal,
            timed_out=exit.timed_out,
            error=exit.error,
        )


@dataclass(frozen=True)
class Output:
    """A chunk of a running command's output."""

    stream: Stream
    data: bytes


@dataclass(frozen=True)
class ExecInfo:
    """An exec as ``ListExecs`` reports it."""

    exec_id: str
    box_name: str
    command: str
    args: Tuple[str, ...]
    started_at_ms: int
    tty: bool
    detach: bool
    attached: int
    exited: bool
    exit: Optional[ExecExit]

    @classmethod
    def _of(cls, e: pb.ExecInfo) -> "ExecInfo":
        return cls(
            exec_id=e.exec_id,
            box_name=e.box_name,
            command=e.command,
            args=tuple(e.args),
            started_at_ms=e.started_at_ms,
            tty=e.tty,
            detach=e.detach,
            attached=e.attached,
            exited=e.exited,
            exit=ExecExit._of(e.exit) if e.HasField("exit") else None,
        )


@dataclass(frozen=True)
class ImageInfo:
    """An image in boxd's store."""

    references: Tuple[str, ...]
    digest: str
    repo_digest: str
    size: int
    layers: int
    os: str
    architecture: str
    added_at_ms: int
    used_by: Tuple[str, ...]
    env: Tuple[str, ...]
    working_dir: str
    cmd: Tuple[str, ...]
    entrypoint: Tuple[str, ...]

    @classmethod
    def _of(cls, i: pb.ImageInfo) -> "ImageInfo":
        return cls(
            references=tuple(i.references),
            digest=i.digest,
            repo_digest=i.repo_digest,
            size=i.size,
            layers=i.layers,
            os=i.os,
            architecture=i.architecture,
            added_at_ms=i.added_at_ms,
            used_by=tuple(i.used_by),
            env=tuple(i.env),
            working_dir=i.working_dir,
            cmd=tuple(i.cmd),
            entrypoint=tuple(i.entrypoint),
        )


@dataclass(frozen=True)
class BoxStat:
    """One sample of what a running box uses."""

    id: str
    name: str
    cpu_usec: int
    cpu_percent: float
    memory_bytes: int
    memory_limit_bytes: Optional[int]
    pids: int
    disk_bytes: Optional[int]
    net_rx_bytes: int
    net_tx_bytes: int
    at_ms: int

    @classmethod
    def _of(cls, s: pb.BoxStat) -> "BoxStat":
        return cls(
            id=s.id,
            name=s.name,
            cpu_usec=s.cpu_usec,
            cpu_percent=s.cpu_percent,
            memory_bytes=s.memory_bytes,
            memory_limit_bytes=s.memory_limit_bytes if s.HasField("memory_limit_bytes") else None,
            pids=s.pids,
            disk_bytes=s.disk_bytes if s.HasField("disk_bytes") else None,
            net_rx_bytes=s.net_rx_bytes,
            net_tx_bytes=s.net_tx_bytes,
            at_ms=s.at_ms,
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot of a box's files."""

    name: str
    box_name: str
    created_at_ms: int
    size_bytes: int

    @classmethod
    def _of(cls, s: pb.SnapshotInfo) -> "SnapshotInfo":
        return cls(name=s.name, box_name=s.box_name, created_at_ms=s.created_at_ms, size_bytes=s.size_bytes)


@dataclass(frozen=True)
class FileEntry:
    """An entry of a directory in a box (``files.list``)."""

    name: str
    #: "file", "dir", "symlink" or "other".
    kind: str
    size: int
    mode: int
    mtime: int
    #: Where a symlink points.
    link_target: str = ""


@dataclass(frozen=True)
class CreateResult:
    """What ``CreateBox`` (and ``CloneBox``) said."""

    box: BoxInfo
    created: bool
    warnings: Tuple[str, ...]
    elapsed_ms: int
    replaced: bool

    @classmethod
    def _of(cls, r: pb.CreateBoxResponse) -> "CreateResult":
        return cls(
            box=BoxInfo._of(r.box),
            created=r.created,
            warnings=tuple(r.warnings),
            elapsed_ms=r.elapsed_ms,
            replaced=r.replaced,
        )


def _env_map(env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    if env is None:
        return {}
    out: Dict[str, str] = {}
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"env names and values are str: {k!r}={v!r}")
        out[k] = v
    return out


def _strs(what: str, items: Optional[Sequence[str]]) -> List[str]:
    if items is None:
        return []
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{what} is a list of str, not a single {type(items).__name__}")
    return [str(i) for i in items]
