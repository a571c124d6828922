"""The local process pool stops at once when its results are no longer wanted, and a Ctrl-C
in the middle of its bookkeeping never leaves it hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tapis_cartes.records.executors import LocalPoolExecutor, SerialExecutor, map_in_order

ROOT = Path(__file__).resolve().parents[2]


def _pid_after(seconds: float) -> int:
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
    results = LocalPoolExecutor(2).map_tasks(_pid_after, [0.0, 600.0, 600.0, 600.0])
    task, pid = next(results)
    assert task == 0.0 and pid != os.getpid()
    t0 = time.monotonic()
    results.close()  # as `map_in_order` and the commands do on Ctrl-C
    waited = time.monotonic() - t0
    assert waited < 60, f"close waited {waited:.1f} s for tasks of 600 s"
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the worker outlived its pool"


def test_a_finished_job_gives_every_result_in_order_like_the_serial_one() -> None:
    tasks = [0.0] * 40
    pool = [t for t, _ in map_in_order(LocalPoolExecutor(2), _pid_after, tasks)]
    serial = [t for t, _ in map_in_order(SerialExecutor(), _pid_after, tasks)]
    assert pool == serial == tasks


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
    script.write_text(STORM)
    trials = 15
    proc = subprocess.run(
        [sys.executable, str(script), str(seed), str(trials)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
        # as from a terminal: a test run in the background inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:-1] == [f"interrupted {i}" for i in range(trials)]
    assert "Traceback" not in proc.stderr, proc.stderr
