"""The archive's SQLite file: its tables, opened or made (sqlite-utils), and the few helpers
every part of the archive writes with.

- Table `records`: one row per record, summary columns plus the envelope bytes; table
  `record_players` (record_id, seat, name) to find a player's records.
- Tables `rescore_runs` and `rescore_results`: the re-scoring runs and their per-record
  results (records/archive/rescoring.py).

Scores are stored as JSON lists, one list per seat of the game's units (`[[26], [0], ...]`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tapis_cartes.records.codec import MAX_ENVELOPE, record_id
from tapis_cartes.records.strict import played_at_key
from tapis_cartes.referee.errors import ArchiveError, quoted, sqlite_trouble

if TYPE_CHECKING:  # imported where an archive is opened: a re-scoring worker never loads it
    import sqlite_utils

__all__ = [
    "CHANGED_ELSEWHERE",
    "FIRST_DIFF",
    "NAMES",
    "OPTIONS",
    "SCHEMA_VERSION",
    "SCORES",
    "SEATS",
    "ArchiveError",
    "Shape",
    "another_record",
    "damaged",
    "is_damage",
    "migrate",
    "now",
    "open_archive",
    "read_text",
    "record_at",
    "schema_version",
    "stored",
    "to_json",
    "writing",
]


# What a value or row Tapis never writes there says of the archive.
CHANGED_ELSEWHERE = "(was the file changed by another program, or damaged?)"

# SQLite's codes for a file whose pages do not hold together, or that is no database.
_DAMAGE_CODES = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite's error says the file's pages do not hold together."""
    return getattr(exc, "sqlite_errorcode", None) in _DAMAGE_CODES


def damaged(path: str | Path, what: str) -> ArchiveError:
    """The archive at `path` is damaged, `what` showing it; said the same by every command,
    with what tells more and what may save the rest."""
    return ArchiveError(
        f"{path}: the archive is damaged: {what}; `sqlite3 {path} 'PRAGMA integrity_check'` "
        "says more, and its `.recover` may save the rest"
    )


def another_record(record: bytes, rid: str) -> str | None:
    """Why the record stored as `rid` is another (its id is the SHA-256 of its bytes): `holds
    another record, <its id> (...)`, to follow "its stored envelope"; None when it is `rid`.
    (`show`, `export` and `rescore` alike: an archive is a file anyone may change.)"""
    held = record_id(record)
    if held == rid:
        return None
    return f"holds another record, {held} {CHANGED_ELSEWHERE}"


@contextlib.contextmanager
def writing(db: sqlite_utils.Database) -> Iterator[None]:
    """One transaction that takes the archive's write lock at its start (BEGIN IMMEDIATE):
    another command writing the archive is waited for (the busy timeout), where a deferred
    transaction that reads first would fail at its first write ("database is locked": SQLite
    cannot wait there without breaking what the read saw)."""
    _waiting(db.conn, "BEGIN IMMEDIATE")
    try:
        yield
        db.conn.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise


# How long a command waits for another writing the archive (SQLite's busy timeout), and the
# slices it waits in when it takes a lock: between them, Python runs its signal handlers (a
# Ctrl-C while SQLite waits in C took effect only when the wait ended).
BUSY_SECONDS, BUSY_SLICE_MS = 30.0, 200


def _waiting(conn: sqlite3.Connection, statement: str) -> None:
    """Run `statement`, which takes a lock on the archive (BEGIN IMMEDIATE; the switch to the
    write-ahead log), waiting up to `BUSY_SECONDS` for it in slices. SQLite's busy handler
    does not wait everywhere: the switch to WAL of a new archive that another command is
    switching too says "database is locked" at once (one of six commands opening a new
    archive together failed so); it is tried again, after a pause."""
    deadline = time.monotonic() + BUSY_SECONDS
    conn.execute(f"PRAGMA busy_timeout = {BUSY_SLICE_MS}")
    try:
        while True:
            try:
                conn.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")


def now() -> str:
    """The time now (UTC, ISO 8601, to the second), as the archive stores it."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def to_json(value: Any) -> str:
    """The JSON text the archive stores (compact, keys sorted). A list of ints, or of lists
    of ints (scores, winners: most of what a re-score stores, four a record), is written by
    `repr` in C: the same text, without its spaces."""
    if isinstance(value, list):
        text = repr(value).replace(" ", "")
        if not text.strip("[]-0123456789,"):  # anything else keeps a character of its own
            return text
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


_RECORD_ID = re.compile(r"[0-9a-f]{64}")


def record_at(rid: Any) -> str:
    """How a message names a record by the id stored for it: as it is when it is an id Tapis
    makes (64 hex digits), else quoted (a line break or a terminal's escape stored there
    would make a line, or worse, of its own)."""
    shown = rid if isinstance(rid, str) and _RECORD_ID.fullmatch(rid) else quoted(rid, 80)
    return f"record {shown}"


def _shown(value: Any) -> str:
    """A stored value for a message: NULL as SQL says it, the rest by `repr`, cut to 80."""
    if value is None:
        return "NULL"
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _changed(column: str, row: str, value: Any, expected: str) -> ArchiveError:
    return ArchiveError(
        f"the archive's {column} of {row} is {_shown(value)}, not {expected} "
        "(was the file changed by another program?)"
    )


# --- what a value read from the archive must be ---------------------------------------------
# The archive is a file anyone may have changed: each value read from it is checked where it
# is decoded (`stored`, `from_json`) against what Tapis writes there, so that a changed value is
# an `ArchiveError` naming its column and row, never a traceback in the code that uses it.


@dataclass(frozen=True)
class Shape:
    """What a JSON column holds: for a person (`what`), and as a test (`holds`)."""

    what: str
    holds: Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return type(v) is int and -(2**63) <= v < 2**63  # `type`: JSON's true is no int here


def _is_seat(v: Any) -> bool:
    return _is_int(v) and v >= 0


def _is_score(v: Any) -> bool:
    """A seat's score, or a score line's delta: a value in each unit of the game (one at
    least; how many the game has is checked where the game is known)."""
    return type(v) is list and len(v) > 0 and all(map(_is_int, v))


def _is_scores(v: Any) -> bool:
    return type(v) is list and all(map(_is_score, v)) and len({len(s) for s in v}) <= 1


def _is_line(v: Any) -> bool:
    """A side of a `first_diff`: [seat, kind, delta], or none."""
    return v is None or (
        type(v) is list and len(v) == 3 and _is_seat(v[0]) and type(v[1]) is str and _is_score(v[2])
    )


def _is_first_diff(v: Any) -> bool:
    return (
        type(v) is dict
        and v.keys() == {"hand", "line", "old_rule", "new_rule", "old", "new"}
        and _is_seat(v["hand"])
        and _is_seat(v["line"])
        and type(v["old_rule"]) is str
        and type(v["new_rule"]) is str
        and _is_line(v["old"])
        and _is_line(v["new"])
    )


NAMES = Shape("a list of names", lambda v: type(v) is list and all(type(n) is str for n in v))
SEATS = Shape("a list of seats", lambda v: type(v) is list and all(map(_is_seat, v)))
SCORES = Shape("a list of scores (a list of integers per seat)", _is_scores)
OPTIONS = Shape(
    "an object of options",
    lambda v: type(v) is dict and all(type(x) in (bool, str) or _is_int(x) for x in v.values()),
)
FIRST_DIFF = Shape("a first differing line", _is_first_diff)

# What a plain column holds: its SQL value's Python type, and that type for a person.
_PLAIN = {str: "text", int: "an integer", bytes: "bytes"}


def from_json(text: Any, column: str, row: str, shape: Shape | None = None) -> Any:
    """The value of a JSON column as the archive stores it (`to_json`); `ArchiveError` naming
    the column and the row (e.g. "record 1f3a..") when it is not JSON, or not of `shape`."""
    try:
        value = json.loads(text)
        held = shape is None or shape.holds(value)
    except (TypeError, ValueError, RecursionError):  # (RecursionError: nested too deep)
        raise _changed(column, row, text, "the JSON Tapis stores") from None
    if not held:
        assert shape is not None
        raise _changed(column, row, text, shape.what)
    return value


def stored(
    value: Any, kind: type | Shape | tuple[str, ...], column: str, row: str, nullable: bool = False
) -> Any:
    """A value read from the archive, checked: of SQL type `kind` (str, int, bytes), JSON
    text of `kind` (a `Shape`, decoded), or one of the texts `kind` (a tuple); None kept when
    `nullable`. `ArchiveError` naming the column and the row otherwise."""
    if value is None and nullable:
        return None
    if isinstance(kind, Shape):
        return from_json(value, column, row, kind)
    if isinstance(kind, tuple):
        if type(value) is not str or value not in kind:
            raise _changed(column, row, value, " or ".join(map(repr, kind)))
        return value
    if type(value) is not kind:
        raise _changed(column, row, value, _PLAIN[kind])
    return value


def read_text(value: bytes) -> str:
    """A TEXT value as read from the archive (the connections' `text_factory`): bytes that
    are not UTF-8 (the file changed by another program: `x'ff' || ...` in sqlite3 makes
    such text) read with U+FFFD in their place, so that the value is refused as the column's
    checks say, naming the row, where SQLite's reading failed the whole command, unnamed."""
    return value.decode("utf-8", "replace")


def _played_at_key(value: Any) -> str | None:
    """`played_at_key` as SQL calls it, of any stored value."""
    return played_at_key(value) if isinstance(value, str) else None


def open_archive(
    path: str | Path, create: bool = True, writes: bool | None = None
) -> sqlite_utils.Database:
    """The archive at `path`, its tables made if missing; `ArchiveError` if it does not exist
    (or is not an archive: another SQLite file, an empty file) and `create` is false, or if it
    is not an SQLite file, or a folder, or in a folder that does not exist.

    An archive this process cannot write (`_cannot_write`: the file, or the folder where
    SQLite makes its write-ahead log beside it) is an `ArchiveError` saying so when the
    command `writes` (by default: when it may `create` the archive; `archive add`, `rescore`).
    Else it is opened read-only, so that `query`, `show`, `runs` and `export` read an archive
    on a read-only medium; its schema must then be current (a migration writes). The file is
    read and checked as it is (`_check_objects`) before anything is written to it; then a
    command that `writes` switches it to the write-ahead log (one that only reads leaves its
    journal as it is), and any command brings the schema of an archive it can write to the
    current version."""
    import sqlite_utils

    p = Path(path)
    _check_path(p, create)
    writes = create if writes is None else writes
    cannot_write = _cannot_write(p)
    if writes and cannot_write:
        raise ArchiveError(f"{p}: the archive cannot be written: {cannot_write}")
    db = None
    try:
        # Read and checked as it is first, by a plain connection: its journal mode and its
        # version are changed (WAL, a migration) only after the checks, and only by a command
        # that writes it; a command that only reads changes nothing in the file.
        db = sqlite_utils.Database(_read_only(p) if cannot_write else sqlite3.connect(p))
        db.conn.text_factory = read_text
        # (`--since`/`--until`: records/archive/query.py; not text is no instant)
        db.conn.create_function("played_at_key", 1, _played_at_key, deterministic=True)
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
        tables = db.table_names()
        if tables and not set(tables) & set(_TABLES):  # another program's file: left as is
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            raise ArchiveError(
                f"{p}: not a Tapis archive (it has tables of another program: {shown})"
            )
        if not create and "records" not in tables:
            raise ArchiveError(f"{p}: not a Tapis archive (it has no records table)")
        # No text or blob above a record's bound: a value made by the file itself (a
        # generated column, a function's result) is an error, not gigabytes.
        db.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE)
        version = _known_version(db, p)
        _check_objects(db, p, version)  # (before a migration writes: a trigger would run)
        if writes:
            _waiting(db.conn, "PRAGMA journal_mode=WAL")
        if not cannot_write:
            migrate(db, p)  # (by any command: what the readers select is the current schema's)
        elif version < SCHEMA_VERSION:
            raise ArchiveError(
                f"{p}: the archive needs upgrading (schema version {version}, this Tapis's"
                f" is {SCHEMA_VERSION}), which writes it, and it cannot be written here:"
                f" {cannot_write} (run any `tapis archive` command on it, or on a copy, once"
                " where it can be written: that upgrades it)"
            )
    except ArchiveError:
        if db is not None:
            db.close()
        raise
    except sqlite3.DatabaseError as exc:
        if db is not None:
            db.close()
        trouble = sqlite_trouble(exc)
        if trouble is not None:  # the machine's doing, not the file's: said so
            raise ArchiveError(
                f"{p}: the archive cannot be opened: {exc} ({trouble}); the file is left as it is"
            ) from None
        raise ArchiveError(f"{p}: not an archive ({exc})") from None
    return db


def _check_path(p: Path, create: bool) -> None:
    """`ArchiveError` for a path that cannot be an archive, said as it is: SQLite says
    "unable to open database file" for each (a folder, a folder that does not exist, a file
    this process may not read); and, when `create` is false, for a missing file."""
    if p.is_dir():
        raise ArchiveError(f"{p}: is a folder, not an archive")
    folder = p.parent
    if not folder.is_dir():
        what = "cannot make the archive" if create else "no such archive"
        why = f"{folder} is not a folder" if folder.exists() else f"there is no folder {folder}"
        raise ArchiveError(f"{p}: {what}: {why}")
    if not create and not p.is_file():
        raise ArchiveError(f"{p}: no such archive")
    if p.exists() and not os.access(p, os.R_OK):
        raise ArchiveError(f"{p}: the archive cannot be read (this user may not read it)")


def _cannot_write(p: Path) -> str | None:
    """Why this process cannot write the archive at `p` (or make it, when there is no file),
    or None when it can. The folder counts: in WAL mode SQLite makes the archive's
    write-ahead log and shared memory (`-wal`, `-shm`) beside it, and removes them."""
    folder = p.parent
    statvfs = getattr(os, "statvfs", None)  # (POSIX)
    if statvfs is not None and statvfs(folder).f_flag & os.ST_RDONLY:
        return "it is on a read-only file system"
    if p.exists() and not os.access(p, os.W_OK):
        return "this user may not write the file"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"this user may not write in its folder {folder}"
    return None


def _read_only(p: Path) -> sqlite3.Connection:
    """A read-only connection to the archive at `p`, which this process cannot write. SQLite
    reads a WAL-mode file so when its `-shm` and `-wal` files are there, or when it may make
    them in the folder; else (a read-only file system, the archive alone: as Tapis leaves it
    once closed) only as an immutable file, without locks or write-ahead log, which SQLite
    documents for a file on a read-only medium. That read is right only while no `-wal` holds
    changes not yet in the file: with one, and no `-shm`, the archive cannot be read here."""
    uri = p.absolute().as_uri()
    conn = sqlite3.connect(f"{uri}?mode=ro", uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # (SQLite opens lazily)
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        # (CANTOPEN: no -shm there to read by; READONLY_DIRECTORY: a folder of another user)
        if exc.sqlite_errorcode not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY_DIRECTORY):
            raise
    wal = p.with_name(p.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise ArchiveError(
            f"{p}: the archive cannot be read here: its write-ahead log {wal.name} holds"
            f" changes not yet in the file, which SQLite reads only with {p.name}-shm beside"
            " it or in a folder it may write (copy the archive and its -wal file where they"
            " can be written, and open it there once)"
        )
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)


# The tables an archive has (a file with tables, none of them these, is another program's).
_TABLES = ("records", "record_players", "rescore_runs", "rescore_results")
# The longest text or blob an archive holds: a record's bound, and room beside it.
MAX_VALUE = MAX_ENVELOPE + (1 << 20)

# A record's stored envelope as its readers select it: the envelope, or NULL when it is
# longer than a record holds (not read then: a blob of gigabytes another program put there
# is named, not loaded, and it does not end the reading of the others), and its length.
ENVELOPE = f"iif(length(envelope) <= {MAX_ENVELOPE}, envelope, NULL), length(envelope)"


def envelope_too_long(value: Any, length: Any) -> str | None:
    """What is wrong with a stored envelope selected as `ENVELOPE` (`value`, `length`) that
    was too long to be read; None when it was read."""
    if value is not None or not isinstance(length, int) or length <= MAX_ENVELOPE:
        return None
    return f"is {length:,} bytes long, more than a record holds ({MAX_ENVELOPE:,})"


def _check_objects(db: sqlite_utils.Database, path: Path, version: int) -> None:
    """`ArchiveError` when the archive holds what Tapis never makes there: a view or a
    trigger (a query or a write of Tapis would run it: it may never end), a virtual table, a
    generated or hidden column (its value is made when read, of any size), or a table or
    index of Tapis's tables whose SQL is not what Tapis makes (`_not_made`). Read before any
    write: SQLite evaluates an index's expression or `WHERE`, a `CHECK`, a column's
    `DEFAULT` on each row Tapis writes, and a column named `rowid`, a table without rowid or
    without its primary key change what Tapis's queries read."""
    for kind, name, sql in db.execute("SELECT type, name, sql FROM sqlite_master"):
        if kind in ("view", "trigger") or (
            kind == "table" and not str(sql or "").upper().startswith("CREATE TABLE")
        ):
            what = "virtual table" if kind == "table" else kind
            raise ArchiveError(
                f"{path}: the archive holds a {what} {name!r}, which Tapis never makes"
                " (was the file changed by another program?)"
            )
    for table in _TABLES:
        for row in db.execute(f"PRAGMA table_xinfo({table})"):
            if row[6]:  # hidden: 2 or 3 for a generated column
                raise ArchiveError(
                    f"{path}: the archive's {table}.{row[1]} is a generated column, which"
                    " Tapis never makes (was the file changed by another program?)"
                )
    _not_made(db, path, version)


# A token of SQL as SQLite reads it (`_tokens`): space and comments, a quoted name or text,
# a word, or one other character.
_TOKEN = re.compile(
    r"""(?P<space>\s+|--[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<quoted>'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\])
    |(?P<word>\w+)
    |.""",
    re.S | re.X,
)


def _tokens(sql: str) -> tuple[str, ...]:
    """The SQL of a table or an index as compared with Tapis's own: its tokens, without
    space or comments, words in capitals (SQLite reads names and keywords so), and without
    a column's `REFERENCES table(column)` (the first archives were made without them, and
    SQLite does not enforce them: Tapis never turns foreign keys on)."""
    out: list[str] = []
    for m in _TOKEN.finditer(sql):
        if m.lastgroup != "space":
            out.append(m.group().upper() if m.lastgroup == "word" else m.group())
        if len(out) >= 5 and out[-5] == "REFERENCES" and out[-3:-2] == ["("] and out[-1] == ")":
            del out[-5:]
    return tuple(out)


def _tapis_objects(db: sqlite_utils.Database) -> dict[str, tuple[str, str, str]]:
    """The tables of an archive (`_TABLES`) and the indexes on them that have SQL (not those
    SQLite makes for a key), by name in lower case: (type, name, SQL)."""
    marks = ", ".join("?" * len(_TABLES))
    return {
        name.lower(): (kind, name, sql)
        for kind, name, sql in db.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'index') AND"
            f" lower(tbl_name) IN ({marks}) AND sql IS NOT NULL ORDER BY type = 'index'",
            _TABLES,
        )
    }


@functools.cache
def _made_by_tapis() -> dict[str, tuple[str, ...]]:
    """What the migrations make in a new archive: the SQL of each table and index, by name
    (`_tapis_objects`), as `_tokens`."""
    import sqlite_utils

    db = sqlite_utils.Database(memory=True)
    for _, step in MIGRATIONS:
        step(db)
    return {name: _tokens(sql) for name, (_, _, sql) in _tapis_objects(db).items()}


def _not_made(db: sqlite_utils.Database, path: Path, version: int) -> None:
    """`ArchiveError` naming a table or index of the archive's tables whose SQL is not what
    Tapis makes. The archive's own are made again in an empty database in memory (nothing
    written to the file, no row to evaluate anything on) and brought there to the current
    version by the migrations of `version` on, then compared with those of a new archive:
    an archive of any earlier version that Tapis made compares equal, and an extra index,
    an index on an expression or with `WHERE`, a `CHECK`, a `DEFAULT` that is not Tapis's,
    a column more (`rowid`), a table `WITHOUT ROWID` or without its primary key do not.
    (An object missing is not refused here: a query that needs it names it.)"""
    import sqlite_utils

    held = _tapis_objects(db)
    if not held:
        return
    copy = sqlite_utils.Database(memory=True)
    try:
        for kind, name, sql in held.values():  # (tables first)
            try:
                copy.execute(sql)
            except sqlite3.Error as exc:
                raise ArchiveError(
                    f"{path}: the archive's {kind} {name!r} is not as Tapis makes it:"
                    f" {_shown(sql)} ({exc}) {CHANGED_ELSEWHERE}"
                ) from None
        copy.execute(f"PRAGMA user_version = {version}")
        try:
            for _, step in MIGRATIONS[version:]:
                step(copy)
        except sqlite3.Error as exc:
            raise ArchiveError(
                f"{path}: the archive's tables cannot be brought to this Tapis's schema"
                f" ({exc}): they are not as Tapis makes them {CHANGED_ELSEWHERE}"
            ) from None
        made = _made_by_tapis()
        for key, (_, _, sql) in _tapis_objects(copy).items():
            kind, name, own_sql = held.get(key, ("object", key, sql))  # (as the archive has it)
            ours = made.get(key)
            if ours is None:
                raise ArchiveError(
                    f"{path}: the archive holds {_a(kind)} {name!r}, which Tapis never makes:"
                    f" {_shown(own_sql)} {CHANGED_ELSEWHERE}"
                )
            differs = _first_difference(ours, _tokens(sql))
            if differs is not None:
                theirs, tapis = differs
                raise ArchiveError(
                    f"{path}: the archive's {kind} {name!r} is not as Tapis makes it: it has"
                    f" {_shown(theirs)} where Tapis's has {_shown(tapis)} {CHANGED_ELSEWHERE}"
                )
    finally:
        copy.close()


def _first_difference(ours: tuple[str, ...], theirs: tuple[str, ...]) -> tuple[str, str] | None:
    """Where the archive's SQL of an object (`theirs`, as `_tokens`) first differs from
    Tapis's (`ours`): a few tokens of each from there; None when it is Tapis's with some
    `NOT NULL` left out (as another program may, to store a NULL: nothing is evaluated for
    it, and every value read is checked where it is decoded)."""
    i = j = 0
    while i < len(ours) or j < len(theirs):
        if i < len(ours) and j < len(theirs) and ours[i] == theirs[j]:
            i, j = i + 1, j + 1
        elif ours[i : i + 2] == ("NOT", "NULL"):
            i += 2
        else:
            return " ".join(theirs[j : j + 6]) or "(its end)", " ".join(
                ours[i : i + 6]
            ) or "(its end)"
    return None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def schema_version(db: sqlite_utils.Database) -> int:
    """The archive's schema version (SQLite's `user_version`; 0 for an archive made before
    versions were kept, or a new file)."""
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite_utils.Database, path: Path) -> None:
    """Bring the archive to `SCHEMA_VERSION`, one migration at a time, each in its own
    transaction with the version it reaches: an interrupted migration leaves the archive at
    the last version it completed, and nothing is ever removed. `ArchiveError` for an archive
    of a newer Tapis."""
    while _known_version(db, path) < SCHEMA_VERSION:
        # Under the write lock taken first (`writing`): commands that open a new or older
        # archive at once wait for each other, where a transaction that read the version
        # first failed at its first write ("database is locked"); the version read again
        # there (another may have made this step meanwhile).
        with writing(db):
            version = _known_version(db, path)
            if version < SCHEMA_VERSION:
                target, step = MIGRATIONS[version]
                step(db)
                db.execute(f"PRAGMA user_version = {target}")


def _known_version(db: sqlite_utils.Database, path: Path) -> int:
    """The archive's schema version, once it is one this Tapis reads or upgrades:
    `ArchiveError` otherwise."""
    version = schema_version(db)
    if version < 0:  # no Tapis writes one: `MIGRATIONS[version:]` would run the last ones only
        raise ArchiveError(f"{path}: archive schema version {version} is not one Tapis writes")
    if version > SCHEMA_VERSION:
        raise ArchiveError(
            f"{path}: archive schema version {version} is newer than this Tapis knows"
            f" ({SCHEMA_VERSION}): use a newer Tapis"
        )
    return version


def _tables(db: sqlite_utils.Database) -> None:
    """Version 1: the tables and their indexes (an archive made before versions were kept
    has them already, maybe without the columns of version 2)."""
    db.execute(
        """CREATE TABLE IF NOT EXISTS records (
            record_id TEXT PRIMARY KEY, game TEXT NOT NULL, ruleset TEXT NOT NULL,
            options TEXT NOT NULL, players TEXT NOT NULL, player_count INTEGER NOT NULL,
            hands INTEGER NOT NULL, finished INTEGER NOT NULL, winners TEXT NOT NULL,
            scores TEXT NOT NULL, source TEXT NOT NULL, played_at TEXT NOT NULL,
            added_at TEXT NOT NULL, envelope BLOB NOT NULL)"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS record_players (
            record_id TEXT NOT NULL REFERENCES records(record_id), seat INTEGER NOT NULL,
            name TEXT NOT NULL, PRIMARY KEY (record_id, seat))"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS rescore_runs (
            run_id INTEGER PRIMARY KEY, options TEXT NOT NULL, game TEXT NOT NULL,
            started_at TEXT NOT NULL, finished_at TEXT, total INTEGER NOT NULL DEFAULT 0,
            scored INTEGER NOT NULL DEFAULT 0, not_replayable INTEGER NOT NULL DEFAULT 0,
            scores_changed INTEGER NOT NULL DEFAULT 0,
            winners_changed INTEGER NOT NULL DEFAULT 0,
            no_longer_finished INTEGER NOT NULL DEFAULT 0,
            now_finished INTEGER NOT NULL DEFAULT 0)"""
    )
    db.execute(
        """CREATE TABLE IF NOT EXISTS rescore_results (
            run_id INTEGER NOT NULL REFERENCES rescore_runs(run_id),
            record_id TEXT NOT NULL REFERENCES records(record_id), status TEXT NOT NULL,
            rule TEXT NOT NULL, detail TEXT NOT NULL, old_scores TEXT NOT NULL,
            new_scores TEXT, old_winners TEXT NOT NULL, new_winners TEXT,
            first_diff TEXT, old_finished INTEGER NOT NULL DEFAULT 1,
            new_finished INTEGER, PRIMARY KEY (run_id, record_id))"""
    )
    for table, cols in (
        ("records", "game"),
        ("records", "ruleset"),
        ("records", "game, ruleset"),
        ("records", "played_at"),
        ("record_players", "name"),
        ("rescore_results", "run_id, status"),
    ):
        name = f"idx_{table}_{cols.replace(', ', '_')}"
        db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({cols})")


def _finish_columns(db: sqlite_utils.Database) -> None:
    """Version 2: whether a match is finished before and after re-scoring."""
    for table, col, decl in (
        ("rescore_runs", "no_longer_finished", "INTEGER NOT NULL DEFAULT 0"),
        ("rescore_runs", "now_finished", "INTEGER NOT NULL DEFAULT 0"),
        ("rescore_results", "old_finished", "INTEGER NOT NULL DEFAULT 1"),
        ("rescore_results", "new_finished", "INTEGER"),
    ):
        if col not in db[table].columns_dict:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")


def _rule_sets_index(db: sqlite_utils.Database) -> None:
    """Version 3: an index of the records' rule sets (game, ruleset, player count). The
    distinct rule sets a re-scoring checks its options against (rescoring.py
    `check_changes`) are read from it alone: without it, SQLite read every record's row,
    envelope included (0.2 to 0.8 s for 100,000 records, before any work is shared)."""
    db.execute(
        "CREATE INDEX IF NOT EXISTS idx_records_game_ruleset_player_count "
        "ON records (game, ruleset, player_count)"
    )


def _made_by_column(db: sqlite_utils.Database) -> None:
    """Version 4: the mark of the user who began a re-scoring run (provenance.py): a run is
    continued only by its own user. The runs of an older archive have none: an unfinished one
    is not continued (a new run begins)."""
    if "made_by" not in db["rescore_runs"].columns_dict:
        db.execute("ALTER TABLE rescore_runs ADD COLUMN made_by TEXT")


# The migrations, in order: MIGRATIONS[v] brings an archive of version v to version v + 1.
MIGRATIONS: tuple[tuple[int, Callable[[sqlite_utils.Database], None]], ...] = (
    (1, _tables),
    (2, _finish_columns),
    (3, _rule_sets_index),
    (4, _made_by_column),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
