"""Where the archive's tasks run: one interface, three engines.

An `Executor` runs a function over tasks and yields each task with its result as it completes
(in any order). The caller is the only writer: it stores each task's result as it arrives,
so an interrupted job keeps everything stored so far.

- `SerialExecutor`: in this process, one task after another.
- `LocalPoolExecutor(workers)`: a local process pool (fresh interpreters, `spawn`); at most
  two tasks queued per worker, so a long job holds little memory. The workers ignore Ctrl-C
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
import signal
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from tapis_cartes.referee.errors import ExecutorError

if TYPE_CHECKING:  # imported where a pool is made: `verify` on one process never loads it
    from concurrent.futures import ProcessPoolExecutor

__all__ = [
    "DaskExecutor",
    "Executor",
    "ExecutorError",
    "LocalPoolExecutor",
    "SerialExecutor",
    "make_executor",
    "map_in_order",
]

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    """Runs `fn` over `tasks`; yields (task, result) as each completes, in any order."""

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]: ...


class SerialExecutor:
    """In this process, one task after another."""

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        for task in tasks:
            yield task, fn(task)


class LocalPoolExecutor:
    """A local process pool (fresh interpreters: `spawn`), at most 2 tasks queued per worker."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_ignore_interrupt)
        todo = iter(tasks)
        running: dict[Future[R], T] = {}

        def submit_next() -> None:
            task = next(todo, None)
            if task is not None:
                with _interrupt_blocked():  # a submit may start a worker
                    running[pool.submit(fn, task)] = task

        try:
            with _InterruptDeferred():
                for _ in range(2 * self.workers):
                    submit_next()
            while running:
                with _InterruptDeferred() as interrupt:
                    done: set[Future[R]] = set()
                    while not done:  # polled: a Ctrl-C noted meanwhile stops the wait
                        done, _ = wait(running, timeout=0.1, return_when=FIRST_COMPLETED)
                        interrupt.raise_if_seen()
                    finished = []
                    for fut in done:
                        finished.append((running.pop(fut), fut))
                        submit_next()
                for task, fut in finished:
                    yield task, fut.result()
        except BaseException:  # Ctrl-C, a task's error, or the caller stopped (GeneratorExit)
            _stop_now(pool)
            raise
        pool.shutdown(wait=True)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Stop a pool whose results are no longer wanted, without waiting for its running tasks
    (they only compute: this process is the one that stores). The workers are terminated:
    `shutdown` alone would wait for each running task to end, and the pool's own thread then
    joins them. Python 3.14 has `terminate_workers`; before it, the processes are the pool's
    `_processes`."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(10)


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
    blocked (until `_ignore_interrupt`), so a Ctrl-C then does not kill it halfway through
    its start with a traceback. The signal is not lost: it is delivered when unblocked, or
    to another thread meanwhile (Python runs its handler in the main thread)."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _ignore_interrupt() -> None:
    """A pool worker's start: Ctrl-C is for the caller, which stops the pool."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class DaskExecutor:
    """A Dask cluster: the scheduler at `scheduler` (for instance "tcp://10.0.0.5:8786"), or,
    when it is None, a local cluster of `workers` single-threaded worker processes started
    for the job. At most 2 tasks per worker thread are in flight."""

    def __init__(self, scheduler: str | None, workers: int = 1, timeout: float = 30.0) -> None:
        self.scheduler = scheduler
        self.workers = max(1, workers)
        self.timeout = timeout

    def _client(self) -> tuple[Any, Any]:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ExecutorError(
                "the dask engine needs Dask: pip install 'tapis[dask]' "
                "(dask[distributed]) here and on every worker"
            ) from None
        if self.scheduler is None:
            cluster = LocalCluster(
                n_workers=self.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # any free port: never clashes
            )
            return Client(cluster), cluster
        try:
            return Client(self.scheduler, timeout=self.timeout), None
        except (OSError, TimeoutError, ValueError) as exc:  # ValueError: a malformed address
            raise ExecutorError(f"no Dask scheduler answers at {self.scheduler}: {exc}") from None

    def map_tasks(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[tuple[T, R]]:
        from distributed import as_completed

        client, cluster = self._client()
        try:
            try:
                client.wait_for_workers(1, timeout=self.timeout)
            except TimeoutError:
                raise ExecutorError(
                    f"the Dask scheduler at {self.scheduler} has no workers"
                ) from None
            threads = max(1, sum(client.nthreads().values()))
            todo = iter(tasks)
            of: dict[str, T] = {}
            pending = as_completed(with_results=True)
            for task in todo:
                fut = client.submit(fn, task, pure=False)
                of[fut.key] = task
                pending.add(fut)
                if len(of) >= 2 * threads:
                    break
            for fut, result in pending:
                task = of.pop(fut.key)
                fut.release()
                nxt = next(todo, None)
                if nxt is not None:
                    new = client.submit(fn, nxt, pure=False)
                    of[new.key] = nxt
                    pending.add(new)
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
    """The executor for `--engine local|dask` (local: in this process for one worker)."""
    if engine == "local":
        if scheduler is not None:
            raise ExecutorError("--scheduler is for --engine dask")
        return SerialExecutor() if workers <= 1 else LocalPoolExecutor(workers)
    if engine == "dask":
        return DaskExecutor(scheduler, workers)
    raise ExecutorError(f"unknown engine {engine!r}; expected local or dask")
