/**
 * Starting boxd on demand, as the Rust client does (`client/src/spawn.rs`):
 * `boxd --socket S --home H`, detached in a session of its own, its stderr
 * appended to `HOME/logs/boxd.stderr`; then wait until it answers, and
 * report at once, with the last line it logged, when it exits instead.
 *
 * @module
 */
import { Connection } from "./connection.js";
import type { DescribeResponse } from "./gen/boxd/v1/boxd.js";
import { type Paths } from "./paths.js";
/** How long to wait for a freshly started daemon to answer. */
export declare const START_TIMEOUT_MS = 20000;
/** A connection to a daemon that answered, and what it said of itself. */
export interface Running {
    connection: Connection;
    describe: DescribeResponse;
    /** Whether this call started it. */
    started: boolean;
}
/** How to start boxd when nothing answers. */
export interface StartOptions {
    /** The `boxd` binary (default: `BOXD_BIN`, else `boxd` on `PATH`). */
    boxdBin?: string;
    /** More arguments for boxd (`--engine namespace`, ...). */
    args?: string[];
    /** How long to wait for it to answer (default {@link START_TIMEOUT_MS}). */
    timeoutMs?: number;
}
/**
 * The daemon on `socket`, if one answers; `undefined` if nothing does. A
 * socket this user cannot trust, or a daemon of another protocol, is an
 * error, not a reason to start a second daemon.
 */
export declare function tryDescribe(socket: string, started?: boolean): Promise<Running | undefined>;
/**
 * Connects to the daemon of `paths`, starting it first when nothing
 * answers. Several processes may start one at once: one wins the home's
 * lock, the others exit at once, and every caller waits for the winner.
 *
 * @throws {DaemonNotRunningError} boxd exited (with its last log line) or
 *   did not answer in time, or could not be run.
 * @throws {UntrustedSocketError} the socket is not this user's.
 */
export declare function ensureRunning(paths: Paths, options?: StartOptions): Promise<Running>;
