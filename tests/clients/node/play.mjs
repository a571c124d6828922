// A referee client that knows only the .proto files: Node.js with @grpc/grpc-js and
// @grpc/proto-loader, no generated code and nothing from Tapis' Python side.
//
//   TAPIS_PROTO=proto node play.mjs HOST:PORT GAME OUT.tapis [KEY=INT ...]
//
// Creates a table of GAME with every seat taken and plays random legal actions for every seat
// until the match ends, by the turn loop of referee.proto: one WatchTable stream per seat for
// the whole match (its token sent as "authorization: Bearer <token>"); on each `turn`, and at
// once on a SubmitActionResponse's `next_view`, one SubmitAction at the view's action index; a
// turn at an index the seat already acted at is stale and skipped. Never GetView. Checks that
// an illegal card is refused with FAILED_PRECONDITION, fetches the signed record and writes it
// as a Tapis record file (the 16-byte magic, then the envelope preceded by its varint length).
// Prints a JSON summary with every call it made, by method, and the actions it made.
//
// TAPIS_LOOP=play-seat plays each seat on one PlaySeat call instead (the one-call match loop
// of docs/protocol.md): the opening, then each submission on the same stream, each answered
// there (`ack`, or `refused`: a RefusalStatus, field for field a google.rpc.Status); the
// illegal card is refused on the stream and the stream goes on. It counts the events each
// seat received (in `events` and in acknowledgements) to check each comes once.
//
// A timed match: TAPIS_TIME_CONTROL (JSON of a TimeControl, e.g.
// {"action_ms": 800, "policy": "TIMEOUT_POLICY_FORFEIT"}) is sent with CreateTable, and
// TAPIS_SILENT ({"seat": 1, "from": 5, "count": 2}) makes that seat leave `count` turns
// unanswered from its `from`-th turn on (count null: it never answers again): the referee
// then acts for it by the time control's policy.
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

const calls = {};
function count(method) {
  calls[method] = (calls[method] ?? 0) + 1;
}

function metadataOf(token) {
  const metadata = new grpc.Metadata();
  if (token) metadata.add("authorization", `Bearer ${token}`);
  return metadata;
}

function call(method, request, token) {
  count(method);
  return new Promise((resolve, reject) => {
    client[method](request, metadataOf(token), (err, reply) => (err ? reject(err) : resolve(reply)));
  });
}

const options = optionArgs.map((arg) => {
  const [key, value] = arg.split("=");
  return { key, int_value: Number(value) };
});
const games = await call("ListGames", {});
const info = games.games.find((g) => g.name === game || g.aliases.includes(game));
const players = info.rulesets[0].player_counts.includes(4) ? 4 : info.rulesets[0].player_counts[0];
const timeControl = process.env.TAPIS_TIME_CONTROL ? JSON.parse(process.env.TAPIS_TIME_CONTROL) : null;
const loop = process.env.TAPIS_LOOP ?? "watch";
const silent = process.env.TAPIS_SILENT ? JSON.parse(process.env.TAPIS_SILENT) : null;
const created = await call("CreateTable", {
  game,
  options,
  seats: Array.from({ length: players }, (_, i) => ({ name: `node${i}`, open: false })),
  time_control: timeControl,
});
let ignored = 0;

// Whether this turn goes unanswered (TAPIS_SILENT).
function ignore(seat, turnNumber) {
  if (!silent || silent.seat !== seat || turnNumber < silent.from) return false;
  if (silent.count !== null && turnNumber >= silent.from + silent.count) return false;
  ignored += 1;
  return true;
}
const tableId = created.table_id;

let refusalChecked = false;
let actions = 0;

// Once, in the card play: a card of the hand that is not legal is refused, naming its rule.
async function checkRefusal(seat, token, view) {
  const legal = new Set(view.legal_actions.map((a) => Number(a.action)));
  const illegal = view.hand.map((c) => c * 8).find((a) => !legal.has(a));
  if (illegal === undefined) return;
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

// One seat: its stream for the whole match, a move on each turn and on each next_view.
async function playSeat(seat, token) {
  let done = -1; // the highest action index this seat acted at, or was given a turn at
  let turns = 0;
  count("WatchTable");
  const stream = client.WatchTable(
    { table_id: tableId, seat, from_event_index: 0 }, metadataOf(token),
  );
  stream.on("error", () => {}); // the iteration throws errors; a cancel once done is none
  try {
    for await (const message of stream) {
      if (message.event) {
        if (message.event.event === "match_ended") break;
        continue;
      }
      let view = message.turn;
      while (view && Number(view.action_index) > done) {
        done = Number(view.action_index);
        turns += 1;
        if (ignore(seat, turns)) break; // the seat does not answer: its clock runs out
        if (!refusalChecked && view.phase === "play") await checkRefusal(seat, token, view);
        const choice = view.legal_actions[Math.floor(Math.random() * view.legal_actions.length)];
        let reply;
        try {
          reply = await call("SubmitAction", {
            table_id: tableId, seat, expected_action_index: view.action_index,
            action: choice.action,
          }, token);
        } catch (err) {
          if (err.code !== grpc.status.ABORTED) throw err;
          break; // another seat acted first: the stream brings this seat's next turn
        }
        actions += 1;
        done = Math.max(done, Number(reply.action_index));
        view = reply.next_view; // null unless the seat must act again at once
      }
    }
  } finally {
    stream.cancel();
  }
}

// The events each seat received, by seat: their indices, in the order they came.
const received = {};

// The card play's illegal card on a PlaySeat stream: refused there, with the status
// SubmitAction would end with (FAILED_PRECONDITION, its rule id, an ActionRefusal detail).
function illegalCard(view) {
  const legal = new Set(view.legal_actions.map((a) => Number(a.action)));
  return view.hand.map((c) => c * 8).find((a) => !legal.has(a));
}

function checkRefused(refused) {
  if (refused.code !== grpc.status.FAILED_PRECONDITION) {
    throw new Error(`the illegal card got ${refused.code}: ${refused.message}`);
  }
  if (!/\[[A-Z-]+\.[A-Z0-9-]+\]/.test(refused.message)) throw new Error(refused.message);
  const types = refused.details.map((d) => d.type_url);
  if (!types.includes("type.googleapis.com/tapis.v1.ActionRefusal")) {
    throw new Error(`refusal details ${JSON.stringify(types)}`);
  }
  refusalChecked = true;
}

// One seat on one PlaySeat call: its turns, its submissions and their answers.
async function playSeatOneCall(seat, token) {
  let done = -1; // the highest action index this seat acted at, or was given a turn at
  let turns = 0;
  let lastView = null;
  let checking = false; // the illegal card is on its way
  const seen = (received[seat] = []);
  count("PlaySeat");
  const stream = client.PlaySeat(metadataOf(token));
  stream.on("error", () => {}); // the iteration throws errors
  const submit = (view, action) => stream.write({
    submit: { table_id: tableId, seat, expected_action_index: view.action_index, action },
  });
  stream.write({ open: { table_id: tableId, seat, from_event_index: 0 } });
  let ended = false;
  for await (const message of stream) {
    for (const e of message.events) seen.push(Number(e.index));
    let view = null;
    if (message.result === "refused") {
      if (!checking) {
        if (message.refused.code === grpc.status.ABORTED) continue; // the next turn comes
        throw new Error(`refused: ${message.refused.code} ${message.refused.message}`);
      }
      checking = false;
      checkRefused(message.refused);
      view = lastView; // the same turn: choose again
    } else if (message.result === "ack") {
      actions += 1;
      for (const e of message.ack.events) seen.push(Number(e.index));
      done = Math.max(done, Number(message.ack.action_index));
      view = message.ack.next_view;
    }
    if (!view && message.turn && Number(message.turn.action_index) > done) view = message.turn;
    if (!ended && [...message.events, ...(message.ack?.events ?? [])].some(
      (e) => e.event === "match_ended" || e.event === "table_closed",
    )) {
      ended = true;
      stream.end(); // the referee ends the call with OK once we have half-closed
      continue;
    }
    if (!view || ended) continue;
    if (view !== lastView) {
      done = Number(view.action_index);
      turns += 1;
      if (ignore(seat, turns)) continue; // the seat does not answer: its clock runs out
    }
    lastView = view;
    if (!refusalChecked && !checking && view.phase === "play") {
      const illegal = illegalCard(view);
      if (illegal !== undefined) {
        checking = true;
        submit(view, illegal);
        continue;
      }
    }
    const choice = view.legal_actions[Math.floor(Math.random() * view.legal_actions.length)];
    submit(view, choice.action);
  }
}

await Promise.all(created.tokens.map((t) => (
  loop === "play-seat" ? playSeatOneCall(t.seat, t.token) : playSeat(t.seat, t.token)
)));

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
console.log(JSON.stringify({
  table: tableId, actions, calls, refusalChecked, record_id: got.record_id, ignored, received,
}));
client.close();
