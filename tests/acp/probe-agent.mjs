// A small ACP agent built with the official SDK, for the proxy's tests: it
// calls every client method an agent may call, as its prompt tells it, and
// answers with what came back. Run inside a box (its stdout is ACP).
//
// A prompt is a JSON script: {"steps": [STEP, ...]}, each step one of
//   {"op": "terminal", "command", "args"?, "cwd"?, "outputByteLimit"?, "kill"?: true, "noRelease"?: true}
//       terminal/create, a tool call embedding it, then (kill: terminal/kill)
//       terminal/wait_for_exit, terminal/output, terminal/release
//   {"op": "read", "path", "line"?, "limit"?}      fs/read_text_file
//   {"op": "write", "path", "content"}            fs/write_text_file
//   {"op": "symlink", "target", "path"}           a symlink made in the box itself
//   {"op": "local", "path"}                       the file as the box sees it (node:fs)
//   {"op": "location", "path"}                    a tool call with that location and a diff
//   {"op": "request", "method", "params"}         any request to the client
//   {"op": "raw", "line"}                         a line written to stdout as it is
//   {"op": "big", "bytes"}                        a line of that many bytes
//   {"op": "spawn", "command"}                    the command run by the agent itself (sh -c)
//   {"op": "exit", "code"}                        the agent exits, mid-turn
// A step with "quiet": true answers with its output's length, not the
// output; every step's answer says how long it took ("ms").
// The answer is one agent_message_chunk: RESULTS<<[...]>> with each step's
// {ok, result} or {ok: false, error}; then end_turn.
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
let clientCaps = {};
let toolCalls = 0;

// A line written past the SDK, once it has left this process.
function writeRaw(line) {
  return new Promise((resolve) => process.stdout.write(line, resolve));
}

async function step(client, sessionId, s) {
  switch (s.op) {
    case "terminal": {
      const t = await client.createTerminal({
        sessionId,
        command: s.command,
        args: s.args,
        cwd: s.cwd,
        env: [{ name: "PROBE", value: "1" }],
        outputByteLimit: s.outputByteLimit,
      });
      const toolCallId = `probe-${toolCalls++}`;
      await client.notify(acp.methods.client.session.update, {
        sessionId,
        update: { sessionUpdate: "tool_call", toolCallId, title: s.command, kind: "execute", status: "in_progress", content: [{ type: "terminal", terminalId: t.id }] },
      });
      if (s.kill) await t.kill();
      const exit = await t.waitForExit();
      const output = await t.currentOutput();
      await client.notify(acp.methods.client.session.update, {
        sessionId,
        update: { sessionUpdate: "tool_call_update", toolCallId, status: "completed" },
      });
      if (!s.noRelease) await t.release();
      let afterRelease = null;
      if (!s.noRelease) {
        try {
          await client.request(acp.methods.client.terminal.output, { sessionId, terminalId: t.id });
          afterRelease = "answered";
        } catch (e) {
          afterRelease = e.code;
        }
      }
      const shown = s.quiet ? output.output.length : output.output;
      return { id: t.id, exit, output: shown, truncated: output.truncated, afterRelease };
    }
    case "read":
      return await client.request(acp.methods.client.fs.readTextFile, { sessionId, path: s.path, line: s.line, limit: s.limit });
    case "write":
      return await client.request(acp.methods.client.fs.writeTextFile, { sessionId, path: s.path, content: s.content });
    case "symlink":
      fs.rmSync(s.path, { force: true });
      fs.symlinkSync(s.target, s.path);
      return "made";
    case "local":
      return fs.existsSync(s.path) ? fs.readFileSync(s.path, "utf8") : null;
    case "location": {
      const toolCallId = `probe-${toolCalls++}`;
      await client.notify(acp.methods.client.session.update, {
        sessionId,
        update: {
          sessionUpdate: "tool_call", toolCallId, title: "edit", kind: "edit", status: "completed",
          locations: [{ path: s.path, line: 1 }],
          content: [{ type: "diff", path: s.path, oldText: "a", newText: "b" }],
        },
      });
      return toolCallId;
    }
    case "request":
      return await client.request(s.method, s.params);
    case "raw":
      await writeRaw(s.line + "\n");
      return "written";
    case "spawn": {
      const child = spawn("sh", ["-c", s.command], { stdio: ["ignore", "pipe", "pipe"] });
      const chunks = [];
      child.stdout.on("data", (d) => chunks.push(d));
      child.stderr.on("data", (d) => chunks.push(d));
      const code = await new Promise((r) => child.on("close", r));
      const output = Buffer.concat(chunks).toString("utf8");
      return { exit: { exitCode: code }, output: s.quiet ? output.length : output };
    }
    case "exit":
      process.exit(s.code);
    case "big":
      await writeRaw(JSON.stringify({ jsonrpc: "2.0", method: "session/update", params: { pad: "x".repeat(s.bytes) } }) + "\n");
      return "written";
    default:
      throw new Error(`unknown op ${s.op}`);
  }
}

const app = acp
  .agent({ name: "boxd-probe-agent" })
  .onRequest(acp.methods.agent.initialize, ({ params }) => {
    clientCaps = params.clientCapabilities ?? {};
    return {
      protocolVersion: acp.PROTOCOL_VERSION,
      agentCapabilities: { loadSession: false, mcpCapabilities: { http: true, sse: true } },
      agentInfo: { name: "boxd-probe-agent", version: "0.1.0" },
      authMethods: [],
      _meta: { clientCapabilities: clientCaps, hostname: os.hostname() },
    };
  })
  .onRequest(acp.methods.agent.session.new, ({ params }) => ({
    sessionId: "probe-session",
    _meta: { cwd: params.cwd, cwdExists: fs.existsSync(params.cwd), additionalDirectories: params.additionalDirectories ?? [], mcpServers: params.mcpServers, hostname: os.hostname() },
  }))
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const script = JSON.parse(params.prompt.map((b) => b.text ?? "").join(""));
    const results = [];
    for (const s of script.steps) {
      const begin = performance.now();
      const ms = () => Math.round((performance.now() - begin) * 100) / 100;
      try {
        results.push({ ok: true, result: await step(client, params.sessionId, s), ms: ms() });
      } catch (e) {
        results.push({ ok: false, error: { code: e.code, message: e.message }, ms: ms() });
      }
    }
    await client.notify(acp.methods.client.session.update, {
      sessionId: params.sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `RESULTS<<${JSON.stringify(results)}>>` } },
    });
    return { stopReason: "end_turn" };
  });

app.connect(stream).closed.then(() => process.exit(0));
