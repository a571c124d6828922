"""The referee's store (referee/server/store.py): writes submitted together share one commit;
one that fails fails alone, and every other is kept; one store per referee (a lock); a store
of the first schema still opens."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.records.codec import decode_record
from tapis_cartes.referee.errors import StoreError
from tapis_cartes.referee.server.store import Store, StoreLocked, Write
from tapis_cartes.v1 import referee_pb2 as pb
from tests.commands import DATA, tapis

from .util import auth, new_table, play_random, run


def _insert(table_id: str, idx: int) -> Write:
    return (("action", (table_id, idx, 0, 0, 0, 0), ""),)


def _table(db: Path) -> None:
    """Table 't' in the store, for actions to refer to."""
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO tables (id, created, creator, game, ruleset, options, players, seed)"
        " VALUES ('t', 0, 'c', 'napoleon', '', '{}', 4, x'00')"
    )
    conn.commit()
    conn.close()


def test_writes_share_commits_and_a_failing_one_fails_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")

    async def main() -> list[BaseException | None]:
        _table(tmp_path / "s.db")
        first = await asyncio.gather(*(store.write(_insert("t", i)) for i in range(30)))
        assert first == [None] * 30
        assert store.commits < 30  # submitted together: they shared commits
        writes = [_insert("t", i) for i in range(30, 50)]
        writes[5] = _insert("t", 3)  # the key of an earlier write: refused by SQLite
        writes[12] = _insert("no-such-table", 0)  # refused: a foreign key
        return await asyncio.gather(
            *(store.write(w) for w in writes),
            return_exceptions=True,
        )

    results = asyncio.run(main())
    store.close()
    failed = [i for i, r in enumerate(results) if r is not None]
    assert failed == [5, 12]
    assert all(isinstance(results[i], sqlite3.IntegrityError) for i in failed)
    conn = sqlite3.connect(tmp_path / "s.db")
    kept = sorted(i for (i,) in conn.execute("SELECT idx FROM actions WHERE table_id = 't'"))
    conn.close()
    assert kept == [i for i in range(50) if i not in (35, 42)]
    assert store.writes == 48


@pytest.mark.parametrize("n", [1, 7])
def test_writes_alone_or_few_are_committed(tmp_path: Path, n: int) -> None:
    store = Store(tmp_path / "s.db")

    async def main() -> None:
        _table(tmp_path / "s.db")
        for i in range(n):
            await store.write(_insert("t", i))

    asyncio.run(main())
    store.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT count(*) FROM actions").fetchone() == (n,)
    conn.close()
    assert store.commits == n
    stats = store.commit_stats()
    assert stats["commits"] == stats["writes"] == n
    for key in ("transaction_ms", "commit_ms", "write_ms"):
        took = stats[key]  # one commit: its duration at every percentile
        assert 0 < took["p50"] <= took["p90"] <= took["p99"] <= took["max"]
        assert n > 1 or took["p50"] == took["max"]
    assert stats["commit_ms"]["max"] <= stats["transaction_ms"]["max"]
    # A write waits for its transaction, measured by the writer, and more: the pipes.
    assert stats["write_ms"]["max"] >= stats["transaction_ms"]["max"]
    assert stats["writer_cpu_s"] > 0  # the store closed: what its writer process used


# The schema of the stores written before closed tables and request ids (kept to test that
# such a store still opens).
FIRST_SCHEMA = """
CREATE TABLE tables (id TEXT PRIMARY KEY, created REAL NOT NULL, creator TEXT NOT NULL,
    game TEXT NOT NULL, ruleset TEXT NOT NULL, options TEXT NOT NULL, players INTEGER NOT NULL,
    seed BLOB NOT NULL, finished INTEGER NOT NULL DEFAULT 0, record BLOB, record_id TEXT);
CREATE TABLE seats (table_id TEXT NOT NULL REFERENCES tables(id), seat INTEGER NOT NULL,
    name TEXT NOT NULL, open INTEGER NOT NULL, token_hash BLOB, taken_order INTEGER,
    PRIMARY KEY (table_id, seat));
CREATE TABLE actions (table_id TEXT NOT NULL REFERENCES tables(id), idx INTEGER NOT NULL,
    seat INTEGER NOT NULL, action INTEGER NOT NULL, PRIMARY KEY (table_id, idx));
"""


def test_a_store_of_the_first_schema_opens_and_its_tables_play_on(tmp_path: Path) -> None:
    async def first(server: Any, stub: Any, _: Any) -> Any:
        table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 30}, 4)
        for seat in range(4):  # the four passes
            view = await stub.GetView(
                pb.GetViewRequest(table_id=table_id, seat=seat), metadata=auth(tokens[seat])
            )
            await stub.SubmitAction(
                pb.SubmitActionRequest(
                    table_id=table_id,
                    seat=seat,
                    expected_action_index=seat,
                    action=view.view.legal_actions[0].action,
                ),
                metadata=auth(tokens[seat]),
            )
        return table_id, tokens

    (tmp_path / "new").mkdir()
    table_id, tokens = run(first, tmp_path / "new")
    # The same store as the first schema wrote it: its columns and tables only.
    old = sqlite3.connect(tmp_path / "t.db")
    old.executescript(FIRST_SCHEMA)
    old.execute("ATTACH DATABASE ? AS new", (str(tmp_path / "new" / "t.db"),))
    old.execute(
        "INSERT INTO tables SELECT id, created, creator, game, ruleset, options, players, seed,"
        " finished, record, record_id FROM new.tables"
    )
    old.execute("INSERT INTO seats SELECT * FROM new.seats")
    old.execute("INSERT INTO actions SELECT table_id, idx, seat, action FROM new.actions")
    old.commit()
    old.close()
    (tmp_path / "k.key").write_bytes((tmp_path / "new" / "k.key").read_bytes())

    async def after(server: Any, stub: Any, _: Any) -> None:
        view = await stub.GetView(
            pb.GetViewRequest(table_id=table_id, seat=0), metadata=auth(tokens[0])
        )
        assert view.view.action_index == 4 and view.view.phase == "play"
        await play_random(stub, table_id, tokens, random.Random(5))
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        assert decode_record(got.envelope.record).outcome.finished

    run(after, tmp_path)
    columns = {
        row[1] for row in sqlite3.connect(tmp_path / "t.db").execute("PRAGMA table_info(tables)")
    }
    assert {"closed_status", "closed_reason"} <= columns


def test_a_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    try:
        with pytest.raises(StoreLocked, match="in use by another referee"):
            Store(tmp_path / "s.db", lock_wait=0.2)
    finally:
        store.close()
    Store(tmp_path / "s.db").close()  # free again once the first one closed


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="Linux's /proc/locks")
def test_the_holder_of_the_stores_lock_is_named(tmp_path: Path) -> None:
    """A referee killed while its writer was stopped (as a hung disk stops it) left the
    writer holding the store's lock: the next start said only "in use by another referee",
    though none ran. The message names the process that holds the lock."""
    import os
    import signal

    db = tmp_path / "s.db"
    code = (
        "import sys, time\nfrom tapis_cartes.referee.server.store import Store\n"
        "store = Store(sys.argv[1])\nprint(store._writer.pid, flush=True)\ntime.sleep(120)\n"
    )
    referee = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE)
    assert referee.stdout is not None
    writer = int(referee.stdout.readline())
    try:
        with pytest.raises(StoreLocked, match=f"process {referee.pid}, whose writer"):
            Store(db, lock_wait=0.2)
        os.kill(writer, signal.SIGSTOP)
        referee.kill()
        referee.wait()
        with pytest.raises(StoreLocked, match=f"process {writer}") as exc:
            Store(db, lock_wait=0.2)
        if "a referee that is gone" in str(exc.value):  # (given to the first process)
            assert f"kill {writer}" in str(exc.value)
    finally:
        os.kill(writer, signal.SIGKILL)
        referee.kill()
        referee.wait()
        referee.stdout.close()
    Store(db, lock_wait=5.0).close()


def test_an_action_queued_to_follow_another_is_stored_only_with_it(tmp_path: Path) -> None:
    """`queue_action(follows=True)`: stored with the action before it (queued first), never
    without it: a gap in a table's actions cannot be committed."""
    store = Store(tmp_path / "s.db")

    async def main() -> list[BaseException | None]:
        _table(tmp_path / "s.db")
        await store.queue_action("t", 0, 0, 8)
        together = [
            store.queue_action("t", 1, 1, 8),
            store.queue_action("t", 2, 2, 8, follows=True),
        ]
        gap = store.queue_action("t", 4, 0, 8, follows=True)  # action 3 was never queued
        return await asyncio.gather(*together, gap, return_exceptions=True)

    results = asyncio.run(main())
    store.close()
    assert results[:2] == [None, None]
    assert isinstance(results[2], sqlite3.OperationalError)
    conn = sqlite3.connect(tmp_path / "s.db")
    kept = [row for row in conn.execute("SELECT idx, seat FROM actions ORDER BY idx")]
    conn.close()
    assert kept == [(0, 0), (1, 1), (2, 2)]


def test_a_writer_that_dies_fails_the_writes_under_way_and_later_ones(tmp_path: Path) -> None:
    """The writer process killed: what it had not answered fails (the referee answers
    UNAVAILABLE: nothing was acknowledged), and so does every later write, at once; the
    store still closes."""
    store = Store(tmp_path / "s.db")

    async def main() -> list[BaseException | None]:
        _table(tmp_path / "s.db")
        await store.write(_insert("t", 0))
        store._writer.kill()
        store._writer.wait()
        under_way = store.write(_insert("t", 1))
        results = await asyncio.gather(under_way, return_exceptions=True)
        later = await asyncio.gather(store.write(_insert("t", 2)), return_exceptions=True)
        return [*results, *later]

    results = asyncio.run(asyncio.wait_for(main(), 10))
    store.close()
    assert all(isinstance(r, sqlite3.OperationalError) for r in results), results
    assert all("writer" in str(r) for r in results), results
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT idx FROM actions").fetchall() == [(0,)]
    conn.close()


def test_a_writer_killed_while_idle_is_said_with_its_signal(tmp_path: Path) -> None:
    """The writer killed between writes: the store fails at once (its pipe closes), saying
    how the writer ended, in the words a person reads in the log."""
    store = Store(tmp_path / "s.db")
    failures: list[str] = []

    async def main() -> None:
        stopped = asyncio.Event()

        def failed(why: str) -> None:
            failures.append(why)
            stopped.set()

        store.on_failure = failed
        _table(tmp_path / "s.db")
        await store.write(_insert("t", 0))
        store._writer.kill()
        await asyncio.wait_for(stopped.wait(), 10)

    asyncio.run(main())
    store.close()
    assert failures == [
        f"{tmp_path / 's.db'}: the store's writer stopped (killed by signal 9 (SIGKILL))"
    ]


KILLED = """
import asyncio, sys
from tapis_cartes.referee.server.store import Store
store = Store(sys.argv[1])

async def main():
    await store.queue_action("t", 0, 0, 8)
    print(store._writer.pid, flush=True)
    for i in range(1, 100000):
        store.queue_action("t", i, 0, 8)
        await asyncio.sleep(0)

asyncio.run(main())
"""


def test_a_referee_killed_mid_writes_leaves_its_store_whole_and_free(tmp_path: Path) -> None:
    """A referee killed with `kill -9` while it writes: its writer stops (it commits nothing
    more) and the store is free again at once for the next referee, which finds the actions
    committed before the kill, with no gap."""
    db = tmp_path / "s.db"
    Store(db).close()
    _table(db)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    writer = int(proc.stdout.readline())
    time.sleep(0.3)  # writes under way
    proc.kill()
    proc.wait()
    proc.stdout.close()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{writer}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not Path(f"/proc/{writer}").exists(), "the writer outlived its referee"
    store = Store(db, lock_wait=0)  # free: no referee, no writer holds it
    store.close()
    conn = sqlite3.connect(db)
    kept = [i for (i,) in conn.execute("SELECT idx FROM actions ORDER BY idx")]
    conn.close()
    assert kept and kept == list(range(len(kept)))


def test_a_store_of_a_newer_tapis_or_an_archive_is_refused_untouched(tmp_path: Path) -> None:
    """A store of a newer schema (a column NOT NULL this Tapis does not fill) was served, every
    move then INTERNAL; an archive given as the store had the store's tables added to it."""
    from tapis_cartes.referee.errors import StoreError
    from tapis_cartes.referee.server.store import STORE_VERSION

    store = Store(tmp_path / "s.db")  # a store of this Tapis: its version written
    store.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA user_version").fetchone() == (STORE_VERSION,)
    with conn:
        conn.execute(f"PRAGMA user_version = {STORE_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match=f"store schema version {STORE_VERSION + 1} is newer"):
        Store(tmp_path / "s.db")

    archive = tmp_path / "games.db"
    conn = sqlite3.connect(archive)
    with conn:
        conn.execute("CREATE TABLE records (record_id TEXT PRIMARY KEY)")
    conn.close()
    with pytest.raises(StoreError, match=r"not a Tapis store .*a Tapis archive"):
        Store(archive)
    conn = sqlite3.connect(archive)
    assert [n for (n,) in conn.execute("SELECT name FROM sqlite_master")] == [
        "records",
        "sqlite_autoindex_records_1",
    ]
    conn.close()


def test_a_finished_table_found_broken_when_asked_for_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Its stored actions no longer replay (the file changed): GetTable said so, and the
    log said nothing; asked again and again, it is logged once."""
    import grpc

    from tapis_cartes.v1 import referee_pb2_grpc as rpc

    from .util import referee

    async def play(server: Any, stub: rpc.RefereeServiceStub, channel: Any) -> str:
        table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 1}, 4)
        await play_random(stub, table_id, tokens, random.Random(1))
        return table_id

    table_id = run(play, tmp_path)
    conn = sqlite3.connect(tmp_path / "t.db")
    with conn:  # the first card of the first trick made another, not in the seat's hand
        conn.execute(
            "UPDATE actions SET action = (action + 8) % 416 WHERE table_id = ? AND idx = 12",
            [table_id],
        )
    conn.close()

    async def main() -> None:
        async with (
            referee(tmp_path) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.GetTable(pb.GetTableRequest(table_id=table_id))
                assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "is broken: it cannot be replayed" in (caught.value.details() or "")

    with caplog.at_level("ERROR"):
        asyncio.run(main())
    said = [r for r in caplog.records if r.getMessage() == "table broken"]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_a_signing_key_changed_between_runs_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The key file lost and made anew: the referee served on, signing with the new key, and
    only the key id of its "serving" line told of it."""

    async def play(server: Any, stub: Any, channel: Any) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 1}, 4)
        await play_random(stub, table_id, tokens, random.Random(2))

    async def nothing(server: Any, stub: Any, channel: Any) -> None:
        return None

    run(play, tmp_path)
    with caplog.at_level("WARNING"):
        run(nothing, tmp_path)  # the same key: nothing said
    assert not [r for r in caplog.records if r.getMessage() == "signing key changed"]
    (tmp_path / "k.key").unlink()
    with caplog.at_level("WARNING"):
        run(nothing, tmp_path)
    (said,) = [r for r in caplog.records if r.getMessage() == "signing key changed"]
    assert said.levelname == "WARNING"


def test_a_signing_key_others_may_read_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The key the referee makes is its owner's alone (0600): nothing said; the same file
    made readable by its group or anyone (whoever reads it signs as the referee): said."""

    async def nothing(server: Any, stub: Any, channel: Any) -> None:
        return None

    with caplog.at_level("WARNING"):
        run(nothing, tmp_path)  # the key made
    assert (tmp_path / "k.key").stat().st_mode & 0o777 == 0o600
    assert not [r for r in caplog.records if r.getMessage() == "signing key readable by others"]
    (tmp_path / "k.key").chmod(0o644)
    with caplog.at_level("WARNING"):
        run(nothing, tmp_path)
    (said,) = [r for r in caplog.records if r.getMessage() == "signing key readable by others"]
    assert said.fields["mode"] == "0644"  # type: ignore[attr-defined]


def test_a_store_that_cannot_be_read_is_unavailable_not_internal(tmp_path: Path) -> None:
    """The store's folder removed under a running referee: its reads (a CreateTable's request
    id looked up) failed with INTERNAL, an error logged as a bug."""
    import shutil

    import grpc

    from tapis_cartes.v1 import referee_pb2_grpc as rpc

    from .util import referee

    folder = tmp_path / "store"
    folder.mkdir()
    request = pb.CreateTableRequest(
        game="hearts", seats=[pb.SeatRequest(name=f"P{i}") for i in range(4)], request_id="r1"
    )

    async def main() -> None:
        async with (
            referee(folder) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            shutil.rmtree(folder)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await rpc.RefereeServiceStub(channel).CreateTable(request)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, caught.value.details()

    asyncio.run(main())


def test_no_store_is_made_where_its_write_ahead_log_was_left_alone(tmp_path: Path) -> None:
    """The store's file moved away while its write-ahead log held commits: a store made at
    the path would make SQLite delete that log (acknowledged moves gone for good). Refused,
    naming the log, and nothing is made; with the file put back, the commits are there."""
    db = tmp_path / "s.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()  # in the log only, while the connection stays open (no checkpoint)
    db.rename(tmp_path / "moved.db")
    wal = tmp_path / "s.db-wal"
    assert wal.stat().st_size > 0
    with pytest.raises(StoreError, match=r"there is no store there, but its write-ahead log"):
        Store(db)
    assert not db.exists() and wal.stat().st_size > 0
    done = subprocess.run(
        [sys.executable, "-m", "tapis_cartes.clients.cli", "serve", "--listen", "127.0.0.1:0",
         "--db", str(db), "--key", str(tmp_path / "k.key")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and f"move {wal} away first" in done.stderr, done.stderr
    assert not db.exists() and not (tmp_path / "k.key").exists()
    (tmp_path / "moved.db").rename(db)  # put back beside its log: the commit is read
    conn.close()
    assert sqlite3.connect(db).execute("SELECT x FROM t").fetchall() == [(1,)]


def test_a_writer_that_cannot_start_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(subprocess, "Popen", refused)
    with pytest.raises(StoreError, match=r"cannot start the store's writer: .*Too many open"):
        Store(tmp_path / "s.db")
    monkeypatch.undo()
    Store(tmp_path / "s.db").close()  # its lock was given back


def test_a_full_disk_is_not_called_a_file_that_is_no_store(tmp_path: Path) -> None:
    """A store or an archive that cannot be opened for want of room is said so, not called
    another program's file (an operator told so might remove a good store)."""
    full = "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
    # (no bytecode written by the child: under the bound, Python would leave .pyc files cut)
    quiet = {"PYTHONDONTWRITEBYTECODE": "1"}
    store = tapis("serve", "--listen", "127.0.0.1:0", "--db", tmp_path / "s.db", "--key",
                  tmp_path / "k.key", setup=full, **quiet)  # fmt: skip
    assert store.returncode == 1, store.stderr
    assert "cannot open the store" in store.stderr and "disk" in store.stderr, store.stderr
    assert "not a Tapis store" not in store.stderr
    archive = tapis("archive", "add", tmp_path / "a.db", DATA / "dame-de-pique-dp1.tapis",
                    setup=full, **quiet)  # fmt: skip
    assert archive.returncode == 2, archive.stderr
    assert "the archive cannot be opened" in archive.stderr and "disk" in archive.stderr
    assert "not an archive" not in archive.stderr, archive.stderr


def test_a_key_that_cannot_be_read_makes_no_store(tmp_path: Path) -> None:
    (tmp_path / "bad.key").write_text("not a key\n")
    done = tapis("serve", "--listen", "127.0.0.1:0", "--db", tmp_path / "s.db", "--key",
                 tmp_path / "bad.key")  # fmt: skip
    assert done.returncode == 1 and "bad.key: not a PEM private key" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.key"]


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sqlite_file(path: Path, *sql: str) -> Path:
    conn = sqlite3.connect(path)
    with conn:
        for statement in sql:
            conn.execute(statement)
    conn.close()
    return path


def test_another_programs_file_is_refused_and_left_byte_for_byte(tmp_path: Path) -> None:
    """Another program's SQLite file is refused before anything is written to it: it was
    switched to the store's log (WAL) first; one with a table named as a store's (`tables`)
    got the store's tables and columns added, then its start ended with a traceback. A
    file with triggers (Tapis makes none) or a negative schema version is no store either."""
    store = tmp_path / "store.db"
    Store(store).close()
    cases = [
        (_sqlite_file(tmp_path / "app.db", "CREATE TABLE users (name TEXT)"), "of another program"),
        (
            _sqlite_file(tmp_path / "furniture.db", "CREATE TABLE tables (id INTEGER, legs INT)"),
            "its table 'tables' has no column created, creator, ",
        ),
        (
            _sqlite_file(tmp_path / "log.db", "CREATE TABLE actions (at REAL, what TEXT)"),
            "its table 'actions' has no column action, idx, seat, table_id",
        ),
        (
            _sqlite_file(
                tmp_path / "triggered.db",
                *sqlite3.connect(store).execute("SELECT sql FROM sqlite_master").fetchall()[0],
                "CREATE TRIGGER gone AFTER INSERT ON tables BEGIN DELETE FROM tables; END",
            ),
            "it has triggers, which Tapis never makes: gone",
        ),
        (_sqlite_file(tmp_path / "minus.db", "PRAGMA user_version = -5"), "schema version is -5"),
    ]
    for path, said in cases:
        before = _sha(path)
        with pytest.raises(StoreError, match="not a Tapis store") as exc:
            Store(path)
        assert said in str(exc.value), exc.value
        assert _sha(path) == before, path.name
        assert not Path(f"{path}-wal").exists()
        mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()
        assert mode == ("delete",), path.name


def test_a_damaged_store_is_said_so_at_the_start_without_a_traceback(tmp_path: Path) -> None:
    """A store whose pages are damaged (a disk's fault): the start ended with SQLite's
    traceback (`database disk image is malformed`) from the first read of the tables, or
    said "not a Tapis store"."""
    db = tmp_path / "s.db"
    Store(db).close()
    _table(db)
    conn = sqlite3.connect(db)
    (page,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tables'").fetchone()
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with db.open("r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)
    done = tapis("serve", "--listen", "127.0.0.1:0", "--db", db, "--key", tmp_path / "k.key")
    assert done.returncode == 1, done.stderr
    assert "the store is damaged (database disk image is malformed)" in done.stderr
    assert ".recover" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_stalled_writer_fails_the_store_and_does_not_hold_its_stop(tmp_path: Path) -> None:
    """The writer stopped (as a hung disk stops it): a write waited for ever, and the
    referee's stop too (health said SERVING all along). Now a write waiting longer than the
    bound fails, the store fails (the referee then stops), and a stop kills the writer: the
    store's lock is free again."""
    import os
    import signal

    store = Store(tmp_path / "s.db", stall=1.0)
    failures: list[str] = []
    store.on_failure = failures.append

    async def main() -> BaseException | None:
        _table(tmp_path / "s.db")
        await store.write(_insert("t", 0))
        os.kill(store._writer.pid, signal.SIGSTOP)
        try:
            await asyncio.wait_for(store.write(_insert("t", 1)), 10)
        except sqlite3.OperationalError as exc:
            return exc
        return None

    error = asyncio.run(main())
    assert error is not None and "has not answered for 1 s" in str(error), error
    assert len(failures) == 1
    store.close()  # (kills the stopped writer)
    Store(tmp_path / "s.db", lock_wait=2.0).close()

    # Stopped while the store closes: the stop waits `stall` seconds, then kills it.
    store = Store(tmp_path / "s.db", stall=1.0)
    os.kill(store._writer.pid, signal.SIGSTOP)
    started = time.monotonic()
    store.close()
    assert time.monotonic() - started < 10
    assert store._writer.returncode == -signal.SIGKILL
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("SELECT idx FROM actions").fetchall() == [(0,)]  # acknowledged: kept
    conn.close()
