/**
 * One box by name: its lifecycle, execs, files, ports, stats and snapshots.
 *
 * @module
 */
import { status } from "@grpc/grpc-js";
import { NotFoundError } from "./errors.js";
import { Execution, collect } from "./exec.js";
import { BoxFiles } from "./files.js";
import { iterate } from "./stream.js";
import { boxInfo } from "./types.js";
/** The start of an exec of `argv` in `box` with `o`. */
export function execStart(box, argv, o, stdin) {
    return {
        boxName: box,
        command: argv[0] ?? "",
        args: argv.slice(1),
        env: o.env ?? {},
        workingDir: o.cwd ?? "",
        timeoutMs: o.timeoutMs ?? 0,
        stdin,
        tty: o.tty !== undefined,
        ttySize: o.tty,
        detach: o.detach ?? false,
        resumable: true,
        user: o.user ?? "",
    };
}
/**
 * A box, by name. Methods call boxd each time; {@link info} is what boxd
 * said the last time this object asked.
 */
export class Box {
    conn;
    name;
    /** Its files: read, write, list, copy in and out. */
    files;
    /** What boxd last said of this box (refresh with {@link inspect}). */
    info;
    constructor(conn, 
    /** The box's name. */
    name, info) {
        this.conn = conn;
        this.name = name;
        this.files = new BoxFiles(conn, name);
        this.info = info;
    }
    /** The box as boxd describes it now. @throws {NotFoundError} no such box. */
    async inspect() {
        this.info = boxInfo(await this.conn.unary("inspectBox", { name: this.name }));
        return this.info;
    }
    /** Starts the box (a running box: nothing to do, `bootMs` 0). */
    async start() {
        const r = await this.conn.unary("startBox", { name: this.name });
        this.info = r.box === undefined ? undefined : boxInfo(r.box);
        return { info: this.info, bootMs: r.bootMs };
    }
    /** Stops the box: every process in it ends, its files stay. `force`: kill at once. */
    async stop(options = {}) {
        const r = await this.conn.unary("stopBox", { name: this.name, force: options.force ?? false });
        this.info = r.box === undefined ? undefined : boxInfo(r.box);
        return this.info;
    }
    /** Removes the box and its files; a running box needs `force`. */
    async remove(options = {}) {
        await this.conn.unary("removeBox", { name: this.name, force: options.force ?? false });
        this.info = undefined;
    }
    /** Changes limits or the allow-list (docker update); returns what only applies at the next start. */
    async update(options) {
        const r = await this.conn.unary("updateBox", {
            name: this.name,
            cpus: options.cpus,
            memoryMib: options.memory,
            allowNet: options.allowNet === undefined ? undefined : { hosts: options.allowNet },
        });
        this.info = r.box === undefined ? undefined : boxInfo(r.box);
        return { info: this.info, warnings: r.warnings };
    }
    /**
     * Runs `argv` (`[]`: the image's default command) to its end and returns
     * its whole output, byte for byte, and how it ended. A command that
     * fails is not an error: look at `exitCode`.
     *
     * @throws {NotFoundError} no such box; {@link FailedPreconditionError} the box is not running.
     */
    async exec(argv, options = {}) {
        const { stdin, ...rest } = options;
        const execution = await Execution.start(this.conn, execStart(this.name, argv, rest, stdin !== undefined), rest);
        return collect(execution, stdin);
    }
    /**
     * Starts `argv` and returns it running: iterate it for its output,
     * `write`/`end` its stdin, `signal`, `resize`, `wait`. It reattaches by
     * itself when boxd restarts meanwhile.
     */
    async spawn(argv, options = {}) {
        return Execution.start(this.conn, execStart(this.name, argv, options, options.stdin ?? true), options);
    }
    /** The execs of this box that boxd knows (running, and exited ones it keeps). */
    async execs() {
        return (await this.conn.unary("listExecs", { boxName: this.name })).execs;
    }
    /** The ports published now (actual host ports), while the box runs. */
    async ports() {
        return (await this.inspect()).ports;
    }
    /** One sample of what the running box uses. @throws {NotFoundError} it is not running. */
    async stats() {
        for await (const s of this.statsStream({ stream: false })) {
            return s;
        }
        throw new NotFoundError(status.NOT_FOUND, `box ${this.name} is not running: boxd sent no sample of it`);
    }
    /** Samples every `intervalMs` (default 1000, at least 100) until the iteration ends. */
    statsStream(options = {}) {
        const call = this.conn.stream((raw) => raw.boxStats({ names: [this.name], stream: options.stream ?? true, intervalMs: options.intervalMs ?? 0 }));
        const name = this.name;
        return (async function* (conn) {
            for await (const r of iterate(conn, call, (m) => m.boxes)) {
                const mine = r.find((b) => b.name === name);
                if (mine !== undefined) {
                    yield mine;
                }
            }
        })(this.conn);
    }
    /** Keeps the box's files (its writes over its image) as snapshot `name`. */
    async snapshot(name) {
        return this.conn.unary("createSnapshot", { boxName: this.name, name });
    }
    /** The box's snapshots, oldest first. */
    async snapshots() {
        return (await this.conn.unary("listSnapshots", { boxName: this.name })).snapshots;
    }
    /** Puts the (stopped) box's files back as snapshot `name` holds them. */
    async restore(name) {
        const r = await this.conn.unary("restoreSnapshot", { boxName: this.name, name });
        this.info = r.box === undefined ? undefined : boxInfo(r.box);
        return this.info;
    }
    /** Deletes snapshot `name`. */
    async removeSnapshot(name) {
        await this.conn.unary("removeSnapshot", { boxName: this.name, name });
    }
    /** A new box `name` with this one's spec and a copy of its files; created, not started. */
    async clone(name) {
        const r = await this.conn.unary("cloneBox", { source: this.name, name });
        return new Box(this.conn, name, r.box === undefined ? undefined : boxInfo(r.box));
    }
    /** Writes the box to an archive at host path `path` (absolute, not existing); returns its size. */
    async export(path) {
        return (await this.conn.unary("exportBox", { name: this.name, path })).sizeBytes;
    }
}
