"""The referee store's writer: a process of its own (referee/server/store.py starts it), so
that its SQLite calls never wait for the interpreter the event loop holds. Standard library
only: it starts in a few milliseconds.

It reads writes from one pipe and answers on another, each message a frame: a 4-byte
little-endian length, then a pickle. A write is `(wid, steps)`, each step `(name, params,
failure)`: the statement `STATEMENTS[name]` run with `params`; a statement that must change
exactly one row fails the write with `failure` when it changes another number. `None` asks the
writer to stop: it commits what came before, answers, sends its CPU time and exits. What is
queued together is committed together (one transaction, at most `BATCH` writes); when one
write of a transaction fails, none of them is kept and each is committed on its own instead,
so only the failing ones fail. The answer to a transaction is `(acks, timing, cpu)`: each
write's id with None or its failure (the name of its `sqlite3` exception, its text and its
SQLite error code), the
transaction's writes and how long it took (BEGIN to the end of COMMIT, and its COMMIT alone,
in seconds), and None (the CPU time, in the last answer).

The writer holds the store's lock (the descriptor it inherits): a referee killed with writes
under way releases its store only once its writer has stopped. When the referee goes away
(its pipe closes) the writer stops at once, committing nothing more: no write it had not
answered was acknowledged. It ignores SIGINT and SIGTERM, which are the referee's to handle
(a terminal's Ctrl-C, a service manager's stop reach the whole group): the referee stops it
when it has stored what it had.

Usage (by the store only): python -I writer.py DB_PATH READ_FD WRITE_FD LOCK_FD
"""

from __future__ import annotations

import os
import pickle
import signal
import sqlite3
import struct
import sys
import time
from typing import Any

__all__ = [
    "BATCH",
    "STATEMENTS",
    "Frames",
    "commit",
    "connect",
    "frame",
    "main",
    "take_frames",
    "write_all",
]

BATCH = 512  # writes committed together at most

# The statements a write may run: (SQL, whether its params are a list of rows, the
# `sqlite3` exception raised when it does not change exactly one row, or None: no check).
STATEMENTS: dict[str, tuple[str, bool, str | None]] = {
    "table": (
        "INSERT INTO tables (id, created, creator, game, ruleset, options, players, seed,"
        " time_control) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        False,
        None,
    ),
    "seats": (
        "INSERT INTO seats (table_id, seat, name, open, token_hash, taken_order)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        True,
        None,
    ),
    "request": (
        "INSERT OR REPLACE INTO requests (client, request_id, digest, table_id, seat, created)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        False,
        None,
    ),
    "take-seat": (
        "UPDATE seats SET name = ?, token_hash = ?, taken_order = ?"
        " WHERE table_id = ? AND seat = ? AND token_hash IS NULL",
        False,
        "IntegrityError",
    ),
    "action": (
        "INSERT INTO actions (table_id, idx, seat, action, elapsed_ms, timeout)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        False,
        None,
    ),
    # An action stored only with the one before it (already stored, or in this transaction).
    "action-after": (
        "INSERT INTO actions (table_id, idx, seat, action, elapsed_ms, timeout)"
        " SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS"
        " (SELECT 1 FROM actions WHERE table_id = ? AND idx = ?)",
        False,
        "OperationalError",
    ),
    "finish": (
        "UPDATE tables SET finished = 1, record = ?, record_id = ? WHERE id = ?",
        False,
        None,
    ),
    "close-table": (
        "UPDATE tables SET closed_status = ?, closed_reason = ? WHERE id = ?",
        False,
        None,
    ),
    "forget-requests": ("DELETE FROM requests WHERE created < ?", False, None),
}

_LENGTH = struct.Struct("<I")


def connect(path: str) -> sqlite3.Connection:
    """The store's connection settings, the writer's and the referee's readers' alike."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def frame(message: Any) -> bytes:
    """A message as one frame: its pickle's length (4 bytes, little-endian), then the pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def take_frames(buffer: bytearray, limit: int = -1) -> list[Any]:
    """The messages of the whole frames at the start of `buffer` (`limit` at most, when
    given), taken out of it; a frame not whole yet stays."""
    out: list[Any] = []
    at = 0
    while len(out) != limit and len(buffer) - at >= 4:
        (n,) = _LENGTH.unpack_from(buffer, at)
        if len(buffer) - at - 4 < n:
            break
        out.append(pickle.loads(buffer[at + 4 : at + 4 + n]))
        at += 4 + n
    del buffer[:at]
    return out


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Write all of `data` to `fd` (a blocking pipe), however many writes it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Frames:
    """The frames read from a pipe: `batch` waits for one, then takes those already there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def batch(self, limit: int) -> list[Any] | None:
        """The next messages, `limit` at most (waiting for the first); None at the end."""
        while True:
            out = take_frames(self.buffer, limit)
            if out:
                return out
            data = os.read(self.fd, 1 << 20)
            if not data:
                return None
            self.buffer += data


def _run(conn: sqlite3.Connection, steps: Any) -> None:
    for name, params, failure in steps:
        sql, many, check = STATEMENTS[name]
        cur = conn.executemany(sql, params) if many else conn.execute(sql, params)
        if check is not None and cur.rowcount != 1:
            raise getattr(sqlite3, check)(failure)


def _failure(exc: Exception) -> tuple[str, str, int]:
    kind = type(exc).__name__ if isinstance(exc, sqlite3.Error) else "OperationalError"
    return kind, str(exc), getattr(exc, "sqlite_errorcode", 0)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def commit(
    conn: sqlite3.Connection, writes: list[tuple[int, Any]]
) -> tuple[list[tuple[int, tuple[str, str, int] | None]], list[tuple[int, float, float]]]:
    """Commit the writes together; if one fails, each on its own (see the module's doc)."""
    timing = []
    try:
        began = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for _, steps in writes:
            _run(conn, steps)
        committing = time.perf_counter()
        conn.execute("COMMIT")
        done = time.perf_counter()
    except Exception:
        _rollback(conn)
    else:
        timing.append((len(writes), done - began, done - committing))
        return [(wid, None) for wid, _ in writes], timing
    acks: list[tuple[int, tuple[str, str, int] | None]] = []
    for wid, steps in writes:
        try:
            began = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            _run(conn, steps)
            committing = time.perf_counter()
            conn.execute("COMMIT")
            done = time.perf_counter()
        except Exception as exc:  # the write's own failure, given to its caller
            _rollback(conn)
            acks.append((wid, _failure(exc)))
        else:
            timing.append((1, done - began, done - committing))
            acks.append((wid, None))
    return acks, timing


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    path, rfd, wfd = argv[0], int(argv[1]), int(argv[2])  # argv[3]: the lock, held open
    conn = connect(path)
    frames = Frames(rfd)
    while True:
        batch = frames.batch(BATCH)
        if batch is None:
            return 0  # the referee went away: nothing more is committed
        stop = None in batch
        writes = [m for m in batch if m is not None]
        acks, timing = commit(conn, writes) if writes else ([], [])
        if stop:
            conn.close()
            write_all(wfd, frame((acks, timing, time.process_time())))
            return 0
        try:
            write_all(wfd, frame((acks, timing, None)))
        except BrokenPipeError:
            return 0  # the referee went away


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
