"""Bots: whole matches over gRPC whose signed records verify, the heuristic bots' rules of
thumb on hand-made views, and heuristic against random measured in-process."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.clients.arena import play_local
from tapis_cartes.clients.bots import Bot, HeuristicBot, RandomBot, SeatResult, play_seat
from tapis_cartes.clients.sdk import RefereeClient, RefereeError
from tapis_cartes.records.codec import decode_record
from tapis_cartes.referee.engine import GAMES
from tapis_cartes.referee.engine.actions import BID, PLAY, encode, pass_action
from tapis_cartes.referee.engine.cards import mask_of, parse_card
from tapis_cartes.referee.server.service import add_facts
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tests.clients.util import referee_and_client, verify
from tests.server.util import Server

ROOT = Path(__file__).resolve().parents[2]


# --- whole matches over gRPC --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("game", "options"), [("dame-de-pique", {"end_threshold": 40}), ("napoleon", {})]
)
def test_four_bots_play_a_match_over_grpc(
    tmp_path: Path, game: str, options: dict[str, int]
) -> None:
    async def main() -> None:
        async with referee_and_client(tmp_path) as (_, client):
            seats = [(f"bot {i}", False) for i in range(4)]
            table = await client.create_table(game, options=options, seats=seats)
            handles = [client.seat(table.table_id, i, table.tokens[i]) for i in range(4)]
            bots: list[Bot] = [HeuristicBot(game), RandomBot(1), HeuristicBot(game), RandomBot(3)]
            results: list[SeatResult] = await asyncio.gather(
                *(play_seat(h, b) for h, b in zip(handles, bots, strict=True))
            )
            record = await handles[0].record()
            assert {r.record_id for r in results} == {record.record_id}
            outcome = verify(record)
            assert outcome.ok, outcome.error
            rec = decode_record(record.envelope.record)
            assert rec.rules.game == game
            seats_of_actions = [s for h in rec.hands for s in h.seats]
            for r in results:
                assert seats_of_actions.count(r.seat) == r.actions
            assert all(list(rec.outcome.winners) == list(r.winners) for r in results)
            assert all(len(r.scores) == 4 for r in results)

    asyncio.run(main())


# Every game and ruleset, with matches long enough that the calls made once per match (the
# table, a stream per seat) weigh little beside the moves.
LONG_MATCHES = [
    ("dame-de-pique", "", {"end_threshold": 60}),
    ("napoleon", "", {"deals": 12}),
    ("imperiale", "academie", {"target_fiches": 10}),
    ("imperiale", "moderne", {"target_fiches": 10}),
    ("triomphe", "individuelle", {"target": 10}),
    ("triomphe", "equipe", {"target": 10}),
    ("triomphe", "as-qui-pille", {"target": 10}),
]


@pytest.mark.parametrize(
    ("game", "ruleset", "options", "one_call"),
    [(*m, True) for m in LONG_MATCHES] + [(*LONG_MATCHES[0], False), (*LONG_MATCHES[1], False)],
)
def test_sdk_bots_make_one_call_per_move(
    tmp_path: Path, game: str, ruleset: str, options: dict[str, int], one_call: bool
) -> None:
    """The bots play through their seats' streams: every call the SDK makes (CreateTable,
    one PlaySeat per seat, or one WatchTable per seat and SubmitAction, and any GetView or
    other call) is counted, and a whole match takes at most 1.05 calls per move (over
    PlaySeat, one call per seat)."""

    async def main() -> None:
        async with referee_and_client(tmp_path) as (_, client):
            players = 2 if game == "imperiale" else 4
            seats = [(f"bot {i}", False) for i in range(players)]
            table = await client.create_table(game, ruleset, options, seats)
            handles = [client.seat(table.table_id, i, table.tokens[i]) for i in range(players)]
            bots = [RandomBot(i) if i % 2 else HeuristicBot(game, ruleset) for i in range(players)]
            results = await asyncio.gather(
                *(play_seat(h, b, one_call) for h, b in zip(handles, bots, strict=True))
            )
            calls = dict(client.calls)
            moves = sum(r.actions for r in results)
            record = decode_record((await client.record(table.table_id)).envelope.record)
            assert moves == sum(len(h.actions) for h in record.hands)
            assert calls["CreateTable"] == 1
            if one_call:
                assert calls["PlaySeat"] == players and "SubmitAction" not in calls
                assert "WatchTable" not in calls
            else:
                assert calls["WatchTable"] == players and "PlaySeat" not in calls
                assert calls["SubmitAction"] >= moves
            made = sum(calls.values()) - 1  # the GetRecord of this check is not the bots'
            assert made / moves <= 1.05, (calls, moves)

    asyncio.run(main())


@pytest.mark.parametrize("name", ["Robot", None])
def test_tapis_bot_joins_a_table_and_plays_it_to_the_end(tmp_path: Path, name: str | None) -> None:
    """Without --name, the seat keeps the name its table gave it (it was "heuristic bot" for
    every bot, four players of one name)."""
    want = name or "Dee"
    given = ["--name", name] if name else []

    async def main() -> None:
        async with referee_and_client(tmp_path) as (server, client):
            seats = [("Ann", False), ("Bob", False), ("Cid", False), ("Dee", True)]
            table = await client.create_table("hearts", options={"end_threshold": 20}, seats=seats)
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tapis_cartes.clients.cli", "bot",
                "--address", f"127.0.0.1:{server.port}", "--table", table.table_id,
                "--join", *given, "--kind", "random", "--seed", "5", "--json",
                cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            handles = [client.seat(table.table_id, i, table.tokens[i]) for i in range(3)]
            results = await asyncio.gather(*(play_seat(h, HeuristicBot("hearts")) for h in handles))
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, err.decode()
            got = json.loads(out.decode())
            assert got["table_id"] == table.table_id and got["seat"] == 3
            assert got["name"] == want and got["kind"] == "random"
            assert got["record_id"] == results[0].record_id and got["actions"] > 0
            assert set(got["scores"]) == {"Ann", "Bob", "Cid", want}
            assert set(got["winners"]) <= set(got["scores"]) and got["winners"]
            assert got["won"] == (want in got["winners"])
            info = await client.table(table.table_id)
            assert info.seats[3].name == want

    asyncio.run(main())


# --- rules of thumb, on hand-made views ---------------------------------------------------------


def _cards(text: str) -> list[int]:
    return [parse_card(c) for c in text.split()]


def _view(
    hand: str,
    legal: list[int],
    phase: str = "play",
    trick: str = "",
    seat: int = 0,
    facts: dict[str, object] | None = None,
    players: int = 4,
    trump: int | None = None,
) -> pb.SeatView:
    played = [
        pb.PlayedCard(seat=(seat - len(trick.split()) + k) % players, card=c)
        for k, c in enumerate(_cards(trick))
    ]
    view = pb.SeatView(
        seat=seat,
        phase=phase,
        hand=_cards(hand),
        trick=played,
        to_act=[seat],
        legal_actions=[pb.ActionChoice(action=a, text=str(a)) for a in legal],
        scores=[rpb.Score() for _ in range(players)],
    )
    add_facts(view, facts or {})  # as the referee gives them: text and typed
    if trump is not None:
        view.trump = trump
    return view


def _plays(cards: str) -> list[int]:
    return [encode(PLAY, c) for c in _cards(cards)]


def test_dame_de_pique_heuristics() -> None:
    bot = HeuristicBot("hearts")
    # Pass the queen of spades, the ace of spades and the ace of hearts.
    hand = "QS AS 3S AH 2H 5D 6D 7D 8D 2C 3C 4C 5C"
    passes = [pass_action(mask_of(_cards("QS AS AH")))]
    assert bot.choose(_view(hand, [*passes, pass_action(7)], phase="pass")) == passes[0]
    # Void in the suit led: dump the queen of spades.
    facts: dict[str, object] = {"points_taken": (0, 0, 0, 0)}
    view = _view("QS 4H 9D", _plays("QS 4H 9D"), trick="5C KC", facts=facts)
    assert bot.choose(view) == _plays("QS")[0]
    # Follow under the winning card, as high as possible.
    view = _view("2D 9D KD", _plays("2D 9D KD"), trick="10D", facts=facts)
    assert bot.choose(view) == _plays("9D")[0]
    # Last to a trick without points: take it with the highest card.
    view = _view("2D 9D KD", _plays("2D 9D KD"), trick="10D 3D 4D", facts=facts)
    assert bot.choose(view) == _plays("KD")[0]


def test_napoleon_heuristics() -> None:
    bot = HeuristicBot("napoleon")
    bids = [encode(BID, b) for b in range(6)]
    strong = _view("AS KS QS JS AH", bids, phase="bid")
    assert bot.choose(strong) == encode(BID, 5)  # nap
    weak = _view("2S 5H 9D JC 3C", bids, phase="bid")
    assert bot.choose(weak) == encode(BID, 0)  # pass
    low = _view("2S 3H 4D 5C 7C", bids, phase="bid")
    assert bot.choose(low) == encode(BID, 3)  # misere
    # The declarer's first lead names trump: the top of the best suit.
    lead = _view("AS KS QS 2H 3D", _plays("AS KS QS 2H 3D"), facts={"declarer": 0})
    assert bot.choose(lead) == _plays("AS")[0]
    # An opponent beats the declarer's card cheaply.
    view = _view("KH AH 2C", _plays("KH AH"), trick="QH", seat=1, facts={"declarer": 0}, trump=0)
    assert bot.choose(view) == _plays("KH")[0]


# --- heuristic against random, in-process (engine and referee views, no gRPC) -------------------


def _dame_de_pique_penalties(matches: int) -> tuple[float, float]:
    """Average penalty per manche of the heuristic seat, and of a random seat."""
    heuristic = random_ = 0.0
    hands = 0
    for g in range(matches):
        h = g % 4
        bots = [HeuristicBot("hearts") if i == h else RandomBot(100 * g + i) for i in range(4)]
        result = play_local("dame-de-pique", bots, f"dp-{g}")
        hands += result.hands
        heuristic += sum(d[h] for d in result.hand_deltas)
        random_ += sum(sum(d) - d[h] for d in result.hand_deltas) / 3
    return heuristic / hands, random_ / hands


def _win_rate(game: str, matches: int, players: int, ruleset: str = "") -> float:
    """The heuristic seat's share of the wins, one heuristic against random seats."""
    wins = 0.0
    for g in range(matches):
        h = g % players
        bots = [
            HeuristicBot(game, ruleset) if i == h else RandomBot(100 * g + i)
            for i in range(players)
        ]
        options = {"players": players} if game == "napoleon" else {}
        result = play_local(game, bots, f"{game}-{g}", ruleset, options)
        if h in result.winners:
            wins += 1 / len(result.winners)
    return wins / matches


def test_heuristic_beats_random_at_dame_de_pique() -> None:
    heuristic, random_ = _dame_de_pique_penalties(12)
    assert heuristic < random_ * 0.75, (heuristic, random_)


def test_heuristic_beats_random_at_napoleon() -> None:
    assert _win_rate("napoleon", 24, 4) > 0.5  # against three random seats: 0.25 by chance


@pytest.mark.parametrize("game", ["imperiale", "triomphe"])
def test_heuristic_beats_random_head_to_head(game: str) -> None:
    if game not in GAMES:
        pytest.skip(f"{game} is not registered")
    assert _win_rate(game, 40, 2) > 0.55


def test_play_seat_falls_back_to_the_seat_stream_where_the_referee_has_no_play_seat() -> None:
    """A server that implements nothing answers UNIMPLEMENTED: `play_seat` tries PlaySeat,
    then the seat's WatchTable stream (whose UNIMPLEMENTED it raises); `one_call=True` does
    not fall back."""

    async def main() -> None:
        server = grpc.aio.server()
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with RefereeClient(f"127.0.0.1:{port}", retries=0) as client:
                handle = client.seat("t", 0, "token")
                with pytest.raises(RefereeError) as exc:
                    await play_seat(handle, RandomBot(0))
                assert exc.value.status == grpc.StatusCode.UNIMPLEMENTED
                assert client.calls == {"PlaySeat": 1, "WatchTable": 1}
                client.calls.clear()
                with pytest.raises(RefereeError):
                    await play_seat(handle, RandomBot(0), one_call=True)
                assert client.calls == {"PlaySeat": 1}
        finally:
            await server.stop(0)

    asyncio.run(main())


def test_tapis_bot_waits_out_a_referee_restart_longer_than_the_sdks_retries(
    tmp_path: Path,
) -> None:
    """A referee killed mid-match and down for 9 s (the SDK's own retries last 7 s), then
    started again: the three `tapis bot`s waiting for the fourth seat play on to the end of
    the match and its record. With `--patience 1`, a bot gives up on a referee that stays
    down, saying how long it tried."""
    server = Server(tmp_path)
    server.start()
    address = f"127.0.0.1:{server.port}"

    def bot(seat: int, token: str, *more: str) -> Any:
        return asyncio.create_subprocess_exec(
            sys.executable, "-m", "tapis_cartes.clients.cli", "bot", "--address", address,
            "--table", table_id, "--seat", str(seat), "--token", token, "--kind", "random",
            "--seed", str(seat), "--json", *more,
            cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip

    async def serving() -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            await server.serving(channel)

    async def main() -> None:
        nonlocal table_id
        await serving()
        async with RefereeClient(address) as client:
            seats = [(f"P{i}", False) for i in range(4)]
            table = await client.create_table("hearts", options={"end_threshold": 20}, seats=seats)
        table_id = table.table_id
        bots = [await bot(i, table.tokens[i]) for i in (1, 2, 3)]
        await asyncio.sleep(3)  # they start, pass their cards and wait for seat 0's
        server.kill()
        await asyncio.sleep(9)
        server.start()
        await serving()
        for process in bots:  # still there, waiting (not given up)
            if process.returncode is not None:
                _, err = await process.communicate()
                raise AssertionError(f"a bot gave up: {err.decode()}")
        async with RefereeClient(address) as client:
            ours = await asyncio.wait_for(
                play_seat(client.seat(table_id, 0, table.tokens[0]), RandomBot(0)), 60
            )
        for process in bots:
            out, err = await asyncio.wait_for(process.communicate(), 60)
            assert process.returncode == 0, err.decode()
            assert json.loads(out)["record_id"] == ours.record_id
        # A referee that stays down: the bot gives up once its patience is spent.
        server.kill()
        process = await bot(1, table.tokens[1], "--patience", "1")
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode != 0 and not out
        assert re.search(r"UNAVAILABLE: .* \(the last of 6 tries over \d+\.\d s\)$", err.decode())

    table_id = ""
    try:
        asyncio.run(main())
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.kill()
