/**
 * Errors: every failure of a call to boxd is a {@link BoxdError} whose class
 * says what kind it is (decided by the gRPC status code alone, as the Rust
 * client's `ErrorKind` does) and whose message is the daemon's own.
 *
 * @module
 */
import { status as Status, type ServiceError } from "@grpc/grpc-js";
/** The gRPC status codes, by name (`"NOT_FOUND"`, ...). */
export type StatusName = keyof typeof Status;
/** The name of a gRPC status code (`5` → `"NOT_FOUND"`). */
export declare function statusName(code: number): StatusName | "UNKNOWN";
/**
 * A failure reported by boxd (or by the connection to it). `code` is the
 * gRPC status code (`status.NOT_FOUND` is 5); `message` is what the daemon
 * said, unchanged.
 */
export declare class BoxdError extends Error {
    /** The gRPC status code (see `status` of `@grpc/grpc-js`). */
    readonly code: number;
    /** The daemon's message, without any prefix. */
    readonly details: string;
    constructor(code: number, details: string, options?: {
        cause?: unknown;
    });
    /** The code's name: `"NOT_FOUND"`, `"FAILED_PRECONDITION"`, ... */
    get codeName(): StatusName | "UNKNOWN";
}
/** No such box, exec, image, snapshot or path (`NOT_FOUND`). */
export declare class NotFoundError extends BoxdError {
}
/** A name that must be new is taken, or a spec differs (`ALREADY_EXISTS`). */
export declare class AlreadyExistsError extends BoxdError {
}
/** The request is malformed or out of bounds (`INVALID_ARGUMENT`, `OUT_OF_RANGE`). */
export declare class InvalidArgumentError extends BoxdError {
}
/**
 * The request does not fit the state of things: a box that is not running,
 * an exec that has exited (`FAILED_PRECONDITION`, `ABORTED`).
 */
export declare class FailedPreconditionError extends BoxdError {
}
/** The daemon refused this caller (`PERMISSION_DENIED`). */
export declare class PermissionDeniedError extends BoxdError {
}
/**
 * boxd is shutting down, or the connection to it broke (`UNAVAILABLE`).
 * Retrying later may work.
 */
export declare class UnavailableError extends BoxdError {
}
/** A full disk or a limit such as `max-boxes` (`RESOURCE_EXHAUSTED`). */
export declare class ResourceExhaustedError extends BoxdError {
}
/**
 * A call the daemon does not offer (it is older than this SDK) or a
 * feature its engine lacks (`UNIMPLEMENTED`).
 */
export declare class UnimplementedError extends BoxdError {
}
/** A deadline passed (`DEADLINE_EXCEEDED`). */
export declare class DeadlineExceededError extends BoxdError {
}
/** The call was cancelled (`CANCELLED`). */
export declare class CancelledError extends BoxdError {
}
/** Stdin or output this client needs is no longer kept (`DATA_LOSS`). */
export declare class DataLossError extends BoxdError {
}
/**
 * The socket, a directory or symlink on the way to it, or its directory is
 * not this user's (or is open to others): nothing was sent to it. Code
 * `PERMISSION_DENIED`.
 */
export declare class UntrustedSocketError extends BoxdError {
    /** The path at fault (the socket, its directory, a directory or symlink on the way). */
    readonly path: string;
    constructor(path: string, details: string);
}
/**
 * Nothing answers on the socket (and the SDK was told not to start boxd, or
 * starting it failed). Code `UNAVAILABLE`.
 */
export declare class DaemonNotRunningError extends BoxdError {
    /** The socket that was tried. */
    readonly socket: string;
    constructor(socket: string, details: string, options?: {
        cause?: unknown;
    });
}
/**
 * The daemon speaks another protocol than `boxd.v1` (a daemon and client of
 * different releases). Code `FAILED_PRECONDITION`.
 */
export declare class ProtocolMismatchError extends BoxdError {
    /** What the daemon said it speaks. */
    readonly protocol: string;
    constructor(socket: string, protocol: string);
}
/** The error of the class for `code`, with `details` as its message. */
export declare function errorForCode(code: number, details: string, cause?: unknown): BoxdError;
/** Whether `e` is a gRPC status error from `@grpc/grpc-js`. */
export declare function isServiceError(e: unknown): e is ServiceError;
/**
 * `e` as a {@link BoxdError}: a gRPC status becomes the class of its code
 * carrying the daemon's message (an `UNIMPLEMENTED` without one says the
 * daemon is older than this SDK); a `BoxdError` passes unchanged; anything
 * else is returned as it is.
 */
export declare function fromGrpc(e: unknown): unknown;
