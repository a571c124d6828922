"""Records for a Python program: read a record file one record at a time, and for each record
its game, players, hands, plays by seat (with the card's text, the trick and who won it),
score lines (with their rule ids) and outcome; verify, score and re-score it. docs/python.md
is its guide.

    from tapis_cartes.records import read_records

    for record in read_records("dp1.tapis"):
        print(record.game, record.players, record.outcome.text)
        for play in record.hands[0].plays[:4]:
            print(play.player, play.text, play.trick, play.winner_player)

A thin layer of typed values over the record toolkit, knowing no rule: the file is read by
the codec's one reader (records/codec.py: bounded, one record in memory at a time), tricks and
winners come from the one replay of a record through the engine (records/research.py's
`hand_plays`), and `verify`, `score_sheet` and `rescore` are records/verify.py,
records/score.py and records/rescore.py.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

from google.protobuf.message import DecodeError

from tapis_cartes.records.codec import (
    decode_record,
    open_record_file,
    options_from_pb,
    parse_envelope,
    read_frames,
    record_id,
    score_from_pb,
    write_frames,
)
from tapis_cartes.records.render import render_record
from tapis_cartes.records.rescore import Rescored, rescore_record
from tapis_cartes.records.research import hand_plays
from tapis_cartes.records.score import result_line, score_json, score_sheet
from tapis_cartes.records.verify import Keys, VerifyResult, verified_match, verify_frame
from tapis_cartes.referee.engine import Match, RecordError, RulesError, find_game
from tapis_cartes.referee.engine.actions import action_str
from tapis_cartes.referee.engine.cards import mask_str
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.errors import RecordFileError
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "Hand",
    "Line",
    "Outcome",
    "Play",
    "Record",
    "RecordError",
    "RecordFileError",
    "Rescored",
    "VerifyResult",
    "read_records",
    "write_records",
]

Score = tuple[int, ...]  # one value per unit of the game (`Record.units`), e.g. (26,)


@dataclass(frozen=True)
class Play:
    """One action of a hand, by its seat: a card played, or a bid, a pass, a pillage..."""

    index: int  # 1-based in the hand
    seat: int
    player: str  # the seat's name
    action: int  # the action's code (referee/engine/actions.py)
    text: str  # the action as text: "play QS", "pass AS 2H 5H", "bid nap"
    card: str | None  # the card played ("QS"), None for another action
    trick: int | None  # the trick it belongs to (1-based in the hand), for a card played
    winner: int | None  # the seat that won that trick (None while it is unfinished)
    winner_player: str | None  # that seat's name


@dataclass(frozen=True)
class Line:
    """A score line of a hand, with the rule that scores it."""

    seat: int
    player: str
    kind: str  # "penalty", "moon", "contract", ...
    delta: Score  # what it adds to the seat's score
    rule: str  # its RULES.md rule id, e.g. "DP.SCORE"
    note: str
    after: int  # the action after which it was scored (1-based; 0: before any)


@dataclass(frozen=True)
class Hand:
    """One hand as played: its deal, every action by seat, its score lines and the scores
    after it (empty for a hand still in progress when the match stopped)."""

    number: int
    dealer: int
    cards: tuple[str, ...]  # each seat's cards as dealt, as text ("AS 6S 5S 5H ...")
    plays: tuple[Play, ...]
    lines: tuple[Line, ...]
    scores: tuple[Score, ...]  # every seat's score after the hand

    @property
    def tricks(self) -> tuple[tuple[Play, ...], ...]:
        """The cards played, trick by trick."""
        out: dict[int, list[Play]] = {}
        for play in self.plays:
            if play.trick is not None:
                out.setdefault(play.trick, []).append(play)
        return tuple(tuple(cards) for _, cards in sorted(out.items()))


@dataclass(frozen=True)
class Outcome:
    """How the match ended (or stopped)."""

    finished: bool
    winners: tuple[int, ...]  # seats
    scores: tuple[Score, ...]  # every seat's final score
    reason: str  # why it ended, when the rules say ("seat 2 resigned", ...)
    text: str  # for a person: "West wins."


@dataclass(frozen=True, eq=False)
class Record:
    """One record of a record file (a signed match, or a transcript imported). Its hands are
    replayed through the engine the first time they are asked for (to know each card's trick
    and who won it): a record that does not replay raises `RecordError` there, as `verify`
    would report it."""

    id: str  # the record id: SHA-256 of the record's bytes, in hex
    game: str  # "dame-de-pique", "napoleon", "triomphe", "imperiale"
    ruleset: str
    options: Mapping[str, Option]  # every option's value, the defaults included
    players: tuple[str, ...]  # the seats' names, in seat order
    teams: tuple[int, ...]  # each seat's team (0 where the game has none)
    units: tuple[str, ...]  # what a score counts: ("points",) or ("imperiales", "jetons")
    outcome: Outcome
    source: str  # "referee", "transcript", ...
    played_at: str  # ISO 8601, as recorded ("" when unknown)
    key_id: str  # the id of the key that signed it ("" when unsigned)
    # The record itself (record.proto), and its envelope (its bytes, signature and key id):
    # to read (protobuf messages can be changed; every method reads `frame`, as stored).
    message: pb.GameRecord = field(repr=False)
    envelope: pb.RecordEnvelope = field(repr=False)
    frame: bytes = field(repr=False)  # the envelope's bytes, as stored in a record file

    @classmethod
    def from_envelope(cls, env: pb.RecordEnvelope, frame: bytes | None = None) -> Record:
        """The record of an envelope (as `RefereeClient.record` gives it; `frame`: its bytes
        as a record file stores them, when read from one: `ValueError` when they are not
        this envelope's); `RecordError` when its bytes are not a record of a game Tapis
        knows."""
        if not isinstance(env, pb.RecordEnvelope):
            raise TypeError(
                f"from_envelope: {quoted(env, 40)} ({type(env).__name__}) is no RecordEnvelope"
            )
        if frame is not None:
            if not isinstance(frame, bytes):
                raise TypeError(f"from_envelope: frame is {type(frame).__name__}, not bytes")
            try:
                same = pb.RecordEnvelope.FromString(frame) == env
            except DecodeError:
                same = False
            if not same:
                raise ValueError("from_envelope: frame is not the bytes of this envelope")
        return cls._of(env, frame)

    @classmethod
    def _of(cls, env: pb.RecordEnvelope, frame: bytes | None) -> Record:
        """`from_envelope` of an envelope and the frame it was parsed from (`read_records`)."""
        rec = decode_record(env.record)
        try:
            units = find_game(rec.rules.game).units
        except RulesError as exc:
            raise RecordError("rules", str(exc)) from None
        names = tuple(s.name for s in rec.seats)
        out = rec.outcome
        return cls(
            id=record_id(env.record),
            game=rec.rules.game,
            ruleset=rec.rules.ruleset,
            options=MappingProxyType(options_from_pb(rec.rules.options)),
            players=names,
            teams=tuple(s.team for s in rec.seats),
            units=units,
            outcome=Outcome(
                out.finished,
                tuple(out.winners),
                tuple(score_from_pb(units, s) for s in out.scores),
                out.reason,
                result_line(rec),
            ),
            source=rec.provenance.source,
            played_at=rec.provenance.played_at,
            key_id=env.key_id,
            message=rec,
            envelope=env,
            frame=env.SerializeToString(deterministic=True) if frame is None else frame,
        )

    def __getstate__(self) -> dict[str, Any]:
        """What a pickle (or a deep copy) keeps: the fields, not what was read from them
        (the replay is the engine's, which pickles not)."""
        state = {k: v for k, v in self.__dict__.items() if k not in _CACHED}
        state["options"] = dict(self.options)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, options=MappingProxyType(state["options"]))

    @functools.cached_property
    def _own(self) -> tuple[pb.RecordEnvelope, pb.GameRecord]:
        """The envelope and record as the record's bytes (`frame`) hold them, which is what
        every method reads: `message` and `envelope` are messages a caller may change."""
        env = pb.RecordEnvelope.FromString(self.frame)
        return env, decode_record(env.record)

    @functools.cached_property
    def _replayed(self) -> tuple[pb.GameRecord, Match]:
        """The record once its content verifies (as `tapis record score` and `show` verify it
        first, the signature apart), and its replay: `RecordError` at its first fault, as
        `verify` reports it. Nothing the methods below give is taken from the record as it
        comes."""
        return verified_match(self._own[0].record)

    @property
    def _verified(self) -> pb.GameRecord:
        return self._replayed[0]

    @functools.cached_property
    def hands(self) -> tuple[Hand, ...]:
        """Every hand, with its plays by seat, score lines and scores after it."""
        (rec, match), names, units = self._replayed, self.players, self.units
        out = []
        for hand, rows in zip(rec.hands, hand_plays(rec, match), strict=False):
            plays = tuple(
                Play(
                    index,
                    seat,
                    names[seat],
                    action,
                    action_str(action),
                    card,
                    trick,
                    winner,
                    None if winner is None else names[winner],
                )
                for index, seat, action, card, trick, winner in rows
            )
            lines = tuple(
                Line(
                    line.seat,
                    names[line.seat],
                    line.kind,
                    score_from_pb(units, line.delta),
                    line.rule,
                    line.note,
                    line.after_action,
                )
                for line in hand.lines
            )
            cards = tuple(mask_str(m) for m in hand.deal.hands)
            scores = tuple(score_from_pb(units, s) for s in hand.scores_after)
            out.append(Hand(hand.number, hand.dealer, cards, plays, lines, scores))
        return tuple(out)

    def verify(self, keys: Keys = ()) -> VerifyResult:
        """Everything `tapis record verify` checks (docs/verify.md): the envelope, the
        signature (with `keys`, public keys, it must be signed by one of them), every field,
        the deals against the seed, every action, every score line, the outcome. Never raises
        for a bad record: `result.ok`, `result.error` (code, hand, action, message)."""
        return verify_frame(self.frame, keys)

    def score_sheet(self) -> str:
        """The score sheet, as `tapis record score` prints it (`RecordError` for a record
        that does not verify, as there)."""
        return score_sheet(self._verified)

    def score_json(self) -> dict[str, Any]:
        """The scores as TRANSCRIPT.md's JSON ("Scores"), as `tapis record score --json`
        (`RecordError` for a record that does not verify)."""
        return score_json(self._verified)

    def rescore(self, changes: Mapping[str, Option] | None = None, **more: Option) -> Rescored:
        """The same deals and actions under the record's options changed by `changes` and
        `more` (`rescore(moon_mode="subtract_self")`), hand by hand, to where the match now
        ends: old and new scores, winners, finish, the first score line that differs.
        Never raises for a record the new options refuse (`status` "not-replayable", with
        the rule or option that refuses it); `RecordError` for a record that does not
        verify under its own (its old scores would be taken as they come)."""
        given = {**(changes or {}), **more}
        for key, value in given.items():
            if not isinstance(value, bool | int | str):
                raise RulesError(
                    f"option {key!r}: {quoted(value)} ({type(value).__name__}) is no option "
                    "value (a bool, an int or text)",
                    key,
                )
        return rescore_record(self.id, self._verified, given)

    def show(self) -> str:
        """The match for a person, as `tapis record show` prints it."""
        env, rec = self._own
        return render_record(rec, env.record, env.annotations)


_CACHED = ("_own", "_replayed")  # Record's cached properties


def read_records(source: str | os.PathLike[str] | BinaryIO) -> Iterator[Record]:
    """The records of a record file (a path, or a binary file open for reading), one at a
    time as the file is read: a file of any size in the memory of one record (at most
    64 MiB). `RecordFileError` when the file cannot be read or is not a record file (after
    the records before the damage); `RecordError` for a record that does not decode, which
    ends the reading (`tapis record verify` names each and goes on)."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            # (a FIFO, /dev/stdin: read to its end, as `tapis record verify` reads it)
            f, total = open_record_file(path)
        except OSError as exc:
            raise RecordFileError("unreadable", f"{path}: {exc.strerror or exc}") from None
        with f:
            yield from _read(f, total, str(path))
    elif isinstance(source, io.TextIOBase) or not callable(getattr(source, "read", None)):
        raise TypeError(
            f"read_records: {quoted(source, 40)} ({type(source).__name__}) is neither a path"
            " nor a binary file open for reading"
        )
    else:
        name = getattr(source, "name", None)
        yield from _read(source, _remaining(source), name if isinstance(name, str) else "input")


def _remaining(f: BinaryIO) -> int | None:
    """The bytes left to read in `f`; None when it cannot tell (a pipe)."""
    try:
        here = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(here)
    except (OSError, AttributeError):
        return None
    return end - here


def _read(f: BinaryIO, total: int | None, name: str) -> Iterator[Record]:
    index = 0
    try:
        for frame in read_frames(f, total, name):
            index += 1
            env = parse_envelope(frame, name, index)
            try:
                record = Record._of(env, frame)
            except RecordError as exc:
                raise RecordError(exc.code, f"{name}: record {index}: {exc.message}") from None
            yield record
    except OSError as exc:
        raise RecordFileError("unreadable", f"{name}: {exc.strerror or exc}") from None


def write_records(path: str | os.PathLike[str], records: Iterable[Record]) -> int:
    """Write records to a record file, exactly as they were read or made (signatures and
    annotations kept), as they come, atomically: the file is complete or not there. Returns
    the number of records written."""
    return write_frames(Path(path), (r.frame for r in records))
