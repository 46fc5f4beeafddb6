// A real boxd on a temporary socket and home for the suite: started from
// BOXD_BIN with `--socket DIR/run/boxd.sock --home DIR/home` (DIR a fresh
// 0700 directory under /tmp), stopped with SIGTERM.

import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { Boxd } from "../dist/index.js";

/**
 * The environment variable `name`, which the suite needs.
 * @param {string} name
 */
export function required(name) {
  const v = process.env[name];
  if (v === undefined || v === "") {
    throw new Error(`${name} is not set (BOXD_BIN: the built boxd binary; BOXD_TEST_IMAGE: the busybox OCI layout)`);
  }
  return v;
}

export class TestDaemon {
  constructor() {
    /** @type {string} */
    this.dir = fs.mkdtempSync(path.join("/tmp", "boxd-sdk-ts-"));
    fs.chmodSync(this.dir, 0o700);
    this.socket = path.join(this.dir, "run", "boxd.sock");
    this.home = path.join(this.dir, "home");
    /** @type {import("node:child_process").ChildProcess | undefined} */
    this.child = undefined;
    /** @type {Promise<void> | undefined} */
    this.exited = undefined;
  }

  /** Starts boxd and waits until it answers. */
  async start() {
    fs.mkdirSync(this.home, { recursive: true, mode: 0o700 });
    const log = fs.openSync(path.join(this.dir, "boxd.log"), "a", 0o600);
    const child = spawn(
      required("BOXD_BIN"),
      ["--socket", this.socket, "--home", this.home, "--engine", process.env.BOXD_TEST_ENGINE ?? "namespace"],
      { stdio: ["ignore", "ignore", log], env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" } },
    );
    fs.closeSync(log);
    this.child = child;
    this.exited = new Promise((resolve) => child.once("exit", () => resolve()));
    const deadline = Date.now() + 20_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`boxd exited at start: ${this.log()}`);
      }
      try {
        const c = await Boxd.connect({ socket: this.socket, home: this.home, start: false });
        c.close();
        return;
      } catch (e) {
        if (Date.now() > deadline) {
          throw new Error(`boxd did not answer within 20 s: ${e}; log: ${this.log()}`);
        }
        await sleep(50);
      }
    }
  }

  /** Stops boxd with SIGTERM and waits for it to exit. */
  async stop() {
    const child = this.child;
    if (child === undefined) {
      return;
    }
    this.child = undefined;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    await this.exited;
    clearTimeout(timer);
  }

  /** A client of this daemon (never starting one). */
  connect() {
    return Boxd.connect({ socket: this.socket, home: this.home, start: false });
  }

  /** What boxd logged. */
  log() {
    try {
      return fs.readFileSync(path.join(this.dir, "boxd.log"), "utf8");
    } catch {
      return "";
    }
  }

  /** Removes the temporary directory (boxd stopped first). */
  cleanup() {
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

