/**
 * One gRPC channel to boxd over its Unix socket, with the socket checked
 * before every call ({@link checkSocket}) and every failure turned into a
 * {@link BoxdError}.
 *
 * @module
 */
import { credentials, Metadata, status } from "@grpc/grpc-js";
import { BoxdClient } from "./gen/boxd/v1/boxd.js";
import { DaemonNotRunningError, ProtocolMismatchError, fromGrpc, isServiceError } from "./errors.js";
import { myUid } from "./paths.js";
import { checkSocket } from "./trust.js";
/** The API version this SDK speaks. */
export const PROTOCOL = "boxd.v1";
/** The largest gRPC message either way (boxd's bound). */
export const MAX_MESSAGE = 16 << 20;
/** Whether `e` says nothing answers on the socket (no file, or refused). */
export function isNotListening(e) {
    const code = e?.code;
    return code === "ENOENT" || code === "ECONNREFUSED" || code === "ENOTDIR";
}
/**
 * A channel to the daemon on `socket`. Cheap to keep; {@link close} it when
 * done (an open channel keeps Node's event loop alive only while calls run).
 */
export class Connection {
    /** The socket path as given (resolved to an absolute path). */
    socket;
    /** The generated client (for calls the facade does not wrap). */
    raw;
    uid = myUid();
    constructor(socket) {
        this.socket = socket;
        this.raw = new BoxdClient(`unix:${socket}`, credentials.createInsecure(), {
            "grpc.max_receive_message_length": MAX_MESSAGE,
            "grpc.max_send_message_length": MAX_MESSAGE,
            // Find a restarted daemon again quickly (as the Rust client's 50 ms
            // doubling to 500 ms), not after grpc's default of seconds.
            "grpc.initial_reconnect_backoff_ms": 50,
            "grpc.max_reconnect_backoff_ms": 500,
            // Large, as boxd's own (4 MiB per stream): output streams at speed.
            "grpc-node.flow_control_window": 4 << 20,
        });
    }
    /**
     * Checks the socket (see `trust.ts`) before anything is sent.
     *
     * @throws {UntrustedSocketError} when it must not be used.
     * @throws {DaemonNotRunningError} when there is no socket.
     */
    check() {
        try {
            checkSocket(this.socket, this.uid);
        }
        catch (e) {
            if (isNotListening(e)) {
                throw new DaemonNotRunningError(this.socket, `boxd is not running (nothing answers on ${this.socket}); start it with \`boxctl daemon start\``, { cause: e });
            }
            throw e;
        }
    }
    /** Calls unary method `name` with `request`; rejects with a {@link BoxdError}. */
    unary(name, request, options = {}) {
        return new Promise((resolve, reject) => {
            try {
                this.check();
            }
            catch (e) {
                reject(e);
                return;
            }
            const method = this.raw[name];
            method.call(this.raw, request, new Metadata(), options, (err, res) => {
                if (err !== null) {
                    reject(this.failure(err));
                }
                else {
                    resolve(res);
                }
            });
        });
    }
    /**
     * Opens a streaming call with `open` after the socket check (which
     * throws as {@link check} does).
     */
    stream(open) {
        this.check();
        return open(this.raw);
    }
    /**
     * `e` as a {@link BoxdError}; a connection that cannot be made at all is
     * a {@link DaemonNotRunningError}.
     */
    failure(e) {
        if (isServiceError(e) && e.code === status.UNAVAILABLE && /No connection established|connect ECONNREFUSED|connect ENOENT/.test(e.details)) {
            return new DaemonNotRunningError(this.socket, `boxd is not running (nothing answers on ${this.socket}): ${e.details}`, {
                cause: e,
            });
        }
        return fromGrpc(e);
    }
    /**
     * Asks the daemon what it is and checks it speaks {@link PROTOCOL}.
     *
     * @throws {ProtocolMismatchError} a daemon of another protocol.
     */
    async describe(options = {}) {
        const d = await this.unary("describe", {}, options);
        if (d.protocol !== PROTOCOL) {
            throw new ProtocolMismatchError(this.socket, d.protocol);
        }
        return d;
    }
    /** Closes the channel; calls under way fail with `CANCELLED`. */
    close() {
        this.raw.close();
    }
}
