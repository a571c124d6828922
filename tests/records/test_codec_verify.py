"""Records: canonical bytes (golden vectors), record files, verification of tampered
records, and a decoder/verifier that never crashes on mutated input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapis_cartes.records.codec import (
    MAGIC,
    RecordFileError,
    decode_record,
    encode_file,
    envelope,
    file_chunks,
    file_name,
    iter_frames,
    read_envelopes,
    record_id,
    write_envelopes,
    write_frames,
)
from tapis_cartes.records.transcript import import_transcript
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import tapis

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = {
    "dame-de-pique-dp1": DATA / "dame-de-pique-dp1.tapis",
    "napoleon-n1": DATA / "napoleon-n1.tapis",
}


def imported(name: str) -> bytes:
    return import_transcript(json.loads((DATA / f"{name}.json").read_text()), f"{name}.json")


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_bytes(name: str) -> None:
    """Importing the golden transcript gives the stored bytes exactly: a change of protobuf
    or of the engine that would change new records fails here."""
    data = GOLDEN[name].read_bytes()
    (env,) = read_envelopes(GOLDEN[name])
    assert env.record == imported(name)
    assert encode_file([env]) == data  # read and written back identical
    assert verify_envelope(env).ok


def test_stream_of_records(tmp_path: Path) -> None:
    envs = [envelope(imported(n)) for n in sorted(GOLDEN)] * 3
    path = tmp_path / "many.tapis"
    write_envelopes(path, envs)
    back = read_envelopes(path)
    assert [e.record for e in back] == [e.record for e in envs]
    assert path.read_bytes().startswith(MAGIC)
    assert [p.name for p in tmp_path.iterdir()] == ["many.tapis"]  # no temporary left


def test_record_file_errors(tmp_path: Path) -> None:
    good = encode_file([envelope(imported("napoleon-n1"))])
    not_records = tmp_path / "x.json"
    not_records.write_text("{}")
    with pytest.raises(RecordFileError) as exc:
        read_envelopes(not_records)
    assert exc.value.code == "not-a-record-file"
    truncated = tmp_path / "t.tapis"
    truncated.write_bytes(good[:-5])
    with pytest.raises(RecordFileError) as exc:
        read_envelopes(truncated)
    assert exc.value.code == "truncated" and "record 1 claims" in str(exc.value)
    with pytest.raises(RecordFileError) as exc:
        read_envelopes(tmp_path / "missing.tapis")
    assert exc.value.code == "unreadable"
    # A length prefix of more than 10 bytes, more data after it: no truncation, a damage.
    overlong = tmp_path / "o.tapis"
    overlong.write_bytes(good + b"\xff" * 11 + b"\x01" + b"x" * 100)
    with pytest.raises(RecordFileError) as exc:
        read_envelopes(overlong)
    assert exc.value.code == "bad-envelope", exc.value
    assert f"record 2's length prefix at byte {len(good)} is longer than" in str(exc.value)


# A file of at most 1 MiB is read in one call, a larger one as a stream (records/codec.py).
@pytest.mark.parametrize("frame_size", [100, 300_000], ids=["read-whole", "streamed"])
def test_file_chunks_of_a_file_read_whole_or_streamed(tmp_path: Path, frame_size: int) -> None:
    frames = [bytes([i]) * (frame_size + i) for i in range(10)]
    path = tmp_path / "frames.tapis"
    write_frames(path, frames)
    chunks = list(file_chunks(path, 3))
    assert [first for first, _ in chunks] == [1, 4, 7, 10]
    assert [f for _, chunk in chunks for f in chunk] == frames
    cut = tmp_path / "cut.tapis"
    cut.write_bytes(path.read_bytes()[:-1])
    got: list[bytes] = []
    with pytest.raises(RecordFileError) as exc:
        for _, chunk in file_chunks(cut, 3):
            got.extend(chunk)
    assert got == frames[:9]
    assert exc.value.code == "truncated" and f"{cut}: record 10 claims" in str(exc.value)
    with pytest.raises(RecordFileError) as exc:
        list(file_chunks(tmp_path, 3))  # a folder
    assert exc.value.code == "unreadable" and str(exc.value).startswith(f"{tmp_path}: ")


def _tampered(mutate: object) -> pb.RecordEnvelope:
    rec = decode_record(imported("dame-de-pique-dp1"))
    mutate(rec)  # type: ignore[operator]
    return envelope(rec.SerializeToString(deterministic=True))


def _play(card: str) -> int:
    from tapis_cartes.referee.engine.actions import PLAY, encode
    from tapis_cartes.referee.engine.cards import parse_card

    return encode(PLAY, parse_card(card))


@pytest.mark.parametrize(
    ("name", "mutate", "code", "hand", "action"),
    [
        (
            "illegal card",
            lambda r: r.hands[0].actions.__setitem__(7, _play("6H")),
            "action:no-points-first-trick",
            1,
            8,
        ),
        (
            "swapped seat",
            lambda r: setattr(r.hands[0], "seats", b"\x00" * 56),
            "action:not-your-turn",
            1,
            2,
        ),
        (
            "score line",
            lambda r: setattr(r.hands[0].lines[0].delta, "points", 9),
            "score-lines",
            1,
            56,
        ),
        (
            "rule id",
            lambda r: setattr(r.hands[0].lines[3], "rule", "DP.VOLTE"),
            "score-lines",
            1,
            56,
        ),
        (
            "scores after",
            lambda r: setattr(r.hands[0].scores_after[1], "points", 1),
            "scores",
            1,
            None,
        ),
        ("total", lambda r: setattr(r.outcome.scores[1], "points", 1), "outcome", None, None),
        ("finished", lambda r: setattr(r.outcome, "finished", True), "outcome", None, None),
        ("winner", lambda r: r.outcome.winners.append(1), "outcome", None, None),
        ("digest", lambda r: setattr(r.rules, "digest", "0" * 64), "rules-digest", None, None),
        (
            "option",
            lambda r: setattr(r.rules.options[0], "int_value", 50),
            "rules",
            None,
            None,
        ),
        ("hand number", lambda r: setattr(r.hands[0], "number", 2), "hand-number", 1, None),
        (
            "deal",
            lambda r: r.hands[0].deal.hands.__setitem__(0, r.hands[0].deal.hands[0] ^ 1),
            "deal:duplicate-card",
            1,
            None,
        ),
        ("format", lambda r: setattr(r, "format_version", 2), "format-version", None, None),
        ("game", lambda r: setattr(r.rules, "game", "hearts"), "rules", None, None),
    ],
)
def test_tampered_records_are_caught_with_position(
    name: str, mutate: object, code: str, hand: int | None, action: int | None
) -> None:
    result = verify_envelope(_tampered(mutate))
    assert not result.ok, name
    assert result.error is not None
    assert (result.error.code, result.error.hand, result.error.action) == (code, hand, action)


def test_an_empty_frame_is_named_as_holding_no_record(tmp_path: Path) -> None:
    """An empty frame (an envelope of no bytes) between two records: `verify` names it as
    holding no record, not as a record of an unknown format version, and checks the others."""
    path = tmp_path / "three.tapis"
    good = envelope(imported("napoleon-n1")).SerializeToString()
    write_frames(path, [good, b"", good])
    done = tapis("record", "verify", path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "record 2" in done.stdout and "holds no record" in done.stdout, done.stdout
    assert "format version 0" not in done.stdout + done.stderr
    assert "3 records, 2 valid, 1 invalid" in done.stdout, done.stdout


def test_record_id_is_sha256_of_the_stored_bytes() -> None:
    data = imported("napoleon-n1")
    import hashlib

    assert record_id(data) == hashlib.sha256(data).hexdigest()
    assert verify_envelope(envelope(data)).record_id == record_id(data)


def test_every_byte_flip_of_a_record_is_handled() -> None:
    """Flipping any byte of the record bytes never crashes the verifier; most flips are
    caught (what is not checked without a signature: free text such as provenance)."""
    data = imported("napoleon-n1")
    caught = 0
    for i in range(len(data)):
        for flip in (0x01, 0x80, 0xFF):
            mutated = bytearray(data)
            mutated[i] ^= flip
            result = verify_envelope(envelope(bytes(mutated)))
            caught += not result.ok
    assert caught > 0.8 * 3 * len(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=600))
def test_random_bytes_never_crash(data: bytes) -> None:
    result = verify_envelope(envelope(data))
    assert result.ok or result.error is not None


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_files_never_crash(data: st.DataObject) -> None:
    good = bytearray(encode_file([envelope(imported("napoleon-n1"))]))
    n = data.draw(st.integers(1, 8))
    for _ in range(n):
        i = data.draw(st.integers(0, len(good) - 1))
        good[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(good)))
    blob = bytes(good[:cut])
    try:
        frames = list(iter_frames(blob))
    except RecordFileError:
        return
    for frame in frames:
        try:
            env = pb.RecordEnvelope.FromString(frame)
        except Exception:
            continue
        result = verify_envelope(env)
        assert result.ok or result.error is not None


def test_a_file_is_named_as_its_path_names_it() -> None:
    """`file_name` (a plain path string as it is, without building a `Path`) is
    `str(Path(path))` for every path of up to five pieces of slashes, dots and names."""
    pieces = ["a", "/", ".", "..", "b.c", "//", "./", " "]
    for k in range(1, 6):
        for parts in itertools.product(pieces, repeat=k):
            path = "".join(parts)
            assert file_name(path) == str(Path(path)), path
            assert file_name(Path(path)) == str(Path(path)), path
