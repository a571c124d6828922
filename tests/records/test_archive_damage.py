"""`tapis archive` on an archive another program changed: values of the wrong shape, NULLs,
envelopes that do not decode, tables dropped, a damaged page. Each is a clear `ArchiveError`
naming the archive, the column and the record (exit 2), never a traceback; `export` names a bad
record and leaves it out; a failed `rescore` leaves no run behind. The archives are made by the
real `tapis archive add`, then changed with SQLite."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.codec import read_envelopes, record_id
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import tapis
from tests.records.archives import SET, archive_of, copy_of, rows

N = 6  # Dame de Pique matches in the archive


@pytest.fixture(scope="module")
def corpus() -> list[pb.RecordEnvelope]:
    return make_corpus("hearts", N, seed="archive-damage")


@pytest.fixture(scope="module")
def archive(corpus: list[pb.RecordEnvelope], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of the corpus with one finished re-scoring run (copy it before changing it)."""
    db = archive_of(corpus, tmp_path_factory.mktemp("damage"))
    done = tapis("archive", "rescore", db, *SET, "--workers", "1")
    assert done.returncode == 0, done.stderr
    for args in (["query"], ["runs"], ["runs", "1"], ["runs", "1", "--json"]):  # as made: read
        done = tapis("archive", args[0], db, *args[1:])
        assert done.returncode == 0, done.stderr
    return db


def changed(archive: Path, tmp_path: Path, *sql: str, params: Any = ()) -> Path:
    """A copy of the archive, changed by `sql` (run with `params`); NOT NULL is dropped from the
    records table first (as another program may), so that NULLs can be stored."""
    db = copy_of(archive, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        ((schema,),) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'records'")
        conn.execute("PRAGMA writable_schema = 1")
        conn.execute(
            "UPDATE sqlite_master SET sql = ? WHERE name = 'records'",
            [schema.replace(" NOT NULL", "")],
        )
        conn.execute("PRAGMA writable_schema = 0")
    conn.close()
    conn = sqlite3.connect(db)  # (the schema read again)
    with conn:
        for statement in sql:
            conn.execute(statement, params)
    conn.close()
    return db


def first_id(db: Path) -> str:
    ((rid,),) = rows(db, "SELECT record_id FROM records ORDER BY rowid LIMIT 1")
    return str(rid)


def refused(done: Any, *words: str) -> None:
    """The command ended with exit 2, its message holding `words`, no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


# --- JSON of the wrong shape --------------------------------------------------------------

WRONG_SHAPES = [
    ("winners", "7"),
    ("winners", "null"),
    ("winners", '{"a": 1}'),
    ("winners", '["Ann"]'),
    ("winners", "[-1]"),
    ("winners", "[true]"),
    ("scores", "7"),
    ("scores", "null"),
    ("scores", '[[1, 2, 3], ["x"], [], null]'),
    ("scores", "[[1], [2, 3]]"),
    ("scores", "[[1e999], [0], [0], [0]]"),
    ("players", "7"),
    ("players", "null"),
    ("players", "[1, 2]"),
    ("players", '{"a": 1}'),
    ("options", "[1]"),
    ("options", '{"end_threshold": [1]}'),
]


@pytest.mark.parametrize(("column", "value"), WRONG_SHAPES)
def test_json_of_the_wrong_shape_is_named_with_its_column_and_record(
    archive: Path, tmp_path: Path, column: str, value: str
) -> None:
    db = changed(
        archive, tmp_path, f"UPDATE records SET {column} = ? WHERE rowid = 1", params=[value]
    )
    rid = first_id(db)
    for flags in ([], ["--json"], ["--player", "Ann"]):
        done = tapis("archive", "query", db, *flags)
        refused(done, f"records.{column} of record {rid}", repr(value))
        assert done.stdout == ""  # not printed as it is, with exit 0


def test_a_result_of_a_status_tapis_never_stores_is_named(archive: Path, tmp_path: Path) -> None:
    # It was counted as "not replayable", with a rule of "", and passed through `--json`.
    db = changed(archive, tmp_path, "UPDATE rescore_results SET status = 'bogus' WHERE rowid = 1")
    ((rid,),) = rows(db, "SELECT record_id FROM rescore_results WHERE rowid = 1")
    said = f"rescore_results.status of record {rid} (run 1) is 'bogus', not 'ok' or"
    for args in (["runs", "1", "--changed"], ["runs", "1", "--json"]):
        refused(tapis("archive", args[0], db, *args[1:]), said)
    # A run that is continued counts its stored results again.
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE rescore_runs SET finished_at = NULL")
        conn.execute("DELETE FROM rescore_results WHERE rowid = 2")
    refused(tapis("archive", "rescore", db, *SET, "--workers", "1"), said)


@pytest.mark.parametrize(
    ("sql", "said"),
    [
        ("player_count = 9", "('dame-de-pique', 'standard', 9) are no rule set of Tapis: Dame"),
        ("ruleset = 'equipe'", "('dame-de-pique', 'equipe', 4) are no rule set of Tapis: unknown"),
    ],
)
def test_a_summary_that_is_no_rule_set_is_named_with_its_record(
    archive: Path, tmp_path: Path, sql: str, said: str
) -> None:
    # A re-scoring checks its options against the rule sets of the records' summaries: one
    # changed there was blamed on the options ("9 are named", where the record names 4).
    db = changed(archive, tmp_path, f"UPDATE records SET {sql} WHERE rowid = 1")
    runs = rows(db, "SELECT * FROM rescore_runs")
    done = tapis("archive", "rescore", db, "--set", "end_threshold=77")
    refused(done, f"records.game, ruleset and player_count of record {first_id(db)} {said}")
    assert rows(db, "SELECT * FROM rescore_runs") == runs


@pytest.mark.parametrize("column", ["players", "scores", "options"])
def test_json_nested_too_deep_is_named_with_its_column_and_record(
    archive: Path, tmp_path: Path, column: str
) -> None:
    deep = "[" * 200_000 + "]" * 200_000  # (Python's JSON reader gives up: RecursionError)
    db = changed(
        archive, tmp_path, f"UPDATE records SET {column} = ? WHERE rowid = 1", params=[deep]
    )
    for flags in ([], ["--json"]):
        refused(tapis("archive", "query", db, *flags), f"records.{column} of record")


def test_names_of_the_wrong_shape_stop_rescore_and_runs_clearly(
    archive: Path, tmp_path: Path
) -> None:
    """`players` `{"a": 1}` once ended in `KeyError: 0` in rescore's and runs' text."""
    db = changed(archive, tmp_path, "UPDATE records SET players = '{\"a\": 1}'")
    for args in (["runs", db, "1", "--changed"], ["rescore", db, *SET, "--workers", "1"]):
        refused(tapis("archive", *args), "records.players of record ", "a list of names")


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("rescore_results", "old_scores", "'7'"),
        ("rescore_results", "new_winners", "'[\"x\"]'"),
        ("rescore_results", "first_diff", "'{\"hand\": 1}'"),
        ("rescore_results", "old_scores", "'[[1, 2]]'"),  # two units in a one-unit game
        ("rescore_results", "old_finished", "NULL"),
        ("rescore_runs", "options", "'[]'"),
        ("rescore_runs", "total", "'many'"),
    ],
)
def test_a_run_of_the_wrong_shape_is_named(
    archive: Path, tmp_path: Path, table: str, column: str, value: str
) -> None:
    db = copy_of(archive, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        if column == "old_finished":  # (NOT NULL dropped, as another program may)
            conn.execute("PRAGMA writable_schema = 1")
            conn.execute(
                "UPDATE sqlite_master SET sql = replace(sql, 'old_finished INTEGER NOT NULL', "
                "'old_finished INTEGER') WHERE name = 'rescore_results'"
            )
    conn.close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"UPDATE {table} SET {column} = {value}")
    conn.close()
    refused(tapis("archive", "runs", db, "1"), f"{table}.{column} of ")
    if table == "rescore_runs":
        refused(tapis("archive", "runs", db), f"{table}.{column} of run 1")


# --- NULLs and SQL values of the wrong type -----------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [("game", None), ("played_at", None), ("players", None), ("hands", "abc"), ("record_id", None)],
)
def test_a_null_or_a_value_of_the_wrong_type_is_named(
    archive: Path, tmp_path: Path, column: str, value: Any
) -> None:
    db = changed(
        archive, tmp_path, f"UPDATE records SET {column} = ? WHERE rowid = 1", params=[value]
    )
    shown = "NULL" if value is None else repr(value)
    refused(tapis("archive", "query", db), f"records.{column} of ", shown)


# --- envelopes ------------------------------------------------------------------------------

BAD_ENVELOPES = [
    (b"\xff" * 9, "is not a record envelope"),
    (b"", "holds no record"),  # an empty envelope: a record of format version 0
    ("hello", "is 'hello', not bytes"),
    (42, "is 42, not bytes"),
    (None, "is NULL, not bytes"),
    # Longer than a record holds (64 MiB): named without being read; it was "string or blob
    # too big" for every record of an export, and read whole by a re-scoring.
    (bytes(65 << 20), "is 68,157,440 bytes long, more than a record holds (67,108,864)"),
]


@pytest.mark.parametrize(("envelope", "why"), BAD_ENVELOPES)
def test_show_of_an_envelope_that_does_not_decode_names_the_record(
    archive: Path, tmp_path: Path, envelope: Any, why: str
) -> None:
    db = changed(
        archive, tmp_path, "UPDATE records SET envelope = ? WHERE rowid = 1", params=[envelope]
    )
    rid = first_id(db)
    refused(tapis("archive", "show", db, rid[:10]), f"record {rid}", why)
    # The others still show.
    ((other,),) = rows(db, "SELECT record_id FROM records WHERE rowid = 2")
    assert tapis("archive", "show", db, other).returncode == 0


@pytest.mark.parametrize(("envelope", "why"), BAD_ENVELOPES)
def test_export_names_a_bad_envelope_and_writes_the_others(
    archive: Path, tmp_path: Path, envelope: Any, why: str
) -> None:
    """As `archive add` does with a partly bad file: the good records go out, each bad one is
    named (exit 1); what is written verifies."""
    db = changed(
        archive, tmp_path, "UPDATE records SET envelope = ? WHERE rowid = 1", params=[envelope]
    )
    rid = first_id(db)
    out = tmp_path / "out.tapis"
    done = tapis("archive", "export", db, "-o", out)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"record {rid}" in done.stderr and why in done.stderr
    assert done.stdout.strip() == f"{N - 1} records -> {out}"
    assert [record_id(e.record) for e in read_envelopes(out)] == [
        r for (r,) in rows(db, "SELECT record_id FROM records WHERE rowid > 1 ORDER BY rowid")
    ]
    assert tapis("record", "verify", out).returncode == 0
    csv = tmp_path / "out.csv"
    done = tapis("archive", "export", db, "-o", csv, "--format", "csv", "--table", "results")
    assert done.returncode == 1, done.stderr
    assert f"record {rid}" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout.strip().endswith(f"from {N - 1} records -> {csv}")


def test_export_of_only_bad_envelopes_writes_nothing(archive: Path, tmp_path: Path) -> None:
    db = changed(archive, tmp_path, "UPDATE records SET envelope = x'ff'")
    out = tmp_path / "out.tapis"
    out.write_bytes(b"kept")
    done = tapis("archive", "export", db, "-o", out)
    refused(done, "no record to export", f"{N} records selected")
    assert done.stderr.count("left out: record ") == N
    assert out.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


@pytest.mark.parametrize(("envelope", "why"), BAD_ENVELOPES)
def test_rescore_counts_a_bad_envelope_as_not_replayable(
    archive: Path, tmp_path: Path, envelope: Any, why: str
) -> None:
    db = changed(
        archive, tmp_path, "UPDATE records SET envelope = ? WHERE rowid = 1", params=[envelope]
    )
    done = tapis("archive", "rescore", db, "--set", "end_threshold=50", "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["scored"], got["not_replayable"]) == (N - 1, 1)
    assert got["refusals"] in ({"record:decode": 1}, {"record:format-version": 1})


# --- SQLite's own errors --------------------------------------------------------------------


def _empty_records_root(db: Path) -> None:
    """The records table's root page overwritten with an empty leaf: the table reads as
    empty, without an error of SQLite, while its indexes still list every record."""
    ((page_size,),) = rows(db, "PRAGMA page_size")
    ((root,),) = rows(db, "SELECT rootpage FROM sqlite_master WHERE name = 'records'")
    with db.open("r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(bytes([0x0D, 0, 0, 0, 0, 0, page_size >> 8 & 0xFF, 0]))  # no cell


def test_a_failed_rescore_leaves_no_run_behind(archive: Path, tmp_path: Path) -> None:
    """The records table unreadable to the workers (its root page emptied: they find fewer
    records than its indexes list): the run fails before storing any result; it is not left
    as an "interrupted" run of no record. (A record id of NULL no longer fails a run: it is
    one result, not replayable; test_archive_hostile.py.)"""
    db = copy_of(archive, tmp_path)
    _empty_records_root(db)
    before = rows(db, "SELECT * FROM rescore_runs")
    done = tapis("archive", "rescore", db, "--set", "end_threshold=50", "--workers", "1")
    refused(done, "the archive is damaged")
    assert rows(db, "SELECT * FROM rescore_runs") == before


@pytest.mark.parametrize(
    ("table", "commands"),
    [
        ("record_players", [["query", "--player", "Ann"], ["add", "{corpus}"]]),
        ("rescore_runs", [["runs"], ["runs", "1"], ["rescore", *SET]]),
        ("rescore_results", [["runs", "1", "--changed"], ["rescore", *SET, "--workers", "1"]]),
        ("records", [["add", "{corpus}"]]),
    ],
)
def test_a_dropped_table_is_named(
    archive: Path, tmp_path: Path, table: str, commands: list[list[str]]
) -> None:
    # (a record removed too: `add` has one to store, not only duplicates)
    db = changed(archive, tmp_path, "DELETE FROM records WHERE rowid = 1", f"DROP TABLE {table}")
    runs = rows(db, "SELECT * FROM rescore_runs") if table != "rescore_runs" else []
    corpus = archive.parent / "corpus.tapis"
    for command in commands:
        args = [a.format(corpus=corpus) for a in command]
        refused(tapis("archive", args[0], db, *args[1:]), str(db), f"no such table: {table}")
    if table != "rescore_runs":  # no run left behind by a failed rescore
        assert rows(db, "SELECT * FROM rescore_runs") == runs
    if table != "records":  # the records can still be read, to be saved elsewhere
        assert tapis("archive", "export", db, "-o", tmp_path / "saved.tapis").returncode == 0


def test_a_damaged_page_is_named(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    data = bytearray(db.read_bytes())
    data[4096:] = bytes(range(256)) * ((len(data) - 4096) // 256)  # every page but the first
    db.write_bytes(data)
    out = tmp_path / "out.tapis"
    for args in (
        ["query", db],
        ["show", db, first_id(archive)],
        ["export", db, "-o", out],
        ["runs", db, "1"],
        ["add", db, archive.parent / "corpus.tapis"],
    ):
        refused(tapis("archive", *args), str(db), "malformed")
    assert not out.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["rescore", "--set", "end_threshold=77", "--workers", "1"],
        ["rescore", "--set", "end_threshold=77", "--workers", "2"],
        ["query"],
        ["query", "--limit", "2"],
        ["export", "-o", "{out}"],
    ],
)
def test_a_records_table_emptied_by_damage_is_not_read_as_empty(
    archive: Path, tmp_path: Path, command: list[str]
) -> None:
    # The table's root page overwritten with an empty leaf: the table reads as empty, without
    # an error of SQLite, while its indexes still list every record. A re-scoring stored a
    # finished run of 0 records; a query and an export said "0 records".
    db = copy_of(archive, tmp_path)
    _empty_records_root(db)
    runs = rows(db, "SELECT * FROM rescore_runs")
    out = tmp_path / "out.tapis"
    args = [a.format(out=out) for a in command]
    refused(tapis("archive", args[0], db, *args[1:]), f"{db}: the archive is damaged")
    assert rows(db, "SELECT * FROM rescore_runs") == runs
    assert not out.exists()


def test_an_archive_locked_by_another_program_is_said_locked(archive: Path, tmp_path: Path) -> None:
    # An archive another program turned to a rollback journal and holds locked: SQLite cannot
    # read even its schema. It was "not an archive (database is locked)".
    db = copy_of(archive, tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode = DELETE")
        holder.execute("BEGIN EXCLUSIVE")
        refused(
            tapis("archive", "query", db),
            f"{db}: the archive cannot be opened: database is locked (another program is writing",
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert tapis("archive", "query", db).returncode == 0


# --- command-line values ---------------------------------------------------------------------


def test_a_limit_past_64_bits_is_refused(archive: Path) -> None:
    for command in (["query", archive], ["runs", archive, "1"]):
        done = tapis("archive", *command, "--limit", str(10**23))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "--limit: must be at most 9223372036854775807" in done.stderr
    assert tapis("archive", "query", archive, "--limit", str(2**63 - 1)).returncode == 0


def test_an_option_set_twice_is_refused(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    before = rows(db, "SELECT * FROM rescore_runs")
    done = tapis("archive", "rescore", db, "--set", "end_threshold=50", "--set", "end_threshold=60")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "option 'end_threshold' is given twice" in done.stderr
    assert rows(db, "SELECT * FROM rescore_runs") == before


# --- what Tapis never makes in an archive -----------------------------------------------------

ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n"


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        (
            [
                "DROP TABLE record_players",
                f"CREATE VIEW record_players AS SELECT 'x' AS record_id, i AS seat,"
                f" 'Ann' AS name FROM ({ENDLESS})",
            ],
            "a view 'record_players'",
        ),
        (
            [
                "CREATE TRIGGER slow AFTER INSERT ON records"
                f" BEGIN SELECT max(i) FROM ({ENDLESS}); END"
            ],
            "a trigger 'slow'",
        ),
        (
            [
                "ALTER TABLE records ADD COLUMN big BLOB"
                " GENERATED ALWAYS AS (zeroblob(900000000)) VIRTUAL"
            ],
            "records.big is a generated column",
        ),
    ],
)
def test_what_tapis_never_makes_in_an_archive_is_refused_at_once(
    archive: Path, tmp_path: Path, sql: list[str], named: str
) -> None:
    """A view or a trigger (a query or a write would run it, without end) or a generated
    column (gigabytes made when read), put in an archive by another program: every command
    refuses the archive, naming it, before it reads or writes anything."""
    db = changed(archive, tmp_path, "DELETE FROM records WHERE rowid = 1", *sql)
    corpus = archive.parent / "corpus.tapis"
    for command in (
        ["query", "--player", "Ann"],
        ["add", corpus],
        ["export", "-o", tmp_path / "out.tapis"],
        ["rescore", *SET],
        ["runs"],
    ):
        refused(tapis("archive", command[0], db, *command[1:]), named, "Tapis never makes")


def test_text_that_is_not_utf8_is_named_in_its_row(archive: Path, tmp_path: Path) -> None:
    """`x'ff' || ...` in sqlite3 makes TEXT of bytes that are not UTF-8: SQLite's reading
    failed each command whole ("Could not decode to UTF-8 column ..."), without naming the
    record; a re-scoring blamed its workers' file and could never finish."""
    db = changed(
        archive,
        tmp_path,
        "UPDATE records SET envelope = substr(envelope, 1, 100) || x'ff' || "
        "substr(envelope, 102) WHERE rowid = 1",
    )
    rid = first_id(db)
    assert rows(db, "SELECT typeof(envelope) FROM records WHERE rowid = 1") == [("text",)]
    refused(tapis("archive", "show", db, rid), f"record {rid}", "not bytes")
    done = tapis("archive", "export", db, "-o", tmp_path / "out.tapis")
    assert done.returncode == 1 and f"record {rid}" in done.stderr, done.stderr
    done = tapis("archive", "rescore", db, "--set", "end_threshold=50", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["finished"] and summary["refusals"] == {"record:decode": 1}, summary
    bad_game = changed(archive, tmp_path, "UPDATE records SET game = x'68ff' WHERE rowid = 2")
    refused(tapis("archive", "query", bad_game), "records.game of ")
