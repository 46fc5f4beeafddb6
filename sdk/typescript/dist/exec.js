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
import { status } from "@grpc/grpc-js";
import { setTimeout as sleep } from "node:timers/promises";
import { BoxdError, CancelledError, DaemonNotRunningError, DataLossError, FailedPreconditionError, InvalidArgumentError, NotFoundError, UnavailableError, UntrustedSocketError, fromGrpc, } from "./errors.js";
/** How long a stream tries to reach the daemon again after losing it. */
export const RECONNECT_WITHIN_MS = 30_000;
const BACKOFF_FIRST_MS = 50;
const BACKOFF_MAX_MS = 500;
/** Acknowledge once this many output bytes were taken since the last acknowledgement. */
export const ACK_EVERY = 64 << 10;
/** Stdin bytes kept after they were sent, to resend after a reattach. */
export const STDIN_KEPT = 4 << 20;
/** Stdin bytes in flight beyond what the daemon says the command was given. */
export const STDIN_WINDOW = 1 << 20;
/** The most stdin one message carries. */
export const STDIN_CHUNK = 256 << 10;
function exitStatus(e) {
    return { exitCode: e.code ?? null, signal: e.signal ?? null, timedOut: e.timedOut, error: e.error };
}
/** Reads one message at a time from a grpc-js stream, telling when it is about to wait. */
class Reader {
    stream;
    ended = false;
    error;
    wake;
    constructor(stream) {
        this.stream = stream;
        stream.on("readable", () => this.poke());
        stream.on("end", () => {
            this.ended = true;
            this.poke();
        });
        stream.on("error", (e) => {
            this.error ??= e;
            this.poke();
        });
    }
    /** The next message; `null` at the end; throws the stream's error. */
    async next(onIdle) {
        for (;;) {
            const m = this.stream.destroyed ? null : this.stream.read();
            if (m !== null) {
                return m;
            }
            if (this.error !== undefined) {
                throw this.error;
            }
            if (this.ended) {
                return null;
            }
            onIdle?.();
            await new Promise((resolve) => {
                this.wake = resolve;
            });
        }
    }
    poke() {
        const wake = this.wake;
        this.wake = undefined;
        wake?.();
    }
}
/** Where the caller is in the output, what it acknowledged, and what a replay repeats. */
class Position {
    at;
    acked;
    skip = { stdout: 0, stderr: 0 };
    constructor(at) {
        this.at = { ...at };
        this.acked = { ...at };
    }
    /** The part of `data` the caller does not have yet, and an ack to send when due. */
    take(stream, data) {
        const dropped = Math.min(this.skip[stream], data.length);
        this.skip[stream] -= dropped;
        const rest = dropped > 0 ? data.subarray(dropped) : data;
        this.at[stream] += rest.length;
        let ack;
        if (this.at.stdout + this.at.stderr - (this.acked.stdout + this.acked.stderr) >= ACK_EVERY) {
            this.acked = { ...this.at };
            ack = { ...this.at };
        }
        return { data: rest, ack };
    }
    /** The caller is about to wait: an ack of what it took, if not acknowledged yet. */
    idle() {
        if (this.at.stdout === this.acked.stdout && this.at.stderr === this.acked.stderr) {
            return undefined;
        }
        this.acked = { ...this.at };
        return { ...this.at };
    }
    /** Reattached asking for `at`; the daemon's output begins at `from`. Returns the gaps. */
    resume(from) {
        const gaps = [];
        for (const s of ["stdout", "stderr"]) {
            if (from[s] > this.at[s]) {
                gaps.push({ stream: s, from: this.at[s], to: from[s] });
                this.at[s] = from[s];
                this.skip[s] = 0;
            }
            else {
                this.skip[s] = this.at[s] - from[s];
            }
        }
        this.acked = { ...this.at };
        return gaps;
    }
}
/** Stdin numbered as the daemon numbers it, the last {@link STDIN_KEPT} sent bytes kept. */
class StdinLog {
    /** Pieces from offset {@link start} on: sent ones (kept), then unsent ones. */
    pieces = [];
    start;
    /** Offset up to which the current call was sent stdin. */
    sent;
    /** Offset of the end of what was written. */
    end;
    constructor(at) {
        this.start = at;
        this.sent = at;
        this.end = at;
    }
    push(data) {
        for (let at = 0; at < data.length; at += STDIN_CHUNK) {
            this.pieces.push(data.subarray(at, Math.min(at + STDIN_CHUNK, data.length)));
        }
        this.end += data.length;
    }
    get unsent() {
        return this.end - this.sent;
    }
    /** The next piece to send (from {@link sent}), marked sent. */
    takeNext() {
        let off = this.start;
        for (const p of this.pieces) {
            if (this.sent < off + p.length) {
                const piece = p.subarray(this.sent - off);
                this.sent += piece.length;
                this.trim();
                return piece;
            }
            off += p.length;
        }
        return undefined;
    }
    trim() {
        while (this.pieces.length > 0) {
            const first = this.pieces[0];
            if (this.start + first.length > this.sent - STDIN_KEPT) {
                return;
            }
            this.start += first.length;
            this.pieces.shift();
        }
    }
    /**
     * A new call, whose command had `given` bytes: resend from there.
     * Returns the bytes resent.
     *
     * @throws {DataLossError} when bytes before what is kept are needed.
     */
    rewind(given) {
        if (given < this.start) {
            throw new DataLossError(status.DATA_LOSS, `the command was given ${given} bytes of stdin before boxd went away, and only bytes from ${this.start} on are still kept here: ${this.start - given} bytes of stdin are lost`);
        }
        if (given > this.sent) {
            // The daemon had stdin from elsewhere too: nothing of ours to resend,
            // and what follows is numbered from its offset.
            const unsent = this.pieces.length > 0 ? Buffer.concat(this.pieces).subarray(this.sent - this.start) : Buffer.alloc(0);
            this.pieces = [];
            this.start = this.sent = this.end = given;
            this.push(unsent);
            return 0;
        }
        const resent = this.sent - given;
        this.sent = given;
        return resent;
    }
}
/** Whether a failure of the exec stream is worth reattaching for. */
function reattachable(e) {
    const code = e.code;
    if (code === status.UNAVAILABLE) {
        return true;
    }
    // grpc-js reports a connection torn down under a stream as INTERNAL
    // ("Received RST_STREAM ...", "Session closed ...").
    const details = String(e.details ?? "");
    return code === status.INTERNAL && /RST_STREAM|[Ss]ession|[Cc]onnection|GOAWAY/.test(details);
}
/** Opens one `Exec` call with `first` and waits for `started`. */
async function openCall(conn, first, timeoutMs) {
    const call = conn.stream((raw) => raw.exec());
    const reader = new Reader(call);
    call.write(first);
    let timer;
    try {
        const first = reader.next();
        const r = await (timeoutMs === undefined
            ? first
            : Promise.race([
                first,
                new Promise((_, reject) => {
                    timer = setTimeout(() => reject(new UnavailableError(status.UNAVAILABLE, "boxd did not answer")), timeoutMs);
                }),
            ]));
        if (r === null) {
            throw new UnavailableError(status.UNAVAILABLE, "boxd closed the exec stream before it started");
        }
        if (r.event?.$case !== "started") {
            throw new BoxdError(status.INTERNAL, `expected \`started\`, boxd sent ${r.event?.$case ?? "an empty message"}`);
        }
        return { call, reader, started: r.event.value };
    }
    catch (e) {
        call.cancel();
        throw conn.failure(e);
    }
    finally {
        if (timer !== undefined) {
            clearTimeout(timer);
        }
    }
}
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
export class Execution {
    conn;
    options;
    /** The exec's id (for `attach`, `SendInput`, `SignalExec` from anywhere). */
    id;
    /** Milliseconds from the request to the process running. */
    launchMs;
    call;
    reader;
    position;
    stdin;
    /** Stdin offset the daemon says the command was given. */
    given;
    closeRequested = false;
    closeSent = false;
    controls = [];
    pending = [];
    writeBlocked = false;
    exited;
    /** Set once the exec's stream is over for good (exit, failure, cancel). */
    over;
    reading = false;
    done;
    settle;
    constructor(conn, opened, options) {
        this.conn = conn;
        this.options = options;
        this.id = opened.started.execId;
        this.launchMs = opened.started.launchMs;
        this.call = opened.call;
        this.reader = opened.reader;
        this.position = new Position({ stdout: opened.started.stdoutOffset, stderr: opened.started.stderrOffset });
        this.stdin = new StdinLog(opened.started.stdinOffset);
        this.given = opened.started.stdinOffset;
        this.done = new Promise((resolve, reject) => {
            this.settle = { resolve, reject };
        });
        // wait() reports the failure; nobody waiting is not an unhandled rejection.
        this.done.catch(() => undefined);
    }
    /**
     * Starts `start` (always `resumable`) and waits until it runs.
     *
     * @throws {NotFoundError} no such box; {@link FailedPreconditionError} a box that is not running.
     */
    static async start(conn, start, options = {}) {
        const opened = await openCall(conn, { msg: { $case: "start", value: { ...start, resumable: true } } });
        return new Execution(conn, opened, options);
    }
    /**
     * Attaches to a running exec by id, resumable, from the start of the
     * output it keeps (up to its last 1 MiB, replayed first).
     *
     * @throws {NotFoundError} no such exec.
     */
    static async attach(conn, execId, options = {}) {
        const opened = await openCall(conn, {
            msg: { $case: "attach", value: { execId, stdoutOffset: 0, stderrOffset: 0, resumable: true } },
        });
        return new Execution(conn, opened, options);
    }
    [Symbol.asyncIterator]() {
        return this.output();
    }
    /** The output, chunk by chunk, until the exit. See the class's comment on leaving early. */
    async *output() {
        if (this.reading) {
            throw new InvalidArgumentError(status.INVALID_ARGUMENT, "the output of an exec can be read by one reader at a time");
        }
        this.reading = true;
        try {
            for (;;) {
                const chunk = await this.nextChunk();
                if (chunk === null) {
                    return;
                }
                yield chunk;
            }
        }
        finally {
            this.reading = false;
            if (this.over === undefined) {
                this.cancel();
            }
        }
    }
    /**
     * Waits for the exit. Output not read by an iteration under way is taken
     * and discarded.
     *
     * @throws {BoxdError} the exec's stream failed for good (boxd did not
     *   come back within the reconnect time, the exec was cancelled, ...).
     */
    async wait() {
        if (!this.reading && this.over === undefined) {
            this.reading = true;
            try {
                while ((await this.nextChunk()) !== null) {
                    // Discarded.
                }
            }
            finally {
                this.reading = false;
            }
        }
        return this.done;
    }
    /**
     * Sends bytes (a string as UTF-8) to the command's stdin. Resolves once
     * they are on their way (after a reattach, if boxd is away meanwhile);
     * await it for backpressure.
     *
     * @throws {FailedPreconditionError} after {@link end}, or once the exec has ended.
     */
    write(data) {
        const buf = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
        if (this.closeRequested) {
            return Promise.reject(new FailedPreconditionError(status.FAILED_PRECONDITION, `the stdin of exec ${this.id} is closed`));
        }
        if (this.over !== undefined) {
            return Promise.reject(this.ended());
        }
        if (buf.length === 0) {
            return Promise.resolve();
        }
        this.stdin.push(buf);
        const upTo = this.stdin.end;
        const p = new Promise((resolve, reject) => this.pending.push({ upTo, resolve, reject }));
        this.flush();
        return p;
    }
    /** Closes the command's stdin (EOF), after what was written. Idempotent. */
    end() {
        if (!this.closeRequested && this.over === undefined) {
            this.closeRequested = true;
            this.flush();
        }
        return Promise.resolve();
    }
    /**
     * Sends the command a signal (`"SIGTERM"`, `"TERM"`, `15`). One sent while
     * boxd is away is delivered after the reattach.
     */
    signal(signal = "SIGTERM") {
        return this.control({ msg: { $case: "signal", value: { signal: String(signal) } } });
    }
    /** Resizes the exec's terminal (a `tty` exec). */
    resize(rows, cols) {
        return this.control({ msg: { $case: "resize", value: { rows, cols } } });
    }
    /** Ends this client's stream at once: the daemon kills a non-detached exec. */
    cancel() {
        if (this.over !== undefined) {
            return;
        }
        this.finish(new CancelledError(status.CANCELLED, `the stream of exec ${this.id} was cancelled`));
        this.call?.cancel();
        this.call = undefined;
    }
    control(msg) {
        if (this.over !== undefined) {
            return Promise.reject(this.ended());
        }
        const p = new Promise((resolve, reject) => this.controls.push({ msg, resolve, reject }));
        this.flush();
        return p;
    }
    ended() {
        if (this.exited !== undefined) {
            return new FailedPreconditionError(status.FAILED_PRECONDITION, `exec ${this.id} has exited`);
        }
        return this.over instanceof BoxdError
            ? this.over
            : new CancelledError(status.CANCELLED, `the stream of exec ${this.id} has ended`);
    }
    /** The exec is over: settle {@link wait} and everything pending. */
    finish(result) {
        if (this.over !== undefined) {
            return;
        }
        this.over = result;
        if (result instanceof BoxdError) {
            this.settle.reject(result);
        }
        else {
            this.exited = result;
            this.settle.resolve(result);
        }
        const e = this.ended();
        for (const p of this.pending.splice(0)) {
            p.reject(e);
        }
        for (const c of this.controls.splice(0)) {
            c.reject(e);
        }
    }
    /** Sends what may go out now on the current call, in order. */
    flush() {
        const call = this.call;
        if (call === undefined || this.writeBlocked || this.over !== undefined) {
            return;
        }
        for (;;) {
            let msg;
            let control;
            if (this.stdin.unsent > 0) {
                if (this.stdin.sent - this.given < STDIN_WINDOW) {
                    const piece = this.stdin.takeNext();
                    if (piece !== undefined) {
                        msg = { msg: { $case: "stdin", value: piece } };
                    }
                }
            }
            else if (this.closeRequested && !this.closeSent) {
                this.closeSent = true;
                msg = { msg: { $case: "closeStdin", value: true } };
            }
            if (msg === undefined) {
                control = this.controls.shift();
                msg = control?.msg;
            }
            if (msg === undefined) {
                return;
            }
            const more = call.write(msg);
            control?.resolve();
            while (this.pending.length > 0 && this.pending[0].upTo <= this.stdin.sent) {
                this.pending.shift().resolve();
            }
            if (!more) {
                this.writeBlocked = true;
                call.once("drain", () => {
                    if (this.call === call) {
                        this.writeBlocked = false;
                        this.flush();
                    }
                });
                return;
            }
        }
    }
    sendAck(ack) {
        if (ack !== undefined && this.call !== undefined) {
            this.call.write({ msg: { $case: "ack", value: { stdoutOffset: ack.stdout, stderrOffset: ack.stderr } } });
        }
    }
    /** The next output chunk; `null` after the exit. Reattaches when the stream breaks. */
    async nextChunk() {
        for (;;) {
            if (this.over !== undefined) {
                if (this.exited !== undefined) {
                    return null;
                }
                throw this.over;
            }
            let failure;
            try {
                const r = await this.reader.next(() => this.sendAck(this.position.idle()));
                if (this.over !== undefined) {
                    continue;
                }
                if (r === null) {
                    failure = new UnavailableError(status.UNAVAILABLE, "boxd ended the exec stream without an exit");
                }
                else {
                    const ev = r.event;
                    switch (ev?.$case) {
                        case "stdout":
                        case "stderr": {
                            const { data, ack } = this.position.take(ev.$case, ev.value);
                            this.sendAck(ack);
                            if (data.length > 0) {
                                return { stream: ev.$case, data };
                            }
                            continue;
                        }
                        case "stdinOffset":
                            this.given = ev.value;
                            this.flush();
                            continue;
                        case "exit":
                            this.call?.end();
                            this.finish(exitStatus(ev.value));
                            return null;
                        default:
                            failure = new BoxdError(status.INTERNAL, "unexpected message on the exec stream");
                            this.finish(failure);
                            this.call?.cancel();
                            throw failure;
                    }
                }
            }
            catch (e) {
                if (this.over !== undefined) {
                    continue;
                }
                failure = e;
            }
            await this.reattach(failure);
        }
    }
    /** The call failed with `failure`: reattach if reconnecting, else end with it. */
    async reattach(failure) {
        const error = this.conn.failure(failure);
        if (this.options.reconnect === false || !reattachable(failure)) {
            this.call?.cancel();
            this.finish(error instanceof BoxdError ? error : new BoxdError(status.UNKNOWN, String(error)));
            throw this.over;
        }
        this.call?.cancel();
        this.call = undefined;
        this.writeBlocked = false;
        const message = error instanceof Error ? error.message : String(error);
        this.options.onReconnect?.({ kind: "lost", execId: this.id, error: message });
        const within = this.options.reconnectWithinMs ?? RECONNECT_WITHIN_MS;
        const began = Date.now();
        const deadline = began + within;
        let pause = BACKOFF_FIRST_MS;
        let last = "";
        for (let attempts = 1;; attempts++) {
            try {
                const resent = await this.tryReattach(Math.max(1, deadline - Date.now()));
                this.options.onReconnect?.({ kind: "reattached", execId: this.id, afterMs: Date.now() - began, attempts, stdinResent: resent });
                return;
            }
            catch (e) {
                if (this.over !== undefined) {
                    return;
                }
                if (!(e instanceof DaemonNotRunningError || (e instanceof BoxdError && reattachable(e)))) {
                    this.finish(e instanceof BoxdError ? e : new BoxdError(status.UNKNOWN, String(e)));
                    throw this.over;
                }
                last = e.message;
            }
            const left = deadline - Date.now();
            if (left <= 0) {
                this.finish(new UnavailableError(status.UNAVAILABLE, `${message}; could not reattach to exec ${this.id} within ${Math.round(within / 1000)} s: ${last}`));
                throw this.over;
            }
            await sleep(Math.min(pause, left));
            pause = Math.min(pause * 2, BACKOFF_MAX_MS);
        }
    }
    /** One attempt: check the socket, attach from our offsets, resend stdin. Returns the bytes resent. */
    async tryReattach(timeoutMs) {
        const at = this.position.at;
        let opened;
        try {
            opened = await openCall(this.conn, { msg: { $case: "attach", value: { execId: this.id, stdoutOffset: at.stdout, stderrOffset: at.stderr, resumable: true } } }, timeoutMs);
        }
        catch (e) {
            if (e instanceof NotFoundError) {
                throw new NotFoundError(status.NOT_FOUND, `exec ${this.id} is gone: the daemon that came back does not know it`, { cause: e });
            }
            if (e instanceof UntrustedSocketError) {
                throw e;
            }
            throw fromGrpc(e);
        }
        if (this.over !== undefined) {
            opened.call.cancel();
            return 0;
        }
        if (opened.started.execId !== this.id) {
            opened.call.cancel();
            throw new BoxdError(status.INTERNAL, `asked to attach to exec ${this.id}, boxd attached to ${opened.started.execId}`);
        }
        let resent;
        try {
            resent = this.stdin.rewind(opened.started.stdinOffset);
        }
        catch (e) {
            opened.call.cancel();
            throw e;
        }
        for (const g of this.position.resume({ stdout: opened.started.stdoutOffset, stderr: opened.started.stderrOffset })) {
            this.options.onReconnect?.({ kind: "gap", execId: this.id, ...g });
        }
        this.call = opened.call;
        this.reader = opened.reader;
        this.given = opened.started.stdinOffset;
        this.closeSent = false;
        this.flush();
        return resent;
    }
}
/** What a finished exec gave: its output, whole, and how it ended. */
export class ExecResult {
    stdout;
    stderr;
    exitCode;
    signal;
    timedOut;
    error;
    constructor(
    /** Everything the command wrote to stdout, byte for byte. */
    stdout, 
    /** Everything it wrote to stderr. */
    stderr, exit) {
        this.stdout = stdout;
        this.stderr = stderr;
        this.exitCode = exit.exitCode;
        this.signal = exit.signal;
        this.timedOut = exit.timedOut;
        this.error = exit.error;
    }
    /** stdout as UTF-8 text. */
    get text() {
        return this.stdout.toString("utf8");
    }
    /** stderr as UTF-8 text. */
    get stderrText() {
        return this.stderr.toString("utf8");
    }
    /** Whether the command exited with code 0. */
    get ok() {
        return this.exitCode === 0;
    }
}
/**
 * Runs `execution` to its end, feeding it `stdin` (then EOF) while its
 * output is collected.
 */
export async function collect(execution, stdin) {
    let feedError;
    const feeding = stdin === undefined
        ? Promise.resolve()
        : (async () => {
            await execution.write(stdin);
            await execution.end();
        })().catch((e) => {
            feedError = e;
        });
    const out = [];
    const err = [];
    for await (const chunk of execution) {
        (chunk.stream === "stdout" ? out : err).push(chunk.data);
    }
    const exit = await execution.wait();
    await feeding;
    // A command that exits without reading all its stdin is not a failure
    // of the exec; any other failure to feed it is.
    if (feedError !== undefined && !(feedError instanceof FailedPreconditionError)) {
        throw feedError;
    }
    return new ExecResult(Buffer.concat(out), Buffer.concat(err), exit);
}
