"""The `tapis` command line, run as a real subprocess the way a person runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from records.codec import decode_record, envelope, read_envelopes, write_envelopes

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def tapis(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clients.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


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
