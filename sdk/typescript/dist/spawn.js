/**
 * Starting boxd on demand, as the Rust client does (`client/src/spawn.rs`):
 * `boxd --socket S --home H`, detached in a session of its own, its stderr
 * appended to `HOME/logs/boxd.stderr`; then wait until it answers, and
 * report at once, with the last line it logged, when it exits instead.
 *
 * @module
 */
import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Connection } from "./connection.js";
import { DaemonNotRunningError, UnavailableError } from "./errors.js";
import { lockRecordSocket } from "./paths.js";
/** How long to wait for a freshly started daemon to answer. */
export const START_TIMEOUT_MS = 20_000;
/**
 * The daemon on `socket`, if one answers; `undefined` if nothing does. A
 * socket this user cannot trust, or a daemon of another protocol, is an
 * error, not a reason to start a second daemon.
 */
export async function tryDescribe(socket, started = false) {
    const connection = new Connection(socket);
    try {
        const describe = await connection.describe({ deadline: Date.now() + 5_000 });
        return { connection, describe, started };
    }
    catch (e) {
        connection.close();
        if (e instanceof DaemonNotRunningError || e instanceof UnavailableError) {
            return undefined;
        }
        throw e;
    }
}
/**
 * The daemon that holds `paths.home` when its lock record names another
 * socket than `paths.socket` (a derived socket only) and the daemon there
 * reports this very home.
 */
async function servingElsewhere(paths) {
    if (!paths.socketIsDefault) {
        return undefined;
    }
    const serving = lockRecordSocket(paths.home);
    if (serving === undefined || serving === paths.socket) {
        return undefined;
    }
    const running = await tryDescribe(serving);
    if (running !== undefined && path.resolve(running.describe.home) !== path.resolve(paths.home)) {
        running.connection.close();
        return undefined;
    }
    return running;
}
function lastLine(log) {
    try {
        const lines = fs.readFileSync(log, "utf8").split("\n");
        return lines.reverse().find((l) => l.trim() !== "") ?? "";
    }
    catch {
        return "";
    }
}
/**
 * Connects to the daemon of `paths`, starting it first when nothing
 * answers. Several processes may start one at once: one wins the home's
 * lock, the others exit at once, and every caller waits for the winner.
 *
 * @throws {DaemonNotRunningError} boxd exited (with its last log line) or
 *   did not answer in time, or could not be run.
 * @throws {UntrustedSocketError} the socket is not this user's.
 */
export async function ensureRunning(paths, options = {}) {
    const found = (await tryDescribe(paths.socket)) ?? (await servingElsewhere(paths));
    if (found !== undefined) {
        return found;
    }
    const bin = options.boxdBin ?? process.env["BOXD_BIN"] ?? "boxd";
    const logs = path.join(paths.home, "logs");
    const log = path.join(logs, "boxd.stderr");
    let stderr;
    try {
        fs.mkdirSync(logs, { recursive: true, mode: 0o700 });
        stderr = fs.openSync(log, fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT, 0o600);
    }
    catch (e) {
        throw new DaemonNotRunningError(paths.socket, `cannot prepare ${log}: ${e.message}`, { cause: e });
    }
    let exit;
    let spawnError;
    try {
        const child = spawn(bin, ["--socket", paths.socket, "--home", paths.home, ...(options.args ?? [])], {
            // A session of its own: the daemon outlives this process, its
            // terminal and the signals sent to this process's group.
            detached: true,
            stdio: ["ignore", "ignore", stderr],
        });
        child.on("error", (e) => {
            spawnError = e;
        });
        child.on("exit", (code, signal) => {
            exit = { code, signal };
        });
        child.unref();
    }
    finally {
        fs.closeSync(stderr);
    }
    const deadline = Date.now() + (options.timeoutMs ?? START_TIMEOUT_MS);
    while (Date.now() < deadline) {
        if (spawnError !== undefined) {
            throw new DaemonNotRunningError(paths.socket, `cannot run ${bin}: ${spawnError.message}`, { cause: spawnError });
        }
        const running = (await tryDescribe(paths.socket, true)) ?? (exit !== undefined ? await servingElsewhere(paths) : undefined);
        if (running !== undefined) {
            return running;
        }
        if (exit !== undefined) {
            const line = lastLine(log);
            // Another boxd holding the home means another client won the race:
            // wait for it to answer. Otherwise ours failed.
            if (!/another boxd \(pid \d+\) is already serving/.test(line)) {
                const how = exit.signal !== null ? `signal ${exit.signal}` : `exit code ${exit.code}`;
                throw new DaemonNotRunningError(paths.socket, `boxd exited (${how}): ${line} (log: ${log})`);
            }
        }
        await sleep(20);
    }
    throw new DaemonNotRunningError(paths.socket, `boxd did not answer within ${Math.round((options.timeoutMs ?? START_TIMEOUT_MS) / 1000)} s; see ${log}`);
}
