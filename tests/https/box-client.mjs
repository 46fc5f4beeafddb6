// Runs in a box whose secret API_KEY is for host.boxd.internal: the clients
// an agent uses (fetch, https, the official Anthropic SDK), through boxd's
// proxy, each with the placeholder it holds. Prints one JSON object.
//
// usage: node box-client.mjs PORT PINNED_CA.pem [REQUESTS [OTHER_HOST]]
import https from "node:https";
import fs from "node:fs";
import Anthropic from "@anthropic-ai/sdk";

const [port, pinnedFile, many, other] = process.argv.slice(2);
const base = `https://host.boxd.internal:${port}`;
const key = process.env.API_KEY;
const out = { key };

function get(url, options = {}) {
  return new Promise((resolve) => {
    const req = https.get(url, { headers: { authorization: `Bearer ${key}` }, ...options }, (res) => {
      let body = "";
      const issuer = res.socket?.getPeerCertificate?.()?.issuer?.CN ?? null;
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode, body, issuer }));
    });
    req.on("error", (e) => resolve({ error: e.code ?? e.message }));
  });
}

try {
  const r = await fetch(`${base}/echo`, { headers: { authorization: `Bearer ${key}` } });
  out.fetch = { status: r.status, echo: r.headers.get("x-echo"), body: await r.text() };
} catch (e) {
  out.fetch = { error: String(e.cause?.code ?? e.cause ?? e) };
}
out.https = await get(`${base}/echo`);

// The first event of a stream, and when it came against the last.
{
  const started = Date.now();
  const r = await fetch(`${base}/sse`);
  const reader = r.body.getReader();
  const first = await reader.read();
  const firstAt = Date.now() - started;
  let rest = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest += new TextDecoder().decode(value);
  }
  out.sse = { first: new TextDecoder().decode(first.value), firstAt, endAt: Date.now() - started, rest };
}

const client = new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0 });
const msg = await client.messages.create({ model: "claude-fake", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
out.sdk = msg.content[0].text;
let streamed = "";
const stream = client.messages.stream({ model: "claude-fake", max_tokens: 16, messages: [{ role: "user", content: "hi" }] });
for await (const event of stream) if (event.type === "content_block_delta") streamed += event.delta.text;
out.sdkStream = streamed;
for (let i = 0; i < Number(many ?? 0); i++) {
  await client.messages.create({ model: "claude-fake", max_tokens: 16, messages: [{ role: "user", content: "again" }] });
}

// A client pinned to the real server's CA, to a host boxd intercepts.
const pinned = fs.readFileSync(pinnedFile);
out.pinned = await get(`${base}/echo`, { ca: pinned });
// The same server by a name no secret has: a blind tunnel, the server's own certificate.
if (other) out.blind = await get(`https://${other}:${port}/echo`, { ca: pinned });
console.log(JSON.stringify(out));
// Stay alive (for a look at this process's memory) when asked.
if (process.env.HOLD_FILE) {
  fs.writeFileSync(process.env.HOLD_FILE, "ready");
  setTimeout(() => {}, 60000);
}
