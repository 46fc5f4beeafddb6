// A fake Anthropic Messages API on loopback, so that Claude Code (through
// @zed-industries/claude-code-acp) finishes whole turns with tool calls and
// no API key, no network.
//
// usage: node fake-anthropic.mjs SCENARIO.json
// SCENARIO is {"tools": [{"name": "mcp__acp__Bash", "input": {...}}, ...]}:
// in a conversation that offers tools, the Nth answer (N = tool results so
// far) asks for tools[N]; after the last one it answers with text that
// quotes every tool result it was given, between "RESULTS<<" and ">>".
// Any other request (titles, summaries, token counts) gets a short text.
// Prints "listening PORT" on stdout when ready; logs requests on stderr.
import http from "node:http";
import fs from "node:fs";

const scenario = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));

function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((c) => (c.type === "text" ? c.text : c.type === "tool_result" ? textOf(c.content) : ""))
    .join("");
}

function toolResults(messages) {
  const out = [];
  for (const m of messages ?? []) {
    if (m.role !== "user" || !Array.isArray(m.content)) continue;
    for (const c of m.content) if (c.type === "tool_result") out.push(textOf(c.content));
  }
  return out;
}

function plan(body) {
  const offersTools = (body.tools ?? []).some((t) => scenario.tools.some((s) => s.name === t.name));
  if (!offersTools) return { text: "fake" };
  const results = toolResults(body.messages);
  if (results.length < scenario.tools.length) return { tool: scenario.tools[results.length], n: results.length };
  return { text: `RESULTS<<${JSON.stringify(results)}>>` };
}

function sse(res, event, data) {
  res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
}

const usage = { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };

const server = http.createServer((req, res) => {
  let raw = "";
  req.on("data", (d) => (raw += d));
  req.on("end", () => {
    process.stderr.write(`fake-anthropic: ${req.method} ${req.url}\n`);
    const url = req.url.split("?")[0];
    if (req.method === "POST" && url.endsWith("/count_tokens")) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ input_tokens: 10 }));
      return;
    }
    if (req.method !== "POST" || !url.endsWith("/v1/messages")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ type: "error", error: { type: "not_found_error", message: `no route ${req.url}` } }));
      return;
    }
    let body;
    try {
      body = JSON.parse(raw);
    } catch {
      res.writeHead(400);
      res.end();
      return;
    }
    const p = plan(body);
    const message = { id: "msg_fake", type: "message", role: "assistant", model: body.model ?? "fake", content: [], stop_reason: null, stop_sequence: null, usage };
    const stop = p.tool ? "tool_use" : "end_turn";
    if (!body.stream) {
      const content = p.tool
        ? [{ type: "tool_use", id: `toolu_fake_${p.n}`, name: p.tool.name, input: p.tool.input }]
        : [{ type: "text", text: p.text }];
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ...message, content, stop_reason: stop }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    sse(res, "message_start", { message });
    if (p.tool) {
      sse(res, "content_block_start", { index: 0, content_block: { type: "tool_use", id: `toolu_fake_${p.n}`, name: p.tool.name, input: {} } });
      sse(res, "content_block_delta", { index: 0, delta: { type: "input_json_delta", partial_json: JSON.stringify(p.tool.input) } });
    } else {
      sse(res, "content_block_start", { index: 0, content_block: { type: "text", text: "" } });
      sse(res, "content_block_delta", { index: 0, delta: { type: "text_delta", text: p.text } });
    }
    sse(res, "content_block_stop", { index: 0 });
    sse(res, "message_delta", { delta: { stop_reason: stop, stop_sequence: null }, usage: { output_tokens: 5 } });
    sse(res, "message_stop", {});
    res.end();
  });
});

server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => process.exit(0));
