/**
 * The client: finds (or starts) boxd, and reaches every box through it.
 *
 * @module
 */
import { Box } from "./box.js";
import { status } from "@grpc/grpc-js";
import { BoxdError, DaemonNotRunningError } from "./errors.js";
import { Execution } from "./exec.js";
import { resolvePaths } from "./paths.js";
import { ensureRunning, tryDescribe } from "./spawn.js";
import { iterate } from "./stream.js";
import { boxEvent, boxInfo, ifExistsWire, specOf } from "./types.js";
/**
 * A client of boxd. Get one with {@link Boxd.connect}; {@link close} it when
 * done.
 *
 * @example
 * const boxd = await Boxd.connect();
 * const box = await boxd.createOrReuse("demo", { image: "alpine:3.20" });
 * console.log((await box.exec(["uname", "-a"])).text);
 * boxd.close();
 */
export class Boxd {
    connection;
    daemon;
    started;
    constructor(
    /** The channel (its `raw` is the generated client, for calls this facade does not wrap). */
    connection, 
    /** What the daemon said of itself when connecting. */
    daemon, 
    /** Whether connecting started boxd. */
    started) {
        this.connection = connection;
        this.daemon = daemon;
        this.started = started;
    }
    /**
     * Connects to boxd: resolves the socket (`resolvePaths`), checks it can
     * be trusted, asks `Describe` and checks the protocol is `boxd.v1`;
     * starts boxd first when nothing answers (unless `start: false`).
     *
     * @throws {UntrustedSocketError} the socket, its directory or the path to it is not this user's.
     * @throws {DaemonNotRunningError} nothing answers (and boxd was not, or could not be, started).
     * @throws {ProtocolMismatchError} the daemon speaks another protocol.
     */
    static async connect(options = {}) {
        const paths = resolvePaths(options);
        if (options.start === false) {
            const running = await tryDescribe(paths.socket);
            if (running === undefined) {
                throw new DaemonNotRunningError(paths.socket, `boxd is not running (nothing answers on ${paths.socket}); start it with \`boxctl daemon start\``);
            }
            return new Boxd(running.connection, running.describe, false);
        }
        const running = await ensureRunning(paths, options);
        return new Boxd(running.connection, running.describe, running.started);
    }
    /** The socket this client talks to. */
    get socket() {
        return this.connection.socket;
    }
    /** What the daemon is now: versions, pid, engine, isolation, capabilities. */
    async describe() {
        return this.connection.describe();
    }
    /** Every box. */
    async listBoxes() {
        return (await this.connection.unary("listBoxes", {})).boxes.map(boxInfo);
    }
    /** The box `name`, as it is now. @throws {NotFoundError} no such box. */
    async getBox(name) {
        const box = new Box(this.connection, name);
        await box.inspect();
        return box;
    }
    /** A handle on box `name` without asking boxd anything (calls fail later if there is none). */
    box(name) {
        return new Box(this.connection, name);
    }
    /**
     * Creates box `name` or reuses the one of that name (as it is: what the
     * request asks differently is in `warnings`), and starts it unless
     * `start: false`. Returns the box; {@link create} says more.
     */
    async createOrReuse(name, options) {
        return (await this.create(name, options)).box;
    }
    /**
     * Creates box `name` (see {@link CreateOptions.ifExists} for an existing
     * one) and starts it unless `start: false`. An image the daemon lacks is
     * pulled first.
     */
    async create(name, options) {
        const r = await this.connection.unary("createBox", {
            name,
            spec: specOf(options),
            ifExists: ifExistsWire(options.ifExists ?? "reuse"),
        });
        const box = new Box(this.connection, name, r.box === undefined ? undefined : boxInfo(r.box));
        if (options.start ?? true) {
            await box.start();
        }
        return { box, created: r.created, replaced: r.replaced, warnings: r.warnings };
    }
    /** A new box `name` from an archive `Box.export` wrote (`allowNet`, `ports` as for a create). */
    async importBox(path, name, options = {}) {
        const spec = specOf({ image: "", ...options });
        const r = await this.connection.unary("importBox", { path, name, allowNet: spec.allowNet, ports: spec.ports });
        return { box: new Box(this.connection, name, r.box === undefined ? undefined : boxInfo(r.box)), warnings: r.warnings };
    }
    /**
     * Box state changes as an async iterable, until the iteration ends (a
     * `break` cancels the watch).
     *
     * @example
     * for await (const e of boxd.events({ initial: true })) {
     *   if (e.synced) console.log("that was every box");
     *   else console.log(e.name, e.state);
     * }
     */
    events(options = {}) {
        const call = this.connection.stream((raw) => raw.watchBoxes({ initial: options.initial ?? false, sinceMs: options.sinceMs ?? 0, untilMs: options.untilMs ?? 0 }));
        return iterate(this.connection, call, boxEvent);
    }
    /** Every exec boxd knows (of box `boxName` only, when given). */
    async execs(boxName = "") {
        return (await this.connection.unary("listExecs", { boxName })).execs;
    }
    /** Attaches to exec `execId` (from any client), from the start of the output it keeps. */
    async attach(execId, options = {}) {
        return Execution.attach(this.connection, execId, options);
    }
    /** Samples of every running box (or those named): one, or one per `intervalMs` while iterated. */
    stats(options = {}) {
        const call = this.connection.stream((raw) => raw.boxStats({ names: options.names ?? [], stream: options.stream ?? false, intervalMs: options.intervalMs ?? 0 }));
        return iterate(this.connection, call, (m) => m.boxes);
    }
    /** The images boxd has. */
    async listImages() {
        return (await this.connection.unary("listImages", {})).images;
    }
    /** An image by reference or digest. @throws {NotFoundError} none. */
    async inspectImage(reference) {
        return this.connection.unary("inspectImage", { reference });
    }
    /** Pulls `reference`; `onProgress` sees each event. Returns the image. */
    async pullImage(reference, onProgress) {
        const call = this.connection.stream((raw) => raw.pullImage({ reference }));
        for await (const ev of iterate(this.connection, call, (m) => m.event)) {
            if (ev === undefined) {
                continue;
            }
            onProgress?.(ev);
            if (ev.$case === "done") {
                return ev.value;
            }
        }
        throw new BoxdError(status.INTERNAL, "boxd ended the pull without a result");
    }
    /** Imports an OCI layout directory or a `docker save` tarball (absolute host path). */
    async importImage(path, reference = "") {
        return this.connection.unary("importImage", { path, reference });
    }
    /** Removes (untags) an image; `force` even when boxes were made from it. */
    async removeImage(reference, options = {}) {
        return this.connection.unary("removeImage", { reference, force: options.force ?? false });
    }
    /** Closes the channel; calls under way fail. */
    close() {
        this.connection.close();
    }
}
