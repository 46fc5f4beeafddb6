// Runs `true` in box BOX of the boxd on SOCKET ITERS times (after a few
// warm-ups) through the built SDK and prints one JSON line:
// {"sdk":"typescript","p50_ms":…,"mean_ms":…,"p90_ms":…,"iters":N}
//
//   node bench/exec-true.mjs SOCKET BOX ITERS

import { Boxd } from "../dist/index.js";

const WARMUPS = 5;

const [socket, boxName, itersArg] = process.argv.slice(2);
const iters = Number(itersArg);
if (socket === undefined || boxName === undefined || !Number.isInteger(iters) || iters < 1) {
  process.stderr.write("usage: node bench/exec-true.mjs SOCKET BOX ITERS (ITERS a positive integer)\n");
  process.exit(2);
}

const boxd = await Boxd.connect({ socket, start: false });
try {
  const box = boxd.box(boxName);
  /** @type {number[]} */
  const times = [];
  for (let i = 0; i < WARMUPS + iters; i++) {
    const began = process.hrtime.bigint();
    const r = await box.exec(["true"]);
    const ms = Number(process.hrtime.bigint() - began) / 1e6;
    if (r.exitCode !== 0) {
      throw new Error(`true exited ${r.exitCode} (signal ${r.signal}): ${r.error || r.stderrText}`);
    }
    if (i >= WARMUPS) {
      times.push(ms);
    }
  }
  times.sort((a, b) => a - b);
  /** @param {number} q */
  const quantile = (q) => /** @type {number} */ (times[Math.min(times.length - 1, Math.floor(q * times.length))]);
  const mean = times.reduce((a, b) => a + b, 0) / times.length;
  const round = (/** @type {number} */ x) => Math.round(x * 1000) / 1000;
  process.stdout.write(
    `${JSON.stringify({ sdk: "typescript", p50_ms: round(quantile(0.5)), mean_ms: round(mean), p90_ms: round(quantile(0.9)), iters })}\n`,
  );
} catch (e) {
  process.stderr.write(`exec-true: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exitCode = 1;
} finally {
  boxd.close();
}
