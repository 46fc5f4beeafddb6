/**
 * Whether a socket may be trusted with this user's requests (and the
 * secrets some of them carry), checked before every call: the same rules
 * as the Rust client (`fs/src/trust.rs`), as far as Node can check them.
 *
 * A socket is trusted when nobody but this user (and root) can put
 * something else in its place:
 *
 * - every directory looked into on the way (after symlinks, resolved one
 *   component at a time as the kernel would) belongs to this user or root
 *   and, when others may write it, is sticky (like `/tmp`);
 * - every symlink followed belongs to this user or root;
 * - the socket's own directory belongs to this user and is closed to group
 *   and others (0700);
 * - the socket belongs to this user and is not writable by group/others.
 *
 * What Node cannot check: the uid of the process answering on the socket
 * (`SO_PEERCRED`; Node has no API for it). The checks above cover it as
 * far as a file can: a socket file belongs to the process that bound it,
 * and only this user (or root) can bind in a directory of this user's that
 * is closed to others. In the other direction boxd itself checks every
 * peer's uid and refuses a client of another user (`PERMISSION_DENIED`), so
 * a genuine boxd never serves anyone else.
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { UntrustedSocketError } from "./errors.js";
/** More symlinks than this on one path is a loop (Linux allows 40). */
const MAX_LINKS = 40;
const FIX = "set XDG_RUNTIME_DIR, BOXD_SOCKET or the socket option to a directory of your own";
const TAKE = "whoever owns it can put a socket of their own in boxd's place and read every request and secret sent to it";
/** `uid N (name)` when the name is known (this user's own), else `uid N`. */
function who(uid) {
    try {
        const me = os.userInfo();
        if (me.uid === uid) {
            return `uid ${uid} (${me.username})`;
        }
    }
    catch {
        // No passwd entry: the number alone.
    }
    return uid === 0 ? "uid 0 (root)" : `uid ${uid}`;
}
function octal(mode) {
    return (mode & 0o7777).toString(8).padStart(4, "0");
}
/** The error for a path of another user, with the fix for root. */
function otherUser(me, p, what) {
    const fix = me === 0
        ? "; root does not use a socket another user controls (that user's boxd would refuse root anyway): run this as that user, or give root a socket of its own (BOXD_SOCKET or the socket option)"
        : `; ${FIX}`;
    return new UntrustedSocketError(p, `refusing to connect to boxd: ${what}: ${TAKE}${fix}`);
}
function meOrRoot(me) {
    return me === 0 ? who(me) : `${who(me)} or root`;
}
/** A directory looked into on the way: ours or root's, not writable by others unless sticky. */
function checkPassage(me, p, st) {
    if (!st.isDirectory()) {
        throw new UntrustedSocketError(p, `refusing to connect to boxd: ${p} is not a directory`);
    }
    if (st.uid !== me && st.uid !== 0) {
        throw otherUser(me, p, `${p}, a directory on the socket's path, belongs to ${who(st.uid)}, not to ${meOrRoot(me)}`);
    }
    if ((st.mode & 0o022) !== 0 && (st.mode & 0o1000) === 0) {
        throw new UntrustedSocketError(p, `refusing to connect to boxd: ${p}, a directory on the socket's path, is writable by other users and not sticky (mode ${octal(st.mode)}): another user could replace what is in it with a socket of their own; ${FIX}`);
    }
}
function checkSymlink(me, p, st) {
    if (st.uid !== me && st.uid !== 0) {
        throw otherUser(me, p, `${p}, a symlink on the socket's path, belongs to ${who(st.uid)}, not to ${meOrRoot(me)}`);
    }
}
/** Why the socket's own directory is refused, if it is. */
function socketDirProblem(me, p, st) {
    if (!st.isDirectory()) {
        return new UntrustedSocketError(p, `refusing to connect to boxd: ${p} is not a directory`);
    }
    if (st.uid !== me) {
        return otherUser(me, p, `the socket's directory ${p} belongs to ${who(st.uid)}, not to ${who(me)}`);
    }
    if ((st.mode & 0o077) !== 0) {
        return new UntrustedSocketError(p, `refusing to connect to boxd: the socket's directory ${p} is open to other users (mode ${octal(st.mode)}): another user could put a socket in boxd's place; make it private (\`chmod 700 ${p}\`) or ${FIX}`);
    }
    return undefined;
}
function checkSocketFile(me, p, st) {
    if (!st.isSocket()) {
        throw new UntrustedSocketError(p, `refusing to connect to boxd: ${p} is not a socket`);
    }
    if (st.uid !== me) {
        throw otherUser(me, p, `the socket ${p} belongs to ${who(st.uid)}, not to ${who(me)}`);
    }
    if ((st.mode & 0o022) !== 0) {
        throw new UntrustedSocketError(p, `refusing to connect to boxd: the socket ${p} is writable by other users (mode ${octal(st.mode)}); boxd makes it 0600: restart boxd, \`chmod 600 ${p}\`, or ${FIX}`);
    }
}
/** `p`'s components, `.` and empty ones dropped, `..` kept. */
function components(p) {
    return p.split("/").filter((c) => c !== "" && c !== ".");
}
/**
 * Resolves directory `dir` one component at a time, checking every
 * directory looked into and every symlink followed. Returns the resolved
 * path and what is there.
 */
function resolveDir(me, dir) {
    const todo = components(path.resolve(dir));
    let at = "/";
    let st = fs.lstatSync(at);
    let links = 0;
    while (todo.length > 0) {
        const name = todo.shift();
        if (name === "..") {
            at = path.dirname(at);
            st = fs.lstatSync(at);
            continue;
        }
        checkPassage(me, at, st);
        const next = path.join(at, name);
        const nextSt = fs.lstatSync(next);
        if (nextSt.isSymbolicLink()) {
            checkSymlink(me, next, nextSt);
            links += 1;
            if (links > MAX_LINKS) {
                throw new UntrustedSocketError(next, `refusing to connect to boxd: ${next}: too many levels of symlinks`);
            }
            const target = fs.readlinkSync(next);
            if (target.startsWith("/")) {
                at = "/";
                st = fs.lstatSync(at);
            }
            todo.unshift(...components(target));
            continue;
        }
        at = next;
        st = nextSt;
    }
    return { at, st };
}
/**
 * Checks everything about `socket` a client can check before it sends a
 * byte (see the module's comment); returns the socket's resolved path.
 *
 * @throws {UntrustedSocketError} when it must not be used.
 * @throws an `ENOENT` error (`code: "ENOENT"`) when there is no socket
 *   (only once the directories on the way passed and the socket's
 *   directory, if any, is this user's: boxd makes it private when it
 *   starts).
 */
export function checkSocket(socket, me) {
    let target = path.resolve(socket);
    for (let i = 0; i <= MAX_LINKS; i++) {
        const dirName = path.dirname(target);
        const name = path.basename(target);
        if (name === "" || target === "/") {
            throw new UntrustedSocketError(target, `refusing to connect to boxd: ${target} is not a socket`);
        }
        const { at: dir, st: dirSt } = resolveDir(me, dirName);
        const p = path.join(dir, name);
        let st;
        try {
            st = fs.lstatSync(p);
        }
        catch (e) {
            // Nothing to send anything to. A directory of another user is still
            // refused; one of ours that is too open is not (boxd closes it).
            const problem = socketDirProblem(me, dir, dirSt);
            if (problem !== undefined && !(dirSt.isDirectory() && dirSt.uid === me)) {
                throw problem;
            }
            throw e;
        }
        if (!st.isSymbolicLink()) {
            const problem = socketDirProblem(me, dir, dirSt);
            if (problem !== undefined) {
                throw problem;
            }
            checkSocketFile(me, p, st);
            return p;
        }
        // A link at the socket's name: its directory is only on the way.
        checkPassage(me, dir, dirSt);
        checkSymlink(me, p, st);
        target = path.resolve(dir, fs.readlinkSync(p));
    }
    throw new UntrustedSocketError(socket, `refusing to connect to boxd: ${socket}: too many levels of symlinks`);
}
