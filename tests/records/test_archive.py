"""`tapis archive`: add, query, show, rescore (records/archive.py), on real SQLite files and
through the real command line (subprocesses)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.archive import rescoring
from tapis_cartes.records.archive.schema import to_json
from tapis_cartes.records.codec import (
    MAGIC,
    decode_record,
    record_id,
    score_from_pb,
    write_envelopes,
    write_frames,
)
from tapis_cartes.records.executors import SerialExecutor
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import ROOT, cli_command, tapis
from tests.records.archives import (
    CHANGES,
    SET,
    STOP_AFTER_ONE_SHARD,
    archive_of,
    copy_of,
    expected_outcome,
    rows,
    tampered,
)

N = 24  # Dame de Pique matches in the corpus (about 10 hands each)


@pytest.fixture(scope="module")
def corpus() -> list[pb.RecordEnvelope]:
    return make_corpus("hearts", N, seed="archive-test")


@pytest.fixture(scope="module")
def archive(corpus: list[pb.RecordEnvelope], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of the whole corpus (copy it before changing it)."""
    return archive_of(corpus, tmp_path_factory.mktemp("archive"))


# --- add ------------------------------------------------------------------------------------


def test_add_keeps_the_good_and_reports_the_bad(
    corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    good, dup, bad = tmp_path / "good.tapis", tmp_path / "dup.tapis", tmp_path / "bad.tapis"
    write_envelopes(good, corpus[:6])
    write_envelopes(dup, [corpus[2], corpus[6], corpus[2]])  # 2 seen before, 1 in the file
    write_envelopes(bad, [corpus[7], tampered(corpus[8])])
    db = tmp_path / "a.db"
    done = tapis("archive", "add", db, good, dup, bad)
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "8 added, 2 duplicates, 1 refused"
    assert f"{bad} (record 2): refused:" in done.stderr
    assert "score" in done.stderr
    assert rows(db, "SELECT count(*) FROM records") == [(8,)]
    assert rows(db, "SELECT count(*) FROM record_players") == [(32,)]
    bad_id = record_id(tampered(corpus[8]).record)
    assert rows(db, "SELECT count(*) FROM records WHERE record_id = ?", bad_id) == [(0,)]

    # A file that is not a record file, and one cut short: named, nothing else changes.
    junk, cut = tmp_path / "junk.txt", tmp_path / "cut.tapis"
    junk.write_text("hello\n")
    cut.write_bytes(good.read_bytes()[:200])
    done = tapis("archive", "add", db, junk, cut)
    assert done.returncode == 2
    assert "junk.txt" in done.stderr and "not a Tapis record file" in done.stderr
    assert "cut.tapis: record 1 claims" in done.stderr
    assert done.stdout.splitlines()[0] == "0 added, 0 duplicates, 0 refused"
    # ... while the good records of other files of the same call still go in.
    write_envelopes(tmp_path / "more.tapis", corpus[9:11])
    done = tapis("archive", "add", db, tmp_path / "more.tapis", junk)
    assert done.returncode == 2
    assert done.stdout.splitlines()[0] == "2 added, 0 duplicates, 0 refused"
    assert rows(db, "SELECT count(*) FROM records") == [(10,)]
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]

    # The stored summary of one record.
    rec = decode_record(corpus[0].record)
    (row,) = rows(
        db,
        "SELECT game, ruleset, players, player_count, hands, finished, winners, scores, "
        "source, options FROM records WHERE record_id = ?",
        record_id(corpus[0].record),
    )
    assert row[:6] == ("dame-de-pique", "standard", '["Ann","Bob","Cat","Dan"]', 4,
                       len(rec.hands), 1)  # fmt: skip
    assert json.loads(row[6]) == list(rec.outcome.winners)
    assert json.loads(row[7]) == [[s.points] for s in rec.outcome.scores]
    assert row[8] == "corpus"
    assert json.loads(row[9])["end_threshold"] == 100


def test_a_file_of_many_bad_records_is_counted_whole_and_listed_in_part(
    corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    """Millions of empty frames (a byte each) were each kept as a refusal until the end: 3M
    took 748 MB. The first `LISTED` (1000) of each kind are listed, all are counted, and
    the good records of the same file still go in."""
    path = tmp_path / "many.tapis"
    frames = [b""] * 1500 + [corpus[0].SerializeToString(deterministic=True)]
    write_frames(path, frames)
    db = tmp_path / "a.db"
    done = tapis("archive", "add", db, path)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == "1 added, 0 duplicates, 1,500 refused"
    lines = done.stderr.splitlines()
    assert sum("refused:" in line for line in lines) == 1000
    assert f"{path} (record 1000): refused:" in done.stderr
    assert "(record 1001)" not in done.stderr
    assert "... and 500 more records refused, not listed" in done.stderr
    done = tapis("archive", "add", "--json", tmp_path / "b.db", path)
    report = json.loads(done.stdout)
    assert (report["added"], report["refused_count"], len(report["refused"])) == (1, 1500, 1000)
    assert report["untrusted_count"] == 0


def test_missing_archive_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    for args in (("query", db), ("show", db, "abcd"), ("rescore", db, *SET)):
        done = tapis("archive", *args)
        assert done.returncode == 2, args
        assert "no such archive" in done.stderr
    assert not db.exists()


# --- query and show -------------------------------------------------------------------------


def test_query_by_game_player_and_limit(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    write_envelopes(tmp_path / "nap.tapis", make_corpus("nap", 2, seed="archive-nap"))
    assert tapis("archive", "add", db, tmp_path / "nap.tapis").returncode == 0

    def query(*args: str) -> list[dict[str, Any]]:
        done = tapis("archive", "query", db, "--json", *args)
        assert done.returncode == 0, done.stderr
        return [json.loads(line) for line in done.stdout.splitlines()]

    assert len(query()) == N + 2
    hearts = query("--game", "hearts")  # an alias
    assert len(hearts) == N and {r["game"] for r in hearts} == {"dame-de-pique"}
    nap = query("--game", "napoleon")
    assert len(nap) == 2 and all(r["player_count"] == 4 for r in nap)
    assert len(query("--player", "Dan")) == N + 2
    assert query("--player", "Nobody") == []
    assert len(query("--game", "hearts", "--ruleset", "standard", "--limit", "3")) == 3
    one = query("--limit", "1")[0]
    assert set(one) >= {"record_id", "game", "players", "winners", "scores", "hands"}
    assert "envelope" not in one

    table = tapis("archive", "query", db, "--game", "hearts", "--limit", "2")
    assert table.returncode == 0
    assert "record" in table.stdout.splitlines()[0]
    assert table.stdout.strip().endswith("2 records")


def test_show_by_prefix(archive: Path, corpus: list[pb.RecordEnvelope]) -> None:
    rid = record_id(corpus[3].record)
    done = tapis("archive", "show", archive, rid[:10])
    assert done.returncode == 0, done.stderr
    assert "Dame de Pique" in done.stdout and rid in done.stdout
    unknown = "f" * 64 if not rid.startswith("f") else "0" * 64
    done = tapis("archive", "show", archive, unknown)
    assert done.returncode == 2 and "no record" in done.stderr
    done = tapis("archive", "show", archive, "xyz")
    assert done.returncode == 2 and "not a record id" in done.stderr
    ids = [record_id(e.record) for e in corpus]
    shared = next((a[0] for a in ids if sum(b[0] == a[0] for b in ids) > 1), None)
    if shared is not None:
        done = tapis("archive", "show", archive, shared)
        assert done.returncode == 2 and "ambiguous" in done.stderr


# --- rescore --------------------------------------------------------------------------------


def expected_counts(corpus: list[pb.RecordEnvelope]) -> dict[str, int]:
    changed = winners = 0
    for env in corpus:
        rec = decode_record(env.record)
        old = [list(score_from_pb(("points",), s)) for s in rec.outcome.scores]
        scores, won = expected_outcome(env, CHANGES)
        changed += scores != old
        winners += won != list(rec.outcome.winners)
    return {"scored": len(corpus), "scores_changed": changed, "winners_changed": winners}


def results_of(db: Path, run_id: int) -> list[tuple[Any, ...]]:
    return rows(
        db,
        "SELECT record_id, status, rule, old_scores, new_scores, old_winners, new_winners, "
        "first_diff FROM rescore_results WHERE run_id = ? ORDER BY record_id",
        run_id,
    )


def test_rescore_matches_an_independent_replay(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    db = copy_of(archive, tmp_path)
    done = tapis("archive", "rescore", db, *SET, "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    want = expected_counts(corpus)
    assert {k: got[k] for k in want} == want
    assert want["scores_changed"] > 0 and want["winners_changed"] > 0  # the test means something
    assert got["not_replayable"] == 0 and got["finished"] is True
    assert 0 < len(got["samples"]) <= 5
    for sample in got["samples"]:
        assert sample["first_diff"]["old_rule"].startswith("DP.")
    # Record by record, the stored new scores are the independent ones.
    by_id = {record_id(e.record): e for e in corpus}
    stored = results_of(db, got["run_id"])
    assert len(stored) == N
    for rid, status, _, _, new_scores, _, new_winners, _ in stored:
        scores, winners = expected_outcome(by_id[rid], CHANGES)
        assert status == "ok"
        assert (json.loads(new_scores), json.loads(new_winners)) == (scores, winners)
    (run,) = rows(
        db,
        "SELECT options, finished_at IS NOT NULL, scored, scores_changed, winners_changed "
        "FROM rescore_runs WHERE run_id = ?",
        got["run_id"],
    )
    assert json.loads(run[0]) == CHANGES
    assert run[1:] == (1, want["scored"], want["scores_changed"], want["winners_changed"])

    # The summary for a person.
    text = tapis("archive", "rescore", db, *SET, "--workers", "1")
    assert text.returncode == 0
    assert f"scores changed:  {want['scores_changed']}" in text.stdout
    assert f"winners changed: {want['winners_changed']}" in text.stdout
    assert "first differing line: hand" in text.stdout


def test_rescore_two_workers_equal_one(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    one = tapis("archive", "rescore", db, *SET, "--workers", "1", "--json")
    two = tapis("archive", "rescore", db, *SET, "--workers", "2", "--json")
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["run_id"] != b["run_id"]  # the first run was finished: a new run
    for key in ("scored", "scores_changed", "winners_changed", "not_replayable", "samples"):
        assert a[key] == b[key], key
    assert results_of(db, a["run_id"]) == results_of(db, b["run_id"])


def test_the_same_rescore_run_twice_at_once_makes_one_run(archive: Path, tmp_path: Path) -> None:
    # The first command is held between looking for an unfinished run with its options and
    # making one (its `now()` for the run's start waits 2 s, once it said so in a file); the
    # second, started meanwhile, made a run of its own: two runs of the same options. Now
    # the second waits for the first's run and continues it.
    db = copy_of(archive, tmp_path)
    held = tmp_path / "held"
    slow = (
        "import pathlib, time\n"
        "from tapis_cartes.records.archive import rescoring\n"
        "_now = rescoring.now\n"
        "def _slow_now():\n"
        f"    pathlib.Path({str(held)!r}).touch()\n"
        "    time.sleep(2)\n"
        "    return _now()\n"
        "rescoring.now = _slow_now\n"
    )
    first = subprocess.Popen(
        cli_command(slow, "archive", "rescore", db, *SET, "--json"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not held.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.exists()
        second = tapis("archive", "rescore", db, *SET, "--json")
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    runs = rows(db, "SELECT run_id, finished_at IS NOT NULL FROM rescore_runs")
    assert len(runs) == 1 and runs[0][1], runs
    (run_id, _), n = runs[0], len(rows(db, "SELECT 1 FROM records"))
    assert json.loads(out)["run_id"] == json.loads(second.stdout)["run_id"] == run_id
    assert rows(db, "SELECT count(*) FROM rescore_results WHERE run_id = ?", run_id) == [(n,)]


def test_rescore_not_replayable_is_counted_with_its_rule(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    done = tapis("archive", "rescore", db, "--set", "dealer_rotation=counterclockwise", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["not_replayable"] == N and got["scored"] == 0
    assert got["refusals"] == {"DP.DEAL": N}
    bad = tapis("archive", "rescore", db, "--set", "no_such_option=1")
    assert bad.returncode == 2 and "unknown option 'no_such_option'" in bad.stderr
    bad = tapis("archive", "rescore", db, "--set", "end_threshold")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_rescore_of_a_record_whose_bytes_were_changed_in_the_file(
    archive: Path, tmp_path: Path
) -> None:
    """An archive is a file anyone may change: a stored envelope that no longer decodes, or
    whose record does not, or names a game Tapis does not know, or holds another record than
    its id names (another record's envelope copied over it), is not replayable; the run goes
    on."""
    db = copy_of(archive, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE records SET envelope = ? WHERE rowid = 1", [b"\xff" * 9])
        record = pb.RecordEnvelope(record=b"\x08\x01\x12").SerializeToString()
        conn.execute("UPDATE records SET envelope = ? WHERE rowid = 2", [record])
        ((stored,),) = conn.execute("SELECT envelope FROM records WHERE rowid = 3")
        rec = pb.GameRecord.FromString(pb.RecordEnvelope.FromString(stored).record)
        rec.rules.game = "no-such-game"
        renamed = pb.RecordEnvelope(record=rec.SerializeToString(deterministic=True))
        stored = renamed.SerializeToString()
        # (Its id changed with it, so that the game is what the run finds wrong.)
        conn.execute(
            "UPDATE records SET envelope = ?, record_id = ? WHERE rowid = 3",
            [stored, record_id(renamed.record)],
        )
        ((other, other_id),) = conn.execute(
            "SELECT envelope, record_id FROM records WHERE rowid = 5"
        )
        conn.execute("UPDATE records SET envelope = ? WHERE rowid = 4", [other])
    conn.close()
    done = tapis("archive", "rescore", db, *SET, "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["scored"], got["not_replayable"]) == (N - 4, 4)
    assert got["refusals"] == {"record:decode": 2, "record:rules": 1, "record:id": 1}
    ((detail,),) = rows(db, "SELECT detail FROM rescore_results WHERE rule = 'record:id'")
    assert f"holds another record, {other_id}" in detail


def test_a_json_column_changed_by_hand_is_a_clear_error(archive: Path, tmp_path: Path) -> None:
    """The archive's own JSON columns (a record's players, a run's results), changed by
    another program: the commands that read them say which column of which row is not what
    Tapis stores (exit 2), never a traceback; a re-score's results are stored first, and
    its run left unfinished (its summary could not be read whole)."""
    db = copy_of(archive, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE records SET players = 'not json'")
    conn.close()
    for args in (["archive", "query", db], ["archive", "rescore", db, *SET, "--workers", "1"]):
        done = tapis(*args)
        assert done.returncode == 2, done.stderr
        assert "records.players of record " in done.stderr and "'not json'" in done.stderr
        assert "Traceback" not in done.stderr
    ((run_id, finished),) = rows(db, "SELECT run_id, finished_at FROM rescore_runs")
    assert finished is None
    assert rows(db, "SELECT count(*) FROM rescore_results WHERE run_id = ?", run_id) == [(N,)]
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE rescore_results SET old_scores = '[1, 2'")
    conn.close()
    done = tapis("archive", "runs", db, str(run_id))
    assert done.returncode == 2 and "rescore_results.old_scores of record " in done.stderr
    assert "Traceback" not in done.stderr


def test_rescore_stores_the_first_shard_at_once_then_a_second_at_most_apart(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one writer stores the first shard's results at once (an interrupted run keeps
    them), then gathers what comes within `STORE_SECONDS` (or `STORE_ROWS`) in one
    transaction, each in the order of the results' key; every record is stored once."""
    db = copy_of(archive, tmp_path)
    stores: list[list[str]] = []
    store = rescoring.store_shard

    def counted(conn: Any, rows_: list[tuple[Any, ...]]) -> None:
        stores.append([row[1] for row in rows_])
        store(conn, rows_)

    monkeypatch.setattr(rescoring, "store_shard", counted)
    monkeypatch.setattr(rescoring, "STORE_SECONDS", 3600.0)
    summary = rescoring.rescore(db, CHANGES, executor=SerialExecutor(), shard_size=5)
    assert summary.total == summary.scored == N
    assert [len(ids) for ids in stores] == [5, N - 5]  # the first shard, then the rest at once
    assert sorted(id_ for ids in stores for id_ in ids) == sorted(
        r for (r,) in rows(db, "SELECT record_id FROM records")
    )
    stored = rows(db, "SELECT record_id FROM rescore_results ORDER BY rowid")
    assert [r for (r,) in stored][5:] == sorted(stores[1])  # stored in key order

    stores.clear()
    monkeypatch.setattr(rescoring, "STORE_ROWS", 10)
    rescoring.rescore(db, {"moon_mode": "add_to_others"}, executor=SerialExecutor(), shard_size=5)
    assert [len(ids) for ids in stores] == [5, 10, 9]  # then whenever 10 wait, then the rest


@pytest.mark.parametrize("workers", ["1", "2"])
def test_interrupted_rescore_continues(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path, workers: str
) -> None:
    db = copy_of(archive, tmp_path)
    stopped = tapis(
        "archive", "rescore", db, *SET, "--workers", workers, setup=STOP_AFTER_ONE_SHARD
    )
    assert stopped.returncode == 130
    assert "run the same command to continue" in stopped.stderr
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    ((run_id, finished),) = rows(db, "SELECT run_id, finished_at FROM rescore_runs")
    assert finished is None
    ((partial,),) = rows(db, "SELECT count(*) FROM rescore_results WHERE run_id = ?", run_id)
    assert 0 < partial < N
    listed = tapis("archive", "runs", db)  # the results stored so far, not the counts (none)
    said = (
        f"unfinished (interrupted, or under way); {partial} results stored (the same command "
        "continues it)"
    )
    assert said in listed.stdout, listed.stdout
    (run,) = [json.loads(line) for line in tapis("archive", "runs", db, "--json").stdout.split()]
    assert run["stored"] == partial

    done = tapis("archive", "rescore", db, *SET, "--workers", workers, "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["run_id"] == run_id and got["resumed"] == partial
    want = expected_counts(corpus)
    assert {k: got[k] for k in want} == want
    assert rows(db, "SELECT count(*) FROM rescore_runs WHERE finished_at IS NOT NULL") == [(1,)]


def test_an_unfinished_run_of_someone_elses_archive_is_not_taken_as_done(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    """An archive from someone else held an unfinished run with the very options about to be
    re-scored, and results made up for it (and for records it does not hold): `rescore`
    continued it, reporting the sender's scores as its own (300 of 300 "changed", or 5,300
    records of an archive of 300). A run is continued only when it bears its user's mark."""
    db = copy_of(archive, tmp_path)
    sender = {"XDG_DATA_HOME": str(tmp_path / "sender")}
    stopped = tapis(
        "archive", "rescore", db, *SET, "--workers", "1", setup=STOP_AFTER_ONE_SHARD, **sender
    )
    assert stopped.returncode == 130, stopped.stderr
    ((theirs,),) = rows(db, "SELECT run_id FROM rescore_runs")
    with sqlite3.connect(db) as conn:  # the sender's results: made up
        conn.execute(
            "UPDATE rescore_results SET new_scores = '[[0],[0],[0],[999]]', first_diff = NULL"
        )
        conn.executemany(
            "INSERT INTO rescore_results (run_id, record_id, status, rule, detail, old_scores, "
            "new_scores, old_winners, new_winners) VALUES (?, ?, 'ok', '', '', '[[1]]', "
            "'[[2]]', '[0]', '[1]')",
            [(theirs, f"{i:064x}") for i in range(50)],
        )
    listed = tapis("archive", "runs", db)
    assert (
        "not marked as yours (begun elsewhere, or by an older Tapis): the same command "
        "begins a new run" in listed.stdout
    ), listed.stdout
    done = tapis("archive", "rescore", db, *SET, "--workers", "1", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["run_id"] != theirs and got["resumed"] == 0 and got["total"] == N
    want = expected_counts(corpus)
    assert {k: got[k] for k in want} == want
    # Theirs is left as it was; the sender continues it, as its own.
    assert rows(db, "SELECT finished_at FROM rescore_runs WHERE run_id = ?", theirs) == [(None,)]
    again = tapis("archive", "rescore", db, *SET, "--workers", "1", "--json", **sender)
    assert again.returncode == 0 and json.loads(again.stdout)["run_id"] == theirs, again.stderr
    # `runs RUN_ID` of an unfinished run counts its results (it said 0).
    stopped = tapis(
        "archive", "rescore", db, "--set", "moon_mode=add_to_others", setup=STOP_AFTER_ONE_SHARD
    )
    ((mine, partial),) = rows(
        db,
        "SELECT run_id, (SELECT count(*) FROM rescore_results r WHERE r.run_id = u.run_id) "
        "FROM rescore_runs u WHERE finished_at IS NULL",
    )
    shown = tapis("archive", "runs", db, str(mine))
    assert f"{partial} results stored (the same command continues it)" in shown.stdout, shown.stdout


def test_a_run_id_past_what_sqlite_holds_is_named(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO rescore_runs (run_id, options, game, started_at, finished_at) "
            "VALUES (9223372036854775807, '{}', '', '2026-01-01T00:00:00Z', "
            "'2026-01-01T00:00:01Z')"
        )
    done = tapis("archive", "rescore", db, *SET)
    assert done.returncode == 2
    assert "rescore_runs.run_id holds 9223372036854775807, the largest id SQLite holds" in (
        done.stderr
    ), done.stderr
    assert rows(db, "SELECT count(*) FROM rescore_runs") == [(1,)]


def test_rescore_refusals_name_a_record_and_give_no_wrong_hint(
    archive: Path, tmp_path: Path
) -> None:
    db = copy_of(archive, tmp_path)
    # One rule set chosen: a value out of range is said alone (it added "an option of one
    # ruleset cannot be changed where records of another are chosen too").
    done = tapis("archive", "rescore", db, "--set", "end_threshold=-1", "--game", "hearts")
    assert done.returncode == 2
    assert "-1 is not allowed" in done.stderr and "chosen too" not in done.stderr, done.stderr
    ((rid,),) = rows(db, "SELECT record_id FROM records WHERE rowid = 2")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE records SET player_count = 'four' WHERE rowid = 2")
    done = tapis("archive", "rescore", db, *SET)
    assert done.returncode == 2
    assert f"records.player_count of record {rid} is 'four'" in done.stderr, done.stderr


def test_corpus_script_writes_a_file_and_an_archive(tmp_path: Path) -> None:
    out, db = tmp_path / "c.tapis", tmp_path / "c.db"
    done = subprocess.run(
        [
            sys.executable,
            "scripts/corpus.py",
            "--game",
            "nap",
            "-n",
            "2",
            "--bots",
            "random",
            "-o",
            str(out),
            "--archive",
            str(db),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().startswith(MAGIC)
    assert rows(db, "SELECT game, count(*) FROM records GROUP BY game") == [("napoleon", 2)]


# The archive as the first versions of Tapis made it: no schema version, and the re-scoring
# tables without the columns of whether a match is finished.
FIRST_ARCHIVE = """
CREATE TABLE records (
    record_id TEXT PRIMARY KEY, game TEXT NOT NULL, ruleset TEXT NOT NULL,
    options TEXT NOT NULL, players TEXT NOT NULL, player_count INTEGER NOT NULL,
    hands INTEGER NOT NULL, finished INTEGER NOT NULL, winners TEXT NOT NULL,
    scores TEXT NOT NULL, source TEXT NOT NULL, played_at TEXT NOT NULL,
    added_at TEXT NOT NULL, envelope BLOB NOT NULL);
CREATE TABLE record_players (record_id TEXT NOT NULL, seat INTEGER NOT NULL,
    name TEXT NOT NULL, PRIMARY KEY (record_id, seat));
CREATE TABLE rescore_runs (run_id INTEGER PRIMARY KEY, options TEXT NOT NULL,
    game TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT,
    total INTEGER NOT NULL DEFAULT 0, scored INTEGER NOT NULL DEFAULT 0,
    not_replayable INTEGER NOT NULL DEFAULT 0, scores_changed INTEGER NOT NULL DEFAULT 0,
    winners_changed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE rescore_results (run_id INTEGER NOT NULL, record_id TEXT NOT NULL,
    status TEXT NOT NULL, rule TEXT NOT NULL, detail TEXT NOT NULL, old_scores TEXT NOT NULL,
    new_scores TEXT, old_winners TEXT NOT NULL, new_winners TEXT, first_diff TEXT,
    PRIMARY KEY (run_id, record_id));
"""


def test_an_archive_of_an_earlier_schema_is_migrated_and_keeps_its_records(
    tmp_path: Path,
) -> None:
    import sqlite3

    from tapis_cartes.records.archive.rescoring import RULE_SETS
    from tapis_cartes.records.archive.schema import SCHEMA_VERSION

    made = tmp_path / "made.db"
    golden = ROOT / "tests" / "data" / "golden"
    assert tapis("archive", "add", made, golden / "napoleon.tapis").returncode == 0
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.executescript(FIRST_ARCHIVE)
    conn.execute("ATTACH DATABASE ? AS made", (str(made),))
    conn.execute("INSERT INTO records SELECT * FROM made.records")
    conn.execute("INSERT INTO record_players SELECT * FROM made.record_players")
    conn.commit()
    conn.close()
    assert sqlite3.connect(old).execute("PRAGMA user_version").fetchone() == (0,)
    done = tapis("archive", "rescore", old, "--set", "deals=2")
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(rescore_results)")}
    assert {"old_finished", "new_finished"} <= columns
    assert conn.execute("SELECT count(*) FROM records").fetchone() == (1,)
    # the rule sets a re-scoring checks are read from an index, not from every record's row
    for where in ("1", "game = 'napoleon'"):
        plan = conn.execute("EXPLAIN QUERY PLAN " + RULE_SETS.format(where=where)).fetchall()
        assert "COVERING INDEX idx_records_game_ruleset_player_count" in plan[0][3], plan
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    newer = tapis("archive", "query", old)
    assert newer.returncode == 2 and "newer than this Tapis" in newer.stderr
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA user_version = -1")
    conn.commit()
    conn.close()
    negative = tapis("archive", "query", old)
    assert negative.returncode == 2 and "version -1 is not one Tapis writes" in negative.stderr
    assert sqlite3.connect(old).execute("PRAGMA user_version").fetchone() == (-1,)  # untouched


@pytest.mark.parametrize(
    "value",
    [[1, -2, 10**20], [[3, 0], [-4, 5]], [], [[]], ["12"], [True], [1.5], [None], {"b": [1]}, 7],
)
def test_the_archive_json_of_int_lists_is_json_itself(value: object) -> None:
    """`to_json` writes a list of ints (or of lists of ints) by `repr`: the same text as
    `json.dumps`, and anything else by `json.dumps`."""
    want = json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    assert to_json(value) == want


class _Losing:
    """An executor whose worker reads another file than the archive (a copy at the same
    path, on another machine): the records of one shard are not there."""

    def map_tasks(self, fn: Any, tasks: Any) -> Any:
        for i, task in enumerate(tasks):
            yield task, [] if i == 1 else fn(task)


def test_a_run_some_records_of_which_no_worker_read_is_not_finished(
    archive: Path, tmp_path: Path
) -> None:
    """Such a run was marked finished, exit 0, a third of its records never re-scored."""
    from tapis_cartes.records.archive.schema import ArchiveError

    db = copy_of(archive, tmp_path)
    with pytest.raises(ArchiveError, match=rf"holds results for {N - 5} of the {N} records"):
        rescoring.rescore(db, CHANGES, executor=_Losing(), shard_size=5)
    assert rows(db, "SELECT finished_at FROM rescore_runs") == [(None,)]
    summary = rescoring.rescore(db, CHANGES, executor=SerialExecutor(), shard_size=5)
    assert (summary.run_id, summary.resumed, summary.total) == (1, N - 5, N)  # continued


def test_a_run_removed_meanwhile_is_not_filled_nor_its_id_given_again(
    archive: Path, tmp_path: Path
) -> None:
    """A command that failed before storing removed its run while another continued it: the
    other filled a run that no longer was, whose id the next run took, with those results."""
    from tapis_cartes.records.archive.schema import ArchiveError, open_archive

    db = copy_of(archive, tmp_path)
    first = rescoring.rescore(db, CHANGES, executor=SerialExecutor(), shard_size=5)
    rows_ = rows(db, "SELECT * FROM rescore_results WHERE run_id = ?", first.run_id)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DELETE FROM rescore_runs")  # (its results left, as such a race left them)
    conn.close()
    archive_db = open_archive(db, create=False, writes=True)
    try:
        with pytest.raises(ArchiveError, match=f"run {first.run_id} was removed meanwhile"):
            rescoring.store_shard(archive_db, rows_[:3])
    finally:
        archive_db.close()
    again = rescoring.rescore(db, {"moon_mode": "add_to_others"}, executor=SerialExecutor())
    assert again.run_id == first.run_id + 1 and again.resumed == 0
