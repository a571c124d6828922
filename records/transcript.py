"""Transcripts (`TRANSCRIPT.md`, `tapis-transcript/1`): the human-writable way in.

`import_transcript(doc)` replays a transcript through the engine and returns the canonical
record; on the first problem it raises `TranscriptError` with a message naming the place:

- `hand H, action A (seat S, <action>): <reason> [<rule id>]` for an action the rules refuse;
- `hand H, deal: <what is wrong> [<rule id>]` (or `deck`, `dealer`) for a malformed deal;
- `options: ...`, `players: ...`, `start.scores[1]: ...` for the header.

Hands and actions are counted from 1, in the order the transcript lists them. Whatever a
transcript holds (wrong types, huge numbers or texts, deep nesting), the answer is a
`TranscriptError` naming the place, and a message quotes at most a short prefix of a value:
a player's name is at most `MAX_NAME` (64) characters, any other text at most `MAX_TEXT`
(256), an integer fits 64 bits, a file is at most `MAX_TRANSCRIPT` bytes and `MAX_BRACKETS`
brackets (its lists and objects), and no object gives a key twice (JSON would let the last one
win).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tapis_cartes.records.codec import (
    MAX_NAME,
    MAX_TEXT,
    Provenance,
    build_record,
    canonical_bytes,
    read_at_most,
)
from tapis_cartes.referee.engine import (
    Deal,
    IllegalAction,
    InvalidAction,
    Match,
    RulesError,
    Start,
    TranscriptError,
    find_game,
    make_rules,
    new_match,
)
from tapis_cartes.referee.engine.actions import KIND_NAMES, PASS, action_str, parse_action
from tapis_cartes.referee.engine.cards import card_str, mask_of, parse_card
from tapis_cartes.referee.engine.errors import QUOTE_LIMIT, quoted
from tapis_cartes.referee.engine.options import START_HAND_MAX, START_SCORE_MAX
from tapis_cartes.referee.errors import name_fault
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "FORMAT",
    "MAX_BRACKETS",
    "MAX_COMMAS",
    "MAX_TRANSCRIPT",
    "DuplicateKeys",
    "import_transcript",
    "json_object",
    "json_path",
    "load_transcript",
    "walk_json",
]

FORMAT = "tapis-transcript/1"
MAX_TRANSCRIPT = 64 << 20  # bytes: a larger file is not a transcript
# Brackets ('[' and '{': its lists and objects, and any in its texts) of a transcript file: a
# match the referee allows (1000 hands, 100,000 actions) has a few hundred thousand. A file of
# tens of millions of tiny lists would take a minute to read and check.
MAX_BRACKETS = 1_000_000
# Commas (the values of its lists and objects, and any in its texts): such a match has about
# 300,000 (two an action, 51 a deck). Read, every value is a Python object: a file of 13
# million cards in one list ("QS", "QS", ...: 62 MB) took 1.1 GB to refuse.
MAX_COMMAS = 2_000_000
_TOP_KEYS = {"format", "game", "ruleset", "options", "players", "start", "hands"}
_INT64 = 1 << 63  # every integer of a transcript fits a record's 64-bit fields
_INT64_LOW = -_INT64


def _shown(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """A JSON value from a transcript, for a message: as JSON, cut after about `limit`
    characters (the value is rendered lazily, never whole)."""
    out: list[str] = []
    size = 0
    try:
        for chunk in json.JSONEncoder(ensure_ascii=False).iterencode(value):
            out.append(chunk)
            size += len(chunk)
            if size > limit:
                return "".join(out)[:limit] + "…"
    except (RecursionError, ValueError, TypeError):
        return "a value nested too deep"
    return "".join(out)


class DuplicateKeys(dict[str, Any]):
    """A JSON object that gave `key` more than once (JSON itself lets the last one win); the
    bounds walk refuses it at its place."""

    key: str


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words: "an array", "null", "a string"..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    kinds = ((str, "a string"), (int, "a number"), (float, "a number"), (list, "an array"))
    return next((word for kind, word in kinds if isinstance(value, kind)), "an object")


def json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`'s `object_pairs_hook`: a plain dict, or a `DuplicateKeys` when a key
    repeats (the place is not known here, so it is named later by the walk)."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    marked = DuplicateKeys(obj)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.key = key
            break
        seen.add(key)
    return marked


def json_path(keys: Sequence[str | int]) -> str:
    """The JSON path of a value (`hands[0].actions[3]`) from its keys and indices."""
    out = ""
    for k in keys:
        if isinstance(k, int):
            out += f"[{k}]"
        else:
            out += f".{k}" if out else k
    return out or "transcript"


_SURROGATE = re.compile("[\ud800-\udfff]")


def walk_json(value: Any, where: str = "") -> Iterator[tuple[list[str | int], Any]]:
    """Every value of a JSON document `value` (`value` itself first, named `where`), depth
    first, each with the keys that lead to it (`json_path` names it; the list is reused: read
    it before the next). A walk, not a recursion: it holds one iterator per open container,
    so its memory does not grow with the lists."""
    frames: list[Iterator[tuple[str | int, Any]]] = [iter([(where, value)])]
    keys: list[str | int] = [where]  # keys[i]: the key in frames[i] of the value walked
    while frames:
        for key, item in frames[-1]:
            keys[-1] = key
            yield keys, item
            if isinstance(item, dict):
                frames.append(iter(item.items()))
                keys.append("")
                break  # into the object; its container's iterator resumes after it
            if isinstance(item, list):
                frames.append(enumerate(item))
                keys.append(0)
                break
        else:
            frames.pop()
            keys.pop()


def _check_bounds(doc: dict[str, Any]) -> None:
    """`TranscriptError` naming the place of the first key given twice in one object, text
    longer than `MAX_TEXT` (a key too) or holding a lone surrogate, or integer that does not
    fit 64 bits, anywhere in the document (`walk_json`: a path is built only for the value
    reported)."""
    for keys, value in walk_json(doc):
        key = keys[-1]
        if isinstance(key, str) and len(key) > MAX_TEXT:
            raise _fail(json_path(keys[:-1]), f"a key of {len(key)} characters: {quoted(key)}")
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                text = f"a text of {len(value)} characters (at most {MAX_TEXT})"
                raise _fail(json_path(keys), text)
            if _SURROGATE.search(value):  # JSON's \ud800 alone: no character, no UTF-8
                raise _fail(json_path(keys), f"{quoted(value)} holds a lone surrogate, not text")
        elif isinstance(value, int):  # a bool too, always in range
            if not _INT64_LOW <= value < _INT64:
                raise _fail(json_path(keys), f"{_shown(value)} does not fit 64 bits")
        elif isinstance(value, DuplicateKeys):
            raise _fail(json_path(keys), f"duplicate key {quoted(value.key)}")


def load_transcript(path: str | Path) -> dict[str, Any]:
    """Read a transcript file as JSON; `TranscriptError` naming the line and column of a
    syntax error (or what else makes it no transcript: its size, its nesting, a number too
    long to read)."""
    p = Path(path)
    try:
        data = read_at_most(p, MAX_TRANSCRIPT)
        if data is None:
            raise TranscriptError(f"{p}: larger than {MAX_TRANSCRIPT >> 20} MiB: not a transcript")
        # A byte order mark, which some editors write first, is no part of the JSON.
        bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        text = data[bom:].decode("utf-8")
        brackets = text.count("[") + text.count("{")
        if brackets > MAX_BRACKETS:
            raise TranscriptError(
                f"{p}: {brackets:,} brackets ('[' and '{{'), more than {MAX_BRACKETS:,}: not a"
                " transcript"
            )
        commas = text.count(",")
        if commas > MAX_COMMAS:
            raise TranscriptError(
                f"{p}: {commas:,} commas (its values), more than {MAX_COMMAS:,}: not a transcript"
            )
    except OSError as exc:
        raise TranscriptError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        at = exc.start + bom
        raise TranscriptError(f"{p}: not UTF-8 text ({exc.reason} at byte {at})") from None
    try:
        doc = json.loads(text, object_pairs_hook=json_object)
    except json.JSONDecodeError as exc:
        raise TranscriptError(
            f"{p}: not valid JSON: {exc.msg.removesuffix(' at')} at line {exc.lineno}, "
            f"column {exc.colno}"
        ) from None
    except RecursionError:
        raise TranscriptError(f"{p}: not a transcript: JSON nested too deep") from None
    except ValueError:  # Python reads no integer of more than 4300 digits
        raise TranscriptError(f"{p}: not a transcript: a number of more than 4300 digits") from None
    if not isinstance(doc, dict):
        raise TranscriptError(f"{p}: a transcript is a JSON object, not {json_kind(doc)}")
    return doc


def _fail(where: str, message: str) -> TranscriptError:
    return TranscriptError(f"{where}: {message}")


def _int(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"expected an integer, got {_shown(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise _fail(where, f"{value} is out of range ({span})")
    return value


def _card(value: Any, where: str) -> int:
    if not isinstance(value, str):
        raise _fail(where, f'a card is a text such as "QS", not {_shown(value)}')
    try:
        return parse_card(value)
    except InvalidAction as exc:
        raise _fail(where, str(exc)) from None


def _cards(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise _fail(where, f"expected a list of cards, got {_shown(value)}")
    return [_card(v, f"{where}[{i}]") for i, v in enumerate(value)]


def _check_distinct(cards: Sequence[int], where: str) -> None:
    seen: set[int] = set()
    for c in cards:
        if c in seen:
            raise _fail(where, f"{card_str(c)} appears twice")
        seen.add(c)


def _parse_deal(raw: Any, where: str, players: int) -> Deal:
    if not isinstance(raw, dict):
        raise _fail(where, "expected an object with 'hands' (and 'retourne', 'talon')")
    unknown = sorted(set(raw) - {"hands", "retourne", "talon"})
    if unknown:
        raise _fail(where, f"unknown key {quoted(unknown[0])}; expected hands, retourne, talon")
    hands_raw = raw.get("hands")
    if not isinstance(hands_raw, list):
        raise _fail(f"{where}.hands", "expected one list of cards per seat")
    if len(hands_raw) != players:
        raise _fail(f"{where}.hands", f"{len(hands_raw)} hands given for {players} players")
    hands = []
    for s, h in enumerate(hands_raw):
        cards = _cards(h, f"{where}.hands[{s}]")
        _check_distinct(cards, f"{where}.hands[{s}]")
        hands.append(mask_of(cards))
    retourne = -1
    if "retourne" in raw:
        retourne = _card(raw["retourne"], f"{where}.retourne")
    talon = _cards(raw.get("talon", []), f"{where}.talon")
    return Deal(tuple(hands), retourne, tuple(talon))


def _parse_scores(raw: Any, units: tuple[str, ...], players: int) -> tuple[tuple[int, ...], ...]:
    where = "start.scores"
    if not isinstance(raw, list) or len(raw) != players:
        raise _fail(where, f"expected a list of {players} score objects, one per seat")
    out = []
    for s, obj in enumerate(raw):
        w = f"{where}[{s}]"
        if not isinstance(obj, dict):
            example = ", ".join(f'"{u}": 0' for u in units)
            raise _fail(w, f"expected an object such as {{{example}}}")
        unknown = sorted(set(obj) - set(units))
        if unknown:
            raise _fail(w, f"unknown key {quoted(unknown[0])}; this game keeps {', '.join(units)}")
        limit = START_SCORE_MAX  # the engine's bound of a start (options.py)
        out.append(tuple(_int(obj.get(u, 0), f"{w}.{u}", -limit, limit) for u in units))
    return tuple(out)


def import_transcript(doc: dict[str, Any], reference: str = "") -> bytes:
    """Replay a transcript through the engine; return the canonical record bytes."""
    return canonical_bytes(record_of(doc, reference))


def replay_transcript(doc: dict[str, Any]) -> tuple[Match, list[str], list[list[int] | None]]:
    """The match a transcript describes, fully replayed; `TranscriptError` on any fault."""
    if not isinstance(doc, dict):
        raise _fail("transcript", f"a transcript is a JSON object, not {_shown(doc)}")
    # The checks that do not depend on sizes come first: they refuse most foreign
    # documents before the walk over every value.
    if isinstance(doc, DuplicateKeys):
        raise _fail("transcript", f"duplicate key {quoted(doc.key)}")
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise _fail("transcript", f"unknown key {quoted(unknown[0])}")
    if doc.get("format") != FORMAT:
        raise _fail("format", f"expected {FORMAT!r}, got {_shown(doc.get('format'))}")
    # The names first: a name past its own bound is said to be one (not a text past MAX_TEXT).
    names = doc.get("players")
    if not isinstance(names, list) or not names:
        raise _fail("players", f"expected a list of player names, got {_shown(names)}")
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n:
            raise _fail(f"players[{i}]", f"expected a player's name, got {_shown(n)}")
        if len(n) > MAX_NAME:
            raise _fail(f"players[{i}]", f"a name of {len(n)} characters (at most {MAX_NAME})")
        fault = name_fault(n)
        if fault is not None:
            raise _fail(f"players[{i}]", f"a name that {fault}")
    _check_bounds(doc)
    game = doc.get("game")
    if not isinstance(game, str):
        raise _fail("game", f"expected a game name, got {_shown(game)}")
    ruleset = doc.get("ruleset")
    if ruleset is not None and not isinstance(ruleset, str):
        raise _fail("ruleset", f"expected a string, got {_shown(ruleset)}")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise _fail("options", "expected an object of option: value")
    for key, value in options.items():
        if isinstance(value, list | dict) or value is None:
            raise _fail(
                f"options.{key}", f"expected true, false, a number or a text, not {_shown(value)}"
            )
    try:
        spec = find_game(game)
        rules = make_rules(spec.name, ruleset, options, len(names))
    except RulesError as exc:
        where = exc.key if exc.key in ("game", "ruleset", "players") else "options"
        raise _fail(str(where), str(exc)) from None
    start = Start()
    if "start" in doc:
        raw = doc["start"]
        if not isinstance(raw, dict) or set(raw) - {"hand_number", "scores"}:
            raise _fail("start", "expected an object with 'hand_number' and 'scores'")
        number = _int(raw.get("hand_number", 1), "start.hand_number", 1, START_HAND_MAX)
        scores = None
        if "scores" in raw:
            scores = _parse_scores(raw["scores"], spec.units, rules.players)
        start = Start(number, scores)
    try:
        match = new_match(rules, start, log_events=False)
    except RulesError as exc:  # (the engine's message begins with "start: ")
        where = f"start.{exc.key}" if exc.key in ("hand_number", "scores") else "start"
        raise _fail(where, str(exc).removeprefix("start: ")) from None
    hands = doc.get("hands")
    if not isinstance(hands, list):
        raise _fail("hands", "expected a list of hands")
    decks: list[list[int] | None] = []
    for h, raw_hand in enumerate(hands, 1):
        decks.append(_replay_hand(match, raw_hand, h, rules.players))
    return match, [str(n) for n in names], decks


def _replay_hand(match: Match, raw: Any, h: int, players: int) -> list[int] | None:
    where = f"hand {h}"
    if not isinstance(raw, dict):
        raise _fail(where, "expected an object with 'dealer', 'deal' or 'deck', 'actions'")
    unknown = sorted(set(raw) - {"dealer", "deal", "deck", "actions"})
    if unknown:
        raise _fail(where, f"unknown key {quoted(unknown[0])}")
    if match.finished:
        raise _fail(where, f"the match is already over ({match.end_reason}): no further hand")
    dealer = _int(raw.get("dealer"), f"{where}, dealer", 0, players - 1)
    deck: list[int] | None = None
    if ("deal" in raw) == ("deck" in raw):
        raise _fail(where, "give exactly one of 'deal' and 'deck'")
    try:
        if "deck" in raw:
            deck = _cards(raw["deck"], f"{where}, deck")
            _check_distinct(deck, f"{where}, deck")
            deal = match.deal_deck(dealer, deck)
        else:
            deal = _parse_deal(raw["deal"], f"{where}, deal", players)
        match.start_hand(dealer, deal)
    except IllegalAction as exc:  # DealError
        part = (
            "dealer"
            if exc.code in ("dealer-rotation", "bad-dealer")
            else ("deck" if deck is not None else "deal")
        )
        reason = exc.reason.removeprefix("deal: ")
        raise _fail(f"{where}, {part}", f"{reason} [{exc.rule}]") from None
    actions = raw.get("actions", [])
    if not isinstance(actions, list):
        raise _fail(f"{where}, actions", "expected a list of actions")
    hand = match.hand
    assert hand is not None
    for a, entry in enumerate(actions, 1):
        at = f"{where}, action {a}"
        if not isinstance(entry, dict) or "seat" not in entry:
            got = _shown(entry)
            raise _fail(at, f"expected an object with 'seat' and one action, got {got}")
        seat = _int(entry["seat"], f"{at}, seat", 0, players - 1)
        _check_entry(entry, f"{at} (seat {seat})")
        if match.finished:
            raise _fail(at, f"the match is already over ({match.end_reason})")
        if hand.over and entry.get("resign") is not True:
            raise _fail(at, "the hand is already over: no further action in it")
        try:
            action = parse_action(entry)
        except InvalidAction as exc:
            raise _fail(f"{at} (seat {seat})", str(exc)) from None
        try:
            match.step(seat, action)
        except IllegalAction as exc:
            raise _fail(
                f"{at} (seat {seat}, {action_str(action)})", f"{exc.reason} [{exc.rule}]"
            ) from None
    if not hand.over and not match.finished:
        waiting = ", ".join(f"seat {s}" for s in hand.to_act())
        raise _fail(
            where,
            f"the hand is not finished after {len(actions)} actions (waiting for {waiting})",
        )
    return deck


def _check_entry(entry: dict[str, Any], where: str) -> None:
    """An action entry's shape before the engine parses it: one action key, and a value of
    its type (so that no message quotes more than a few cards)."""
    keys = [k for k in entry if k != "seat"]
    unknown = [k for k in keys if k not in KIND_NAMES]
    if unknown:
        raise _fail(
            where,
            f"unknown action key {quoted(unknown[0])}; expected one of {', '.join(KIND_NAMES)}",
        )
    if len(keys) != 1:
        raise _fail(where, f"an action needs exactly one of {', '.join(KIND_NAMES)}; got {keys}")
    key = keys[0]
    value = entry[key]
    if key == KIND_NAMES[PASS]:
        if not isinstance(value, list) or len(value) != 3:
            raise _fail(where, f"'pass' must be a list of three cards; got {_shown(value)}")
        for i, v in enumerate(value):
            _card(v, f"{where}, pass[{i}]")
    elif isinstance(value, list | dict):
        raise _fail(where, f"'{key}' takes one value, not {_shown(value)}")


def record_of(doc: dict[str, Any], reference: str = "") -> pb.GameRecord:
    """The record a transcript makes (not yet serialized). `TranscriptError` when the
    transcript does not hold, or when the match it makes does not fit a record (a score
    beyond 64 bits, under options that allow it)."""
    match, names, decks = replay_transcript(doc)
    try:
        record = build_record(match, names, Provenance("transcript", reference), decks)
        canonical_bytes(record)
    except ValueError as exc:  # protobuf: a value out of its field's range
        raise _fail("transcript", f"the match does not fit a record: {exc}") from None
    return record
