"""Records played again by the tests' own means, apart from records/verify.py's comparisons:
a record rebuilt from its rules, deals and actions through the engine's public interface, and
a record replayed under changed options (what `tapis archive rescore` should find)."""

from __future__ import annotations

from tapis_cartes.records.codec import (
    canonical_bytes,
    decode_record,
    options_from_pb,
    rules_to_pb,
)
from tapis_cartes.records.strict import rebuild_record
from tapis_cartes.records.verify import replay_record
from tapis_cartes.referee.engine import (
    Deal,
    Match,
    RecordError,
    Rules,
    Start,
    find_game,
    make_rules,
    new_match,
)
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.v1 import record_pb2 as pb


def rules_of(r: pb.Rules) -> Rules:
    """The rules a record names, as its options say (`RulesError` if they do not hold)."""
    options = {o.key: getattr(o, o.WhichOneof("value") or "string_value") for o in r.options}
    options.pop("players", None)
    return make_rules(r.game, r.ruleset, options, r.players)


def rebuilt(rec: pb.GameRecord) -> bytes:
    """The bytes a record's rules, deals and actions make when played again one action at a
    time (`Match.step`) and built by `build_record` with the record's free fields (names,
    provenance, packs, deal source and, for a match not finished, its reason). Raises what the
    engine raises (`TapisError`) when it refuses them."""
    rules = rules_of(rec.rules)
    units = find_game(rules.game).units
    scores = tuple(tuple(getattr(s, u) for u in units) for s in rec.start.scores)
    match = new_match(rules, Start(rec.start.hand_number, scores or None))
    for hand in rec.hands:
        d = hand.deal
        if d.deck:
            deal = match.deal_deck(hand.dealer, list(d.deck))
        else:
            retourne = d.retourne if d.HasField("retourne") else -1
            deal = Deal(tuple(d.hands), retourne, tuple(d.talon))
        match.start_hand(hand.dealer, deal)
        for seat, action in zip(hand.seats, hand.actions, strict=True):
            match.step(seat, action)
    return canonical_bytes(rebuild_record(rec, match))


def replayed_with(env: pb.RecordEnvelope, changes: dict[str, Option]) -> Match:
    """The record with its options changed, replayed by records/verify.py (cut at the hand the
    new rules no longer deal: the match is over)."""
    rec = decode_record(env.record)
    options = options_from_pb(rec.rules.options)
    options.pop("players", None)
    rules = make_rules(rec.rules.game, rec.rules.ruleset, options | changes, rec.rules.players)
    rec.rules.CopyFrom(rules_to_pb(rules))
    try:
        return replay_record(rec, check=False)
    except RecordError as exc:
        assert exc.code == "deal:match-over" and exc.hand is not None
        del rec.hands[exc.hand - 1 :]
        return replay_record(rec, check=False)
