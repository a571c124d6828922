"""Terminal clients of the referee: `tapis play` (a person against bots) and `tapis bot` (a bot
at a remote table). Plain text on stdout, one line per thing that happens.

`tapis play` without `--address` starts a referee in-process on a free port, with its store
and key in a temporary directory; the bots run as asyncio tasks through the SDK. Input is
read by a daemon thread (a blocked `input()` must neither stall the event loop nor keep the
process alive after Ctrl-C); end of input or Ctrl-C resigns the seat and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

import grpc

from tapis_cartes.clients.args import err
from tapis_cartes.clients.bots import make_bot, play_seat
from tapis_cartes.clients.sdk import (
    ActionRefused,
    RefereeClient,
    RefereeError,
    SeatHandle,
    StaleAction,
    is_finished,
    retries_for,
)
from tapis_cartes.records.codec import write_envelopes
from tapis_cartes.referee.engine.actions import (
    ABANDON_WORDS,
    BID_WORDS,
    KIND_NAMES,
    VOLE_WORDS,
    parse_action,
)
from tapis_cartes.referee.engine.cards import SUIT_WORDS, card_str
from tapis_cartes.referee.engine.errors import InvalidAction
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.errors import OutputError, json_text, terminal_lines, terminal_text
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb

__all__ = ["parse_choice", "run_bot", "run_play", "score_text"]

LIST_LIMIT = 40  # more legal actions than this are not listed unless asked
HELP = (
    "Type the number of an action, or its text: 'play QS' or 'QS', 'pass QS AS KH', "
    "'bid nap' or 'nap'; 'list' shows every legal action; 'resign' concedes."
)


# --- reading a person's choice ---------------------------------------------------------------


def parse_choice(text: str, legal: Sequence[pb.ActionChoice]) -> int:
    """The action a person typed: a number from the list, or the action's text ("play QS",
    "QS", "bid nap", "nap", "pass QS AS KH", "stop"). The result need not be legal: the
    referee says why it is not. Raises `ValueError` with a message for a person."""
    words = text.strip().split()
    if not words:
        raise ValueError("type a number or an action")
    if len(words) == 1 and words[0].isdigit():
        # (ASCII digits, few: "²" and 4,301 digits were Python's own messages from int())
        n = int(words[0]) if words[0].isascii() and len(words[0]) <= 6 else 0
        if not 1 <= n <= len(legal):
            raise ValueError(f"choose a number from 1 to {len(legal)}")
        return legal[n - 1].action
    normal = " ".join(w.lower() for w in words)
    for choice in legal:
        if choice.text.lower() == normal:
            return choice.action
    kinds = {KIND_NAMES[c.action & 7] for c in legal}
    first = words[0].lower()
    if first in KIND_NAMES and not (first == "pass" and len(words) == 1 and "bid" in kinds):
        kind, rest = first, words[1:]
    elif len(words) == 1 and first in BID_WORDS:
        kind, rest = "bid", words
    elif len(words) == 1 and first in VOLE_WORDS and "pille" not in kinds:
        kind, rest = "vole", words
    elif len(words) == 1 and first in ABANDON_WORDS:
        kind, rest = "abandon", words
    elif len(words) == 3:
        kind, rest = "pass", words
    elif "pille" in kinds and "play" not in kinds:
        kind, rest = "pille", words
    else:
        kind, rest = "play", words
    if kind in ("play", "pass", "pille"):  # cards as a person types them: "qs", "Q♡"
        rest = [_card_word(w) for w in rest]
    value: object
    if kind == "pass":
        value = rest
    elif kind == "resign":
        value = True
    elif len(rest) == 1:
        value = rest[0]
    else:
        raise ValueError(f"{text.strip()!r}: {kind} takes one word, e.g. '{kind} ...'")
    try:
        return parse_action({kind: value})
    except InvalidAction as exc:
        raise ValueError(str(exc)) from None


class LineReader:
    """Lines of a text stream read by a daemon thread: `await readline()` gives the next
    line, or None at the end of input."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.interactive = stream.isatty()
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self._run, name="tapis-input", daemon=True).start()

    def _run(self) -> None:
        try:
            for line in self.stream:
                self.loop.call_soon_threadsafe(self.queue.put_nowait, line.rstrip("\n"))
        except (OSError, ValueError, RuntimeError):
            pass
        with contextlib.suppress(RuntimeError):  # the loop may be closed already
            self.loop.call_soon_threadsafe(self.queue.put_nowait, None)

    async def readline(self) -> str | None:
        return await self.queue.get()


# --- rendering -------------------------------------------------------------------------------


def score_text(score: rpb.Score, units: Sequence[str], signed: bool = False) -> str:
    """A score in the game's units: "13", or "2 imperiales 3 jetons"."""
    fmt = "{:+d}" if signed else "{:d}"
    parts = [fmt.format(getattr(score, u)) for u in units]
    if len(units) == 1:
        return parts[0]
    return " ".join(f"{p} {u}" for p, u in zip(parts, units, strict=True))


# How `tapis play` reads the public facts (docs/facts.md): the facts that are one seat (-1:
# none yet), a list of seats, or one value per seat.
SEAT_FACTS = frozenset({"declarer", "point", "winner", "abandon_offered_by", "robber"})
SEAT_LIST_FACTS = frozenset({"cartes_blanches", "bound"})
PER_SEAT_FACTS = frozenset({"points_taken", "tricks_won"})


class Screen:
    """Plain-text rendering of a table for one seat."""

    def __init__(self, out: TextIO, names: Sequence[str], me: int, units: Sequence[str]) -> None:
        self.out = out
        self.names = list(names)
        self.me = me
        self.units = list(units) or ["points"]

    def say(self, text: str = "") -> None:
        """Print a line for the person: what the referee sent (names, facts, texts) is any
        text, so a character a terminal would obey is shown as its escape."""
        print(terminal_lines(text), file=self.out, flush=True)

    def who(self, seat: int) -> str:
        """The seat's player for a person: a seat the table does not have (a fact's -1 where
        a seat is expected, a referee's mistake) is said as its number, never another's name."""
        if seat == self.me:
            return "You"
        return self.names[seat] if 0 <= seat < len(self.names) else f"seat {seat}"

    def score(self, score: rpb.Score, signed: bool = False) -> str:
        return score_text(score, self.units, signed)

    def scores(self, scores: Sequence[rpb.Score]) -> str:
        return " | ".join(f"{self.who(s)} {self.score(x)}" for s, x in enumerate(scores))

    def cards(self, plays: Sequence[pb.PlayedCard]) -> str:
        return ", ".join(f"{self.who(p.seat)} {card_str(p.card)}" for p in plays)

    def event(self, event: pb.TableEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "hand_started":
            h = event.hand_started
            self.say(f"\n=== Hand {h.number} (dealer: {self.who(h.dealer)}) ===")
            if h.HasField("retourne"):
                self.say(f"Retourne: {card_str(h.retourne)}")
        elif kind == "action_taken":
            a = event.action_taken
            self.say(f"{self.who(a.seat)}: {a.text}")
        elif kind == "trick_completed":
            t = event.trick_completed
            self.say(f"Trick {t.number}: {self.cards(t.cards)} -> won by {self.who(t.winner)}")
        elif kind == "score_line":
            s = event.score_line
            note = f" ({s.note})" if s.note else ""
            self.say(f"  {self.who(s.seat)}: {self.score(s.delta, True)} {s.kind} [{s.rule}]{note}")
        elif kind == "note":
            self.say(f"  * {event.note.text}")
        elif kind == "hand_ended":
            ended = event.hand_ended
            self.say(f"Scores after hand {ended.number}: {self.scores(ended.scores)}")
        elif kind == "match_ended":
            m = event.match_ended
            winners = ", ".join(self.who(s) for s in m.winners) or "nobody"
            self.say(f"\nMatch over ({m.reason}). Winner: {winners}")

    def fact(self, fact: pb.TypedFact) -> str | None:
        """A public fact for a person, seats by name (docs/facts.md): "Declarer: Bob",
        "Tricks won: You 2, Bob 1"; None for one that says nothing yet (no declarer, no
        cards shown)."""
        key, which = fact.key, fact.WhichOneof("value")
        label = key.replace("_", " ").capitalize()
        if which == "number":
            if key in SEAT_FACTS:
                return None if fact.number < 0 else f"{label}: {self.who(fact.number)}"
            return f"{label}: {fact.number}"
        if which == "flag":
            return f"{label}: {'yes' if fact.flag else 'no'}"
        if which == "word":
            return f"{label}: {fact.word}"
        if which == "numbers":
            values = list(fact.numbers.values)
            if key in SEAT_LIST_FACTS:
                return f"{label}: {', '.join(map(self.who, values))}" if values else None
            if key in PER_SEAT_FACTS:
                return f"{label}: " + ", ".join(f"{self.who(s)} {v}" for s, v in enumerate(values))
            return f"{label}: {', '.join(map(str, values))}"
        if which == "flags":
            done = [self.who(s) for s, v in enumerate(fact.flags.values) if v]
            return f"{label}: {', '.join(done) or 'nobody yet'}"
        if which == "words":
            return f"{label}: {', '.join(fact.words.values)}"
        if which == "groups":
            return f"{label}: " + " / ".join(
                " + ".join(map(self.who, g.values)) for g in fact.groups.groups
            )
        if which == "seat_words":
            said = fact.seat_words.values
            return f"{label}: " + ", ".join(f"{self.who(w.seat)} {w.word}" for w in said)
        if which == "cards":
            cards = " ".join(map(card_str, fact.cards.cards))
            return f"{label}: {cards}" if cards else None
        if which == "card_groups":
            shown = [
                f"{self.who(s)} {' '.join(map(card_str, g.cards))}"
                for s, g in enumerate(fact.card_groups.groups)
                if g.cards
            ]
            return f"{label}: {'; '.join(shown)}" if shown else None
        return None

    def running(self, view: pb.SeatView) -> str | None:
        """What each seat has taken so far this hand, as the engine counts it (the view's
        per-seat facts: Dame de Pique's points taken, the tricks won elsewhere): "This hand:
        points taken You 3, Bob 0, ..."; None before anything is counted."""
        parts = [
            f"{fact.key.replace('_', ' ')} "
            + ", ".join(f"{self.who(s)} {v}" for s, v in enumerate(fact.numbers.values))
            for fact in view.typed_facts
            if fact.key in PER_SEAT_FACTS and fact.WhichOneof("value") == "numbers"
        ]
        return f"This hand: {'; '.join(parts)}" if parts else None

    def turn(self, view: pb.SeatView, full: bool) -> None:
        facts = [
            t
            for t in map(self.fact, (f for f in view.typed_facts if f.key not in PER_SEAT_FACTS))
            if t is not None
        ]
        self.say(f"\n-- Your turn: hand {view.hand_number}, {view.phase} --")
        self.say("Your cards:")
        for suit in range(4):
            cards = sorted((c for c in view.hand if c // 13 == suit), reverse=True)
            shown = " ".join(card_str(c) for c in cards) or "-"
            self.say(f"  {SUIT_WORDS[suit] + ':':<9} {shown}")
        for known in view.known:
            self.say(f"{self.who(known.seat)} shows: {' '.join(map(card_str, known.cards))}")
        if view.HasField("trump"):
            self.say(f"Trump: {SUIT_WORDS[view.trump]}")
        if view.trick:
            self.say(f"Trick: {self.cards(view.trick)}")
        elif any(c.action & 7 == 0 for c in view.legal_actions):
            self.say("Trick: (you lead)")
        self.say(f"Scores: {self.scores(view.scores)}")
        running = self.running(view)
        if running is not None:
            self.say(running)
        for fact in facts:
            self.say(fact)
        self.legal(view.legal_actions, full)

    def legal(self, legal: Sequence[pb.ActionChoice], full: bool) -> None:
        if len(legal) > LIST_LIMIT and not full:
            example = legal[0].text
            self.say(
                f"{len(legal)} legal actions, e.g. 1) {example}; type one as text "
                f"(e.g. '{example}') or a number; 'list' shows them all"
            )
            return
        self.say("Legal:")
        for n, choice in enumerate(legal, 1):
            self.say(f"  {n:>2}) {choice.text}")


# --- tapis play ------------------------------------------------------------------------------


async def _person(
    me: SeatHandle, screen: Screen, reader: LineReader, prompt_out: TextIO
) -> tuple[tuple[rpb.Score, ...], str]:
    """Show the table to the person and submit their choices until the match ends, driven by
    the seat's stream (each event shown as it comes, a prompt on each turn); returns the
    scores after the last hand and the record id. End of input resigns."""
    record_id = ""
    scores: tuple[rpb.Score, ...] = ()
    ended = False
    messages = me.turns()
    try:
        async for message in messages:
            if message.HasField("turn"):
                await _turn(me, message.turn, screen, reader, prompt_out)
                continue
            event = message.event
            screen.event(event)
            if event.HasField("hand_ended"):
                scores = tuple(event.hand_ended.scores)
            elif event.HasField("match_ended"):
                record_id = event.match_ended.record_id
            ended = ended or event.HasField("match_ended") or event.HasField("table_closed")
    finally:
        await messages.aclose()
    if not ended:  # (as the bots say it: no final scores of a match not over)
        raise RefereeError(grpc.StatusCode.UNKNOWN, "the watch ended before the match")
    return scores, record_id


async def _turn(
    me: SeatHandle, view: pb.SeatView, screen: Screen, reader: LineReader, prompt_out: TextIO
) -> None:
    """One turn of the person: the table shown, then prompts until a move is accepted (its
    next turn comes from the stream), refused moves explained; end of input resigns."""
    screen.turn(view, False)
    while True:
        print("> ", end="", file=prompt_out, flush=True)
        line = await reader.readline()
        if line is not None and not reader.interactive:
            # A transcript reads as typed, escapes shown (not obeyed), a long line cut short.
            shown = terminal_text(line[:200]) + (" ..." if len(line) > 200 else "")
            print(shown, file=prompt_out, flush=True)
        command = "resign-eof" if line is None else line.strip().lower()
        if command in ("help", "?", "list"):
            screen.legal(view.legal_actions, True)
            screen.say(HELP)
            continue
        if command in ("resign", "resign-eof"):
            screen.say("\nEnd of input: you resign." if line is None else "You resign.")
            await me.resign()
            return
        assert line is not None
        try:
            await me.act(parse_choice(line, view.legal_actions), expected_index=view.action_index)
        except ValueError as exc:
            screen.say(f"? {exc}")
            continue
        except ActionRefused as exc:
            screen.say(f"Refused [{exc.rule}]: {exc.reason or exc.message}")
            continue
        except StaleAction:
            pass  # the table moved on: the stream shows what happened and the next turn
        return


async def _game(client: RefereeClient, game: str) -> pb.GameInfo:
    for info in await client.list_games():
        if game.lower() in (info.name, *info.aliases):
            return info
    raise RefereeError(grpc.StatusCode.NOT_FOUND, f"the referee has no game {game!r}")


def _players(info: pb.GameInfo, ruleset: str, options: Mapping[str, Option]) -> int:
    """The number of seats: the `players` option, else its default, else the ruleset's."""
    given = options.get("players")
    if isinstance(given, int) and not isinstance(given, bool):
        return given
    chosen = next((r for r in info.rulesets if r.name == ruleset), info.rulesets[0])
    for option in chosen.options:
        if option.key == "players":
            return int(option.default_value.int_value)
    return int(chosen.player_counts[0])


async def run_play(
    address: str | None,
    game: str = "hearts",
    ruleset: str = "",
    options: Mapping[str, Option] | None = None,
    name: str = "You",
    bots: str = "heuristic",
    seed: int | None = None,
    out: TextIO = sys.stdout,
    stdin: TextIO = sys.stdin,
    save: Path | None = None,
) -> int:
    """A person at a terminal against bots. Returns the exit status (130 after Ctrl-C, a
    SIGTERM or the terminal closed: SIGHUP). With `save`, the signed record of the match is
    written there when it ends."""
    # SIGTERM and SIGHUP end the match as Ctrl-C does, whatever Ctrl-C's disposition (started
    # in the background, it is ignored and SIGTERM killed the process): the seat resigns and
    # the private referee's folder (its store and key) is removed.
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    hangups = [getattr(signal, s) for s in ("SIGTERM", "SIGHUP") if hasattr(signal, s)]
    for sig in hangups:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # (no such signals)
            loop.add_signal_handler(sig, main.cancel)
    try:
        return await _run_play(address, game, ruleset, options, name, bots, seed, out, stdin, save)
    finally:
        for sig in hangups:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _run_play(
    address: str | None,
    game: str,
    ruleset: str,
    options: Mapping[str, Option] | None,
    name: str,
    bots: str,
    seed: int | None,
    out: TextIO,
    stdin: TextIO,
    save: Path | None,
) -> int:
    options = dict(options or {})
    server = None
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if address is None:
        from tapis_cartes.referee.server.app import create_server

        tmp = tempfile.TemporaryDirectory(prefix="tapis-play-")
        server = await create_server(
            "127.0.0.1:0", db=Path(tmp.name) / "tapis.db", key=Path(tmp.name) / "referee.key"
        )
        address = f"127.0.0.1:{server.port}"
    try:
        async with RefereeClient(address) as client:
            game_info = await _game(client, game)
            players = _players(game_info, ruleset, options)
            seats = [(name, False)] + [(f"{bots} bot {i}", False) for i in range(1, players)]
            created = await client.create_table(game, ruleset, options, seats)
            info = await client.table(created.table_id)
            screen = Screen(out, [s.name for s in info.seats], 0, game_info.units)
            screen.say(
                f"Table {created.table_id}: {info.rules.game} ({info.rules.ruleset}), "
                + ", ".join(f"seat {s.seat} {screen.who(s.seat)}" for s in info.seats)
            )
            tasks = [
                asyncio.create_task(
                    play_seat(
                        client.seat(created.table_id, i, created.tokens[i]),
                        make_bot(
                            bots,
                            info.rules.game,
                            info.rules.ruleset,
                            None if seed is None else seed + i,
                            options,
                        ),
                    )
                )
                for i in range(1, players)
            ]
            me = client.seat(created.table_id, 0, created.tokens[0])
            try:
                scores, record_id = await _person(me, screen, LineReader(stdin), out)
            except asyncio.CancelledError:
                with contextlib.suppress(OSError):  # (a terminal closed: SIGHUP)
                    screen.say("\nInterrupted: you resign.")
                with contextlib.suppress(RefereeError):
                    if not is_finished(await me.view()):
                        await me.resign()
                return 130
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            got = await me.record()
            record_id = record_id or got.record_id
            screen.say(f"Final scores: {screen.scores(scores)}")
            if save is not None:
                return _save(save, got.envelope, record_id, screen)
            else:
                screen.say(f"Record: {record_id} (tapis play --save FILE keeps it)")
            return 0
    finally:
        if server is not None:
            await server.stop(0)
        if tmp is not None:
            tmp.cleanup()


def _save(save: Path, envelope: rpb.RecordEnvelope, record_id: str, screen: Screen) -> int:
    """Write the match's record to `save`; when it cannot be written there (a disk full, a
    device that takes nothing: what `writable` could not know before the match), to a new
    file of the temporary folder instead, said on stderr (status 1): the private referee's
    store goes with its folder, and the record of a match played would be lost."""
    try:
        write_envelopes(save, [envelope])
    except (OSError, OutputError) as exc:
        fd, kept = tempfile.mkstemp(prefix=f"tapis-play-{record_id[:12]}-", suffix=".tapis")
        os.close(fd)
        try:
            write_envelopes(kept, [envelope])
        except (OSError, OutputError) as again:
            os.unlink(kept)
            err(f"tapis play: {exc}; nor in the temporary folder: {again} (the record"
                f" {record_id} is lost)")  # fmt: skip
            return 1
        err(f"tapis play: {exc}; the record is kept in {kept}")
        return 1
    screen.say(f"Record: {record_id} -> {save}")
    return 0


# --- tapis bot -------------------------------------------------------------------------------


async def run_bot(
    address: str,
    table_id: str,
    seat: int | None,
    token: str | None,
    join: bool,
    name: str = "",
    kind: str = "heuristic",
    seed: int | None = None,
    out: TextIO = sys.stdout,
    as_json: bool = False,
    patience: float | None = None,
) -> int:
    """Seat a bot at a remote table and play it to the end; print a one-line result (with
    `as_json`, one JSON object). `patience`: seconds it keeps trying to reach a referee that
    is down (None: the SDK's retries)."""
    tries = {} if patience is None else {"retries": retries_for(patience)}
    async with RefereeClient(address, **tries) as client:
        if join:
            handle = await client.join(table_id, seat, name)  # (empty: the seat keeps its name)
        else:
            assert seat is not None and token is not None
            handle = client.seat(table_id, seat, token)
        info = await client.table(table_id)
        units = (await _game(client, info.rules.game)).units
        bot = make_bot(kind, info.rules.game, info.rules.ruleset, seed)
        result = await play_seat(handle, bot)
        names = [s.name for s in (await client.table(table_id)).seats]
        if as_json:
            print(
                json_text(
                    {
                        "table_id": table_id,
                        "seat": handle.seat,
                        "name": names[handle.seat],
                        "kind": kind,
                        "won": result.won,
                        "winners": [names[w] for w in result.winners],
                        "reason": result.reason,
                        "scores": {
                            names[s]: score_text(score, units)
                            for s, score in enumerate(result.scores)
                        },
                        "actions": result.actions,
                        "record_id": result.record_id,
                    },
                ),
                file=out,
                flush=True,
            )
            return 0
        scores = ", ".join(
            f"{names[s]} {score_text(score, units)}" for s, score in enumerate(result.scores)
        )
        winners = ", ".join(names[w] for w in result.winners)
        print(
            terminal_text(
                f"table {table_id} seat {handle.seat} {names[handle.seat]} ({kind}): "
                f"{result.outcome}; winners {winners or 'none'}; scores {scores or 'none'}; "
                f"{result.actions} actions; record {result.record_id}"
            ),
            file=out,
            flush=True,
        )
        return 0


# The symbols a person may type for a suit (the white ones, an emoji's presentation) as the
# transcripts' cards write them (engine/cards.py `parse_card`, which takes nothing else).
_SUIT_TYPED = str.maketrans({"♤": "♠", "♡": "♥", "♢": "♦", "♧": "♣", "\ufe0f": None})


def _card_word(word: str) -> str:
    """A card as a person types it, in the form of the transcripts: "qs" is "QS"; "stop"
    (a pille's word) stays."""
    return word if word.lower() == "stop" else word.upper().translate(_SUIT_TYPED)
