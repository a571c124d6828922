"""Where the archive's tasks run: one interface, three engines.

An `Executor` runs a function over tasks and yields each task with its result as it completes
(in any order). The caller is the only writer: it stores each task's result as it arrives,
so an interrupted job keeps everything stored so far.

- `SerialExecutor`: in this process, one task after another.
- `LocalPoolExecutor(workers)`: `workers` processes, the caller one of them: a local pool of
  `workers - 1` (fresh interpreters, `spawn`), and the caller runs a task itself whenever
  none of the pool's is done (so no core waits while the caller only collects, and one
  interpreter fewer starts); at most `QUEUED` tasks queued per pool worker (`STARTING` until it
  answers), so a long job holds little memory. The pool's workers ignore Ctrl-C
  (SIGINT, which a terminal sends to them too, even while they start): the caller is
  interrupted, at a point where the pool is not halfway through its own bookkeeping; a job
  stopped early (Ctrl-C, an error, a caller that stops reading) terminates its workers rather
  than wait for their running tasks, whose results nobody will store.
- `DaskExecutor(scheduler, workers)`: a Dask cluster (`distributed`), at the scheduler's
  address, or a local cluster of `workers` processes when no address is given. Workers need
  Tapis installed (the same version) and, for the archive's tasks, the archive file at the
  same path (a shared file system): the tasks read their records themselves.

The functions and tasks must be picklable (module-level functions, frozen dataclasses).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tapis_cartes.referee.errors import ExecutorError, quoted

if TYPE_CHECKING:  # imported where a pool is made: `verify` on one process never loads it
    from concurrent.futures import ProcessPoolExecutor

__all__ = [
    "MAX_WORKERS",
    "DaskExecutor",
    "Executor",
    "ExecutorError",
    "LocalPoolExecutor",
    "SerialExecutor",
    "checked_workers",
    "make_executor",
    "map_in_order",
]

T = TypeVar("T")
R = TypeVar("R")

_NO_TASK: Any = object()  # what `next` gives when no task is left

# Tasks queued per worker of a local pool: 2 while the pool starts (the caller runs the
# others meanwhile), then 4: enough that a worker still has one when the caller, busy with a
# task of its own and the results, comes back to refill the queue.
STARTING, QUEUED = 2, 4

# The most workers a job takes (`--workers`). A local worker is a fresh interpreter (tens of
# MB, a fraction of a second to start), a worker of a local Dask cluster more: past the cores
# of the machine, more only costs memory and start time. 256 is the most hardware threads of
# the larger machines Tapis runs on (two sockets of 64 cores, two threads each), and far below
# what the process pool itself cannot take (a C int: 10**30 was an OverflowError, 100,000
# workers started an interpreter per task).
MAX_WORKERS = 256


def checked_workers(workers: int) -> int:
    """`workers`, once it is a number of workers a job can start: else `ExecutorError`
    saying the range allowed."""
    if not 1 <= workers <= MAX_WORKERS:
        raise ExecutorError(
            f"{quoted(workers, 40)} workers: the number of workers must be 1 to {MAX_WORKERS}"
        )
    return workers


def _at_most_tasks(workers: int, tasks: Iterable[object]) -> int:
    """`workers`, but no more than the tasks when they are counted (a list): a worker
    without a task would only start and stop."""
    return min(workers, len(tasks)) if isinstance(tasks, Sized) else workers


class Executor(Protocol):
    """Runs `fn` over `tasks`; yields (task, result) as each completes, in any order."""

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]: ...


class SerialExecutor:
    """In this process, one task after another."""

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        for task in tasks:
            yield task, fn(task)


class LocalPoolExecutor:
    """`workers` local processes: the caller and a pool of `workers - 1` (fresh interpreters:
    `spawn`), at most `QUEUED` tasks queued per pool worker. The caller runs the next task itself
    when none of the pool's is done; with one worker, or one task, it runs them all. A pool
    never has more processes than the tasks given as a list. `ExecutorError` for a number of
    workers out of 1 to `MAX_WORKERS`."""

    def __init__(self, workers: int) -> None:
        self.workers = checked_workers(workers)

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        helpers = _at_most_tasks(self.workers - 1, tasks)
        if helpers == 0 or (isinstance(tasks, Sized) and len(tasks) == 1):  # the caller alone
            yield from SerialExecutor().map_tasks(fn, tasks)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(
            helpers, mp_context=ctx, initializer=_worker_start, initargs=(os.getpid(),)
        )
        _widen_result_pipe(pool)
        todo = iter(tasks)
        running: dict[Future[R], T] = {}
        left = True  # whether `todo` may hold more tasks

        def take() -> T:
            """The next task, or `_NO_TASK` (then `todo` is not read again)."""
            nonlocal left
            task: T = next(todo, _NO_TASK) if left else _NO_TASK
            left = task is not _NO_TASK
            return task

        def submit(most: int) -> None:
            """Queue tasks on the pool until `most` are queued (or none is left)."""
            while len(running) < most:
                task = take()
                if task is _NO_TASK:
                    return
                with _interrupt_blocked():  # a submit may start a worker
                    running[pool.submit(fn, task)] = task

        try:
            with _InterruptDeferred():
                submit(STARTING * helpers)
            while running or left:
                finished = []
                with _InterruptDeferred() as interrupt:
                    done: set[Future[R]] = set()
                    if running:
                        done, _ = wait(running, timeout=0, return_when=FIRST_COMPLETED)
                    while not done and not left:  # nothing for the caller: wait, polled
                        done, _ = wait(running, timeout=0.1, return_when=FIRST_COMPLETED)
                        interrupt.raise_if_seen()  # (a Ctrl-C noted meanwhile stops the wait)
                    for fut in done:
                        finished.append((running.pop(fut), fut))
                    if finished:
                        submit(QUEUED * helpers)
                for task, fut in finished:
                    yield task, fut.result()
                if not finished:
                    task = take()  # none of the pool's is done: the caller runs one
                    if task is not _NO_TASK:
                        yield task, fn(task)
        except BrokenProcessPool:  # a worker killed (the out-of-memory killer, kill -9)
            _stop_now(pool)
            raise ExecutorError(
                "a worker process ended abruptly (killed, or out of memory?): run the command "
                "again (an archive keeps what was stored before, and a re-scoring goes on)"
            ) from None
        except BaseException:  # Ctrl-C, a task's error, or the caller stopped (GeneratorExit)
            _stop_now(pool)
            raise
        pool.shutdown(wait=True)


# The size asked for the pool's result pipe (Linux's default most, /proc/sys/fs/pipe-max-size).
RESULT_PIPE = 1 << 20


def _widen_result_pipe(pool: ProcessPoolExecutor) -> None:
    """Give the pool's result pipe room for many results (Linux; elsewhere, or when refused,
    it keeps its size). A worker writes its result whole into the pipe before its next task,
    and a pipe holds 64 KiB by default: less than a re-scoring shard's results (about 80 KiB
    for 500 records). The worker then waited for this process to read, and the pool's thread
    that reads waits for the GIL, which this process's own task holds for milliseconds at a
    time: 6 ms a result on average, 0.6 s of a 15 s re-score (`archive rescore --workers 2`
    of 100,000 records), against 0.9 ms a result with 1 MiB. The pipe is the pool's own
    (`_result_queue`, not public): a Python without it keeps the default."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system
        return
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux's
    reader = getattr(getattr(pool, "_result_queue", None), "_reader", None)
    if set_size is None or reader is None:
        return
    with contextlib.suppress(OSError):  # above the system's most, or the user's pipes' quota
        fcntl.fcntl(reader.fileno(), set_size, RESULT_PIPE)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose results are no longer wanted, without waiting for its running tasks
    (they only compute: this process is the one that stores). The workers are terminated:
    `shutdown` alone would wait for each running task to end, and the pool's own thread then
    joins them. Python 3.14 has `terminate_workers`; before it, the processes are the pool's
    `_processes`. A Ctrl-C meanwhile (a second one: this is often the first's stop) is
    raised once the pool is stopped, not in the middle of it."""
    with _InterruptDeferred():
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(10)
        # The pool's own thread ends once it sees its workers gone, and closes its wake-up
        # pipe then: waited for here, or the interpreter's exit (which wakes that thread) may
        # write to the pipe as it is closed ("Exception ignored ... Bad file descriptor"
        # after Ctrl-C).
        manager = getattr(pool, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(10)


class _InterruptDeferred:
    """Ctrl-C noted, not raised, while this process is inside the pool's code, then raised
    by `raise_if_seen` or on leaving the block, where that is safe. A KeyboardInterrupt
    raised anywhere in `concurrent.futures` (between taking a future's lock and the `with`
    that releases it) can leave a lock held, and the pool's thread then waits for it
    forever: the job hangs instead of stopping. The caller's own code, between results, is
    interrupted as usual. Only the main thread's default handler is replaced (any other is
    left alone)."""

    def __init__(self) -> None:
        self.seen = False
        self.previous: Any = None

    def __enter__(self) -> _InterruptDeferred:
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.default_int_handler and (
            threading.current_thread() is threading.main_thread()
        ):
            self.previous = previous
            signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum: int, frame: Any) -> None:
        self.seen = True

    def raise_if_seen(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        self.raise_if_seen()


@contextlib.contextmanager
def _interrupt_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread while a worker may be starting: the worker inherits it
    blocked (until `_worker_start`), so a Ctrl-C then does not kill it halfway through
    its start with a traceback. The signal is not lost: it is delivered when unblocked, or
    to another thread meanwhile (Python runs its handler in the main thread)."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _worker_start(caller: int) -> None:
    """A pool worker's start: Ctrl-C is for the caller, which stops the pool; and the worker
    ends as soon as the caller is gone (killed, it could not stop its pool: the worker would
    wait forever to hand over a result nobody reads; and the pool's resource tracker, which
    ends when the last process holding its pipe does, with it). `caller` is the caller's
    process id, as the caller gave it: a worker comes here only once its interpreter has
    started and imported its modules (a second or more on a busy machine), and a caller
    killed meanwhile has left it the child of another process, which `os.getppid()` read
    here would take for the caller, and the worker would never end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_end_with_parent, args=(caller,), daemon=True).start()


def _end_with_parent(parent: int) -> None:
    """End this process once its parent is gone (it is then the child of another): at once
    when it is gone already."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK)
    os._exit(1)


PARENT_CHECK = 1.0  # seconds between a pool worker's looks at its parent


class DaskExecutor:
    """A Dask cluster: the scheduler at `scheduler` (for instance "tcp://10.0.0.5:8786"), or,
    when it is None, a local cluster of `workers` single-threaded worker processes started
    for the job (no more than the tasks given as a list). At most 2 tasks per worker thread
    are in flight. `ExecutorError` for a number of workers out of 1 to `MAX_WORKERS`."""

    def __init__(self, scheduler: str | None, workers: int = 1, timeout: float = 30.0) -> None:
        self.scheduler = scheduler
        self.workers = checked_workers(workers)
        self.timeout = timeout

    def _client(self, workers: int) -> tuple[Any, Any]:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ExecutorError(
                "the dask engine needs Dask: pip install 'tapis[dask]' "
                "(dask[distributed]) here and on every worker"
            ) from None
        if self.scheduler is None:
            cluster = LocalCluster(
                n_workers=max(1, workers),
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # any free port: never clashes
            )
            return Client(cluster), cluster
        # Connected in a thread waited for `timeout` (and a moment; a daemon, left behind
        # when it never returns): a listener that never answers held Client's own timeout for
        # ever; and whatever the connection fails with (an HTTP server's reply read as Dask's
        # messages asked for exabytes) is said as such.
        got: list[Any] = []

        def connect() -> None:
            try:
                got.append(Client(self.scheduler, timeout=self.timeout))
            except BaseException as exc:  # (said by the caller, as text)
                got.append(f"{type(exc).__name__}: {quoted(str(exc), 200)}")
            else:
                return
            # The Client that failed is left in reference cycles (its traceback's frames),
            # and its finalizer stops its event loop under a lock every Dask loop takes to
            # start: collected later, in whatever thread the collector ran, it could block
            # a cluster starting meanwhile (Dask's "IO loop" start gives up after 10 s).
            # Collected here, in this thread, now.
            gc.collect()

        thread = threading.Thread(target=connect, name="tapis-dask-connect", daemon=True)
        thread.start()
        thread.join(self.timeout + 5.0)
        if not got:
            reason = f"no answer in {self.timeout + 5.0:g} s"
        elif not isinstance(got[0], str):
            return got[0], None
        else:  # OSError, a malformed address (ValueError), a peer that is not Dask's
            reason = got[0]
        raise ExecutorError(f"no Dask scheduler answers at {self.scheduler}: {reason}")

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        from distributed import wait as dask_wait

        client, cluster = self._client(_at_most_tasks(self.workers, tasks))
        try:
            try:
                client.wait_for_workers(1, timeout=self.timeout)
            except TimeoutError:
                raise ExecutorError(
                    f"the Dask scheduler at {self.scheduler} has no workers"
                ) from None
            threads = max(1, sum(client.nthreads().values()))
            todo = iter(tasks)
            running: dict[Any, T] = {}  # future: task

            def submit(task: T) -> None:
                running[client.submit(fn, task, pure=False)] = task

            for task in itertools.islice(todo, 2 * threads):
                submit(task)
            # Waited for a second at a time: a cluster that lost every worker (and none came
            # back within `timeout`) fails the job, where it waited for ever without a word.
            lost_since: float | None = None
            while running:
                try:
                    done, _ = dask_wait(list(running), timeout=1.0, return_when="FIRST_COMPLETED")
                except TimeoutError:
                    if client.nthreads():
                        lost_since = None
                    else:
                        lost_since = lost_since or time.monotonic()
                        if time.monotonic() - lost_since > self.timeout:
                            raise ExecutorError(
                                f"the Dask cluster at {self.scheduler} has had no worker for "
                                f"{self.timeout:g} s: the work under way was not done"
                            ) from None
                    continue
                for fut in done:
                    task = running.pop(fut)
                    result = fut.result()  # (a task's error, raised)
                    fut.release()
                    nxt = next(todo, _NO_TASK)
                    if nxt is not _NO_TASK:
                        submit(nxt)
                    yield task, result
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def _numbered(fn: Callable[[T], R], item: tuple[int, T]) -> R:
    return fn(item[1])


def map_in_order(
    executor: Executor, fn: Callable[[T], R], tasks: Iterable[T]
) -> Generator[tuple[T, R], None, None]:
    """`executor.map_tasks`, but yielding in the order of `tasks`: a result that completes
    before an earlier one waits for it (memory: the tasks in flight)."""
    ready: dict[int, tuple[T, R]] = {}
    upcoming = 0
    results = executor.map_tasks(functools.partial(_numbered, fn), enumerate(tasks))
    try:
        for (i, task), result in results:
            ready[i] = (task, result)
            while upcoming in ready:
                yield ready.pop(upcoming)
                upcoming += 1
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()  # stop a pool's workers now, not when collected


def make_executor(engine: str, workers: int = 1, scheduler: str | None = None) -> Executor:
    """The executor for `--engine local|dask` (local: in this process for one worker).
    `ExecutorError` when it cannot run: an unknown engine, a scheduler for the local one, or a
    number of workers out of 1 to `MAX_WORKERS` (before any work: a command calls it first)."""
    checked_workers(workers)
    if engine == "local":
        if scheduler is not None:
            raise ExecutorError("--scheduler is for --engine dask")
        return SerialExecutor() if workers <= 1 else LocalPoolExecutor(workers)
    if engine == "dask":
        return DaskExecutor(scheduler, workers)
    raise ExecutorError(f"unknown engine {engine!r}; expected local or dask")
