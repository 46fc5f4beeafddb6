/**
 * Files of a box: read, write and list single files, copy trees in and out
 * as tar streams (`CopyIn`, `CopyOut`: docker cp's rules). Paths are the
 * box's (absolute) and resolve inside the box. The box must be running.
 *
 * @module
 */
import type { Connection } from "./connection.js";
import { type Archive } from "./tar.js";
/** One entry of a directory listing. */
export interface FileEntry {
    /** The entry's name in its directory. */
    name: string;
    /** `"file"`, `"directory"`, `"symlink"`, or what `stat` calls it (`"fifo"`, `"socket"`, ...). */
    kind: string;
    /** Bytes (of a symlink: its target's length). */
    size: number;
    /** Permission bits (`0o644`). */
    mode: number;
    /** Last modification, Unix ms. */
    mtimeMs: number;
}
/** The files of one box (`box.files`). */
export declare class BoxFiles {
    private readonly conn;
    /** The box's name. */
    readonly boxName: string;
    constructor(conn: Connection, 
    /** The box's name. */
    boxName: string);
    /**
     * The bytes of the regular file `path` in the box (a symlink is
     * followed).
     *
     * @throws {NotFoundError} no such file; {@link InvalidArgumentError} not a regular file.
     */
    read(path: string): Promise<Buffer>;
    /**
     * Writes `data` (a string as UTF-8) to `path` in the box, replacing a
     * file or symlink there (never writing through it). Its directory must
     * exist. The file belongs to box root.
     */
    write(path: string, data: Uint8Array | string, options?: {
        mode?: number;
    }): Promise<void>;
    /**
     * The entries of directory `path` in the box (not `.` and `..`), listed
     * with the box's own `sh` and `stat` (busybox or GNU), run as box root.
     *
     * @throws {NotFoundError} no such directory; {@link FailedPreconditionError} the box has no shell;
     *   {@link BoxdError} the listing failed (with its stderr).
     */
    list(path: string): Promise<FileEntry[]>;
    /**
     * Copies host path `hostPath` (a file, directory or symlink; `DIR/.`: its
     * contents) into the box at `boxPath`: into it when it is an existing
     * directory, else as it (its parent must exist). Returns the archive
     * bytes the daemon took.
     */
    copyIn(hostPath: string, boxPath: string): Promise<number>;
    /**
     * Copies `boxPath` (`DIR/.`: its contents) out of the box to host path
     * `hostPath`: into it when it is a directory, else as it (its parent
     * must exist). What the box sent is never trusted: see `unpackHost`.
     */
    copyOut(boxPath: string, hostPath: string, options?: {
        followSymlinks?: boolean;
    }): Promise<void>;
    /**
     * Sends tar `archive` to `CopyIn` at `boxPath`; returns the archive bytes
     * the daemon took.
     */
    copyInArchive(archive: Archive, boxPath: string): Promise<number>;
    /**
     * The archive `CopyOut` sends, as a byte stream; destroying it ends the
     * call (the daemon then stops the copy).
     */
    private copyOutBytes;
}
