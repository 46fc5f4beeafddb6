"""Typed exceptions: every failure the SDK raises is a :class:`BoxdError`.

A status from a call to boxd becomes the subclass of its gRPC code (see
:func:`from_rpc_error`), carrying the daemon's own message; failures to
reach a daemon at all (:class:`DaemonNotRunning`, :class:`UntrustedSocket`,
:class:`ProtocolMismatch`, :class:`DaemonStartFailed`) are raised before any
call is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Optional, Type

import grpc

if TYPE_CHECKING:
    from .types import ExecResult

__all__ = [
    "BoxdError",
    "NotFound",
    "AlreadyExists",
    "InvalidArgument",
    "FailedPrecondition",
    "PermissionDenied",
    "ResourceExhausted",
    "Unsupported",
    "DeadlineExceeded",
    "Cancelled",
    "Unavailable",
    "DataLoss",
    "Internal",
    "DaemonNotRunning",
    "UntrustedSocket",
    "ProtocolMismatch",
    "DaemonStartFailed",
    "ExecError",
    "from_rpc_error",
]


class BoxdError(Exception):
    """Anything that went wrong talking to boxd.

    ``message`` is what the daemon (or this SDK) said; ``code`` the gRPC
    status code when the failure came as a status, else ``None``.
    """

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class NotFound(BoxdError):
    """No box, exec, image or snapshot of that name (``NOT_FOUND``)."""


class AlreadyExists(BoxdError):
    """The name is taken (``ALREADY_EXISTS``)."""


class InvalidArgument(BoxdError):
    """boxd refused the request as malformed (``INVALID_ARGUMENT``, ``OUT_OF_RANGE``)."""


class FailedPrecondition(BoxdError):
    """The request does not fit the state things are in, e.g. a box that is
    not running, or input to an exec that has exited (``FAILED_PRECONDITION``,
    ``ABORTED``)."""


class PermissionDenied(BoxdError):
    """boxd refused this caller (``PERMISSION_DENIED``): e.g. a peer of another uid."""


class ResourceExhausted(BoxdError):
    """A full disk or a limit such as ``max-boxes`` (``RESOURCE_EXHAUSTED``)."""


class Unsupported(BoxdError):
    """A call the daemon does not offer (it is older than this SDK) or a
    feature its engine lacks (``UNIMPLEMENTED``)."""


class DeadlineExceeded(BoxdError):
    """The call took longer than its timeout (``DEADLINE_EXCEEDED``)."""


class Cancelled(BoxdError):
    """The call was cancelled (``CANCELLED``)."""


class Unavailable(BoxdError):
    """boxd went away during the call, or said it is unavailable (shutting
    down) (``UNAVAILABLE``)."""


class DataLoss(BoxdError):
    """Bytes were lost, e.g. stdin a reattached exec can no longer be given
    (``DATA_LOSS``)."""


class Internal(BoxdError):
    """Anything else boxd reported (``INTERNAL``, ``UNKNOWN``, ...)."""


class DaemonNotRunning(BoxdError):
    """Nothing answers on the socket (or there is no socket)."""


class UntrustedSocket(BoxdError):
    """The socket, a directory or symlink on its path, or the process
    answering on it is not this user's: nothing was sent to it."""


class ProtocolMismatch(BoxdError):
    """The daemon speaks another protocol than ``boxd.v1``."""


class DaemonStartFailed(BoxdError):
    """boxd was started and exited, or did not answer in time."""


class ExecError(BoxdError):
    """A command did not succeed (raised by :meth:`ExecResult.check`)."""

    def __init__(self, message: str, result: "ExecResult") -> None:
        super().__init__(message)
        self.result = result


_BY_CODE: Dict[grpc.StatusCode, Type[BoxdError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNIMPLEMENTED: Unsupported,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DATA_LOSS: DataLoss,
}


def from_status(code: grpc.StatusCode, details: Optional[str]) -> BoxdError:
    """The exception for a status of ``code`` with the daemon's ``details``."""
    message = details or ""
    if code == grpc.StatusCode.UNIMPLEMENTED and not message:
        message = (
            "boxd does not offer this call: it is older than this client; restart it "
            "from this release (`boxctl daemon stop`, then start it again)"
        )
    elif code == grpc.StatusCode.UNAVAILABLE:
        message = f"lost the connection to boxd (it stopped or crashed, or is shutting down): {message}"
    elif not message:
        message = code.name.lower().replace("_", " ")
    return _BY_CODE.get(code, Internal)(message, code)


def from_rpc_error(err: grpc.RpcError) -> BoxdError:
    """The typed exception for a failed gRPC call."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    return from_status(code, details)
