"""A table at its game's extreme option values, played by random legal moves through the
referee's own `Table` to its end (or to the referee's limits of hands and actions): its scores
fit the record, and its signed record, like every reply, stays far below what a gRPC client
accepts by default (4 MiB)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tapis_cartes.records.codec import decode_record
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine import make_rules, new_match
from tapis_cartes.referee.server.limits import (
    FD_RESERVE,
    MAX_NAME,
    MIN_CONNECTIONS,
    Limits,
    connection_bound,
)
from tapis_cartes.referee.server.tables import Seat, Table, token_hash
from tapis_cartes.v1 import referee_pb2 as pb

from ..commands import tapis

MAX_RECORD_BYTES = 2 << 20  # a record at the referee's limits, with room to spare
MAX_REPLY_BYTES = 4 << 20  # what a gRPC client accepts by default

# (game, ruleset, options, players): each game at its largest values (int_range).
EXTREMES: list[tuple[str, str, dict[str, Any], int]] = [
    ("dame-de-pique", "standard", {"end_threshold": 1000, "moon_mode": "subtract_self"}, 4),
    ("napoleon", "standard", {"players": 10, "deals": 1000, "scoring": "stakes"}, 10),
    (
        "imperiale",
        "academie",
        {"players": 3, "target_fiches": 100, "capot_fiches": 10, "trump_major_value": 2},
        3,
    ),
    ("imperiale", "moderne", {"target_fiches": 100}, 2),
    (
        "triomphe",
        "equipe",
        {"players": 6, "target": 100, "vole_value": 100, "vole_fail_penalty": -100},
        6,
    ),
    (  # voles worth little and failures costing much: the longest matches, stopped
        "triomphe",
        "equipe",
        {
            "players": 6,
            "target": 100,
            "vole_value": 1,
            "refused_abandon_vole_value": 1,
            "vole_fail_penalty": -100,
        },
        6,
    ),
    ("triomphe", "individuelle", {"players": 6, "target": 100, "vole_fail_penalty": -100}, 6),
    ("triomphe", "as-qui-pille", {"players": 6, "target": 100}, 6),
]


@pytest.mark.parametrize(("game", "ruleset", "options", "players"), EXTREMES)
def test_a_table_at_the_extreme_values_ends_within_the_reply_bounds(
    game: str, ruleset: str, options: dict[str, Any], players: int
) -> None:
    rules = make_rules(game, ruleset, options, players)
    limits = Limits()
    table = Table(
        id="t" * 16,
        rules=rules,
        options=options,
        seed=bytes(range(32)),
        created=0.0,
        creator="c",
        seats=[Seat("é" * MAX_NAME, False) for _ in range(players)],
        match=new_match(rules),
        limits=limits,
    )
    for seat in range(players):
        table.take(seat, "", token_hash(str(seat)))
    rng = random.Random(game + ruleset)
    while not table.finished:
        seat = table.match.to_act()[0]
        table.apply(seat, rng.choice(table.legal(seat)))
    key = Ed25519PrivateKey.generate()
    envelope, rid = table.signed_record(key)
    reply = pb.GetRecordResponse(record_id=rid, public_key=bytes(32))
    reply.envelope.ParseFromString(envelope)
    assert len(envelope) < MAX_RECORD_BYTES
    assert reply.ByteSize() < MAX_REPLY_BYTES
    assert len(table.match.results) <= limits.max_hands
    assert len(table.actions) <= limits.max_actions
    rec = decode_record(reply.envelope.record)
    assert rec.outcome.finished == table.match.finished
    if not table.match.finished:  # stopped at the referee's limits: the record says so
        assert rec.outcome.reason.startswith("stopped by the referee after")
    result = verify_envelope(reply.envelope, [key.public_key()])
    assert result.ok, result.error


@pytest.mark.parametrize(
    ("soft", "hard", "settable", "bound", "raised_to"),
    [
        (100_000, 100_000, True, 4096, None),  # room for both fronts: as asked
        (1024, 1_048_576, True, 4096, 2 * 4096 + FD_RESERVE),  # raised toward the hard limit
        (1024, 3000, True, (3000 - FD_RESERVE) // 2, 3000),  # raised to the hard limit only
        (1024, 1024, False, (1024 - FD_RESERVE) // 2, None),  # not raised: shared
    ],
)
def test_the_connection_bound_fits_the_files_the_process_may_open(
    monkeypatch: pytest.MonkeyPatch,
    soft: int,
    hard: int,
    settable: bool,
    bound: int,
    raised_to: int | None,
) -> None:
    import resource

    set_to: list[int] = []

    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        if not settable:
            raise ValueError("not allowed to raise the limit")
        set_to.append(limits[0])

    monkeypatch.setattr(resource, "getrlimit", lambda which: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    assert connection_bound(4096) == bound
    assert set_to == ([] if raised_to is None else [raised_to])


@pytest.mark.parametrize("files", [16, 64, 2 * MIN_CONNECTIONS + FD_RESERVE - 1])
def test_a_referee_without_the_files_its_connections_need_does_not_start(
    tmp_path: Path, files: int
) -> None:
    """Under `ulimit -n 16` `tapis serve` crashed in gRPC's core (SIGSEGV), and under 64 it
    served one connection at a time (a table of four players on connections of their own
    could not be played): it now says what it needs, and does not start."""
    limit = f"import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, ({files}, {files}))\n"
    got = tapis(
        "serve", "--listen", "127.0.0.1:0", "--db", tmp_path / "t.db", "--key", tmp_path / "k",
        setup=limit,
    )  # fmt: skip
    assert got.returncode == 1, got.stderr
    need = 2 * MIN_CONNECTIONS + FD_RESERVE
    assert f"this process may open {files} files at most (its limit, `ulimit -n`)" in got.stderr
    assert f"the referee needs {need}" in got.stderr and "raise the limit" in got.stderr
    assert "Traceback" not in got.stderr
    assert not (tmp_path / "t.db").exists()  # nothing made
