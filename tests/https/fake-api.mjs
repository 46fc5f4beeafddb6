// A fake model API over HTTPS on loopback, for a box whose API key stays
// outside it: records what it receives (the real key, if boxd put it in)
// and answers as the Anthropic Messages API does, plus two helpers:
// /echo (the authorization it got, in a header and the body, as an
// upstream's error message often does) and /sse (two events a second
// apart).
//
// usage: node fake-api.mjs KEY.pem CERT.pem LOG.jsonl
// Prints "listening PORT" on stdout when ready.
import https from "node:https";
import fs from "node:fs";

const [keyFile, certFile, logFile] = process.argv.slice(2);
const log = (entry) => fs.appendFileSync(logFile, JSON.stringify(entry) + "\n");

function sse(res, events) {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  for (const [event, data] of events) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  res.end();
}

const message = {
  id: "msg_fake",
  type: "message",
  role: "assistant",
  model: "claude-fake",
  content: [{ type: "text", text: "hello from the fake API" }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 1, output_tokens: 5 },
};

const server = https.createServer(
  { key: fs.readFileSync(keyFile), cert: fs.readFileSync(certFile) },
  (req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const auth = req.headers["authorization"] ?? req.headers["x-api-key"] ?? "";
      log({ method: req.method, url: req.url, auth, encoding: req.headers["accept-encoding"] ?? "" });
      if (req.url === "/echo") {
        res.writeHead(401, { "content-type": "text/plain", "x-echo": auth });
        res.end(`invalid key: ${auth}`);
      } else if (req.url === "/sse") {
        res.writeHead(200, { "content-type": "text/event-stream" });
        res.write("data: one\n\n");
        setTimeout(() => res.end("data: two\n\n"), 1000);
      } else if (req.url.startsWith("/v1/messages")) {
        const ask = body ? JSON.parse(body) : {};
        if (!ask.stream) {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify(message));
          return;
        }
        sse(res, [
          ["message_start", { type: "message_start", message: { ...message, content: [], stop_reason: null } }],
          ["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }],
          ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "hello from the fake API" } }],
          ["content_block_stop", { type: "content_block_stop", index: 0 }],
          ["message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } }],
          ["message_stop", { type: "message_stop" }],
        ]);
      } else {
        res.writeHead(404);
        res.end("not here");
      }
    });
  },
);
server.listen(0, "0.0.0.0", () => console.log(`listening ${server.address().port}`));
