/**
 * Running commands in a box: the bidirectional `Exec` call, resumable, as
 * the Rust client drives it (`client/src/exec/`).
 *
 * Every exec is started (or attached) `resumable`: the SDK tells the
 * daemon which output its caller has taken (acknowledgements at most once
 * per 64 KiB taken, plus once whenever the caller waits with something
 * unacknowledged) and keeps the last 4 MiB of stdin it sent. When the
 * connection breaks (boxd restarted, crashed, upgraded) the stream dials
 * the socket again for up to 30 s (50 ms backoff doubling to 500 ms),
 * checks it as before every call, attaches by exec id from the offsets the
 * caller has and resends the stdin the command did not get. Execs outlive
 * boxd by design, so a restart costs them nothing.
 *
 * Invariants:
 * - the caller gets each byte of each stream at most once, in order;
 *   bytes the daemon no longer keeps are reported (`onReconnect` with a
 *   `gap`), never skipped silently;
 * - nothing is acknowledged that the caller has not taken;
 * - reconnecting never starts a daemon and never trusts a socket the
 *   checks refuse.
 *
 * @module
 */
import type { Connection } from "./connection.js";
import type { ExecStart } from "./gen/boxd/v1/boxd.js";
/** How long a stream tries to reach the daemon again after losing it. */
export declare const RECONNECT_WITHIN_MS = 30000;
/** Acknowledge once this many output bytes were taken since the last acknowledgement. */
export declare const ACK_EVERY: number;
/** Stdin bytes kept after they were sent, to resend after a reattach. */
export declare const STDIN_KEPT: number;
/** Stdin bytes in flight beyond what the daemon says the command was given. */
export declare const STDIN_WINDOW: number;
/** The most stdin one message carries. */
export declare const STDIN_CHUNK: number;
/** One of an exec's output streams. */
export type OutputStream = "stdout" | "stderr";
/** A piece of an exec's output, in the order the command wrote it per stream. */
export interface OutputChunk {
    stream: OutputStream;
    data: Buffer;
}
/** How an exec ended. */
export interface ExitStatus {
    /** The exit code, when the process exited (`null` when a signal killed it). */
    exitCode: number | null;
    /** The signal number, when a signal killed it. */
    signal: number | null;
    /** Whether `timeoutMs` fired (the command got SIGKILL). */
    timedOut: boolean;
    /**
     * Set when the engine could not run the command (`exitCode` 126: cannot
     * execute, 127: not found) or the command died because its box ended.
     */
    error: string;
}
/** What {@link Execution} went through while reconnecting. */
export type ReconnectEvent = {
    kind: "lost";
    execId: string;
    error: string;
} | {
    kind: "reattached";
    execId: string;
    afterMs: number;
    attempts: number;
    stdinResent: number;
} | {
    kind: "gap";
    execId: string;
    stream: OutputStream;
    from: number;
    to: number;
};
/** Options of a streaming exec. */
export interface SpawnOptions {
    /** Give the command stdin (default true; otherwise it reads /dev/null). */
    stdin?: boolean;
    /** Added to the box's environment. */
    env?: Record<string, string>;
    /** The working directory (default: the box's). */
    cwd?: string;
    /** Killed (SIGKILL) after this long; 0 or unset: no limit. */
    timeoutMs?: number;
    /** `USER[:GROUP]` or `UID[:GID]` (default: the image's user, else box root). */
    user?: string;
    /** Run on a pseudo-terminal of this size (output arrives as stdout). */
    tty?: {
        rows: number;
        cols: number;
    };
    /** Keep running when this client goes away (attach later by id). */
    detach?: boolean;
    /** Reattach after losing the daemon (default true). */
    reconnect?: boolean;
    /** How long a reattach tries (default {@link RECONNECT_WITHIN_MS}). */
    reconnectWithinMs?: number;
    /** Told when the connection is lost, when it is back, and of each output gap. */
    onReconnect?: (event: ReconnectEvent) => void;
}
/** Options of {@link Execution.attach}. */
export type AttachOptions = Pick<SpawnOptions, "reconnect" | "reconnectWithinMs" | "onReconnect">;
/** A signal by name (`"SIGTERM"`, `"TERM"`) or number (`15`). */
export type SignalName = string | number;
/**
 * A running exec: iterate it (`for await (const chunk of execution)`) for
 * its output, {@link write} and {@link end} its stdin, {@link signal} and
 * {@link resize} it, {@link wait} for its exit.
 *
 * Leaving the iteration early (`break`, an exception) ends the exec's
 * stream, which kills a non-detached exec, as Node's own streams are
 * destroyed by a `break`. {@link wait} without iterating takes (and
 * discards) the output, so the command is never held back by it.
 */
export declare class Execution implements AsyncIterable<OutputChunk> {
    private readonly conn;
    private readonly options;
    /** The exec's id (for `attach`, `SendInput`, `SignalExec` from anywhere). */
    readonly id: string;
    /** Milliseconds from the request to the process running. */
    readonly launchMs: number;
    private call;
    private reader;
    private readonly position;
    private readonly stdin;
    /** Stdin offset the daemon says the command was given. */
    private given;
    private closeRequested;
    private closeSent;
    private readonly controls;
    private readonly pending;
    private writeBlocked;
    private exited;
    /** Set once the exec's stream is over for good (exit, failure, cancel). */
    private over;
    private reading;
    private readonly done;
    private settle;
    private constructor();
    /**
     * Starts `start` (always `resumable`) and waits until it runs.
     *
     * @throws {NotFoundError} no such box; {@link FailedPreconditionError} a box that is not running.
     */
    static start(conn: Connection, start: ExecStart, options?: AttachOptions): Promise<Execution>;
    /**
     * Attaches to a running exec by id, resumable, from the start of the
     * output it keeps (up to its last 1 MiB, replayed first).
     *
     * @throws {NotFoundError} no such exec.
     */
    static attach(conn: Connection, execId: string, options?: AttachOptions): Promise<Execution>;
    [Symbol.asyncIterator](): AsyncGenerator<OutputChunk, void, undefined>;
    /** The output, chunk by chunk, until the exit. See the class's comment on leaving early. */
    output(): AsyncGenerator<OutputChunk, void, undefined>;
    /**
     * Waits for the exit. Output not read by an iteration under way is taken
     * and discarded.
     *
     * @throws {BoxdError} the exec's stream failed for good (boxd did not
     *   come back within the reconnect time, the exec was cancelled, ...).
     */
    wait(): Promise<ExitStatus>;
    /**
     * Sends bytes (a string as UTF-8) to the command's stdin. Resolves once
     * they are on their way (after a reattach, if boxd is away meanwhile);
     * await it for backpressure.
     *
     * @throws {FailedPreconditionError} after {@link end}, or once the exec has ended.
     */
    write(data: Uint8Array | string): Promise<void>;
    /** Closes the command's stdin (EOF), after what was written. Idempotent. */
    end(): Promise<void>;
    /**
     * Sends the command a signal (`"SIGTERM"`, `"TERM"`, `15`). One sent while
     * boxd is away is delivered after the reattach.
     */
    signal(signal?: SignalName): Promise<void>;
    /** Resizes the exec's terminal (a `tty` exec). */
    resize(rows: number, cols: number): Promise<void>;
    /** Ends this client's stream at once: the daemon kills a non-detached exec. */
    cancel(): void;
    private control;
    private ended;
    /** The exec is over: settle {@link wait} and everything pending. */
    private finish;
    /** Sends what may go out now on the current call, in order. */
    private flush;
    private sendAck;
    /** The next output chunk; `null` after the exit. Reattaches when the stream breaks. */
    private nextChunk;
    /** The call failed with `failure`: reattach if reconnecting, else end with it. */
    private reattach;
    /** One attempt: check the socket, attach from our offsets, resend stdin. Returns the bytes resent. */
    private tryReattach;
}
/** What a finished exec gave: its output, whole, and how it ended. */
export declare class ExecResult implements ExitStatus {
    /** Everything the command wrote to stdout, byte for byte. */
    readonly stdout: Buffer;
    /** Everything it wrote to stderr. */
    readonly stderr: Buffer;
    readonly exitCode: number | null;
    readonly signal: number | null;
    readonly timedOut: boolean;
    readonly error: string;
    constructor(
    /** Everything the command wrote to stdout, byte for byte. */
    stdout: Buffer, 
    /** Everything it wrote to stderr. */
    stderr: Buffer, exit: ExitStatus);
    /** stdout as UTF-8 text. */
    get text(): string;
    /** stderr as UTF-8 text. */
    get stderrText(): string;
    /** Whether the command exited with code 0. */
    get ok(): boolean;
}
/**
 * Runs `execution` to its end, feeding it `stdin` (then EOF) while its
 * output is collected.
 */
export declare function collect(execution: Execution, stdin: Uint8Array | string | undefined): Promise<ExecResult>;
