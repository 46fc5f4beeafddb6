/**
 * Files of a box: read, write and list single files, copy trees in and out
 * as tar streams (`CopyIn`, `CopyOut`: docker cp's rules). Paths are the
 * box's (absolute) and resolve inside the box. The box must be running.
 *
 * @module
 */
import * as posix from "node:path/posix";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { status } from "@grpc/grpc-js";
import * as tarStream from "tar-stream";
import { BoxdError, FailedPreconditionError, InvalidArgumentError, NotFoundError } from "./errors.js";
import { Execution, collect } from "./exec.js";
import { iterate } from "./stream.js";
import { packHost, unpackHost } from "./tar.js";
/** Archive bytes per `CopyIn` message. */
const COPY_CHUNK = 1 << 20;
/**
 * Lists `$1` a line per entry (`KIND|SIZE|MODE|MTIME|NAME`) with the tools
 * every image with a shell has (busybox and GNU `stat` take this format),
 * as `boxctl mcp`'s `list_files` does.
 */
const LIST_SCRIPT = `
fmt='%F|%s|%a|%Y|%n'
cd -- "$1" || exit 2
for f in * .[!.]* ..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then stat -c "$fmt" -- "$f"; fi
done
`;
function entryOf(line) {
    const m = /^([^|]*)\|(\d+)\|([0-7]+)\|(\d+)\|(.*)$/.exec(line);
    if (m === null) {
        return undefined;
    }
    const kinds = {
        "regular file": "file",
        "regular empty file": "file",
        directory: "directory",
        "symbolic link": "symlink",
    };
    const raw = m[1];
    return {
        kind: kinds[raw] ?? raw,
        size: Number(m[2]),
        mode: parseInt(m[3], 8),
        mtimeMs: Number(m[4]) * 1000,
        name: m[5],
    };
}
function absolute(p) {
    if (!p.startsWith("/")) {
        throw new InvalidArgumentError(status.INVALID_ARGUMENT, `${p}: give an absolute path in the box`);
    }
}
/** The files of one box (`box.files`). */
export class BoxFiles {
    conn;
    boxName;
    constructor(conn, 
    /** The box's name. */
    boxName) {
        this.conn = conn;
        this.boxName = boxName;
    }
    /**
     * The bytes of the regular file `path` in the box (a symlink is
     * followed).
     *
     * @throws {NotFoundError} no such file; {@link InvalidArgumentError} not a regular file.
     */
    async read(path) {
        absolute(path);
        const extract = tarStream.extract();
        const feeding = pipeline(this.copyOutBytes(path, true), extract);
        feeding.catch(() => undefined);
        try {
            for await (const entry of extract) {
                if (entry.header.type !== "file" && entry.header.type !== "contiguous-file") {
                    throw new InvalidArgumentError(status.INVALID_ARGUMENT, `${path}: not a regular file (list a directory with files.list)`);
                }
                const parts = [];
                for await (const chunk of entry) {
                    parts.push(chunk);
                }
                extract.destroy();
                return Buffer.concat(parts);
            }
            await feeding;
            throw new InvalidArgumentError(status.INVALID_ARGUMENT, `${path}: the box sent an empty archive`);
        }
        catch (e) {
            extract.destroy();
            throw this.conn.failure(e);
        }
    }
    /**
     * Writes `data` (a string as UTF-8) to `path` in the box, replacing a
     * file or symlink there (never writing through it). Its directory must
     * exist. The file belongs to box root.
     */
    async write(path, data, options = {}) {
        absolute(path);
        const name = posix.basename(path);
        if (name === "" || name === "." || name === ".." || path.endsWith("/")) {
            throw new InvalidArgumentError(status.INVALID_ARGUMENT, `${path}: not a file path`);
        }
        const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
        const pack = tarStream.pack();
        pack.entry({ name, type: "file", mode: options.mode ?? 0o644, mtime: new Date(), size: bytes.length }, bytes);
        pack.finalize();
        // The file's own path, never its directory: unpacked at a directory
        // that does not exist, the entry would take that directory's name.
        await this.copyInArchive(pack, path);
    }
    /**
     * The entries of directory `path` in the box (not `.` and `..`), listed
     * with the box's own `sh` and `stat` (busybox or GNU), run as box root.
     *
     * @throws {NotFoundError} no such directory; {@link FailedPreconditionError} the box has no shell;
     *   {@link BoxdError} the listing failed (with its stderr).
     */
    async list(path) {
        absolute(path);
        const execution = await Execution.start(this.conn, {
            boxName: this.boxName,
            command: "sh",
            args: ["-c", LIST_SCRIPT, "sh", path],
            env: {},
            workingDir: "",
            timeoutMs: 60_000,
            stdin: false,
            tty: false,
            ttySize: undefined,
            detach: false,
            resumable: true,
            user: "0",
        });
        const r = await collect(execution, undefined);
        if (r.exitCode === 127) {
            throw new FailedPreconditionError(status.FAILED_PRECONDITION, `the box has no shell to list files with (${r.error})`);
        }
        if (r.exitCode === 2) {
            // `cd` failed: no such directory (or not one).
            throw new NotFoundError(status.NOT_FOUND, r.stderrText.trim() || `${path}: no such directory`);
        }
        if (r.exitCode !== 0) {
            throw new BoxdError(status.UNKNOWN, r.stderrText.trim() || `cannot list ${path} (exit code ${r.exitCode})`);
        }
        return r.text
            .split("\n")
            .map(entryOf)
            .filter((e) => e !== undefined);
    }
    /**
     * Copies host path `hostPath` (a file, directory or symlink; `DIR/.`: its
     * contents) into the box at `boxPath`: into it when it is an existing
     * directory, else as it (its parent must exist). Returns the archive
     * bytes the daemon took.
     */
    async copyIn(hostPath, boxPath) {
        absolute(boxPath);
        return this.copyInArchive(packHost(hostPath), boxPath);
    }
    /**
     * Copies `boxPath` (`DIR/.`: its contents) out of the box to host path
     * `hostPath`: into it when it is a directory, else as it (its parent
     * must exist). What the box sent is never trusted: see `unpackHost`.
     */
    async copyOut(boxPath, hostPath, options = {}) {
        absolute(boxPath);
        try {
            await unpackHost(hostPath, this.copyOutBytes(boxPath, options.followSymlinks ?? false));
        }
        catch (e) {
            throw this.conn.failure(e);
        }
    }
    /**
     * Sends tar `archive` to `CopyIn` at `boxPath`; returns the archive bytes
     * the daemon took.
     */
    async copyInArchive(archive, boxPath) {
        absolute(boxPath);
        return new Promise((resolve, reject) => {
            let failed = false;
            const fail = (e) => {
                if (!failed) {
                    failed = true;
                    reject(this.conn.failure(e));
                }
            };
            let call;
            try {
                call = this.conn.stream((raw) => raw.copyIn((err, res) => {
                    if (err !== null) {
                        fail(err);
                    }
                    else if (!failed) {
                        resolve(res.bytes);
                    }
                }));
            }
            catch (e) {
                archive.destroy();
                fail(e);
                return;
            }
            const send = (msg) => call.write(msg) ? Promise.resolve() : new Promise((r) => call.once("drain", () => r()));
            (async () => {
                await send({ msg: { $case: "start", value: { boxName: this.boxName, path: boxPath } } });
                let pending = [];
                let size = 0;
                for await (const chunk of archive) {
                    if (failed) {
                        break;
                    }
                    const bytes = chunk;
                    pending.push(bytes);
                    size += bytes.length;
                    if (size >= COPY_CHUNK) {
                        await send({ msg: { $case: "data", value: Buffer.concat(pending) } });
                        pending = [];
                        size = 0;
                    }
                }
                if (size > 0 && !failed) {
                    await send({ msg: { $case: "data", value: Buffer.concat(pending) } });
                }
                call.end();
            })().catch((e) => {
                call.cancel();
                archive.destroy();
                fail(e);
            });
        });
    }
    /**
     * The archive `CopyOut` sends, as a byte stream; destroying it ends the
     * call (the daemon then stops the copy).
     */
    copyOutBytes(path, followSymlinks) {
        const call = this.conn.stream((raw) => raw.copyOut({ boxName: this.boxName, path, followSymlinks }));
        return Readable.from(iterate(this.conn, call, (m) => m.data), { objectMode: false });
    }
}
