"""The referee's store (referee/server/store.py): writes submitted together share one commit;
one that fails fails alone, and every other is kept."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from referee.server.store import Store, Write


def _insert(table_id: str, idx: int) -> Write:
    def write(conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO actions (table_id, idx, seat, action) VALUES (?, ?, 0, 0)",
            (table_id, idx),
        )

    return write


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
