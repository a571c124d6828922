"""`html`: a record as one self-contained web page that replays the match trick by trick.

`replay_data(env)` verifies each record's content (records/verify.py: nothing shown is
taken as it comes), replays it (the one replay of records/replay.py, with a visitor that
keeps every position: the deal, then the state after each action) and returns
plain data: every seat's cards, the trick on the table and who won it, the spectator view's
public facts (retourne, talon cards turned, pillage, impériales shown: what the engine says
is public), the scores, the score lines with their rule ids, the annotations and comments,
and the signature and seed as `verify` reports them. `replay_page(data)` puts that data, as
JSON, into the page (records/page/: HTML, CSS and JavaScript inlined, nothing fetched): the
page only shows positions computed here, it knows no rule.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tapis_cartes.records.annotate import comments_by_position, stray_comments
from tapis_cartes.records.codec import decode_record, record_id, score_from_pb
from tapis_cartes.records.render import fact_text, named_seats, non_default_options
from tapis_cartes.records.replay import BaseVisitor, replay
from tapis_cartes.records.score import score_sheet
from tapis_cartes.records.verify import Keys, verify_envelope, verify_record
from tapis_cartes.referee.engine import Hand, action_str, find_game
from tapis_cartes.referee.engine.actions import PLAY
from tapis_cartes.referee.engine.cards import RANK_NAMES, SUIT_SYMBOLS, iter_cards
from tapis_cartes.referee.errors import PageTooLarge, SignatureError
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "MAX_PAGE_POSITIONS",
    "PAGE_FORMAT",
    "PageRecords",
    "page_asset",
    "page_data",
    "record_data",
    "replay_data",
    "replay_page",
]

PAGE_FORMAT = "tapis-replay/1"
MAX_LEGAL = 20  # the most legal actions a position lists
# The most positions one page holds, all its records together (a position: a hand's deal,
# or the state after one of its actions; about 0.7 KB of the page, several KB while it is
# built): a Napoléon match of 1,000 deals for 10 seats, 60,000 positions, made a 40 MB page
# and took 460 MB to build (in the referee too, for its web front's replay page).
MAX_PAGE_POSITIONS = 20_000


def page_positions(rec: pb.GameRecord) -> int:
    """The positions a record's page shows: each hand's deal and every action after it."""
    return sum(len(hand.actions) + 1 for hand in rec.hands)


def page_asset(name: str) -> str:
    """A file of the pages (records/page/), as text."""
    return (
        resources.files("tapis_cartes.records").joinpath("page", name).read_text(encoding="utf-8")
    )


# A place of a page's template: `{{name}}`, or `/*{{name}}*/` in a style or a script.
_PLACE = re.compile(r"/\*\{\{(\w+)\}\}\*/|\{\{(\w+)\}\}")


def fill(template: str, values: dict[str, str]) -> str:
    """`template` with each of its places replaced by its value, in one pass: a value is
    never read again for places (a record's title or a player's name may hold `{{data}}`)."""
    return _PLACE.sub(lambda m: values[m[1] or m[2]], template)


def card_table() -> list[list[Any]]:
    """Each card id's rank and suit as a person reads them (index: the card id)."""
    return [[RANK_NAMES[c % 13], c // 13] for c in range(52)]


def _mask(m: int) -> str:
    """A card mask for the page: hexadecimal (the page reads its bits)."""
    return format(m, "x")


class _PositionsVisitor(BaseVisitor[list[dict[str, Any]]]):
    """Every position of the match: per hand, the deal, then the state after each action.
    Strict: a record that does not replay is a `RecordError`."""

    def __init__(self, comments: dict[tuple[int, int], list[str]]) -> None:
        self.comments = comments
        self.hands: list[dict[str, Any]] = []
        self.current: Hand | None = None
        self.tricks = 0
        self.legal: list[int] = []
        self.order: list[int] = []

    def begin_record(self) -> None:
        # the cards of the pack as a person sorts a hand: by suit, strongest first
        strength = self.match.order.strength
        self.order = sorted(iter_cards(self.match.pack), key=lambda c: (c // 13, -strength[c]))

    def _position(self, hand: Hand, completed: bool) -> dict[str, Any]:
        view = hand.view(None)  # the spectator's view: the public facts
        if completed:  # the trick just won stays on view, with its winner
            last = hand.tricks[-1]
            trick = [list(p) for p in zip(last.seats, last.cards, strict=True)]
            winner = last.winner
        else:
            trick = [list(p) for p in view.trick]
            winner = -1
        return {
            "held": [_mask(m) for m in hand.held],
            "trick": trick,
            "winner": winner,
            "tricks": len(hand.tricks),
            "phase": view.phase,
            "to_act": list(view.to_act),
            "trump": view.trump,
            "scores": [list(s) for s in view.scores],
            "facts": [[k, fact_text(v)] for k, v in view.public.items() if v is not None],
            "cards": {
                k: [list(g) if isinstance(g, tuple) else g for g in v]
                for k, v in view.cards.items()
            },
        }

    def begin_hand(self, h: int, hand: pb.HandRecord) -> None:
        current = self.current = self.match.hand
        assert current is not None
        deal = current.deal
        self.hands.append(
            {
                "number": hand.number,
                "dealer": hand.dealer,
                "deal": [_mask(m) for m in deal.hands],
                "retourne": deal.retourne,
                "talon": list(deal.talon),
                "positions": [self._position(current, False)],
            }
        )

    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        current = self.current
        assert current is not None
        self.tricks = len(current.tricks)
        self.legal = self.match.legal_actions(seat)

    def end_action(self, h: int, a: int, seat: int, action: int) -> None:
        current = self.current
        assert current is not None
        position = self._position(current, len(current.tricks) > self.tricks)
        position.update(
            seat=seat,
            action=action_str(action),
            card=action >> 3 if action & 7 == PLAY else -1,
            # the alternatives, when few enough to read (not the exchange's hundreds of trios)
            legal=[action_str(x) for x in self.legal] if len(self.legal) <= MAX_LEGAL else [],
            choices=len(self.legal),
            forced=self.legal == [action],  # the replay's (an annotation's is unsigned)
            comments=self.comments.get((h, a), []),
        )
        self.hands[-1]["positions"].append(position)

    def end_hand(self, h: int, hand: pb.HandRecord) -> None:
        current = self.current
        assert current is not None
        units = self.units
        doc = self.hands[-1]
        names = [seat.name for seat in self.rec.seats]
        doc["describe"] = [named_seats(d, names) for d in current.describe()]
        doc["lines"] = [
            {
                "seat": line.seat,
                "kind": line.kind,
                "delta": list(score_from_pb(units, line.delta)),
                "rule": line.rule,
                "note": named_seats(line.note, names),
                "at": line.after_action,
            }
            for line in hand.lines
        ]
        doc["scores_after"] = [list(score_from_pb(units, s)) for s in hand.scores_after]

    def result(self) -> list[dict[str, Any]]:
        return self.hands


def record_data(
    env: pb.RecordEnvelope, keys: Keys = (), room: int = MAX_PAGE_POSITIONS
) -> dict[str, Any]:
    """One record's page data: the match replayed position by position and what `verify`
    says of it (with `keys`, as `verify --key`). `RecordError` when its content does not
    follow from the rules, whatever its signature: a page shows no score the rules did not
    make (a signature that does not hold is shown as such). `PageTooLarge` when it has more
    positions than `room` (what is left of a page's `MAX_PAGE_POSITIONS`)."""
    checked = verify_envelope(env, keys)
    if isinstance(checked.error, SignatureError):
        verify_record(env.record)  # refused for its signature first: the content must hold
    elif checked.error is not None:
        raise checked.error
    rec = decode_record(env.record)
    positions = page_positions(rec)
    if positions > room:
        raise PageTooLarge(
            f"its match has {positions:,} positions (a deal, or an action), more than "
            + (
                f"a replay page holds ({MAX_PAGE_POSITIONS:,})"
                if room == MAX_PAGE_POSITIONS
                else f"are left on this page ({room:,} of {MAX_PAGE_POSITIONS:,})"
            )
            + ": `tapis record show` prints a match of any length"
        )
    comments = comments_by_position(env.annotations if env.HasField("annotations") else None)
    visitor = _PositionsVisitor(comments)
    hands = replay(rec, visitor)
    spec = find_game(rec.rules.game)
    units = spec.units
    source = rec.deal_source
    p = rec.provenance
    outcome = rec.outcome
    return {
        "title": spec.title,
        "game": rec.rules.game,
        "ruleset": rec.rules.ruleset,
        "options": non_default_options(rec),
        "seats": [s.name for s in rec.seats],
        "units": list(units),
        "record_id": record_id(env.record),
        "verify": {
            "ok": checked.ok,
            "error": f"{checked.error} ({checked.error.code})" if checked.error else "",
            "signature": checked.signature,
            "key_id": checked.key_id,
            "signer": checked.signer or "",
        },
        "deal_source": {
            "algorithm": source.algorithm,
            "commitment": source.commitment.hex(),
            "seed": source.seed.hex(),
        },
        "provenance": {"source": p.source, "reference": p.reference, "played_at": p.played_at},
        "start": [list(score_from_pb(units, s)) for s in rec.start.scores],
        "order": visitor.order,
        "hands": hands,
        "outcome": {
            "finished": outcome.finished,
            "winners": list(outcome.winners),
            "reason": named_seats(outcome.reason, [seat.name for seat in rec.seats]),
            "scores": [list(score_from_pb(units, s)) for s in outcome.scores],
        },
        "sheet": score_sheet(rec),
        # comments of the envelope on no position of the record: shown apart, not dropped
        "stray_comments": [list(c) for c in stray_comments(rec, comments)],
    }


class PageRecords:
    """The records of one page, made into data one by one (`add`: `record_data` within the
    positions the page has left of its `MAX_PAGE_POSITIONS`); `data()`, the page's data. A
    caller may leave out a record that does not hold (`add` raised) and go on."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.room = MAX_PAGE_POSITIONS

    def add(self, env: pb.RecordEnvelope, keys: Keys = ()) -> None:
        data = record_data(env, keys, self.room)
        self.room -= sum(len(hand["positions"]) for hand in data["hands"])
        self.records.append(data)

    def data(self) -> dict[str, Any]:
        return page_data(self.records)


def replay_data(envelopes: Sequence[pb.RecordEnvelope], keys: Keys = ()) -> dict[str, Any]:
    """The page data of the records of a file (see `record_data`; `PageTooLarge` past the
    positions of a page, all records together)."""
    page = PageRecords()
    for env in envelopes:
        page.add(env, keys)
    return page.data()


def signed_record_page(envelope: bytes, public_key: bytes, title: str) -> bytes:
    """The replay page (UTF-8) of one record, `envelope` its envelope's bytes, its signature
    checked with `public_key` (Ed25519, raw): what the referee's web front builds for a
    finished table, in a process of its own (bytes in, bytes out)."""
    key = Ed25519PublicKey.from_public_bytes(public_key)
    data = replay_data([pb.RecordEnvelope.FromString(envelope)], [key])
    return replay_page(data, title).encode()


def page_data(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The page data of records already made into data (`record_data`, one by one: a caller
    may leave out a record that does not hold and go on with the others)."""
    return {
        "format": PAGE_FORMAT,
        "suits": list(SUIT_SYMBOLS),
        "cards": card_table(),
        "records": list(records),
    }


def _script_json(data: object) -> str:
    """JSON safe inside a <script> element (no `</script>` or `<!--` can close it)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def replay_page(data: dict[str, Any], title: str = "Tapis replay") -> str:
    """The self-contained replay page of `replay_data`'s data."""
    return fill(
        page_asset("replay.html"),
        {
            "title": html.escape(title),
            "css": page_asset("tapis.css"),
            "js": page_asset("tapis.js") + page_asset("replay.js"),
            "data": _script_json(data),
        },
    )
