"""A referee killed with SIGKILL at random points and restarted loses no acknowledged action,
and every game still finishes with a record that verifies."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from pathlib import Path

import grpc
import pytest

from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.signing import load_public_key
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import GAMES
from tapis_cartes.v1 import record_pb2
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc
from tests.server.util import Server, auth


def test_sigkill_at_random_points_loses_no_acknowledged_action(tmp_path: Path) -> None:
    games = [("dame-de-pique", [("end_threshold", 26)], 4), ("napoleon", [("deals", 4)], 4)]
    if "imperiale" in GAMES:
        games.append(("imperiale", [("target_fiches", 2)], 2))
    server = Server(tmp_path)
    server.start()
    rng = random.Random(2024)

    async def main() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = rpc.RefereeServiceStub(channel)
            await server.serving(channel)
            tables: list[tuple[str, dict[int, str]]] = []
            for game, options, players in games:
                resp = await stub.CreateTable(
                    pb.CreateTableRequest(
                        game=game,
                        options=[_option(k, v) for k, v in options],
                        seats=[pb.SeatRequest(name=f"P{i}") for i in range(players)],
                    )
                )
                tables.append((resp.table_id, {t.seat: t.token for t in resp.tokens}))
            acked: dict[str, dict[int, tuple[int, int]]] = {t: {} for t, _ in tables}
            kills = 0
            next_kill = rng.randint(5, 40)
            done: set[str] = set()
            while len(done) < len(tables):
                for table_id, tokens in tables:
                    if table_id in done:
                        continue
                    try:
                        view = await _to_act(stub, table_id, tokens)
                        if view is None:
                            done.add(table_id)
                            continue
                        seat, v = view
                        action = rng.choice(v.legal_actions).action
                        request = pb.SubmitActionRequest(
                            table_id=table_id,
                            seat=seat,
                            expected_action_index=v.action_index,
                            action=action,
                        )
                        next_kill -= 1
                        if next_kill <= 0:
                            # Kill while the submission is in flight (or just before it).
                            call = asyncio.ensure_future(
                                stub.SubmitAction(request, metadata=auth(tokens[seat]))
                            )
                            await asyncio.sleep(rng.random() * 0.004)
                            server.kill()
                            kills += 1
                            next_kill = rng.randint(5, 40)
                            try:
                                reply = await call
                                acked[table_id][reply.action_index] = (seat, action)
                            except grpc.aio.AioRpcError:
                                pass
                            server.start()
                            await server.serving(channel)
                            continue
                        reply = await stub.SubmitAction(request, metadata=auth(tokens[seat]))
                        acked[table_id][reply.action_index] = (seat, action)
                    except grpc.aio.AioRpcError as exc:
                        assert exc.code() == grpc.StatusCode.ABORTED, exc
            assert kills >= 3
            key = load_public_key(tmp_path / "k.key")
            for table_id, _ in tables:
                got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
                assert verify_envelope(got.envelope, [key]).ok
                rec = decode_record(got.envelope.record)
                recorded = [
                    (seat, action)
                    for hand in rec.hands
                    for seat, action in zip(hand.seats, hand.actions, strict=True)
                ]
                for index, pair in acked[table_id].items():
                    assert recorded[index] == pair, (table_id, index)
        assert server.terminate() == 0  # graceful shutdown on SIGTERM
        # Its last words: the commits since it started, and how long they took.
        log = (tmp_path / f"server-{server.starts - 1}.log").read_text()
        (stopped,) = [
            json.loads(line)
            for line in log.splitlines()
            if line.startswith("{") and json.loads(line)["event"] == "referee stopped"
        ]
        assert stopped["commits"] > 0 and stopped["writes"] >= stopped["commits"], stopped
        for key in ("transaction_ms", "commit_ms"):
            took = stopped[key]
            assert 0 < took["p50"] <= took["p90"] <= took["p99"] <= took["max"], stopped
        assert stopped["commit_ms"]["max"] <= stopped["transaction_ms"]["max"], stopped
        # And the garbage collector's pauses while it served (this last start served a few
        # calls: maybe none).
        for g in ("gc0", "gc1", "gc2"):
            pauses = stopped[g]
            assert 0 <= pauses["max_ms"] <= pauses["total_ms"], stopped
            if pauses["count"] == 0:
                assert pauses["total_ms"] == 0 == pauses["collected"], stopped

    try:
        asyncio.run(main())
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()


def _option(key: str, value: int) -> record_pb2.Option:
    return record_pb2.Option(key=key, int_value=value)


async def _to_act(
    stub: rpc.RefereeServiceStub, table_id: str, tokens: dict[int, str]
) -> tuple[int, pb.SeatView] | None:
    """A seat that may act now and its view; None when the match is over."""
    for seat, token in tokens.items():
        reply = await stub.GetView(
            pb.GetViewRequest(table_id=table_id, seat=seat), metadata=auth(token)
        )
        view = reply.view
        if view.status == pb.TABLE_STATUS_FINISHED:
            return None
        if view.legal_actions:
            return seat, view
    raise AssertionError("nobody may act")


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            pass
    return found


def test_a_referee_whose_store_writer_dies_stops_and_restarts_whole(tmp_path: Path) -> None:
    """The store's writer process killed under a running referee: the next change is
    answered UNAVAILABLE (nothing acknowledged that is not stored), the referee stops with
    exit status 1 and says why, and a restart serves every table as committed."""
    server = Server(tmp_path)
    server.start()

    async def main() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = rpc.RefereeServiceStub(channel)
            await server.serving(channel)
            first = await stub.CreateTable(
                pb.CreateTableRequest(
                    game="dame-de-pique", seats=[pb.SeatRequest(name=f"P{i}") for i in range(4)]
                )
            )
            assert server.proc is not None
            (writer,) = _children(server.proc.pid)
            os.kill(writer, signal.SIGKILL)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.CreateTable(
                    pb.CreateTableRequest(game="napoleon", seats=[pb.SeatRequest(name="A")] * 4)
                )
            # UNAVAILABLE when the referee took the call (its store refused it), CANCELLED
            # when the call came as the referee was stopping already (the writer's end seen
            # first): either way nothing was acknowledged.
            assert refused.value.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.CANCELLED,
            ), refused.value
            assert server.proc.wait(20) == 1
            server.start()
            await server.serving(channel)
            got = await stub.GetTable(pb.GetTableRequest(table_id=first.table_id))
            assert got.table_id == first.table_id

    try:
        asyncio.run(main())
        assert server.terminate() == 0
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
    log = (tmp_path / "server-0.log").read_text()
    assert '"event":"referee stopping: its store failed"' in log, log[-2000:]
    assert "the store's writer " in log  # stopped, or cannot be reached (the pipe broken)
