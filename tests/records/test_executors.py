"""The local process pool stops at once when its results are no longer wanted, and a Ctrl-C
in the middle of its bookkeeping never leaves it hanging; a number of workers out of range is
refused by every command before it writes anything, and a pool starts no more processes than
it has tasks."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tapis_cartes.records.executors import (
    MAX_WORKERS,
    DaskExecutor,
    ExecutorError,
    LocalPoolExecutor,
    SerialExecutor,
    make_executor,
    map_in_order,
)
from tests.commands import DATA, INTERRUPTIBLE, tapis

ROOT = Path(__file__).resolve().parents[2]


def _pid_after(job: tuple[int, float]) -> int:
    """The id of the process that ran the job: after sleeping `job[1]` seconds in a pool's
    worker (the caller, `job[0]`, runs jobs too: it does not sleep)."""
    caller, seconds = job
    if os.getpid() != caller:
        time.sleep(seconds)
    return os.getpid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose: its parent has not reaped it yet
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_a_stopped_job_terminates_its_workers_without_waiting_for_their_tasks() -> None:
    me = os.getpid()
    results = LocalPoolExecutor(2).map_tasks(_pid_after, [(me, 0.0)] + [(me, 600.0)] * 3)
    # the caller runs the two jobs the pool was not given; the worker's quick one comes too
    pid = next(pid for _, pid in results if pid != me)
    t0 = time.monotonic()
    results.close()  # as `map_in_order` and the commands do on Ctrl-C
    waited = time.monotonic() - t0
    assert waited < 60, f"close waited {waited:.1f} s for tasks of 600 s"
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the worker outlived its pool"


ORPHAN = textwrap.dedent(
    """
    import os, signal, sys
    from tapis_cartes.records.executors import LocalPoolExecutor

    def job(caller):
        if os.getpid() != caller:
            print(os.getpid(), flush=True)  # a worker's: busy now, for longer than the test
            signal.pause()
        return 0

    if __name__ == "__main__":
        for _ in LocalPoolExecutor(2).map_tasks(job, [os.getpid()] * 3):
            pass  # the caller's own job is done: the worker's never will be
    """
)


def test_a_worker_whose_caller_is_killed_ends_too(tmp_path: Path) -> None:
    """Killed (SIGKILL, or SIGTERM: no handler), the caller cannot stop its pool: the
    worker must not be left behind, busy or waiting to hand over a result."""
    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    with subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as proc:
        try:
            assert proc.stdout is not None
            worker = int(proc.stdout.readline())
            assert _alive(worker)
        finally:
            proc.kill()
    deadline = time.monotonic() + 30
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker outlived its killed caller"


def test_a_finished_job_gives_every_result_in_order_like_the_serial_one() -> None:
    tasks = [(os.getpid(), 0.0)] * 40
    pool = [t for t, _ in map_in_order(LocalPoolExecutor(2), _pid_after, tasks)]
    serial = [t for t, _ in map_in_order(SerialExecutor(), _pid_after, tasks)]
    assert pool == serial == tasks


def test_the_caller_is_one_of_the_workers() -> None:
    """Two workers: the caller and one process of the pool, which gets the first tasks (the
    caller runs the others while none of the pool's is done)."""
    me = os.getpid()
    ran = [pid for _, pid in LocalPoolExecutor(2).map_tasks(_pid_after, [(me, 0.0)] * 40)]
    assert len(ran) == 40
    assert me in ran
    others = set(ran) - {me}
    assert len(others) == 1, others


def _big(n: int) -> bytes:
    return bytes([n % 256]) * 300_000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pipe's size is Linux's")
def test_a_pools_results_have_room_in_its_pipe() -> None:
    """The pool's result pipe holds a megabyte (a re-scoring shard's results are about 80 KiB,
    more than a pipe's default 64 KiB: its worker then waited for the caller to read), and
    results larger than it still come whole."""
    import fcntl
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tapis_cartes.records.executors import RESULT_PIPE, _widen_result_pipe

    most = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    if most < RESULT_PIPE:
        pytest.skip(f"this system's pipes hold at most {most} bytes")
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        _widen_result_pipe(pool)
        reader = pool._result_queue._reader  # type: ignore[attr-defined]
        assert fcntl.fcntl(reader.fileno(), fcntl.F_GETPIPE_SZ) == RESULT_PIPE
    results = dict(LocalPoolExecutor(2).map_tasks(_big, range(12)))
    assert results == {n: _big(n) for n in range(12)}


STORM = textwrap.dedent(
    """
    import os, random, signal, sys, threading
    from tapis_cartes.records.executors import LocalPoolExecutor, map_in_order

    def square(x):
        return x * x

    if __name__ == "__main__":
        random.seed(int(sys.argv[1]))
        executor = LocalPoolExecutor(2)
        for trial in range(int(sys.argv[2])):
            # SIGINT lands anywhere: in the pool's bookkeeping (tiny tasks keep it busy)
            threading.Timer(random.uniform(0.2, 0.6), os.kill, (os.getpid(), signal.SIGINT)).start()
            try:
                for _ in map_in_order(executor, square, range(10**7)):
                    pass
            except KeyboardInterrupt:
                print("interrupted", trial, flush=True)
    """
)


@pytest.mark.parametrize("seed", [1])
def test_ctrl_c_anywhere_in_the_pools_bookkeeping_stops_the_job(tmp_path: Path, seed: int) -> None:
    script = tmp_path / "storm.py"
    script.write_text(INTERRUPTIBLE + STORM)
    trials = 15
    proc = subprocess.run(
        [sys.executable, str(script), str(seed), str(trials)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == [f"interrupted {i}" for i in range(trials)]
    assert "Traceback" not in proc.stderr, proc.stderr


# --- the number of workers --------------------------------------------------------------------


@pytest.mark.parametrize(
    "workers",
    [0, -1, MAX_WORKERS + 1, 100_000, 10**30, pytest.param(10**5000, id="10**5000")],
)
def test_a_number_of_workers_out_of_range_is_refused_with_the_range(workers: int) -> None:
    for make in (
        lambda: make_executor("local", workers),
        lambda: make_executor("dask", workers),
        lambda: LocalPoolExecutor(workers),
        lambda: DaskExecutor(None, workers),
    ):
        with pytest.raises(ExecutorError, match=f"must be 1 to {MAX_WORKERS}$"):
            make()


def test_the_most_workers_are_taken() -> None:
    assert isinstance(make_executor("local", MAX_WORKERS), LocalPoolExecutor)
    assert isinstance(make_executor("local", 1), SerialExecutor)


def _pid(task: int) -> int:
    return os.getpid()


def test_a_pool_starts_no_more_processes_than_its_tasks() -> None:
    """The most workers and three tasks: three processes at most (the pool's queues are sized
    by its workers: 10**30 was an OverflowError); one task runs in the caller, no pool."""
    pids = {pid for _, pid in LocalPoolExecutor(MAX_WORKERS).map_tasks(_pid, [1, 2, 3])}
    assert 1 <= len(pids) <= 3
    assert [pid for _, pid in LocalPoolExecutor(MAX_WORKERS).map_tasks(_pid, [1])] == [os.getpid()]


TOO_MANY = [str(MAX_WORKERS + 1), str(10**30)]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("workers")
    db = tmp / "a.db"
    assert tapis("archive", "add", db, DATA / "dame-de-pique-dp1.tapis").returncode == 0
    return db


def _rows(db: Path, table: str) -> int:
    with contextlib.closing(sqlite3.connect(db)) as con:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.mark.parametrize("workers", TOO_MANY)
def test_too_many_workers_end_each_command_with_exit_2_and_nothing_written(
    archive: Path, tmp_path: Path, workers: str
) -> None:
    db = tmp_path / "a.db"
    shutil.copy(archive, db)
    record = DATA / "napoleon-n1.tapis"
    commands = [
        ["record", "verify", record, "--workers", workers],
        ["archive", "add", db, record, "--workers", workers],
        ["archive", "rescore", db, "--set", "end_threshold=60", "--workers", workers],
        ["archive", "rescore", db, "--set", "end_threshold=60", "--engine", "dask",
         "--workers", workers],
    ]  # fmt: skip
    for args in commands:
        done = tapis(*args)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == 2, (args, done.stderr)
        assert done.stdout == "", args
        last = done.stderr.strip().splitlines()[-1]
        assert last.endswith(f"must be 1 to {MAX_WORKERS}") or last.endswith(
            "must be at most 9223372036854775807"  # past any count: refused by argparse
        ), last
    assert _rows(db, "records") == 1  # the Napoléon record not added
    assert _rows(db, "rescore_runs") == 0  # no run begun
    new = tmp_path / "new.db"
    done = tapis("archive", "add", new, record, "--workers", workers)
    assert done.returncode == 2 and not new.exists()  # refused before the archive is made


def test_a_limit_past_any_count_is_refused_by_the_options(archive: Path) -> None:
    done = tapis("archive", "query", archive, "--limit", str(10**23))
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2
    assert "argument --limit: must be at most 9223372036854775807" in done.stderr


def _killed_in_a_worker(job: tuple[int, int]) -> int:
    """Job `n` of the caller `job[0]`: in a pool's worker, the worker is killed (as the
    out-of-memory killer does) at the third job."""
    caller, n = job
    if os.getpid() != caller and n == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)  # (the caller leaves the pool jobs to run)
    return n


def test_a_worker_killed_is_said_so_not_a_traceback() -> None:
    """A worker killed made `BrokenProcessPool` ("A child process terminated abruptly")
    reach the command as a traceback."""
    me = os.getpid()
    with pytest.raises(ExecutorError, match="a worker process ended abruptly"):
        for _ in LocalPoolExecutor(2).map_tasks(_killed_in_a_worker, [(me, 2)] * 6):
            pass


@pytest.mark.parametrize("reply", [b"", b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"])
def test_a_peer_that_is_no_dask_scheduler_is_said_so_in_bounded_time(reply: bytes) -> None:
    """A listener that never answered held the command for ever (Client's own timeout did
    not end it); an HTTP server's reply, read as Dask's messages, failed with a traceback
    (numpy asked for exabytes)."""
    pytest.importorskip("distributed")
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    kept: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                kept.append(conn)
                conn.recv(65536)
                if reply:
                    conn.sendall(reply * 64)

    threading.Thread(target=serve, daemon=True).start()
    try:
        with pytest.raises(
            ExecutorError, match=f"no Dask scheduler answers at tcp://127.0.0.1:{port}"
        ):
            list(DaskExecutor(f"tcp://127.0.0.1:{port}", 1, timeout=2.0).map_tasks(abs, [1]))
        if reply:
            # The Client that failed is gone already, not left to the collector: collected
            # later in a Dask loop's thread, its finalizer blocked another loop's start
            # (a LocalCluster made next failed "assert loop is not None" after 10 s).
            from distributed import Client

            assert not [o for o in gc.get_objects() if isinstance(o, Client)]
    finally:
        listener.close()
        for conn in kept:
            conn.close()
        # The connection left behind (the silent listener's) ends now that it is closed:
        # waited for, so that nothing of this test runs into the next one.
        for thread in threading.enumerate():
            if thread.name == "tapis-dask-connect":
                thread.join(60)


def test_a_dask_cluster_that_lost_every_worker_fails_the_job() -> None:
    """The job waited for ever, without a word, for a worker to come back."""
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster:
        jobs = DaskExecutor(cluster.scheduler_address, 1, timeout=3.0).map_tasks(
            time.sleep, [0.2] * 50
        )
        next(jobs)  # (working)
        cluster.scale(0)
        with pytest.raises(ExecutorError, match="has had no worker for 3 s"):
            for _ in jobs:
                pass
