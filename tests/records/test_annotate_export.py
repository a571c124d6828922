"""Annotations (legal actions, forced plays, trick winners, score lines, comments), signing,
the protobuf JSON export and the transcript export: in the library and through `tapis`."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tapis_cartes.records import export
from tapis_cartes.records.annotate import MAX_COMMENT, CommentError, annotate, parse_comment
from tapis_cartes.records.codec import (
    MAGIC,
    decode_record,
    encode_file,
    encode_varint,
    read_envelopes,
    write_envelopes,
    write_frames,
)
from tapis_cartes.records.export import (
    ExportError,
    envelopes_from_json,
    envelopes_to_json,
    record_to_transcript,
    transcript_text,
)
from tapis_cartes.records.html import replay_data
from tapis_cartes.records.render import render_record
from tapis_cartes.records.signing import sign
from tapis_cartes.records.transcript import import_transcript, load_transcript
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine.actions import PLAY, encode
from tapis_cartes.referee.engine.cards import parse_card
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import DATA, tapis
from tests.records.mutants import corpus

DP1 = DATA / "dame-de-pique-dp1.tapis"
TRANSCRIPTS = sorted(DATA.glob("*.json"))
FORCED_DP1 = {5, 26, 30, 31, 32, 38, 39, 40, 46, 53, 54, 55, 56}


def dp1() -> tuple[pb.RecordEnvelope, pb.GameRecord]:
    env = read_envelopes(DP1)[0]
    return env, decode_record(env.record)


# --- annotations --------------------------------------------------------------------------


def test_annotations_of_dp1() -> None:
    _, rec = dp1()
    notes = annotate(rec).actions
    assert [(a.hand, a.action) for a in notes] == [(1, i) for i in range(1, 57)]
    for a, played in zip(notes, rec.hands[0].actions, strict=True):
        assert played in a.legal
        assert a.forced == (len(a.legal) == 1)
    # The exchange: any three of thirteen cards.
    assert [len(a.legal) for a in notes[:4]] == [286] * 4
    # The holder of the 2 of clubs must lead it; then West has three clubs to follow with.
    assert list(notes[4].legal) == [encode(PLAY, parse_card("2C"))]
    assert notes[4].forced
    assert len(notes[5].legal) == 3
    assert len(notes[7].legal) == 9  # East, void in clubs, may discard anything but QS / hearts
    assert {a.action for a in notes if a.forced} == FORCED_DP1
    winners = [(a.action, a.trick_winner) for a in notes if a.HasField("trick_winner")]
    assert [w[0] for w in winners] == list(range(8, 57, 4))
    assert winners[:4] == [(8, 3), (12, 2), (16, 3), (20, 0)]
    # Only the last action scores: the four penalty lines of the hand.
    assert [a.action for a in notes if a.lines] == [56]
    lines = notes[-1].lines
    assert [(li.seat, li.kind, li.delta.points, li.rule) for li in lines] == [
        (0, "penalty", 8, "DP.SCORE"),
        (1, "penalty", 0, "DP.SCORE"),
        (2, "penalty", 14, "DP.SCORE"),
        (3, "penalty", 4, "DP.SCORE"),
    ]
    assert all(li.after_action == 56 for li in lines)
    assert list(lines) == list(rec.hands[0].lines)


def test_comments_added_kept_and_checked() -> None:
    _, rec = dp1()
    assert parse_comment("1:5:lead: the 2C") == (1, 5, "lead: the 2C")
    for bad in ("1:5", "x:5:text", "0:5:text", "1:5:  "):
        with pytest.raises(CommentError):
            parse_comment(bad)
    # A number of 20 digits was said to be no HAND:ACTION:TEXT.
    with pytest.raises(CommentError, match="a hand or action number of more than 9 digits"):
        parse_comment("99999999999999999999:1:x")
    first = annotate(rec, [(1, 5, "the 2C leads"), (1, 5, "as always")])
    assert list(first.actions[4].comments) == ["the 2C leads", "as always"]
    # Annotating again recomputes the analysis and keeps the comments already there.
    again = annotate(rec, [(1, 56, "the last card")], first)
    assert list(again.actions[4].comments) == ["the 2C leads", "as always"]
    assert list(again.actions[55].comments) == ["the last card"]
    assert sum(len(a.comments) for a in again.actions) == 3
    with pytest.raises(CommentError, match="hand 1, action 57: hand 1 has 56 actions"):
        annotate(rec, [(1, 57, "too far")])
    with pytest.raises(CommentError, match="hand 2, action 1: the record has 1 hand"):
        annotate(rec, [(2, 1, "no such hand")])
    # A comment is at most MAX_COMMENT characters, at the command line and in the library.
    assert annotate(rec, [(1, 5, "é" * MAX_COMMENT)]).actions[4].comments[0] == "é" * MAX_COMMENT
    long = "x" * (MAX_COMMENT + 1)
    with pytest.raises(CommentError, match=r"hand 1, action 5: 1001 characters \(at most 1000\)"):
        parse_comment(f"1:5:{long}")
    with pytest.raises(CommentError, match=r"hand 1, action 5: 1001 characters \(at most 1000\)"):
        annotate(rec, [(1, 5, long)])


def test_annotate_refuses_a_comment_past_its_bound(tmp_path: Path) -> None:
    out = tmp_path / "a.tapis"
    done = tapis("record", "annotate", DP1, "-o", out, "--comment", "1:5:" + "x" * 100_000)
    assert done.returncode == 2, done.stderr
    assert "100000 characters (at most 1000)" in done.stderr and not out.exists()
    assert len(done.stderr) < 400


def test_annotations_beyond_one_per_action_are_refused_before_they_are_decoded(
    tmp_path: Path,
) -> None:
    """Annotations are outside the signature: anyone can add them to a genuine record. Three
    million empty ones (6 MB) once made `export --format json` take most of a gigabyte; an
    envelope holds at most one per action of its record, each of at most 1000 values, none of
    its comments or score lines over 4000 bytes (a comment is 1000 characters at most: one of
    60 MB took a reader to 400 MB), and the excess is refused before anything is decoded, in
    every command that reads the file (here in a child limited to 400 MB)."""
    env, rec = dp1()
    actions = sum(len(h.actions) for h in rec.hands)
    frame = env.SerializeToString(deterministic=True)
    notes = {
        "many": b"\x0a\x00" * 3_000_000,
        "one more": b"\x0a\x00" * (actions + 1),
        "legal": _field(1, _field(3, b"\x01" * 1001)),  # one annotation, 1001 legal actions
        "comments": _field(1, b"\x3a\x00" * 1001),  # one annotation, 1001 empty comments
        # one annotation, one comment of 60 MB (annotate makes none past 1000 characters)
        "a long comment": _field(1, _field(7, b"x" * 60_000_000)),
        "a long score line": _field(1, _field(6, _field(2, b"k" * 5000))),
    }
    for name, body in notes.items():
        path = tmp_path / f"{name}.tapis"
        write_frames(path, [frame + _field(4, body)])
        for command in (["export", "--format", "json"], ["show"], ["verify"]):
            done = tapis("record", *command, path, memory_limit=400 << 20)
            assert done.returncode == 2, (name, command, done.stderr)
            said = done.stdout + done.stderr
            assert "annotation" in said and "record 1" in said, (name, command, said)
            assert len(said) < 1000
    # One per action, as `annotate` makes them, is what a record holds: comments of 1000
    # characters of 4 bytes each too.
    longest = "\U0001f0a1" * MAX_COMMENT
    full = pb.RecordEnvelope(record=env.record, annotations=annotate(rec, [(1, 8, longest)]))
    path = tmp_path / "annotated.tapis"
    write_envelopes(path, [full])
    assert tapis("record", "export", "--format", "json", path).returncode == 0


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited field of the wire format: key, length, bytes."""
    return bytes([number << 3 | 2]) + encode_varint(len(body)) + body


def test_annotating_a_signed_record_keeps_the_signature() -> None:
    env, rec = dp1()
    key = Ed25519PrivateKey.generate()
    signed = sign(env.record, key)
    signed.annotations.CopyFrom(annotate(rec, [(1, 8, "East drops the AS")]))
    back = pb.RecordEnvelope.FromString(signed.SerializeToString())
    assert back.record == env.record
    assert verify_envelope(back, [key.public_key()]).ok
    other = Ed25519PrivateKey.generate().public_key()
    assert not verify_envelope(back, [other]).ok


def test_show_marks_forced_actions_and_comments() -> None:
    env, rec = dp1()
    notes = annotate(rec, [(1, 1, "keeps no spade"), (1, 5, "the 2C leads")])
    text = render_record(rec, env.record, notes)
    assert "  North: pass AS 2H 5H  # keeps no spade" in text
    assert " 1. South 2C (forced)  West 6C " in text
    assert "      # South 2C: the 2C leads" in text
    assert "(forced)" not in render_record(rec, env.record)


def test_every_comment_an_envelope_holds_is_shown(tmp_path: Path) -> None:
    """An envelope is anyone's to write: two annotations of one action, and a comment on a
    position the record does not have, are shown (by `show` and on the replay page), never
    passed over; `annotate` refuses the file, naming the position."""
    env, _ = dp1()
    env.annotations.actions.add(hand=1, action=5, comments=["first"])
    env.annotations.actions.add(hand=1, action=5, comments=["second"])
    env.annotations.actions.add(hand=9, action=1, comments=["on no action"])
    path = tmp_path / "stray.tapis"
    write_envelopes(path, [env])
    shown = tapis("record", "show", path)
    assert shown.returncode == 0, shown.stderr
    assert "      # South 2C: first\n      # South 2C: second\n" in shown.stdout
    assert (
        "Comments on positions the record does not have (its annotations are unsigned):\n"
        "  hand 9, action 1  # on no action\n"
    ) in shown.stdout
    data = replay_data([env])["records"][0]
    assert data["hands"][0]["positions"][5]["comments"] == ["first", "second"]
    assert data["stray_comments"] == [[9, 1, "on no action"]]
    refused = tapis("record", "annotate", path, "-o", tmp_path / "out.tapis")
    assert refused.returncode == 1
    assert "a comment the file holds on hand 9, action 1: the record has 1 hand" in refused.stderr


def test_annotate_refuses_an_invalid_record_as_verify_says_it(tmp_path: Path) -> None:
    _, rec = dp1()
    rec.outcome.scores[0].points += 100  # a final score the rules did not make
    path = tmp_path / "raised.tapis"
    write_envelopes(path, [pb.RecordEnvelope(record=rec.SerializeToString(deterministic=True))])
    said = tapis("record", "verify", path)
    refused = tapis("record", "annotate", path, "-o", tmp_path / "out.tapis")
    assert said.returncode == refused.returncode == 1
    assert ": INVALID: " in refused.stdout + refused.stderr
    # the same words and code as verify
    reason = (said.stdout + said.stderr).split("INVALID: ", 1)[1].splitlines()[0]
    assert f"{path}: INVALID: {reason}" in refused.stderr
    assert not (tmp_path / "out.tapis").exists()


# --- protobuf JSON ------------------------------------------------------------------------


def annotated_signed_file(tmp_path: Path) -> Path:
    env, rec = dp1()
    signed = sign(env.record, Ed25519PrivateKey.generate())
    signed.annotations.CopyFrom(annotate(rec, [(1, 5, "été: « forcé »")]))
    path = tmp_path / "signed.tapis"
    write_envelopes(path, [signed, *read_envelopes(DATA / "napoleon-n1.tapis")])
    return path


@pytest.mark.parametrize("name", [p.stem for p in sorted(DATA.glob("*.tapis"))])
def test_json_round_trip_is_byte_identical(name: str) -> None:
    path = DATA / f"{name}.tapis"
    envs = read_envelopes(path)
    assert encode_file(envelopes_from_json(envelopes_to_json(envs))) == path.read_bytes()


def test_json_round_trip_of_signed_annotated_records(tmp_path: Path) -> None:
    path = annotated_signed_file(tmp_path)
    text = envelopes_to_json(read_envelopes(path))
    doc = json.loads(text)
    first = doc["records"][0]
    assert set(first) == {"record", "signature", "key_id", "annotations", "decoded"}
    assert first["decoded"]["rules"]["game"] == "dame-de-pique"
    assert first["annotations"]["actions"][4]["forced"] is True
    assert encode_file(envelopes_from_json(text)) == path.read_bytes()


def test_json_import_refuses_bad_input(tmp_path: Path) -> None:
    text = envelopes_to_json(read_envelopes(DP1))
    with pytest.raises(ExportError, match=r"not valid JSON: .* at line \d+, column"):
        envelopes_from_json(text[:-40])
    with pytest.raises(ExportError, match="not a record export"):
        envelopes_from_json('{"format": "something-else", "records": []}')
    doc = json.loads(text)
    doc["records"][0]["decoded"]["seats"][0]["name"] = "Nord"
    with pytest.raises(ExportError, match=r"records\[1\].decoded does not match"):
        envelopes_from_json(json.dumps(doc))
    doc = json.loads(text)
    doc["records"][0]["keyId"] = 7
    with pytest.raises(ExportError, match=r"records\[1\]"):
        envelopes_from_json(json.dumps(doc))
    doc = json.loads(text)
    doc["records"][0]["record"] = "AAAA"
    with pytest.raises(ExportError, match=r"records\[1\].record"):
        envelopes_from_json(json.dumps(doc))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.pop("record"), r"^records\[1\]\.record: missing \(the record's bytes"),
        (lambda e: e.__setitem__("record", ""), r"^records\[1\]\.record: missing"),
        (lambda e: e.__setitem__("record", 12345), r"^records\[1\]\.record: expected .*not int$"),
        (lambda e: e.__setitem__("record", [1, 2]), r"^records\[1\]\.record: expected .*not list$"),
        (
            lambda e: e.__setitem__("signature", "AAAA"),
            r"^records\[1\]: the envelope has a signature of 3 bytes \(an Ed25519 .* has 64\)",
        ),
        (
            lambda e: e.__setitem__("key_id", "NOT-HEX"),
            r"^records\[1\]: the envelope has a key id that is not 64 lowercase hex digits,"
            r" 'NOT-HEX'",
        ),
        (lambda e: e.pop("key_id"), r"^records\[1\]: the envelope has a signature without"),
    ],
    ids=["no record", "empty record", "record a number", "record a list", "short signature",
         "key id not hex", "signature without key id"],
)  # fmt: skip
def test_json_import_names_a_bad_envelope(
    change: Callable[[dict[str, Any]], object], message: str, tmp_path: Path
) -> None:
    """What `import-json` would write must be an envelope `verify` can read: its record
    present as base64 bytes, its signature (if any) of a signature's form; else the envelope
    is named, with what is wrong, and nothing is written."""
    doc = json.loads(envelopes_to_json(read_envelopes(annotated_signed_file(tmp_path))))
    change(doc["records"][0])
    with pytest.raises(ExportError, match=message):
        envelopes_from_json(json.dumps(doc))
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(doc))
    out = tmp_path / "out.tapis"
    done = tapis("record", "import-json", source, "-o", out)
    assert done.returncode == 1, done.stderr
    assert "records[1]" in done.stderr and not out.exists()


def _with(path: list[str | int], value: Any) -> Callable[[dict[str, Any]], str]:
    """A change of the export: `value` set at `path` (below the first envelope)."""

    def change(doc: dict[str, Any]) -> str:
        *inner, last = path
        target = doc["records"][0]
        for key in inner:
            target = target[key]
        target[last] = value
        return json.dumps(doc)

    return change


def _twice(key: str, first: str) -> Callable[[dict[str, Any]], str]:
    """A change of the export: `"key": first` written before the first `"key": ...`."""
    return lambda doc: json.dumps(doc).replace(f'"{key}": ', f'"{key}": {first}, "{key}": ', 1)


def _more_annotations(doc: dict[str, Any]) -> str:
    notes = doc["records"][0]["annotations"]["actions"]
    notes.append(dict(notes[-1]))  # one more than the record's 56 actions
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            _more_annotations,
            r"^records\[1\]: the envelope holds more annotations than its record has actions"
            r" \(56\): Tapis makes one per action$",
        ),
        (
            _with(["annotations", "actions", 0, "legal"], ["1"] * 1001),
            r"^records\[1\]: annotation 1: more than 1000 values$",
        ),
        (
            _with(["annotations", "actions", 0, "comments"], ["\U0001f0a1" * 1001]),
            r"^records\[1\]: annotation 1: a comment or score line of 4004 bytes",
        ),
        (_twice("records", "[]"), r"^duplicate key 'records'$"),
        (_twice("record", '""'), r"^records\[1\]: duplicate key 'record'$"),
        (
            _twice("forced", "false"),
            r"^records\[1\]\.annotations\.actions\[4\]: duplicate key 'forced'$",
        ),
        (
            _with(["annotations", "actions", 0, "hand"], float("nan")),
            r"^records\[1\]\.annotations\.actions\[0\]\.hand: NaN is not a JSON number$",
        ),
        (
            _with(["decoded", "seats", 0, "team"], -float("inf")),
            r"^records\[1\]\.decoded\.seats\[0\]\.team: -Infinity is not a JSON number$",
        ),
        (
            lambda doc: json.dumps(doc | {"comment": "mine"}),
            r"^unknown key 'comment'; expected format, records$",
        ),
        (
            lambda doc: _with(["record"], "!!!!" + doc["records"][0]["record"])(doc),
            r"^records\[1\]\.record: not base64 \(only base64 data is allowed\)$",
        ),
        (  # a padding character less (dp1's record ends with "==")
            lambda doc: _with(["record"], doc["records"][0]["record"][:-1])(doc),
            r"^records\[1\]\.record: not base64 \(incorrect padding\)$",
        ),
        (
            lambda doc: _with(["signature"], "\n" + doc["records"][0]["signature"])(doc),
            r"^records\[1\]\.signature: not base64 \(only base64 data is allowed\)$",
        ),
    ],
    ids=["more annotations than actions", "annotation of 1001 values", "comment of 4004 bytes",
         "top key twice", "envelope key twice", "annotation key twice", "NaN", "-Infinity",
         "unknown top key", "junk in record base64", "record base64 padding",
         "junk in signature base64"],
)  # fmt: skip
def test_json_import_is_as_strict_as_the_readers(
    change: Callable[[dict[str, Any]], str], message: str, tmp_path: Path
) -> None:
    """`import-json` reads as strictly as `import` reads a transcript and as every reader
    reads an envelope: it writes no envelope the readers refuse (`file:bad-envelope`: more
    annotations than the record has actions, an annotation past its bounds), and it refuses a
    key given twice (JSON would let the last one win), NaN and Infinity (no JSON numbers),
    base64 with characters outside its alphabet (protobuf would skip them) and a key the
    format does not have; each naming its place, writing nothing, ending with 1."""
    doc = json.loads(envelopes_to_json(read_envelopes(annotated_signed_file(tmp_path))))
    text = change(doc)
    with pytest.raises(ExportError, match=message):
        envelopes_from_json(text)
    source = tmp_path / "bad.json"
    source.write_text(text, encoding="utf-8")
    out = tmp_path / "out.tapis"
    done = tapis("record", "import-json", source, "-o", out)
    assert done.returncode == 1, done.stderr
    said = done.stderr.strip().removeprefix(f"{source}: ")
    assert re.search(message, said), said
    assert not out.exists() and not done.stdout


def test_json_import_refuses_an_envelope_larger_than_a_record_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An envelope larger than the readers read (64 MiB; an export of at most
    `MAX_EXPORT_JSON`, 256 MiB, can give one its comments) is not written either (here under a
    bound of 100 bytes)."""
    text = envelopes_to_json(read_envelopes(DP1))
    monkeypatch.setattr(export, "MAX_ENVELOPE", 100)
    with pytest.raises(ExportError, match=r"^records\[1\]: an envelope of \d+ bytes, more than a"):
        envelopes_from_json(text)


def test_json_import_reads_past_a_byte_order_mark(tmp_path: Path) -> None:
    """A byte order mark, which some editors write first, is read past (as `import` reads a
    transcript)."""
    source = tmp_path / "bom.json"
    source.write_bytes(codecs.BOM_UTF8 + envelopes_to_json(read_envelopes(DP1)).encode("utf-8"))
    out = tmp_path / "out.tapis"
    done = tapis("record", "import-json", source, "-o", out)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == DP1.read_bytes()


# --- transcripts --------------------------------------------------------------------------


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=[p.stem for p in TRANSCRIPTS])
def test_transcript_round_trip(path: Path) -> None:
    original = import_transcript(load_transcript(path), path.name)
    text = transcript_text(decode_record(original))
    assert import_transcript(json.loads(text), path.name) == original
    assert json.loads(text)["format"] == "tapis-transcript/1"


def test_every_record_that_exports_to_a_transcript_imports_again() -> None:
    """A transcript holds whole hands (TRANSCRIPT.md): a match the referee stopped in the
    middle of a hand was exported (exit 0) to a transcript its import refused ("the hand is
    not finished"). Every record of every game and end either exports to a transcript that
    imports to the same record, or is refused at export, naming its unfinished hand."""
    refused = []
    for label, data in corpus():
        rec = decode_record(data)
        try:
            text = transcript_text(rec)
        except ExportError as exc:
            assert "was stopped before its end" in str(exc), str(exc)
            refused.append(label)
            continue
        again = decode_record(import_transcript(json.loads(text), "t.json"))
        assert (again.hands, again.outcome, again.seats) == (rec.hands, rec.outcome, rec.seats)
    assert refused and all(label.endswith("/stopped") for label in refused), refused


def test_a_timed_match_has_no_transcript() -> None:
    """A transcript holds no clocks: a timed match exported to one would come back untimed,
    its losses on time as resignations and the referee's moves on time as the seats' own.
    It is refused, naming why, rather than exported without them."""
    rec = decode_record(import_transcript(load_transcript(TRANSCRIPTS[0]), "t.json"))
    assert json.loads(transcript_text(rec))["format"] == "tapis-transcript/1"
    rec.rules.time_control.CopyFrom(pb.TimeControl(budget_ms=60_000))
    with pytest.raises(ExportError, match=r"^a timed match: a transcript holds no clocks"):
        transcript_text(rec)


def test_transcript_export_keeps_options_start_and_pack() -> None:
    doc = load_transcript(DATA / "dame-de-pique-dp1.json")
    doc["options"] = {"end_threshold": 50}
    doc["start"] = {"hand_number": 5, "scores": [{"points": 3}, {}, {"points": 9}, {}]}
    original = import_transcript(doc, "x.json")
    out = record_to_transcript(decode_record(original))
    assert out["options"] == {"end_threshold": 50}
    assert out["start"] == {
        "hand_number": 5,
        "scores": [{"points": 3}, {"points": 0}, {"points": 9}, {"points": 0}],
    }
    assert out["hands"][0]["actions"][0] == {"seat": 0, "pass": ["AS", "2H", "5H"]}
    assert import_transcript(out, "x.json") == original
    plain = record_to_transcript(decode_record(import_transcript(load_transcript(TRANSCRIPTS[0]))))
    assert "options" not in plain and "start" not in plain and "ruleset" not in plain
    pille = decode_record(read_envelopes(DATA / "triomphe-as-qui-pille.tapis")[0].record)
    assert "deck" in record_to_transcript(pille)["hands"][1]


# --- the command line ---------------------------------------------------------------------


def test_cli_sign_annotate_show_verify(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    assert tapis("key", "new", key).returncode == 0
    rec = tmp_path / "dp1.tapis"
    rec.write_bytes(DP1.read_bytes())
    r = tapis("record", "sign", rec, "--key", key)
    assert r.returncode == 0, r.stderr
    assert "1 record signed (" in r.stdout
    assert tapis("record", "verify", "--key", key, rec).returncode == 0

    out = tmp_path / "annotated.tapis"
    r = tapis("record", "annotate", rec, "-o", out,
              "--comment", "1:5:the 2C leads", "--comment", "1:1:keeps no spade")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "56 actions annotated" in r.stdout
    (env,) = read_envelopes(out)
    assert env.record == read_envelopes(DP1)[0].record
    assert list(env.annotations.actions[4].comments) == ["the 2C leads"]
    r = tapis("record", "verify", "--key", key, out)
    assert r.returncode == 0, r.stdout

    r = tapis("record", "show", out)
    assert r.returncode == 0, r.stderr
    assert " 1. South 2C (forced)  West 6C " in r.stdout
    assert "# South 2C: the 2C leads" in r.stdout
    assert "North: pass AS 2H 5H  # keeps no spade" in r.stdout

    # Re-signing (with another key) keeps the annotations.
    key2 = tmp_path / "k2.pem"
    assert tapis("key", "new", key2).returncode == 0
    resigned = tmp_path / "resigned.tapis"
    assert tapis("record", "sign", out, "--key", key2, "-o", resigned).returncode == 0
    assert read_envelopes(resigned)[0].annotations == env.annotations
    assert tapis("record", "verify", "--key", key2, resigned).returncode == 0
    assert tapis("record", "verify", "--key", key, resigned).returncode == 1


def test_cli_annotate_and_sign_refusals_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.tapis"
    r = tapis("record", "annotate", DP1, "-o", out, "--comment", "1:57:late")
    assert r.returncode == 1
    assert "comment on hand 1, action 57: hand 1 has 56 actions" in r.stderr
    r = tapis("record", "annotate", DP1, "-o", out, "--comment", "first:lead")
    assert r.returncode == 2 and "HAND:ACTION:TEXT" in r.stderr
    r = tapis("record", "sign", DP1, "--key", tmp_path / "missing.pem", "-o", out)
    assert r.returncode == 2 and "cannot read the key" in r.stderr
    assert not out.exists()


def test_cli_export_json_and_back(tmp_path: Path) -> None:
    src = annotated_signed_file(tmp_path)
    exported = tmp_path / "records.json"
    r = tapis("record", "export", src, "--format", "json", "-o", exported)
    assert r.returncode == 0, r.stderr
    back = tmp_path / "back.tapis"
    r = tapis("record", "import-json", exported, "-o", back)
    assert r.returncode == 0, r.stderr
    assert "2 records -> " in r.stdout
    assert back.read_bytes() == src.read_bytes()

    r = tapis("record", "export", src, "--format", "json")
    assert json.loads(r.stdout)["format"] == "tapis-records-json/1"

    broken = tmp_path / "broken.json"
    broken.write_text(exported.read_text()[:-20])
    none = tmp_path / "none.tapis"
    r = tapis("record", "import-json", broken, "-o", none)
    assert r.returncode == 1 and "not valid JSON" in r.stderr
    assert not none.exists()


def test_cli_export_transcript_and_reimport(tmp_path: Path) -> None:
    for name in ("dame-de-pique-dp1", "triomphe-as-qui-pille"):
        folder = tmp_path / name
        folder.mkdir()
        # The record keeps the transcript's file name: export under the same name.
        text = folder / f"{name}.json"
        r = tapis("record", "export", DATA / f"{name}.tapis", "--format", "transcript",
                  "-o", text)  # fmt: skip
        assert r.returncode == 0, r.stderr
        again = folder / "again.tapis"
        r = tapis("record", "import", text, "-o", again)
        assert r.returncode == 0, r.stderr
        assert again.read_bytes() == (DATA / f"{name}.tapis").read_bytes()
    two = tmp_path / "two.tapis"
    write_envelopes(two, read_envelopes(DP1) * 2)
    r = tapis("record", "export", two, "--format", "transcript")
    assert r.returncode == 1 and "a transcript holds one match" in r.stderr


def test_annotate_says_nothing_of_a_record_verify_refuses_and_writes_nothing_unread(
    tmp_path: Path,
) -> None:
    """`annotate` replayed a record and compared its scores only: a record with a changed
    outcome rule, or an unknown field, was annotated (exit 0). And 800 comments on an action
    of 286 legal actions made an annotation every reader refuses, written in place over the
    only copy."""
    env = read_envelopes(DP1)[0]
    rec = decode_record(env.record)
    rec.outcome.rule = "CLOCK.FORFEIT"
    bad = tmp_path / "bad.tapis"
    write_envelopes(bad, [pb.RecordEnvelope(record=rec.SerializeToString(deterministic=True))])
    out = tmp_path / "a.tapis"
    done = tapis("record", "annotate", bad, "-o", out)
    assert done.returncode == 1 and "outcome.rule is 'CLOCK.FORFEIT'" in done.stderr, done.stderr
    assert tapis("record", "verify", bad).returncode == 1 and not out.exists()
    copy = tmp_path / "dp1.tapis"
    copy.write_bytes(DP1.read_bytes())
    comments = [arg for n in range(800) for arg in ("--comment", f"1:1:c{n}")]
    done = tapis("record", "annotate", copy, "-o", copy, *comments)
    assert done.returncode == 2, done.stderr
    assert "hand 1, action 1: not annotated" in done.stderr and "fewer comments" in done.stderr
    assert copy.read_bytes() == DP1.read_bytes()
    assert tapis("record", "annotate", copy, "-o", out, *comments[:200]).returncode == 0
    assert tapis("record", "show", out).returncode == 0


def test_show_and_the_replay_page_mark_as_forced_what_the_replay_says(tmp_path: Path) -> None:
    """Annotations are outside the signature: an envelope marking every action forced (or
    none) changes nothing `show` or the replay page say is forced; its comments are shown."""
    env, rec = dp1()
    genuine = pb.RecordEnvelope()
    genuine.CopyFrom(env)
    genuine.annotations.CopyFrom(annotate(rec, [(1, 2, "a note")]))
    tampered = pb.RecordEnvelope()
    tampered.CopyFrom(genuine)
    for note in tampered.annotations.actions:
        note.forced = not note.forced
    for made in (genuine, tampered):
        text = render_record(rec, made.record, made.annotations)
        assert text.count("(forced)") == len(FORCED_DP1) and "# a note" in text
        path = tmp_path / "t.tapis"
        write_envelopes(path, [made])
        page = tmp_path / "t.html"
        assert tapis("record", "html", path, "-o", page).returncode == 0
        found = re.search(r'id="tapis-data"[^>]*>(.*?)</script>', page.read_text(), re.S)
        assert found is not None
        data = json.loads(found[1])
        forced = [p for h in data["records"][0]["hands"] for p in h["positions"] if p.get("forced")]
        assert len(forced) == len(FORCED_DP1)


def test_annotations_past_their_bound_in_all_are_refused_before_they_are_decoded(
    tmp_path: Path,
) -> None:
    """Annotations are outside the signature: anyone may add them to a genuine record. One
    per action, each of 996 empty comments (2 bytes each, within the bound of one
    annotation) made a 14 MB file that took `show` to 1 GB. All the annotations of an
    envelope now hold at most 16 fields an action of the record, and 100,000 more; Tapis's
    own annotations of every action of a long match stay within it."""
    long = tmp_path / "long.tapis"
    made = tapis("corpus", "--game", "hearts", "-n", "1", "--option", "end_threshold=1000",
                 "-o", long)  # fmt: skip
    assert made.returncode == 0, made.stderr
    own = tapis("record", "annotate", long, "-o", tmp_path / "own.tapis", "--comment", "1:1:x")
    assert own.returncode == 0, own.stderr
    assert tapis("record", "verify", tmp_path / "own.tapis").returncode == 0
    env = read_envelopes(long)[0]
    actions = sum(len(h.actions) for h in decode_record(env.record).hands)
    bound = 16 * actions + 100_000
    for _ in range(bound // 999 + 1):  # 999 fields each: hand, action and 997 comments
        env.annotations.actions.add(hand=1, action=1, comments=[""] * 997)
    frame = env.SerializeToString()
    bad = tmp_path / "bad.tapis"
    bad.write_bytes(MAGIC + encode_varint(len(frame)) + frame)
    for command in ("verify", "show"):
        done = tapis("record", command, bad, memory_limit=400 << 20)
        assert done.returncode == 2, done.stderr
        assert f"the annotations hold more than {bound} comments, score lines" in done.stderr


def test_files_larger_than_their_bound_are_refused_before_they_are_read(tmp_path: Path) -> None:
    """`import-json` of a 300 MB export (its bound 256 MiB) read 311 MB into memory before
    refusing it; a transcript or a key larger than theirs alike. A regular file is now
    refused by its size: here a sparse one, under a 200 MB memory limit."""
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(300 << 20)
    for args, said in [
        (["record", "import-json", big, "-o", tmp_path / "o.tapis"], "larger than 256 MiB"),
        (["record", "import", big, "--out-dir", tmp_path], "larger than 64 MiB: not a transcript"),
        (["key", "show", big], "larger than"),
    ]:
        done = tapis(*args, memory_limit=200 << 20)
        assert done.returncode != 0 and said in done.stderr, (args, done.stderr)
        assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr
