"""A client in another language that knows only the .proto files (Node.js, grpc-js with
proto-loader) plays whole games on a real `tapis serve` through its seats' streams, one call
per move, and `tapis record verify --key` accepts the signed records it writes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.util import Server

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "node" / "play.mjs"
PACKAGES = ["@grpc/grpc-js@1.14", "@grpc/proto-loader@0.8", "protobufjs@7.5"]


def node_modules() -> Path:
    """The npm packages the Node client needs, installed once next to the venv."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    prefix = Path(sys.prefix) / "node-client"
    marker = prefix / "node_modules" / "@grpc" / "proto-loader"
    if not marker.exists():
        subprocess.run(
            [
                "npm",
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(prefix),
                *PACKAGES,
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return prefix / "node_modules"


@pytest.mark.parametrize(
    ("game", "options"),
    [
        ("hearts", ["end_threshold=60"]),
        ("nap", ["deals=12"]),
        ("imperiale", ["target_fiches=10"]),
        ("triomphe", ["target=10"]),
    ],
)
def test_node_client_plays_and_its_record_verifies(
    tmp_path: Path, game: str, options: list[str]
) -> None:
    modules = node_modules()
    server = Server(tmp_path)
    server.start()
    try:
        import asyncio

        import grpc

        async def wait() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                await server.serving(channel)

        asyncio.run(wait())
        out = tmp_path / "game.tapis"
        # ES modules resolve packages from the script's folder: run a copy next to them.
        script = modules.parent / "play.mjs"
        shutil.copy(SCRIPT, script)
        result = subprocess.run(
            ["node", str(script), f"127.0.0.1:{server.port}", game, str(out), *options],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TAPIS_PROTO": str(ROOT / "proto")},
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout.strip().splitlines()[-1])
        assert summary["actions"] > 0 and summary["refusalChecked"] is True
        # Every call it made (ListGames, CreateTable, a stream per seat, the refused card,
        # GetRecord, every SubmitAction) at most 1.05 per move, and never GetView.
        calls = summary["calls"]
        assert "GetView" not in calls and calls["SubmitAction"] >= summary["actions"]
        assert sum(calls.values()) / summary["actions"] <= 1.05, summary
    finally:
        server.terminate()
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "record",
            "verify",
            "--key",
            str(tmp_path / "k.key"),
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "1 record, 1 valid, 0 invalid" in verify.stdout


@pytest.mark.parametrize("policy", ["TIMEOUT_POLICY_FORFEIT", "TIMEOUT_POLICY_AUTOPLAY"])
@pytest.mark.parametrize(
    ("game", "options"),
    [
        ("hearts", ["end_threshold=20"]),
        ("nap", ["deals=4"]),
        ("imperiale", ["target_fiches=5"]),
        ("triomphe", ["target=3"]),
    ],
)
def test_node_client_plays_a_timed_match_and_a_silent_seat_runs_out_of_time(
    tmp_path: Path, game: str, options: list[str], policy: str
) -> None:
    """The Node.js client plays a timed match through its seats' streams, one call per move;
    one seat stops answering (for good under forfeit, for two turns under autoplay) and the
    referee acts for it when its time runs out: the signed record shows it and verifies."""
    from records.codec import decode_record, read_envelopes

    modules = node_modules()
    server = Server(tmp_path)
    server.start()
    action_ms = 1500
    forfeit = policy == "TIMEOUT_POLICY_FORFEIT"
    silent = {"seat": 1, "from": 3, "count": None if forfeit else 2}
    try:
        import asyncio

        import grpc

        async def wait() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                await server.serving(channel)

        asyncio.run(wait())
        out = tmp_path / "game.tapis"
        script = modules.parent / "play.mjs"
        shutil.copy(SCRIPT, script)
        result = subprocess.run(
            ["node", str(script), f"127.0.0.1:{server.port}", game, str(out), *options],
            capture_output=True,
            text=True,
            timeout=300,
            env={
                **os.environ,
                "TAPIS_PROTO": str(ROOT / "proto"),
                "TAPIS_TIME_CONTROL": json.dumps({"action_ms": action_ms, "policy": policy}),
                "TAPIS_SILENT": json.dumps(silent),
            },
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
    calls = summary["calls"]
    # One call per move: a SubmitAction per action made (and the one refused card), one
    # stream per seat for the match, never GetView.
    assert "GetView" not in calls
    assert calls["SubmitAction"] == summary["actions"] + int(summary["refusalChecked"])
    seats = calls["WatchTable"]
    assert seats in (2, 3, 4, 6)
    verify = subprocess.run(
        [sys.executable, "-m", "clients.cli", "record", "verify", "--key",
         str(tmp_path / "k.key"), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert verify.returncode == 0, verify.stdout + verify.stderr
    rec = decode_record(read_envelopes(out)[0].record)
    assert rec.rules.time_control.action_ms == action_ms
    timed_out = [(h, t) for h, hand in enumerate(rec.hands) for t in hand.timeouts]
    for h, t in timed_out:
        assert rec.hands[h].seats[t - 1] == 1 and rec.hands[h].elapsed_ms[t - 1] == action_ms
    if forfeit:
        assert rec.outcome.rule == "CLOCK.FORFEIT" and rec.outcome.resigned == 1
        assert len(timed_out) == 1 and summary["ignored"] == 1
    else:
        assert rec.outcome.finished and rec.outcome.rule == ""
        assert len(timed_out) == summary["ignored"] == 2
