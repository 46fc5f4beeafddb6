/**
 * Where boxd's socket and home are, resolved as the daemon and every Rust
 * client resolve them (`proto/src/paths.rs`).
 *
 * @module
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { status } from "@grpc/grpc-js";
import { InvalidArgumentError } from "./errors.js";
/** Longest socket path the platform accepts (`sun_path` less the NUL). */
export const MAX_SOCKET_PATH = process.platform === "darwin" ? 103 : 107;
/** This process's effective uid (`process.geteuid`; 0 where there is none). */
export function myUid() {
    return typeof process.geteuid === "function" ? process.geteuid() : 0;
}
function envPath(name) {
    const v = process.env[name];
    return v === undefined || v === "" ? undefined : v;
}
/** The platform data directory's `boxd` (`$XDG_DATA_HOME/boxd`, `~/.local/share/boxd`, `~/Library/Application Support/boxd`). */
function defaultHome() {
    const home = os.homedir();
    if (process.platform === "darwin") {
        return path.join(home, "Library", "Application Support", "boxd");
    }
    const xdg = envPath("XDG_DATA_HOME");
    if (xdg !== undefined && path.isAbsolute(xdg)) {
        return path.join(xdg, "boxd");
    }
    if (home === "") {
        throw new InvalidArgumentError(status.INVALID_ARGUMENT, "cannot determine the home directory of this user; set BOXD_HOME");
    }
    return path.join(home, ".local", "share", "boxd");
}
/** Whether `dir` (followed) belongs to `uid` and is closed to everyone else. */
function privateTo(uid, dir) {
    try {
        const st = fs.statSync(dir);
        return st.isDirectory() && st.uid === uid && (st.mode & 0o077) === 0;
    }
    catch {
        return false;
    }
}
/**
 * Resolves the paths from explicit values, then `BOXD_SOCKET` and
 * `BOXD_HOME`, then the per-user defaults:
 *
 * - home: `$XDG_DATA_HOME/boxd` (`~/.local/share/boxd`; macOS
 *   `~/Library/Application Support/boxd`);
 * - socket: `$XDG_RUNTIME_DIR/boxd/boxd.sock` where there is one (not on
 *   macOS); else `$TMPDIR/boxd-$UID/boxd.sock` when the temporary
 *   directory is this user's alone; else `HOME/run/boxd.sock`. When only
 *   the home is given, the socket is `HOME/run/boxd.sock`.
 *
 * @throws {InvalidArgumentError} a socket path longer than the platform allows.
 */
export function resolvePaths(options = {}) {
    const socketGiven = options.socket ?? envPath("BOXD_SOCKET");
    const homeGiven = options.home ?? envPath("BOXD_HOME");
    const home = homeGiven !== undefined ? path.resolve(homeGiven) : defaultHome();
    let socket;
    if (socketGiven !== undefined) {
        socket = path.resolve(socketGiven);
    }
    else if (homeGiven !== undefined) {
        socket = path.join(home, "run", "boxd.sock");
    }
    else {
        const runtime = process.platform === "darwin" ? undefined : envPath("XDG_RUNTIME_DIR");
        const tmp = os.tmpdir();
        const uid = myUid();
        if (runtime !== undefined && path.isAbsolute(runtime)) {
            socket = path.join(runtime, "boxd", "boxd.sock");
        }
        else if (privateTo(uid, tmp)) {
            socket = path.join(tmp, `boxd-${uid}`, "boxd.sock");
        }
        else {
            socket = path.join(home, "run", "boxd.sock");
        }
    }
    const len = Buffer.byteLength(socket);
    if (len > MAX_SOCKET_PATH) {
        throw new InvalidArgumentError(status.INVALID_ARGUMENT, `socket path is ${len} bytes, longer than the ${MAX_SOCKET_PATH} this platform allows: ${socket}; pass a shorter socket (or BOXD_SOCKET)`);
    }
    return { socket, home, socketIsDefault: socketGiven === undefined };
}
/**
 * The socket the daemon holding `home` says it serves (the second line of
 * `HOME/boxd.lock`), if the record names one. Node cannot test the lock
 * itself (no `flock`), so a caller believes the record only when the daemon
 * answering there reports this very home.
 */
export function lockRecordSocket(home) {
    let text;
    try {
        const fd = fs.openSync(path.join(home, "boxd.lock"), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
        try {
            const buf = Buffer.alloc(4096);
            const n = fs.readSync(fd, buf, 0, buf.length, 0);
            text = buf.subarray(0, n).toString("utf8");
        }
        finally {
            fs.closeSync(fd);
        }
    }
    catch {
        return undefined;
    }
    const socket = text.split("\n")[1]?.trim();
    return socket !== undefined && socket.startsWith("/") ? socket : undefined;
}
