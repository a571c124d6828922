"""PlaySeat, a seat's whole match on one call: matches played to the end in every game over it
(records verify, every event once); a refused move answered in-stream with the status
SubmitAction gives (code, message, ActionRefusal) and the match going on; a retry at the same
index; the opening refused (wrong token, no token, no `open`, past the events); a client gone
mid-match leaves no stream counted and no task; a clock forfeit reaches the stream."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2, status_pb2
from grpc_status import rpc_status

from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.signing import load_public_key
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine.actions import PLAY, encode
from tapis_cartes.referee.server.app import RunningServer, create_server
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .test_turns import GAMES
from .util import ManualTime, auth, new_table, referee, run

Call = Any  # grpc.aio.StreamStreamCall[pb.PlaySeatRequest, pb.PlaySeatResponse]


async def open_play(
    stub: rpc.RefereeServiceStub, table_id: str, seat: int, token: str, start: int = 0
) -> Call:
    call = stub.PlaySeat(metadata=auth(token))
    opening = pb.PlaySeatOpen(table_id=table_id, seat=seat, from_event_index=start)
    await call.write(pb.PlaySeatRequest(open=opening))
    return call


def submission(table_id: str, seat: int, index: int, action: int) -> pb.PlaySeatRequest:
    return pb.PlaySeatRequest(
        submit=pb.SubmitActionRequest(
            table_id=table_id, seat=seat, expected_action_index=index, action=action
        )
    )


async def _next_turn(call: Call) -> tuple[Any, pb.SeatView, bool]:
    """The next message's events, its view and whether the seat must act on it (an ack's
    next_view, or a turn)."""
    message = await call.read()
    assert message is not grpc.aio.EOF, "the stream ended before the match"
    if message.WhichOneof("result") == "ack":
        return message.ack.events, message.ack.next_view, message.ack.HasField("next_view")
    return message.events, message.turn, message.HasField("turn")


async def _play_until_ended(
    call: Call, table_id: str, seat: int, rng: random.Random
) -> pb.SeatView:
    """Random legal moves on a PlaySeat stream until the message with the match's end, whose
    view is returned (the stream is left to the caller)."""
    while True:
        events, view, due = await _next_turn(call)
        if ended(events):
            return view
        if due:
            choice = rng.choice(view.legal_actions).action
            await call.write(submission(table_id, seat, view.action_index, choice))


def ended(events: Any) -> bool:
    return any(e.HasField("match_ended") or e.HasField("table_closed") for e in events)


async def play_out(
    call: Call, table_id: str, seat: int, rng: random.Random, seen: list[int]
) -> int:
    """Random legal moves on a PlaySeat stream until the match ends (the stream then ends
    OK); every event index received goes into `seen`. Returns the acknowledgements."""
    acks = 0
    while True:
        message = await call.read()
        assert message is not grpc.aio.EOF, "the stream ended before the match"
        result = message.WhichOneof("result")
        assert result != "refused", message.refused
        if result == "ack":
            acks += 1
            assert not message.events and not message.HasField("turn")
            events, view = message.ack.events, message.ack.next_view
            due = message.ack.HasField("next_view")
        else:
            events, view, due = message.events, message.turn, message.HasField("turn")
        seen.extend(e.index for e in events)
        if ended(events):
            assert await call.read() is grpc.aio.EOF
            assert await call.code() == grpc.StatusCode.OK
            return acks
        if due:
            assert view.seat == seat and view.legal_actions
            choice = rng.choice(view.legal_actions).action
            await call.write(submission(table_id, seat, view.action_index, choice))


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), GAMES)
def test_a_match_played_over_play_seat_in_every_game(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    """Every seat plays on its one PlaySeat call: the match ends, each seat received every
    event exactly once, acknowledged as many actions as the record gives it, and the signed
    record verifies."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, game, ruleset, options, players)
        rng = random.Random(game + ruleset)
        seen: dict[int, list[int]] = {s: [] for s in tokens}
        calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
        acks = await asyncio.wait_for(
            asyncio.gather(*(play_out(calls[s], table_id, s, rng, seen[s]) for s in tokens)),
            120,
        )
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        result = verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")])
        assert result.ok, result.error
        record = decode_record(got.envelope.record)
        acted = [s for h in record.hands for s in h.seats]
        assert acks == [acted.count(s) for s in tokens]
        total = (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).event_index
        for seat, indexes in seen.items():
            assert sorted(indexes) == list(range(total)), f"seat {seat}"

    run(body, tmp_path)


def test_nothing_is_sent_after_the_message_that_ends_the_match(tmp_path: Path) -> None:
    """A submission a seat sends once it has read `match_ended` (the stream reads until it
    ends) gets no answer: the message with `match_ended` stays the stream's last, and the
    call ends OK."""

    async def late(call: Call, table_id: str, seat: int, rng: random.Random) -> None:
        view = await _play_until_ended(call, table_id, seat, rng)
        await call.write(submission(table_id, seat, view.action_index + 1, 0))
        after = await call.read()
        assert after is grpc.aio.EOF, after
        assert await call.code() == grpc.StatusCode.OK

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "napoleon", "", {"deals": 4}, 4)
        rng = random.Random(7)
        calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
        await asyncio.wait_for(
            asyncio.gather(*(late(calls[s], table_id, s, rng) for s in tokens)), 120
        )

    run(body, tmp_path)


def test_the_call_ends_at_once_when_refused_or_when_the_client_closes_its_side(
    tmp_path: Path,
) -> None:
    """The status of an opening refused comes at once, though the client keeps its side open
    (it came a second late: the wait for the client's side at a match's end); at the end of
    a match, at once once the client closes its side (protocol.md)."""

    async def to_the_end(call: Call, table_id: str, seat: int, rng: random.Random) -> None:
        await _play_until_ended(call, table_id, seat, rng)
        await call.done_writing()
        async with asyncio.timeout(0.5):
            assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "napoleon", "", {"deals": 1}, 4)
        call = await open_play(stub, table_id, 0, tokens[0], 10_000)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            async with asyncio.timeout(0.5):
                await call.read()
        assert exc.value.code() == grpc.StatusCode.OUT_OF_RANGE
        rng = random.Random(11)
        calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
        await asyncio.wait_for(
            asyncio.gather(*(to_the_end(calls[s], table_id, s, rng) for s in tokens)), 120
        )

    run(body, tmp_path)


def test_a_refused_move_is_answered_in_stream_as_submit_action_would_then_play_goes_on(
    tmp_path: Path,
) -> None:
    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 30}, 4)
        calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
        first = await calls[0].read()
        view = first.turn
        mine = set(view.hand)
        card = next(c for c in range(52) if c not in mine)
        bad = submission(table_id, 0, view.action_index, encode(PLAY, card))
        try:
            await stub.SubmitAction(bad.submit, metadata=auth(tokens[0]))
        except grpc.aio.AioRpcError as exc:
            unary = rpc_status.from_call(exc)
        assert unary is not None and unary.code == code_pb2.FAILED_PRECONDITION
        await calls[0].write(bad)
        answer = await calls[0].read()
        assert answer.WhichOneof("result") == "refused"
        in_stream = status_pb2.Status.FromString(answer.refused.SerializeToString())
        assert in_stream == unary
        refusal = pb.ActionRefusal()
        assert in_stream.details[0].Unpack(refusal) and refusal.rule
        # Another refusal: a field out of its bounds, as SubmitAction names it.
        undefined = submission(table_id, 0, view.action_index, 7)
        await calls[0].write(undefined)
        answer = await calls[0].read()
        assert answer.refused.code == code_pb2.INVALID_ARGUMENT
        assert answer.refused.message.startswith("action: ")
        # The stream stays open: the match is played to its end on it.
        rng = random.Random(1)
        choice = rng.choice(view.legal_actions).action
        await calls[0].write(submission(table_id, 0, view.action_index, choice))
        seen: dict[int, list[int]] = {s: [] for s in tokens}
        seen[0].extend(e.index for e in first.events)
        await asyncio.wait_for(
            asyncio.gather(*(play_out(calls[s], table_id, s, rng, seen[s]) for s in tokens)),
            120,
        )
        assert (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).status == (
            pb.TABLE_STATUS_FINISHED
        )

    run(body, tmp_path)


def test_a_retry_at_the_same_index_is_acknowledged_again_without_effect(
    tmp_path: Path,
) -> None:
    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "napoleon", "", {"deals": 4}, 4)
        request = pb.GetViewRequest(table_id=table_id, seat=0)
        view = (await stub.GetView(request, metadata=auth(tokens[0]))).view
        seat = view.to_act[0]
        call = await open_play(stub, table_id, seat, tokens[seat])
        turn = (await call.read()).turn
        again = submission(table_id, seat, turn.action_index, turn.legal_actions[0].action)
        await call.write(again)
        ack = (await call.read()).ack
        assert ack.action_index == turn.action_index and ack.events
        await call.write(again)  # the same again: answered, nothing applied
        retried = (await call.read()).ack
        assert retried.action_index == ack.action_index
        assert not retried.events  # this stream has them already
        table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert table.action_index == turn.action_index + 1
        unary = await stub.SubmitAction(again.submit, metadata=auth(tokens[seat]))
        assert unary.action_index == ack.action_index
        call.cancel()

    run(body, tmp_path)


def test_an_opening_refused_ends_the_call_with_its_status(tmp_path: Path) -> None:
    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        cases: list[tuple[Any, pb.PlaySeatRequest, grpc.StatusCode]] = [
            (auth(tokens[1]), _opening(table_id, 0), grpc.StatusCode.PERMISSION_DENIED),
            ((), _opening(table_id, 0), grpc.StatusCode.UNAUTHENTICATED),
            (auth(tokens[0]), _opening("nope", 0), grpc.StatusCode.NOT_FOUND),
            (auth(tokens[0]), _opening(table_id, 0, 10_000), grpc.StatusCode.OUT_OF_RANGE),
            (auth(tokens[0]), _opening(table_id, 9), grpc.StatusCode.INVALID_ARGUMENT),
            (auth(tokens[0]), _opening("x" * 65, 0), grpc.StatusCode.INVALID_ARGUMENT),
            (
                auth(tokens[0]),
                submission(table_id, 0, 0, 0),  # no `open` first
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
        ]
        for metadata, first, code in cases:
            call = stub.PlaySeat(metadata=metadata)
            await call.write(first)
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                while await call.read() is not grpc.aio.EOF:
                    pass
            assert exc.value.code() == code, (first, exc.value.details())
            if code == grpc.StatusCode.INVALID_ARGUMENT:  # the field at fault, in `open`
                field = exc.value.details().split(":")[0]
                assert field in ("open.seat", "open.table_id", "open"), field
        # A second `open`, a submission for another table: refused in-stream.
        call = await open_play(stub, table_id, 0, tokens[0])
        await call.read()  # its turn, or the events so far
        await call.write(pb.PlaySeatRequest(open=pb.PlaySeatOpen(table_id=table_id)))
        answer = await call.read()
        assert answer.refused.code == code_pb2.INVALID_ARGUMENT
        assert answer.refused.message.startswith("open: ")
        await call.write(submission("other", 0, 0, 0))
        assert (await call.read()).refused.message.startswith("table_id: ")
        call.cancel()

    run(body, tmp_path)


def test_bytes_that_are_no_request_are_invalid_argument_never_unknown(tmp_path: Path) -> None:
    """Garbage as the first message ends the call with INVALID_ARGUMENT (field `request`);
    on an open stream it is refused in-stream, and the stream goes on."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, channel: grpc.aio.Channel) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        raw = channel.stream_stream(
            "/tapis.v1.RefereeService/PlaySeat",
            request_serializer=lambda b: b,
            response_deserializer=pb.PlaySeatResponse.FromString,
        )
        garbage = b"\xff\xff\xff"
        call = raw(metadata=auth(tokens[0]))
        await call.write(garbage)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call.read()
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert exc.value.details().startswith("request: ")
        call = raw(metadata=auth(tokens[0]))
        await call.write(_opening(table_id, 0).SerializeToString())
        first = await call.read()
        await call.write(garbage)
        answer = await call.read()
        assert answer.refused.code == code_pb2.INVALID_ARGUMENT
        assert answer.refused.message.startswith("request: ")
        view = first.turn if first.HasField("turn") else None
        if view is not None:  # the stream goes on: a move is acknowledged
            move = submission(table_id, 0, view.action_index, view.legal_actions[0].action)
            await call.write(move.SerializeToString())
            assert (await call.read()).ack.action_index == view.action_index
        call.cancel()

    run(body, tmp_path)


def _opening(table_id: str, seat: int, start: int = 0) -> pb.PlaySeatRequest:
    return pb.PlaySeatRequest(
        open=pb.PlaySeatOpen(table_id=table_id, seat=seat, from_event_index=start)
    )


def _play_tasks() -> list[asyncio.Task[Any]]:
    return [
        t for t in asyncio.all_tasks() if "_SeatPlay" in getattr(t.get_coro(), "__qualname__", "")
    ]


def test_a_client_gone_mid_match_leaves_no_stream_counted_and_no_task(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, __: Any) -> None:
        assert server.servicer is not None
        counts = server.servicer._streams
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
        rng = random.Random(3)
        seen: dict[int, list[int]] = {s: [] for s in tokens}
        playing = [
            asyncio.create_task(play_out(calls[s], table_id, s, rng, seen[s])) for s in tokens
        ]
        while sum(map(len, seen.values())) < 40:  # a few moves made
            await asyncio.sleep(0.01)
        assert sum(counts._open.values()) == 4 and _play_tasks()
        for call in calls.values():
            call.cancel()
        await asyncio.gather(*playing, return_exceptions=True)
        for _ in range(500):  # until the referee has seen the cancellations
            if not counts._open and not _play_tasks():
                break
            await asyncio.sleep(0.01)
        assert counts._open == {}
        assert _play_tasks() == []
        # The table goes on: the seats play it to the end on new streams.
        calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
        await asyncio.gather(*(play_out(calls[s], table_id, s, rng, seen[s]) for s in tokens))

    errors = _Errors()
    log = logging.getLogger("tapis.referee")
    log.addHandler(errors)
    try:
        run(body, tmp_path)
    finally:
        log.removeHandler(errors)
    assert errors.records == []  # no call failed: a client going away is no error


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_clock_forfeit_reaches_the_stream(tmp_path: Path) -> None:
    clock = ManualTime()
    control = rpb.TimeControl(
        action_ms=2000, budget_ms=10_000, increment_ms=500, policy=rpb.TIMEOUT_POLICY_FORFEIT
    )

    async def main() -> None:
        async with (
            referee(tmp_path, time_source=clock) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            table_id, tokens = await new_table(
                stub, "napoleon", "", {"deals": 4}, 4, time_control=control
            )
            calls = {s: await open_play(stub, table_id, s, t) for s, t in tokens.items()}
            request = pb.GetViewRequest(table_id=table_id, seat=0)
            seat = (await stub.GetView(request, metadata=auth(tokens[0]))).view.to_act[0]
            turn = (await calls[seat].read()).turn  # the seat to act gets its turn, and waits
            assert turn.seat == seat and turn.legal_actions
            clock.advance(2000)
            for _ in range(20):
                await asyncio.sleep(0)
                await server.referee.idle()
            for call in calls.values():
                events: list[pb.TableEvent] = []
                while (message := await call.read()) is not grpc.aio.EOF:
                    events.extend(message.events)
                assert await call.code() == grpc.StatusCode.OK
                assert events[-1].HasField("match_ended")
                timeouts = [e.action_taken for e in events if e.action_taken.timeout]
                assert [a.seat for a in timeouts] == [turn.seat]
            got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
            outcome = decode_record(got.envelope.record).outcome
            assert outcome.rule == "CLOCK.FORFEIT" and outcome.resigned == turn.seat

    asyncio.run(main())


def test_a_message_past_the_size_limit_ends_the_call_resource_exhausted(tmp_path: Path) -> None:
    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        call = await open_play(stub, table_id, 0, tokens[0])
        await call.read()
        await call.write(submission("x" * 5000, 0, 0, 0))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            while await call.read() is not grpc.aio.EOF:
                pass
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(body, tmp_path, max_message_bytes=4096)


def test_play_seat_calls_that_never_open_count_against_the_bound(tmp_path: Path) -> None:
    """A PlaySeat call counts from its start, not from its `open`: a client holding calls
    that never send it has no more streams than the bound (it had any number)."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, _ = await new_table(stub, "hearts", "", {}, 4)
        idle = [stub.PlaySeat() for _ in range(2)]  # nothing written: never opened
        await asyncio.sleep(0.3)  # (each reached the referee, which waits for its `open`)
        watch = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await watch.read()
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in idle:
            call.cancel()
        await asyncio.sleep(0.3)
        again = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
        assert (await again.read()).event.index == 0  # room again once they went away
        again.cancel()

    run(body, tmp_path, max_streams_per_client=2)


def test_play_seat_streams_count_with_watch_table_streams(tmp_path: Path) -> None:
    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        watch = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
        await watch.read()  # open: its first event came
        call = await open_play(stub, table_id, 0, tokens[0])
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call.read()
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        watch.cancel()

    run(body, tmp_path, max_streams_per_client=1)


def test_a_stop_names_the_index_each_stream_resumes_from(tmp_path: Path) -> None:
    """As the referee stops, each PlaySeat stream ends UNAVAILABLE naming the event index to
    open it again from: the lowest its client has not received. It named the watch's own
    index, which the events an acknowledgement carries do not move: a client doing as told
    received events again (a C++ bot: told 300 when it held every event to 301)."""

    async def main() -> None:
        server = await create_server("127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = rpc.RefereeServiceStub(channel)
            table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
            rng = random.Random(5)
            seen: dict[int, list[int]] = {s: [] for s in tokens}
            acted = asyncio.Event()

            async def play(seat: int) -> str:
                call = await open_play(stub, table_id, seat, tokens[seat])
                try:
                    while True:
                        message = await call.read()
                        if message.WhichOneof("result") == "ack":
                            events, view = message.ack.events, message.ack.next_view
                            due = message.ack.HasField("next_view")
                            if view.action_index >= 40 or message.ack.action_index >= 40:
                                acted.set()
                        else:
                            events, view, due = (
                                message.events,
                                message.turn,
                                message.HasField("turn"),
                            )
                        seen[seat].extend(e.index for e in events)
                        if due and not acted.is_set():
                            choice = rng.choice(view.legal_actions).action
                            await call.write(submission(table_id, seat, view.action_index, choice))
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                    return exc.details() or ""
                raise AssertionError("the stream ended before the referee stopped")

            players = [asyncio.create_task(play(s)) for s in tokens]
            await asyncio.wait_for(acted.wait(), 60)
            await server.referee.idle()
            await server.stop(10.0)
            said = await asyncio.wait_for(asyncio.gather(*players), 30)
        for seat, details in zip(tokens, said, strict=True):
            index = int(details.split("from event index ")[1].split(",")[0])
            assert sorted(seen[seat]) == list(range(index)), (seat, details)

    asyncio.run(main())
