"""The `tapis` command line, run as a real subprocess the way a person runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tapis_cartes.records.codec import (
    decode_record,
    envelope,
    read_envelopes,
    record_id,
    write_envelopes,
)
from tapis_cartes.v1 import referee_pb2 as pb
from tests.commands import DATA, ROOT, cli_command, tapis
from tests.server.util import run


def bad_transcript(tmp_path: Path) -> Path:
    doc = json.loads((DATA / "dame-de-pique-dp1.json").read_text())
    doc["hands"][0]["actions"][7] = {"seat": 1, "play": "6H"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    return path


def test_import_verify_score_show(tmp_path: Path) -> None:
    out = tmp_path / "games.tapis"
    r = tapis("record", "import", DATA / "dame-de-pique-dp1.json", DATA / "napoleon-n1.json",
              "-o", out)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "2 records -> " in r.stdout
    assert len(read_envelopes(out)) == 2

    r = tapis("record", "verify", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^2 records, 2 valid, 0 invalid, 2 hands in [\d.]+ s \([\d,]+ hands/s\)$",
                     r.stdout.strip(), re.M)  # fmt: skip

    r = tapis("record", "score", out, "--json")
    assert r.returncode == 0
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["game"] for d in lines] == ["dame-de-pique", "napoleon"]
    assert lines[0]["scores"] == [{"points": 8}, {"points": 0}, {"points": 14}, {"points": 4}]

    r = tapis("record", "score", out)
    assert "total" in r.stdout and "The match is not finished." in r.stdout

    r = tapis("record", "show", out)
    assert r.returncode == 0
    assert " 1. South 2C   West 6C    North 5C   East AS   -> West" in r.stdout
    assert "[DP.SCORE]" in r.stdout and "D: bid three" in r.stdout


def test_import_refusal_message_and_nothing_written(tmp_path: Path) -> None:
    bad = bad_transcript(tmp_path)
    out = tmp_path / "bad.tapis"
    r = tapis("record", "import", bad, "-o", out)
    assert r.returncode == 1
    assert r.stderr.startswith(f"{bad}: hand 1, action 8 (seat 1, play 6H): ")
    assert r.stderr.strip().endswith("[DP.FIRST-TRICK]")
    assert not out.exists()


def test_import_several_each_on_its_own(tmp_path: Path) -> None:
    bad = bad_transcript(tmp_path)
    out_dir = tmp_path / "out"
    r = tapis("record", "import", DATA / "napoleon-n1.json", bad, "--out-dir", out_dir)
    assert r.returncode == 1
    assert sorted(p.name for p in out_dir.iterdir()) == ["napoleon-n1.tapis"]
    assert "hand 1, action 8" in r.stderr


def test_import_into_a_folder_writes_no_record_over_another(tmp_path: Path) -> None:
    """Two transcripts of one name from two folders would make one record file: refused,
    naming both, and nothing written (the second written over the first, said imported)."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "game.json").write_bytes((DATA / "napoleon-n1.json").read_bytes())
    out_dir = tmp_path / "out"
    first, second = tmp_path / "a" / "game.json", tmp_path / "b" / "game.json"
    r = tapis("record", "import", first, second, "--out-dir", out_dir)
    assert r.returncode == 2
    assert f"{first} and {second} would both be written to game.tapis" in r.stderr, r.stderr
    assert list(out_dir.iterdir()) == []
    r = tapis("record", "import", first, first, "--out-dir", out_dir)  # one file twice: fine
    assert r.returncode == 0, r.stderr


def test_verify_reports_invalid_record_and_position(tmp_path: Path) -> None:
    (env,) = read_envelopes(DATA / "dame-de-pique-dp1.tapis")
    rec = decode_record(env.record)
    rec.hands[0].lines[0].delta.points = 9
    mixed = tmp_path / "mixed.tapis"
    write_envelopes(mixed, [env, envelope(rec.SerializeToString(deterministic=True))])
    r = tapis("record", "verify", mixed)
    assert r.returncode == 1
    assert f"{mixed} (record 2): INVALID: hand 1, action 56: score line 1 is" in r.stdout
    assert "2 records, 1 valid, 1 invalid" in r.stdout


def test_verify_unreadable_file_exits_2(tmp_path: Path) -> None:
    r = tapis("record", "verify", DATA / "napoleon-n1.json")
    assert r.returncode == 2
    assert "is not a Tapis record file" in r.stderr
    r = tapis("record", "verify", tmp_path / "missing.tapis")
    assert r.returncode == 2


def test_example_command() -> None:
    r = tapis("example")
    assert r.returncode == 0
    assert "North" in r.stdout and "+14 = 14" in r.stdout
    r = tapis("example", "--print")
    assert json.loads(r.stdout)["format"] == "tapis-transcript/1"


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    r = tapis("record", "import", DATA / "napoleon-n1.json")
    assert r.returncode == 2 and "give -o RECORD or --out-dir DIR" in r.stderr
    r = tapis("record", "frobnicate")
    assert r.returncode == 2


def _signed_file(tmp_path: Path) -> tuple[Path, Path]:
    """A key file made by `tapis key new` and a file of two records signed with it."""
    from tapis_cartes.records.signing import load_private_key, sign

    key_path = tmp_path / "referee.key"
    assert tapis("key", "new", key_path).returncode == 0
    key = load_private_key(key_path)
    envs = [
        sign(env.record, key)
        for name in ("dame-de-pique-dp1", "napoleon-n1")
        for env in read_envelopes(DATA / f"{name}.tapis")
    ]
    signed = tmp_path / "signed.tapis"
    write_envelopes(signed, envs)
    return key_path, signed


def test_verify_json_with_trusted_keys(tmp_path: Path) -> None:
    key_path, signed = _signed_file(tmp_path)
    shown = tapis("key", "show", key_path)
    assert shown.returncode == 0
    trusted = tmp_path / "trusted.txt"
    trusted.write_text("# keys we trust\n\n# Club referee\n" + shown.stdout)  # appended as is
    r = tapis("record", "verify", signed, DATA / "napoleon-n1.tapis", "--trusted-keys", trusted,
              "--json")  # fmt: skip
    assert r.returncode == 1, r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    kid = shown.stdout.split("key id ")[1].strip()
    assert [(d["file"], d["index"], d["ok"]) for d in docs] == [
        (str(signed), 1, True),
        (str(signed), 2, True),
        (str(DATA / "napoleon-n1.tapis"), 1, False),
    ]
    assert docs[0]["signature"] == "valid" and docs[0]["signer"] == "Club referee"
    assert docs[0]["key_id"] == kid and docs[0]["hands"] == 1 and docs[0]["error"] is None
    assert len(docs[0]["record_id"]) == 64
    assert docs[2]["signature"] == "none"
    assert docs[2]["error"] == {
        "code": "signature-missing",
        "hand": None,
        "action": None,
        "message": "the record is not signed, and keys were given",
    }

    r = tapis("record", "verify", signed, "--key", key_path, "-v")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{signed} (record 1): valid (" in r.stdout
    assert f"signed by {key_path} (key {kid[:16]})" in r.stdout


def test_verify_trusted_keys_file_errors_exit_2(tmp_path: Path) -> None:
    key_path, signed = _signed_file(tmp_path)
    with_private = tmp_path / "private.txt"
    with_private.write_text("# oops\n" + key_path.read_text())
    r = tapis("record", "verify", signed, "--trusted-keys", with_private)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"{with_private}:2: a private key")
    garbled = tmp_path / "garbled.txt"
    garbled.write_text(
        "# A\n-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n"
    )
    r = tapis("record", "verify", signed, "--trusted-keys", garbled)
    assert r.returncode == 2
    assert r.stderr.startswith(f"{garbled}:2: lines 2-4 are not a valid PEM public key")
    assert "Traceback" not in r.stderr


def test_a_file_without_end_is_refused_having_read_a_bounded_part(tmp_path: Path) -> None:
    """A key, a trusted-keys file, a transcript or a JSON export named as /dev/zero (or any
    file larger than what it can hold) was read to its end: never, for a device, while the
    memory grew. Each is read up to its bound and refused, naming the file, in a child
    limited to 1 GiB."""
    dp1, zero = DATA / "dame-de-pique-dp1.tapis", "/dev/zero"
    cases = [
        (("record", "verify", dp1, "--key", zero), 2, "larger than 65,536 bytes: not the key"),
        (("record", "verify", dp1, "--trusted-keys", zero), 2, "not the trusted keys"),
        (("record", "sign", dp1, "--key", zero, "-o", tmp_path / "s.tapis"), 2, "not the key"),
        (("record", "import", zero, "-o", tmp_path / "i.tapis"), 1, "not a transcript"),
        (("record", "import-json", zero, "-o", tmp_path / "j.tapis"), 2, "not an export"),
        (("record", "show", zero), 2, "not a Tapis record file"),
    ]
    for args, status, said in cases:
        done = tapis(*args, memory_limit=1 << 30)
        assert done.returncode == status, (args, done.stderr[-500:])
        assert done.stderr.startswith(zero) and said in done.stderr, done.stderr[-500:]
    assert not any(tmp_path.iterdir())


def test_a_transcript_of_no_text_or_under_a_name_of_no_text(tmp_path: Path) -> None:
    """A lone surrogate (`\\ud800`, valid JSON, no character) in a name is refused at its
    place; a valid transcript whose file name is not UTF-8 imports, the name kept with U+FFFD
    (it was refused: `the match does not fit a record: 'utf-8' codec can't encode`)."""
    doc = json.loads((DATA / "dame-de-pique-dp1.json").read_text())
    doc["players"][1] = "B\ud800"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    done = tapis("record", "import", bad, "-o", tmp_path / "bad.tapis")
    assert done.returncode == 1
    assert "players[1]: 'B\\ud800' holds a lone surrogate, not text" in done.stderr
    name = tmp_path / os.fsdecode(b"caf\xe9.json")  # Latin-1, not UTF-8
    name.write_bytes((DATA / "dame-de-pique-dp1.json").read_bytes())
    ok = tmp_path / "ok.tapis"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    imported = subprocess.run(  # (its output names the file as it is: bytes, not UTF-8)
        cli_command("", "record", "import", name, "-o", ok), capture_output=True, env=env
    )
    assert imported.returncode == 0, imported.stderr
    rec = decode_record(read_envelopes(ok)[0].record)
    assert rec.provenance.reference == "caf\ufffd.json"


def test_an_output_that_is_an_input_of_another_kind_is_refused(tmp_path: Path) -> None:
    """`record import t.json -o t.json` wrote the record over its transcript (exit 0): the
    input was lost. Each command whose output is of another kind than its input refuses to
    write over it, before anything is done; the files are unchanged."""
    transcript, record = tmp_path / "t.json", tmp_path / "r.tapis"
    transcript.write_bytes((DATA / "dame-de-pique-dp1.json").read_bytes())
    record.write_bytes((DATA / "dame-de-pique-dp1.tapis").read_bytes())
    before = transcript.read_bytes(), record.read_bytes()
    for args in (
        ("record", "import", transcript, "-o", transcript),
        ("record", "import-json", transcript, "-o", transcript),
        ("record", "export", record, "--format", "json", "-o", record),
        ("record", "export", record, "--format", "transcript", "-o", tmp_path / "." / "r.tapis"),
        ("record", "html", record, "-o", record),
    ):
        done = tapis(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "the input would be lost" in done.stderr, done.stderr
    assert (transcript.read_bytes(), record.read_bytes()) == before


def test_verify_truncated_file_reports_the_records_before(tmp_path: Path) -> None:
    envs = [env for name in ("dame-de-pique-dp1", "napoleon-n1", "triomphe-tr2")
            for env in read_envelopes(DATA / f"{name}.tapis")]  # fmt: skip
    whole = tmp_path / "whole.tapis"
    write_envelopes(whole, envs)
    cut = tmp_path / "cut.tapis"
    cut.write_bytes(whole.read_bytes()[:-20])
    r = tapis("record", "verify", cut)
    assert r.returncode == 2
    assert "2 records, 2 valid, 0 invalid, 2 hands in" in r.stdout
    assert r.stdout.splitlines()[0].endswith("; 1 file error")
    assert f"{cut}: record 3 claims" in r.stderr and "Traceback" not in r.stderr
    r = tapis("record", "verify", cut, "--json")
    assert r.returncode == 2
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(d["index"], d["ok"]) for d in docs] == [(1, True), (2, True), (3, False)]
    assert docs[2]["error"]["code"] == "file:truncated" and docs[2]["record_id"] is None


def test_one_version_everywhere(tmp_path: Path) -> None:
    """`tapis --version`, the installed package's metadata and what a referee reports
    (ListGamesResponse.version) are the one version, tapis_cartes.__version__."""
    import importlib.metadata

    from tapis_cartes import __version__

    done = tapis("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"tapis {__version__}"
    assert importlib.metadata.version("tapis-cartes") == __version__

    async def body(server: Any, stub: Any, _: Any) -> None:
        reply = await stub.ListGames(pb.ListGamesRequest())
        assert reply.version == __version__

    run(body, tmp_path)


def test_rescore_and_runs_name_the_seats_and_print_no_python_values(tmp_path: Path) -> None:
    archive = tmp_path / "a.db"
    golden = DATA / "golden"
    files = [golden / "dame-de-pique.tapis", golden / "imperiale-moderne.tapis"]
    assert tapis("archive", "add", archive, *files).returncode == 0
    names = {s.name for f in files for env in read_envelopes(f)
             for s in decode_record(env.record).seats}  # fmt: skip
    for game, change in (("hearts", "end_threshold=30"), ("imperiale", "target_fiches=5")):
        done = tapis("archive", "rescore", archive, "--game", game, "--set", change)
        assert done.returncode == 0, done.stderr
        runs = tapis("archive", "runs", archive, done.stdout.split()[1])
        for text in (done.stdout, runs.stdout):
            assert "[[" not in text and "None" not in text, text
            assert not re.search(r"(?<![\d,.])1 records(?!/s)", text), text
        changed = [line for line in runs.stdout.splitlines() if line.startswith("  ")]
        assert changed and all(any(n in line for n in names) for line in changed), runs.stdout


def test_tapis_games_lists_the_catalogue_a_referee_answers_with() -> None:
    from google.protobuf import json_format

    from tapis_cartes.referee.catalog import games_catalog

    done = tapis("games", "--json")
    assert done.returncode == 0, done.stderr
    assert json_format.Parse(done.stdout, pb.ListGamesResponse()) == games_catalog()
    text = tapis("games", "nap")
    assert text.returncode == 0
    assert "deals" in text.stdout and "6 (3 players), 8 (4 players)" in text.stdout
    assert "int 1..1000" in text.stdout and "seed_points | stakes" in text.stdout
    assert "dame-de-pique" not in text.stdout
    assert tapis("games", "heart").returncode == 2


def test_archive_export_plays_and_results_as_csv_and_parquet(tmp_path: Path) -> None:
    import csv

    import pyarrow.parquet as pq

    from tapis_cartes.records.replay import replay_record

    archive = tmp_path / "a.db"
    files = sorted((DATA / "golden").glob("*.tapis"))
    assert tapis("archive", "add", archive, *files).returncode == 0
    records = [decode_record(env.record) for f in files for env in read_envelopes(f)]
    actions = sum(len(h.actions) for r in records for h in r.hands)
    seats = sum(len(r.seats) for r in records)
    for fmt in ("csv", "parquet"):
        plays, results = tmp_path / f"plays.{fmt}", tmp_path / f"results.{fmt}"
        done = tapis("archive", "export", archive, "--format", fmt, "-o", plays)
        assert done.returncode == 0, done.stderr
        done = tapis("archive", "export", archive, "--format", fmt, "--table", "results",
                     "-o", results)  # fmt: skip
        assert done.returncode == 0, done.stderr
        if fmt == "csv":
            with plays.open(newline="") as f:
                play_rows = list(csv.DictReader(f))
            with results.open(newline="") as f:
                result_rows = list(csv.DictReader(f))
        else:
            play_rows = pq.read_table(plays).to_pylist()
            result_rows = pq.read_table(results).to_pylist()
        assert len(play_rows) == actions and len(result_rows) == seats
        # Each trick's winner, as the rows say, against the engine's replay of one record.
        first = read_envelopes(files[0])[0]
        rec, rid = decode_record(first.record), record_id(first.record)
        match = replay_record(rec, check=False)
        won = [t.winner for t in match.results[0].tricks]
        mine = [r for r in play_rows if r["record"] == rid and str(r["hand"]) == "1" and r["card"]]
        by_trick: dict[str, set[str]] = {}
        for r in mine:
            by_trick.setdefault(str(r["trick"]), set()).add(str(r["winner"]))
        assert [by_trick[str(t)] for t in range(1, len(won) + 1)] == [{str(w)} for w in won]
    wrong = tapis("archive", "export", archive, "--format", "xlsx", "-o", tmp_path / "x")
    assert wrong.returncode == 2


def test_long_commands_show_progress_on_a_terminal_and_not_in_a_pipe(tmp_path: Path) -> None:
    """verify, archive add and rescore draw a progress bar on standard error when it is a
    terminal (a pty here), and print only their results into a pipe."""
    import os
    import pty
    import subprocess

    from tests.commands import ROOT, cli_command

    records = sorted((DATA / "golden").glob("*.tapis"))
    archive = tmp_path / "a.db"
    for args, label in (
        (["record", "verify", *records], "verifying"),
        (["archive", "add", archive, *records], "adding"),
        (["archive", "rescore", archive, "--game", "nap", "--set", "deals=2"], "re-scoring"),
    ):
        main, child = pty.openpty()
        proc = subprocess.Popen(
            cli_command("", *args), cwd=ROOT, stdout=subprocess.PIPE, stderr=child,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TERM": "xterm",
                 "COLUMNS": "100"},
        )  # fmt: skip
        os.close(child)
        drawn = b""
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        out, _ = proc.communicate(timeout=120)
        os.close(main)
        assert proc.returncode == 0, (args, drawn)
        assert label.encode() in drawn, (label, drawn[:300])
        assert label.encode() not in out
    piped = tapis("record", "verify", *records)
    assert piped.returncode == 0 and "verifying" not in piped.stderr + piped.stdout


def test_archive_add_as_json(tmp_path: Path) -> None:
    archive = tmp_path / "a.db"
    bad = tmp_path / "bad.tapis"
    bad.write_bytes(b"not records")
    files = [DATA / "golden" / "napoleon.tapis", DATA / "golden" / "dame-de-pique.tapis"]
    done = tapis("archive", "add", archive, *files, bad, "--json")
    assert done.returncode == 2, done.stderr
    got = json.loads(done.stdout)
    assert got["added"] == 2 and got["duplicates"] == 0 and got["refused"] == []
    assert [u["file"] for u in got["unreadable"]] == [str(bad)]
    again = json.loads(tapis("archive", "add", archive, *files, "--json").stdout)
    assert again["added"] == 0 and again["duplicates"] == 2


def test_a_match_that_now_ends_mid_hand_is_rescored_to_that_end(tmp_path: Path) -> None:
    # Under target_fiches=1, a declaration that scores before any card (L'Impériale's carré,
    # IMP-A.E3) ends the match in the middle of its hand: the hand's remaining recorded actions
    # were then refused ("the match is already over"), and the record was counted not
    # replayable. Napoléon's stop_when_decided ends a hand before its recorded end likewise.
    from tapis_cartes.clients.corpus import make_corpus
    from tapis_cartes.records.codec import write_envelopes
    from tapis_cartes.records.score import replay_changed

    cases = [("imperiale", "academie", "target_fiches=1"), ("nap", "", "stop_when_decided=true")]
    mid_hand = 0
    for game, ruleset, change in cases:
        corpus = make_corpus(game, 8, seed="mid-hand", ruleset=ruleset)
        key, value = change.split("=")
        for env in corpus:
            rec = decode_record(env.record)
            match = replay_changed(rec, {key: value == "true" or int(value)})
            played = [len(r.actions) for r in match.results]
            mid_hand += played != [len(h.actions) for h in rec.hands[: len(played)]]
        records = tmp_path / f"{game}.tapis"
        write_envelopes(records, corpus)
        archive = tmp_path / f"{game}.db"
        assert tapis("archive", "add", archive, records).returncode == 0
        done = tapis("archive", "rescore", archive, "--set", change, "--json")
        assert done.returncode == 0, done.stderr
        got = json.loads(done.stdout)
        assert (got["scored"], got["not_replayable"]) == (8, 0), got
        done = tapis("record", "score", records, "--set", change)
        assert done.returncode == 0 and "not replayable" not in done.stdout, done.stdout
    assert mid_hand > 0  # (some of the matches do end mid-hand)
