/**
 * The TypeScript SDK of boxd: named, reusable sandboxes ("boxes") served by
 * a per-user daemon over gRPC on a Unix socket.
 *
 * @example
 * import { Boxd } from "@boxd/sdk";
 * const boxd = await Boxd.connect();
 * const box = await boxd.createOrReuse("demo", { image: "alpine:3.20" });
 * const r = await box.exec(["sh", "-c", "echo hello from $(uname -s)"]);
 * console.log(r.exitCode, r.text);
 * boxd.close();
 *
 * @module
 */
export { Boxd, type ConnectOptions, type CreateOptions, type Created, type EventsOptions } from "./client.js";
export { Box, type ExecOptions, type UpdateOptions } from "./box.js";
export { Execution, ExecResult, RECONNECT_WITHIN_MS, type AttachOptions, type ExitStatus, type OutputChunk, type OutputStream, type ReconnectEvent, type SignalName, type SpawnOptions, } from "./exec.js";
export { BoxFiles, type FileEntry } from "./files.js";
export { Connection, PROTOCOL } from "./connection.js";
export { resolvePaths, type Paths } from "./paths.js";
export { checkSocket } from "./trust.js";
export { START_TIMEOUT_MS, type StartOptions } from "./spawn.js";
export { AlreadyExistsError, BoxdError, CancelledError, DaemonNotRunningError, DataLossError, DeadlineExceededError, FailedPreconditionError, InvalidArgumentError, NotFoundError, PermissionDeniedError, ProtocolMismatchError, ResourceExhaustedError, UnavailableError, UnimplementedError, UntrustedSocketError, statusName, } from "./errors.js";
export type { BoxEvent, BoxInfo, BoxOptions, BoxState, IfExists, Mount, PortMapping, Secret } from "./types.js";
export * as wire from "./gen/boxd/v1/boxd.js";
