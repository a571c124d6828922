"""Error details read by a client in another language that knows only referee.proto and
docs/protocol.md (Node.js: tests/server/node/errors.mjs) from a real `tapis serve`: the
google.rpc.Status of the `grpc-status-details-bin` trailer and each detail by its type URL."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clients.node import run_node

SCRIPT = Path(__file__).resolve().parent / "node" / "errors.mjs"


def test_node_client_reads_the_status_details(tmp_path: Path) -> None:
    result = run_node(tmp_path, SCRIPT)
    assert result.returncode == 0, result.stderr
    cases = {c["name"]: c for c in map(json.loads, result.stdout.strip().splitlines())}
    for case in cases.values():  # the trailer repeats the call's status
        assert case["status"] is not None, case
        assert case["status"]["message"] == case["message"], case
    bad_request = "type.googleapis.com/google.rpc.BadRequest"
    for name, field in [
        ("bad-option", "options[0].int_value"),
        ("long-name", "seats[1].name"),
        ("players-vs-seats", "options[0].int_value"),
        ("undefined-action", "action"),
    ]:
        case = cases[name]
        assert case["code"] == "INVALID_ARGUMENT", case
        (detail,) = case["details"]
        assert detail["type_url"] == bad_request, case
        (violation,) = detail["value"]["field_violations"]
        assert violation["field"] == field, case
        assert case["message"] == f"{field}: {violation['description']}"
    illegal = cases["illegal-action"]
    assert illegal["code"] == "FAILED_PRECONDITION"
    (detail,) = illegal["details"]
    assert detail["type_url"] == "type.googleapis.com/tapis.v1.ActionRefusal"
    assert detail["value"]["rule"].startswith("DP.") and detail["value"]["legal_actions"]
    stale = cases["stale"]
    assert stale["code"] == "ABORTED"
    (detail,) = stale["details"]
    assert detail["type_url"] == "type.googleapis.com/tapis.v1.StaleAction"
    assert detail["value"]["action_index"] == 0
    assert cases["full-table"]["code"] == "PERMISSION_DENIED"
    assert cases["record-too-early"]["code"] == "FAILED_PRECONDITION"
    assert not cases["full-table"]["details"] and not cases["record-too-early"]["details"]
