/**
 * One gRPC channel to boxd over its Unix socket, with the socket checked
 * before every call ({@link checkSocket}) and every failure turned into a
 * {@link BoxdError}.
 *
 * @module
 */

import { credentials, Metadata, status, type CallOptions, type ServiceError } from "@grpc/grpc-js";

import { BoxdClient, type DescribeResponse } from "./gen/boxd/v1/boxd.js";
import { DaemonNotRunningError, ProtocolMismatchError, fromGrpc, isServiceError } from "./errors.js";
import { myUid } from "./paths.js";
import { checkSocket } from "./trust.js";

/** The API version this SDK speaks. */
export const PROTOCOL = "boxd.v1";

/** The largest gRPC message either way (boxd's bound). */
export const MAX_MESSAGE = 16 << 20;

/** The unary methods of the generated client, by name. */
type UnaryName = {
  [K in keyof BoxdClient]: BoxdClient[K] extends (
    req: infer _Req,
    md: Metadata,
    opts: Partial<CallOptions>,
    cb: (err: ServiceError | null, res: infer _Res) => void,
  ) => unknown
    ? K
    : never;
}[keyof BoxdClient];

type Req<K extends UnaryName> = BoxdClient[K] extends (
  req: infer R,
  md: Metadata,
  opts: Partial<CallOptions>,
  cb: (err: ServiceError | null, res: infer _S) => void,
) => unknown
  ? R
  : never;

type Res<K extends UnaryName> = BoxdClient[K] extends (
  req: infer _R,
  md: Metadata,
  opts: Partial<CallOptions>,
  cb: (err: ServiceError | null, res: infer S) => void,
) => unknown
  ? S
  : never;

/** Whether `e` says nothing answers on the socket (no file, or refused). */
export function isNotListening(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  return code === "ENOENT" || code === "ECONNREFUSED" || code === "ENOTDIR";
}

/**
 * A channel to the daemon on `socket`. Cheap to keep; {@link close} it when
 * done (an open channel keeps Node's event loop alive only while calls run).
 */
export class Connection {
  /** The socket path as given (resolved to an absolute path). */
  readonly socket: string;
  /** The generated client (for calls the facade does not wrap). */
  readonly raw: BoxdClient;
  private readonly uid = myUid();

  constructor(socket: string) {
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
  check(): void {
    try {
      checkSocket(this.socket, this.uid);
    } catch (e) {
      if (isNotListening(e)) {
        throw new DaemonNotRunningError(
          this.socket,
          `boxd is not running (nothing answers on ${this.socket}); start it with \`boxctl daemon start\``,
          { cause: e },
        );
      }
      throw e;
    }
  }

  /** Calls unary method `name` with `request`; rejects with a {@link BoxdError}. */
  unary<K extends UnaryName>(name: K, request: Req<K>, options: Partial<CallOptions> = {}): Promise<Res<K>> {
    return new Promise((resolve, reject) => {
      try {
        this.check();
      } catch (e) {
        reject(e);
        return;
      }
      const method = this.raw[name] as unknown as (
        req: Req<K>,
        md: Metadata,
        opts: Partial<CallOptions>,
        cb: (err: ServiceError | null, res: Res<K>) => void,
      ) => unknown;
      method.call(this.raw, request, new Metadata(), options, (err, res) => {
        if (err !== null) {
          reject(this.failure(err));
        } else {
          resolve(res);
        }
      });
    });
  }

  /**
   * Opens a streaming call with `open` after the socket check (which
   * throws as {@link check} does).
   */
  stream<T>(open: (raw: BoxdClient) => T): T {
    this.check();
    return open(this.raw);
  }

  /**
   * `e` as a {@link BoxdError}; a connection that cannot be made at all is
   * a {@link DaemonNotRunningError}.
   */
  failure(e: unknown): unknown {
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
  async describe(options: Partial<CallOptions> = {}): Promise<DescribeResponse> {
    const d = await this.unary("describe", {}, options);
    if (d.protocol !== PROTOCOL) {
      throw new ProtocolMismatchError(this.socket, d.protocol);
    }
    return d;
  }

  /** Closes the channel; calls under way fail with `CANCELLED`. */
  close(): void {
    this.raw.close();
  }
}
