"""The referee's durable store: one SQLite file in WAL mode.

A table's durable form is its rules, its seats, its secret seed and its action list: every
state is rebuilt by replay. Writes go through one writer thread that commits them in
batches: several submissions arriving together share one commit, and each caller's future
resolves only after the commit that holds its write (`synchronous=FULL`: a commit survives a
crash of the process or of the machine).
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Store", "StoredTable"]

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
"""


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


Write = Callable[[sqlite3.Connection], None]


class Store:
    """SQLite store with a batching writer thread."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        conn = self._connect()
        conn.executescript(SCHEMA)
        conn.close()
        self._queue: queue.Queue[tuple[Write, asyncio.Future[None]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._writer, name="tapis-store", daemon=True)
        self._thread.start()
        self.commits = 0  # number of commits (for tests and benchmarks)
        self.writes = 0

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
                loop.call_soon_threadsafe(_settle, settlements)
            if stop:
                break
        conn.close()

    def _commit(self, conn: sqlite3.Connection, writes: list[Write]) -> list[BaseException | None]:
        """Commit the writes together (one transaction, as few SQLite calls as can be: each
        gives the interpreter back and waits to take it again); if one fails, none of them
        is kept and each is committed on its own instead, so only the failing ones fail."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            for write in writes:
                write(conn)
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        else:
            self.commits += 1
            self.writes += len(writes)
            return [None] * len(writes)
        results: list[BaseException | None] = []
        for write in writes:
            try:
                conn.execute("BEGIN IMMEDIATE")
                write(conn)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                results.append(exc)
            else:
                self.commits += 1
                self.writes += 1
                results.append(None)
        return results

    async def write(self, write: Write) -> None:
        """Run `write` in the writer's transaction; return once it is committed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put((write, future))
        await future

    def close(self) -> None:
        """Commit what is queued and stop the writer."""
        self._queue.put(None)
        self._thread.join()

    # -- the writes the referee makes -----------------------------------------------------

    async def create_table(
        self,
        table: StoredTable,
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO tables (id, created, creator, game, ruleset, options, players, seed)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    table.id,
                    table.created,
                    table.creator,
                    table.game,
                    table.ruleset,
                    json.dumps(table.options, sort_keys=True),
                    table.players,
                    table.seed,
                ),
            )
            conn.executemany(
                "INSERT INTO seats (table_id, seat, name, open, token_hash, taken_order)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(table.id, *s) for s in table.seats],
            )

        await self.write(write)

    async def take_seat(
        self, table_id: str, seat: int, name: str, token_hash: bytes, order: int
    ) -> None:
        def write(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE seats SET name = ?, token_hash = ?, taken_order = ?"
                " WHERE table_id = ? AND seat = ? AND token_hash IS NULL",
                (name, token_hash, order, table_id, seat),
            )
            if cur.rowcount != 1:
                raise sqlite3.IntegrityError(f"seat {seat} of {table_id} is not open")

        await self.write(write)

    async def append_action(self, table_id: str, index: int, seat: int, action: int) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO actions (table_id, idx, seat, action) VALUES (?, ?, ?, ?)",
                (table_id, index, seat, action),
            )

        await self.write(write)

    async def finish(self, table_id: str, envelope: bytes, record_id: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE tables SET finished = 1, record = ?, record_id = ? WHERE id = ?",
                (envelope, record_id, table_id),
            )

        await self.write(write)

    # -- reading (at start-up; finished tables when asked for) ---------------------------

    def load(self, only: Sequence[str] | None = None, live: bool = False) -> list[StoredTable]:
        """Tables with their seats and actions, in creation order: every one, the ones named
        in `only`, or with `live` those still to replay at start-up (not finished, or
        finished without their record)."""
        where, params = "1", []
        if only is not None:
            where = f"id IN ({', '.join('?' * len(only))})"
            params = list(only)
        elif live:
            where = "finished = 0 OR record IS NULL"
        chosen = f"(SELECT id FROM tables WHERE {where})"
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT id, created, creator, game, ruleset, options, players, seed, finished,"
                f" record FROM tables WHERE {where} ORDER BY created, id",
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
            for tid, seat, action in conn.execute(
                "SELECT table_id, seat, action FROM actions"
                f" WHERE table_id IN {chosen} ORDER BY table_id, idx",
                params,
            ):
                actions.setdefault(tid, []).append((seat, action))
        finally:
            conn.close()
        return [
            StoredTable(
                id=r[0],
                created=r[1],
                creator=r[2],
                game=r[3],
                ruleset=r[4],
                options=json.loads(r[5]),
                players=r[6],
                seed=r[7],
                finished=bool(r[8]),
                record=r[9],
                seats=seats.get(r[0], []),
                actions=actions.get(r[0], []),
            )
            for r in rows
        ]

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


Settlement = tuple[asyncio.Future[None], BaseException | None]


def _settle(settlements: list[Settlement]) -> None:
    for future, error in settlements:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
