"""The archive beyond one process: adding in chunks on a process pool, re-scoring on a real
Dask cluster (a `dask scheduler` and `dask worker` started as subprocesses), and the
"no longer finished" account of a re-score."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.archive import (
    AddTask,
    ArchiveError,
    Shard,
    add_files,
    check_task,
    open_archive,
    run_shard,
)
from tapis_cartes.records.codec import (
    decode_record,
    encode_file,
    write_envelopes,
)
from tapis_cartes.records.executors import LocalPoolExecutor, SerialExecutor
from tapis_cartes.v1 import record_pb2 as pb
from tests.commands import ROOT, tapis
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
from tests.records.replaying import replayed_with

N = 30  # Dame de Pique matches, random bots


@pytest.fixture(scope="module")
def corpus() -> list[pb.RecordEnvelope]:
    return make_corpus("hearts", N, seed="scale-test", kind="random")


@pytest.fixture(scope="module")
def archive(corpus: list[pb.RecordEnvelope], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return archive_of(corpus, tmp_path_factory.mktemp("scale"), "--workers", "2")


# --- adding in chunks -----------------------------------------------------------------------


def _archive_rows(db: Path) -> list[tuple[object, ...]]:
    return rows(
        db,
        "SELECT record_id, game, ruleset, options, players, player_count, hands, finished, "
        "winners, scores, source, played_at, envelope FROM records ORDER BY record_id",
    )


def test_pool_add_in_chunks_equals_a_serial_add(
    corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    files = []
    for i in range(3):  # overlapping files: duplicates across chunks and files
        f = tmp_path / f"part{i}.tapis"
        part = corpus[i * 8 : i * 8 + 12]
        if i == 1:
            part = [*part[:3], tampered(part[3]), *part[4:]]
        write_envelopes(f, part)
        files.append(f)
    reports = []
    for name, executor in (("serial", SerialExecutor()), ("pool", LocalPoolExecutor(2))):
        db = open_archive(tmp_path / f"{name}.db")
        try:
            reports.append(add_files(db, files, executor, chunk=5))
        finally:
            db.close()
    serial, pool = reports
    assert (serial.added, serial.duplicates, len(serial.refused)) == (28, 7, 1)
    assert (pool.added, pool.duplicates, sorted(pool.refused)) == (
        serial.added,
        serial.duplicates,
        sorted(serial.refused),
    )
    assert pool.refused[0][:2] == (str(files[1]), 4)
    assert _archive_rows(tmp_path / "serial.db") == _archive_rows(tmp_path / "pool.db")
    in_order = "SELECT record_id FROM records ORDER BY rowid"  # file order, as with one process
    assert rows(tmp_path / "serial.db", in_order) == rows(tmp_path / "pool.db", in_order)
    assert rows(tmp_path / "pool.db", "SELECT count(*) FROM record_players") == [(28 * 4,)]


def test_a_damaged_file_keeps_the_records_before_the_damage(
    corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    whole = tmp_path / "whole.tapis"
    write_envelopes(whole, corpus[:5])
    data = whole.read_bytes()
    cut = tmp_path / "cut.tapis"
    cut.write_bytes(data[: len(data) - 40])  # the fifth record is cut short
    db = tmp_path / "a.db"
    done = tapis("archive", "add", db, cut)
    assert done.returncode == 2
    assert "cut.tapis: record 5 claims" in done.stderr
    assert done.stdout.splitlines()[0] == "4 added, 0 duplicates, 0 refused"
    assert rows(db, "SELECT count(*) FROM records") == [(4,)]
    # A frame that is not an envelope is one refused record; its neighbours go in.
    task = AddTask("x.tapis", 1, (corpus[0].SerializeToString(), b"\xff\xff\xff"), "now")
    checked = check_task(task)
    assert len(checked.rows) == 1
    assert [r[:2] for r in checked.refused] == [("x.tapis", 2)]


# --- re-scoring: what changed -----------------------------------------------------------------


def _replayed(env: pb.RecordEnvelope, changes: dict[str, bool | int | str]) -> tuple[bool, bool]:
    """Independently (records/verify.py's replay): (finished as recorded, finished under the
    changed options)."""
    was = decode_record(env.record).outcome.finished
    return was, replayed_with(env, changes).finished


def test_rescore_counts_matches_no_longer_finished(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    db = copy_of(archive, tmp_path)
    changes: dict[str, bool | int | str] = {"end_threshold": 150}
    want = sum(1 for e in corpus if _replayed(e, changes) == (True, False))
    assert want > 0  # the test means something
    done = tapis("archive", "rescore", db, "--set", "end_threshold=150", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["no_longer_finished"], got["now_finished"]) == (want, 0)
    (stored,) = rows(
        db, "SELECT no_longer_finished FROM rescore_runs WHERE run_id = ?", got["run_id"]
    )
    assert stored == (want,)
    text = tapis("archive", "rescore", db, "--set", "end_threshold=150", "--workers", "1")
    assert f"no longer finished: {want} (the match now goes on)" in text.stdout


def test_a_worker_that_cannot_read_the_archive_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "elsewhere" / "games.db"
    with pytest.raises(ArchiveError) as err:
        run_shard(Shard(str(missing), 1, 1, 10, "", ()))
    assert f"{missing}: a worker (on " in str(err.value)
    assert "must see the archive at this same path" in str(err.value)


# --- Dask -----------------------------------------------------------------------------------


def _dask(*args: str) -> list[str]:
    return [str(Path(sys.executable).parent / "dask"), *args]


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Dask cluster on this machine: a scheduler and two single-threaded worker
    processes, started as `dask scheduler` and `dask worker` would be on a cluster."""
    folder = tmp_path_factory.mktemp("dask")
    info = folder / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = (folder / "scheduler.log").open("w"), (folder / "worker.log").open("w")
    procs = [
        subprocess.Popen(
            [
                *_dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard"),
                "--scheduler-file",
                str(info),
            ],
            stdout=logs[0],
            stderr=subprocess.STDOUT,
            env=env,
            cwd=folder,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        procs.append(
            subprocess.Popen(
                [*_dask("worker", address, "--nworkers", "2", "--nthreads", "1"), "--no-dashboard"],
                stdout=logs[1],
                stderr=subprocess.STDOUT,
                env=env,
                cwd=folder,
            )
        )
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


def _results(db: Path, run_id: int) -> list[tuple[object, ...]]:
    return rows(
        db,
        "SELECT record_id, status, rule, old_scores, new_scores, old_winners, new_winners, "
        "first_diff, old_finished, new_finished FROM rescore_results WHERE run_id = ? "
        "ORDER BY record_id",
        run_id,
    )


SUMMARY = ("total", "scored", "not_replayable", "scores_changed", "winners_changed",
           "no_longer_finished", "samples", "refusals")  # fmt: skip


def test_dask_rescore_equals_the_local_pool(archive: Path, scheduler: str, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    local = tapis("archive", "rescore", db, *SET, "--workers", "2", "--json")
    dask = tapis("archive", "rescore", db, *SET, "--engine", "dask", "--scheduler", scheduler,
                 "--json")  # fmt: skip
    assert local.returncode == 0, local.stderr
    assert dask.returncode == 0, dask.stderr
    a, b = json.loads(local.stdout), json.loads(dask.stdout)
    assert b["engine"] == "dask" and a["run_id"] != b["run_id"]
    assert a["scores_changed"] > 0
    assert {k: a[k] for k in SUMMARY} == {k: b[k] for k in SUMMARY}
    assert _results(db, a["run_id"]) == _results(db, b["run_id"])
    assert len(_results(db, b["run_id"])) == N


def test_interrupted_dask_rescore_continues(archive: Path, scheduler: str, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    dask = ("--engine", "dask", "--scheduler", scheduler)
    stopped = tapis("archive", "rescore", db, *SET, *dask, setup=STOP_AFTER_ONE_SHARD)
    assert stopped.returncode == 130, stopped.stderr
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    ((run_id, finished),) = rows(db, "SELECT run_id, finished_at FROM rescore_runs")
    assert finished is None
    ((partial,),) = rows(db, "SELECT count(*) FROM rescore_results WHERE run_id = ?", run_id)
    assert 0 < partial < N
    done = tapis("archive", "rescore", db, *SET, *dask, "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["run_id"] == run_id and got["resumed"] == partial and got["total"] == N
    serial = tapis("archive", "rescore", db, *SET, "--workers", "1", "--json")
    assert _results(db, run_id) == _results(db, json.loads(serial.stdout)["run_id"])


def test_dask_without_a_scheduler_starts_a_local_cluster(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    done = tapis("archive", "rescore", db, *SET, "--engine", "dask", "--workers", "2", "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["engine"], got["scored"], got["finished"]) == ("dask", N, True)


def test_dask_scheduler_errors_are_clear(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    done = tapis("archive", "rescore", db, *SET, "--scheduler", "tcp://127.0.0.1:9")
    assert done.returncode == 2 and "--scheduler is for --engine dask" in done.stderr
    done = tapis("archive", "rescore", db, *SET, "--engine", "dask", "--scheduler", "nowhere")
    assert done.returncode == 2, done.stderr
    assert "no Dask scheduler answers at nowhere" in done.stderr and "Traceback" not in done.stderr


# --- runs and dates ---------------------------------------------------------------------------


def test_runs_lists_each_run_and_its_changed_records(archive: Path, tmp_path: Path) -> None:
    db = copy_of(archive, tmp_path)
    done = tapis("archive", "rescore", db, "--set", "end_threshold=150", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    listed = tapis("archive", "runs", db, "--json")
    assert listed.returncode == 0, listed.stderr
    (run,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert run["run_id"] == summary["run_id"] and run["options"] == {"end_threshold": 150}
    for key in ("total", "scored", "scores_changed", "winners_changed", "no_longer_finished"):
        assert run[key] == summary[key], key
    changed = tapis("archive", "runs", db, str(run["run_id"]), "--changed", "--json")
    assert changed.returncode == 0, changed.stderr
    results = [json.loads(line) for line in changed.stdout.splitlines()]
    assert len(results) == summary["no_longer_finished"] > 0
    assert all(r["old_finished"] and r["new_finished"] is False for r in results)
    every = tapis("archive", "runs", db, str(run["run_id"]), "--json")
    assert len(every.stdout.splitlines()) == N
    text = tapis("archive", "runs", db, str(run["run_id"]), "--changed", "--limit", "2")
    assert text.returncode == 0 and text.stdout.count("no longer finished") == 3  # run + 2
    missing = tapis("archive", "runs", db, "999")
    assert missing.returncode == 2 and "no re-scoring run 999" in missing.stderr


def test_query_by_date_played(archive: Path) -> None:
    """The corpus's match g was played at 2026-01-01 00:00 + g minutes (clients/corpus.py)."""

    def count(*args: str) -> int:
        done = tapis("archive", "query", archive, *args, "--json")
        assert done.returncode == 0, done.stderr
        return len(done.stdout.splitlines())

    assert (
        count("--since", "2026-01-01T00:10:00+00:00", "--until", "2026-01-01T00:19:00+00:00") == 10
    )
    assert count("--until", "2026-01-01") == N  # a date alone: the whole day
    assert count("--since", "2026-01-02") == 0
    # A fraction of a second (SQLite reads milliseconds; six digits it read as no date), and
    # the ends of the dates Python holds, whose next day or UTC instant lies past them.
    assert count("--since", "2026-01-01T00:10:00.000001", "--until", "2026-01-01T00:19:00") == 9
    assert count("--until", "9999-12-31") == count("--since", "0001-01-01") == N
    assert count("--since", "9999-12-31T23:59:59-01:00") == 0
    assert count("--until", "0001-01-01T00:00:00+01:00") == 0
    bad = tapis("archive", "query", archive, "--since", "last week")
    assert bad.returncode == 2 and "--since: 'last week' is not a date" in bad.stderr


# --- one record file, re-scored --------------------------------------------------------------


def test_record_score_under_other_options(corpus: list[pb.RecordEnvelope], tmp_path: Path) -> None:
    """`tapis record score --set`: the same account as an independent replay, and as
    `archive rescore` of the same records."""
    path = tmp_path / "some.tapis"
    write_envelopes(path, corpus[:8])
    sets = [a for k, v in CHANGES.items() for a in ("--set", f"{k}={v}")]
    done = tapis("record", "score", path, *sets, "--json")
    assert done.returncode == 0, done.stderr
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(docs) == 8
    changed = 0
    for env, doc in zip(corpus[:8], docs, strict=True):
        scores, winners = expected_outcome(env, CHANGES)
        assert [[s["points"]] for s in doc["scores"]] == scores
        assert doc["winners"] == winners
        changed += scores != [[s.points] for s in decode_record(env.record).outcome.scores]
    assert changed > 0  # the test means something
    text = tapis("record", "score", path, *sets)
    assert text.stdout.count("compared with the record: ") == 8
    assert "first differing line: hand" in text.stdout
    refused = tapis("record", "score", path, "--set", "dealer_rotation=counterclockwise")
    assert refused.returncode == 1 and "not replayable [DP.DEAL]" in refused.stderr
    bad = tapis("record", "score", path, "--set", "end_threshold")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


def test_export_writes_the_selected_records_as_they_were_added(
    archive: Path, corpus: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    out = tmp_path / "out.tapis"
    done = tapis("archive", "export", archive, "-o", out,
                 "--since", "2026-01-01T00:05:00+00:00", "--limit", "7")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"7 records -> {out}"
    assert out.read_bytes() == encode_file(corpus[5:12])  # the stored envelopes, in order
    every = tapis("archive", "export", archive, "-o", tmp_path / "all.tapis")
    assert every.stdout.strip().startswith(f"{N} records")
    again = tmp_path / "again.db"
    added = tapis("archive", "add", again, tmp_path / "all.tapis")
    assert added.stdout.splitlines()[0] == f"{N} added, 0 duplicates, 0 refused"
    assert rows(again, "SELECT record_id FROM records ORDER BY rowid") == rows(
        archive, "SELECT record_id FROM records ORDER BY rowid"
    )
    nowhere = tapis("archive", "export", archive, "-o", tmp_path / "no" / "x.tapis")
    assert nowhere.returncode == 2 and "cannot write" in nowhere.stderr
    assert not (tmp_path / "no").exists()
