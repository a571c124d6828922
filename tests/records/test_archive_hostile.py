"""`tapis archive` tried as a hostile or unlucky user would: an export over the archive itself,
filters empty or not UTF-8, dates written with offsets, a stored envelope swapped for another
record's or changed and given a new id, text an archive holds that a terminal would obey, and
an `add` while another program writes. The archives are made by the real `tapis archive add`
and changed with SQLite; each command runs as a real subprocess."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.codec import canonical_bytes, decode_record, envelope, write_envelopes
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import ROOT, tapis
from tests.records.archives import archive_of, copy_of, rows

N = 6  # Dame de Pique matches in the archive


@pytest.fixture(scope="module")
def corpus() -> list[pb.RecordEnvelope]:
    return make_corpus("hearts", N, seed="archive-hostile")


@pytest.fixture(scope="module")
def archive(corpus: list[pb.RecordEnvelope], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return archive_of(corpus, tmp_path_factory.mktemp("hostile"))


def ids(db: Path) -> list[str]:
    return [str(r[0]) for r in rows(db, "SELECT record_id FROM records ORDER BY rowid")]


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr


@pytest.mark.parametrize("name", ["{db}", "{db}-wal", "{db}-shm", "link.db"])
def test_export_over_the_archive_is_refused_and_the_archive_kept(
    archive: Path, tmp_path: Path, name: str
) -> None:
    """The archive as the output, by its name, a link to it, or SQLite's files beside it:
    refused before anything is written; the archive is as it was."""
    db = copy_of(archive, tmp_path)
    (tmp_path / "link.db").symlink_to(db)
    before = db.read_bytes()
    output = tmp_path / name.format(db=db.name)
    done = tapis("archive", "export", db, "-o", output, "--limit", "1")
    no_traceback(done)
    assert done.returncode == 2, done.stdout
    assert "it is the archive" in done.stderr, done.stderr
    assert db.read_bytes() == before
    assert tapis("archive", "query", db).returncode == 0


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--player", "", "--player is empty"),
        ("--since", "", "--since is empty"),
        ("--ruleset", "nonsense", "no game has it"),
    ],
)
def test_a_filter_that_would_take_every_record_or_none_is_refused(
    archive: Path, flag: str, value: str, words: str
) -> None:
    for command in (["query"], ["export", "-o", "/dev/null"]):
        done = tapis("archive", command[0], archive, *command[1:], flag, value)
        no_traceback(done)
        assert done.returncode == 2 and words in done.stderr, done.stderr


def test_a_filter_that_is_not_utf8_is_refused(archive: Path) -> None:
    """Bytes that are not UTF-8 (as a terminal passes them) for a text filter: named, exit 2,
    not a traceback from SQLite's encoding."""
    for flag in ("--player", "--ruleset", "--game"):
        done = subprocess.run(
            [sys.executable, "-m", "tapis_cartes.clients.cli", "archive", "query",
             str(archive), flag.encode(), b"\xff"],
            capture_output=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 2 and "Traceback" not in err, err
        assert "UTF-8" in err or "no such game" in err, err


def test_dates_compare_as_instants(archive: Path, tmp_path: Path) -> None:
    """A bound with an offset is the instant it names; a date alone or in the basic form is
    that day's start (and as `--until`, the whole day); a time equal to a record's is in."""
    db = copy_of(archive, tmp_path)
    first, *rest = ids(db)
    played = [("2026-01-01T00:05:00Z", first), *(("2026-01-01T10:00:00Z", r) for r in rest)]
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany("UPDATE records SET played_at = ? WHERE record_id = ?", played)
    conn.close()

    def count(*args: str) -> int:
        done = tapis("archive", "query", db, "--json", *args)
        no_traceback(done)
        assert done.returncode == 0, done.stderr
        return len(done.stdout.splitlines())

    assert count("--since", "2026-01-01T01:00:00+01:00") == N  # 00:00 UTC
    assert count("--since", "20260101") == N
    assert count("--until", "2026-01-01T00:05:00") == 1  # on or before: the equal one in
    assert count("--until", "2026-01-01T01:05:00+01:00") == 1
    assert count("--until", "2026-01-01") == N  # the whole day
    assert count("--since", "2026-01-01T09:59:59Z", "--until", "2026-01-01T11:00:00+01:00") == (
        N - 1
    )
    done = tapis("archive", "query", db, "--since", "last week")
    assert done.returncode == 2 and "is not a date" in done.stderr, done.stderr


def test_an_envelope_swapped_for_another_records_is_named(archive: Path, tmp_path: Path) -> None:
    """A stored envelope that holds another record than its id says (the id is the SHA-256 of
    the record's bytes): `show` refuses it, `export` leaves it out and names it (exit 1)."""
    db = copy_of(archive, tmp_path)
    first, second, *_ = ids(db)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE records SET envelope = (SELECT envelope FROM records WHERE record_id = ?)"
            " WHERE record_id = ?",
            [second, first],
        )
    conn.close()
    done = tapis("archive", "show", db, first[:12])
    no_traceback(done)
    assert done.returncode == 2 and f"holds another record, {second}" in done.stderr, done.stderr
    out = tmp_path / "out.tapis"
    done = tapis("archive", "export", db, "-o", out)
    no_traceback(done)
    assert done.returncode == 1 and "holds another record" in done.stderr, done.stderr
    assert f"{N - 1} records -> " in done.stdout
    assert tapis("record", "verify", out).returncode == 0


def test_a_table_export_leaves_out_a_record_that_does_not_verify(
    archive: Path, tmp_path: Path
) -> None:
    """A record changed in the archive and stored under its new id (so the id holds): the
    CSV and Parquet exports read each record as verify does, name it and leave it out."""
    db = copy_of(archive, tmp_path)
    first = ids(db)[0]
    ((blob,),) = rows(db, "SELECT envelope FROM records WHERE record_id = ?", first)
    env = pb.RecordEnvelope.FromString(blob)
    rec = pb.GameRecord.FromString(env.record)
    del rec.outcome.scores[-1]
    env.record = rec.SerializeToString(deterministic=True)
    new = hashlib.sha256(env.record).hexdigest()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE records SET envelope = ?, record_id = ? WHERE record_id = ?",
                     [env.SerializeToString(), new, first])  # fmt: skip
    conn.close()
    done = tapis("archive", "export", db, "-o", tmp_path / "r.csv", "--format", "csv",
                 "--table", "results")  # fmt: skip
    no_traceback(done)
    assert done.returncode == 1, done.stderr
    assert f"record {new}: does not verify" in done.stderr, done.stderr
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert len(lines) == 1 + 4 * (N - 1)  # a row per seat of the others


def test_what_an_archive_holds_reaches_no_terminal_as_control(
    archive: Path, tmp_path: Path
) -> None:
    """Dates, rulesets, run options and file names with escapes: printed as `\\u001b`."""
    db = copy_of(archive, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE records SET played_at = ?", ["\x1b[2J\x1b]0;owned\x07"])
    conn.close()
    done = tapis("archive", "query", db)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\\u001b[2J" in done.stdout, done.stdout
    bad = tmp_path / "e\x1b[31mvil.tapis"
    bad.write_bytes(b"not a record file")
    done = tapis("archive", "add", db, bad)
    assert "\x1b" not in done.stderr and "\\u001b[31m" in done.stderr, done.stderr


def test_an_add_waits_for_another_writer(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    """An `archive add` while another program writes the archive (holds its write lock, then
    commits a change): the add waits for it and goes on. (Its transaction read first, then
    wrote: SQLite cannot wait there once another write has committed, "database is locked".)"""
    db = copy_of(archive, tmp_path)
    more = tmp_path / "more.tapis"
    write_envelopes(more, make_corpus("hearts", 2, seed="archive-hostile-more"))
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    cmd = [sys.executable, "-m", "tapis_cartes.clients.cli", "archive", "add", str(db), str(more)]
    add = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)  # fmt: skip
    time.sleep(4)  # the add has started, verified its records and begun to store them
    other.execute("UPDATE records SET added_at = added_at")
    other.execute("COMMIT")
    other.close()
    out, err = add.communicate(timeout=120)
    assert add.returncode == 0, err
    assert "2 added" in out, out
    assert len(ids(db)) == N + 2


def test_a_table_for_a_record_file_is_refused(archive: Path, tmp_path: Path) -> None:
    """`--table` without `--format csv|parquet` (a record file has no table): refused, not
    ignored."""
    done = tapis("archive", "export", archive, "-o", tmp_path / "x.tapis", "--table", "results")
    assert done.returncode == 2 and "--table results is for --format csv" in done.stderr
    assert not (tmp_path / "x.tapis").exists()


def test_another_programs_sqlite_file_is_left_as_it_is(
    corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    """`archive add` into an SQLite file of another program (tables, no `records`): refused,
    naming its tables; the file is not changed (no Tapis tables, no WAL mode)."""
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    with conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.close()
    before = other.read_bytes()
    records = tmp_path / "r.tapis"
    write_envelopes(records, corpus[:1])
    done = tapis("archive", "add", other, records)
    no_traceback(done)
    assert done.returncode == 2, done.stdout
    assert "not a Tapis archive" in done.stderr and "invoices" in done.stderr, done.stderr
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db", "r.tapis"]


def test_every_date_a_record_may_hold_is_found_by_the_date_filters(tmp_path: Path) -> None:
    """RFC 3339 allows "t" and "z", which SQLite's dates do not read: such a record was added,
    then left out of every `--since`/`--until` without a word. A date played that is no
    RFC 3339 date-time is refused by verify, and so by `archive add`."""
    from tapis_cartes.clients.bots import RandomBot
    from tapis_cartes.clients.corpus import play_record

    def dated(seed: str, date: str) -> pb.RecordEnvelope:
        return play_record("hearts", [RandomBot(seed)] * 4, seed, played_at=date)

    # And SQLite's dates, which the filters read, read no leap second and no offset past
    # 14:59: those records too were left out.
    dates = [
        "2026-03-01t10:00:00z",
        "2026-03-01T10:00:00.123456789+01:00",
        "2026-03-01T10:00:00Z",
        "2026-03-01T23:59:60Z",
        "2026-03-02T03:00:00+15:00",  # 12:00 UTC the day before
        "2026-03-01T00:01:00-23:59",  # 00:00 UTC the next day
    ]
    records = tmp_path / "dated.tapis"
    write_envelopes(records, [dated(f"d{i}", d) for i, d in enumerate(dates)])
    db = tmp_path / "dated.db"
    done = tapis("archive", "add", db, records)
    assert done.returncode == 0 and done.stdout.startswith("6 added"), done.stdout + done.stderr

    def count(*bounds: str) -> int:
        found = tapis("archive", "query", db, "--json", *bounds)
        assert found.returncode == 0, found.stderr
        return len(found.stdout.splitlines())

    assert count("--since", "2026-03-01T08:00:00Z") == 6
    assert count("--until", "2026-03-01T09:30:00Z") == 1  # 09:00:00.123 UTC
    assert count("--since", "2026-03-01T23:59:59.5Z", "--until", "2026-03-01") == 1  # the leap
    assert count("--since", "2026-03-01T12:00:00Z", "--until", "2026-03-01T12:00:00Z") == 1
    assert count("--since", "2026-03-02T00:00:00.000001Z") == 0
    assert count("--since", "2026-03-02") == 1 and count("--until", "9999-12-31") == 6

    bad = tmp_path / "bad.tapis"
    rec = decode_record(dated("d9", "").record)
    rec.provenance.played_at = "yesterday"  # (the library refuses to make it so)
    write_envelopes(bad, [envelope(canonical_bytes(rec))])
    done = tapis("archive", "add", db, bad)
    assert done.returncode == 1 and done.stdout.startswith("0 added"), done.stdout + done.stderr
    assert "provenance.played_at is neither empty nor an RFC 3339 date-time" in done.stderr


def test_commands_opening_a_new_archive_at_once_wait_for_each_other(tmp_path: Path) -> None:
    """Each made the archive's tables in a transaction that read its version first, and
    one of six at once failed "database is locked" at its first write."""
    code = (
        "import sys; from tapis_cartes.records.archive.schema import open_archive; "
        "open_archive(sys.argv[1]).close()"
    )
    for round_ in range(4):
        db = tmp_path / f"new{round_}.db"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code, str(db)], stderr=subprocess.PIPE, cwd=ROOT
            )
            for _ in range(6)
        ]
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, errors


def _open_new_archives(folder: str, rounds: int, barrier: Any, failures: Any) -> None:
    """One of the processes of the test below: each round, opens the round's new archive
    together with the others (released by `barrier`), and counts its failures."""
    from tapis_cartes.records.archive.schema import open_archive
    from tapis_cartes.referee.errors import ArchiveError

    for round_ in range(rounds):
        barrier.wait()
        try:
            open_archive(Path(folder) / f"{round_}.db").close()
        except ArchiveError as exc:
            with failures.get_lock():
                failures.value += 1
            print(exc, file=sys.stderr)


def test_processes_opening_a_new_archive_at_the_same_instant_all_open_it(tmp_path: Path) -> None:
    """The switch of a new archive to the write-ahead log says "database is locked" at once
    (SQLite's busy handler does not wait there) when another process switches it too: one of
    six commands opening a new archive at once failed so. Eight processes released together,
    twenty times."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, failures = context.Barrier(8), context.Value("i", 0)
    procs = [
        context.Process(target=_open_new_archives, args=(str(tmp_path), 20, barrier, failures))
        for _ in range(8)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [proc.exitcode for proc in procs] == [0] * 8
    assert failures.value == 0


def test_a_command_waiting_for_the_write_lock_stops_at_ctrl_c(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    """SQLite waited for another writer in C, where Python's signal handlers do not run: a
    Ctrl-C took effect only when the 30 s wait ended."""
    import signal

    db = copy_of(archive, tmp_path)
    records = tmp_path / "more.tapis"
    write_envelopes(records, corpus[:2])
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another program writing, for as long as it likes
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tapis_cartes.clients.cli", "archive", "add", str(db),
             str(records)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(3.0)  # (started, and waiting)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)  # (not the 30 s of the wait)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 130 and "Traceback" not in err, err


def test_an_add_of_files_none_of_which_can_be_read_makes_no_archive(
    corpus: list[pb.RecordEnvelope], archive: Path, tmp_path: Path
) -> None:
    """A mistyped file name: named, and no archive is made (nor an existing one opened) when
    no file given can be read; with one that can, its records go in and the others are
    named."""
    (tmp_path / "folder").mkdir()
    new = tmp_path / "new.db"
    done = tapis("archive", "add", new, tmp_path / "typo.tapis", tmp_path / "folder")
    no_traceback(done)
    assert done.returncode == 2
    assert f"{tmp_path / 'typo.tapis'}: No such file or directory: nothing added" in done.stderr
    assert f"{tmp_path / 'folder'}: Is a directory: nothing added" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]
    kept = copy_of(archive, tmp_path)
    before = ids(kept)
    done = tapis("archive", "add", kept, tmp_path / "typo.tapis")
    assert done.returncode == 2 and ids(kept) == before
    some = tmp_path / "some.tapis"
    write_envelopes(some, corpus[:1])
    done = tapis("archive", "add", new, tmp_path / "typo.tapis", some)
    assert done.returncode == 2, done.stderr
    assert "1 added" in done.stdout and "typo.tapis: No such file or directory" in done.stderr
    assert len(ids(new)) == 1


# --- rows, schema objects and texts of an archive a stranger sends ----------------------------


def _rescore_json(db: Path, *flags: str) -> dict[str, Any]:
    done = tapis("archive", "rescore", db, "--set", "end_threshold=50", "--json", *flags)
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_row_without_a_readable_record_id_is_one_result_and_the_run_finishes(
    archive: Path, tmp_path: Path, workers: str
) -> None:
    """A record id NULL, a blob, or longer than an archive holds (a record's bound): that row
    is one result, not replayable (`record:id`), stored under "(records row N)" with a detail
    naming the row and the column; every other record is re-scored and the run finishes. It
    stopped every run, every time. A row whose text id is that stand-in already keeps it, and
    the stand-in takes a mark more: the run's results still number its records."""
    db = copy_of(archive, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE records SET record_id = NULL WHERE rowid = 2")
        conn.execute("UPDATE records SET record_id = x'00ff' WHERE rowid = 3")
        conn.execute("UPDATE records SET record_id = '(records row 2)' WHERE rowid = 4")
        conn.execute("UPDATE records SET record_id = printf('%.*c', 66 << 20, 'a') WHERE rowid = 5")
    conn.close()
    summary = _rescore_json(db, "--workers", workers)
    assert summary["finished"] and summary["total"] == N, summary
    assert summary["scored"] == N - 4 and summary["refusals"] == {"record:id": 4}, summary
    results = rows(
        db,
        "SELECT record_id, rule, detail FROM rescore_results WHERE status != 'ok' ORDER BY 1",
    )
    assert [r[:2] for r in results] == [
        ("(records row 2)", "record:id"),  # row 4's own (text) id: holds another record
        ("(records row 2)'", "record:id"),
        ("(records row 3)", "record:id"),
        ("(records row 5)", "record:id"),
    ], results
    details = {r[0]: r[2] for r in results}
    assert "holds another record" in details["(records row 2)"]
    assert "records.record_id of row 2 is NULL, not text" in details["(records row 2)'"]
    assert "records.record_id of row 3 is b'\\x00\\xff', not text" in details["(records row 3)"]
    assert (
        "records.record_id of row 5 is longer than an archive holds" in (details["(records row 5)"])
    )
    assert len(rows(db, "SELECT 1 FROM rescore_results")) == N
    assert _rescore_json(db, "--workers", workers)["finished"]  # (and again: a new run)


# SQL another program may add to an archive's tables: each makes SQLite evaluate an expression
# on what Tapis writes or reads, or changes what Tapis's queries read.
NOT_TAPIS = [
    (  # an index on an expression: evaluated on each result a re-scoring stores
        "CREATE INDEX idx_rescore_results_detail ON rescore_results (length(hex(detail)))",
        "index 'idx_rescore_results_detail', which Tapis never makes",
    ),
    (  # a partial index: its WHERE evaluated on each record added
        "CREATE INDEX idx_records_game ON records (game) WHERE length(hex(envelope)) > 0",
        "index 'idx_records_game' is not as Tapis makes it: it has 'WHERE LENGTH",
    ),
    ("CREATE INDEX extra ON record_players (seat)", "index 'extra', which Tapis never makes"),
    (  # a CHECK: evaluated on each row written
        "records: , CHECK (length(hex(envelope)) > 0))",
        "table 'records' is not as Tapis makes it: it has ', CHECK ( LENGTH",
    ),
    (  # a DEFAULT that is not a constant: evaluated on each run begun
        "rescore_runs: total INTEGER NOT NULL DEFAULT (length(hex(randomblob(9))))",
        "table 'rescore_runs' is not as Tapis makes it: it has '( LENGTH",
    ),
    (  # a column named rowid: Tapis's queries would read it, not the row's id
        "records: , rowid TEXT)",
        "table 'records' is not as Tapis makes it: it has ', ROWID TEXT )'",
    ),
    (  # without its primary key: one record stored twice
        "records: record_id TEXT,",
        "table 'records' is not as Tapis makes it: it has ', GAME TEXT NOT NULL",
    ),
    ("records: ) WITHOUT ROWID", "table 'records' is not as Tapis makes it: it has 'WITHOUT"),
]


def _made_again(db: Path, table: str, change: str) -> None:
    """Make `table` of `db` again with its SQL changed (`change`: a new column's or a
    constraint's text before its last parenthesis, `, ...)`; a column's whole text, `name
    ...,`, for the column of that name; or `) WITHOUT ROWID`), its rows kept, its indexes
    not made again."""
    conn = sqlite3.connect(db)
    ((sql,),) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", [table])
    if change.startswith(")"):
        sql += change[1:]
    elif change.startswith(","):
        sql = sql[: sql.rindex(")")] + change
    else:
        column = change.split()[0]
        start = sql.index(f"{column} ")
        end = min(i for i in (sql.find(",", start), sql.find(")", start)) if i > 0)
        sql = sql[:start] + change.rstrip(",") + sql[end:]
    columns = ", ".join(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
    with conn:
        conn.execute(f"CREATE TABLE kept AS SELECT * FROM {table}")
        conn.execute(f"DROP TABLE {table}")
        conn.execute(sql)
        copy = f"INSERT INTO {table} ({columns}) SELECT {columns} FROM kept"
        conn.execute(copy)
        if "TEXT," in change:  # (no primary key: the first record stored twice)
            conn.execute(copy + " LIMIT 1")
        conn.execute("DROP TABLE kept")
    conn.close()


@pytest.mark.parametrize(("sql", "named"), NOT_TAPIS)
def test_a_table_or_index_tapis_never_makes_is_refused_before_anything_is_written(
    archive: Path, tmp_path: Path, sql: str, named: str
) -> None:
    """Tapis refused views, triggers and generated columns, not the rest of what SQLite runs
    on its own writes (an index of 100 bytes made a re-scoring of 300 records take 68 s and
    239 MB) or what changes its reads (a traceback, a record exported twice): each command
    refuses the archive, naming the table or index, and the file is left as it is."""
    db = copy_of(archive, tmp_path)
    done = tapis("archive", "rescore", db, "--set", "end_threshold=70", "--workers", "1")
    assert done.returncode == 0, done.stderr  # (a run, for `runs 1`)
    if sql.startswith("CREATE"):
        conn = sqlite3.connect(db)
        with conn:
            if "idx_records_game " in sql:  # in place of Tapis's own index of that name
                conn.execute("DROP INDEX idx_records_game")
            conn.execute(sql)
        conn.close()
    else:
        table, change = sql.split(": ", 1)
        _made_again(db, table, change)
    before = db.read_bytes()
    corpus = archive.parent / "corpus.tapis"
    for command in (
        ["query"],
        ["show", ids(archive)[0][:12]],
        ["export", "-o", tmp_path / "out.tapis"],
        ["runs", "1"],
        ["add", corpus],
        ["rescore", "--set", "end_threshold=80", "--workers", "1"],
    ):
        done = tapis("archive", command[0], db, *command[1:])
        no_traceback(done)
        assert done.returncode == 2, (command, done.stdout)
        assert f"{db}: the archive" in done.stderr and named in done.stderr, done.stderr
        assert db.read_bytes() == before, command
    assert not (tmp_path / "out.tapis").exists()


def test_tapis_own_tables_written_otherwise_or_without_a_not_null_are_read(
    tmp_path: Path,
) -> None:
    """The checks above compare the SQL as SQLite reads it: Tapis's own table with other
    spaces and a comment, and with a NOT NULL left out (as another program may, to store a
    NULL: each value read is checked), is read. (The first archive, of no version, brought to
    this one by its migrations: test_archive.py.)"""
    db = tmp_path / "a.db"
    records = tmp_path / "one.tapis"
    write_envelopes(records, make_corpus("hearts", 1, seed="archive-hostile-old"))
    assert tapis("archive", "add", db, records).returncode == 0
    conn = sqlite3.connect(db)
    with conn:
        ((sql,),) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'records'")
        conn.execute("PRAGMA writable_schema = 1")
        conn.execute(
            "UPDATE sqlite_master SET sql = ? WHERE name = 'records'",
            [sql.replace("game TEXT NOT NULL", "game   TEXT  /* a comment */")],
        )
        conn.execute("PRAGMA writable_schema = 0")
    conn.close()
    done = tapis("archive", "query", db, "--json")
    assert done.returncode == 0, done.stderr


def test_a_new_records_players_left_behind_by_another_program_are_replaced(
    archive: Path, tmp_path: Path
) -> None:
    """A record removed with plain SQL, its `record_players` rows left: adding it again
    failed the whole chunk (UNIQUE constraint failed, no record named, nothing added). Its
    stale rows are replaced by its own, and every other record of the chunk goes in."""
    db = copy_of(archive, tmp_path)
    first = ids(db)[0]
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM records WHERE rowid IN (1, 2)")
        conn.execute(
            "INSERT INTO record_players (record_id, seat, name) VALUES (?, 9, 'Ghost')", [first]
        )
    conn.close()
    done = tapis("archive", "add", db, archive.parent / "corpus.tapis")
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"2 added, {N - 2} duplicates, 0 refused"
    assert rows(db, "SELECT seat FROM record_players WHERE record_id = ? ORDER BY seat", first) == [
        (0,),
        (1,),
        (2,),
        (3,),
    ]
    assert sorted(ids(db)) == sorted(ids(archive))
    done = tapis("archive", "query", db, "--player", "Ghost")
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "0 records", done.stdout


LINE_BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=[f"U+{ord(b):04X}" for b in LINE_BREAKS])
def test_a_line_break_in_what_an_archive_holds_makes_no_line_of_the_output(
    archive: Path, tmp_path: Path, brk: str
) -> None:
    """A line break (or a line or paragraph separator, a CR) in a date, a player's name, a
    run's option: printed as its escape, in the line of its value. It made lines of its
    own, a record or a run the archive does not hold."""
    db = copy_of(archive, tmp_path)
    assert tapis("archive", "rescore", db, "--set", "end_threshold=70").returncode == 0
    plain = {
        args: tapis("archive", *args).stdout.count("\n") for args in (("query", db), ("runs", db))
    }
    conn = sqlite3.connect(db)
    with conn:
        fake = f"2026-01-01{brk}deadbeef0001  dame-de-pique  standard  11  Ann"
        conn.execute("UPDATE records SET played_at = ? WHERE rowid = 1", [fake])
        conn.execute(
            "UPDATE records SET players = ? WHERE rowid = 2",
            [json.dumps(["Ann", f"Bob{brk}run 9", "Cat", "Dan"])],
        )
        conn.execute("UPDATE rescore_runs SET options = ?", [json.dumps({f"end{brk}run 8": 1})])
    conn.close()
    escape = f"\\u{ord(brk):04x}"
    for args in (("query", db), ("runs", db)):
        done = tapis("archive", *args)
        no_traceback(done)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("\n") == plain[args], done.stdout
        assert escape in done.stdout and brk not in done.stdout.replace("\n", ""), done.stdout
    done = tapis("archive", "runs", db, "1")
    assert done.returncode == 0, done.stderr
    assert brk not in done.stdout.replace("\n", "") and done.stdout.count("\n") == 1 + N
    done = tapis("archive", "query", db, "--json")  # JSON escapes them itself
    assert json.loads(done.stdout.split("\n")[0])["played_at"] == fake


@pytest.mark.parametrize("mode", ["DELETE", "WAL"])
def test_the_reading_commands_change_nothing_in_the_file(
    archive: Path, tmp_path: Path, mode: str
) -> None:
    """query, show, runs and export on an archive in either journal mode: the file is as it
    was (they switched a rollback-journal archive to WAL, before the checks refused it). An
    archive of an earlier schema version is upgraded by the first of them, as by any command,
    and its journal left as it was."""
    db = copy_of(archive, tmp_path)
    assert tapis("archive", "rescore", db, "--set", "end_threshold=70").returncode == 0
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode = {mode}")
    conn.close()
    before = db.read_bytes()
    reads = (
        ["query"],
        ["show", ids(archive)[0][:12]],
        ["runs"],
        ["runs", "1"],
        ["export", "-o", tmp_path / "out.tapis"],
    )
    for command in reads:
        done = tapis("archive", command[0], db, *command[1:])
        assert done.returncode == 0, (command, done.stderr)
        assert db.read_bytes() == before, command
    conn = sqlite3.connect(db)
    ((version,),) = conn.execute("PRAGMA user_version")
    conn.execute(f"PRAGMA user_version = {version - 1}")
    conn.close()
    for command in reads:
        done = tapis("archive", command[0], db, *command[1:])
        no_traceback(done)
        assert done.returncode == 0, (command, done.stderr)
        assert rows(db, "PRAGMA user_version") == [(version,)]
        assert rows(db, "PRAGMA journal_mode") == [(mode.lower(),)]
