"""The referee against real servers on free ports: full games of every game over gRPC whose
signed records verify, tokens, duplicate and stale submissions, refusals with their rule id,
streams cut and resumed, and what each seat may see."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.signing import load_public_key
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import GAMES
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.triomphe import TriompheHand
from tapis_cartes.referee.errors import TooMany
from tapis_cartes.referee.server import tables
from tapis_cartes.referee.server.app import RunningServer, create_server
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import auth, new_table, option, play_random, referee, run

# (game, ruleset, options, players): one short match of each game and ruleset.
MATCHES: list[tuple[str, str, dict[str, Any], int]] = [
    ("dame-de-pique", "", {"end_threshold": 30}, 4),
    ("napoleon", "", {"deals": 4}, 4),
    ("napoleon", "", {"players": 6, "short_deck": True, "deals": 3}, 6),
    ("imperiale", "academie", {"target_fiches": 3}, 2),
    ("imperiale", "academie", {"target_fiches": 3, "players": 3}, 3),
    ("imperiale", "moderne", {"target_fiches": 2}, 2),
    ("triomphe", "individuelle", {"target": 3}, 3),
    ("triomphe", "equipe", {"target": 3}, 4),
    ("triomphe", "as-qui-pille", {"target": 3}, 4),
]


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), MATCHES)
def test_full_match_over_grpc_gives_a_signed_record_that_verifies(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    if game not in GAMES:
        pytest.skip(f"{game} is not in this engine yet")

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, game, ruleset, options, players)
        actions = await play_random(stub, table_id, tokens, random.Random(game + ruleset))
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        key = load_public_key(tmp_path / "k.key")
        result = verify_envelope(got.envelope, [key])
        assert result.ok, result.error
        rec = decode_record(got.envelope.record)
        assert rec.outcome.finished
        assert sum(len(h.actions) for h in rec.hands) == actions
        assert rec.deal_source.algorithm == "tapis-deal/1" and len(rec.deal_source.seed) == 32
        # A tampered byte breaks the signature.
        bad = rpb.RecordEnvelope()
        bad.CopyFrom(got.envelope)
        flipped = bytearray(bad.record)
        flipped[len(flipped) // 2] ^= 1
        bad.record = bytes(flipped)
        assert not verify_envelope(bad, [key]).ok

    run(body, tmp_path)


def _code_and_details(exc: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, list[Any]]:
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    return exc.code(), list(status.details) if status is not None else []


def test_tokens_stale_duplicate_and_refusals(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        view_req = pb.GetViewRequest(table_id=table_id, seat=0)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.GetView(view_req)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.GetView(view_req, metadata=auth(tokens[1]))
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
        view = (await stub.GetView(view_req, metadata=auth(tokens[0]))).view
        assert view.phase == "pass" and len(view.hand) == 13
        give = view.legal_actions[0].action
        submit = pb.SubmitActionRequest(
            table_id=table_id, seat=0, expected_action_index=0, action=give
        )
        first = await stub.SubmitAction(submit, metadata=auth(tokens[0]))
        again = await stub.SubmitAction(submit, metadata=auth(tokens[0]))  # a retry
        assert first.action_index == again.action_index == 0
        assert list(first.events) == list(again.events)
        table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert table.action_index == 1
        # A stale submission (another action at an old index, by a seat that has acted
        # since) is refused with the index.
        other = pb.SubmitActionRequest(
            table_id=table_id, seat=0, expected_action_index=0, action=view.legal_actions[1].action
        )
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SubmitAction(other, metadata=auth(tokens[0]))
        code, details = _code_and_details(exc.value)
        assert code == grpc.StatusCode.ABORTED
        stale = pb.StaleAction()
        assert details and details[0].Unpack(stale) and stale.action_index == 1
        # An illegal action: a card while the exchange is on.
        view1 = (await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=1),
                                    metadata=auth(tokens[1]))).view  # fmt: skip
        card = view1.hand[0]
        play = pb.SubmitActionRequest(
            table_id=table_id, seat=1, expected_action_index=1, action=card << 3
        )
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SubmitAction(play, metadata=auth(tokens[1]))
        code, details = _code_and_details(exc.value)
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        refusal = pb.ActionRefusal()
        assert details[0].Unpack(refusal)
        assert refusal.rule == "DP.PASS" and refusal.code == "exchange-first"
        assert "DP.PASS" in (exc.value.details() or "")
        # Nothing changed.
        table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert table.action_index == 1
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.GetTable(pb.GetTableRequest(table_id="nope"))
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await new_table(stub, "dame-de-pique", "", {"colour": "red"}, 4)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "colour" in (exc.value.details() or "")

    run(body, tmp_path)


def test_open_seats_join_and_tables_per_client_limit(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        resp = await stub.CreateTable(
            pb.CreateTableRequest(
                game="nap",
                seats=[
                    pb.SeatRequest(name="A"),
                    pb.SeatRequest(name="B", open=True),
                    pb.SeatRequest(name="C", open=True),
                ],
                options=[option("players", 3)],
            )
        )
        assert [t.seat for t in resp.tokens] == [0]
        table = await stub.GetTable(pb.GetTableRequest(table_id=resp.table_id))
        assert table.status == pb.TABLE_STATUS_WAITING
        joined = await stub.JoinTable(pb.JoinTableRequest(table_id=resp.table_id, name="Bea"))
        assert joined.token.seat == 1
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.JoinTable(pb.JoinTableRequest(table_id=resp.table_id, seat=1))
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
        await stub.JoinTable(pb.JoinTableRequest(table_id=resp.table_id, seat=2))
        table = await stub.GetTable(pb.GetTableRequest(table_id=resp.table_id))
        assert table.status == pb.TABLE_STATUS_PLAYING
        assert [s.name for s in table.seats] == ["A", "Bea", "C"]
        await new_table(stub, "hearts", "", {}, 4)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await new_table(stub, "hearts", "", {}, 4)
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(body, tmp_path, max_tables_per_client=2)


def test_stream_cut_and_resumed_without_gap_or_duplicate(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 20}, 4)
        await play_random(stub, table_id, tokens, random.Random(3))

        async def watch(start: int, stop_after: int | None = None) -> list[pb.TableEvent]:
            got: list[pb.TableEvent] = []
            call = stub.WatchTable(
                pb.WatchTableRequest(table_id=table_id, seat=2, from_event_index=start),
                metadata=auth(tokens[2]),
            )
            async for msg in call:
                got.append(msg.event)
                if stop_after is not None and len(got) == stop_after:
                    call.cancel()
                    break
            return got

        full = await watch(0)
        assert [e.index for e in full] == list(range(len(full)))
        assert full[-1].WhichOneof("event") == "match_ended"
        part = await watch(0, stop_after=37)
        rest = await watch(part[-1].index + 1)
        assert [e.SerializeToString() for e in part + rest] == [e.SerializeToString() for e in full]

    run(body, tmp_path)


def test_live_stream_follows_play(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "nap", "", {"deals": 2}, 4)
        seen: list[pb.TableEvent] = []

        async def spectator() -> None:
            async for msg in stub.WatchTable(pb.WatchTableRequest(table_id=table_id)):
                seen.append(msg.event)

        task = asyncio.create_task(spectator())
        await asyncio.sleep(0.1)
        await play_random(stub, table_id, tokens, random.Random(5))
        await asyncio.wait_for(task, 10)
        kinds = [e.WhichOneof("event") for e in seen]
        assert kinds[-1] == "match_ended"
        assert "trick_completed" in kinds or "note" in kinds
        # A spectator never sees a hand.
        assert all(not e.hand_started.hand for e in seen if e.HasField("hand_started"))

    run(body, tmp_path)


def _cards_in(message: Any) -> set[int]:
    """Every card id in the card fields of a message (hand, known, trick, events)."""
    found: set[int] = set()
    for desc, value in message.ListFields():
        if desc.message_type is not None:
            items = value if desc.is_repeated else [value]
            for item in items:
                found |= _cards_in(item)
        elif desc.name in ("hand", "cards", "card", "retourne"):
            found |= set(value) if desc.is_repeated else {value}
    return found


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), MATCHES)
def test_no_seat_ever_sees_cards_it_may_not_see(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    """Every view and event sent to a seat holds only cards that seat may see at that
    moment: its own (as dealt and as held), cards played, the retourne, and what the rules
    show it (a partner's hand where the rules allow, the exchange's cards to their
    receiver, the talon cards turned face up in a pillage)."""
    if game not in GAMES:
        pytest.skip(f"{game} is not in this engine yet")

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, game, ruleset, options, players)
        table = server.referee.tables[table_id]

        def allowed(seat: int) -> int:
            hand = table.match.hand
            assert hand is not None
            mask = hand.held[seat] | hand.deal.hands[seat]
            for result in table.match.results:
                mask |= result.deal.hands[seat]
            for t in hand.tricks:
                for c in t.cards:
                    mask |= 1 << c
            if hand.deal.retourne >= 0:
                mask |= 1 << hand.deal.retourne
            if isinstance(hand, TriompheHand):
                for c in hand.turned:  # TRI.PILLE: talon cards the robber turns face up
                    mask |= 1 << c
            view = table.match.view(seat)
            assert view is not None
            for other in view.known.values():
                mask |= other
            for c in view.trick:
                mask |= 1 << c[1]
            for result in table.match.results:  # earlier hands are over: all shown
                for t in result.tricks:
                    for c in t.cards:
                        mask |= 1 << c
            return mask

        def check(seat: int, view: pb.SeatView) -> None:
            if table.match.hand is None:
                return
            seen = _cards_in(view)
            bad = [c for c in seen if not allowed(seat) >> c & 1]
            assert not bad, f"seat {seat} was shown {bad}"

        await play_random(stub, table_id, tokens, random.Random(11), on_view=check)
        # The event streams: nothing of another seat's hand as dealt.
        for seat, token in tokens.items():
            async for msg in stub.WatchTable(
                pb.WatchTableRequest(table_id=table_id, seat=seat), metadata=auth(token)
            ):
                ev = msg.event
                if ev.HasField("hand_started"):
                    number = ev.hand_started.number
                    dealt = next(
                        r.deal.hands[seat] for r in table.match.results if r.number == number
                    )
                    assert set(ev.hand_started.hand) == set(iter_cards(dealt))

    run(body, tmp_path)


def test_health_serving_then_not_serving(tmp_path: Path) -> None:
    async def main() -> None:
        server = await create_server("127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service="tapis.v1.RefereeService")
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            await server.health.set(
                "tapis.v1.RefereeService", health_pb2.HealthCheckResponse.NOT_SERVING
            )
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service="tapis.v1.RefereeService")
            )
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        await server.stop(0)

    asyncio.run(main())


def test_list_games_describes_every_option(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        games = (await stub.ListGames(pb.ListGamesRequest())).games
        assert {g.name for g in games} == set(GAMES)
        for game in games:
            for ruleset in game.rulesets:
                assert ruleset.player_counts, (game.name, ruleset.name)
                for opt in ruleset.options:
                    assert opt.type in ("bool", "int", "enum"), opt
                    assert opt.description, (game.name, ruleset.name, opt.key)
                    assert opt.default_value.WhichOneof("value") is not None, opt.key
                    if opt.type == "enum":
                        assert opt.default_value.string_value in opt.allowed
                    if opt.type == "int":  # every int option has its range
                        assert opt.HasField("min_value") and opt.HasField("max_value"), opt
                        value = opt.default_value.int_value
                        assert opt.min_value <= value <= opt.max_value, opt
                    else:
                        assert not opt.HasField("min_value") and not opt.HasField("max_value")
        hearts = next(g for g in games if g.name == "dame-de-pique")
        assert list(hearts.aliases) == ["hearts"]
        assert list(hearts.rulesets[0].player_counts) == [4]
        threshold = next(o for o in hearts.rulesets[0].options if o.key == "end_threshold")
        assert (threshold.min_value, threshold.max_value) == (1, 1000)
        # A value past the range is refused, the range named.
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await new_table(stub, "hearts", "", {"end_threshold": 1001}, 4)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "1 to 1000" in (exc.value.details() or "")

    run(body, tmp_path)


def test_a_match_the_first_deal_ends_gets_its_record(tmp_path: Path) -> None:
    """L'Impériale can be won in the announcements of the very first hand: the table is then
    finished as soon as its seats are taken, and its record is issued at once."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        ended = 0
        for _ in range(40):
            table_id, _ = await new_table(stub, "imperiale", "academie", {"target_fiches": 1}, 2)
            table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
            if table.status == pb.TABLE_STATUS_FINISHED:
                ended += 1
                got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
                assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
        assert ended > 0  # a 6th jeton or an impériale in the announcements: some of 40 deals

    run(body, tmp_path, max_tables_per_client=100)


async def history(
    stub: rpc.RefereeServiceStub, table_id: str, tokens: dict[int, str]
) -> tuple[bytes, list[bytes]]:
    """A table's record and every event seat 1 is sent, as bytes."""
    record = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
    request = pb.WatchTableRequest(table_id=table_id, seat=1)
    call = stub.WatchTable(request, metadata=auth(tokens[1]))
    return record.envelope.SerializeToString(), [m.event.SerializeToString() async for m in call]


def test_finished_tables_stay_on_disk_until_asked_for(tmp_path: Path) -> None:
    """After a restart only the live tables are replayed; a finished one is loaded when asked
    for, and gives the same record, views and events as before."""

    async def play(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        done = []
        for k in range(3):
            table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 20}, 4)
            await play_random(stub, table_id, tokens, random.Random(k))
            done.append((table_id, tokens))
        live, live_tokens = await new_table(stub, "napoleon", "", {"deals": 4}, 4)
        before = {t: await history(stub, t, tokens) for t, tokens in done}
        return done, live, live_tokens, before

    done, live, live_tokens, before = run(play, tmp_path)

    async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        referee = server.referee
        assert set(referee.tables) == {live}  # the finished tables were not replayed
        for table_id, tokens in done:
            assert await history(stub, table_id, tokens) == before[table_id]
            view = await stub.GetView(
                pb.GetViewRequest(table_id=table_id, seat=0), metadata=auth(tokens[0])
            )
            assert view.view.status == pb.TABLE_STATUS_FINISHED
        assert set(referee.tables) == {live} | {t for t, _ in done}
        # the least recently asked for leave memory
        referee.limits = dataclasses.replace(referee.limits, max_loaded_finished=1)
        await stub.GetTable(pb.GetTableRequest(table_id=done[0][0]))
        await stub.GetTable(pb.GetTableRequest(table_id=done[1][0]))
        assert set(referee.tables) == {live, done[1][0]}
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.GetTable(pb.GetTableRequest(table_id="no-such-table"))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        await play_random(stub, live, live_tokens, random.Random(9))  # the live one plays on

    run(after, tmp_path)


def test_actions_of_seats_acting_at_once_are_all_applied_in_order(tmp_path: Path) -> None:
    """The four passes of each Dame de Pique exchange submitted at once (stored together,
    not one commit after the other): each acknowledged at its own index with its own event,
    a retry answered alike, the match played to a record that verifies, and a referee
    restarted on the store holding the same table."""
    key = tmp_path / "k.key"

    async def view_of(stub: Any, table_id: str, seat: int, token: str) -> pb.SeatView:
        request = pb.GetViewRequest(table_id=table_id, seat=seat)
        return (await stub.GetView(request, metadata=auth(token))).view

    async def main() -> tuple[str, dict[int, str], list[pb.SeatView]]:
        rng = random.Random(7)
        async with (
            referee(tmp_path) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 26}, 4)
            exchanges = 0
            while True:
                views = [await view_of(stub, table_id, s, tokens[s]) for s in range(4)]
                if views[0].status == pb.TABLE_STATUS_FINISHED:
                    break
                acting = [v for v in views if v.legal_actions]
                requests = [
                    pb.SubmitActionRequest(
                        table_id=table_id,
                        seat=v.seat,
                        expected_action_index=v.action_index,
                        action=rng.choice(v.legal_actions).action,
                    )
                    for v in acting
                ]
                acks = await asyncio.gather(
                    *(stub.SubmitAction(r, metadata=auth(tokens[r.seat])) for r in requests)
                )
                first = views[0].action_index
                assert sorted(a.action_index for a in acks) == list(range(first, first + len(acks)))
                for request, ack in zip(requests, acks, strict=True):
                    taken = [e.action_taken for e in ack.events if e.HasField("action_taken")]
                    assert [(t.seat, t.action_index, t.action) for t in taken] == [
                        (request.seat, ack.action_index, request.action)
                    ]
                if len(acks) > 1:
                    exchanges += 1
                    again = await asyncio.gather(
                        *(stub.SubmitAction(r, metadata=auth(tokens[r.seat])) for r in requests)
                    )
                    assert [a.action_index for a in again] == [a.action_index for a in acks]
            assert exchanges >= 1
            got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
            result = verify_envelope(got.envelope, [load_public_key(key)])
            assert result.ok, result.error
            views = [await view_of(stub, table_id, s, tokens[s]) for s in range(4)]
            return table_id, tokens, views

    async def restarted(table_id: str, tokens: dict[int, str]) -> list[pb.SeatView]:
        async with (
            referee(tmp_path) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            return [await view_of(stub, table_id, s, tokens[s]) for s in range(4)]

    table_id, tokens, before = asyncio.run(main())
    assert before[0].status == pb.TABLE_STATUS_FINISHED
    assert asyncio.run(restarted(table_id, tokens)) == before


def test_submissions_racing_one_another_get_no_unknown_or_internal_and_replay_alike(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every seat with legal actions submits at once at each step of several tables, some
    twice (a retry), some with another action at the same index too, the others an action
    that does not decode: answered with their statuses, never UNKNOWN or INTERNAL, nothing
    logged as an error, and a referee restarted on the store shows every table as it was."""
    bad = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
    codes: dict[str, int] = {}

    async def view_of(stub: Any, table_id: str, seat: int, token: str) -> pb.SeatView:
        request = pb.GetViewRequest(table_id=table_id, seat=seat)
        return (await stub.GetView(request, metadata=auth(token))).view

    async def views(stub: Any, tables: list[tuple[str, dict[int, str]]]) -> list[pb.SeatView]:
        return [await view_of(stub, t, s, tokens[s]) for t, tokens in tables for s in range(4)]

    async def main() -> tuple[list[tuple[str, dict[int, str]]], list[pb.SeatView]]:
        rng = random.Random(11)
        async with (
            referee(tmp_path) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)

            async def submit(table_id: str, token: str, seat: int, index: int, action: int) -> None:
                request = pb.SubmitActionRequest(
                    table_id=table_id, seat=seat, expected_action_index=index, action=action
                )
                try:
                    await stub.SubmitAction(request, metadata=auth(token))
                    code = "OK"
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() not in bad, (exc.code(), exc.details())
                    code = exc.code().name
                codes[code] = codes.get(code, 0) + 1

            tables = [
                await new_table(stub, "dame-de-pique", "", {"end_threshold": 26}, 4)
                for _ in range(4)
            ]
            for _ in range(40):
                calls = []
                for (table_id, tokens), view in zip(
                    [t for t in tables for _ in range(4)], await views(stub, tables), strict=True
                ):
                    token, at = tokens[view.seat], view.action_index
                    if not view.legal_actions:
                        if rng.random() < 0.1:  # not this seat's turn, or no such action
                            calls.append(submit(table_id, token, view.seat, at, 1 << 20))
                        continue
                    action = rng.choice(view.legal_actions).action
                    calls.append(submit(table_id, token, view.seat, at, action))
                    draw = rng.random()
                    if draw < 0.2:
                        calls.append(submit(table_id, token, view.seat, at, action))
                    elif draw < 0.3:
                        other = view.legal_actions[0].action
                        calls.append(submit(table_id, token, view.seat, at, other))
                rng.shuffle(calls)
                await asyncio.gather(*calls)
            return tables, await views(stub, tables)

    async def restarted(tables: list[tuple[str, dict[int, str]]]) -> list[pb.SeatView]:
        async with (
            referee(tmp_path) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            return await views(rpc.RefereeServiceStub(channel), tables)

    with caplog.at_level("ERROR", logger="tapis"):
        tables, before = asyncio.run(main())
        assert asyncio.run(restarted(tables)) == before
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    assert codes.get("OK", 0) > 100 and codes.get("ABORTED", 0) > 0, codes


async def _two_finished(server: RunningServer, stub: rpc.RefereeServiceStub) -> list[str]:
    """Two matches of Dame de Pique played to their end, their tables' ids."""
    done = []
    for k in range(2):
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 26}, 4)
        await play_random(stub, table_id, tokens, random.Random(k))
        done.append(table_id)
    await server.referee.idle()
    return done


def test_a_finished_table_out_of_memory_is_replayed_without_holding_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table over that left memory is replayed when asked for, by anyone (GetTable, the web
    front): asking in turn for more finished tables than are kept, one client made the
    referee replay a long match again and again on its event loop, every call waiting (p99
    360 ms). The replay now lets the loop run the others' calls every `REPLAY_CHUNK`
    actions; callers asking for the same table at once share one replay."""
    monkeypatch.setattr(tables, "REPLAY_CHUNK", 10)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        referee = server.referee
        done = await _two_finished(server, stub)
        first = done[0]
        assert first not in referee.tables  # (one finished table is kept: the last)
        actions = (await stub.GetTable(pb.GetTableRequest(table_id=done[1]))).action_index
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        replays = 0
        restoring = referee._restoring

        def counted(stored: Any) -> Any:
            nonlocal replays
            replays += 1
            return restoring(stored)

        monkeypatch.setattr(referee, "_restoring", counted)
        ticking = asyncio.create_task(ticker())
        try:
            got = await asyncio.gather(
                *(stub.GetTable(pb.GetTableRequest(table_id=first)) for _ in range(3))
            )
        finally:
            ticking.cancel()
        assert {g.status for g in got} == {pb.TABLE_STATUS_FINISHED}
        assert replays == 1  # the three callers shared one replay
        assert ticks >= got[0].action_index // 10 > actions // 20  # the loop ran between chunks

    run(body, tmp_path, max_loaded_finished=1)


def test_one_client_replays_finished_tables_within_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replaying the finished tables that left memory costs the event loop: one client may
    have `REPLAY_RATE` actions a second replayed (`REPLAY_BURST` at once), then its asks are
    RESOURCE_EXHAUSTED, saying when to retry (asking in turn for more finished tables than
    are kept, with the replay in chunks, one client still took gRPC's p99 from 2 to 88 ms).
    A table in memory costs nothing."""
    monkeypatch.setattr(tables, "REPLAY_RATE", 1)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        referee = server.referee
        done = await _two_finished(server, stub)
        sizes = [(await stub.GetTable(pb.GetTableRequest(table_id=t))).action_index for t in done]
        # (the second is in memory: asking for it again and again costs nothing)
        budget = referee._replay_budget
        budget.burst = sizes[0] - 10
        budget._left.clear()
        for _ in range(3):
            await stub.GetTable(pb.GetTableRequest(table_id=done[1]))
        await stub.GetTable(pb.GetTableRequest(table_id=done[0]))  # replayed: 10 in debt
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.GetTable(pb.GetTableRequest(table_id=done[1]))  # not replayed meanwhile
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "replays for one (1 a second): retry in" in (refused.value.details() or "")
        await stub.GetTable(pb.GetTableRequest(table_id=done[0]))  # (in memory)

    monkeypatch.setattr(tables, "REPLAY_BURST", 10**6)
    run(body, tmp_path, max_loaded_finished=1)


def test_the_replay_budget_remembers_a_bounded_number_of_clients() -> None:
    """Clients from ever new addresses (IPv6 gives many) asking for tables that do not exist
    are checked, never charged: each was kept, for ever."""
    budget = tables.ReplayBudget(1.0, 10.0)
    for n in range(budget.MAX_CLIENTS + 1000):
        budget.check(f"client {n}")
    budget.spend("last", 20)
    assert len(budget._left) == budget.MAX_CLIENTS
    with pytest.raises(TooMany):
        budget.check("last")  # (in debt: 10 - 20)
