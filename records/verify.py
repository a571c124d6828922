"""Verify a record: check its envelope, replay it through the engine, recompute everything.

Checks, in order: (for a frame of a record file) the envelope parses, has no unknown field
and is stored as Tapis writes it; the signature: with keys, the record must be signed, by a
key given (by its key id), and the signature must hold; without keys a signature is only
checked for its form and reported as not checked; then the record bytes decode and are the
canonical encoding of what they decode to; every field is checked against its game before
anything is replayed (records/strict.py: ranges, counts, units, texts, in memory bounded by
the record's size); the rules exist, their options are valid and the digest matches; the
seats and start scores fit; the revealed seed matches its commitment; per hand: the deal the
seed gives, its number, the dealer's rotation, the deal (and the pack it came from, when
given), every action's legality; last, the record is byte for byte what `build_record` makes
of the replayed match (with the record's free fields: names, provenance, packs, deal source),
and where it is not, the first score line or score after a hand that differs, then the
outcome, else the first field that differs. The first failure is a
`RecordError` with a stable `code` (all listed in docs/verify.md) and its position (hand,
action; 1-based).

`verify_file` and `verify_data` stream a record file: one result per record, and the
problems of the file itself (codes `file:...`) as results too, after the records before them.
`verify_files` does the same for several files, verifying chunks of records as tasks of an
executor (records/executors.py: here, or on a local process pool) and giving the results in
file and record order whatever order the chunks complete in.

`replay_record` is also how `show` and `score` rebuild a match: one engine, one replay.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from records.codec import (
    RecordFileError,
    deal_from_pb,
    file_chunks,
    iter_frames,
    parse_envelope,
    record_id,
    score_from_pb,
    start_from_pb,
)
from records.dealing import ALGORITHM, commitment, first_dealer, shuffled_pack
from records.executors import Executor, SerialExecutor, map_in_order
from records.signing import TrustedKey, signature_holds
from records.strict import (
    check_content,
    check_fields,
    check_rules_fields,
    check_start,
    decode_canonical,
)
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
from referee.engine.errors import quoted
from tapis.v1 import record_pb2 as pb

__all__ = [
    "SIGNATURE_STATES",
    "VERIFY_CHUNK",
    "Keys",
    "VerifyResult",
    "VerifyTask",
    "compare_record",
    "internal_error",
    "keyring",
    "match_for_record",
    "replay_record",
    "result_json",
    "verify_data",
    "verify_envelope",
    "verify_file",
    "verify_files",
    "verify_frame",
    "verify_record",
    "verify_task",
]

# What a result says of the signature: checked and good; checked and bad; signed by a key
# not given; signed but no key given to check it; not signed; signature or key id malformed.
SIGNATURE_STATES = ("valid", "invalid", "unknown-key", "unchecked", "none", "malformed")

Keys = Sequence[Ed25519PublicKey | TrustedKey]
Option = bool | int | str


@dataclass(frozen=True)
class VerifyResult:
    """What verifying one record (or failing to read one from a file) found.

    `signature` is one of `SIGNATURE_STATES` ("" for a file problem, or an envelope refused
    before its signature was looked at), `key_id` the key id the envelope claims ("" when
    none), `signer` the label of the key that verified it (None when not verified or the key
    has no label)."""

    record_id: str
    hands: int
    error: RecordError | None = None
    signature: str = "none"
    key_id: str = ""
    signer: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@functools.lru_cache(maxsize=256)
def _checked_rules(
    game: str, ruleset: str, players: int, options: tuple[tuple[str, str, Option], ...], digest: str
) -> Rules:
    """The rules a record names, checked once per distinct rules (they are immutable).
    `options`: (key, which value field, value), so that the cache never takes `True` for `1`."""
    try:
        spec = find_game(game)
        given = {key: value for key, _, value in options}
        given.pop("players", None)
        rules = make_rules(spec.name, ruleset or None, given, players)
    except RulesError as exc:
        raise RecordError("rules", f"the rules do not hold: {exc}") from None
    if spec.name != game:
        raise RecordError("rules", f"game {quoted(game)} is not a canonical game name")
    effective = sorted(rules.option_values().items())
    if list(options) != [(k, _VALUE_FIELD[type(v)], v) for k, v in effective]:
        raise RecordError("rules", "the options listed are not the effective options")
    if digest != rules.digest:
        raise RecordError("rules-digest", "the rules digest does not match the rules")
    return rules


_VALUE_FIELD = {bool: "bool_value", int: "int_value", str: "string_value"}  # of an Option


def match_for_record(rec: pb.GameRecord) -> tuple[Match, tuple[str, ...]]:
    """A new engine match for a record's checked rules and start, and the game's units, once
    every field of the record is checked against its game (records/strict.py: nothing out of
    its game's range reaches the engine); `RecordError` when they do not hold. Every command
    that reads a record's content goes through here first."""
    r = rec.rules
    options = check_rules_fields(r)
    rules = _checked_rules(r.game, r.ruleset, r.players, options, r.digest)
    spec = find_game(rules.game)
    if len(rec.seats) != rules.players:
        raise RecordError("seats", f"{len(rec.seats)} seats for {rules.players} players")
    check_start(rec.start, spec.units, rules.players)
    try:
        match = new_match(rules, start_from_pb(spec.units, rec.start), log_events=False)
    except RulesError as exc:
        raise RecordError("start", f"the start scores do not hold: {exc}") from None
    check_fields(rec, match, spec.units)
    return match, spec.units


def replay_record(rec: pb.GameRecord, check: bool = True) -> Match:
    """Replay a decoded record through the engine. Every field is checked against its game
    first (records/strict.py), so no value out of its game's range reaches the engine. With
    `check`, then compare every score line, score and the outcome with what the record says
    (`compare_record`); the replay itself always checks every deal and action."""
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
    if check:
        compare_record(rec, match, units)
    return match


def compare_record(rec: pb.GameRecord, match: Match, units: tuple[str, ...]) -> None:
    """The record's score lines and scores after each hand, then its outcome, against its
    replay `match`; `RecordError` (`score-lines`, `scores`, `outcome`) at the first
    difference, with its position."""
    for h, (hand, result) in enumerate(zip(rec.hands, match.results, strict=False), 1):
        _compare_lines(units, result.lines, hand.lines, h)
        after = tuple(score_from_pb(units, s) for s in hand.scores_after)
        if after != result.scores_after:
            raise RecordError(
                "scores",
                f"scores after the hand are {after}, the rules give {result.scores_after}",
                hand=h,
            )
    _compare_outcome(match, units, rec.outcome)


def _checked_seed(rec: pb.GameRecord) -> bytes | None:
    """The revealed seed of a refereed record, once it matches its commitment."""
    source = rec.deal_source
    if not source.algorithm and not source.seed and not source.commitment:
        return None
    if source.algorithm != ALGORITHM:
        raise RecordError("deal-algorithm", f"unknown deal algorithm {quoted(source.algorithm)}")
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
            shown = (r.seat, quoted(r.kind), got[2], quoted(r.rule))
            raise RecordError(
                "score-lines",
                f"score line {i + 1} is ({', '.join(map(str, shown))}), the rules give "
                f"({line.seat}, {line.kind!r}, {line.delta}, {line.rule!r})",
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


def keyring(keys: Keys) -> dict[str, TrustedKey]:
    """The keys by key id; a key given twice keeps the first label it was given."""
    ring: dict[str, TrustedKey] = {}
    for k in keys:
        tk = k if isinstance(k, TrustedKey) else TrustedKey.from_key(k)
        have = ring.get(tk.key_id)
        if have is None or (have.label is None and tk.label is not None):
            ring[tk.key_id] = tk
    return ring


_KEY_ID = re.compile(r"[0-9a-f]{64}\Z")
_SIGNATURE_SIZE = 64  # an Ed25519 signature


def _signature_form(env: pb.RecordEnvelope) -> str | None:
    """What is wrong with the form of the signature and key id, if anything."""
    sig, kid = env.signature, env.key_id
    if not sig and not kid:
        return None
    if not sig:
        return "a key id without a signature"
    if not kid:
        return "a signature without a key id"
    if len(sig) != _SIGNATURE_SIZE:
        return f"a signature of {len(sig)} bytes (an Ed25519 signature has {_SIGNATURE_SIZE})"
    if not _KEY_ID.match(kid):
        return f"key id {kid[:80]!r} is not 64 lowercase hex digits"
    return None


class _SignatureError(RecordError):
    """A signature that does not hold, and the signature state a result reports."""

    def __init__(self, state: str, code: str, message: str) -> None:
        super().__init__(code, message)
        self.state = state


def _check_signature(env: pb.RecordEnvelope, ring: dict[str, TrustedKey]) -> tuple[str, str | None]:
    """(signature state, signer label) of a signature that holds (or cannot be checked);
    `_SignatureError` (code `signature-...`, and the state to report) when it does not."""
    if not ring:
        problem = _signature_form(env)
        if problem is not None:
            raise _SignatureError("malformed", "signature-malformed", f"the envelope has {problem}")
        return ("unchecked" if env.signature else "none"), None
    if not env.signature:
        raise _SignatureError(
            "none", "signature-missing", "the record is not signed, and keys were given"
        )
    trusted = ring.get(env.key_id)
    if trusted is None:
        claims = f"key id {env.key_id[:80]!r}" if env.key_id else "no key id"
        raise _SignatureError(
            "unknown-key",
            "signature-unknown-key",
            f"the envelope claims {claims}, which is not the id of a key given",
        )
    if not signature_holds(env, trusted.key):
        raise _SignatureError(
            "invalid",
            "signature-invalid",
            f"the signature is not valid for key {trusted.key_id[:16]}"
            + (f" ({trusted.label})" if trusted.label else ""),
        )
    return "valid", trusted.label


def verify_envelope(env: pb.RecordEnvelope, keys: Keys = ()) -> VerifyResult:
    """Verify one envelope's record; never raises for a bad record (the result says).
    With `keys` (public keys, or `TrustedKey`s to name the signer), the record must carry a
    valid signature by one of them, found by the envelope's key id."""
    rid = record_id(env.record)
    kid = env.key_id
    try:
        state, signer = _check_signature(env, keyring(keys))
    except _SignatureError as exc:
        return VerifyResult(rid, 0, exc, exc.state, kid)
    try:
        hands = verify_record(env.record)
    except RecordError as exc:
        return VerifyResult(rid, 0, exc, state, kid, signer)
    return VerifyResult(rid, hands, None, state, kid, signer)


def verify_record(record_bytes: bytes) -> int:
    """Verify the bytes of a record (no envelope, no signature): they decode, are canonical,
    every field fits its game, the replay holds and gives exactly these bytes. Returns the
    number of hands; `RecordError` at the first fault."""
    rec = decode_canonical(record_bytes)
    match = replay_record(rec, check=False)
    units = find_game(rec.rules.game).units
    # The bytes a genuine replay gives; where they differ, the precise comparisons first (score
    # lines, scores, outcome) for their messages, then the first differing field.
    check_content(rec, match, record_bytes, lambda: compare_record(rec, match, units))
    return len(rec.hands)


def verify_frame(
    frame: bytes, keys: Keys = (), name: str = "input", index: int = 1
) -> VerifyResult:
    """Verify one frame of a record file (the bytes of an envelope). An envelope that does
    not parse is `file:bad-envelope`; one with an unknown field, or not stored as Tapis
    writes it (deterministic serialization), is refused before its signature is looked at."""
    try:
        env = parse_envelope(frame, name, index)
    except RecordFileError as exc:
        return _file_result(exc)
    clean = pb.RecordEnvelope()
    clean.CopyFrom(env)
    clean.DiscardUnknownFields()
    stored = clean.SerializeToString(deterministic=True)
    if stored != frame:
        rid = record_id(env.record)
        if env.SerializeToString(deterministic=True) != stored:
            error = RecordError(
                "envelope-unknown-field",
                "the envelope has a field this Tapis does not know",
            )
        else:
            error = RecordError(
                "envelope-noncanonical",
                "the envelope is not stored as Tapis writes it "
                "(fields repeated, out of order or not minimally encoded)",
            )
        return VerifyResult(rid, 0, error, "", env.key_id)
    return verify_envelope(env, keys)


def _file_result(exc: RecordFileError) -> VerifyResult:
    return VerifyResult("", 0, RecordFileError(f"file:{exc.code}", exc.message), "")


def _verify_one(frame: bytes, ring: Keys, name: str, index: int) -> VerifyResult:
    """`verify_frame`, and a failure of the verifier itself reported as a result (code
    `internal`), never a traceback for a record."""
    try:
        return verify_frame(frame, ring, name, index)
    except Exception as exc:  # a bug in Tapis
        return VerifyResult("", 0, internal_error(exc), "")


def internal_error(exc: Exception) -> RecordError:
    """The result's error when the verifier itself failed (code `internal`)."""
    return RecordError(
        "internal",
        f"the verifier failed ({type(exc).__name__}: {quoted(str(exc), 200)}): a bug in Tapis",
    )


def verify_data(
    data: bytes, name: str = "input", keys: Keys = ()
) -> Iterator[tuple[int | None, VerifyResult]]:
    """(index, result) per record of a record file's content, streamed; a problem of the file
    (codes `file:...`) is a result too, after the records before it: index None when the
    whole file is not a record file, else the index of the record it hits. After an envelope
    that does not parse the next records are still read (their framing is intact); after a
    truncated frame nothing more can be."""
    ring = list(keyring(keys).values())
    frames = iter_frames(data, name)
    index = 0
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            return
        except RecordFileError as exc:
            yield (index + 1 if exc.code == "truncated" else None), _file_result(exc)
            return
        index += 1
        yield index, _verify_one(frame, ring, name, index)


def verify_file(path: str | Path, keys: Keys = ()) -> Iterator[tuple[int | None, VerifyResult]]:
    """(index, result) per record of a record file, as `verify_data` gives them; an
    unreadable file is one `file:unreadable` result."""
    for _, index, result in verify_files([path], keys):
        yield index, result


VERIFY_CHUNK = 500  # records per task of `verify_files`


@dataclass(frozen=True)
class VerifyTask:
    """A chunk of a record file to verify: its frames, the first being record `first` of
    file `file` (its position in the paths given); or, without frames, a problem of that file
    (`problem`, at record `at` or at the file itself), reported in its place in the order."""

    file: int
    name: str
    first: int
    frames: tuple[bytes, ...]
    keys: tuple[TrustedKey, ...]
    problem: VerifyResult | None = None
    at: int | None = None


def verify_task(task: VerifyTask) -> list[tuple[int | None, VerifyResult]]:
    """(index, result) of a chunk's records, in order (run by an executor, in any
    process)."""
    if task.problem is not None:
        return [(task.at, task.problem)]
    return [
        (index, _verify_one(frame, task.keys, task.name, index))
        for index, frame in enumerate(task.frames, task.first)
    ]


def verify_files(
    paths: Iterable[str | Path],
    keys: Keys = (),
    executor: Executor | None = None,
    chunk: int = VERIFY_CHUNK,
) -> Generator[tuple[int, int | None, VerifyResult], None, None]:
    """(file, index, result) per record of each record file, `file` being its position in
    `paths`: the results of `verify_file`, file after file, in that order. The records are
    verified in chunks of `chunk`, tasks of `executor` (default: here, one after another),
    the results given in the order of the tasks (`map_in_order`)."""
    ring = tuple(keyring(keys).values())

    def tasks() -> Iterator[VerifyTask]:
        # Pulled by the executor as it has room; a file problem is a task too, in its place.
        for file, path in enumerate(paths):
            name = str(Path(path))
            index = 1  # the next record
            try:
                for first, frames in file_chunks(path, chunk):
                    index = first + len(frames)
                    yield VerifyTask(file, name, first, frames, ring)
            except RecordFileError as exc:
                hit = index if exc.code == "truncated" else None
                yield VerifyTask(file, name, index, (), (), _file_result(exc), hit)

    done = map_in_order(executor or SerialExecutor(), verify_task, tasks())
    try:
        for task, found in done:
            for index, result in found:
                yield task.file, index, result
    finally:
        done.close()  # stop a pool's workers now, not when collected


def result_json(file: str, index: int | None, result: VerifyResult) -> dict[str, Any]:
    """The JSON object of one result (`tapis record verify --json`, docs/verify.md)."""
    err = result.error
    return {
        "file": file,
        "index": index,
        "record_id": result.record_id or None,
        "ok": result.ok,
        "hands": result.hands,
        "signature": result.signature or None,
        "key_id": result.key_id or None,
        "signer": result.signer,
        "error": None
        if err is None
        else {"code": err.code, "hand": err.hand, "action": err.action, "message": err.message},
    }
