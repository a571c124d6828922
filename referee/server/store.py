"""The referee's durable store: one SQLite file in WAL mode, owned by one referee.

A table's durable form is its rules, its seats, its secret seed and its action list: every
state is rebuilt by replay. Writes go to one writer, a process of its own
(referee/server/writer.py), that commits them in batches: several submissions arriving
together share one commit, and each caller's future resolves only after the commit that holds
its write (`synchronous=FULL`: a commit survives a crash of the process or of the machine).
The writer is a process, not a thread, so that its SQLite calls never wait for the interpreter
the event loop holds (as a thread, each of its calls did, adding milliseconds to every
acknowledgement under load); the loop sends the writes down a pipe and reads the answers
when they come, waiting for nothing.

One referee owns a store: `Store` takes an exclusive lock (flock) on the database file for as
long as it is open, and a second `Store` on the same file fails with `StoreLocked` (after
waiting a moment: `LOCK_WAIT`). The lock goes with the referee and its writer, also after
`kill -9`: the writer stops as soon as its referee is gone. A store written by an earlier
version is brought up to the current schema when opened (columns and tables added, nothing removed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import json
import logging
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tapis_cartes.referee.errors import StoreError, StoreLocked, Unavailable, sqlite_trouble
from tapis_cartes.referee.server.writer import connect, frame, take_frames

log = logging.getLogger("tapis.store")

__all__ = [
    "REQUEST_MEMORY",
    "Request",
    "Store",
    "StoreError",
    "StoreLocked",
    "StoredTable",
    "opening_failed",
]

REQUEST_MEMORY = 24 * 3600.0  # seconds a client's request id is remembered
COMMIT_SAMPLES = 65536  # the durations of the latest commits kept (`commit_stats`)

SCHEMA = """
CREATE TABLE IF NOT EXISTS tables (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    creator TEXT NOT NULL,
    game TEXT NOT NULL,
    ruleset TEXT NOT NULL,
    options TEXT NOT NULL,          -- JSON object of the options given
    players INTEGER NOT NULL,
    seed BLOB NOT NULL,
    finished INTEGER NOT NULL DEFAULT 0,
    record BLOB,                    -- the signed envelope, once finished
    record_id TEXT
);
CREATE TABLE IF NOT EXISTS seats (
    table_id TEXT NOT NULL REFERENCES tables(id),
    seat INTEGER NOT NULL,
    name TEXT NOT NULL,
    open INTEGER NOT NULL,          -- left open at creation
    token_hash BLOB,                -- SHA-256 of the seat's token, once taken
    taken_order INTEGER,            -- order in which seats were taken
    PRIMARY KEY (table_id, seat)
);
CREATE TABLE IF NOT EXISTS actions (
    table_id TEXT NOT NULL REFERENCES tables(id),
    idx INTEGER NOT NULL,
    seat INTEGER NOT NULL,
    action INTEGER NOT NULL,
    PRIMARY KEY (table_id, idx)
);
CREATE TABLE IF NOT EXISTS requests (  -- the request ids of CreateTable and JoinTable
    client TEXT NOT NULL,
    request_id TEXT NOT NULL,
    digest TEXT NOT NULL,           -- SHA-256 of the request without its id
    table_id TEXT NOT NULL,
    seat INTEGER,                   -- the seat taken (JoinTable); NULL for CreateTable
    created REAL NOT NULL,
    PRIMARY KEY (client, request_id)
);
"""
# Columns added to the first schema, added to an older store when it is opened:
# `closed_status` is "expired" or "broken" for a table closed without a record, with a reason;
# `time_control` the JSON of a timed table's clocks (NULL: untimed); per action at a timed
# table, the ms it took and whether the referee made it on time.
COLUMNS = (
    ("tables", "closed_status", "TEXT"),
    ("tables", "closed_reason", "TEXT"),
    ("tables", "time_control", "TEXT"),
    ("actions", "elapsed_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("actions", "timeout", "INTEGER NOT NULL DEFAULT 0"),
)


# The store's schema version (SQLite's user_version): the schema above with COLUMNS. A store
# of a newer Tapis (a higher version: columns or rules this one does not know) is refused; one
# of an older Tapis (0: before versions were kept) is brought to this one.
STORE_VERSION = 1
_STORE_TABLES = frozenset({"tables", "seats", "actions", "requests"})


def _columns(conn: sqlite3.Connection, table: str) -> frozenset[str]:
    return frozenset(row[1] for row in conn.execute(f"PRAGMA table_info({table})"))


def _schema_columns() -> dict[str, frozenset[str]]:
    """The columns of each table of SCHEMA (a store of any version has them: COLUMNS come on
    top)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(SCHEMA)
        return {table: _columns(conn, table) for table in _STORE_TABLES}
    finally:
        conn.close()


_STORE_COLUMNS = _schema_columns()


def _shown(names: Sequence[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _check_kind(conn: sqlite3.Connection, path: str) -> None:
    """`StoreError` for a file that is no store of this Tapis, read before anything is
    written to it: another program's SQLite file, none of whose tables is a store's (a Tapis
    archive: a store's tables would be added to it), or whose table of a store's name lacks
    the store's columns (a `tables` of another program: the store's tables and columns were
    added to the file, then its start failed), or that holds triggers (Tapis makes none: one
    could change what the referee writes); or a store of a version this Tapis does not know."""
    names = {
        name
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    }
    other = sorted(names - _STORE_TABLES)
    if names and not names & _STORE_TABLES:  # (a store's own file may hold a table more)
        raise StoreError(
            f"{path}: not a Tapis store (it has tables of another program: {_shown(other)}"
            + ("; a Tapis archive?" if "records" in names else "")
            + ")"
        )
    for table in sorted(names & _STORE_TABLES):
        lacking = sorted(_STORE_COLUMNS[table] - _columns(conn, table))
        if lacking:
            raise StoreError(
                f"{path}: not a Tapis store (its table {table!r} has no column "
                f"{_shown(lacking)}: another program's table of that name?)"
            )
    triggers = sorted(
        name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
    )
    if triggers:
        raise StoreError(
            f"{path}: not a Tapis store (it has triggers, which Tapis never makes: "
            f"{_shown(triggers)})"
        )
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > STORE_VERSION:
        raise StoreError(
            f"{path}: store schema version {version} is newer than this Tapis knows "
            f"({STORE_VERSION}): use a newer Tapis"
        )
    if version < 0:
        raise StoreError(f"{path}: not a Tapis store (its schema version is {version})")


def _bring_up_to_date(conn: sqlite3.Connection) -> None:
    """The store's tables, columns and version made those of this Tapis, where they are not
    (a store already so is not written: a damaged one is found by its first read, unchanged)."""
    tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if _STORE_TABLES - tables:  # (a table of SCHEMA missing)
        conn.executescript(SCHEMA)
    for table, column, decl in COLUMNS:
        if column not in _columns(conn, table):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    if conn.execute("PRAGMA user_version").fetchone() != (STORE_VERSION,):
        conn.execute(f"PRAGMA user_version = {STORE_VERSION}")


def _empty(path: str) -> bool:
    """Whether the file at `path` is empty, its write-ahead log too (or absent)."""
    try:
        return os.stat(path).st_size == 0 and not os.path.exists(path + "-wal")
    except OSError:
        return False


def opening_failed(path: str, exc: sqlite3.Error) -> StoreError:
    """The error of a store that cannot be opened or read at the start: the machine's doing
    (the disk full or failing, ...), a damaged file, or a file that is no store."""
    trouble = sqlite_trouble(exc)
    if trouble is not None:  # the machine's doing, not the file's: said so
        return StoreError(
            f"{path}: cannot open the store: {exc} ({trouble}); the file is left as it is"
        )
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT:
        return StoreError(
            f"{path}: the store is damaged ({exc}): the referee does not serve it; start it on"
            f" a copy made before, or recover what the file holds into a new one (`sqlite3"
            f" {path} .recover`)"
        )
    return StoreError(f"{path}: not a Tapis store ({exc})")


def store_unreadable(exc: sqlite3.Error) -> Unavailable:
    """What a call answers when the store cannot be read (its file gone, the disk failing):
    not the client's doing, nor a bug; logged (an operator's matter), without a traceback."""
    error = f"{type(exc).__name__}: {exc}"
    log.error("store unreadable", extra={"fields": {"error": error}})
    return Unavailable(f"the referee cannot read its store now ({error}): retry")


def _ended(process: subprocess.Popen[bytes]) -> str:
    """How a child process that closed its pipe ended, for a person: waited for a moment
    (its pipe closes as it dies, a moment before it can be waited for)."""
    try:
        status = process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return "its pipe closed; the process is still running"
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed by signal {-status} ({signal.Signals(-status).name})"
        return f"killed by signal {-status}"
    return f"exit status {status}"


@dataclass
class StoredTable:
    id: str
    created: float
    creator: str
    game: str
    ruleset: str
    options: dict[str, Any]
    players: int
    seed: bytes
    finished: bool
    record: bytes | None
    seats: list[tuple[int, str, bool, bytes | None, int | None]]  # seat, name, open, hash, order
    actions: list[tuple[int, int]]  # (seat, action) in order
    closed_status: str | None = None  # "expired" or "broken"
    closed_reason: str = ""
    problem: str = ""  # what is wrong with the stored row, when it cannot be read as a table
    time_control: dict[str, Any] | None = None  # tapis_cartes.records.clocks.TimeControl's fields
    timing: list[tuple[int, bool]] = field(default_factory=list)  # per action: ms, on time


@dataclass(frozen=True)
class Request:
    """A CreateTable or JoinTable remembered by its client's request id."""

    digest: str
    table_id: str
    seat: int | None


# A write: the statements it runs, in one transaction with the writes committed with it; each
# step `(name, params, failure)`, the statement `writer.STATEMENTS[name]` (referee/server/
# writer.py) and, for one that must change exactly one row, what the write fails with when it
# does not.
Step = tuple[str, Any, str]
Write = tuple[Step, ...]

_WRITER = Path(__file__).with_name("writer.py")
LOCK_WAIT = 5.0  # seconds a new store waits for the lock of a referee still stopping


# How often, at most, the store checks that its file is still the one it opened.
FILE_CHECK_SECONDS = 1.0
# Seconds a write may wait for the writer's answer (a commit takes milliseconds): past them
# the writer is taken for stalled (its disk hung, the process stopped) and the store fails,
# the referee then stops (a restart serves what was committed); and the most a stop waits
# for the writer to commit what is queued and end, before it is killed.
WRITER_STALL = 30.0


def _file_identity(path: str) -> tuple[int, int] | None:
    """The device and inode of the file at `path` (None: no file there)."""
    found = _file_stat(path)
    return None if found is None else (found.st_dev, found.st_ino)


def _file_stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


class Store:
    """SQLite store written by a writer process that commits in batches."""

    def __init__(
        self, path: str | Path, lock_wait: float = LOCK_WAIT, stall: float = WRITER_STALL
    ) -> None:
        self.path = str(path)
        self.stall = stall  # (`WRITER_STALL`)
        self._watch: asyncio.TimerHandle | None = None  # the next look for a stall
        made = not os.path.lexists(self.path)  # a new store: its file made here
        self._lock_fd = _lock(self.path, lock_wait)
        try:
            # Read as it is first: the store's settings (its log, WAL) change the file.
            conn = sqlite3.connect(self.path, isolation_level=None)
            try:
                _check_kind(conn, self.path)
            finally:
                conn.close()
            conn = connect(self.path)
            try:
                _bring_up_to_date(conn)
            finally:
                conn.close()
        except (sqlite3.Error, StoreError) as exc:
            os.close(self._lock_fd)
            if made and _empty(self.path):  # (a start that failed leaves no file behind)
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            if isinstance(exc, StoreError):
                raise
            raise opening_failed(self.path, exc) from None
        self._closed = False
        self._failed = ""  # why the writer stopped on its own (every write then fails)
        self._copy_log = False  # failed, the writer is still let end as a stop ends it
        opened = _file_stat(self.path)  # the file opened (`_check_file`)
        self._file = None if opened is None else (opened.st_dev, opened.st_ino)
        self._size = 0 if opened is None else opened.st_size  # its size when last checked
        self._logs: list[tuple[int, int] | None] = [None, None]  # its -wal and -shm, once made
        self._file_checked = time.monotonic()
        self.writer_cpu = 0.0  # seconds of CPU the writer used, once it has stopped
        self.commits = 0  # number of commits (for tests and benchmarks)
        self.writes = 0
        # How long the latest transactions took, BEGIN to the end of COMMIT, and their COMMIT
        # alone (the log written and synced to the disk), in seconds, as the writer measured
        # them.
        self._took: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=COMMIT_SAMPLES
        )
        # How long the latest writes waited, from `queue` to their answer read on the loop
        # (the pipes, the writer's queue, the transaction), in seconds.
        self._waited: collections.deque[float] = collections.deque(maxlen=COMMIT_SAMPLES)
        # The writes under way by id, in order: each one's future and when it was queued.
        self._pending: dict[int, tuple[asyncio.Future[None], float]] = {}
        self._next_id = 0
        self._out = bytearray()  # frames not yet taken by the pipe to the writer
        self._waiting = False  # whether the loop waits for the pipe to take `_out`
        self._in = bytearray()  # the writer's answers not yet read whole
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop that reads the answers
        # Called (on the loop) with why, when the writer stops on its own: the referee then
        # stops (`serve`), to be restarted from what was committed.
        self.on_failure: Callable[[str], None] | None = None
        self._start_writer()

    def _start_writer(self) -> None:
        to_writer, writer_in = os.pipe()
        writer_out, from_writer = os.pipe()
        try:
            fds = (to_writer, from_writer, self._lock_fd)
            self._writer = subprocess.Popen(
                [sys.executable, "-I", str(_WRITER), self.path, *map(str, fds)],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # signals to the referee's group are the referee's
            )
        except OSError as exc:
            for fd in (writer_in, writer_out, self._lock_fd):  # (the writer's ends: below)
                os.close(fd)
            raise StoreError(f"{self.path}: cannot start the store's writer: {exc}") from None
        finally:
            os.close(to_writer)
            os.close(from_writer)
        self._to, self._from = writer_in, writer_out
        os.set_blocking(self._to, False)
        os.set_blocking(self._from, False)

    # -- writing ------------------------------------------------------------------------
    # The writes go to the writer as they are queued, from the event loop's thread; its
    # answers are read by that loop (a reader on the pipe): nothing here waits for another
    # thread, nor makes the writer wait for the interpreter.

    def commit_stats(self) -> dict[str, Any]:
        """Commits and writes so far, and how long the latest (up to `COMMIT_SAMPLES`) took:
        `transaction_ms`, BEGIN to the end of COMMIT, and `commit_ms`, the COMMIT alone (the
        log written and synced to the disk), as the writer measured them; `write_ms`, a
        write from `queue` to its answer read on the event loop (what the store adds to an
        acknowledgement: the pipes, the writer's queue, the transaction); each at the 50th,
        90th, 99th percentile and the longest, in milliseconds; once the store is closed,
        `writer_cpu_s`, the CPU its writer process used."""
        took = list(self._took)
        stats: dict[str, Any] = {"commits": self.commits, "writes": self.writes}
        if self._closed:
            stats["writer_cpu_s"] = round(self.writer_cpu, 6)
        if took:
            stats["transaction_ms"] = _percentiles(sorted(t for t, _ in took))
            stats["commit_ms"] = _percentiles(sorted(c for _, c in took))
        if self._waited:
            stats["write_ms"] = _percentiles(sorted(self._waited))
        return stats

    async def write(self, write: Write) -> None:
        """Run `write` in the writer's transaction; return once it is committed."""
        await self.queue(write)

    def queue(self, write: Write) -> asyncio.Future[None]:
        """Queue `write` for the writer, now: the writes are committed in the order they
        are queued. The future is done once it is committed (or failed: with the
        `sqlite3` error of its failure)."""
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._check_file()
        if self._failed:
            future.set_exception(sqlite3.OperationalError(self._failed))
            return future
        if loop is not self._loop:
            self._bind(loop)
        wid = self._next_id
        self._next_id += 1
        self._pending[wid] = (future, time.perf_counter())
        data = frame((wid, write))
        self._out += data
        if len(self._out) == len(data):  # nothing was waiting: send now
            self._send()
        return future

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read the writer's answers on `loop` (the loop of the writes from now on)."""
        if self._pending:
            raise StoreError(f"{self.path}: writes under way on another event loop")
        self._detach()
        self._loop = loop
        loop.add_reader(self._from, self._answers)
        self._watch = loop.call_later(FILE_CHECK_SECONDS, self._check_stall)

    def _check_stall(self) -> None:
        """Once a second: the store fails when its oldest write under way has waited more
        than `stall` seconds for the writer (stalled: its disk hung, or the process stopped;
        the writes under way fail UNAVAILABLE, never acknowledged; the referee stops, and
        its stop kills the writer). Clients waited for ever, and health said SERVING."""
        if self._failed or self._closed or self._loop is None:
            return
        oldest = next(iter(self._pending.values()), None)
        if oldest is not None and time.perf_counter() - oldest[1] > self.stall:
            self._fail(
                f"the store's writer has not answered for {self.stall:g} s (its disk stalled,"
                " or the process was stopped?): the referee stops; what was committed is"
                " served again once it is restarted"
            )
            return
        self._watch = self._loop.call_later(FILE_CHECK_SECONDS, self._check_stall)

    def _detach(self) -> None:
        """No more reading of answers nor sending on the loop (when it is still open)."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self._from)
            loop.remove_writer(self._to)
        self._waiting = False

    def _send(self) -> None:
        """Give the pipe what it takes of the queued frames; the rest when it can take more."""
        try:
            sent = os.write(self._to, self._out)
        except BlockingIOError:
            sent = 0
        except OSError as exc:  # the writer is gone: its answers' end says why
            self._fail(f"the store's writer cannot be reached ({exc.strerror})")
            return
        del self._out[:sent]
        waiting = bool(self._out)
        if waiting != self._waiting:  # the loop calls back when the pipe takes more
            assert self._loop is not None
            if waiting:
                self._loop.add_writer(self._to, self._send)
            else:
                self._loop.remove_writer(self._to)
            self._waiting = waiting

    def _answers(self) -> None:
        """Read what the writer answered (on the loop, when the pipe has it)."""
        try:
            data = os.read(self._from, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            self._fail(f"the store's writer stopped ({_ended(self._writer)})")
            return
        self._in += data
        self._check_file()
        self._read_answers()

    def _check_file(self) -> None:
        """As writes are queued and answered, once a second at most: the store fails when its file
        is no longer the one opened (removed, or replaced by another program): its commits
        would go to a file no path reaches, lost at the next start, and a second referee
        could open the path; when its file was cut short (truncated); or when its -wal or
        -shm file was removed or replaced (the commits in the log lost: a crash then lost
        acknowledged moves)."""
        now = time.monotonic()
        if self._failed or now - self._file_checked < FILE_CHECK_SECONDS:
            return
        self._file_checked = now
        found = _file_stat(self.path)
        if found is None or (found.st_dev, found.st_ino) != self._file:
            self._fail(
                "the store's file was removed or replaced while the referee ran: what it "
                "writes would be lost (the referee stops). Its latest commits are in "
                f"{self.path}-wal: put the store's file back at {self.path}, beside it (or "
                "move the file with its -wal and -shm files together), then start the "
                "referee again on it"
            )
            return
        size = found.st_size
        if size < self._size:  # (in WAL mode a store's file never shrinks)
            self._fail(
                f"the store's file was cut short while the referee ran ({self._size:,} bytes,"
                f" then {size:,}): another program wrote to it, and what it held is damaged"
                " (the referee stops)"
            )
            return
        self._size = size
        # Its write-ahead log and shared index, once made (the writer keeps them while it runs):
        # either removed or replaced, the commits in the log are lost to the file, and those
        # that follow go to a log no reader sees.
        for i, suffix in enumerate(("-wal", "-shm")):
            now_there = _file_identity(self.path + suffix)
            if self._logs[i] is None:
                self._logs[i] = now_there
            elif now_there != self._logs[i]:
                self._fail(
                    f"the store's {self.path}{suffix} was removed or replaced while the referee"
                    " ran: what is written from now would be lost (the referee stops, its"
                    " writer copying the commits of its log into the file; restart it on the"
                    " store then)",
                    copy_log=True,
                )
                return

    def _read_answers(self) -> None:
        """Settle the writes of each whole answer read so far."""
        for answer in take_frames(self._in):
            if self._failed:  # (its file gone: failed, with every write under way)
                return
            self._settle(answer)

    def _settle(self, answer: tuple[Any, list[tuple[int, float, float]], float | None]) -> None:
        acks, timing, cpu = answer
        now = time.perf_counter()
        for writes, transaction, commit in timing:
            self._took.append((transaction, commit))
            self.commits += 1
            self.writes += writes
        if cpu is not None:
            self.writer_cpu = cpu
        for wid, failure in acks:
            future, queued = self._pending.pop(wid)
            self._waited.append(now - queued)
            if future.done():
                continue
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                if failure is None:
                    future.set_result(None)
                else:
                    kind, text, code = failure
                    error = getattr(sqlite3, kind, sqlite3.OperationalError)(text)
                    error.sqlite_errorcode = code  # (what `sqlite_trouble` reads)
                    future.set_exception(error)

    def _fail(self, why: str, copy_log: bool = False) -> None:
        """The writer stopped on its own (or cannot be reached): every write under way and
        every later one fails (the referee answers UNAVAILABLE; a restart replays the store,
        whose commits are the truth). With `copy_log` (its log removed under it), the store's
        close lets the writer end as it does when the referee stops, its log's commits
        copied into the file, rather than killing it (they were lost with the log)."""
        if self._failed:
            return
        self._failed = f"{self.path}: {why}"
        self._copy_log = copy_log
        log.error("store failed", extra={"fields": {"store": self.path, "error": why}})
        self._detach()
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                with contextlib.suppress(RuntimeError):
                    future.set_exception(sqlite3.OperationalError(self._failed))
        if self.on_failure is not None and not self._closed:
            self.on_failure(self._failed)

    def close(self) -> None:
        """Commit what is queued, stop the writer and release the store."""
        if self._closed:
            return
        self._closed = True
        self._detach()
        if not self._failed or self._copy_log:
            self._out += frame(None)  # the writer stops after it
            try:
                if not self._last_answers(time.monotonic() + self.stall):
                    self._fail(
                        f"the store's writer did not end within {self.stall:g} s of the stop"
                        " (its disk stalled, or the process was stopped?): what it had not"
                        " answered was not acknowledged"
                    )
            except OSError as exc:
                self._fail(f"the store's writer cannot be reached ({exc.strerror})")
        if self._pending:
            self._fail("the store's writer stopped before answering")
        if self._failed and self._writer.poll() is None:
            self._writer.kill()  # (failed with the writer running: its file gone)
        self._writer.wait()
        for fd in (self._to, self._from, self._lock_fd):
            os.close(fd)

    def _last_answers(self, deadline: float) -> bool:
        """Give the writer what is queued (its stop last) and read its answers to its end;
        False when that has not come by `deadline` (time.monotonic)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            wanted = [self._to] if self._out else []
            readable, writable, _ = select.select([self._from], wanted, [], left)
            if writable:
                with contextlib.suppress(BlockingIOError):
                    del self._out[: os.write(self._to, self._out)]
            if readable:
                try:
                    data = os.read(self._from, 1 << 20)
                except BlockingIOError:
                    continue
                if not data:  # its end
                    return True
                self._in += data
                self._read_answers()

    # -- the writes the referee makes -----------------------------------------------------

    async def create_table(self, table: StoredTable, request: tuple[str, str, str] | None) -> None:
        """A new table with its seats; with `request` (client, request id, digest), the
        request id remembered in the same commit."""
        time_control = (
            None if table.time_control is None else json.dumps(table.time_control, sort_keys=True)
        )
        row = (
            table.id,
            table.created,
            table.creator,
            table.game,
            table.ruleset,
            json.dumps(table.options, sort_keys=True),
            table.players,
            table.seed,
            time_control,
        )
        steps: list[Step] = [
            ("table", row, ""),
            ("seats", [(table.id, *s) for s in table.seats], ""),
        ]
        if request is not None:
            steps.append(_remember(request, table.id, None))
        await self.write(tuple(steps))

    async def take_seat(
        self,
        table_id: str,
        seat: int,
        name: str,
        token_hash: bytes,
        order: int,
        request: tuple[str, str, str] | None,
    ) -> None:
        steps: list[Step] = [
            (
                "take-seat",
                (name, token_hash, order, table_id, seat),
                f"seat {seat} of {table_id} is not open",
            )
        ]
        if request is not None:
            steps.append(_remember(request, table_id, seat))
        await self.write(tuple(steps))

    def queue_action(
        self,
        table_id: str,
        index: int,
        seat: int,
        action: int,
        elapsed_ms: int = 0,
        timeout: bool = False,
        follows: bool = False,
    ) -> asyncio.Future[None]:
        """Queue action `index` of a table now (`queue`). With `follows`, it is stored only
        with action `index - 1` (queued before it, not committed yet): when that one fails,
        this one fails too, and the table's actions never have a gap."""
        row = (table_id, index, seat, action, elapsed_ms, int(timeout))
        if not follows:
            return self.queue((("action", row, ""),))
        failure = f"action {index} of {table_id} not stored: action {index - 1} was not"
        return self.queue((("action-after", (*row, table_id, index - 1), failure),))

    async def finish(self, table_id: str, envelope: bytes, record_id: str) -> None:
        await self.write((("finish", (envelope, record_id, table_id), ""),))

    async def close_table(self, table_id: str, status: str, reason: str) -> None:
        """Close a table without a record: `expired` or `broken`, with the reason."""
        await self.write((("close-table", (status, reason, table_id), ""),))

    async def forget_requests(self, before: float) -> None:
        """Forget the request ids remembered before `before` (a time.time())."""
        await self.write((("forget-requests", (before,), ""),))

    # -- reading (at start-up; finished tables and request ids when asked for) -----------

    def load(self, only: Sequence[str] | None = None, live: bool = False) -> list[StoredTable]:
        """Tables with their seats and actions, in creation order: every one, the ones named
        in `only`, or with `live` those still to replay at start-up (not closed, and not
        finished or finished without their record). A row that cannot be read as a table is
        returned with its `problem` said, for the referee to isolate."""
        where, params = "1", []
        if only is not None:
            where = f"id IN ({', '.join('?' * len(only))})"
            params = list(only)
        elif live:
            where = "closed_status IS NULL AND (finished = 0 OR record IS NULL)"
        chosen = f"(SELECT id FROM tables WHERE {where})"
        conn = connect(self.path)
        try:
            rows = conn.execute(
                "SELECT id, created, creator, game, ruleset, options, players, seed, finished,"
                f" record, closed_status, closed_reason, time_control FROM tables WHERE {where}"
                " ORDER BY created, id",
                params,
            ).fetchall()
            seats: dict[str, list[tuple[int, str, bool, bytes | None, int | None]]] = {}
            for tid, seat, name, open_, token_hash, order in conn.execute(
                "SELECT table_id, seat, name, open, token_hash, taken_order FROM seats"
                f" WHERE table_id IN {chosen} ORDER BY table_id, seat",
                params,
            ):
                seats.setdefault(tid, []).append((seat, name, bool(open_), token_hash, order))
            actions: dict[str, list[tuple[int, int]]] = {}
            timing: dict[str, list[tuple[int, bool]]] = {}
            for tid, seat, action, elapsed, timeout in conn.execute(
                "SELECT table_id, seat, action, elapsed_ms, timeout FROM actions"
                f" WHERE table_id IN {chosen} ORDER BY table_id, idx",
                params,
            ):
                actions.setdefault(tid, []).append((seat, action))
                timing.setdefault(tid, []).append((elapsed, bool(timeout)))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the tables ({exc})") from None
        finally:
            conn.close()
        return [
            _stored(r, seats.get(r[0], []), actions.get(r[0], []), timing.get(r[0], []))
            for r in rows
        ]

    def load_record(self, table_id: str) -> bytes | None:
        """The stored record (envelope bytes) of a finished table, without replaying it."""
        row = self._one("SELECT record FROM tables WHERE id = ?", (table_id,))
        return None if row is None else row[0]

    def find_request(self, client: str, request_id: str) -> Request | None:
        """The request a client made with this id, remembered for `REQUEST_MEMORY`."""
        row = self._one(
            "SELECT digest, table_id, seat FROM requests"
            " WHERE client = ? AND request_id = ? AND created >= ?",
            (client, request_id, time.time() - REQUEST_MEMORY),
        )
        return None if row is None else Request(row[0], row[1], row[2])

    def last_record(self) -> bytes | None:
        """The record (envelope bytes) of the table made last among those with one."""
        row = self._one(
            "SELECT record FROM tables WHERE record IS NOT NULL ORDER BY rowid DESC LIMIT 1"
        )
        return None if row is None else row[0]

    def count_finished(self) -> int:
        """Finished tables with their record (left on disk at start-up)."""
        row = self._one("SELECT count(*) FROM tables WHERE finished = 1 AND record IS NOT NULL")
        return int(row[0]) if row is not None else 0

    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
        """The first row of a query of the store (a connection of its own, as each read)."""
        conn = connect(self.path)
        try:
            row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
            return row
        finally:
            conn.close()


def _lock(path: str, wait: float) -> int:
    """Open the database file (created if need be) and lock it for this process (and its
    writer) alone; a lock still held is waited for up to `wait` seconds (a referee killed
    with a commit under way keeps it until its writer has stopped, a moment later)."""
    orphan = _orphaned_log(path)
    if orphan:
        raise StoreError(orphan)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open the store: {exc.strerror}") from None
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() >= deadline:
                said = _locked(path, fd)
                os.close(fd)
                raise StoreLocked(said) from None
            time.sleep(0.02)


def _locked(path: str, fd: int) -> str:
    """Why the store open at `fd` cannot be locked: another referee holds it, named by its
    process where Linux tells (/proc/locks), or the writer of a referee that is gone (stopped,
    it could not end with its referee) still does."""
    said = f"{path}: the store is in use by another referee (one referee owns a store)"
    try:
        inode = os.fstat(fd).st_ino
        with open("/proc/locks") as locks:
            pids = [
                int(f[4])
                for f in map(str.split, locks)
                if len(f) > 5 and f[5].endswith(f":{inode}")
            ]
        with open(f"/proc/{pids[0]}/cmdline", "rb") as cmdline:
            writer = str(_WRITER).encode() in cmdline.read()
        with open(f"/proc/{pids[0]}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return said
    if not writer:
        return f"{said}: process {pids[0]}"
    if parent == 1:  # (its referee gone, it was given to the first process)
        return (
            f"{path}: the store's lock is held by the writer of a referee that is gone (process"
            f" {pids[0]}; stopped?): end it (kill {pids[0]}), then start again"
        )
    return f"{said}: process {parent}, whose writer (process {pids[0]}) holds the lock"


def _orphaned_log(path: str) -> str:
    """Why no store may be made at `path`: none is there, but its write-ahead log is, holding
    commits (the store's file moved or removed while a referee ran): SQLite, opening a new
    file there, would delete them. "" when there is none such."""
    if os.path.lexists(path):
        return ""
    wal = path + "-wal"
    try:
        size = os.stat(wal).st_size
    except OSError:
        return ""
    if size == 0:
        return ""
    return (
        f"{path}: there is no store there, but its write-ahead log {wal} is, with {size:,}"
        " bytes of commits (acknowledged moves?) that a new store there would delete: put the"
        f" store's file back at {path}, or move it with its -wal and -shm files together; to"
        f" start a new store at {path}, move {wal} away first"
    )


def _percentiles(ordered: list[float]) -> dict[str, float]:
    """Seconds, in order, as milliseconds at the 50th, 90th, 99th percentile and the
    longest."""

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1)}


def _remember(request: tuple[str, str, str], table_id: str, seat: int | None) -> Step:
    client, request_id, digest = request
    return ("request", (client, request_id, digest, table_id, seat, time.time()), "")


def _stored(
    row: tuple[Any, ...],
    seats: list[tuple[int, str, bool, bytes | None, int | None]],
    actions: list[tuple[int, int]],
    timing: list[tuple[int, bool]],
) -> StoredTable:
    table = StoredTable(
        id=row[0],
        created=row[1],
        creator=row[2],
        game=row[3],
        ruleset=row[4],
        options={},
        players=row[6],
        seed=row[7],
        finished=bool(row[8]),
        record=row[9],
        seats=seats,
        actions=actions,
        closed_status=row[10],
        closed_reason=row[11] or "",
        timing=timing,
    )
    try:
        table.options = _json_object(row[5], "its options are")
        if row[12] is not None:
            table.time_control = _json_object(row[12], "its time control is")
    except ValueError as exc:
        table.problem = str(exc)
    return table


def _json_object(text: Any, subject: str) -> dict[str, Any]:
    """A JSON object the store keeps; `ValueError` saying what is wrong with it ("its
    options are not JSON ...")."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{subject} not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{subject} not a JSON object")
    return value
