/**
 * One gRPC channel to boxd over its Unix socket, with the socket checked
 * before every call ({@link checkSocket}) and every failure turned into a
 * {@link BoxdError}.
 *
 * @module
 */
import { Metadata, type CallOptions, type ServiceError } from "@grpc/grpc-js";
import { BoxdClient, type DescribeResponse } from "./gen/boxd/v1/boxd.js";
/** The API version this SDK speaks. */
export declare const PROTOCOL = "boxd.v1";
/** The largest gRPC message either way (boxd's bound). */
export declare const MAX_MESSAGE: number;
/** The unary methods of the generated client, by name. */
type UnaryName = {
    [K in keyof BoxdClient]: BoxdClient[K] extends (req: infer _Req, md: Metadata, opts: Partial<CallOptions>, cb: (err: ServiceError | null, res: infer _Res) => void) => unknown ? K : never;
}[keyof BoxdClient];
type Req<K extends UnaryName> = BoxdClient[K] extends (req: infer R, md: Metadata, opts: Partial<CallOptions>, cb: (err: ServiceError | null, res: infer _S) => void) => unknown ? R : never;
type Res<K extends UnaryName> = BoxdClient[K] extends (req: infer _R, md: Metadata, opts: Partial<CallOptions>, cb: (err: ServiceError | null, res: infer S) => void) => unknown ? S : never;
/** Whether `e` says nothing answers on the socket (no file, or refused). */
export declare function isNotListening(e: unknown): boolean;
/**
 * A channel to the daemon on `socket`. Cheap to keep; {@link close} it when
 * done (an open channel keeps Node's event loop alive only while calls run).
 */
export declare class Connection {
    /** The socket path as given (resolved to an absolute path). */
    readonly socket: string;
    /** The generated client (for calls the facade does not wrap). */
    readonly raw: BoxdClient;
    private readonly uid;
    constructor(socket: string);
    /**
     * Checks the socket (see `trust.ts`) before anything is sent.
     *
     * @throws {UntrustedSocketError} when it must not be used.
     * @throws {DaemonNotRunningError} when there is no socket.
     */
    check(): void;
    /** Calls unary method `name` with `request`; rejects with a {@link BoxdError}. */
    unary<K extends UnaryName>(name: K, request: Req<K>, options?: Partial<CallOptions>): Promise<Res<K>>;
    /**
     * Opens a streaming call with `open` after the socket check (which
     * throws as {@link check} does).
     */
    stream<T>(open: (raw: BoxdClient) => T): T;
    /**
     * `e` as a {@link BoxdError}; a connection that cannot be made at all is
     * a {@link DaemonNotRunningError}.
     */
    failure(e: unknown): unknown;
    /**
     * Asks the daemon what it is and checks it speaks {@link PROTOCOL}.
     *
     * @throws {ProtocolMismatchError} a daemon of another protocol.
     */
    describe(options?: Partial<CallOptions>): Promise<DescribeResponse>;
    /** Closes the channel; calls under way fail with `CANCELLED`. */
    close(): void;
}
export {};
