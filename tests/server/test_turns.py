"""One call per move, the referee's side: a seat's stream sends a `turn` (its view) when the
seat comes to act, once (it holds while other seats act at the same time, in the exchange),
also at the end of the backlog of a stream reopened mid-match; SubmitActionResponse.next_view
comes exactly when the seat must act again at once; ActionTaken.hand is always the seat's
cards on its stream, never a spectator's; spectators get no turn; a submission at an older
index in the exchange (several seats to act at once) is applied, where it would have been
stale."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.records.codec import decode_record
from tapis_cartes.referee.engine.actions import PASS
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc
from tests.server.util import auth, new_table, run

GAMES: list[tuple[str, str, dict[str, Any], int]] = [
    ("dame-de-pique", "", {"end_threshold": 30}, 4),
    ("napoleon", "", {"deals": 4}, 4),
    ("imperiale", "academie", {"target_fiches": 3}, 2),
    ("triomphe", "as-qui-pille", {"target": 5}, 4),
    ("triomphe", "equipe", {"target": 5}, 4),
]


def _watch(
    stub: rpc.RefereeServiceStub, table_id: str, seat: int | None, token: str = "", start: int = 0
) -> Any:
    request = pb.WatchTableRequest(table_id=table_id, from_event_index=start)
    if seat is None:
        return stub.WatchTable(request)
    request.seat = seat
    return stub.WatchTable(request, metadata=auth(token))


async def _view(stub: rpc.RefereeServiceStub, table_id: str, seat: int, token: str) -> pb.SeatView:
    reply = await stub.GetView(
        pb.GetViewRequest(table_id=table_id, seat=seat), metadata=auth(token)
    )
    return reply.view


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), GAMES)
def test_seats_play_from_their_turns_each_sent_once_spectators_get_none(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    """Each seat acts only on the turns of its stream (never GetView, never next_view): the
    match is played to its end with one submission per turn, none refused; every turn is the
    seat's view with legal actions; a seat gets exactly one turn per action it makes, at its
    index when it acts alone (in the exchange, at the index it came to act at); a
    spectator's stream has no turn and no cards in ActionTaken."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, game, ruleset, options, players)
        rng = random.Random(game)
        turns: dict[int, list[pb.SeatView]] = {s: [] for s in tokens}

        async def seat_loop(seat: int) -> None:
            async for message in _watch(stub, table_id, seat, tokens[seat]):
                if message.HasField("event"):
                    assert not message.HasField("turn")
                    if message.event.HasField("match_ended"):
                        return
                    continue
                view = message.turn
                turns[seat].append(view)
                assert view.seat == seat and seat in view.to_act and view.legal_actions
                submit = pb.SubmitActionRequest(
                    table_id=table_id,
                    seat=seat,
                    expected_action_index=view.action_index,
                    action=rng.choice(view.legal_actions).action,
                )
                await stub.SubmitAction(submit, metadata=auth(tokens[seat]))

        async def spectator() -> list[pb.WatchTableResponse]:
            got = []
            async for message in _watch(stub, table_id, None):
                got.append(message)
            return got

        seen, *_ = await asyncio.wait_for(
            asyncio.gather(spectator(), *(seat_loop(s) for s in tokens)), 120
        )
        assert not any(m.HasField("turn") for m in seen)
        taken = [m.event.action_taken for m in seen if m.event.HasField("action_taken")]
        assert taken and not any(a.hand for a in taken)

        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        record = decode_record(got.envelope.record)
        acted = [s for h in record.hands for s in h.seats]
        actions = [a for h in record.hands for a in h.actions]
        assert len(taken) == len(acted)
        for seat, views in turns.items():
            indexes = [v.action_index for v in views]
            assert indexes == sorted(set(indexes)), f"seat {seat}: a turn sent twice"
            alone = {v.action_index for v in views if list(v.to_act) == [seat]}
            mine = {i for i, s in enumerate(acted) if s == seat}
            assert len(views) == len(mine)
            # To act alone, the seat acted at the index of its turn; its other actions are
            # passes of the exchange (several seats to act, at the index the table was at).
            assert alone <= mine
            assert all(actions[i] & 7 == PASS for i in mine - alone)

    run(body, tmp_path)


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), GAMES)
def test_next_view_and_hand_after_every_action(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    """One driver, one move at a time: next_view is present exactly when the seat's view
    after the move lists legal actions, and then is that view; each seat's ActionTaken.hand
    (in its stream and its acknowledgements) is its cards after the action, as its view says
    while the hand goes on."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, game, ruleset, options, players)
        rng = random.Random(game)

        async def every_view() -> dict[int, pb.SeatView]:
            return {s: await _view(stub, table_id, s, t) for s, t in tokens.items()}

        after: list[dict[int, pb.SeatView]] = []  # per action: every seat's view after it
        nexts = 0
        views = await every_view()
        while views[0].status != pb.TABLE_STATUS_FINISHED:
            seat = next(s for s, v in views.items() if v.legal_actions)
            reply = await stub.SubmitAction(
                pb.SubmitActionRequest(
                    table_id=table_id,
                    seat=seat,
                    expected_action_index=views[seat].action_index,
                    action=rng.choice(views[seat].legal_actions).action,
                ),
                metadata=auth(tokens[seat]),
            )
            hand_number = views[seat].hand_number
            views = await every_view()
            after.append(views)
            mine = views[seat]
            assert reply.HasField("next_view") == bool(mine.legal_actions)
            if reply.HasField("next_view"):
                nexts += 1
                assert reply.next_view == mine
            if mine.hand_number == hand_number and mine.phase != "over":  # the hand goes on
                assert list(reply.events[0].action_taken.hand) == list(mine.hand)
        assert nexts > 0

        # Each seat's stream: ActionTaken.hand is the seat's cards after each action, while
        # the hand goes on (the view after it says so); every action of the match is there.
        for seat, token in tokens.items():
            hand_number, count = 0, 0
            async for message in _watch(stub, table_id, seat, token):
                event = message.event
                if event.HasField("hand_started"):
                    hand_number = event.hand_started.number
                elif event.HasField("action_taken"):
                    v = after[count][seat]
                    count += 1
                    if v.hand_number == hand_number and v.phase != "over":
                        assert list(event.action_taken.hand) == list(v.hand), (seat, count)
            assert count == len(after)

    run(body, tmp_path)


def test_turn_at_the_end_of_the_backlog_of_a_reopened_stream(tmp_path: Path) -> None:
    """A seat's stream reopened mid-match from any event index gets the events from there,
    then its turn (the view GetView gives) if it must act, once; a seat not to act gets none
    (its next message is the event of the move made after)."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "napoleon", "", {}, 4)
        rng = random.Random(3)
        for _ in range(9):  # the auction and a few cards
            views = {s: await _view(stub, table_id, s, t) for s, t in tokens.items()}
            seat = next(s for s, v in views.items() if v.legal_actions)
            await stub.SubmitAction(
                pb.SubmitActionRequest(
                    table_id=table_id,
                    seat=seat,
                    expected_action_index=views[seat].action_index,
                    action=rng.choice(views[seat].legal_actions).action,
                ),
                metadata=auth(tokens[seat]),
            )
        views = {s: await _view(stub, table_id, s, t) for s, t in tokens.items()}
        actor = next(s for s, v in views.items() if v.legal_actions)
        idle = (actor + 1) % 4
        end = views[actor].event_index
        for start in (0, end // 2, end):
            stream = _watch(stub, table_id, actor, tokens[actor], start)
            got = []
            async for message in stream:
                got.append(message)
                if message.HasField("turn"):
                    break
            stream.cancel()
            assert [m.event.index for m in got[:-1]] == list(range(start, end))
            assert got[-1].turn == views[actor]

        stream = _watch(stub, table_id, idle, tokens[idle], end // 2)
        backlog = [await stream.read() for _ in range(end - end // 2)]
        assert [m.event.index for m in backlog] == list(range(end // 2, end))
        move = rng.choice(views[actor].legal_actions).action
        await stub.SubmitAction(
            pb.SubmitActionRequest(
                table_id=table_id,
                seat=actor,
                expected_action_index=views[actor].action_index,
                action=move,
            ),
            metadata=auth(tokens[actor]),
        )
        following = await stream.read()
        assert following.HasField("event") and following.event.index == end
        assert following.event.action_taken.seat == actor
        stream.cancel()

    run(body, tmp_path)


def test_a_pass_at_an_older_index_in_the_exchange_is_applied(tmp_path: Path) -> None:
    """Dame de Pique's exchange: every seat is to act. A seat's pass chosen at index 0 after
    another seat passed is applied at index 1 (its choice could not depend on the other's);
    a seat that has passed already is still refused as stale."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        views = {s: await _view(stub, table_id, s, t) for s, t in tokens.items()}
        assert all(v.action_index == 0 and len(v.to_act) == 4 for v in views.values())

        def submit(seat: int, action: int, index: int = 0) -> Any:
            request = pb.SubmitActionRequest(
                table_id=table_id, seat=seat, expected_action_index=index, action=action
            )
            return stub.SubmitAction(request, metadata=auth(tokens[seat]))

        first = await submit(0, views[0].legal_actions[0].action)
        second = await submit(1, views[1].legal_actions[0].action)
        assert (first.action_index, second.action_index) == (0, 1)
        assert second.events[0].action_taken.action_index == 1
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await submit(0, views[0].legal_actions[1].action)
        assert exc.value.code() == grpc.StatusCode.ABORTED
        table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert table.action_index == 2

    run(body, tmp_path)


def test_a_stream_of_turns_only_carries_the_turns_and_the_end(tmp_path: Path) -> None:
    """WatchTableRequest.only_turns: the seat's turns and the match's end, no other event;
    the match is played from those turns alone, one submission each."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "napoleon", "", {"deals": 2}, 4)
        rng = random.Random(5)
        kinds: dict[int, list[str]] = {s: [] for s in tokens}

        async def seat_loop(seat: int) -> None:
            request = pb.WatchTableRequest(table_id=table_id, seat=seat, only_turns=True)
            done = -1  # the last action index this seat acted at
            async for message in stub.WatchTable(request, metadata=auth(tokens[seat])):
                if message.HasField("event"):
                    kinds[seat].append(message.event.WhichOneof("event") or "")
                    continue
                kinds[seat].append("turn")
                # (a turn at an index the seat acted at by a next_view is stale: skipped)
                done = await play_from(stub, table_id, seat, tokens[seat], message.turn, done, rng)

        await asyncio.wait_for(asyncio.gather(*(seat_loop(s) for s in tokens)), 120)
        for seat, seen in kinds.items():
            assert seen[-1] == "match_ended" and set(seen[:-1]) == {"turn"}, (seat, seen)
        # A spectator asking for turns only gets every event: there are no turns to give it.
        spectator = stub.WatchTable(pb.WatchTableRequest(table_id=table_id, only_turns=True))
        events = [m.event.WhichOneof("event") async for m in spectator]
        assert "action_taken" in events and events[-1] == "match_ended"

    run(body, tmp_path)


async def play_from(
    stub: rpc.RefereeServiceStub,
    table_id: str,
    seat: int,
    token: str,
    view: pb.SeatView | None,
    done: int,
    rng: random.Random,
) -> int:
    """A random legal action for each view the seat must act on at an index after `done`,
    following each reply's next_view; the last index the seat acted at."""
    while view is not None and view.legal_actions and view.action_index > done:
        done = view.action_index
        submit = pb.SubmitActionRequest(
            table_id=table_id,
            seat=seat,
            expected_action_index=view.action_index,
            action=rng.choice(view.legal_actions).action,
        )
        reply = await stub.SubmitAction(submit, metadata=auth(token))
        view = reply.next_view if reply.HasField("next_view") else None
    return done


@pytest.mark.parametrize("only_turns", [False, True])
def test_a_batched_stream_carries_every_event_once_in_order_with_the_turns(
    tmp_path: Path, only_turns: bool
) -> None:
    """WatchTableRequest.batch_events: each message carries the events since the last one, a
    turn in the message of the events before it; the match is played from those turns, and
    the events, put end to end, are those of the stream one event per message. With
    only_turns the events are held back until the seat's turn: every message has a turn but
    the last, which ends the match."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 30}, 4)
        rng = random.Random(7)
        seen: dict[int, list[bytes]] = {s: [] for s in tokens}
        turns: dict[int, list[bool]] = {s: [] for s in tokens}

        async def seat_loop(seat: int) -> None:
            request = pb.WatchTableRequest(
                table_id=table_id, seat=seat, only_turns=only_turns, batch_events=True
            )
            done = -1
            async for message in stub.WatchTable(request, metadata=auth(tokens[seat])):
                assert not message.HasField("event")
                assert message.events or message.HasField("turn")
                seen[seat].extend(e.SerializeToString() for e in message.events)
                turns[seat].append(message.HasField("turn"))
                view: pb.SeatView | None = message.turn if message.HasField("turn") else None
                if view is not None:
                    # The turn comes after the events before it: none is missing.
                    assert view.event_index == len(seen[seat])
                done = await play_from(stub, table_id, seat, tokens[seat], view, done, rng)

        await asyncio.wait_for(asyncio.gather(*(seat_loop(s) for s in tokens)), 120)
        for seat, token in tokens.items():
            one_by_one = [
                m.event.SerializeToString() async for m in _watch(stub, table_id, seat, token)
            ]
            assert seen[seat] == one_by_one, seat
            assert any(turns[seat]), seat
            if only_turns:
                assert all(turns[seat][:-1]) and not turns[seat][-1], (seat, turns[seat])

    run(body, tmp_path)


@pytest.mark.parametrize("game", ["napoleon", "triomphe", "imperiale", "dame-de-pique"])
def test_a_seat_whose_stream_opened_while_the_table_waited_gets_its_turn(
    tmp_path: Path, game: str
) -> None:
    """A seat's legal actions were kept for the action index they were asked at: asked by its
    stream while the table waited for players (none), they stayed none once the table started
    at that same index 0. The seat to act then had no turn and no legal action, and the
    table waited for ever: four `tapis bot --join` at a Napoléon table hung about one time
    in two (the Dame de Pique exchange, every seat acting, hid it)."""

    async def body(_: Any, stub: rpc.RefereeServiceStub, __: Any) -> None:
        players = 2 if game in ("triomphe", "imperiale") else 4
        seats = [pb.SeatRequest(name=f"P{i}", open=True) for i in range(players)]
        table_id = (await stub.CreateTable(pb.CreateTableRequest(game=game, seats=seats))).table_id
        tokens: dict[int, str] = {}
        streams = []
        for seat in range(players):
            joined = await stub.JoinTable(pb.JoinTableRequest(table_id=table_id, seat=seat))
            tokens[seat] = joined.token.token
            if seat < players - 1:  # its stream open while the table waits (a bot's)
                stream = _watch(stub, table_id, seat, tokens[seat])
                first = await asyncio.wait_for(stream.read(), 10)  # (a seat's taking)
                assert first.event.HasField("seat_taken")
                streams.append((seat, stream))
        to_act = list((await _view(stub, table_id, 0, tokens[0])).to_act)
        assert to_act
        for seat in to_act:
            view = await _view(stub, table_id, seat, tokens[seat])
            assert view.legal_actions, (seat, view)

        async def first_turn(stream: Any) -> Any:
            while True:
                message = await stream.read()
                if message is grpc.aio.EOF:
                    raise AssertionError("the watch ended without a turn")
                if message.HasField("turn"):
                    return message

        waited = [(seat, stream) for seat, stream in streams if seat in to_act]
        for seat, stream in waited:
            turn = await asyncio.wait_for(first_turn(stream), 10)
            assert turn.turn.legal_actions, (seat, turn)
        for _, stream in streams:
            stream.cancel()

    run(body, tmp_path)
