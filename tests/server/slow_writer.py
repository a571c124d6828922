"""The store's writer (referee/server/writer.py) on a slow disk, for tests: each commit first
waits the seconds written in the file `DB_PATH.commit-delay` (none while it does not exist).
A test starts referees with it by setting `store._WRITER` to this file (`slow_commits`)."""

from __future__ import annotations

import sys
import time
from typing import Any

from tapis_cartes.referee.server import writer

_commit = writer.commit


def _slow(conn: Any, writes: Any) -> Any:
    try:
        with open(f"{sys.argv[1]}.commit-delay") as f:
            time.sleep(float(f.read()))
    except OSError:
        pass
    return _commit(conn, writes)


if __name__ == "__main__":
    writer.commit = _slow
    sys.exit(writer.main(sys.argv[1:]))
