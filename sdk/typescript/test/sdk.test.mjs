// The SDK against a real boxd (BOXD_BIN) on a temporary socket, with the
// busybox OCI layout of BOXD_TEST_IMAGE. Every box made here is removed
// before the daemon stops (boxes' supervisors outlive the daemon).

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { Readable } from "node:stream";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import * as tarStream from "tar-stream";

import {
  Boxd,
  BoxdError,
  DaemonNotRunningError,
  ExecResult,
  FailedPreconditionError,
  NotFoundError,
  UntrustedSocketError,
} from "../dist/index.js";
import { unpackHost } from "../dist/tar.js";
import { TestDaemon, required } from "./daemon.mjs";

const IMAGE = required("BOXD_TEST_IMAGE");
const daemon = new TestDaemon();
/** @type {Boxd} */
let boxd;
/** Every box this suite made, removed at the end. */
const made = new Set();

/**
 * A running box of the test image, named `name`.
 * @param {string} name
 */
async function box(name) {
  made.add(name);
  return boxd.createOrReuse(name, { image: IMAGE });
}

before(async () => {
  await daemon.start();
  boxd = await daemon.connect();
});

after(async () => {
  try {
    if (boxd !== undefined) {
      for (const name of made) {
        await boxd
          .box(name)
          .remove({ force: true })
          .catch((e) => {
            if (!(e instanceof NotFoundError)) {
              throw e;
            }
          });
      }
      boxd.close();
    }
  } finally {
    await daemon.stop();
    daemon.cleanup();
  }
});

describe("boxes", () => {
  test("createOrReuse creates a box, then reuses it", async () => {
    made.add("reuse");
    const first = await boxd.create("reuse", { image: IMAGE });
    assert.equal(first.created, true);
    assert.equal(first.box.info?.state, "running");
    const again = await boxd.create("reuse", { image: IMAGE, env: { DIFFERENT: "1" } });
    assert.equal(again.created, false);
    assert.ok(again.warnings.length > 0, "a reuse with another spec warns");
    const listed = await boxd.listBoxes();
    assert.ok(listed.some((b) => b.name === "reuse" && b.state === "running"));
    const info = await (await boxd.getBox("reuse")).inspect();
    assert.equal(info.image, IMAGE);
    assert.equal(typeof info.createdAtMs, "number");
  });

  test("stop, start, snapshot, restore, clone, stats", async () => {
    const b = await box("lifecycle");
    await b.files.write("/root/state", "one");
    const snap = await b.snapshot("s1");
    assert.equal(snap.name, "s1");
    await b.files.write("/root/state", "two");
    await b.stop();
    assert.equal((await b.inspect()).state, "stopped");
    await b.restore("s1");
    await b.start();
    assert.equal((await b.files.read("/root/state")).toString(), "one");
    assert.deepEqual(
      (await b.snapshots()).map((s) => s.name),
      ["s1"],
    );
    await b.removeSnapshot("s1");
    made.add("lifecycle-clone");
    const c = await b.clone("lifecycle-clone");
    assert.equal(c.info?.state, "created");
    await c.start();
    assert.equal((await c.files.read("/root/state")).toString(), "one");
    const s = await b.stats();
    assert.equal(s.name, "lifecycle");
    assert.ok(s.pids >= 1);
  });
});

describe("exec", () => {
  test("stdin in, binary output out, byte for byte", async () => {
    const b = await box("exec");
    const every = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const r = await b.exec(["cat"], { stdin: every });
    assert.ok(r instanceof ExecResult);
    assert.equal(r.exitCode, 0);
    assert.ok(r.stdout.equals(every), "all 256 byte values come back");
    const big = randomBytes(5 * 1024 * 1024 + 123);
    const r2 = await b.exec(["cat"], { stdin: big });
    assert.equal(r2.stdout.length, big.length);
    assert.ok(r2.stdout.equals(big), "5 MiB through cat, unchanged");
    const r3 = await b.exec(["sh", "-c", 'printf "$A"; echo oops >&2; cd /tmp; pwd >&2; exit 7'], {
      env: { A: "x y" },
      cwd: "/",
    });
    assert.equal(r3.text, "x y");
    assert.equal(r3.stderrText, "oops\n/tmp\n");
    assert.equal(r3.exitCode, 7);
    assert.equal(r3.ok, false);
    const r4 = await b.exec(["sleep", "10"], { timeoutMs: 200 });
    assert.equal(r4.timedOut, true);
    assert.equal(r4.signal, 9);
    const r5 = await b.exec(["/no/such/command"]);
    assert.equal(r5.exitCode, 127);
    assert.notEqual(r5.error, "");
  });

  test("a streaming exec: output as it comes, stdin, then killed by a signal", async () => {
    const b = await box("exec");
    const e = await b.spawn(["sh", "-c", "echo ready; while read line; do echo got $line; done"]);
    assert.match(e.id, /./);
    const it = e.output();
    const first = await it.next();
    assert.equal(first.done, false);
    assert.equal(first.value?.stream, "stdout");
    assert.equal(first.value?.data.toString(), "ready\n");
    await e.write("hello\n");
    let seen = "";
    while (!seen.includes("got hello\n")) {
      const c = await it.next();
      assert.equal(c.done, false);
      seen += c.value?.data.toString();
    }
    await e.signal("SIGTERM");
    for (;;) {
      const c = await it.next();
      if (c.done) {
        break;
      }
    }
    const exit = await e.wait();
    assert.equal(exit.signal, 15);
    assert.equal(exit.exitCode, null);
    await assert.rejects(e.write("late"), FailedPreconditionError);
  });

  test("wait() alone takes the output; end() closes stdin", async () => {
    const b = await box("exec");
    const e = await b.spawn(["sh", "-c", "cat; echo done"]);
    // Fed while wait() takes the output: the command's stdout is read as
    // it writes, so its stdin keeps flowing.
    const feeding = e.write("x".repeat(3 << 20)).then(() => e.end());
    const exit = await e.wait();
    await feeding;
    assert.equal(exit.exitCode, 0);
  });

  test("an exec lives through a restart of boxd", async () => {
    const b = await box("restart");
    /** @type {string[]} */
    const reconnects = [];
    const e = await b.spawn(["sh", "-c", "sleep 2; echo survived"], {
      stdin: false,
      onReconnect: (ev) => reconnects.push(ev.kind),
    });
    const result = (async () => {
      let out = "";
      for await (const c of e) {
        out += c.data.toString();
      }
      return { out, exit: await e.wait() };
    })();
    await sleep(300);
    await daemon.stop();
    await daemon.start();
    const { out, exit } = await result;
    assert.equal(out, "survived\n");
    assert.equal(exit.exitCode, 0);
    assert.deepEqual(reconnects.slice(0, 2), ["lost", "reattached"]);
    // The client made before the restart works on.
    assert.ok((await boxd.listBoxes()).some((x) => x.name === "restart"));
  });
});

describe("files", () => {
  test("write, read, list", async () => {
    const b = await box("files");
    const data = randomBytes(300_000);
    await b.files.write("/tmp/blob", data, { mode: 0o600 });
    assert.ok((await b.files.read("/tmp/blob")).equals(data));
    await b.files.write("/tmp/text", "héllo\n");
    assert.equal((await b.files.read("/tmp/text")).toString(), "héllo\n");
    const entries = await b.files.list("/tmp");
    const blob = entries.find((x) => x.name === "blob");
    assert.deepEqual(
      blob && { kind: blob.kind, size: blob.size, mode: blob.mode },
      { kind: "file", size: data.length, mode: 0o600 },
    );
    await assert.rejects(b.files.read("/tmp/nothing-here"), NotFoundError);
    await assert.rejects(b.files.read("/tmp"), /not a regular file/);
    await assert.rejects(b.files.list("/nothing-here"), NotFoundError);
    // A missing directory is an error naming it, never a file in its place.
    await assert.rejects(b.files.write("/tmp/nodir/y.txt", "no"), /\/tmp\/nodir/);
    await assert.rejects(b.files.read("/tmp/nodir"), NotFoundError);
  });

  test("copy a tree in and out", async () => {
    const b = await box("files");
    const src = fs.mkdtempSync(path.join(daemon.dir, "src-"));
    fs.mkdirSync(path.join(src, "sub"));
    fs.writeFileSync(path.join(src, "a.txt"), "alpha");
    fs.writeFileSync(path.join(src, "sub", "b.bin"), Buffer.from([0, 1, 2, 255]));
    fs.writeFileSync(path.join(src, "empty"), "");
    fs.chmodSync(path.join(src, "a.txt"), 0o751);
    fs.symlinkSync("a.txt", path.join(src, "link"));
    const taken = await b.files.copyIn(src, "/tmp/tree");
    assert.ok(taken > 0);
    const listed = (await b.files.list("/tmp/tree")).map((x) => `${x.name}:${x.kind}`).sort();
    assert.deepEqual(listed, ["a.txt:file", "empty:file", "link:symlink", "sub:directory"]);
    assert.equal((await b.files.read("/tmp/tree/link")).toString(), "alpha");

    const out = path.join(daemon.dir, "out");
    await b.files.copyOut("/tmp/tree", out);
    assert.equal(fs.readFileSync(path.join(out, "a.txt"), "utf8"), "alpha");
    assert.equal(fs.statSync(path.join(out, "a.txt")).mode & 0o777, 0o751 & ~process.umask());
    assert.ok(fs.readFileSync(path.join(out, "sub", "b.bin")).equals(Buffer.from([0, 1, 2, 255])));
    assert.equal(fs.readFileSync(path.join(out, "empty")).length, 0);
    assert.equal(fs.readlinkSync(path.join(out, "link")), "a.txt");
    // Into an existing directory: the tree lands in it, by its name.
    const into = fs.mkdtempSync(path.join(daemon.dir, "into-"));
    await b.files.copyOut("/tmp/tree/sub", into);
    assert.ok(fs.existsSync(path.join(into, "sub", "b.bin")));
    await assert.rejects(b.files.copyOut("/tmp/none", path.join(daemon.dir, "none")), NotFoundError);
  });

  test("what a box sends never lands outside the destination", async () => {
    /**
     * A tar of `entries`.
     * @param {Array<{name: string, type?: "file"|"symlink"|"link"|"directory", linkname?: string, body?: string}>} entries
     */
    const tar = async (entries) => {
      const pack = tarStream.pack();
      for (const e of entries) {
        const header = { name: e.name, type: e.type ?? "file", linkname: e.linkname };
        if (header.type === "file") {
          pack.entry(header, e.body ?? "x");
        } else {
          pack.entry(header);
        }
      }
      pack.finalize();
      /** @type {Buffer[]} */
      const parts = [];
      for await (const c of pack) {
        parts.push(/** @type {Buffer} */ (c));
      }
      return Buffer.concat(parts);
    };
    const outside = fs.mkdtempSync(path.join(daemon.dir, "outside-"));
    const cases = [
      { why: "..", entries: [{ name: "d/", type: /** @type {const} */ ("directory") }, { name: "d/../../escape" }] },
      { why: "absolute", entries: [{ name: "/tmp/escape" }] },
      {
        why: "beneath a symlink it made",
        entries: [{ name: "d/", type: /** @type {const} */ ("directory") }, { name: "d/up", type: /** @type {const} */ ("symlink"), linkname: outside }, { name: "d/up/escape" }],
      },
      { why: "a hard link to a host file", entries: [{ name: "d/", type: /** @type {const} */ ("directory") }, { name: "d/h", type: /** @type {const} */ ("link"), linkname: "/etc/passwd" }] },
    ];
    for (const c of cases) {
      const dest = fs.mkdtempSync(path.join(daemon.dir, "dest-"));
      await assert.rejects(unpackHost(dest, Readable.from(await tar(c.entries))), BoxdError, c.why);
      assert.deepEqual(fs.readdirSync(outside), [], c.why);
    }
    // An existing symlink at an entry's name is replaced, not written through.
    const dest = fs.mkdtempSync(path.join(daemon.dir, "dest-"));
    fs.symlinkSync(path.join(outside, "target"), path.join(dest, "f"));
    await unpackHost(dest, Readable.from(await tar([{ name: "f", body: "new" }])));
    assert.equal(fs.readFileSync(path.join(dest, "f"), "utf8"), "new");
    assert.ok(!fs.lstatSync(path.join(dest, "f")).isSymbolicLink());
    assert.deepEqual(fs.readdirSync(outside), []);
  });
});

describe("events", () => {
  test("initial list, synced, then live events", async () => {
    const b = await box("events");
    const events = boxd.events({ initial: true });
    /** @type {import("../dist/index.js").BoxEvent[]} */
    const initial = [];
    for (;;) {
      const { value, done } = await events.next();
      assert.equal(done, false);
      if (value?.synced) {
        assert.equal(value.name, "");
        break;
      }
      assert.equal(value?.initial, true);
      initial.push(/** @type {import("../dist/index.js").BoxEvent} */ (value));
    }
    assert.ok(initial.some((e) => e.name === "events" && e.state === "running"));
    await b.stop();
    /** @type {string[]} */
    const live = [];
    while (!live.includes("stopped")) {
      const { value, done } = await events.next();
      assert.equal(done, false);
      assert.equal(value?.initial, false);
      if (value?.name === "events") {
        live.push(value.state);
      }
    }
    assert.deepEqual(live, ["stopping", "stopped"]);
    await b.start();
    while (!live.includes("running")) {
      const { value } = await events.next();
      if (value?.name === "events") {
        live.push(value.state);
      }
    }
    await events.return(undefined);
  });
});

describe("errors", () => {
  test("a missing box is NotFoundError, with the daemon's message", async () => {
    const e = await boxd.getBox("no-such-box").catch((x) => x);
    assert.ok(e instanceof NotFoundError, String(e));
    assert.equal(e.codeName, "NOT_FOUND");
    assert.match(e.message, /no-such-box/);
    await assert.rejects(boxd.box("no-such-box").exec(["true"]), NotFoundError);
  });

  test("a bad image fails with the daemon's message", async () => {
    made.add("bad-image");
    const e = await boxd.createOrReuse("bad-image", { image: "/nonexistent/oci-layout" }).catch((x) => x);
    assert.ok(e instanceof BoxdError, String(e));
    assert.match(e.message, /nonexistent/);
    const bad = await boxd.createOrReuse("bad name!", { image: IMAGE }).catch((x) => x);
    assert.equal(bad.codeName, "INVALID_ARGUMENT");
  });

  test("an untrusted socket is refused before anything is sent", async () => {
    /**
     * A listening socket at `dir/boxd.sock` (`dir` made with `dirMode`),
     * counting connections.
     * @param {number} dirMode
     */
    const listening = async (dirMode) => {
      const dir = fs.mkdtempSync(path.join(daemon.dir, "sock-"));
      fs.chmodSync(dir, dirMode);
      const sock = path.join(dir, "boxd.sock");
      const counter = { n: 0 };
      const server = net.createServer((c) => {
        counter.n++;
        c.destroy();
      });
      await new Promise((resolve) => server.listen(sock, () => resolve(undefined)));
      return { sock, server, counter };
    };
    const open = await listening(0o700);
    fs.chmodSync(open.sock, 0o666);
    await assert.rejects(Boxd.connect({ socket: open.sock, start: false }), (e) => {
      assert.ok(e instanceof UntrustedSocketError, String(e));
      assert.match(e.message, /writable by other users \(mode 0666\)/);
      return true;
    });
    const groupDir = await listening(0o770);
    await assert.rejects(Boxd.connect({ socket: groupDir.sock, start: false }), /open to other users \(mode 0770\)/);
    if (process.geteuid?.() === 0) {
      const theirs = await listening(0o700);
      fs.chownSync(theirs.sock, 4242, 4242);
      await assert.rejects(Boxd.connect({ socket: theirs.sock, start: false }), /belongs to uid 4242/);
      theirs.server.close();
    }
    assert.equal(open.counter.n + groupDir.counter.n, 0, "nothing connected to an untrusted socket");
    open.server.close();
    groupDir.server.close();
  });

  test("nothing answering is DaemonNotRunningError", async () => {
    const dir = fs.mkdtempSync(path.join(daemon.dir, "none-"));
    await assert.rejects(Boxd.connect({ socket: path.join(dir, "boxd.sock"), start: false }), DaemonNotRunningError);
  });
});

describe("starting boxd", () => {
  test("connect starts boxd when nothing answers, and reports one that cannot start", async () => {
    const dir = fs.mkdtempSync(path.join(daemon.dir, "auto-"));
    const socket = path.join(dir, "run", "boxd.sock");
    const home = path.join(dir, "home");
    const c = await Boxd.connect({ socket, home, boxdBin: required("BOXD_BIN"), args: ["--engine", "namespace"] });
    try {
      assert.equal(c.started, true);
      assert.equal(c.daemon.socket, socket);
      const again = await Boxd.connect({ socket, home, start: false });
      assert.equal(again.daemon.pid, c.daemon.pid);
      again.close();
    } finally {
      c.close();
      process.kill(c.daemon.pid, "SIGTERM");
      while (isAlive(c.daemon.pid)) {
        await sleep(20);
      }
    }
    const e = await Boxd.connect({
      socket: path.join(dir, "run2", "boxd.sock"),
      home: path.join(dir, "home2"),
      boxdBin: required("BOXD_BIN"),
      args: ["--no-such-flag"],
    }).catch((x) => x);
    assert.ok(e instanceof DaemonNotRunningError, String(e));
    assert.match(e.message, /^boxd exited \(exit code 2\): .*\(log: .*home2\/logs\/boxd.stderr\)$/);
  });
});

/** @param {number} pid */
function isAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
