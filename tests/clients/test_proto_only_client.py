"""A client in another language that knows only the .proto files (Node.js, grpc-js with
proto-loader) plays whole games on a real `tapis serve` through its seats' streams, one call
per move (WatchTable and a SubmitAction per move), or one call per seat for the match
(PlaySeat), and `tapis record verify --key` accepts the signed records it writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.records.codec import decode_record, read_envelopes
from tests.clients.node import run_node
from tests.commands import tapis

SCRIPT = Path(__file__).resolve().parent / "node" / "play.mjs"


LOOPS = ["watch", "play-seat"]


def calls_per_move(summary: dict[str, Any], loop: str) -> None:
    """The calls the client made fit its loop: never GetView; with WatchTable a SubmitAction
    per action made (and the refused card), a stream per seat; with PlaySeat one call per
    seat and no other call per move."""
    calls = summary["calls"]
    assert "GetView" not in calls, calls
    if loop == "watch":
        assert calls["SubmitAction"] == summary["actions"] + int(summary["refusalChecked"])
        seats = calls["WatchTable"]
    else:
        assert "SubmitAction" not in calls and "WatchTable" not in calls, calls
        seats = calls["PlaySeat"]
    assert seats in (2, 3, 4, 6), calls


def each_event_once(summary: dict[str, Any]) -> None:
    """Every seat of a PlaySeat client received every event of the table, each once."""
    received = summary["received"]
    assert received, summary
    last = max(max(indices) for indices in received.values())
    for seat, indices in received.items():
        assert sorted(indices) == list(range(last + 1)), (seat, indices)


@pytest.mark.parametrize("loop", LOOPS)
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
    tmp_path: Path, game: str, options: list[str], loop: str
) -> None:
    out = tmp_path / "game.tapis"
    result = run_node(tmp_path, SCRIPT, game, str(out), *options, env={"TAPIS_LOOP": loop})
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["actions"] > 0 and summary["refusalChecked"] is True
    # Every call it made (ListGames, CreateTable, a stream per seat, the refused card,
    # GetRecord, every SubmitAction) at most 1.05 per move, and never GetView.
    calls_per_move(summary, loop)
    assert sum(summary["calls"].values()) / summary["actions"] <= 1.05, summary
    if loop == "play-seat":
        each_event_once(summary)
    verify = tapis("record", "verify", "--key", tmp_path / "k.key", out)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "1 record, 1 valid, 0 invalid" in verify.stdout


@pytest.mark.parametrize("loop", LOOPS)
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
    tmp_path: Path, game: str, options: list[str], policy: str, loop: str
) -> None:
    """The Node.js client plays a timed match through its seats' streams, one call per move
    (or one PlaySeat call per seat);
    one seat stops answering (for good under forfeit, for two turns under autoplay) and the
    referee acts for it when its time runs out: the signed record shows it and verifies."""
    action_ms = 1500
    forfeit = policy == "TIMEOUT_POLICY_FORFEIT"
    silent = {"seat": 1, "from": 3, "count": None if forfeit else 2}
    out = tmp_path / "game.tapis"
    result = run_node(
        tmp_path,
        SCRIPT,
        game,
        str(out),
        *options,
        env={
            "TAPIS_TIME_CONTROL": json.dumps({"action_ms": action_ms, "policy": policy}),
            "TAPIS_SILENT": json.dumps(silent),
            "TAPIS_LOOP": loop,
        },
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    calls_per_move(summary, loop)
    if loop == "play-seat":
        each_event_once(summary)
    verify = tapis("record", "verify", "--key", tmp_path / "k.key", out)
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
