"""Hostile clients against a real `tapis serve` (scripts/fuzz_referee.py, run as a
subprocess): Hypothesis over every RPC's request fields, raw bytes, wrong and doubled
authorization, callers going away mid-call, then a SIGKILL and a SIGTERM, each followed by a
restart on the same store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_hostile_calls_get_no_unknown_or_internal_and_the_referee_restarts(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "scripts/fuzz_referee.py", "-n", "120", "--seed", "7"]
    done = subprocess.run(
        [*command, "--json", "--work", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = json.loads(done.stdout)
    assert report["unknown_or_internal"] == 0, report["bad_calls"]
    assert report["alive_after_calls"]
    assert [r["serving"] for r in report["restarts"]] == [True, True]
    assert report["log_errors"] == []
    assert report["ok"] and done.returncode == 0
    # The calls reached the referee's every kind of answer, not only its first check.
    codes = report["codes"]
    for code in ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "UNAUTHENTICATED", "FAILED_PRECONDITION"):
        assert codes.get(code, 0) > 0, codes
    # Every table it wrote answers after each restart.
    for restart in report["restarts"]:
        assert set(restart["tables"]) <= {"OK", "FAILED_PRECONDITION"}, restart
