"""Verify a record: replay it through the engine and recompute everything.

Checks, in order: the bytes decode; the rules exist, their options are valid and the digest
matches; the seats and start scores fit; per hand: its number, the dealer's rotation, the deal
(and the pack it came from, when given), every action's legality, every score line and the
scores after it; last the outcome. The first failure is a `RecordError` with a stable `code`
and its position (hand, action; 1-based).

`replay_record` is also how `show` and `score` rebuild a match: one engine, one replay.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from records.codec import (
    deal_from_pb,
    decode_record,
    options_from_pb,
    record_id,
    score_from_pb,
    start_from_pb,
)
from records.dealing import ALGORITHM, commitment, first_dealer, shuffled_pack
from records.signing import signature_ok
from referee.engine import (
    IllegalAction,
    InvalidAction,
    Match,
    RecordError,
    Rules,
    RulesError,
    ScoreLine,
    find_game,
    make_rules,
    new_match,
)
from tapis.v1 import record_pb2 as pb

__all__ = ["VerifyResult", "match_for_record", "replay_record", "verify_envelope"]


@dataclass(frozen=True)
class VerifyResult:
    record_id: str
    hands: int
    error: RecordError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@functools.lru_cache(maxsize=256)
def _checked_rules(
    game: str, ruleset: str, players: int, options: tuple[tuple[str, object], ...], digest: str
) -> Rules:
    """The rules a record names, checked once per distinct rules (they are immutable)."""
    try:
        spec = find_game(game)
        given = dict(options)
        given.pop("players", None)
        rules = make_rules(spec.name, ruleset or None, given, players)
    except RulesError as exc:
        raise RecordError("rules", f"the rules do not hold: {exc}") from None
    if spec.name != game:
        raise RecordError("rules", f"game {game!r} is not a canonical game name")
    if dict(options) != rules.option_values():
        raise RecordError("rules", "the options listed are not the effective options")
    if digest != rules.digest:
        raise RecordError("rules-digest", "the rules digest does not match the rules")
    return rules


def match_for_record(rec: pb.GameRecord) -> tuple[Match, tuple[str, ...]]:
    """A new engine match for a record's checked rules and start, and the game's units;
    `RecordError` when they do not hold."""
    r = rec.rules
    options = tuple(options_from_pb(r.options).items())
    rules = _checked_rules(r.game, r.ruleset, r.players, options, r.digest)
    spec = find_game(rules.game)
    if len(rec.seats) != rules.players:
        raise RecordError("seats", f"{len(rec.seats)} seats for {rules.players} players")
    if rec.start.scores and len(rec.start.scores) != rules.players:
        raise RecordError("start", "the start scores do not give one score per seat")
    try:
        match = new_match(rules, start_from_pb(spec.units, rec.start), log_events=False)
    except RulesError as exc:
        raise RecordError("start", f"the start scores do not hold: {exc}") from None
    return match, spec.units


def replay_record(rec: pb.GameRecord, check: bool = True) -> Match:
    """Replay a decoded record through the engine. With `check`, compare every score line,
    score and the outcome with what the record says (`RecordError` at the first difference);
    the replay itself always checks every deal and action."""
    match, units = match_for_record(rec)
    seed = _checked_seed(rec)
    last = len(rec.hands)
    for h, hand in enumerate(rec.hands, 1):
        if seed is not None:
            _check_seeded_deal(rec, match, seed, hand, h)
        if hand.number != match.hand_number:
            raise RecordError(
                "hand-number", f"numbered {hand.number}, expected {match.hand_number}", hand=h
            )
        deal = deal_from_pb(hand.deal)
        try:
            if hand.deal.deck:
                dealt = match.deal_deck(hand.dealer, list(hand.deal.deck))
                if dealt != deal:
                    raise RecordError("deal", "the deal is not what the pack gives", hand=h)
            match.start_hand(hand.dealer, deal)
        except IllegalAction as exc:
            raise RecordError(f"deal:{exc.code}", f"{exc.reason} [{exc.rule}]", hand=h) from None
        seats = hand.seats
        actions = hand.actions
        if len(seats) != len(actions):
            raise RecordError("actions", f"{len(actions)} actions but {len(seats)} seats", hand=h)
        current = match.hand
        assert current is not None
        try:
            match.step_many(seats, actions)
        except IllegalAction as exc:
            position = len(current.actions) + 1
            raise RecordError(
                f"action:{exc.code}", f"{exc.message} [{exc.rule}]", hand=h, action=position
            ) from None
        except InvalidAction as exc:
            position = len(current.actions) + 1
            raise RecordError("action:invalid", str(exc), hand=h, action=position) from None
        if not current.over and not match.finished and h != last:
            raise RecordError("hand-unfinished", "the hand stops before its end", hand=h)
        if check and (current.over or match.finished):
            result = match.results[-1]
            _compare_lines(units, result.lines, hand.lines, h)
            after = tuple(score_from_pb(units, s) for s in hand.scores_after)
            if after != result.scores_after:
                raise RecordError(
                    "scores",
                    f"scores after the hand are {after}, the rules give {result.scores_after}",
                    hand=h,
                )
    if check:
        _compare_outcome(match, units, rec.outcome)
    return match


def _checked_seed(rec: pb.GameRecord) -> bytes | None:
    """The revealed seed of a refereed record, once it matches its commitment."""
    source = rec.deal_source
    if not source.algorithm and not source.seed and not source.commitment:
        return None
    if source.algorithm != ALGORITHM:
        raise RecordError("deal-algorithm", f"unknown deal algorithm {source.algorithm!r}")
    if commitment(source.seed) != source.commitment:
        raise RecordError("commitment", "the revealed seed does not match the commitment")
    return source.seed


def _check_seeded_deal(
    rec: pb.GameRecord, match: Match, seed: bytes, hand: pb.HandRecord, h: int
) -> None:
    """Every deal of a refereed record comes from the seed (records/dealing.py)."""
    if (
        h == 1
        and rec.start.hand_number <= 1
        and hand.dealer != first_dealer(seed, match.first_dealers())
    ):
        raise RecordError("deal-seed", "the first dealer is not the one the seed draws", hand=h)
    if list(hand.deal.deck) != shuffled_pack(seed, hand.number, match.pack):
        raise RecordError("deal-seed", "the pack is not the one the seed gives", hand=h)


def _compare_lines(
    units: tuple[str, ...], lines: list[ScoreLine], recorded: Sequence[pb.ScoreLine], h: int
) -> None:
    rec_lines = list(recorded)
    for i, line in enumerate(lines):
        if i >= len(rec_lines):
            raise RecordError("score-lines", f"score line {i + 1} is missing", hand=h)
        r = rec_lines[i]
        got = (r.seat, r.kind, score_from_pb(units, r.delta), r.rule, r.note, r.after_action)
        want = (line.seat, line.kind, line.delta, line.rule, line.note, line.at)
        if got != want:
            raise RecordError(
                "score-lines",
                f"score line {i + 1} is {got[:4]}, the rules give {want[:4]}",
                hand=h,
                action=line.at or None,
            )
    if len(rec_lines) > len(lines):
        raise RecordError(
            "score-lines", f"{len(rec_lines) - len(lines)} score lines too many", hand=h
        )


def _compare_outcome(match: Match, units: tuple[str, ...], out: pb.Outcome) -> None:
    scores = tuple(score_from_pb(units, s) for s in out.scores)
    if scores != tuple(match.scores):
        raise RecordError(
            "outcome", f"final scores are {scores}, the rules give {tuple(match.scores)}"
        )
    if out.finished != match.finished:
        raise RecordError(
            "outcome",
            f"the record says finished={out.finished}, the rules say {match.finished}",
        )
    if tuple(out.winners) != match.winners:
        raise RecordError(
            "outcome", f"winners are {list(out.winners)}, the rules give {list(match.winners)}"
        )
    resigned = out.resigned if out.HasField("resigned") else None
    if resigned != match.resigned:
        raise RecordError("outcome", "the resignation does not match the actions")


def verify_envelope(env: pb.RecordEnvelope, keys: Sequence[Ed25519PublicKey] = ()) -> VerifyResult:
    """Verify one envelope's record; never raises for a bad record (the result says).
    With `keys`, the record must carry a valid signature by one of them."""
    rid = record_id(env.record)
    try:
        if keys:
            if not env.signature:
                raise RecordError("signature", "the record is not signed")
            if not any(signature_ok(env, k) for k in keys):
                raise RecordError("signature", "the signature is not valid for the given key(s)")
        rec = decode_record(env.record)
        replay_record(rec)
    except RecordError as exc:
        return VerifyResult(rid, 0, exc)
    return VerifyResult(rid, len(rec.hands))
