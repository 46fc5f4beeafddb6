/**
 * Errors: every failure of a call to boxd is a {@link BoxdError} whose class
 * says what kind it is (decided by the gRPC status code alone, as the Rust
 * client's `ErrorKind` does) and whose message is the daemon's own.
 *
 * @module
 */
import { status as Status } from "@grpc/grpc-js";
/** The name of a gRPC status code (`5` → `"NOT_FOUND"`). */
export function statusName(code) {
    const name = Status[code];
    return name ?? "UNKNOWN";
}
/**
 * A failure reported by boxd (or by the connection to it). `code` is the
 * gRPC status code (`status.NOT_FOUND` is 5); `message` is what the daemon
 * said, unchanged.
 */
export class BoxdError extends Error {
    /** The gRPC status code (see `status` of `@grpc/grpc-js`). */
    code;
    /** The daemon's message, without any prefix. */
    details;
    constructor(code, details, options) {
        super(details, options);
        this.name = new.target.name;
        this.code = code;
        this.details = details;
    }
    /** The code's name: `"NOT_FOUND"`, `"FAILED_PRECONDITION"`, ... */
    get codeName() {
        return statusName(this.code);
    }
}
/** No such box, exec, image, snapshot or path (`NOT_FOUND`). */
export class NotFoundError extends BoxdError {
}
/** A name that must be new is taken, or a spec differs (`ALREADY_EXISTS`). */
export class AlreadyExistsError extends BoxdError {
}
/** The request is malformed or out of bounds (`INVALID_ARGUMENT`, `OUT_OF_RANGE`). */
export class InvalidArgumentError extends BoxdError {
}
/**
 * The request does not fit the state of things: a box that is not running,
 * an exec that has exited (`FAILED_PRECONDITION`, `ABORTED`).
 */
export class FailedPreconditionError extends BoxdError {
}
/** The daemon refused this caller (`PERMISSION_DENIED`). */
export class PermissionDeniedError extends BoxdError {
}
/**
 * boxd is shutting down, or the connection to it broke (`UNAVAILABLE`).
 * Retrying later may work.
 */
export class UnavailableError extends BoxdError {
}
/** A full disk or a limit such as `max-boxes` (`RESOURCE_EXHAUSTED`). */
export class ResourceExhaustedError extends BoxdError {
}
/**
 * A call the daemon does not offer (it is older than this SDK) or a
 * feature its engine lacks (`UNIMPLEMENTED`).
 */
export class UnimplementedError extends BoxdError {
}
/** A deadline passed (`DEADLINE_EXCEEDED`). */
export class DeadlineExceededError extends BoxdError {
}
/** The call was cancelled (`CANCELLED`). */
export class CancelledError extends BoxdError {
}
/** Stdin or output this client needs is no longer kept (`DATA_LOSS`). */
export class DataLossError extends BoxdError {
}
/**
 * The socket, a directory or symlink on the way to it, or its directory is
 * not this user's (or is open to others): nothing was sent to it. Code
 * `PERMISSION_DENIED`.
 */
export class UntrustedSocketError extends BoxdError {
    /** The path at fault (the socket, its directory, a directory or symlink on the way). */
    path;
    constructor(path, details) {
        super(Status.PERMISSION_DENIED, details);
        this.path = path;
    }
}
/**
 * Nothing answers on the socket (and the SDK was told not to start boxd, or
 * starting it failed). Code `UNAVAILABLE`.
 */
export class DaemonNotRunningError extends BoxdError {
    /** The socket that was tried. */
    socket;
    constructor(socket, details, options) {
        super(Status.UNAVAILABLE, details, options);
        this.socket = socket;
    }
}
/**
 * The daemon speaks another protocol than `boxd.v1` (a daemon and client of
 * different releases). Code `FAILED_PRECONDITION`.
 */
export class ProtocolMismatchError extends BoxdError {
    /** What the daemon said it speaks. */
    protocol;
    constructor(socket, protocol) {
        super(Status.FAILED_PRECONDITION, `boxd at ${socket} speaks protocol ${JSON.stringify(protocol)}, this SDK speaks "boxd.v1"; use a client and a daemon from the same release (restart boxd after an upgrade: \`boxctl daemon stop\`)`);
        this.protocol = protocol;
    }
}
const BY_CODE = {
    [Status.NOT_FOUND]: NotFoundError,
    [Status.ALREADY_EXISTS]: AlreadyExistsError,
    [Status.INVALID_ARGUMENT]: InvalidArgumentError,
    [Status.OUT_OF_RANGE]: InvalidArgumentError,
    [Status.FAILED_PRECONDITION]: FailedPreconditionError,
    [Status.ABORTED]: FailedPreconditionError,
    [Status.PERMISSION_DENIED]: PermissionDeniedError,
    [Status.UNAUTHENTICATED]: PermissionDeniedError,
    [Status.UNAVAILABLE]: UnavailableError,
    [Status.RESOURCE_EXHAUSTED]: ResourceExhaustedError,
    [Status.UNIMPLEMENTED]: UnimplementedError,
    [Status.DEADLINE_EXCEEDED]: DeadlineExceededError,
    [Status.CANCELLED]: CancelledError,
    [Status.DATA_LOSS]: DataLossError,
};
/** The error of the class for `code`, with `details` as its message. */
export function errorForCode(code, details, cause) {
    const Class = BY_CODE[code] ?? BoxdError;
    return new Class(code, details, cause === undefined ? undefined : { cause });
}
/** Whether `e` is a gRPC status error from `@grpc/grpc-js`. */
export function isServiceError(e) {
    return (e instanceof Error &&
        typeof e.code === "number" &&
        typeof e.details === "string");
}
/**
 * `e` as a {@link BoxdError}: a gRPC status becomes the class of its code
 * carrying the daemon's message (an `UNIMPLEMENTED` without one says the
 * daemon is older than this SDK); a `BoxdError` passes unchanged; anything
 * else is returned as it is.
 */
export function fromGrpc(e) {
    if (e instanceof BoxdError || !isServiceError(e)) {
        return e;
    }
    let details = e.details;
    if (e.code === Status.UNIMPLEMENTED && details === "") {
        details =
            "boxd does not offer this call: it is older than this SDK; restart it from this release (`boxctl daemon stop`, then start it again)";
    }
    else if (details === "") {
        details = e.message;
    }
    return errorForCode(e.code, details, e);
}
