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
`verify_files` does the same for several files, verifying chunks of records (those of small
files batched together) as tasks of an executor (records/executors.py: here, or on a local
process pool) and giving the results in file and record order whatever order the chunks
complete in.

The replay is records/replay.py's, with verify's visitor: the one replay of a record that
verify, annotate, score, rescore, show and export share (`match_for_record`,
`replay_record` and `compare_record` are importable from here too). `verified_match` is
`verify_record` for the commands that show a record's content (score, show, export, html):
the record and its match, from the same replay, once the content follows from the rules.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tapis_cartes.records.clocks import AUTOPLAY_RULE, FORFEIT_RULE
from tapis_cartes.records.codec import (
    RecordFileError,
    decode_record,
    file_chunks,
    file_name,
    iter_frames,
    no_records,
    parse_envelope,
    record_id,
    unknown_field_path,
    where_bytes_differ,
)
from tapis_cartes.records.executors import Executor, SerialExecutor, map_in_order
from tapis_cartes.records.replay import (
    BaseVisitor,
    compare_record,
    match_for_record,
    replay,
    replay_record,
)
from tapis_cartes.records.signing import TrustedKey, signature_form, signature_holds
from tapis_cartes.records.strict import (
    check_content,
    content_holds,
    decode_apart,
    decode_canonical,
)
from tapis_cartes.referee.engine import Match, RecordError
from tapis_cartes.referee.engine.actions import RESIGN, action_str, encode
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.errors import SignatureError
from tapis_cartes.v1 import record_pb2 as pb

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
    "verified_match",
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

Keys = Sequence[
    Ed25519PublicKey | Ed25519PrivateKey | TrustedKey
]  # (a private key: its public one)


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


def keyring(keys: Keys) -> dict[str, TrustedKey]:
    """The keys by key id; a key given twice keeps the first label it was given."""
    ring: dict[str, TrustedKey] = {}
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        raise TypeError(f"keys are public keys (a list of them), not {type(keys).__name__}")
    for k in keys:
        if isinstance(k, Ed25519PrivateKey):  # (what a referee's key file holds)
            k = k.public_key()
        if not isinstance(k, TrustedKey | Ed25519PublicKey):
            raise TypeError(
                f"a key is an Ed25519 public key (records.signing: load_public_key), "
                f"not {type(k).__name__}"
            )
        tk = k if isinstance(k, TrustedKey) else TrustedKey.from_key(k)
        have = ring.get(tk.key_id)
        if have is None or (have.label is None and tk.label is not None):
            ring[tk.key_id] = tk
    return ring


def _check_signature(env: pb.RecordEnvelope, ring: dict[str, TrustedKey]) -> tuple[str, str | None]:
    """(signature state, signer label) of a signature that holds (or cannot be checked);
    `SignatureError` (code `signature-...`, and the state to report) when it does not."""
    if not ring:
        problem = signature_form(env)
        if problem is not None:
            raise SignatureError("malformed", "signature-malformed", f"the envelope has {problem}")
        return ("unchecked" if env.signature else "none"), None
    if not env.signature:
        raise SignatureError(
            "none", "signature-missing", "the record is not signed, and keys were given"
        )
    trusted = ring.get(env.key_id)
    if trusted is None:
        claims = f"key id {env.key_id[:80]!r}" if env.key_id else "no key id"
        raise SignatureError(
            "unknown-key",
            "signature-unknown-key",
            f"the envelope claims {claims}, which is not the id of a key given",
        )
    if not signature_holds(env, trusted.key):
        raise SignatureError(
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
    return _verify_envelope(env, keyring(keys))


def _verify_envelope(env: pb.RecordEnvelope, ring: dict[str, TrustedKey]) -> VerifyResult:
    """`verify_envelope` with the keys by key id (`keyring`)."""
    record = env.record  # a copy at each access
    rid = record_id(record)
    kid = env.key_id
    try:
        state, signer = _check_signature(env, ring)
    except SignatureError as exc:
        return VerifyResult(rid, 0, exc, exc.state, kid)
    try:
        hands = verify_record(record)
    except RecordError as exc:
        return VerifyResult(rid, 0, exc, state, kid, signer)
    return VerifyResult(rid, hands, None, state, kid, signer)


def verify_record(record_bytes: bytes) -> int:
    """Verify the bytes of a record (no envelope, no signature): they decode, are canonical,
    every field fits its game, the replay holds and gives exactly these bytes. Returns the
    number of hands; `RecordError` at the first fault."""
    return _verified(record_bytes).result()


def verified_match(record_bytes: bytes) -> tuple[pb.GameRecord, Match]:
    """The record the bytes decode to (hands and all) and its replayed match, once they
    verify as `verify_record` verifies them (`RecordError` at the first fault): what a
    command that shows a record's content (score, show, export, html) reads, so that nothing
    it shows is taken as it comes, from verify's one replay."""
    visitor = _verified(record_bytes)
    return _decoded(visitor.rec, record_bytes), visitor.match


def _verified(record_bytes: bytes) -> _VerifyVisitor:
    """Verify's visitor once the record's replay holds (`verify_record`)."""
    # The encoding, and the fields the rebuild covers (`check_fields`, `rebuilt`), are checked
    # only when the record fails: a record that passes is byte for byte what `build_record`
    # makes of its replay (`check_content`), so canonical, free of unknown fields and with
    # those fields right; one that fails is refused for its first fault in the order of the
    # full checks (`decode_canonical`, then `match_for_record`): the same code as when every
    # check came first. Unknown fields change nothing read.
    # The hands read from the bytes (the fields the engine reads): the record is decoded
    # without them, unless its visitor is told them (a timed record) or it fails.
    rec, hands = decode_apart(record_bytes)
    if hands is not None and rec.rules.HasField("time_control"):
        rec = decode_record(record_bytes)
    timed = rec.rules.HasField("time_control")
    visitor = _TimedVerifyVisitor(record_bytes) if timed else _VerifyVisitor(record_bytes)
    try:
        replay(rec, visitor, hands=hands, record_bytes=record_bytes)
    except RecordError:
        decode_canonical(record_bytes)
        match_for_record(_decoded(rec, record_bytes))
        raise
    return visitor


def _decoded(rec: pb.GameRecord, record_bytes: bytes) -> pb.GameRecord:
    """The record `record_bytes` decode to, hands and all (`rec`: as decoded by
    `verify_record`, perhaps without its hands)."""
    return rec if rec.hands else decode_record(record_bytes)


class _VerifyVisitor(BaseVisitor[int]):
    """Verify's replay: strict, every action at once; at the end the bytes a genuine replay
    gives, and where they differ the precise comparisons first (score lines, scores,
    outcome) for their messages, then the first differing field. The number of hands."""

    engine_fields_only = True

    def __init__(self, record_bytes: bytes) -> None:
        self.record_bytes = record_bytes

    def end_record(self) -> None:
        match, units, data = self.match, self.units, self.record_bytes
        if content_holds(self.rec, match, units, data, self.fields):
            return  # quick; else the rebuild
        rec = _decoded(self.rec, data)
        check_content(rec, match, data, lambda: compare_record(rec, match, units))

    def result(self) -> int:
        return len(self.fields)


class _TimedVerifyVisitor(_VerifyVisitor):
    """Verify's replay of a timed record: action by action, what the clocks' arithmetic
    (`check_timing`, done with the fields) cannot see alone: time counted only for a seat
    that could act, and each action made on time the one its policy makes (CLOCK.FORFEIT: a
    resignation; CLOCK.AUTOPLAY: the seat's default action)."""

    def begin_hand(self, h: int, hand: pb.HandRecord) -> None:
        self.elapsed = hand.elapsed_ms
        self.timeouts = frozenset(hand.timeouts)
        self.policy = self.rec.rules.time_control.policy

    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        match = self.match
        if self.elapsed[a - 1] and seat not in match.to_act():
            raise RecordError(
                "clock",
                f"seat {seat} could not act, yet its clock ran {self.elapsed[a - 1]} ms",
                hand=h,
                action=a,
            )
        if a not in self.timeouts:
            return
        if seat not in match.to_act():
            raise RecordError(
                "clock", f"seat {seat} timed out when it could not act", hand=h, action=a
            )
        if self.policy == pb.TIMEOUT_POLICY_FORFEIT:
            want = encode(RESIGN)
            rule = FORFEIT_RULE
        else:
            want = match.default_action(seat)
            rule = AUTOPLAY_RULE
        if action != want:
            raise RecordError(
                "clock",
                f"the action made on time is {action_str(action)}; {rule} makes {action_str(want)}",
                hand=h,
                action=a,
            )


def verify_frame(
    frame: bytes, keys: Keys = (), name: str = "input", index: int = 1
) -> VerifyResult:
    """Verify one frame of a record file (the bytes of an envelope). An envelope that does
    not parse is `file:bad-envelope`; one with an unknown field, or not stored as Tapis
    writes it (deterministic serialization), is refused before its signature is looked at."""
    return _verify_frame(frame, keyring(keys), name, index)


def _verify_frame(frame: bytes, ring: dict[str, TrustedKey], name: str, index: int) -> VerifyResult:
    """`verify_frame` with the keys by key id (`keyring`)."""
    try:
        env = parse_envelope(frame, name, index)
    except RecordFileError as exc:
        return _file_result(exc)
    # The envelope as Tapis would store it: without the fields it does not know. Only where
    # that is not the frame is it parsed again, to tell an unknown field from an encoding
    # that is not canonical.
    env.DiscardUnknownFields()
    stored = env.SerializeToString(deterministic=True)
    if stored != frame:
        rid = record_id(env.record)
        if parse_envelope(frame, name, index).SerializeToString(deterministic=True) != stored:
            where = unknown_field_path(frame, pb.RecordEnvelope.DESCRIPTOR)
            error = RecordError(
                "envelope-unknown-field",
                "the envelope has a field this Tapis does not know"
                + (f": {where}" if where else ""),
            )
        else:
            error = RecordError(
                "envelope-noncanonical",
                "the envelope is not stored as Tapis writes it "
                "(fields repeated, out of order or not minimally encoded): it differs at "
                + where_bytes_differ(frame, stored, pb.RecordEnvelope.DESCRIPTOR),
            )
        return VerifyResult(rid, 0, error, "", env.key_id)
    return _verify_envelope(env, ring)


def _file_result(exc: RecordFileError) -> VerifyResult:
    return VerifyResult("", 0, RecordFileError(f"file:{exc.code}", exc.message), "")


def _verify_one(frame: bytes, ring: dict[str, TrustedKey], name: str, index: int) -> VerifyResult:
    """`verify_frame`, and a failure of the verifier itself reported as a result (code
    `internal`), never a traceback for a record."""
    try:
        return _verify_frame(frame, ring, name, index)
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
    whole file is not a record file or holds none, else the index of the record it hits.
    After an envelope that does not parse the next records are still read (their framing is
    intact); after a truncated frame nothing more can be."""
    ring = keyring(keys)
    frames = iter_frames(data, name)
    index = 0
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            if index == 0:
                yield None, _file_result(no_records(name))
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
    ring = keyring(task.keys)
    return [
        (index, _verify_one(frame, ring, task.name, index))
        for index, frame in enumerate(task.frames, task.first)
    ]


def _verify_tasks(tasks: tuple[VerifyTask, ...]) -> list[list[tuple[int | None, VerifyResult]]]:
    """`verify_task` of each task (a batch run by an executor, in any process)."""
    return [verify_task(task) for task in tasks]


def _batched(tasks: Iterable[VerifyTask], size: int) -> Iterator[tuple[VerifyTask, ...]]:
    """The tasks (chunks of at most `size` records) in batches of at most `size` records, a
    file problem counting as one: the small files of `verify DIR/*` go to the executor
    together, not one task each. Even in one process that pays: the files of a batch are
    read one after another, then their records verified one after another, and the replays
    run faster away from the system calls (about a tenth less time a one-hand file)."""
    batch: list[VerifyTask] = []
    records = 0
    for task in tasks:
        weight = len(task.frames) or 1
        if batch and records + weight > size:
            yield tuple(batch)
            batch, records = [], 0
        batch.append(task)
        records += weight
    if batch:
        yield tuple(batch)


def verify_files(
    paths: Iterable[str | Path],
    keys: Keys = (),
    executor: Executor | None = None,
    chunk: int | None = None,
) -> Generator[tuple[int, int | None, VerifyResult], None, None]:
    """(file, index, result) per record of each record file, `file` being its position in
    `paths`: the results of `verify_file`, file after file, in that order. The records are
    verified in chunks of `chunk` (default `VERIFY_CHUNK`), the chunks of small files
    batched up to that many records, tasks of `executor` (default: here, one after another),
    the results given in the order of the tasks (`map_in_order`)."""
    ring = tuple(keyring(keys).values())
    size = max(1, chunk or VERIFY_CHUNK)

    def tasks() -> Iterator[VerifyTask]:
        # Pulled by the executor as it has room; a file problem is a task too, in its place.
        for file, path in enumerate(paths):
            name = file_name(path)
            index = 1  # the next record
            try:
                for first, frames in file_chunks(path, size, name):
                    index = first + len(frames)
                    yield VerifyTask(file, name, first, frames, ring)
            except RecordFileError as exc:
                hit = index if exc.code == "truncated" else None
                yield VerifyTask(file, name, index, (), (), _file_result(exc), hit)

    done = map_in_order(executor or SerialExecutor(), _verify_tasks, _batched(tasks(), size))
    try:
        for batch, found in done:
            for task, results in zip(batch, found, strict=True):
                for index, result in results:
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
