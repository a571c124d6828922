"""Where the archive's tasks run: one interface, three engines.

An `Executor` runs a function over tasks and yields each task with its result as it completes
(in any order). The caller is the only writer: it stores each task's result as it arrives,
so an interrupted job keeps everything stored so far.

- `SerialExecutor`: in this process, one task after another.
- `LocalPoolExecutor(workers)`: a local process pool (fresh interpreters, `spawn`); at most
  two tasks queued per worker, so a long job holds little memory. The workers ignore Ctrl-C
  (SIGINT, which a terminal sends to them too, even while they start): the caller is
  interrupted, and stopping the pool lets the running tasks end.
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
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol, TypeVar

from referee.engine import TapisError

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


class ExecutorError(TapisError):
    """An engine that cannot run (Dask missing, a scheduler that does not answer)."""


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

        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_ignore_interrupt)

        def submit(task: T) -> Future[R]:
            with _interrupt_held():  # a submit may start a worker
                return pool.submit(fn, task)

        try:
            todo = iter(tasks)
            running: dict[Future[R], T] = {}
            for task in todo:
                running[submit(task)] = task
                if len(running) >= 2 * self.workers:
                    break
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    task = running.pop(fut)
                    nxt = next(todo, None)
                    if nxt is not None:
                        running[submit(nxt)] = nxt
                    yield task, fut.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def _interrupt_held() -> Iterator[None]:
    """Ctrl-C held back while a worker may be starting, then raised. A worker started
    meanwhile inherits SIGINT blocked (until `_ignore_interrupt`), and this process is not
    interrupted halfway through starting one (the worker would die with a traceback): the
    signal may reach another thread of this process (a library's), so its Python handler is
    deferred too, when it is the default one and this is the main thread."""
    held: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    defer = previous is signal.default_int_handler and (
        threading.current_thread() is threading.main_thread()
    )
    if defer:
        signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if defer:
            signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


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
