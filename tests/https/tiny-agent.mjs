// The smallest ACP agent that calls a model: each prompt goes to the
// Anthropic Messages API (the official SDK; its key and base URL from
// ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, as Claude Code reads them), and
// the model's text is the answer, between "RESULTS<<" and ">>". Run inside
// a box: its key there is a placeholder.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import Anthropic from "@anthropic-ai/sdk";

const stream = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const model = new Anthropic({ maxRetries: 0 });

const app = acp
  .agent({ name: "boxd-tiny-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    agentInfo: { name: "boxd-tiny-agent", version: "0.1.0" },
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, () => ({ sessionId: "tiny" }))
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const content = params.prompt.map((b) => b.text ?? "").join("");
    let text;
    try {
      const msg = await model.messages.create({ model: "claude-fake", max_tokens: 16, messages: [{ role: "user", content }] });
      text = msg.content[0].text;
    } catch (e) {
      text = `error: ${e.message}`;
    }
    await client.notify(acp.methods.client.session.update, {
      sessionId: params.sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `RESULTS<<${JSON.stringify(text)}>>` } },
    });
    return { stopReason: "end_turn" };
  });

app.connect(stream).closed.then(() => process.exit(0));
