"""Clocks at timed tables, on a real referee whose time the test moves by hand (`ManualTime`:
nothing sleeps): a seat that stops answering loses on time (forfeit) or is played for
(autoplay) in every game and ruleset, and the signed records verify; views and events show
the clocks; a late action finds the referee acted; the clocks survive a restart; a record
whose clock arithmetic was tampered with and re-signed fails `verify`."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.clients.bots import SeatResult
from tapis_cartes.records.codec import canonical_bytes, decode_record, write_envelopes
from tapis_cartes.records.score import result_line
from tapis_cartes.records.signing import load_private_key, load_public_key, sign
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.server.app import RunningServer, create_server
from tapis_cartes.referee.server.limits import Limits
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from ..commands import tapis
from .test_referee import MATCHES
from .util import ManualTime, Server, auth, new_table, play_random, referee

FORFEIT = rpb.TIMEOUT_POLICY_FORFEIT
AUTOPLAY = rpb.TIMEOUT_POLICY_AUTOPLAY


async def settle(server: RunningServer) -> None:
    """Let the referee finish what the alarms set going (each may set the next)."""
    for _ in range(20):
        await asyncio.sleep(0)
        await server.referee.idle()


async def view(stub: rpc.RefereeServiceStub, table_id: str, seat: int, token: str) -> pb.SeatView:
    request = pb.GetViewRequest(table_id=table_id, seat=seat)
    return (await stub.GetView(request, metadata=auth(token))).view


async def act(
    stub: rpc.RefereeServiceStub,
    table_id: str,
    tokens: dict[int, str],
    rng: random.Random,
    clock: ManualTime,
    think_ms: int,
) -> pb.SubmitActionResponse | None:
    """One random legal action by a seat that may act, after thinking `think_ms`; None when
    the match is over."""
    for seat, token in tokens.items():
        v = await view(stub, table_id, seat, token)
        if v.status != pb.TABLE_STATUS_PLAYING:
            return None
        if v.legal_actions:
            clock.advance(think_ms, ring=False)  # an alarm due rings at the next advance
            request = pb.SubmitActionRequest(
                table_id=table_id,
                seat=seat,
                expected_action_index=v.action_index,
                action=rng.choice(v.legal_actions).action,
            )
            return await stub.SubmitAction(request, metadata=auth(token))
    raise AssertionError("nobody may act")


async def playing_table(
    stub: rpc.RefereeServiceStub,
    match: tuple[str, str, dict[str, Any], int],
    control: rpb.TimeControl,
    rng: random.Random,
    clock: ManualTime,
    moves: int,
    think_ms: int,
) -> tuple[str, dict[int, str]]:
    """A timed table on which `moves` random moves were made, each after `think_ms`, and
    whose match goes on (a short match may end by itself, an impériale dealt: then another
    table, its deals drawn afresh)."""
    for _ in range(20):
        table_id, tokens = await new_table(stub, *match, control)
        for _ in range(moves):
            if await act(stub, table_id, tokens, rng, clock, think_ms) is None:
                break
        status = (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).status
        if status == pb.TABLE_STATUS_PLAYING:
            return table_id, tokens
    raise AssertionError("every match ended by itself")


async def signed_record(stub: rpc.RefereeServiceStub, table_id: str) -> pb.GetRecordResponse:
    return await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))


def timed(body: Any, tmp_path: Path, clock: ManualTime) -> Any:
    async def main() -> Any:
        async with (
            referee(tmp_path, time_source=clock) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            return await body(server, rpc.RefereeServiceStub(channel))

    return asyncio.run(main())


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), MATCHES)
def test_a_seat_that_stops_answering_loses_on_time(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=2000, budget_ms=10_000, increment_ms=500, policy=FORFEIT)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        rng = random.Random(game + ruleset)
        match = (game, ruleset, options, players)
        table_id, tokens = await playing_table(stub, match, control, rng, clock, 6, 300)
        before = (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).action_index
        v = await view(stub, table_id, 0, tokens[0])
        waiting = [c.seat for c in v.clocks if c.running]
        assert waiting == list(v.to_act)
        left = min(c.action_left_ms for c in v.clocks if c.running)
        clock.advance(left - 1)  # not yet
        await settle(server)
        after = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert after.status == pb.TABLE_STATUS_PLAYING and after.action_index == before
        clock.advance(1)
        await settle(server)
        got = await signed_record(stub, table_id)
        result = verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")])
        assert result.ok, result.error
        rec = decode_record(got.envelope.record)
        assert rec.rules.time_control == control
        assert rec.outcome.finished and rec.outcome.rule == "CLOCK.FORFEIT"
        assert rec.outcome.resigned in waiting
        assert rec.outcome.reason == f"seat {rec.outcome.resigned} lost on time"
        # The stream's end, and the note before it, say what the record says (both said
        # "resigned", then the note alone).
        ends = [
            r.event.match_ended.reason
            if r.event.WhichOneof("event") == "match_ended"
            else r.event.note.text
            async for r in stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
            if r.event.WhichOneof("event") == "match_ended"
            or (r.event.WhichOneof("event") == "note" and r.event.note.kind == "match-over")
        ]
        assert ends == [rec.outcome.reason] * 2
        last = rec.hands[-1]
        assert list(last.timeouts) == [len(last.actions)]
        assert last.actions[-1] == 6  # a resignation
        assert last.elapsed_ms[-1] == 2000
        elapsed = [e for h in rec.hands for e in h.elapsed_ms]
        assert len(elapsed) == before + 1 and all(0 <= e <= 2000 for e in elapsed)

    timed(body, tmp_path, clock)


def test_the_late_move_of_a_seat_that_lost_on_time_finds_the_match_over(tmp_path: Path) -> None:
    """A seat's own move, come after its time ran out but before the referee's alarm rang,
    made the referee resign for it, then was refused ABORTED (a stale index: "wait for your
    turn") where every submission once the match is over is FAILED_PRECONDITION match-over
    (protocol.md section 7), as it was when the alarm rang first."""
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=2000, policy=FORFEIT)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        rng = random.Random("late")
        match = MATCHES[0]
        table_id, tokens = await playing_table(stub, match, control, rng, clock, 3, 300)
        v = await view(stub, table_id, 0, tokens[0])
        seat = v.to_act[0]
        mine = await view(stub, table_id, seat, tokens[seat])
        clock.advance(2001, ring=False)  # the time is out; the alarm has not rung
        err = await refused_late(stub, table_id, tokens[seat], mine, mine.legal_actions[0].action)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
        assert "the match is already over" in (err.details() or "")
        rec = decode_record((await signed_record(stub, table_id)).envelope.record)
        assert rec.outcome.rule == "CLOCK.FORFEIT" and rec.outcome.resigned == seat

    timed(body, tmp_path, clock)


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), MATCHES)
def test_a_seat_out_of_time_is_played_for_and_the_match_goes_on(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=1000, policy=AUTOPLAY)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        rng = random.Random(game + ruleset + "autoplay")
        match = (game, ruleset, options, players)
        table_id, tokens = await playing_table(stub, match, control, rng, clock, 3, 200)
        timeouts = 0
        for _ in range(3):
            before = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
            if before.status == pb.TABLE_STATUS_FINISHED:
                break
            clock.advance(1000)
            await settle(server)
            after = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
            assert after.action_index > before.action_index  # played for the seat(s) late
            timeouts += 1
            for _ in range(3):
                if await act(stub, table_id, tokens, rng, clock, 200) is None:
                    break
        assert timeouts >= 1
        await play_random(stub, table_id, tokens, rng)
        got = await signed_record(stub, table_id)
        result = verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")])
        assert result.ok, result.error
        rec = decode_record(got.envelope.record)
        marked = [(h, t) for h, hand in enumerate(rec.hands) for t in hand.timeouts]
        assert len(marked) >= timeouts
        for h, t in marked:
            assert rec.hands[h].elapsed_ms[t - 1] == 1000
        assert rec.outcome.rule == ""

    timed(body, tmp_path, clock)


def test_views_and_events_show_the_clocks(tmp_path: Path) -> None:
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=30_000, budget_ms=60_000, increment_ms=2_000,
                              policy=FORFEIT)  # fmt: skip

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        # A table waiting for a player: every seat's whole budget, no clock running (its
        # view had no clocks).
        seats = [pb.SeatRequest(name="A"), pb.SeatRequest(name="B", open=True)]
        created = await stub.CreateTable(
            pb.CreateTableRequest(game="triomphe", seats=seats, time_control=control)
        )
        waiting = await view(stub, created.table_id, 0, created.tokens[0].token)
        assert waiting.status == pb.TABLE_STATUS_WAITING
        assert [(c.seat, c.remaining_ms, c.running) for c in waiting.clocks] == [
            (0, 60_000, False),
            (1, 60_000, False),
        ]
        table_id, tokens = await new_table(stub, "napoleon", "", {"deals": 2}, 4, control)
        v = await view(stub, table_id, 0, tokens[0])
        assert [c.seat for c in v.clocks] == [0, 1, 2, 3]
        running = [c.seat for c in v.clocks if c.running]
        assert running == list(v.to_act) and len(running) == 1
        seat = running[0]
        clock.advance(5_000)
        v = await view(stub, table_id, seat, tokens[seat])
        mine = v.clocks[seat]
        assert mine.remaining_ms == 55_000 and mine.action_left_ms == 25_000
        assert all(c.remaining_ms == 60_000 and not c.HasField("action_left_ms")
                   for c in v.clocks if c.seat != seat)  # fmt: skip
        reply = await stub.SubmitAction(
            pb.SubmitActionRequest(
                table_id=table_id,
                seat=seat,
                expected_action_index=v.action_index,
                action=v.legal_actions[0].action,
            ),
            metadata=auth(tokens[seat]),
        )
        taken = [e.action_taken for e in reply.events if e.HasField("action_taken")]
        assert taken[0].elapsed_ms == 5_000 and not taken[0].timeout
        assert taken[0].remaining_ms == 57_000  # 60 s - 5 s + 2 s
        v = await view(stub, table_id, seat, tokens[seat])
        assert v.clocks[seat].remaining_ms == 57_000 and not v.clocks[seat].running
        games = await stub.ListGames(pb.ListGamesRequest())
        info = games.time_control
        assert info.action_ms_min == 100 and info.budget_ms_max == 604_800_000
        assert list(info.policies) == [FORFEIT, AUTOPLAY]

    timed(body, tmp_path, clock)


async def nap_to_act(
    stub: rpc.RefereeServiceStub, players: int, control: rpb.TimeControl
) -> tuple[str, dict[int, str], int, pb.SeatView]:
    """A timed Napoléon table: its id, tokens, the seat to act and that seat's view."""
    table_id, tokens = await new_table(stub, "nap", "", {"deals": 2}, players, control)
    seat = (await view(stub, table_id, 0, tokens[0])).to_act[0]
    return table_id, tokens, seat, await view(stub, table_id, seat, tokens[seat])


async def refused_late(
    stub: rpc.RefereeServiceStub, table_id: str, token: str, v: pb.SeatView, action: int
) -> grpc.aio.AioRpcError:
    """The refusal of `action` submitted at the index of view `v` (it must be refused)."""
    request = pb.SubmitActionRequest(
        table_id=table_id, seat=v.seat, expected_action_index=v.action_index, action=action
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SubmitAction(request, metadata=auth(token))
    return caught.value


def test_an_action_that_comes_after_the_time_ran_out_finds_the_referee_acted(
    tmp_path: Path,
) -> None:
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=1_000, policy=AUTOPLAY)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        table_id, tokens, seat, v = await nap_to_act(stub, 4, control)
        clock.advance(1_001, ring=False)  # the alarm has not rung yet when the action comes
        error = await refused_late(stub, table_id, tokens[seat], v, v.legal_actions[-1].action)
        assert error.code() == grpc.StatusCode.ABORTED
        assert "time ran out" in (error.details() or "")
        after = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert after.action_index == v.action_index + 1

    timed(body, tmp_path, clock)


def test_a_late_action_equal_to_the_one_the_referee_made_on_time_is_not_acknowledged(
    tmp_path: Path,
) -> None:
    # A late submission of the very action autoplay made (a pass, most often) was answered
    # as its retry: OK, while the record says the referee made it on time.
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=1_000, policy=AUTOPLAY)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        table_id, tokens, seat, v = await nap_to_act(stub, 5, control)
        clock.advance(1_001)  # the referee plays for the seat
        await settle(server)
        for choice in v.legal_actions:
            error = await refused_late(stub, table_id, tokens[seat], v, choice.action)
            assert error.code() == grpc.StatusCode.ABORTED, choice.text
            details = error.details() or ""
            assert f"seat {seat}'s time ran out before this action came" in details, details
            assert "(CLOCK.AUTOPLAY)" in details, details

    timed(body, tmp_path, clock)


def test_a_resignation_after_the_time_ran_out_is_made_after_the_referees_action(
    tmp_path: Path,
) -> None:
    # A resignation names no index: the referee's action on time (autoplay, the alarm not
    # rung yet) before it did not refuse it (ABORTED), it goes after it.
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=1_000, policy=AUTOPLAY)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        table_id, tokens, seat, v = await nap_to_act(stub, 5, control)
        clock.advance(1_001, ring=False)  # the alarm has not rung yet when the call comes
        reply = await stub.Resign(
            pb.ResignRequest(table_id=table_id, seat=seat), metadata=auth(tokens[seat])
        )
        assert reply.action_index == v.action_index + 1
        await settle(server)
        got = await signed_record(stub, table_id)
        rec = decode_record(got.envelope.record)
        assert list(rec.hands[0].timeouts) == [v.action_index + 1]  # (in the hand, from 1)
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok

    timed(body, tmp_path, clock)


def test_clocks_survive_a_restart_and_wait_for_their_seat_to_come_back(tmp_path: Path) -> None:
    """The budgets survive a restart, and neither the time the referee was down nor the time
    a seat takes to find it back counts: a running clock is held until its seat's first call
    (a client's channel tries again after a back-off: a C++ bot that reopened its stream as
    protocol.md says came back 5 s after the referee, and lost on time at a limit of 5 s),
    or `restart_grace` seconds when the seat does not come back."""
    control = rpb.TimeControl(action_ms=20_000, budget_ms=50_000, policy=AUTOPLAY)

    async def to_act(stub: rpc.RefereeServiceStub, table_id: str) -> tuple[int, int]:
        """The action index and the one seat whose clock runs (a spectator's view)."""
        got = (await stub.GetView(pb.GetViewRequest(table_id=table_id))).view
        (seat,) = [c.seat for c in got.clocks if c.running]
        return got.action_index, seat

    async def main() -> None:
        clock = ManualTime()
        rng = random.Random(7)
        async with (
            referee(tmp_path, time_source=clock) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            table_id, tokens = await new_table(stub, "nap", "", {"deals": 2}, 4, control)
            for _ in range(5):
                await act(stub, table_id, tokens, rng, clock, 1_500)
            before = [c.remaining_ms for c in (await view(stub, table_id, 0, tokens[0])).clocks]
            clock.advance(10_000)  # time lost in the crash is not counted
        later = ManualTime()
        async with (
            referee(tmp_path, time_source=later) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            index, seat = await to_act(stub, table_id)
            later.advance(59_000)  # far past the limit, within the grace: the seat is away
            await settle(server)
            assert await to_act(stub, table_id) == (index, seat)
            after = [
                c.remaining_ms for c in (await view(stub, table_id, seat, tokens[seat])).clocks
            ]
            assert after == before  # (the seat's call: its clock runs from now)
            later.advance(19_999)
            await settle(server)
            assert (await to_act(stub, table_id))[0] == index
            later.advance(1)  # its 20 s since it came back: the seat is played for
            await settle(server)
            index, seat = await to_act(stub, table_id)
        again = ManualTime()
        async with (
            referee(tmp_path, time_source=again) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            assert await to_act(stub, table_id) == (index, seat)
            again.advance(60_000 + 20_000)  # a seat that does not come back: the grace, then
            await settle(server)  # its limit, and it is played for
            assert (await to_act(stub, table_id))[0] == index + 1
            await play_random(stub, table_id, tokens, rng)
            got = await signed_record(stub, table_id)
            assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
            rec = decode_record(got.envelope.record)
            timeouts = [h.elapsed_ms[i - 1] for h in rec.hands for i in h.timeouts]
            assert timeouts == [20_000, 20_000]
            elapsed = [e for h in rec.hands for e in h.elapsed_ms]
            assert all(e >= 1_500 for e in elapsed[:5])  # each thought 1.5 s or more

    asyncio.run(main())


def test_no_time_runs_out_while_the_referee_stops(tmp_path: Path) -> None:
    """A stop waited up to its grace period for the streams open (which never end by
    themselves), while the clocks ran and refused moves: seats lost on time. Now the clocks
    stop and the streams end (UNAVAILABLE, to resume) as the stop begins."""
    control = rpb.TimeControl(action_ms=2_000, policy=FORFEIT)

    async def main() -> None:
        clock = ManualTime()
        rng = random.Random(3)
        server = await create_server(
            "127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key", time_source=clock
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = rpc.RefereeServiceStub(channel)
            match = ("nap", "", {"deals": 2}, 4)
            table_id, _ = await playing_table(stub, match, control, rng, clock, 3, 500)
            before = (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).action_index
            stream = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
            await stream.read()  # (the stream is open)
            stopping = asyncio.create_task(server.stop(60.0))
            await asyncio.sleep(0.05)
            clock.advance(10_000)  # past the seat's limit: no alarm rings
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                while await stream.read() is not grpc.aio.EOF:
                    pass
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "the referee is stopping: open the stream again" in (
                caught.value.details() or ""
            )
            await asyncio.wait_for(stopping, 10.0)  # not its 60 s of grace (a bound, not a time)
        async with (
            referee(tmp_path, time_source=ManualTime()) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
            assert got.status == pb.TABLE_STATUS_PLAYING and got.action_index == before

    asyncio.run(main())


def test_an_untimed_match_no_one_plays_is_stopped_with_its_record(tmp_path: Path) -> None:
    """A started untimed table no one played stayed open for ever, across restarts (a bot
    that hangs held it, and one of its creator's places for open tables). Now the referee
    stops its match `idle_match_ttl` after its last action, or its start, or the referee's
    own start: unfinished, its record saying why, its streams told, the place given back."""
    limits = Limits(idle_match_ttl=60.0, max_tables_per_client=2)
    key = tmp_path / "k.key"

    async def status(stub: rpc.RefereeServiceStub, table_id: str) -> int:
        return (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).status

    async def main() -> None:
        clock = ManualTime()
        rng = random.Random("idle")
        async with (
            referee(tmp_path, limits=limits, time_source=clock) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            idle, tokens = await new_table(stub, "nap", "", {"deals": 2}, 4)
            for _ in range(4):  # each action within the time: the match goes on
                assert await act(stub, idle, tokens, rng, clock, 59_000) is not None
                await settle(server)
            at = (await stub.GetTable(pb.GetTableRequest(table_id=idle))).event_index
            stream = stub.WatchTable(pb.WatchTableRequest(table_id=idle, from_event_index=at))
            seat = (await view(stub, idle, 0, tokens[0])).to_act[0]
            mine = await view(stub, idle, seat, tokens[seat])
            clock.advance(59_999)
            await settle(server)
            assert await status(stub, idle) == pb.TABLE_STATUS_PLAYING
            clock.advance(1)  # 60 s since the last action
            await settle(server)
            assert await status(stub, idle) == pb.TABLE_STATUS_FINISHED
            last = [m async for m in stream][-1].event
            reason = f"stopped by the referee: no action for 60 s (seat {seat} to act)"
            assert last.match_ended.reason == reason
            err = await refused_late(stub, idle, tokens[seat], mine, mine.legal_actions[0].action)
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
            got = await signed_record(stub, idle)
            assert verify_envelope(got.envelope, [load_public_key(key)]).ok
            rec = decode_record(got.envelope.record)
            assert not rec.outcome.finished and rec.outcome.reason == reason
            # What a person reads of it: why it stopped (it was "The match is not finished.",
            # and `tapis bot` said "lost").
            assert result_line(rec) == (
                "The match is not finished: stopped by the referee: no action for 60 s"
                f" ({rec.seats[seat].name} to act)."
            )
            ended = SeatResult(seat, (), (), got.record_id, 0, last.match_ended.reason)
            assert ended.outcome == f"no winner ({reason})" and not ended.won
            # The stopped table no longer counts among its creator's two places: two more.
            other, _ = await new_table(stub, "nap", "", {"deals": 2}, 4)
            third, _ = await new_table(stub, "nap", "", {"deals": 2}, 4)
            clock.advance(30_000)
            await settle(server)
        later = ManualTime()  # a restart: the time an idle match waits counts from it
        async with (
            referee(tmp_path, limits=limits, time_source=later) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            later.advance(59_000)
            await settle(server)
            assert await status(stub, other) == pb.TABLE_STATUS_PLAYING
            assert await status(stub, third) == pb.TABLE_STATUS_PLAYING
            later.advance(1_000)
            await settle(server)
            assert await status(stub, other) == pb.TABLE_STATUS_FINISHED
            assert await status(stub, third) == pb.TABLE_STATUS_FINISHED
            assert await status(stub, idle) == pb.TABLE_STATUS_FINISHED

    asyncio.run(main())


@pytest.mark.parametrize(
    "bad",
    [
        rpb.TimeControl(policy=FORFEIT),
        rpb.TimeControl(action_ms=50, policy=FORFEIT),
        rpb.TimeControl(action_ms=1000),
        rpb.TimeControl(action_ms=1000, increment_ms=10, policy=AUTOPLAY),
        rpb.TimeControl(budget_ms=604_800_001, policy=AUTOPLAY),
        rpb.TimeControl(action_ms=1000, policy=7),  # type: ignore[arg-type]
    ],
)
def test_a_time_control_out_of_its_ranges_is_refused(tmp_path: Path, bad: rpb.TimeControl) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await new_table(stub, "hearts", "", {}, 4, bad)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "time_control." in (caught.value.details() or "")

    timed(body, tmp_path, ManualTime())


def test_a_record_with_its_clocks_tampered_and_re_signed_fails_verify(tmp_path: Path) -> None:
    clock = ManualTime()
    control = rpb.TimeControl(action_ms=2000, budget_ms=5000, policy=FORFEIT)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub) -> rpb.GameRecord:
        table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 20}, 4, control)
        rng = random.Random(3)
        for _ in range(13):  # the pass, two tricks and a card of the third
            await act(stub, table_id, tokens, rng, clock, 400)
        clock.advance(2000)
        await settle(server)
        return decode_record((await signed_record(stub, table_id)).envelope.record)

    rec = timed(body, tmp_path, clock)
    key = load_private_key(tmp_path / "k.key")
    public = load_public_key(tmp_path / "k.key")
    assert verify_envelope(sign(canonical_bytes(rec), key), [public]).ok
    # `tapis record show` prints the clocks.
    path = tmp_path / "timed.tapis"
    write_envelopes(path, [sign(canonical_bytes(rec), key)])
    shown = tapis("record", "show", path)
    assert shown.returncode == 0, shown.stderr
    assert "clocks: 2 s per action, 5 s per seat, forfeit" in shown.stdout
    assert "(2.0 s, 0:" in shown.stdout and "out of time)" in shown.stdout
    # The trick under way when the seat lost on time comes before its resignation (after it).
    assert shown.stdout.index("(unfinished)") < shown.stdout.index("out of time)"), shown.stdout
    loser = rec.seats[rec.outcome.resigned].name  # (show names the seats)
    assert f"\n{loser} lost on time [CLOCK.FORFEIT]" in shown.stdout
    assert shown.stdout.endswith(f"({loser} lost on time).\n")  # the score sheet's last line
    scored = tapis("record", "score", path)
    assert scored.returncode == 0 and scored.stdout.endswith(f"({loser} lost on time).\n")

    def mutant(change: Any) -> rpb.RecordEnvelope:
        bad = rpb.GameRecord()
        bad.CopyFrom(rec)
        change(bad)
        return sign(canonical_bytes(bad), key)

    def slower(r: rpb.GameRecord) -> None:
        r.hands[0].elapsed_ms[2] = 2001  # longer than the 2 s an action may take

    def budget_overspent(r: rpb.GameRecord) -> None:
        for i in range(len(r.hands[0].elapsed_ms) - 1):
            r.hands[0].elapsed_ms[i] = 1999  # every seat's 5 s are spent long before the end

    def negative_made_huge(r: rpb.GameRecord) -> None:
        r.hands[0].elapsed_ms[0] = 2**64 - 1

    def forfeit_too_early(r: rpb.GameRecord) -> None:
        r.hands[-1].elapsed_ms[-1] = 1500  # the seat still had time

    def timeout_not_marked(r: rpb.GameRecord) -> None:
        del r.hands[-1].timeouts[:]

    def one_elapsed_missing(r: rpb.GameRecord) -> None:
        del r.hands[0].elapsed_ms[-1]

    def untimed_with_elapsed(r: rpb.GameRecord) -> None:
        r.rules.ClearField("time_control")

    for change in (
        slower,
        budget_overspent,
        negative_made_huge,
        forfeit_too_early,
        one_elapsed_missing,
        untimed_with_elapsed,
    ):
        result = verify_envelope(mutant(change), [public])
        assert not result.ok and result.error is not None, change.__name__
        assert getattr(result.error, "code", "") == "clock", (change.__name__, result.error)
    # Without its mark, the forfeit is a plain resignation: the outcome no longer follows.
    result = verify_envelope(mutant(timeout_not_marked), [public])
    assert not result.ok

    # A list of timeouts out of order or range is refused naming the entry at fault (its
    # first eight were quoted, without the one at fault past them).
    def timeout_past_the_hand(r: rpb.GameRecord) -> None:
        r.hands[-1].timeouts.extend([4_000_000_000])

    result = verify_envelope(mutant(timeout_past_the_hand), [public])
    assert not result.ok and getattr(result.error, "code", "") == "clock"
    n = len(rec.hands[-1].timeouts)
    assert f"timeouts[{n}] is 4000000000 after " in str(result.error), result.error


def test_tapis_table_create_opens_a_timed_table(tmp_path: Path) -> None:
    server = Server(tmp_path)
    server.start()
    try:

        async def rules_of(table_id: str) -> rpb.Rules:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                stub = rpc.RefereeServiceStub(channel)
                return (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).rules

        address = f"127.0.0.1:{server.port}"

        async def ready() -> None:
            async with grpc.aio.insecure_channel(address) as channel:
                await server.serving(channel)

        asyncio.run(ready())
        made = tapis("table", "create", "--address", address, "--game", "nap",
                     "--action-time", "30", "--budget", "300", "--increment", "2.5",
                     "--on-timeout", "autoplay")  # fmt: skip
        assert made.returncode == 0, made.stderr
        table_id = made.stdout.split()[1]
        rules = asyncio.run(rules_of(table_id))
        assert rules.time_control == rpb.TimeControl(
            action_ms=30_000, budget_ms=300_000, increment_ms=2_500, policy=AUTOPLAY
        )
        bad = tapis("table", "create", "--address", address, "--budget", "soon")
        assert bad.returncode == 2 and "--budget 'soon': give a number of seconds" in bad.stderr
        out_of_range = tapis("table", "create", "--address", address, "--action-time", "0.01")
        assert out_of_range.returncode != 0
        assert "time_control.action_ms" in out_of_range.stderr
        # Refused before any call, naming the option: a time past the field's 32 bits (it
        # was protobuf's "Value out of range"), a policy without clocks (it made an untimed
        # table), an increment without a budget (the referee's refusal named action_ms).
        for args, said in [
            (("--budget", "4294968"), "--budget '4294968': at most 4294967.295 seconds"),
            (("--on-timeout", "autoplay"), "--on-timeout is for a timed table"),
            (("--increment", "5"), "--increment is added to a budget: give --budget too"),
        ]:
            refused = tapis("table", "create", "--address", address, *args)
            assert refused.returncode == 2, refused.stderr
            assert said in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    finally:
        server.terminate()
