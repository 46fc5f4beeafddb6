/**
 * The client: finds (or starts) boxd, and reaches every box through it.
 *
 * @module
 */
import { Box } from "./box.js";
import { Connection } from "./connection.js";
import { Execution, type AttachOptions } from "./exec.js";
import type { BoxStat, DescribeResponse, ExecInfo, ImageInfo, PullImageEvent } from "./gen/boxd/v1/boxd.js";
import { type StartOptions } from "./spawn.js";
import { type BoxEvent, type BoxInfo, type BoxOptions, type IfExists } from "./types.js";
/** How to find boxd. */
export interface ConnectOptions extends StartOptions {
    /** The socket (default: `BOXD_SOCKET`, else the per-user default; see `resolvePaths`). */
    socket?: string;
    /** boxd's home (default: `BOXD_HOME`, else the per-user data directory). */
    home?: string;
    /** Start boxd when nothing answers (default true). */
    start?: boolean;
}
/** Options of {@link Boxd.createOrReuse}. */
export interface CreateOptions extends BoxOptions {
    /** What an existing box of that name means (default `"reuse"`: it is reused as it is). */
    ifExists?: IfExists;
    /** Start the box (default true: `createOrReuse` gives a box to run commands in). */
    start?: boolean;
}
/** What a create did. */
export interface Created {
    box: Box;
    /** False when a box of that name existed and is reused. */
    created: boolean;
    /** An existing box of that name was removed first (`ifExists: "replace"`). */
    replaced: boolean;
    /** What differs from the request in a reused box, and the engine's notes. */
    warnings: string[];
}
/** Options of {@link Boxd.events}. */
export interface EventsOptions {
    /**
     * First one event per box as it is now (`initial: true`), then one with
     * `synced: true` naming no box, then every change, with no gap and no
     * duplicate. Not with `sinceMs`.
     */
    initial?: boolean;
    /** First the events boxd kept (the last 1000) at or after this Unix ms, then live ones. */
    sinceMs?: number;
    /** Only events up to this Unix ms; the iteration ends there. */
    untilMs?: number;
}
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
export declare class Boxd {
    /** The channel (its `raw` is the generated client, for calls this facade does not wrap). */
    readonly connection: Connection;
    /** What the daemon said of itself when connecting. */
    readonly daemon: DescribeResponse;
    /** Whether connecting started boxd. */
    readonly started: boolean;
    private constructor();
    /**
     * Connects to boxd: resolves the socket (`resolvePaths`), checks it can
     * be trusted, asks `Describe` and checks the protocol is `boxd.v1`;
     * starts boxd first when nothing answers (unless `start: false`).
     *
     * @throws {UntrustedSocketError} the socket, its directory or the path to it is not this user's.
     * @throws {DaemonNotRunningError} nothing answers (and boxd was not, or could not be, started).
     * @throws {ProtocolMismatchError} the daemon speaks another protocol.
     */
    static connect(options?: ConnectOptions): Promise<Boxd>;
    /** The socket this client talks to. */
    get socket(): string;
    /** What the daemon is now: versions, pid, engine, isolation, capabilities. */
    describe(): Promise<DescribeResponse>;
    /** Every box. */
    listBoxes(): Promise<BoxInfo[]>;
    /** The box `name`, as it is now. @throws {NotFoundError} no such box. */
    getBox(name: string): Promise<Box>;
    /** A handle on box `name` without asking boxd anything (calls fail later if there is none). */
    box(name: string): Box;
    /**
     * Creates box `name` or reuses the one of that name (as it is: what the
     * request asks differently is in `warnings`), and starts it unless
     * `start: false`. Returns the box; {@link create} says more.
     */
    createOrReuse(name: string, options: CreateOptions): Promise<Box>;
    /**
     * Creates box `name` (see {@link CreateOptions.ifExists} for an existing
     * one) and starts it unless `start: false`. An image the daemon lacks is
     * pulled first.
     */
    create(name: string, options: CreateOptions): Promise<Created>;
    /** A new box `name` from an archive `Box.export` wrote (`allowNet`, `ports` as for a create). */
    importBox(path: string, name: string, options?: Pick<BoxOptions, "allowNet" | "ports">): Promise<{
        box: Box;
        warnings: string[];
    }>;
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
    events(options?: EventsOptions): AsyncGenerator<BoxEvent, void, undefined>;
    /** Every exec boxd knows (of box `boxName` only, when given). */
    execs(boxName?: string): Promise<ExecInfo[]>;
    /** Attaches to exec `execId` (from any client), from the start of the output it keeps. */
    attach(execId: string, options?: AttachOptions): Promise<Execution>;
    /** Samples of every running box (or those named): one, or one per `intervalMs` while iterated. */
    stats(options?: {
        names?: string[];
        stream?: boolean;
        intervalMs?: number;
    }): AsyncGenerator<BoxStat[], void, undefined>;
    /** The images boxd has. */
    listImages(): Promise<ImageInfo[]>;
    /** An image by reference or digest. @throws {NotFoundError} none. */
    inspectImage(reference: string): Promise<ImageInfo>;
    /** Pulls `reference`; `onProgress` sees each event. Returns the image. */
    pullImage(reference: string, onProgress?: (event: NonNullable<PullImageEvent["event"]>) => void): Promise<ImageInfo>;
    /** Imports an OCI layout directory or a `docker save` tarball (absolute host path). */
    importImage(path: string, reference?: string): Promise<ImageInfo>;
    /** Removes (untags) an image; `force` even when boxes were made from it. */
    removeImage(reference: string, options?: {
        force?: boolean;
    }): Promise<{
        untagged: string[];
        deleted: string[];
    }>;
    /** Closes the channel; calls under way fail. */
    close(): void;
}
