// An ACP client built with the official SDK (@agentclientprotocol/sdk), which
// spawns its agent as `command + args` and speaks ACP over its stdio, as an
// editor's agent host does. It knows nothing about boxes.
//
// usage: node acp-client.mjs [--cwd DIR] [--prompt TEXT] -- COMMAND ARGS...
// Prints one JSON object on stdout: the initialize result, the session id,
// the stop reason, the agent's text, the kinds of updates seen, and timings.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const argv = process.argv.slice(2);
const sep = argv.indexOf("--");
if (sep < 0 || sep === argv.length - 1) {
  console.error("usage: acp-client.mjs [--cwd DIR] [--prompt TEXT] -- COMMAND ARGS...");
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

const result = { updates: {}, text: "", timings: {} };
const app = acp
  .client({ name: "boxd-acp-test-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    const kind = params.update.sessionUpdate;
    result.updates[kind] = (result.updates[kind] ?? 0) + 1;
    if (kind === "agent_message_chunk" && params.update.content.type === "text") {
      result.text += params.update.content.text;
    }
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => ({
    outcome: { outcome: "selected", optionId: params.options[0].optionId },
  }));

try {
  await app.connectWith(stream, async (ctx) => {
    result.initialize = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name: "boxd-acp-test-client", version: "0.1.0" },
    });
    result.timings.initializeMs = ms();
    if (opts.prompt === undefined) return;
    const session = await ctx.request(acp.methods.agent.session.new, {
      cwd: opts.cwd ?? process.cwd(),
      mcpServers: [],
    });
    result.sessionId = session.sessionId;
    result.timings.sessionNewMs = ms();
    const response = await ctx.request(acp.methods.agent.session.prompt, {
      sessionId: session.sessionId,
      prompt: [{ type: "text", text: opts.prompt }],
    });
    result.stopReason = response.stopReason;
    result.timings.promptMs = ms();
  });
} catch (e) {
  result.error = String(e?.message ?? e);
}
agent.stdin.end();
const timer = setTimeout(() => agent.kill("SIGTERM"), 5000);
result.exit = await exited;
clearTimeout(timer);
// Exit once the result is out: a pipe takes it asynchronously.
process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(result.error ? 1 : 0));
