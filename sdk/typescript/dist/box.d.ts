/**
 * One box by name: its lifecycle, execs, files, ports, stats and snapshots.
 *
 * @module
 */
import type { Connection } from "./connection.js";
import { Execution, type ExecResult, type SpawnOptions } from "./exec.js";
import { BoxFiles } from "./files.js";
import type { BoxStat, ExecInfo, ExecStart, SnapshotInfo } from "./gen/boxd/v1/boxd.js";
import { type BoxInfo, type PortMapping } from "./types.js";
/** Options of {@link Box.exec}. */
export interface ExecOptions extends Omit<SpawnOptions, "stdin" | "detach"> {
    /** Given to the command as its stdin, then EOF (otherwise it reads /dev/null). */
    stdin?: Uint8Array | string;
}
/** What {@link Box.update} changes (unset: kept). */
export interface UpdateOptions {
    cpus?: number;
    /** Memory limit, MiB. */
    memory?: number;
    /** The new allow-list (an empty list: no network). */
    allowNet?: string[];
}
/** The start of an exec of `argv` in `box` with `o`. */
export declare function execStart(box: string, argv: string[], o: Omit<SpawnOptions, "stdin">, stdin: boolean): ExecStart;
/**
 * A box, by name. Methods call boxd each time; {@link info} is what boxd
 * said the last time this object asked.
 */
export declare class Box {
    private readonly conn;
    /** The box's name. */
    readonly name: string;
    /** Its files: read, write, list, copy in and out. */
    readonly files: BoxFiles;
    /** What boxd last said of this box (refresh with {@link inspect}). */
    info: BoxInfo | undefined;
    constructor(conn: Connection, 
    /** The box's name. */
    name: string, info?: BoxInfo);
    /** The box as boxd describes it now. @throws {NotFoundError} no such box. */
    inspect(): Promise<BoxInfo>;
    /** Starts the box (a running box: nothing to do, `bootMs` 0). */
    start(): Promise<{
        info: BoxInfo;
        bootMs: number;
    }>;
    /** Stops the box: every process in it ends, its files stay. `force`: kill at once. */
    stop(options?: {
        force?: boolean;
    }): Promise<BoxInfo | undefined>;
    /** Removes the box and its files; a running box needs `force`. */
    remove(options?: {
        force?: boolean;
    }): Promise<void>;
    /** Changes limits or the allow-list (docker update); returns what only applies at the next start. */
    update(options: UpdateOptions): Promise<{
        info: BoxInfo | undefined;
        warnings: string[];
    }>;
    /**
     * Runs `argv` (`[]`: the image's default command) to its end and returns
     * its whole output, byte for byte, and how it ended. A command that
     * fails is not an error: look at `exitCode`.
     *
     * @throws {NotFoundError} no such box; {@link FailedPreconditionError} the box is not running.
     */
    exec(argv: string[], options?: ExecOptions): Promise<ExecResult>;
    /**
     * Starts `argv` and returns it running: iterate it for its output,
     * `write`/`end` its stdin, `signal`, `resize`, `wait`. It reattaches by
     * itself when boxd restarts meanwhile.
     */
    spawn(argv: string[], options?: SpawnOptions): Promise<Execution>;
    /** The execs of this box that boxd knows (running, and exited ones it keeps). */
    execs(): Promise<ExecInfo[]>;
    /** The ports published now (actual host ports), while the box runs. */
    ports(): Promise<PortMapping[]>;
    /** One sample of what the running box uses. @throws {NotFoundError} it is not running. */
    stats(): Promise<BoxStat>;
    /** Samples every `intervalMs` (default 1000, at least 100) until the iteration ends. */
    statsStream(options?: {
        stream?: boolean;
        intervalMs?: number;
    }): AsyncGenerator<BoxStat, void, undefined>;
    /** Keeps the box's files (its writes over its image) as snapshot `name`. */
    snapshot(name: string): Promise<SnapshotInfo>;
    /** The box's snapshots, oldest first. */
    snapshots(): Promise<SnapshotInfo[]>;
    /** Puts the (stopped) box's files back as snapshot `name` holds them. */
    restore(name: string): Promise<BoxInfo | undefined>;
    /** Deletes snapshot `name`. */
    removeSnapshot(name: string): Promise<void>;
    /** A new box `name` with this one's spec and a copy of its files; created, not started. */
    clone(name: string): Promise<Box>;
    /** Writes the box to an archive at host path `path` (absolute, not existing); returns its size. */
    export(path: string): Promise<number>;
}
