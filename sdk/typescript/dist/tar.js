/**
 * Tar streams between the host and a box (`tar-stream` reads and writes
 * them): packing a host path for `CopyIn`, and unpacking what a box sent
 * for `CopyOut` without ever letting it write outside the destination.
 *
 * @module
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { pipeline } from "node:stream/promises";
import { status } from "@grpc/grpc-js";
import * as tarStream from "tar-stream";
import { InvalidArgumentError, NotFoundError } from "./errors.js";
/** Whether `p` names a directory's contents (`DIR/.`), as docker spells it. */
export function namesContents(p) {
    return p === "." || p.endsWith("/.");
}
function invalid(message) {
    return new InvalidArgumentError(status.INVALID_ARGUMENT, message);
}
/**
 * A tar of host path `source` (docker cp's rules): one top-level entry
 * named after its last component, or with `DIR/.` the directory's contents
 * as `./…`. Symlinks travel as links; regular files, directories and
 * symlinks are archived, anything else (sockets, devices, FIFOs) is left
 * out. Errors (a file that changed size while read, say) end the stream.
 */
export function packHost(source) {
    const pack = tarStream.pack();
    const top = path.resolve(source);
    const contents = namesContents(source);
    const walk = async (abs, name) => {
        const st = await fs.promises.lstat(abs);
        const common = { mode: st.mode & 0o7777, mtime: st.mtime, uid: st.uid, gid: st.gid };
        if (st.isDirectory()) {
            if (name !== ".") {
                await entry(pack, { ...common, name: `${name}/`, type: "directory" });
            }
            const names = (await fs.promises.readdir(abs)).sort();
            for (const child of names) {
                await walk(path.join(abs, child), name === "." ? `./${child}` : `${name}/${child}`);
            }
        }
        else if (st.isSymbolicLink()) {
            await entry(pack, { ...common, name, type: "symlink", linkname: await fs.promises.readlink(abs) });
        }
        else if (st.isFile()) {
            const file = await fs.promises.open(abs, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
            try {
                const size = (await file.stat()).size;
                if (size === 0) {
                    await entry(pack, { ...common, name, type: "file", size }, Buffer.alloc(0));
                }
                else {
                    const sink = pack.entry({ ...common, name, type: "file", size });
                    await pipeline(file.createReadStream({ start: 0, end: size - 1, autoClose: false }), sink);
                }
            }
            finally {
                await file.close();
            }
        }
    };
    (async () => {
        const st = await fs.promises.lstat(top).catch((e) => {
            throw e.code === "ENOENT" ? new NotFoundError(status.NOT_FOUND, `${source}: no such file or directory`) : e;
        });
        if (contents && !st.isDirectory()) {
            throw invalid(`${source}: not a directory`);
        }
        await walk(top, contents ? "." : path.basename(top));
        pack.finalize();
    })().catch((e) => pack.destroy(e instanceof Error ? e : new Error(String(e))));
    return pack;
}
/** Adds an entry that has no data, or all of it in `data`. */
function entry(pack, header, data) {
    return new Promise((resolve, reject) => {
        const done = (err) => (err ? reject(err) : resolve());
        if (data === undefined) {
            pack.entry(header, done);
        }
        else {
            pack.entry(header, data, done);
        }
    });
}
/** An archive path's parts: `.` dropped, absolute and `..` refused; `topDot`: it began with `.`. */
function parts(raw) {
    if (raw.startsWith("/")) {
        throw invalid(`the archive holds an absolute path: ${JSON.stringify(raw)}`);
    }
    let topDot = false;
    const out = [];
    raw.split("/").forEach((seg, i) => {
        if (seg === "") {
            return;
        }
        if (seg === ".") {
            topDot ||= i === 0;
            return;
        }
        if (seg === "..") {
            throw invalid(`the archive holds a path with '..': ${JSON.stringify(raw)}`);
        }
        if (seg.includes("\0")) {
            throw invalid(`the archive holds a path with NUL: ${JSON.stringify(raw)}`);
        }
        out.push(seg);
    });
    return { topDot, parts: out };
}
function lstatOrUndefined(p) {
    try {
        return fs.lstatSync(p);
    }
    catch (e) {
        if (e.code === "ENOENT") {
            return undefined;
        }
        throw e;
    }
}
/**
 * Unpacks a tar from `archive` at host path `dest` by docker's rule: into
 * it when it is a directory, else as it (its parent must exist).
 *
 * What the archive holds is never trusted: absolute paths and `..` are
 * refused, no entry is written beneath a symlink (one the archive made or
 * one already there: every directory on the way is looked at with
 * `lstat`), an existing file or symlink is replaced, never written
 * through, a hard link may name only a file this archive wrote, setuid and
 * setgid bits are dropped and the umask applies. Devices and FIFOs are
 * refused.
 */
export async function unpackHost(dest, archive) {
    let base;
    let renameTo;
    const st = (() => {
        try {
            return fs.statSync(dest);
        }
        catch {
            return undefined;
        }
    })();
    if (st?.isDirectory()) {
        base = path.resolve(dest);
    }
    else if (st !== undefined && dest.endsWith("/")) {
        throw invalid(`${dest}: not a directory`);
    }
    else {
        if (namesContents(dest) || dest.endsWith("/")) {
            throw invalid(`${dest}: not a directory`);
        }
        base = path.dirname(path.resolve(dest));
        renameTo = path.basename(dest);
        const parent = (() => {
            try {
                return fs.statSync(base);
            }
            catch {
                return undefined;
            }
        })();
        if (parent === undefined) {
            throw new NotFoundError(status.NOT_FOUND, `${base}: no such directory`);
        }
        if (!parent.isDirectory()) {
            throw invalid(`${base}: not a directory`);
        }
    }
    // The bits kept: no setuid/setgid/sticky on the host, through the umask.
    const umask = process.umask();
    const mask = 0o777 & ~umask;
    let top;
    const written = new Set();
    const dirs = [];
    /** Where an archive path lands, as components below `base`; undefined for the destination itself. */
    const place = (raw) => {
        const { topDot, parts: p } = parts(raw);
        if (renameTo === undefined) {
            return p.length === 0 ? undefined : p;
        }
        if (top === undefined && topDot && p.length === 0) {
            top = ".";
        }
        if (top === ".") {
            return [renameTo, ...p];
        }
        let first;
        let rest;
        if (topDot) {
            [first, rest] = [".", p];
        }
        else if (p.length > 0) {
            [first, rest] = [p[0], p.slice(1)];
        }
        else {
            return undefined;
        }
        if (top === undefined) {
            top = first;
        }
        else if (top !== first) {
            throw invalid(`the archive has more than one top-level entry (${JSON.stringify(top)} and ${JSON.stringify(first)}); copy into an existing directory instead`);
        }
        return [renameTo, ...rest];
    };
    /** Walks to `rel`'s parent below `base`, never through a symlink; makes missing directories. */
    const parentOf = (rel) => {
        let at = base;
        for (const c of rel.slice(0, -1)) {
            at = path.join(at, c);
            const s = lstatOrUndefined(at);
            if (s === undefined) {
                fs.mkdirSync(at, { mode: 0o755 });
            }
            else if (!s.isDirectory()) {
                throw invalid(`${rel.join("/")}: ${path.relative(base, at)} on the way is ${s.isSymbolicLink() ? "a symlink" : "not a directory"}`);
            }
        }
        return at;
    };
    /** Makes room for a non-directory: an existing file or symlink is removed; a directory is an error. */
    const replace = (p, shown) => {
        const s = lstatOrUndefined(p);
        if (s?.isDirectory()) {
            throw invalid(`cannot overwrite directory ${shown} with a non-directory`);
        }
        if (s !== undefined) {
            fs.unlinkSync(p);
        }
    };
    const extract = tarStream.extract();
    const feeding = pipeline(archive, extract);
    // Its failure is the loop's too (awaited below); never unhandled.
    feeding.catch(() => undefined);
    try {
        await unpackEntries();
    }
    catch (e) {
        archive.destroy();
        throw e;
    }
    await feeding;
    async function unpackEntries() {
        for await (const e of extract) {
            const h = e.header;
            const rel = place(h.name);
            if (rel === undefined) {
                e.resume();
                continue;
            }
            const shown = rel.join("/");
            const p = path.join(parentOf(rel), rel[rel.length - 1]);
            const mode = h.mode ?? 0o644;
            switch (h.type) {
                case "directory": {
                    const s = lstatOrUndefined(p);
                    if (s !== undefined && !s.isDirectory()) {
                        throw invalid(`cannot overwrite non-directory ${shown} with a directory`);
                    }
                    if (s === undefined) {
                        fs.mkdirSync(p, { mode: 0o700 });
                    }
                    dirs.push({ rel, mode, mtime: h.mtime });
                    e.resume();
                    break;
                }
                case "file":
                case "contiguous-file":
                case undefined:
                case null: {
                    replace(p, shown);
                    const fd = fs.openSync(p, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
                    try {
                        await pipeline(e, fs.createWriteStream("", { fd, autoClose: false }));
                        fs.fchmodSync(fd, mode & mask);
                        if (h.mtime !== undefined) {
                            fs.futimesSync(fd, h.mtime, h.mtime);
                        }
                    }
                    finally {
                        fs.closeSync(fd);
                    }
                    written.add(shown);
                    break;
                }
                case "symlink": {
                    if (h.linkname === undefined || h.linkname === null || h.linkname === "") {
                        throw invalid(`${shown}: a symlink without a target`);
                    }
                    replace(p, shown);
                    fs.symlinkSync(h.linkname, p);
                    written.delete(shown);
                    e.resume();
                    break;
                }
                case "link": {
                    const src = place(h.linkname ?? "");
                    if (src === undefined) {
                        throw invalid(`the archive links ${JSON.stringify(shown)} to the destination itself`);
                    }
                    if (!written.has(src.join("/"))) {
                        throw invalid(`the archive links ${JSON.stringify(shown)} to ${JSON.stringify(src.join("/"))}, which is not a regular file it wrote`);
                    }
                    const from = path.join(parentOf(src), src[src.length - 1]);
                    replace(p, shown);
                    fs.linkSync(from, p);
                    written.add(shown);
                    e.resume();
                    break;
                }
                default:
                    throw invalid(`${JSON.stringify(shown)}: unsupported entry type ${h.type}`);
            }
        }
    }
    // Directories get their modes and times last, deepest first: a read-only
    // one is still written into, and its contents changed its time.
    for (const d of dirs.reverse()) {
        const p = path.join(parentOf(d.rel), d.rel[d.rel.length - 1]);
        const s = fs.lstatSync(p);
        if (!s.isDirectory()) {
            throw invalid(`${d.rel.join("/")}: no longer a directory`);
        }
        fs.chmodSync(p, d.mode & mask);
        if (d.mtime !== undefined) {
            fs.utimesSync(p, d.mtime, d.mtime);
        }
    }
}
