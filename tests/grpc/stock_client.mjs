// Stock @grpc/grpc-js with @grpc/proto-loader (pinned in package.json)
// calling boxd as the grpc-js docs show: the .proto loaded at run time,
// `unix:PATH`, default options except what the report names. Prints one
// JSON report. Arguments: SOCKET PROTO_DIR BOX.
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const [socket, protoDir, box] = process.argv.slice(2);
const report = {};

async function load(options) {
  const def = await protoLoader.load("boxd/v1/boxd.proto", { includeDirs: [protoDir], ...options });
  const pkg = grpc.loadPackageDefinition(def);
  return new pkg.boxd.v1.Boxd(`unix:${socket}`, grpc.credentials.createInsecure());
}

const unary = (client, method, req) =>
  new Promise((resolve, reject) =>
    client[method](req, { deadline: Date.now() + 10_000 }, (err, reply) => (err ? reject(err) : resolve(reply))),
  );

// The defaults: int64 arrives as a Long object, enums as numbers.
{
  const client = await load({});
  const d = await unary(client, "Describe", {});
  report.describe = { protocol: d.protocol, pidType: typeof d.pid };
  const list = await unary(client, "ListBoxes", {});
  const ours = list.boxes.find((b) => b.name === box);
  report.defaults = { createdAtType: typeof ours.createdAtMs, state: ours.state };
  client.close();
}

// What docs/api.md recommends: longs as numbers, enums as names, defaults filled in.
const client = await load({ longs: Number, enums: String, defaults: true, oneofs: true });
const list = await unary(client, "ListBoxes", {});
const ours = list.boxes.find((b) => b.name === box);
report.recommended = { createdAtType: typeof ours.createdAtMs, state: ours.state };

// A streaming Exec: stdin in, stdout/stderr/exit out.
const call = client.Exec();
const chunks = { stdout: [], stderr: [] };
const kinds = [];
const done = new Promise((resolve, reject) => {
  call.on("data", (msg) => {
    kinds.push(msg.event);
    if (msg.event === "stdout" || msg.event === "stderr") chunks[msg.event].push(msg[msg.event]);
    if (msg.event === "exit") report.exitCode = msg.exit.code;
  });
  call.on("error", reject);
  call.on("end", resolve);
});
call.write({ start: { boxName: box, command: "sh", args: ["-c", "cat; echo to-stderr >&2; exit 3"], stdin: true } });
call.write({ stdin: Buffer.from([0x68, 0x69, 0x00, 0xff, 0x0a]) });
call.write({ closeStdin: true });
await done;
report.first = kinds[0];
report.last = kinds[kinds.length - 1];
report.stdoutHex = Buffer.concat(chunks.stdout).toString("hex");
report.stderr = Buffer.concat(chunks.stderr).toString();
client.close();
console.log(JSON.stringify(report));
