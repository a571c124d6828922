"""What the record commands that show a record (`score`, `show`, `export`, `html`) take on
trust: nothing. A record whose content does not follow from the rules (its scores changed,
then re-encoded, unsigned or re-signed) is refused with its reason and exit 1, the other
records of the file still shown; and the texts a record carries as given (seat names,
comments) reach a terminal with their control characters escaped."""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from pathlib import Path

import pytest

from tapis_cartes.records.codec import (
    MAGIC,
    canonical_bytes,
    decode_record,
    envelope,
    read_envelopes,
    write_envelopes,
)
from tapis_cartes.records.signing import load_private_key, sign
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import DATA, tapis

DP1 = DATA / "dame-de-pique-dp1.tapis"  # scores 8, 0, 14, 4
N1 = DATA / "napoleon-n1.tapis"

# What no text output may hold raw: C0/C1 controls, DEL, separators, bidi controls.
UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def tampered(record_bytes: bytes) -> bytes:
    """The record with 100 points more for seat 0 in its first hand's score lines, every
    score after a hand and the outcome: a sheet that agrees with itself, canonically
    encoded, that the rules did not make."""
    rec = pb.GameRecord.FromString(record_bytes)
    for hand in rec.hands:
        for score in hand.scores_after[:1]:
            score.points += 100
    for line in rec.hands[0].lines:
        if line.seat == 0:
            line.delta.points += 100
            break
    rec.outcome.scores[0].points += 100
    return rec.SerializeToString(deterministic=True)


def dp1_bytes() -> bytes:
    return read_envelopes(DP1)[0].record


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "bad.tapis"
    write_envelopes(path, [envelope(tampered(dp1_bytes()))])
    return path


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """A valid record, a tampered one, a valid one."""
    path = tmp_path / "mixed.tapis"
    write_envelopes(
        path,
        [read_envelopes(DP1)[0], envelope(tampered(dp1_bytes())), read_envelopes(N1)[0]],
    )
    return path


READERS = {
    "score": ["record", "score", "{p}"],
    "score --json": ["record", "score", "--json", "{p}"],
    "score --set": ["record", "score", "--set", "end_threshold=50", "{p}"],
    "show": ["record", "show", "{p}"],
    "export json": ["record", "export", "{p}", "--format", "json"],
    "export transcript": ["record", "export", "{p}", "--format", "transcript"],
    "html": ["record", "html", "{p}", "-o", "-"],
}


def run(command: str, path: Path, *more: str | Path) -> tuple[int, str, str]:
    done = tapis(*(a.replace("{p}", str(path)) for a in READERS[command]), *more)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("command", READERS)
def test_a_tampered_record_is_refused_with_its_reason(bad: Path, command: str) -> None:
    code, out, err = run(command, bad)
    assert code == 1, (out, err)
    assert f"{bad}: INVALID: hand 1, action 56: score line 1 is" in err
    assert "(score-lines)" in err
    assert out == ""  # nothing of it shown


@pytest.mark.parametrize("command", ["score", "show", "score --json", "score --set"])
def test_the_other_records_of_the_file_are_still_shown(mixed: Path, command: str) -> None:
    code, out, err = run(command, mixed)
    assert code == 1
    assert err.count("INVALID") == 1 and f"{mixed} (record 2): INVALID" in err
    if command == "score --json":
        assert [json.loads(line)["game"] for line in out.splitlines()] == [
            "dame-de-pique",
            "napoleon",
        ]
    elif command == "show":
        assert out.count("\nHand 1, dealer ") == 2
    elif command == "score --set":  # Napoléon has no end_threshold: record 3 goes too
        assert f"== {mixed} (record 1) under end_threshold=50" in out
        assert f"{mixed} (record 3): not replayable [option:end_threshold]" in err
    else:
        assert f"== {mixed} (record 1)" in out and f"== {mixed} (record 3)" in out
        assert "(record 2)" not in out
    assert "108" not in out


def test_export_and_html_leave_out_the_invalid_record_only(mixed: Path, tmp_path: Path) -> None:
    code, out, err = run("export json", mixed)
    assert code == 1 and f"{mixed} (record 2): INVALID" in err
    exported = [base64.b64decode(r["record"]) for r in json.loads(out)["records"]]
    assert exported == [read_envelopes(p)[0].record for p in (DP1, N1)]

    page = tmp_path / "page.html"
    done = tapis("record", "html", mixed, "-o", page)
    assert done.returncode == 1 and f"{mixed} (record 2): INVALID" in done.stderr
    assert done.stdout == f"2 records -> {page}\n"
    assert page.read_text().count('"record_id":') == 2


def test_a_valid_file_is_still_shown_with_exit_0(tmp_path: Path) -> None:
    for command in READERS:
        code, out, err = run(command, DP1)
        assert code == 0 and out and err == "", (command, err)


def test_a_re_signed_record_is_refused_whatever_its_signature(tmp_path: Path) -> None:
    key, other = tmp_path / "k.key", tmp_path / "other.key"
    assert tapis("key", "new", key).returncode == 0
    assert tapis("key", "new", other).returncode == 0
    signed = tmp_path / "signed.tapis"
    write_envelopes(signed, [sign(tampered(dp1_bytes()), load_private_key(key))])
    for command in READERS:
        code, out, err = run(command, signed)
        assert code == 1 and "(score-lines)" in err and out == "", (command, err)
    # with keys: signed by the key given, or refused for its signature first; either way
    # the content is checked
    for given in (key, other):
        done = tapis("record", "html", signed, "-o", "-", "--key", given)
        assert done.returncode == 1 and "(score-lines)" in done.stderr, done.stderr
        assert done.stdout == ""
    # a valid record whose signature does not hold for the key given is still shown (the
    # page says so): a signature is `verify`'s matter
    valid = tmp_path / "valid.tapis"
    write_envelopes(valid, [sign(dp1_bytes(), load_private_key(key))])
    done = tapis("record", "html", valid, "-o", "-", "--key", other)
    assert done.returncode == 0 and "signature-unknown-key" in done.stdout


NAMES = ["a\x1b[31mred", "b\n\nc", "\u202eevil", "No\x00rth"]


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """DP1 with player names that hold an escape sequence, line breaks, a right-to-left
    override and a NUL: no referee or transcript makes such names, and verify refuses them
    (`seat-name`), but a file may hold anything."""
    rec = decode_record(dp1_bytes())
    for seat, name in zip(rec.seats, NAMES, strict=True):
        seat.name = name
    path = tmp_path / "names.tapis"
    write_envelopes(path, [envelope(canonical_bytes(rec))])
    return path


@pytest.fixture
def hostile_archive(tmp_path: Path) -> Path:
    """An archive of DP1 whose stored names another program changed to `NAMES` (the summary
    columns the archive's commands print: the record itself still verifies)."""
    db = tmp_path / "a.db"
    assert tapis("archive", "add", db, DP1).returncode == 0
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE records SET players = ?", [json.dumps(NAMES)])
        for seat, name in enumerate(NAMES):
            conn.execute("UPDATE record_players SET name = ? WHERE seat = ?", [name, seat])
    conn.close()
    return db


@pytest.mark.parametrize("command", ["score", "score --set", "show"])
def test_control_characters_of_names_never_reach_the_terminal(hostile: Path, command: str) -> None:
    """The record is refused (its names are none a seat is given), and the refusal quotes
    the name without a character a terminal would obey."""
    code, out, err = run(command, hostile)
    assert code == 1, err
    assert "(seat-name)" in err, err
    assert not UNSAFE.search(out + err), [m.group() for m in UNSAFE.finditer(out + err)]


def test_an_option_set_twice_is_refused_naming_it() -> None:
    done = tapis("record", "score", DP1, "--set", "end_threshold=1", "--set", "end_threshold=2")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "tapis record score: option 'end_threshold' is set twice: "
        "--set 'end_threshold=1' and --set 'end_threshold=2'\n"
    )


def test_control_characters_of_names_never_reach_the_terminal_from_an_archive(
    hostile: Path, hostile_archive: Path, tmp_path: Path
) -> None:
    """The archive's text: the query table, a re-scoring's summary and a run's changed
    records (DP1, unfinished, ends after its hand under a lower threshold: new winners); and
    `add` of the record with such names: refused, said escaped."""
    db = hostile_archive
    outputs = []
    for args in (
        ["query", db],
        ["rescore", db, "--set", "end_threshold=10"],
        ["runs", db, "1", "--changed"],
    ):
        done = tapis("archive", *args)
        assert done.returncode == 0, (args, done.stderr)
        assert not UNSAFE.search(done.stdout), (args, done.stdout)
        outputs.append(done.stdout)
    assert "a\\u001b[31mred" in outputs[0] and "now finished" in outputs[1]
    assert "winners none -> b\\u000a\\u000ac" in outputs[2], outputs[2]
    done = tapis("archive", "add", tmp_path / "b.db", hostile)
    assert done.returncode == 1 and "(seat-name)" in done.stderr, done.stderr
    assert not UNSAFE.search(done.stdout + done.stderr), done.stderr


def test_control_characters_of_names_are_escaped_in_json_output(
    hostile: Path, hostile_archive: Path
) -> None:
    """`--json` prints each such character as a JSON escape (`\\u202e`): the same value to a
    JSON reader, and nothing a terminal would obey."""
    db = hostile_archive
    done = tapis("record", "verify", hostile, "--json")
    assert done.returncode == 1 and "seat-name" in done.stdout, done.stdout
    assert not UNSAFE.search(done.stdout), done.stdout
    assert tapis("archive", "rescore", db, "--set", "end_threshold=10").returncode == 0
    for args in (
        ["archive", "query", db, "--json"],
        ["archive", "runs", db, "1", "--changed", "--json"],
    ):
        done = tapis(*args)
        assert done.returncode == 0, (args, done.stderr)
        assert not UNSAFE.search(done.stdout), (args, done.stdout)
        values = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        assert "\u202eevil" in json.dumps(values, ensure_ascii=False), (args, done.stdout)


def test_a_file_of_a_million_empty_records_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """One megabyte: a million records of no bytes, each a refused record. The commands that
    read a file of records hold one at a time (all of them parsed at once took 725 MB); in a
    child limited to 400 MB of address space, each names the first and ends as it should."""
    path = tmp_path / "empty.tapis"
    path.write_bytes(MAGIC + b"\x00" * 1_000_000)
    for args in (
        ["annotate", path, "-o", tmp_path / "a.tapis"],
        ["sign", path, "--key", tmp_path / "k.key", "-o", tmp_path / "s.tapis"],
    ):
        if args[0] == "sign":
            assert tapis("key", "new", tmp_path / "k.key").returncode == 0
        done = tapis("record", *args, memory_limit=400 << 20)
        assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr
        assert done.returncode == 1, (args, done.stderr)
        assert f"{path} (record 1): " in done.stderr, done.stderr


def test_records_refused_alike_are_said_once_and_show_leaves_no_trace_of_them(
    tmp_path: Path,
) -> None:
    """A million empty records printed a million lines of verify (108 MB) and two rules of
    `show` for each (75 MB): a run of records refused alike is said once, then counted, and
    `show` rules off only the records it shows."""
    frames = DP1.read_bytes()[len(MAGIC) :]  # its one record, framed
    path = tmp_path / "mixed.tapis"
    path.write_bytes(MAGIC + b"\x00" * 5 + frames + b"\x00" * 2)
    done = tapis("record", "verify", path)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{path} (record 1): INVALID: the envelope holds no record")
    assert lines[1] == f"{path} (records 2 to 5): the same"  # (record 6, valid: not said)
    assert lines[2].startswith(f"{path} (record 7): INVALID") and lines[3] == (
        f"{path} (record 8): the same"
    )
    assert "8 records, 1 valid, 7 invalid" in lines[4]
    done = tapis("record", "show", path)
    assert done.returncode == 1 and "=" * 72 not in done.stdout
    assert done.stdout.startswith("Dame de Pique: ")
    # show, score, export and html said each refused record (a million lines of stderr for
    # a megabyte of zeros): a run of them is said once, as verify says it.
    for command in (["show"], ["score"], ["export", "--format", "json", "-o", tmp_path / "j"]):
        done = tapis("record", *command, path)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            f"{path} (record 1): INVALID: {lines[0].split(': INVALID: ')[1]}",
            f"{path} (records 2 to 5): the same",
            lines[2],
            f"{path} (record 8): the same",
        ], (command, done.stderr)


def test_two_record_files_joined_are_said_so(tmp_path: Path) -> None:
    """`cat a.tapis b.tapis`: the second file's header read as a record's length and bytes
    gave "record 37 claims 57 bytes but 48 remain" and the like."""
    joined = tmp_path / "joined.tapis"
    joined.write_bytes(DP1.read_bytes() + N1.read_bytes())
    at = len(DP1.read_bytes())
    for command in ("verify", "show"):
        done = tapis("record", command, joined)
        assert done.returncode == 2, done.stderr
        assert f"a second file header (b'TAPIS-RECORDS/1\\n') at byte {at}" in done.stderr


@pytest.mark.parametrize("command", [*READERS, "verify", "annotate", "archive add"])
def test_a_file_of_no_records_is_said_so(tmp_path: Path, command: str) -> None:
    """A record file's header alone: `show`, `score`, `export` and `html` printed nothing and
    ended with 0, and `verify` said "0 records, 0 valid" with 0, vouching for nothing."""
    empty = tmp_path / "empty.tapis"
    write_envelopes(empty, [])
    if command in READERS:
        code, out, err = run(command, empty)
    else:
        more = {"verify": [], "annotate": ["-o", tmp_path / "a.tapis"]}
        args = ["archive", "add", tmp_path / "a.db", empty, DP1]
        if command != "archive add":
            args = ["record", command, empty, *more[command]]
        done = tapis(*args)
        code, out, err = done.returncode, done.stdout, done.stderr
    assert code == 2, (out, err)
    assert f"{empty}: holds no records (a record file's header alone)" in err
    assert not (tmp_path / "a.tapis").exists()
    if command == "archive add":  # the other file's record is added
        assert out.startswith("1 added"), out


def test_verify_json_names_a_file_of_no_records() -> None:
    from tapis_cartes.records.verify import verify_data

    ((index, result),) = verify_data(MAGIC, "empty.tapis")
    assert index is None and result.error is not None
    assert result.error.code == "file:no-records"


def test_a_page_holds_a_bounded_number_of_positions(tmp_path: Path) -> None:
    """A genuine Napoléon match of 1,000 deals for 10 seats made a 40 MB page and took 460 MB
    to build (1.3 GB for three: `html` keeps every position of every record); the referee's
    web front builds the same page. A record past the page's positions is named and left
    out; the others of the file make the page, as long as they leave room."""
    from tapis_cartes.clients import play_match
    from tapis_cartes.records import write_records
    from tapis_cartes.records.html import MAX_PAGE_POSITIONS

    long = play_match("nap", options={"deals": 1000}, bots="random", seed="long")
    positions = sum(len(h.plays) + 1 for h in long.hands)
    assert positions > MAX_PAGE_POSITIONS
    short = play_match("hearts", options={"end_threshold": 26}, bots="random", seed="short")
    path = tmp_path / "both.tapis"
    write_records(path, [short, long])
    page = tmp_path / "both.html"
    done = tapis("record", "html", path, "-o", page)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"(record 2): its match has {positions:,} positions (a deal, or an action), more "
        f"than are left on this page" in done.stderr
    ), done.stderr
    assert done.stdout.startswith("1 record ->") and short.id in page.read_text()
    assert long.id not in page.read_text()
    # The web front's page of a finished table (records/html.py `replay_data`): refused, 409.
    from tapis_cartes.records.html import replay_data
    from tapis_cartes.referee.errors import PageTooLarge

    with pytest.raises(PageTooLarge, match="more than a replay page holds"):
        replay_data([long.envelope])
    assert PageTooLarge.grpc_status == "FAILED_PRECONDITION"


def test_an_export_or_annotation_holds_one_record_at_a_time(tmp_path: Path) -> None:
    """`record export --format json` and `record annotate` of 12,000 records (8.7 MB):
    written as they come, one in memory at a time, in a child limited to 400 MB of address
    space (made whole, the export's text and decoded records took about 850 MB, the
    annotated records more than 400 MB); the files are whole."""
    (env,) = read_envelopes(DATA / "dame-de-pique-dp1.tapis")
    path = tmp_path / "many.tapis"
    write_envelopes(path, [env] * 12_000)
    annotated = tmp_path / "annotated.tapis"
    done = tapis("record", "annotate", path, "-o", annotated, memory_limit=400 << 20)
    assert done.returncode == 0, done.stderr
    assert len(read_envelopes(annotated)) == 12_000
    out = tmp_path / "many.json"
    done = tapis("record", "export", path, "--format", "json", "-o", out,
                 memory_limit=400 << 20)  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text("utf-8"))
    assert (
        len(doc["records"]) == 12_000
        and doc["records"][-1]["record"] == doc["records"][0]["record"]
    )
