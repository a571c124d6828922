"""A `tapis archive rescore` killed (SIGKILL: it can stop nothing) leaves no process behind:
its pool's workers end soon after it, even one still starting when it was killed, and the
pool's resource tracker with them. The processes are the command's own process group (it is
started in a session of its own), found in /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tapis_cartes.clients.corpus import make_corpus
from tests.commands import ROOT, cli_command
from tests.records.archives import SET, archive_of, copy_of

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="processes are found in Linux's /proc"
)

N = 30  # Dame de Pique matches, random bots: 8 shards for 2 workers, so the pool starts

# How long the processes left may take to end: a worker still starting must finish starting
# first (its interpreter and imports, a second or more on a busy machine).
DEADLINE = 15.0


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = make_corpus("hearts", N, seed="orphans-test", kind="random")
    return archive_of(corpus, tmp_path_factory.mktemp("orphans"))


def _group(pgid: int) -> dict[int, str]:
    """The living processes of process group `pgid` (a zombie is gone for our purpose: only
    its parent's wait is left), with their command lines."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # (state, ppid, pgrp, ...)
            found[int(entry)] = cmdline
    return found


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _pool_worker(pgid: int, proc: subprocess.Popen[bytes]) -> int:
    """The first pool worker of the command in group `pgid`, as soon as it is there (a
    spawned interpreter; the resource tracker is started by `-c` too, not by `spawn_main`)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for pid, cmdline in _group(pgid).items():
            if "spawn_main" in cmdline:
                return pid
        time.sleep(0.005)
    raise AssertionError(f"no pool worker started (exit status {proc.poll()})")


def test_a_rescore_killed_while_its_worker_starts_leaves_no_process(
    archive: Path, tmp_path: Path
) -> None:
    """The worker is stopped (SIGSTOP) before it could look at its parent, the command is
    killed, and the worker goes on: it finds itself the child of another process from its
    first look, and must end, not take that process for its caller."""
    db = copy_of(archive, tmp_path)
    proc = subprocess.Popen(
        cli_command("", "archive", "rescore", db, *SET, "--workers", "2"),
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the group's id is its pid
    )
    group = proc.pid
    try:
        worker = _pool_worker(group, proc)
        os.kill(worker, signal.SIGSTOP)
        # One thread: the worker has not started its watch of the parent yet. (Stopped, it
        # holds the tasks queued for it: the command waits for them, alive, until killed.)
        assert _threads(worker) == 1, "the worker was stopped too late to test its start"
        assert proc.poll() is None
        proc.kill()
        proc.wait()
        assert any("resource_tracker" in c for c in _group(group).values())
        os.kill(worker, signal.SIGCONT)
        deadline = time.monotonic() + DEADLINE
        while _group(group) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group(group), f"left behind by the killed command: {_group(group)}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _group(group):  # this test's own processes only: those of its group
            os.kill(pid, signal.SIGKILL)
