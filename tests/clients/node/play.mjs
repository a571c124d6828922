// A referee client that knows only the .proto files: Node.js with @grpc/grpc-js and
// @grpc/proto-loader, no generated code and nothing from Tapis' Python side.
//
//   TAPIS_PROTO=proto node play.mjs HOST:PORT GAME OUT.tapis [KEY=INT ...]
//
// Creates a table of GAME with every seat taken, plays random legal actions for every seat
// until the match ends (reading each seat's view, submitting with the expected action index,
// sending each seat's token as "authorization: Bearer <token>"), checks that an illegal card
// is refused with FAILED_PRECONDITION, fetches the signed record and writes it as a Tapis
// record file (the 16-byte magic, then the envelope preceded by its varint length).
import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const [address, game, out, ...optionArgs] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const protoRoot = process.env.TAPIS_PROTO ?? join(here, "..", "..", "..", "proto");
const file = join(protoRoot, "tapis", "v1", "referee.proto");

const definition = protoLoader.loadSync(file, {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});
const tapis = grpc.loadPackageDefinition(definition).tapis.v1;
const client = new tapis.RefereeService(address, grpc.credentials.createInsecure());

function call(method, request, token) {
  const metadata = new grpc.Metadata();
  if (token) metadata.add("authorization", `Bearer ${token}`);
  return new Promise((resolve, reject) => {
    client[method](request, metadata, (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

const options = optionArgs.map((arg) => {
  const [key, value] = arg.split("=");
  return { key, int_value: Number(value) };
});
const games = await call("ListGames", {});
const info = games.games.find((g) => g.name === game || g.aliases.includes(game));
const players = info.rulesets[0].player_counts.includes(4) ? 4 : info.rulesets[0].player_counts[0];
const created = await call("CreateTable", {
  game,
  options,
  seats: Array.from({ length: players }, (_, i) => ({ name: `node${i}`, open: false })),
});
const tableId = created.table_id;
const tokens = new Map(created.tokens.map((t) => [t.seat, t.token]));

let refusalChecked = false;
let actions = 0;
for (;;) {
  let acted = false;
  let finished = false;
  for (const [seat, token] of tokens) {
    const { view } = await call("GetView", { table_id: tableId, seat }, token);
    if (view.status === "TABLE_STATUS_FINISHED") {
      finished = true;
      break;
    }
    if (view.legal_actions.length === 0) continue;
    if (!refusalChecked && view.phase === "play") {
      const legal = new Set(view.legal_actions.map((a) => Number(a.action)));
      const illegal = view.hand.map((c) => c * 8).find((a) => !legal.has(a));
      if (illegal !== undefined) {
        try {
          await call("SubmitAction", {
            table_id: tableId, seat, expected_action_index: view.action_index, action: illegal,
          }, token);
          throw new Error("an illegal card was accepted");
        } catch (err) {
          if (err.code !== grpc.status.FAILED_PRECONDITION) throw err;
          if (!/\[[A-Z-]+\.[A-Z0-9-]+\]/.test(err.details)) throw new Error(err.details);
          refusalChecked = true;
        }
      }
    }
    const choice = view.legal_actions[Math.floor(Math.random() * view.legal_actions.length)];
    await call("SubmitAction", {
      table_id: tableId, seat, expected_action_index: view.action_index, action: choice.action,
    }, token);
    actions += 1;
    acted = true;
  }
  if (finished) break;
  if (!acted) throw new Error("nobody could act");
}

const got = await call("GetRecord", { table_id: tableId });
const root = new protobuf.Root().loadSync(join(protoRoot, "tapis", "v1", "record.proto"), {
  keepCase: true,
});
const Envelope = root.lookupType("tapis.v1.RecordEnvelope");
const envelope = Envelope.encode(Envelope.create({
  record: got.envelope.record,
  signature: got.envelope.signature,
  key_id: got.envelope.key_id,
})).finish();
const length = [];
for (let n = envelope.length; ; n >>>= 7) {
  if (n < 0x80) { length.push(n); break; }
  length.push((n & 0x7f) | 0x80);
}
writeFileSync(out, Buffer.concat([
  Buffer.from("TAPIS-RECORDS/1\n"), Buffer.from(length), Buffer.from(envelope),
]));
console.log(JSON.stringify({ table: tableId, actions, refusalChecked, record_id: got.record_id }));
client.close();
