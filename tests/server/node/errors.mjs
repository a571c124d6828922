// Error details as a client in another language reads them, from referee.proto's header and
// docs/protocol.md alone: Node.js with @grpc/grpc-js and protobufjs, the googleapis messages
// declared here from their public field numbers (nothing imported from Tapis' Python side).
//
//   TAPIS_PROTO=proto node errors.mjs HOST:PORT
//
// Makes failing calls and prints one JSON line per case: its name, the status code, and the
// details of the google.rpc.Status in the `grpc-status-details-bin` trailer, each decoded by
// its type URL.
import { join } from "node:path";
import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const [address] = process.argv.slice(2);
const protoRoot = process.env.TAPIS_PROTO;
const file = join(protoRoot, "tapis", "v1", "referee.proto");
const loaderOptions = { includeDirs: [protoRoot], keepCase: true, longs: Number, defaults: true };
const tapis = grpc.loadPackageDefinition(protoLoader.loadSync(file, loaderOptions)).tapis.v1;
const client = new tapis.RefereeService(address, grpc.credentials.createInsecure());

// google/rpc/status.proto, google/protobuf/any.proto, google/rpc/error_details.proto (the
// part used here).
const google = protobuf.parse(`
  syntax = "proto3";
  package google.rpc;
  message Any { string type_url = 1; bytes value = 2; }
  message Status { int32 code = 1; string message = 2; repeated Any details = 3; }
  message BadRequest {
    message FieldViolation { string field = 1; string description = 2; }
    repeated FieldViolation field_violations = 1;
  }
`, { keepCase: true }).root;
const Status = google.lookupType("google.rpc.Status");
const ours = new protobuf.Root();
ours.resolvePath = (_origin, target) => join(protoRoot, target);
ours.loadSync("tapis/v1/referee.proto", { keepCase: true });
const byUrl = {
  "type.googleapis.com/google.rpc.BadRequest": google.lookupType("google.rpc.BadRequest"),
  "type.googleapis.com/tapis.v1.ActionRefusal": ours.lookupType("tapis.v1.ActionRefusal"),
  "type.googleapis.com/tapis.v1.StaleAction": ours.lookupType("tapis.v1.StaleAction"),
};

function call(method, request, token) {
  const metadata = new grpc.Metadata();
  if (token) metadata.add("authorization", `Bearer ${token}`);
  return new Promise((resolve, reject) => {
    client[method](request, metadata, (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

async function failure(name, method, request, token) {
  try {
    await call(method, request, token);
  } catch (err) {
    const [bytes] = err.metadata.get("grpc-status-details-bin");
    const status = bytes ? Status.decode(bytes) : null;
    const details = (status?.details ?? []).map((any) => {
      const type = byUrl[any.type_url];
      const value = type ? type.toObject(type.decode(any.value), { longs: Number, defaults: true }) : null;
      return { type_url: any.type_url, value };
    });
    const line = {
      name,
      code: grpc.status[err.code],
      message: err.details,
      status: status ? { code: status.code, message: status.message } : null,
      details,
    };
    console.log(JSON.stringify(line));
    return;
  }
  throw new Error(`${name}: the call succeeded`);
}

const seats = ["A", "B", "C", "D"].map((name) => ({ name }));
await failure("bad-option", "CreateTable", {
  game: "hearts",
  seats,
  options: [{ key: "end_threshold", int_value: 5000 }],
});
await failure("long-name", "CreateTable", {
  game: "hearts",
  seats: [{ name: "A" }, { name: "x".repeat(65) }, { name: "C" }, { name: "D" }],
});
await failure("players-vs-seats", "CreateTable", {
  game: "nap",
  seats,
  options: [{ key: "players", int_value: 5 }],
});
const table = await call("CreateTable", { game: "hearts", seats });
const token = table.tokens[0].token;
const view = (await call("GetView", { table_id: table.table_id, seat: 0 }, token)).view;
const submit = (action, expected) =>
  ({ table_id: table.table_id, seat: 0, expected_action_index: expected, action });
await failure("undefined-action", "SubmitAction", submit(7, view.action_index), token);
await failure("illegal-action", "SubmitAction", submit((1 << 3) | 2, view.action_index), token);
await failure("stale", "SubmitAction", submit(view.legal_actions[0].action, 9), token);
await failure("full-table", "JoinTable", { table_id: table.table_id });
await failure("record-too-early", "GetRecord", { table_id: table.table_id });
client.close();
