"""Transcripts (`TRANSCRIPT.md`, `tapis-transcript/1`): the human-writable way in.

`import_transcript(doc)` replays a transcript through the engine and returns the canonical
record; on the first problem it raises `TranscriptError` with a message naming the place:

- `hand H, action A (seat S, <action>): <reason> [<rule id>]` for an action the rules refuse;
- `hand H, deal: <what is wrong> [<rule id>]` (or `deck`, `dealer`) for a malformed deal;
- `options: ...`, `players: ...`, `start.scores[1]: ...` for the header.

Hands and actions are counted from 1, in the order the transcript lists them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from records.codec import Provenance, build_record, canonical_bytes
from referee.engine import (
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
from referee.engine.actions import action_str, parse_action
from referee.engine.cards import card_str, mask_of, parse_card
from tapis.v1 import record_pb2 as pb

__all__ = ["FORMAT", "import_transcript", "load_transcript"]

FORMAT = "tapis-transcript/1"
_TOP_KEYS = {"format", "game", "ruleset", "options", "players", "start", "hands"}


def load_transcript(path: str | Path) -> dict[str, Any]:
    """Read a transcript file as JSON; `TranscriptError` naming the line and column of a
    syntax error."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TranscriptError(f"{p}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise TranscriptError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TranscriptError(
            f"{p}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    if not isinstance(doc, dict):
        raise TranscriptError(f"{p}: a transcript is a JSON object, not {type(doc).__name__}")
    return doc


def _fail(where: str, message: str) -> TranscriptError:
    return TranscriptError(f"{where}: {message}")


def _int(value: Any, where: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(where, f"expected an integer, got {json.dumps(value)}")
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise _fail(where, f"{value} is out of range ({span})")
    return value


def _cards(value: Any, where: str) -> list[int]:
    if not isinstance(value, list):
        raise _fail(where, f"expected a list of cards, got {json.dumps(value)}")
    out = []
    for i, v in enumerate(value):
        try:
            out.append(parse_card(v))
        except InvalidAction as exc:
            raise _fail(f"{where}[{i}]", str(exc)) from None
    return out


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
        raise _fail(where, f"unknown key {unknown[0]!r}; expected hands, retourne, talon")
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
        try:
            retourne = parse_card(raw["retourne"])
        except InvalidAction as exc:
            raise _fail(f"{where}.retourne", str(exc)) from None
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
            raise _fail(w, f"unknown key {unknown[0]!r}; this game keeps {', '.join(units)}")
        out.append(tuple(_int(obj.get(u, 0), f"{w}.{u}") for u in units))
    return tuple(out)


def import_transcript(doc: dict[str, Any], reference: str = "") -> bytes:
    """Replay a transcript through the engine; return the canonical record bytes."""
    match, names, decks = replay_transcript(doc)
    record = build_record(match, names, Provenance("transcript", reference), decks)
    return canonical_bytes(record)


def replay_transcript(doc: dict[str, Any]) -> tuple[Match, list[str], list[list[int] | None]]:
    """The match a transcript describes, fully replayed; `TranscriptError` on any fault."""
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise _fail("transcript", f"unknown key {unknown[0]!r}")
    if doc.get("format") != FORMAT:
        raise _fail("format", f"expected {FORMAT!r}, got {json.dumps(doc.get('format'))}")
    names = doc.get("players")
    if (
        not isinstance(names, list)
        or not names
        or not all(isinstance(n, str) and n.strip() for n in names)
    ):
        raise _fail("players", "expected a list of player names (non-empty strings)")
    ruleset = doc.get("ruleset")
    if ruleset is not None and not isinstance(ruleset, str):
        raise _fail("ruleset", f"expected a string, got {json.dumps(ruleset)}")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise _fail("options", "expected an object of option: value")
    try:
        spec = find_game(doc.get("game"))  # type: ignore[arg-type]
        rules = make_rules(spec.name, ruleset, options, len(names))
    except RulesError as exc:
        where = exc.key if exc.key in ("game", "ruleset", "players") else "options"
        raise _fail(str(where), str(exc)) from None
    start = Start()
    if "start" in doc:
        raw = doc["start"]
        if not isinstance(raw, dict) or set(raw) - {"hand_number", "scores"}:
            raise _fail("start", "expected an object with 'hand_number' and 'scores'")
        number = _int(raw.get("hand_number", 1), "start.hand_number", 1)
        scores = None
        if "scores" in raw:
            scores = _parse_scores(raw["scores"], spec.units, rules.players)
        start = Start(number, scores)
    try:
        match = new_match(rules, start, log_events=False)
    except RulesError as exc:
        raise _fail("start", str(exc)) from None
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
        raise _fail(where, f"unknown key {unknown[0]!r}")
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
            got = json.dumps(entry)
            raise _fail(at, f"expected an object with 'seat' and one action, got {got}")
        seat = _int(entry["seat"], f"{at}, seat", 0, players - 1)
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


def record_of(doc: dict[str, Any], reference: str = "") -> pb.GameRecord:
    """The record a transcript makes (not yet serialized)."""
    match, names, decks = replay_transcript(doc)
    return build_record(match, names, Provenance("transcript", reference), decks)
