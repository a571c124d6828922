"""Annotations: what a person reads next to each action of a record.

`annotate(rec, comments, previous)` replays a decoded record through the engine (the one
replay of records/replay.py, with a visitor told each action; no rule code here) and
returns, for every action, an `ActionAnnotation`: the legal actions at that moment, whether
the action was forced (the only legal one), the seat that won the trick it completed, the
score lines it caused (lines whose `at` is its 1-based index) and the comments of people.

Annotations live in the envelope, outside the signed record bytes: annotating a signed record
keeps its signature valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tapis_cartes.records.codec import score_to_pb
from tapis_cartes.records.replay import BaseVisitor, compare_record, replay
from tapis_cartes.records.verify import verified_match
from tapis_cartes.referee.engine import Hand, RecordError
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.wire import MAX_COMMENT, check_envelope_size
from tapis_cartes.referee.errors import CommentError, CommentOutOfRange
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "MAX_COMMENT",
    "Comment",
    "CommentError",
    "CommentOutOfRange",
    "annotate",
    "annotate_envelope",
    "comments_by_position",
    "parse_comment",
    "stray_comments",
]

Comment = tuple[int, int, str]  # (hand, action, text), hand and action 1-based


_DIGITS = re.compile(r"[0-9]+")  # a number (ASCII digits)
_NUMBER = re.compile(r"[0-9]{1,9}")  # a hand or action number (no more than 9 digits)


def parse_comment(text: str) -> Comment:
    """`HAND:ACTION:TEXT` (1-based hand and action; TEXT may hold colons)."""
    parts = text.split(":", 2)
    if len(parts) != 3 or not all(_DIGITS.fullmatch(p.strip()) for p in parts[:2]):
        raise CommentError(
            f"comment {quoted(text)}: expected HAND:ACTION:TEXT, e.g. 1:5:a fine lead"
        )
    if not all(_NUMBER.fullmatch(p.strip()) for p in parts[:2]):
        raise CommentError(
            f"comment {quoted(text)}: a hand or action number of more than 9 digits: no"
            " record has so many"
        )
    hand, action, body = int(parts[0]), int(parts[1]), parts[2].strip()
    if hand < 1 or action < 1:
        raise CommentError(f"comment {quoted(text)}: hands and actions are counted from 1")
    if not body:
        raise CommentError(f"comment {quoted(text)}: the comment text is empty")
    _check_length(hand, action, body)
    return hand, action, body


def _check_length(hand: int, action: int, text: str) -> None:
    if len(text) > MAX_COMMENT:
        raise CommentError(
            f"comment on hand {hand}, action {action}: {len(text)} characters"
            f" (at most {MAX_COMMENT})"
        )


def annotate_envelope(
    env: pb.RecordEnvelope, comments: Iterable[Comment] = ()
) -> pb.RecordEnvelope:
    """`env` with its record's annotations made afresh (`annotate`), its comments kept and
    `comments` added: what `tapis record annotate` writes. The record must verify first
    (`RecordError`: as `tapis record verify` says, nothing is said of a record it refuses),
    and the envelope made must be one every reader of records takes (`CommentError` naming
    the action whose annotation would be too large: written, it would make the file unread)."""
    rec, _ = verified_match(env.record)
    previous = env.annotations if env.HasField("annotations") else None
    new = pb.RecordEnvelope()
    new.CopyFrom(env)
    new.annotations.CopyFrom(annotate(rec, comments, previous))
    try:
        check_envelope_size(new.SerializeToString())
    except RecordError as exc:
        one = pb.RecordEnvelope(record=env.record)
        for note in new.annotations.actions:  # the one too large
            one.annotations.ClearField("actions")
            one.annotations.actions.append(note)
            try:
                check_envelope_size(one.SerializeToString())
            except RecordError as too_large:
                raise CommentError(
                    f"hand {note.hand}, action {note.action}: not annotated: its annotation, "
                    f"with {len(note.legal)} legal actions and {len(note.comments)} comments, "
                    f"would be refused by every reader of records ({too_large}): fewer "
                    "comments on it"
                ) from None
        raise CommentError(
            f"not annotated: every reader of records would refuse it ({exc})"
        ) from None
    return new


def annotate(
    rec: pb.GameRecord,
    comments: Iterable[Comment] = (),
    previous: pb.Annotations | None = None,
) -> pb.Annotations:
    """The annotations of every action of `rec`. Comments already in `previous` are kept
    (the analysis is recomputed); `comments` are added after them. `RecordError` when the
    record does not replay, `CommentOutOfRange` (a `CommentError`) for a comment on a
    position that does not exist."""
    kept = comments_by_position(previous)
    new = list(comments)
    # the record must be valid before anything is said of it, or of a comment on it
    notes = replay(rec, _AnnotateVisitor())
    sizes = [len(hand.actions) for hand in rec.hands]
    for hand_no, action_no, text in new:
        _check_length(hand_no, action_no, text)
        _check_position(sizes, hand_no, action_no)
        kept.setdefault((hand_no, action_no), []).append(text)
    for hand_no, action_no in kept:
        _check_position(sizes, hand_no, action_no, "a comment the file holds")
    for note in notes.actions:
        note.comments.extend(kept.get((note.hand, note.action), ()))
    return notes


class _AnnotateVisitor(BaseVisitor[pb.Annotations]):
    """Per action: the legal actions before it, forced or not, the trick it completed; per
    hand, once scored, each score line on the action it follows. Strict, and the record is
    compared with its replay at the end (`compare_record`)."""

    def __init__(self) -> None:
        self.out = pb.Annotations()
        self.current: Hand | None = None
        self.notes: list[pb.ActionAnnotation] = []
        self.tricks = 0

    def begin_hand(self, h: int, hand: pb.HandRecord) -> None:
        self.current = self.match.hand
        self.notes = []

    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        current = self.current
        assert current is not None
        self.tricks = len(current.tricks)
        legal = self.match.legal_actions(seat)
        forced = len(legal) == 1 and legal[0] == action
        self.notes.append(pb.ActionAnnotation(hand=h, action=a, legal=legal, forced=forced))

    def end_action(self, h: int, a: int, seat: int, action: int) -> None:
        current = self.current
        assert current is not None
        if len(current.tricks) > self.tricks:
            self.notes[-1].trick_winner = current.tricks[-1].winner

    def end_hand(self, h: int, hand: pb.HandRecord) -> None:
        current = self.current
        assert current is not None
        notes = self.notes
        # Score lines are known once the hand is scored: attach each to its action.
        for line in current.lines:
            if 1 <= line.at <= len(notes):
                notes[line.at - 1].lines.add(
                    seat=line.seat,
                    kind=line.kind,
                    delta=score_to_pb(self.units, line.delta),
                    rule=line.rule,
                    note=line.note,
                    after_action=line.at,
                )
        self.out.actions.extend(notes)

    def end_record(self) -> None:
        compare_record(self.rec, self.match, self.units)

    def result(self) -> pb.Annotations:
        return self.out


def comments_by_position(notes: pb.Annotations | None) -> dict[tuple[int, int], list[str]]:
    """The comments of an envelope's annotations by position, (hand, action) 1-based: those
    of two annotations of one position together, in the order they come (an envelope is
    anyone's to write: every comment it holds is read, none is passed over)."""
    out: dict[tuple[int, int], list[str]] = {}
    for note in notes.actions if notes is not None else ():
        if note.comments:
            out.setdefault((note.hand, note.action), []).extend(note.comments)
    return out


def stray_comments(
    rec: pb.GameRecord, comments: dict[tuple[int, int], list[str]]
) -> list[tuple[int, int, str]]:
    """The comments of `comments_by_position` on a position `rec` does not have, in order
    of position: `annotate` refuses them; `show` and the replay page show them apart."""
    sizes = [len(hand.actions) for hand in rec.hands]
    return [
        (h, a, text)
        for (h, a), texts in sorted(comments.items())
        if not (1 <= h <= len(sizes) and 1 <= a <= sizes[h - 1])
        for text in texts
    ]


def _check_position(sizes: Sequence[int], hand: int, action: int, what: str = "comment") -> None:
    """`CommentOutOfRange` for a comment on a position the record does not have (`what`: a
    comment given, or one the file holds already)."""
    if not 1 <= hand <= len(sizes):
        raise CommentOutOfRange(
            f"{what} on hand {hand}, action {action}: the record has {len(sizes)} "
            f"hand{'s' if len(sizes) != 1 else ''}"
        )
    if not 1 <= action <= sizes[hand - 1]:
        raise CommentOutOfRange(
            f"{what} on hand {hand}, action {action}: hand {hand} has {sizes[hand - 1]} actions"
        )
