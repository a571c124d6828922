"""Hostile clients against a real referee: Hypothesis-generated calls, then kills and restarts.

    python scripts/fuzz_referee.py [-n 3000] [--seed S] [--json] [--work DIR]

A `tapis serve` subprocess on a free port and a fresh store gets tables of every game (some
waiting for players, some played on), then `-n` Hypothesis examples, each a batch of calls
sent at once: every RPC of `tapis.v1.RefereeService`, with requests built field by field from
the .proto descriptors (real table ids, seats, tokens and legal actions mixed with boundary
ints, long and odd strings, repeated fields grown, fields of other messages) or raw bytes that
are no request at all, with one, two, wrong or malformed `authorization` entries, and some
callers going away mid-call (deadlines of a few milliseconds). Then the referee is killed
(SIGKILL) and restarted on its store, stopped (SIGTERM) and restarted again: it must come back
each time, and every table it wrote must answer.

It reports the calls by status code, and fails (exit 1) on any UNKNOWN or INTERNAL answer, a
referee that died or did not come back, or an error in its log (a call failed inside the
referee, a table broken, a change failed).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tapis_cartes.clients.sdk import option_messages  # noqa: E402
from tapis_cartes.v1 import record_pb2 as rpb  # noqa: E402
from tapis_cartes.v1 import referee_pb2 as pb  # noqa: E402
from tapis_cartes.v1 import referee_pb2_grpc as rpc  # noqa: E402

SERVICE = pb.DESCRIPTOR.services_by_name["RefereeService"]
BAD = ("UNKNOWN", "INTERNAL")
# Tables seeded before the calls: (game, ruleset, options, players, open seats).
SEEDS = [
    ("hearts", "", {"end_threshold": 30}, 4, ()),
    ("hearts", "", {}, 4, (2, 3)),
    ("napoleon", "", {"players": 5, "deals": 3}, 5, ()),
    ("imperiale", "academie", {"target_fiches": 2}, 2, ()),
    ("imperiale", "moderne", {}, 2, (1,)),
    ("triomphe", "equipe", {"target": 2}, 4, ()),
    ("triomphe", "as-qui-pille", {}, 3, ()),
]
INTS = [0, 1, 2, 3, 7, 13, 51, 52, 63, 64, 255, 2**31 - 1, 2**32 - 1, 2**53, 2**63 - 1, 2**64 - 1]
TEXTS = [
    "",
    "hearts",
    "dame-de-pique",
    "napoleon",
    "triomphe",
    "imperiale",
    "academie",
    "equipe",
    "end_threshold",
    "moon_mode",
    "players",
    "target",
    "vole_value",
    "deals",
    "add_to_others",
    "seat 0",
    "é" * 64,
    "x" * 65,
    "\x00\n\t",
    "😀" * 20,
    "../../etc/passwd",
    "' OR 1=1 --",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


class Referee:
    """`tapis serve` as a subprocess, its log in the work folder."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        cmd = [sys.executable, "-m", "tapis_cartes.clients.cli", "serve", "--listen", self.address,
               "--db", str(self.work / "t.db"), "--key", str(self.work / "k.key"),
               "--open-seat-ttl", "3", "--max-tables-per-client", "200"]  # fmt: skip
        with (self.work / f"referee-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=log, stderr=log, env={**os.environ, "PYTHONPATH": str(ROOT)}
            )
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    async def serving(self, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        async with grpc.aio.insecure_channel(self.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline and self.alive():
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return True
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.05)
        return False

    def log_errors(self) -> list[str]:
        """The error lines of every log of this referee (JSON lines at level error, or a
        Python traceback outside them)."""
        errors = []
        for path in sorted(self.work.glob("referee-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    doc = json.loads(line)
                except ValueError:
                    if "Traceback" in line or "Error" in line:
                        errors.append(f"{path.name}: {line[:300]}")
                    continue
                if isinstance(doc, dict) and doc.get("level") in ("error", "critical"):
                    errors.append(f"{path.name}: {line[:300]}")
        return errors


@dataclass
class Pool:
    """What the calls draw real values from: tables, their seats' tokens, actions."""

    tables: list[str] = field(default_factory=list)
    tokens: dict[str, dict[int, str]] = field(default_factory=dict)
    actions: list[int] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=lambda: ["r-0", "r-1", "r-2", "r-3"])


async def seed_tables(stub: rpc.RefereeServiceStub, pool: Pool, rng: random.Random) -> None:
    for game, ruleset, options, players, open_seats in SEEDS:
        reply = await stub.CreateTable(
            pb.CreateTableRequest(
                game=game,
                ruleset=ruleset,
                options=option_messages(options),
                seats=[pb.SeatRequest(name=f"P{i}", open=i in open_seats) for i in range(players)],
            )
        )
        pool.tables.append(reply.table_id)
        pool.tokens[reply.table_id] = {t.seat: t.token for t in reply.tokens}
        if open_seats:
            continue
        for _ in range(rng.randint(0, 30)):  # play on a little
            acted = False
            for seat, token in pool.tokens[reply.table_id].items():
                view = (
                    await stub.GetView(
                        pb.GetViewRequest(table_id=reply.table_id, seat=seat),
                        metadata=auth(token),
                    )
                ).view
                pool.actions.extend(a.action for a in view.legal_actions)
                if view.legal_actions:
                    await stub.SubmitAction(
                        pb.SubmitActionRequest(
                            table_id=reply.table_id,
                            seat=seat,
                            expected_action_index=view.action_index,
                            action=rng.choice(view.legal_actions).action,
                        ),
                        metadata=auth(token),
                    )
                    acted = True
                    break
            if not acted:
                break


def value_of(f: FieldDescriptor, pool: Pool, depth: int) -> st.SearchStrategy[Any]:
    """A strategy for one value of a field: real values of the pool, boundary values, junk."""
    name = f.name
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        return message_of(f.message_type, pool, depth + 1)
    if f.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if f.type == FieldDescriptor.TYPE_STRING:
        real: list[str] = list(TEXTS)
        if name == "table_id":
            real = pool.tables + real
        elif name == "request_id":
            real = pool.request_ids + real
        return st.one_of(
            st.sampled_from(real),
            st.text(max_size=80),
            st.builds(lambda n, c: c * n, st.integers(60, 120_000), st.sampled_from("aé\n😀")),
        )
    if f.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=300)
    if f.type == FieldDescriptor.TYPE_ENUM:
        return st.integers(0, 7)
    signed = f.type in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED32,
        FieldDescriptor.TYPE_SFIXED64,
    )
    bits = 32 if "32" in _TYPE_NAMES.get(f.type, "") else 64
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    ints = [i for i in INTS if low <= i <= high] + ([-1, low] if signed else [])
    if name == "action":
        return st.one_of(st.sampled_from(pool.actions or [0]), st.sampled_from(ints))
    if name in ("seat", "expected_action_index", "from_event_index"):
        return st.one_of(st.integers(0, 12), st.sampled_from(ints))
    return st.one_of(st.integers(-3, 300).filter(lambda i: low <= i), st.sampled_from(ints))


_TYPE_NAMES = {
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_SINT32: "sint32",
    FieldDescriptor.TYPE_FIXED32: "fixed32",
    FieldDescriptor.TYPE_SFIXED32: "sfixed32",
}


def message_of(desc: Descriptor, pool: Pool, depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy for a message of this descriptor, each field set or not."""
    cls = _class_of(desc)
    if depth > 3:
        return st.just(cls())

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        msg = cls()
        for f in desc.fields:
            if not draw(st.booleans()):
                continue
            if f.is_repeated:
                size = draw(st.one_of(st.integers(0, 6), st.sampled_from([11, 70])))
                for _ in range(size):
                    _add(msg, f, draw(value_of(f, pool, depth)))
            elif f.containing_oneof is None or msg.WhichOneof(f.containing_oneof.name) is None:
                _set(msg, f, draw(value_of(f, pool, depth)))
        return msg

    return build()


def _class_of(desc: Descriptor) -> Any:
    module = rpb if desc.file.name.endswith("record.proto") else pb
    return getattr(module, desc.name)


def _set(msg: Any, f: FieldDescriptor, value: Any) -> None:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(msg, f.name).CopyFrom(value)
    else:
        setattr(msg, f.name, value)


def _add(msg: Any, f: FieldDescriptor, value: Any) -> None:
    if f.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(msg, f.name).add().CopyFrom(value)
    else:
        getattr(msg, f.name).append(value)


@dataclass(frozen=True)
class Call:
    method: str
    request: bytes
    metadata: tuple[tuple[str, str], ...]
    timeout: float | None


OPTION_KEYS = [
    "end_threshold", "moon_mode", "qs_breaks_hearts", "players", "deals", "short_deck",
    "scoring", "target", "vole_value", "vole_fail_penalty", "hand_size", "regime",
    "target_fiches", "capot_fiches", "packet", "trump_major_value", "imperiale_de_retourne",
]  # fmt: skip
RULESETS = ["", "standard", "academie", "moderne", "individuelle", "equipe", "as-qui-pille", "x"]


def plausible(method: str, pool: Pool) -> st.SearchStrategy[Any]:
    """A request that is nearly right: real tables, seats, option keys and actions, with
    values at and past their bounds."""
    tables = st.sampled_from(pool.tables)
    seats = st.integers(0, 11)
    ints = st.one_of(
        st.integers(-5, 130), st.sampled_from([i for i in INTS if i < 2**63] + [-(2**63)])
    )
    value = st.one_of(
        ints.map(lambda i: {"int_value": i}),
        st.booleans().map(lambda b: {"bool_value": b}),
        st.sampled_from(["add_to_others", "subtract_self", "R2", "plaisant", "stakes", "x"]).map(
            lambda t: {"string_value": t}
        ),
    )
    options = st.lists(
        st.builds(lambda k, v: rpb.Option(key=k, **v), st.sampled_from(OPTION_KEYS), value),
        max_size=4,
    )
    names = st.sampled_from([*TEXTS, "Ann", "Bob", "Cat"])
    request_ids = st.sampled_from([*pool.request_ids, ""])
    if method == "CreateTable":
        valid = st.builds(
            lambda game, opens, request_id: pb.CreateTableRequest(
                game=game[0],
                ruleset=game[1],
                options=option_messages(game[2]),
                seats=[pb.SeatRequest(name=f"S{i}", open=i in opens) for i in range(game[3])],
                request_id=request_id,
            ),
            st.sampled_from(SEEDS),
            st.sets(st.integers(0, 5)),
            request_ids,
        )
        return st.one_of(
            valid,
            valid,
            st.builds(
                pb.CreateTableRequest,
                game=st.sampled_from(["hearts", "napoleon", "nap", "imperiale", "triomphe", "go"]),
                ruleset=st.sampled_from(RULESETS),
                options=options,
                seats=st.lists(
                    st.builds(pb.SeatRequest, name=names, open=st.booleans()), max_size=11
                ),
                request_id=request_ids,
            ),
        )
    if method == "JoinTable":
        return st.builds(
            pb.JoinTableRequest,
            table_id=tables,
            seat=st.one_of(st.none(), seats),
            name=names,
            request_id=request_ids,
        )
    if method == "SubmitAction":
        return st.builds(
            pb.SubmitActionRequest,
            table_id=tables,
            seat=seats,
            expected_action_index=st.one_of(st.integers(0, 120), st.sampled_from(INTS)),
            action=st.one_of(st.sampled_from(pool.actions or [0]), st.sampled_from(INTS)),
        )
    if method == "WatchTable":
        return st.builds(
            pb.WatchTableRequest,
            table_id=tables,
            seat=st.one_of(st.none(), seats),
            from_event_index=st.one_of(st.integers(0, 200), st.sampled_from(INTS)),
        )
    if method in ("GetView", "Resign"):
        request = pb.GetViewRequest if method == "GetView" else pb.ResignRequest
        return st.builds(request, table_id=tables, seat=seats)
    if method == "ListGames":
        return st.just(pb.ListGamesRequest())
    request = pb.GetTableRequest if method == "GetTable" else pb.GetRecordRequest
    return st.builds(request, table_id=tables)


def calls(pool: Pool) -> st.SearchStrategy[Call]:
    methods = {m.name: m for m in SERVICE.methods}

    @st.composite
    def one(draw: st.DrawFn) -> Call:
        method = methods[draw(st.sampled_from(sorted(methods)))]
        kind = draw(st.integers(0, 9))
        message = None
        if kind == 0:
            request = draw(st.binary(max_size=200))  # no request at all, most likely
        else:
            strategy = (
                plausible(method.name, pool) if kind <= 6 else message_of(method.input_type, pool)
            )
            message = draw(strategy)
            request = message.SerializeToString()
        # The token of the request's seat when there is one, else of another seat or table.
        table = getattr(message, "table_id", "")
        tokens = pool.tokens.get(table) or pool.tokens[draw(st.sampled_from(pool.tables))]
        seat = getattr(message, "seat", None)
        token = tokens.get(seat) if isinstance(seat, int) else None
        token = token or draw(st.sampled_from([*tokens.values(), "none"]))
        metadata = draw(
            st.sampled_from(
                [
                    auth(token),
                    auth(token),
                    (),
                    auth(token) * 2,
                    auth("wrong"),
                    (("authorization", "Basic x"),),
                    (("authorization", "Bearer " + "t" * 4000),),
                    (("authorization", token),),
                ]
            )
        )
        timeout = draw(st.sampled_from([None, None, None, 0.002, 0.02, 0.2]))
        return Call(method.name, request, metadata, timeout)

    return one()


async def send(channel: grpc.aio.Channel, call: Call) -> str:
    """Make the call; its status code name (OK, or the code it failed with)."""
    path = f"/{SERVICE.full_name}/{call.method}"
    try:
        if call.method == "WatchTable":
            stream = channel.unary_stream(path)(
                call.request, metadata=call.metadata, timeout=call.timeout or 0.5
            )
            count = 0
            async for _ in stream:
                count += 1
                if count >= 50:
                    stream.cancel()
                    break
        else:
            await channel.unary_unary(path)(
                call.request, metadata=call.metadata, timeout=call.timeout or 10
            )
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name)
    except asyncio.CancelledError:
        return "CANCELLED"
    return "OK"


async def check_every_table(address: str, db: Path) -> collections.Counter[str]:
    """GetTable of every table in the store (and GetRecord of the finished ones)."""
    import sqlite3

    conn = sqlite3.connect(db)
    ids = [row[0] for row in conn.execute("SELECT id FROM tables")]
    conn.close()
    codes: collections.Counter[str] = collections.Counter()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rpc.RefereeServiceStub(channel)
        for table_id in ids:
            for call in (
                stub.GetTable(pb.GetTableRequest(table_id=table_id), timeout=10),
                stub.GetRecord(pb.GetRecordRequest(table_id=table_id), timeout=10),
            ):
                try:
                    await call
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as exc:
                    codes[exc.code().name] += 1
    return codes


def run(examples: int, seed: int, work: Path | None = None) -> dict[str, Any]:
    work = work or Path(tempfile.mkdtemp(prefix="tapis-fuzz-referee-"))
    referee = Referee(work)
    referee.start()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    report: dict[str, Any] = {"examples": examples, "seed": seed, "work": str(work)}
    codes: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    started = time.perf_counter()
    try:
        if not loop.run_until_complete(referee.serving()):
            raise SystemExit("the referee did not start")
        pool = Pool()

        async def open_channel() -> grpc.aio.Channel:
            return grpc.aio.insecure_channel(referee.address)

        channel = loop.run_until_complete(open_channel())  # bound to this loop

        async def seed_all() -> None:
            await seed_tables(rpc.RefereeServiceStub(channel), pool, random.Random(seed))

        loop.run_until_complete(seed_all())

        @hypothesis_seed(seed)
        @settings(
            max_examples=examples,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.lists(calls(pool), min_size=1, max_size=12))
        def batch(batch: list[Call]) -> None:
            async def go() -> list[str]:
                return list(await asyncio.gather(*(send(channel, c) for c in batch)))

            for call, code in zip(batch, loop.run_until_complete(go()), strict=True):
                codes[code] += 1
                if code in BAD and len(bad) < 20:
                    bad.append(f"{call.method} {code} {call.request[:60]!r} {call.metadata!r}")
            if not referee.alive():
                raise AssertionError("the referee died")

        batch()
        loop.run_until_complete(channel.close())
        report["alive_after_calls"] = referee.alive()
        # Kill, restart, check every table; stop gracefully, restart, check again.
        restarts = []
        for sig in (signal.SIGKILL, signal.SIGTERM):
            referee.stop(sig)
            referee.start()
            up = loop.run_until_complete(referee.serving())
            tables = loop.run_until_complete(check_every_table(referee.address, work / "t.db"))
            restarts.append({"signal": sig.name, "serving": up, "tables": dict(tables)})
        report["restarts"] = restarts
        referee.stop(signal.SIGTERM)
    finally:
        if referee.alive():
            referee.stop(signal.SIGKILL)
        loop.close()
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["calls"] = sum(codes.values())
    report["codes"] = dict(sorted(codes.items()))
    report["unknown_or_internal"] = sum(codes[c] for c in BAD) + sum(
        r["tables"].get(c, 0) for r in report["restarts"] for c in BAD
    )
    report["bad_calls"] = bad
    report["log_errors"] = referee.log_errors()[:20]
    report["ok"] = (
        report["unknown_or_internal"] == 0
        and report["alive_after_calls"]
        and all(r["serving"] for r in report["restarts"])
        and not report["log_errors"]
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--examples", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--work", type=Path, help="folder for the store and logs (default: new)")
    args = parser.parse_args(argv)
    report = run(args.examples, args.seed, args.work)
    if args.json:
        print(json.dumps(report))
    else:
        for line in _lines(report):
            print(line)
    return 0 if report["ok"] else 1


def _lines(report: dict[str, Any]) -> Iterator[str]:
    yield f"{report['examples']} examples, {report['calls']} calls in {report['seconds']} s"
    yield "codes: " + ", ".join(f"{k} {v}" for k, v in report["codes"].items())
    yield f"UNKNOWN or INTERNAL: {report['unknown_or_internal']}"
    yield f"referee alive after the calls: {report['alive_after_calls']}"
    for r in report["restarts"]:
        tables = ", ".join(f"{k} {v}" for k, v in r["tables"].items())
        yield f"after {r['signal']}: serving {r['serving']}; every table: {tables}"
    for line in report["bad_calls"]:
        yield f"bad: {line}"
    for line in report["log_errors"]:
        yield f"log: {line}"
    yield "ok" if report["ok"] else "FAILED"


if __name__ == "__main__":
    sys.exit(main())
