"""The async SDK (clients/sdk.py) against a real referee on a free port."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.clients.bots import RandomBot, play_seat
from tapis_cartes.clients.sdk import (
    ActionRefused,
    RefereeClient,
    RefereeError,
    SeatHandle,
    StaleAction,
    _Streak,
    is_finished,
    retries_for,
)
from tapis_cartes.referee.engine.cards import card_str, parse_card
from tapis_cartes.v1 import referee_pb2 as pb
from tests.clients.util import referee, referee_and_client, verify

SEATS = [("Ann", False), ("Bob", False), ("Cid", False), ("Dee", True)]
SHORT = {"end_threshold": 20}


async def _pass_all(handles: list[SeatHandle]) -> None:
    for h in handles:
        view = await h.view()
        assert view.phase == "pass" and h.seat in view.to_act
        await h.act(view.legal_actions[0].action)


async def _finish(handles: list[SeatHandle], seed: int = 0) -> None:
    await asyncio.gather(*(play_seat(h, RandomBot(seed + h.seat)) for h in handles))


def test_create_join_view_act_record(tmp_path: Path) -> None:
    async def main() -> None:
        async with referee_and_client(tmp_path) as (_, client):
            games = {g.name: g for g in await client.list_games()}
            assert "hearts" in games["dame-de-pique"].aliases

            table = await client.create_table("hearts", options=SHORT, seats=SEATS)
            assert set(table.tokens) == {0, 1, 2} and len(table.commitment.seed_sha256) == 32
            ann = client.seat(table.table_id, 0, table.tokens[0])
            waiting = await ann.view()
            assert waiting.status == pb.TABLE_STATUS_WAITING and not waiting.legal_actions

            dee = await client.join(table.table_id, name="Dee")
            assert dee.seat == 3
            handles = [client.seat(table.table_id, i, table.tokens[i]) for i in range(3)] + [dee]
            views = [await h.view() for h in handles]
            assert all(v.status == pb.TABLE_STATUS_PLAYING and len(v.hand) == 13 for v in views)
            assert len({c for v in views for c in v.hand}) == 52
            spectator = await client.spectate(table.table_id)
            assert not spectator.hand and not spectator.legal_actions

            # Tokens: none, or another seat's, is refused.
            with pytest.raises(RefereeError) as denied:
                await client.seat(table.table_id, 1, table.tokens[0]).view()
            assert denied.value.status == grpc.StatusCode.PERMISSION_DENIED

            with pytest.raises(RefereeError) as not_ready:
                await ann.record()
            assert not_ready.value.status == grpc.StatusCode.FAILED_PRECONDITION

            await _pass_all(handles)
            view = await ann.view()
            leader = handles[view.to_act[0]]
            lead = await leader.view()
            assert [c.text for c in lead.legal_actions] == ["play 2C"]

            # An illegal card: the refusal carries the rule, the code and the legal actions.
            wrong = next(c for c in lead.hand if c != parse_card("2C"))
            with pytest.raises(ActionRefused) as refused:
                await leader.act(wrong << 3)
            assert refused.value.rule == "DP.FIRST-TRICK"
            assert refused.value.code == "lead-two-of-clubs"
            assert "2C" in refused.value.reason
            assert [c.text for c in refused.value.legal_actions] == ["play 2C"]
            assert refused.value.status == grpc.StatusCode.FAILED_PRECONDITION

            # A stale index under an explicit expected_index: ABORTED, with the table's index.
            with pytest.raises(StaleAction) as stale:
                await leader.act(lead.legal_actions[0].action, expected_index=lead.action_index - 1)
            assert stale.value.action_index == lead.action_index

            resp = await leader.act(lead.legal_actions[0].action)
            assert resp.action_index == lead.action_index
            assert resp.events[0].action_taken.text == "play 2C"
            after = await leader.view()
            assert parse_card("2C") not in after.hand
            assert [card_str(p.card) for p in after.trick] == ["2C"]

            await _finish(handles)
            final = await dee.view()
            assert is_finished(final) and final.winners
            record = await dee.record()
            assert record.record_id and len(record.public_key) == 32
            result = verify(record)
            assert result.ok, result.error
            assert result.record_id == record.record_id

    asyncio.run(main())


async def _finished_table(client: RefereeClient) -> tuple[str, list[SeatHandle]]:
    table = await client.create_table("hearts", options=SHORT, seats=[(n, False) for n in "ABCD"])
    handles = [client.seat(table.table_id, i, t) for i, t in sorted(table.tokens.items())]
    await _finish(handles, seed=7)
    return table.table_id, handles


def _keys(events: list[pb.TableEvent]) -> list[bytes]:
    return [e.SerializeToString(deterministic=True) for e in events]


def test_watch_resumes_after_cancel_without_gap_or_duplicate(tmp_path: Path) -> None:
    async def main() -> None:
        async with referee_and_client(tmp_path) as (_, client):
            table_id, handles = await _finished_table(client)
            seat = handles[2]
            full = [e async for e in seat.watch()]
            assert [e.index for e in full] == list(range(len(full)))
            assert full[-1].HasField("match_ended")

            collected: list[pb.TableEvent] = []
            for stop in (len(full) // 3, 2 * len(full) // 3, len(full)):
                start = collected[-1].index + 1 if collected else 0
                stream = seat.watch(from_index=start)
                async for event in stream:  # cancelled mid-way when the loop breaks
                    collected.append(event)
                    if len(collected) == stop:
                        break
                await stream.aclose()
            assert _keys(collected) == _keys(full)

            # A spectator sees the same indexes without anybody's cards.
            public = [e async for e in client.watch(table_id)]
            assert [e.index for e in public] == [e.index for e in full]
            dealt = [e.hand_started for e in public if e.HasField("hand_started")]
            assert dealt and all(not h.hand for h in dealt)

    asyncio.run(main())


def test_watch_resumes_by_itself_when_the_referee_restarts(tmp_path: Path) -> None:
    """The stream drops mid-match (the referee stops and comes back on the same port, the
    tables restored from its store): the SDK reconnects from the last index + 1."""

    async def main() -> None:
        async with referee(tmp_path) as first:
            port = first.port
            client = RefereeClient(f"127.0.0.1:{port}", retries=30)
            async with client:
                table = await client.create_table(
                    "hearts", options=SHORT, seats=[(n, False) for n in "ABCD"]
                )
                handles = [client.seat(table.table_id, i, t) for i, t in table.tokens.items()]
                watched: list[pb.TableEvent] = []

                async def watch() -> None:
                    async for event in handles[1].watch():
                        watched.append(event)

                watcher = asyncio.create_task(watch())
                await _pass_all(handles)
                known = (await handles[0].view()).event_index
                while len(watched) < known:
                    await asyncio.sleep(0.01)
                before = len(watched)
                await first.stop(0)
                async with referee(tmp_path, port):
                    await _finish(handles, seed=3)
                    await asyncio.wait_for(watcher, 30)
                    assert len(watched) > before
                    full = [e async for e in handles[1].watch()]
                    assert _keys(watched) == _keys(full)
                    assert verify(await handles[0].record()).ok

    asyncio.run(main())


def test_turns_give_each_event_once_in_order_and_each_turn_once(tmp_path: Path) -> None:
    """`SeatHandle.turns`: the events in order, each once, also those of a next_view given
    ahead of the stream; each turn once, at increasing action indexes, none stale (every
    submission on a turn is acknowledged: exactly one SubmitAction per move)."""

    async def main() -> None:
        async with referee_and_client(tmp_path) as (_, client):
            table = await client.create_table(
                "hearts", options={"end_threshold": 40}, seats=[(n, False) for n in "ABCD"]
            )
            handles = [client.seat(table.table_id, i, t) for i, t in table.tokens.items()]
            nexts = 0

            async def seat(h: SeatHandle) -> tuple[list[int], list[int]]:
                nonlocal nexts
                events: list[int] = []
                turns: list[int] = []
                expected: pb.SeatView | None = None  # the next_view of the last move
                bot = RandomBot(h.seat)
                async for message in h.turns():
                    if message.HasField("event"):
                        events.append(message.event.index)
                        continue
                    view = message.turn
                    if expected is not None:  # the next turn given is that next_view
                        assert view == expected
                        nexts += 1
                    turns.append(view.action_index)
                    ack = await h.act(bot.choose(view), expected_index=view.action_index)
                    expected = ack.next_view if ack.HasField("next_view") else None
                return events, turns

            results = await asyncio.gather(*(seat(h) for h in handles))
            for events, turns in results:
                assert events == list(range(len(events)))
                assert turns == sorted(set(turns))
            moves = sum(len(turns) for _, turns in results)
            assert client.calls["SubmitAction"] == moves
            assert client.calls["WatchTable"] == 4 and "GetView" not in client.calls
            assert nexts > 0

    asyncio.run(main())


class _Signalling(RandomBot):
    """A random bot that says when it has chosen `after` times."""

    def __init__(self, seed: int, after: int, reached: asyncio.Event) -> None:
        super().__init__(seed)
        self.after = after
        self.reached = reached
        self.chosen = 0

    def choose(self, view: pb.SeatView) -> int:
        self.chosen += 1
        if self.chosen == self.after:
            self.reached.set()
        return super().choose(view)


async def _stopped_mid_match(
    client: RefereeClient, server: Any, one_call: bool
) -> tuple[list[SeatHandle], asyncio.Future[list[Any]]]:
    """Four random bots on a new table of `client`, on PlaySeat streams (`one_call`) or
    WatchTable streams, until one has chosen 8 times; then `server` is stopped (no grace).
    The seats' handles, and the bots' results (an error as its result)."""
    table = await client.create_table("hearts", options=SHORT, seats=[(n, False) for n in "ABCD"])
    handles = [client.seat(table.table_id, i, t) for i, t in table.tokens.items()]
    reached = asyncio.Event()
    bots = [_Signalling(i, 8, reached) for i in range(4)]
    playing = asyncio.gather(
        *(play_seat(h, b, one_call) for h, b in zip(handles, bots, strict=True)),
        return_exceptions=True,
    )
    await reached.wait()
    await server.stop(0)
    return handles, playing


@pytest.mark.parametrize("one_call", [True, False])
def test_bots_play_on_through_a_restart_of_the_referee(tmp_path: Path, one_call: bool) -> None:
    """The bots' streams drop mid-match (the referee stops and comes back on the same port):
    each is reopened from the next event index, its turn sent again at the end of the
    backlog, and the match is played to its end with a move per turn; on PlaySeat streams
    (`one_call`) or WatchTable streams."""

    async def main() -> None:
        async with referee(tmp_path) as first:
            port = first.port
            client = RefereeClient(f"127.0.0.1:{port}", retries=30)
            async with client:
                handles, playing = await _stopped_mid_match(client, first, one_call)
                async with referee(tmp_path, port):
                    results = await asyncio.wait_for(playing, 60)
                    record = await handles[0].record()
                    assert verify(record).ok
                    assert {r.record_id for r in results} == {record.record_id}
                    method = "PlaySeat" if one_call else "WatchTable"
                    assert client.calls[method] > 4  # the streams were reopened

    asyncio.run(main())


@pytest.mark.parametrize("one_call", [True, False])
def test_a_referee_gone_for_good_ends_the_bots_with_the_tries_said(
    tmp_path: Path, one_call: bool
) -> None:
    """The referee stops mid-match and does not come back: each bot's stream is tried again
    `retries` times, then the bot ends with UNAVAILABLE, its message saying how many tries
    over how long (a referee down, not a fault of the bot); so does a unary call."""

    async def main() -> None:
        async with referee(tmp_path) as server:
            client = RefereeClient(f"127.0.0.1:{server.port}", retries=3, backoff=0.05)
            async with client:
                _, playing = await _stopped_mid_match(client, server, one_call)
                ended = await asyncio.wait_for(playing, 60)
                for error in ended:
                    assert isinstance(error, RefereeError), error
                    assert error.status == grpc.StatusCode.UNAVAILABLE, error
                    assert re.search(r"\(the last of 4 tries over \d+\.\d s\)$", error.message), (
                        error
                    )
                with pytest.raises(RefereeError) as unary:
                    await client.list_games()
                assert unary.value.status == grpc.StatusCode.UNAVAILABLE
                assert re.search(r"\(the last of 4 tries over \d+\.\d s\)$", unary.value.message)

    asyncio.run(main())


def test_watch_gets_match_ended_when_the_stream_ends_before_it(tmp_path: Path) -> None:
    """The referee stores the record (envelope set) before it adds the match_ended event; a
    stream opened in between ends without it. The SDK reopens it and gets the event."""

    async def main() -> None:
        async with referee_and_client(tmp_path) as (server, client):
            storing = asyncio.Event()
            finish = server.store.finish

            async def slow_finish(table_id: str, envelope: bytes, record_id: str) -> None:
                storing.set()
                await asyncio.sleep(0.2)
                await finish(table_id, envelope, record_id)

            server.store.finish = slow_finish  # type: ignore[method-assign]
            table = await client.create_table(
                "hearts", options=SHORT, seats=[(n, False) for n in "ABCD"]
            )
            handles = [client.seat(table.table_id, i, t) for i, t in table.tokens.items()]
            playing = asyncio.create_task(_finish(handles, seed=5))
            await storing.wait()
            events = [e async for e in client.watch(table.table_id)]
            assert events[-1].HasField("match_ended")
            assert [e.index for e in events] == list(range(len(events)))
            await playing

    asyncio.run(main())


class _LoseFirstReplies(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """The first reply of each of these methods is lost after the referee acted on it."""

    def __init__(self, methods: set[str]) -> None:
        self.methods = methods
        self.lost: list[str] = []

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        await call  # the referee did it
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        name = method.rsplit("/", 1)[-1]
        if name in self.methods and name not in self.lost:
            self.lost.append(name)
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "lost"
            )
        return call


def test_create_and_join_are_retried_after_a_lost_reply_without_doing_them_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lose = _LoseFirstReplies({"CreateTable", "JoinTable"})
    channel = grpc.aio.insecure_channel

    def with_loss(address: str, **kwargs: Any) -> grpc.aio.Channel:
        return channel(address, interceptors=[lose], **kwargs)

    async def main() -> None:
        async with referee(tmp_path) as server:
            monkeypatch.setattr(grpc.aio, "insecure_channel", with_loss)
            async with RefereeClient(f"127.0.0.1:{server.port}") as client:
                table = await client.create_table("hearts", options=SHORT, seats=SEATS)
                dee = await client.join(table.table_id, name="Dee")
            assert lose.lost == ["CreateTable", "JoinTable"]  # each reply was lost once
            assert list(server.referee.tables) == [table.table_id]  # one table, not two
            assert dee.seat == 3
            monkeypatch.setattr(grpc.aio, "insecure_channel", channel)
            async with RefereeClient(f"127.0.0.1:{server.port}") as client:
                handles = [client.seat(table.table_id, i, table.tokens[i]) for i in range(3)]
                handles.append(client.seat(table.table_id, 3, dee.token))
                views = [await h.view() for h in handles]  # every token holds
                assert [v.seat for v in views] == [0, 1, 2, 3]

    asyncio.run(main())


def test_arguments_of_the_wrong_kind_are_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """`act(None)` sent action 0 (protobuf takes None for the default): a card, played if the
    seat held it; other arguments failed inside protobuf, unnamed."""
    from tapis_cartes.referee.errors import RulesError

    async def main() -> None:
        async with referee_and_client(tmp_path) as (_, client):
            table = await client.create_table("hearts", options=SHORT, seats=SEATS)
            dee = await client.join(table.table_id, name="Dee")
            handles = [client.seat(table.table_id, i, table.tokens[i]) for i in range(3)] + [dee]
            view = await handles[0].view()
            for action, index, named in [
                (None, view.action_index, "action is None (NoneType), not an int"),
                (-1, view.action_index, "action -1 is out of 0.."),
                ("play QS", view.action_index, "action is 'play QS' (str), not an int"),
                (True, view.action_index, "action is True (bool), not an int"),
                (view.legal_actions[0].action, -1, "expected_index -1 is out of 0.."),
                (2**70, None, "action 1180591620717411303424 is out of 0.."),
            ]:
                with pytest.raises(RefereeError) as caught:
                    await handles[0].act(action, expected_index=index)  # type: ignore[arg-type]
                assert caught.value.status == grpc.StatusCode.INVALID_ARGUMENT
                assert named in str(caught.value) and "nothing was sent" in str(caught.value)
            assert (await handles[0].view()).action_index == view.action_index  # nothing done
            for bad in [
                lambda: client.seat(table.table_id, -1, table.tokens[0]),
                lambda: client.seat(table.table_id, 0, None),
                lambda: client.watch(table.table_id, from_index=-5),
                lambda: handles[0].play(from_index=None),
            ]:
                with pytest.raises(RefereeError, match="nothing was sent"):
                    bad()  # type: ignore[no-untyped-call]
            for options in [[("end_threshold", 20)], {"end_threshold": {"a": 1}}, {"x": None}]:
                with pytest.raises(RulesError):
                    await client.create_table("hearts", options=options)  # type: ignore[arg-type]
            with pytest.raises(RefereeError, match=r"seats\[0\] is 'A', not a \(name, open\)"):
                await client.create_table("hearts", seats="ABCD")  # type: ignore[arg-type]
            with pytest.raises(RefereeError, match=r"seats\[0\]'s name is 1 \(int\), not text"):
                await client.create_table("hearts", seats=[(1, False)] * 4)  # type: ignore[list-item]

    asyncio.run(main())


def test_a_client_closed_under_its_calls_ends_them_with_a_referee_error(tmp_path: Path) -> None:
    """The tasks iterating a watch, or waiting for a turn, raised asyncio.CancelledError
    (gRPC's, for calls the closed channel cancelled) though nobody cancelled them."""

    async def main() -> None:
        async with referee(tmp_path) as server:
            client = RefereeClient(f"127.0.0.1:{server.port}")
            await client.__aenter__()
            table = await client.create_table("hearts", options=SHORT, seats=SEATS)
            seen: list[pb.TableEvent] = []

            async def watch() -> None:
                async for event in client.watch(table.table_id):
                    seen.append(event)

            async def turns() -> None:
                async for _ in client.seat(table.table_id, 0, table.tokens[0]).turns():
                    pass

            tasks = [asyncio.create_task(watch()), asyncio.create_task(turns())]
            while not seen:
                await asyncio.sleep(0.01)
            await client.close()
            for task in tasks:
                with pytest.raises(RefereeError) as caught:
                    await task
                assert caught.value.status == grpc.StatusCode.CANCELLED
                assert "the client was closed" in str(caught.value)

    asyncio.run(main())


def test_the_retries_for_a_patience_are_the_fewest_whose_pauses_last_it() -> None:
    """`retries_for(seconds)`: the pauses of that many retries, as a client makes them, add
    up to `seconds` at least, and those of one fewer to less; a client of that many retries
    in a row keeps pausing its most (its pause once overflowed a float past 1,024)."""
    pauses: list[float] = []
    for seconds in (0.01, 0.05, 0.06, 3.15, 7.2, 120.0, 86400.0):
        n = retries_for(seconds)
        streak, pauses = _Streak(0.05, 2.0), []
        for _ in range(n):
            streak.failed()
            pauses.append(streak.delay())
        assert sum(pauses) >= seconds > sum(pauses[:-1]), (seconds, n)
    assert len(pauses) > 40_000 and pauses[-1] == 2.0
    assert retries_for(7.2) == 9  # the SDK's default of 8 lasts 7.15 s
    with pytest.raises(ValueError, match="patience is 0"):
        retries_for(0)
