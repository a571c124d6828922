"""The referee's durable store: one SQLite file in WAL mode, owned by one referee.

A table's durable form is its rules, its seats, its secret seed and its action list: every
state is rebuilt by replay. Writes go through one writer thread that commits them in
batches: several submissions arriving together share one commit, and each caller's future
resolves only after the commit that holds its write (`synchronous=FULL`: a commit survives a
crash of the process or of the machine).

One referee owns a store: `Store` takes an exclusive lock (flock) on the database file for as
long as it is open, and a second `Store` on the same file fails with `StoreLocked`. The lock
goes with the process, also after `kill -9`. A store written by an earlier version is brought
up to the current schema when opened (columns and tables added, nothing removed).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tapis_cartes.referee.errors import StoreError, StoreLocked

__all__ = ["REQUEST_MEMORY", "Request", "Store", "StoreError", "StoreLocked", "StoredTable"]

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


Write = Callable[[sqlite3.Connection], None]


class Store:
    """SQLite store with a batching writer thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock_fd = _lock(self.path)
        try:
            conn = self._connect()
            try:
                conn.executescript(SCHEMA)
                have = {
                    (t, row[1])
                    for t in {t for t, _, _ in COLUMNS}
                    for row in conn.execute(f"PRAGMA table_info({t})")
                }
                for table, column, decl in COLUMNS:
                    if (table, column) not in have:
                        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            finally:
                conn.close()
        except sqlite3.Error as exc:
            os.close(self._lock_fd)
            raise StoreError(f"{self.path}: not a Tapis store ({exc})") from None
        # (A SimpleQueue: its put, once per write on the event loop, is a C call, where a
        # Queue's takes a Python lock and notifies a Python condition.)
        self._queue: queue.SimpleQueue[tuple[Write, asyncio.Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._closed = False
        self.writer_cpu = 0.0  # seconds of CPU the writer thread used, once it has stopped
        self._thread = threading.Thread(target=self._writer, name="tapis-store", daemon=True)
        self._thread.start()
        self.commits = 0  # number of commits (for tests and benchmarks)
        self.writes = 0
        # How long the latest transactions took, BEGIN to the end of COMMIT, and their COMMIT
        # alone (the log written and synced to the disk), in seconds: appended by the writer
        # thread only.
        self._took: collections.deque[tuple[float, float]] = collections.deque(
            maxlen=COMMIT_SAMPLES
        )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    # -- writing ------------------------------------------------------------------------

    def _writer(self) -> None:
        conn = self._connect()
        while True:
            item = self._queue.get()
            if item is None:
                break
            batch = [item]
            stop = False
            while len(batch) < 512:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            results = self._commit(conn, [write for write, _ in batch])
            # One wake-up of each event loop per commit, not one per write.
            by_loop: dict[asyncio.AbstractEventLoop, list[Settlement]] = {}
            for (_, future), error in zip(batch, results, strict=True):
                by_loop.setdefault(future.get_loop(), []).append((future, error))
            for loop, settlements in by_loop.items():
                with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                    loop.call_soon_threadsafe(_settle, settlements)
            if stop:
                break
        conn.close()
        self.writer_cpu = time.thread_time()

    def _commit(self, conn: sqlite3.Connection, writes: list[Write]) -> list[BaseException | None]:
        """Commit the writes together (one transaction, as few SQLite calls as can be: each
        gives the interpreter back and waits to take it again); if one fails, none of them
        is kept and each is committed on its own instead, so only the failing ones fail."""
        try:
            began = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            for write in writes:
                write(conn)
            committing = time.perf_counter()
            conn.execute("COMMIT")
        except Exception:
            _rollback(conn)
        else:
            self._committed(began, committing, len(writes))
            return [None] * len(writes)
        results: list[BaseException | None] = []
        for write in writes:
            try:
                began = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                write(conn)
                committing = time.perf_counter()
                conn.execute("COMMIT")
            except Exception as exc:  # the write's own failure, given to its caller
                _rollback(conn)
                results.append(exc)
            else:
                self._committed(began, committing, 1)
                results.append(None)
        return results

    def _committed(self, began: float, committing: float, writes: int) -> None:
        done = time.perf_counter()
        self._took.append((done - began, done - committing))
        self.commits += 1
        self.writes += writes

    def commit_stats(self) -> dict[str, Any]:
        """Commits and writes so far, and how long the latest (up to `COMMIT_SAMPLES`) took:
        `transaction_ms`, BEGIN to the end of COMMIT (waits for the interpreter included),
        and `commit_ms`, the COMMIT alone (the log written and synced to the disk), each at
        the 50th, 90th, 99th percentile and the longest, in milliseconds: what the store adds
        to an acknowledgement; once the store is closed, `writer_cpu_s`, the CPU its writer
        thread used."""
        took = list(self._took)  # a copy: the writer may append meanwhile
        stats: dict[str, Any] = {"commits": self.commits, "writes": self.writes}
        if not self._thread.is_alive():
            stats["writer_cpu_s"] = round(self.writer_cpu, 6)
        if took:
            stats["transaction_ms"] = _percentiles(sorted(t for t, _ in took))
            stats["commit_ms"] = _percentiles(sorted(c for _, c in took))
        return stats

    async def write(self, write: Write) -> None:
        """Run `write` in the writer's transaction; return once it is committed."""
        await self.queue(write)

    def queue(self, write: Write) -> asyncio.Future[None]:
        """Queue `write` for the writer, now: the writes are committed in the order they
        are queued. The future is done once it is committed (or failed)."""
        if self._closed:
            raise StoreError(f"{self.path}: the store is closed")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put((write, future))
        return future

    def close(self) -> None:
        """Commit what is queued, stop the writer and release the store."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        os.close(self._lock_fd)

    # -- the writes the referee makes -----------------------------------------------------

    async def create_table(self, table: StoredTable, request: tuple[str, str, str] | None) -> None:
        """A new table with its seats; with `request` (client, request id, digest), the
        request id remembered in the same commit."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO tables (id, created, creator, game, ruleset, options, players, seed,"
                " time_control) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    table.id,
                    table.created,
                    table.creator,
                    table.game,
                    table.ruleset,
                    json.dumps(table.options, sort_keys=True),
                    table.players,
                    table.seed,
                    None
                    if table.time_control is None
                    else json.dumps(table.time_control, sort_keys=True),
                ),
            )
            conn.executemany(
                "INSERT INTO seats (table_id, seat, name, open, token_hash, taken_order)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(table.id, *s) for s in table.seats],
            )
            if request is not None:
                _remember(conn, request, table.id, None)

        await self.write(write)

    async def take_seat(
        self,
        table_id: str,
        seat: int,
        name: str,
        token_hash: bytes,
        order: int,
        request: tuple[str, str, str] | None,
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE seats SET name = ?, token_hash = ?, taken_order = ?"
                " WHERE table_id = ? AND seat = ? AND token_hash IS NULL",
                (name, token_hash, order, table_id, seat),
            )
            if cur.rowcount != 1:
                raise sqlite3.IntegrityError(f"seat {seat} of {table_id} is not open")
            if request is not None:
                _remember(conn, request, table_id, seat)

        await self.write(write)

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

        def write(conn: sqlite3.Connection) -> None:
            if not follows:
                conn.execute(
                    "INSERT INTO actions (table_id, idx, seat, action, elapsed_ms, timeout)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (table_id, index, seat, action, elapsed_ms, int(timeout)),
                )
                return
            cur = conn.execute(
                "INSERT INTO actions (table_id, idx, seat, action, elapsed_ms, timeout)"
                " SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS"
                " (SELECT 1 FROM actions WHERE table_id = ? AND idx = ?)",
                (table_id, index, seat, action, elapsed_ms, int(timeout), table_id, index - 1),
            )
            if cur.rowcount != 1:
                raise sqlite3.OperationalError(
                    f"action {index} of {table_id} not stored: action {index - 1} was not"
                )

        return self.queue(write)

    async def finish(self, table_id: str, envelope: bytes, record_id: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE tables SET finished = 1, record = ?, record_id = ? WHERE id = ?",
                (envelope, record_id, table_id),
            )

        await self.write(write)

    async def close_table(self, table_id: str, status: str, reason: str) -> None:
        """Close a table without a record: `expired` or `broken`, with the reason."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE tables SET closed_status = ?, closed_reason = ? WHERE id = ?",
                (status, reason, table_id),
            )

        await self.write(write)

    async def forget_requests(self, before: float) -> None:
        """Forget the request ids remembered before `before` (a time.time())."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM requests WHERE created < ?", (before,))

        await self.write(write)

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
        conn = self._connect()
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
        conn = self._connect()
        try:
            row = conn.execute("SELECT record FROM tables WHERE id = ?", (table_id,)).fetchone()
        finally:
            conn.close()
        return None if row is None else row[0]

    def find_request(self, client: str, request_id: str) -> Request | None:
        """The request a client made with this id, remembered for `REQUEST_MEMORY`."""
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT digest, table_id, seat FROM requests"
                " WHERE client = ? AND request_id = ? AND created >= ?",
                (client, request_id, time.time() - REQUEST_MEMORY),
            ).fetchone()
        finally:
            conn.close()
        return None if row is None else Request(row[0], row[1], row[2])

    def count_finished(self) -> int:
        """Finished tables with their record (left on disk at start-up)."""
        conn = self._connect()
        try:
            row = conn.execute(
                "SELECT count(*) FROM tables WHERE finished = 1 AND record IS NOT NULL"
            ).fetchone()
        finally:
            conn.close()
        return int(row[0])


def _lock(path: str) -> int:
    """Open the database file (created if need be) and lock it for this process alone."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open the store: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StoreLocked(
            f"{path}: the store is in use by another referee (one referee owns a store)"
        ) from None
    return fd


def _percentiles(ordered: list[float]) -> dict[str, float]:
    """Seconds, in order, as milliseconds at the 50th, 90th, 99th percentile and the
    longest."""

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1)}


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _remember(
    conn: sqlite3.Connection, request: tuple[str, str, str], table_id: str, seat: int | None
) -> None:
    client, request_id, digest = request
    conn.execute(
        "INSERT OR REPLACE INTO requests (client, request_id, digest, table_id, seat, created)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (client, request_id, digest, table_id, seat, time.time()),
    )


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


Settlement = tuple[asyncio.Future[None], BaseException | None]


def _settle(settlements: list[Settlement]) -> None:
    for future, error in settlements:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
