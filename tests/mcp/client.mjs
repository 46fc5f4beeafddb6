// An MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk,
// locked in package-lock.json) driving `boxctl mcp` over stdio, as an agent
// host would. Prints one JSON report of each step's structured result or
// error text. Usage: node client.mjs BOXCTL IMAGE [SERVER FLAGS...]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [boxctl, image, ...flags] = process.argv.slice(2);
const transport = new StdioClientTransport({
  command: boxctl,
  args: ["mcp", ...flags],
  env: {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    BOXD_SOCKET: process.env.BOXD_SOCKET,
    BOXD_HOME: process.env.BOXD_HOME ?? "",
    BOXD_AUTOSTART: "0",
  },
  stderr: "inherit",
});
const client = new Client({ name: "boxd-ts-test", version: "1.0.0" });
await client.connect(transport);
const report = { server: client.getServerVersion()?.name };
const { tools } = await client.listTools();
report.tools = tools.map((t) => t.name).sort();
report.schemas_ok = tools.every((t) => t.inputSchema?.type === "object" && t.description);

async function call(step, name, args = {}, options = {}) {
  const r = await client.callTool({ name, arguments: args }, undefined, options);
  report[step] = r.isError
    ? { error: r.content.map((c) => c.text ?? "").join(" ") }
    : { ok: r.structuredContent };
}

const progress = [];
await call("create", "create_box", { name: "ts1", image }, { onprogress: (p) => progress.push(p) });
await call("exec", "exec", { box: "ts1", shell: "echo hello from $(hostname)" });
await call("write", "write_file", { box: "ts1", path: "/root/a.txt", content: "typed" });
await call("read", "read_file", { box: "ts1", path: "/root/a.txt" });
await call("long", "exec_start", { box: "ts1", argv: ["sh", "-c", "echo go; sleep 1000"] });
const id = report.long.ok?.exec_id ?? "none";
await call("long_read", "exec_output", { exec_id: id, wait_ms: 5000 });
await call("long_kill", "exec_kill", { exec_id: id });
await call("snap", "snapshot_create", { box: "ts1", name: "s" });
await call("net", "create_box", { name: "ts2", image, allow_net: ["example.com"] });
await call("bad_args", "exec", { box: 42 });
await call("missing", "stop_box", { name: "nosuchbox" });
await call("remove", "remove_box", { name: "ts1" });
report.progress_events = progress.length;
await client.close();
console.log(JSON.stringify(report));
