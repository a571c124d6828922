"""Annotations: what a person reads next to each action of a record.

`annotate(rec, comments, previous)` replays a decoded record through the engine (one engine,
one replay, as `records.verify.replay_record` does; no rule code here) and returns, for every
action, an `ActionAnnotation`: the legal actions at that moment, whether the action was
forced (the only legal one), the seat that won the trick it completed, the score lines it
caused (lines whose `at` is its 1-based index) and the comments of people.

Annotations live in the envelope, outside the signed record bytes: annotating a signed record
keeps its signature valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from records.codec import deal_from_pb, score_to_pb
from records.verify import match_for_record, replay_record
from referee.engine import IllegalAction, InvalidAction, RecordError, TapisError
from referee.engine.errors import quoted
from tapis.v1 import record_pb2 as pb

__all__ = ["Comment", "CommentError", "annotate", "parse_comment"]

Comment = tuple[int, int, str]  # (hand, action, text), hand and action 1-based


class CommentError(TapisError):
    """A comment that is malformed or names a position the record does not have."""


_NUMBER = re.compile(r"[0-9]{1,9}")  # a hand or action number (ASCII digits, no more than 9)


def parse_comment(text: str) -> Comment:
    """`HAND:ACTION:TEXT` (1-based hand and action; TEXT may hold colons)."""
    parts = text.split(":", 2)
    if len(parts) != 3 or not all(_NUMBER.fullmatch(p.strip()) for p in parts[:2]):
        raise CommentError(
            f"comment {quoted(text)}: expected HAND:ACTION:TEXT, e.g. 1:5:a fine lead"
        )
    hand, action, body = int(parts[0]), int(parts[1]), parts[2].strip()
    if hand < 1 or action < 1:
        raise CommentError(f"comment {quoted(text)}: hands and actions are counted from 1")
    if not body:
        raise CommentError(f"comment {quoted(text)}: the comment text is empty")
    return hand, action, body


def annotate(
    rec: pb.GameRecord,
    comments: Iterable[Comment] = (),
    previous: pb.Annotations | None = None,
) -> pb.Annotations:
    """The annotations of every action of `rec`. Comments already in `previous` are kept
    (the analysis is recomputed); `comments` are added after them. `RecordError` when the
    record does not replay, `CommentError` for a comment on a position that does not exist."""
    replay_record(rec)  # the record must be valid before anything is said of it
    match, units = match_for_record(rec)
    sizes = [len(hand.actions) for hand in rec.hands]
    kept: dict[tuple[int, int], list[str]] = {}
    for old in previous.actions if previous is not None else ():
        if old.comments:
            kept.setdefault((old.hand, old.action), []).extend(old.comments)
    for hand_no, action_no, text in comments:
        _check_position(sizes, hand_no, action_no)
        kept.setdefault((hand_no, action_no), []).append(text)
    for hand_no, action_no in kept:
        _check_position(sizes, hand_no, action_no)
    out = pb.Annotations()
    for h, hand in enumerate(rec.hands, 1):
        try:
            match.start_hand(hand.dealer, deal_from_pb(hand.deal))
        except IllegalAction as exc:
            raise RecordError(f"deal:{exc.code}", f"{exc.reason} [{exc.rule}]", hand=h) from None
        current = match.hand
        assert current is not None
        if len(hand.seats) != len(hand.actions):
            raise RecordError("actions", "the actions and their seats differ in number", hand=h)
        notes: list[pb.ActionAnnotation] = []
        for i, (seat, action) in enumerate(zip(hand.seats, hand.actions, strict=True), 1):
            legal = match.legal_actions(seat)
            tricks = len(current.tricks)
            try:
                match.step(seat, action)
            except (IllegalAction, InvalidAction) as exc:
                raise RecordError("action", str(exc), hand=h, action=i) from None
            note = pb.ActionAnnotation(
                hand=h, action=i, legal=legal, forced=len(legal) == 1 and legal[0] == action
            )
            if len(current.tricks) > tricks:
                note.trick_winner = current.tricks[-1].winner
            note.comments.extend(kept.get((h, i), ()))
            notes.append(note)
        # Score lines are known once the hand is scored: attach each to its action.
        for line in current.lines:
            if 1 <= line.at <= len(notes):
                notes[line.at - 1].lines.add(
                    seat=line.seat,
                    kind=line.kind,
                    delta=score_to_pb(units, line.delta),
                    rule=line.rule,
                    note=line.note,
                    after_action=line.at,
                )
        out.actions.extend(notes)
    return out


def _check_position(sizes: Sequence[int], hand: int, action: int) -> None:
    if not 1 <= hand <= len(sizes):
        raise CommentError(
            f"comment on hand {hand}, action {action}: the record has {len(sizes)} "
            f"hand{'s' if len(sizes) != 1 else ''}"
        )
    if not 1 <= action <= sizes[hand - 1]:
        raise CommentError(
            f"comment on hand {hand}, action {action}: hand {hand} has {sizes[hand - 1]} actions"
        )
