// An editor-like ACP client built with the official SDK: it advertises what
// editors advertise (terminal, fs read and write, terminal logins) and serves
// them on the host, as an editor does: files read and written with node:fs,
// terminals run with child_process. It records every request the agent side
// sends it, so a test can tell what reached the host.
//
// usage: node editor-client.mjs [--cwd DIR] [--prompt TEXT] [--repeat N]
//          [--mcp JSON] [--additional DIR] -- COMMAND ARGS...
// (--repeat sends the prompt N times; timings.promptsMs has each round trip.)
// Prints one JSON object: initialize, session (result or error), stopReason,
// text, received [{method, params}], toolCalls {id: last content/locations},
// timings.
import { spawn } from "node:child_process";
import fs from "node:fs";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const argv = process.argv.slice(2);
const sep = argv.indexOf("--");
if (sep < 0 || sep === argv.length - 1) {
  console.error("usage: editor-client.mjs [--cwd DIR] [--prompt TEXT] [--mcp JSON] -- COMMAND ARGS...");
  process.exit(2);
}
const opts = {};
for (let i = 0; i < sep; i += 2) opts[argv[i].replace(/^--/, "")] = argv[i + 1];
const [command, ...args] = argv.slice(sep + 1);

const begin = performance.now();
const ms = () => Math.round(performance.now() - begin);
const agent = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => agent.on("exit", (code, signal) => resolve({ code, signal })));
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

const result = { received: [], text: "", toolCalls: {}, updates: {}, timings: {} };
const received = (method, params) => result.received.push({ method, params });

// Host terminals, as an editor runs them (which must never happen here).
const terminals = new Map();

function trim(t) {
  if (t.limit == null || t.bytes <= t.limit) return;
  let all = Buffer.concat(t.chunks);
  let cut = all.length - t.limit;
  while (cut < all.length && (all[cut] & 0xc0) === 0x80) cut++;
  all = all.subarray(cut);
  t.chunks = [all];
  t.bytes = all.length;
  t.truncated = true;
}
let nextTerminal = 0;

const app = acp
  .client({ name: "boxd-editor-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    const u = params.update;
    result.updates[u.sessionUpdate] = (result.updates[u.sessionUpdate] ?? 0) + 1;
    if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") result.text += u.content.text;
    if (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update") {
      const t = (result.toolCalls[u.toolCallId] ??= {});
      if (u.content) t.content = u.content;
      if (u.locations) t.locations = u.locations;
      if (u.status) t.status = u.status;
    }
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    received("session/request_permission", params);
    const allow = params.options.find((o) => o.kind?.startsWith("allow")) ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    received("fs/read_text_file", params);
    return { content: fs.readFileSync(params.path, "utf8") };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
    received("fs/write_text_file", params);
    fs.writeFileSync(params.path, params.content);
    return {};
  })
  .onRequest(acp.methods.client.terminal.create, ({ params }) => {
    received("terminal/create", params);
    const id = `host-term-${nextTerminal++}`;
    const argsList = params.args ?? [];
    const child = argsList.length
      ? spawn(params.command, argsList, { cwd: params.cwd })
      : spawn("sh", ["-c", params.command], { cwd: params.cwd });
    // Kept from the end within outputByteLimit, cut at a character
    // boundary, as the protocol asks of a client.
    const t = { chunks: [], bytes: 0, truncated: false, exit: null, limit: params.outputByteLimit };
    const take = (d) => {
      t.chunks.push(d);
      t.bytes += d.length;
      if (t.limit != null && t.bytes > 2 * t.limit + (1 << 16)) trim(t);
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    t.done = new Promise((r) => child.on("exit", (code, signal) => r((t.exit = { exitCode: code, signal }))));
    t.child = child;
    terminals.set(id, t);
    return { terminalId: id };
  })
  .onRequest(acp.methods.client.terminal.output, ({ params }) => {
    received("terminal/output", params);
    const t = terminals.get(params.terminalId);
    trim(t);
    return { output: Buffer.concat(t.chunks).toString("utf8"), truncated: t.truncated, exitStatus: t.exit };
  })
  .onRequest(acp.methods.client.terminal.waitForExit, async ({ params }) => {
    received("terminal/wait_for_exit", params);
    return await terminals.get(params.terminalId).done;
  })
  .onRequest(acp.methods.client.terminal.kill, ({ params }) => {
    received("terminal/kill", params);
    terminals.get(params.terminalId).child.kill("SIGKILL");
    return {};
  })
  .onRequest(acp.methods.client.terminal.release, ({ params }) => {
    received("terminal/release", params);
    terminals.delete(params.terminalId);
    return {};
  })
  .onRequest("*", ({ method, params }) => {
    received(method, params);
    throw acp.RequestError.methodNotFound(method);
  });

try {
  await app.connectWith(stream, async (ctx) => {
    result.initialize = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {
        fs: { readTextFile: true, writeTextFile: true },
        terminal: true,
        auth: { terminal: true },
        _meta: { "terminal-auth": true },
      },
      clientInfo: { name: "boxd-editor-test", version: "0.1.0" },
    });
    result.timings.initializeMs = ms();
    if (opts.cwd === undefined) return;
    const request = { cwd: opts.cwd, mcpServers: opts.mcp ? JSON.parse(opts.mcp) : [] };
    if (opts.additional) request.additionalDirectories = [opts.additional];
    try {
      result.session = await ctx.request(acp.methods.agent.session.new, request);
    } catch (e) {
      result.sessionError = { code: e.code, message: e.message, data: e.data };
      return;
    }
    result.timings.sessionNewMs = ms();
    if (opts.prompt === undefined) return;
    result.timings.promptsMs = [];
    for (let i = 0; i < Number(opts.repeat ?? 1); i++) {
      if (i > 0) result.text = "";
      const sent = performance.now();
      const response = await ctx.request(acp.methods.agent.session.prompt, {
        sessionId: result.session.sessionId,
        prompt: [{ type: "text", text: opts.prompt }],
      });
      result.timings.promptsMs.push(Math.round((performance.now() - sent) * 1000) / 1000);
      result.stopReason = response.stopReason;
    }
    result.timings.promptMs = ms();
  });
} catch (e) {
  result.error = String(e?.message ?? e);
}
agent.stdin.end();
// claude-code-acp does not exit on EOF: an editor ends its agent.
const timer = setTimeout(() => agent.kill("SIGTERM"), 3000);
result.exit = await exited;
clearTimeout(timer);
for (const t of terminals.values()) t.child.kill("SIGKILL");
// Exit once the result is out: a pipe takes it asynchronously.
process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(result.error ? 1 : 0));
