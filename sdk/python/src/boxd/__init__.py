"""boxd: named, reusable sandboxes ("boxes") from OCI images, served by a
per-user daemon over gRPC on a Unix socket.

Blocking::

    import boxd

    with boxd.Client() as client:
        box = client.create_or_reuse("demo", image="alpine:3.20")
        print(box.exec(["uname", "-a"]).check().text)

asyncio: the same API on :class:`AsyncClient` (``await
AsyncClient.connect()``), with coroutines and async iterators.
"""

from ._exec import Gap
from ._files import UnsafeArchive
from .aio import PROTOCOL, AsyncBox, AsyncClient, AsyncFiles, AsyncProcess
from .errors import (
    AlreadyExists,
    BoxdError,
    Cancelled,
    DaemonNotRunning,
    DaemonStartFailed,
    DataLoss,
    DeadlineExceeded,
    ExecError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ProtocolMismatch,
    ResourceExhausted,
    Unavailable,
    Unsupported,
    UntrustedSocket,
)
from .sync import Box, Client, Files, Process, connect
from .types import (
    BoxEvent,
    BoxInfo,
    BoxSpec,
    BoxStat,
    BoxState,
    CreateResult,
    DaemonInfo,
    ExecExit,
    ExecInfo,
    ExecResult,
    FileEntry,
    IfExists,
    ImageInfo,
    KeepId,
    Mount,
    Output,
    PortMapping,
    Secret,
    SnapshotInfo,
    Stream,
)

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL",
    "AsyncBox",
    "AsyncClient",
    "AsyncFiles",
    "AsyncProcess",
    "Box",
    "Client",
    "Files",
    "Process",
    "connect",
    "AlreadyExists",
    "BoxdError",
    "Cancelled",
    "DaemonNotRunning",
    "DaemonStartFailed",
    "DataLoss",
    "DeadlineExceeded",
    "ExecError",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ProtocolMismatch",
    "ResourceExhausted",
    "Unavailable",
    "Unsupported",
    "UntrustedSocket",
    "UnsafeArchive",
    "BoxEvent",
    "BoxInfo",
    "BoxSpec",
    "BoxStat",
    "BoxState",
    "CreateResult",
    "DaemonInfo",
    "ExecExit",
    "ExecInfo",
    "ExecResult",
    "FileEntry",
    "Gap",
    "IfExists",
    "ImageInfo",
    "KeepId",
    "Mount",
    "Output",
    "PortMapping",
    "Secret",
    "SnapshotInfo",
    "Stream",
]
