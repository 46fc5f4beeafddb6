// A fake OpenAI-compatible model server on loopback, so that an agent can
// finish a whole turn with no API key and no network.
//
// POST /v1/chat/completions (streamed or not):
// - when the last message is a tool result: a text answer quoting it;
// - when the last user message contains "RUN: <command>": a `bash` tool call
//   running <command>;
// - otherwise: the text "pong from the fake model".
// Prints "listening PORT" on stdout when ready; logs requests on stderr.
import http from "node:http";

const port = Number(process.env.PORT ?? 0);

function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((c) => c.text ?? "").join("");
  return "";
}

function reply(messages) {
  const last = messages[messages.length - 1] ?? {};
  if (last.role === "tool") {
    return { text: `The command printed: ${textOf(last.content).trim()}` };
  }
  const user = [...messages].reverse().find((m) => m.role === "user");
  const m = /RUN: (.*)$/m.exec(textOf(user?.content));
  if (m) {
    return { tool: { name: "bash", arguments: JSON.stringify({ command: m[1] }) } };
  }
  return { text: "pong from the fake model" };
}

function chunk(delta, finish = null, extra = {}) {
  return {
    id: "chatcmpl-fake",
    object: "chat.completion.chunk",
    created: 1700000000,
    model: "fake-model",
    choices: [{ index: 0, delta, finish_reason: finish }],
    ...extra,
  };
}

const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };

const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", () => {
    process.stderr.write(`fake-llm: ${req.method} ${req.url}\n`);
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: `no route ${req.url}` } }));
      return;
    }
    let request;
    try {
      request = JSON.parse(body);
    } catch {
      res.writeHead(400);
      res.end();
      return;
    }
    const r = reply(request.messages ?? []);
    if (!request.stream) {
      const message = r.tool
        ? { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: r.tool }] }
        : { role: "assistant", content: r.text };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({
        id: "chatcmpl-fake", object: "chat.completion", created: 1700000000, model: "fake-model",
        choices: [{ index: 0, message, finish_reason: r.tool ? "tool_calls" : "stop" }], usage,
      }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const send = (obj) => res.write(`data: ${JSON.stringify(obj)}\n\n`);
    if (r.tool) {
      send(chunk({ role: "assistant", tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: r.tool.name, arguments: "" } }] }));
      send(chunk({ tool_calls: [{ index: 0, function: { arguments: r.tool.arguments } }] }));
      send(chunk({}, "tool_calls"));
    } else {
      send(chunk({ role: "assistant", content: "" }));
      for (const word of r.text.split(/(?<= )/)) send(chunk({ content: word }));
      send(chunk({}, "stop"));
    }
    send({ ...chunk({}, null, { usage }), choices: [] });
    res.write("data: [DONE]\n\n");
    res.end();
  });
});

server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => process.exit(0));
