"""Whether a re-scoring run of an archive was begun here, by this user: a run's `made_by` is
an HMAC, under a key of the user's kept outside every archive, of what names the run (its id,
options, game and start). `archive rescore` continues an unfinished run only when the mark is
the user's own: an archive from someone else may hold an unfinished run with the very options
the user is about to re-score with, and results made up for it, which the command would have
taken as done and reported as its own (an outside probe did so: 300 forged results, or 5,000
of records the archive does not hold, counted as re-scored). A run begun elsewhere is left as
it is, and a new one begun.

The key is `$XDG_DATA_HOME/tapis/archive-runs.key` (`~/.local/share/tapis/...` without it):
32 random bytes, readable by its owner only, made at the user's first re-scoring. Where none
can be kept (no home folder, a read-only one), no run is continued: each command begins a new
one, as with an archive of someone else's.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from tapis_cartes.referee.errors import ArchiveError

__all__ = ["KEY_BYTES", "is_ours", "key_file", "local_key", "mark"]

KEY_BYTES = 32


def key_file() -> Path | None:
    """Where this user's key is kept; None when there is no home folder to keep it in."""
    base = os.environ.get("XDG_DATA_HOME")
    if not base:
        try:
            base = str(Path.home() / ".local" / "share")
        except RuntimeError:  # no home folder known
            return None
    return Path(base) / "tapis" / "archive-runs.key"


def local_key(make: bool = True) -> bytes | None:
    """This user's key (made now with `make`, when there is none yet); None when it cannot
    be kept. `ArchiveError` for a file there that is no such key."""
    path = key_file()
    if path is None:
        return None
    data: bytes | None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = _made(path) if make else None
    except OSError:
        data = None
    if data is None:
        return None
    if len(data) != KEY_BYTES:
        raise ArchiveError(
            f"{path}: not this user's key of re-scoring runs ({KEY_BYTES} bytes expected, "
            f"{len(data)} found): remove it, and a new one is made (the runs begun under the "
            "old one are then not continued)"
        )
    return data


def _made(path: Path) -> bytes | None:
    """A new key at `path`, or the one another command made there meanwhile: written whole
    to a file of its own, then linked at `path` (a link fails where a file is, never half
    written). None when the folder cannot be written."""
    key = secrets.token_bytes(KEY_BYTES)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            return path.read_bytes()
        return key
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def mark(key: bytes, run_id: int, options: str, game: str, started_at: str) -> str:
    """The mark of a run begun under `key`."""
    text = "\0".join(("tapis-rescore-run/1", str(run_id), options, game, started_at))
    return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def is_ours(
    key: bytes | None, run_id: Any, options: Any, game: Any, started_at: Any, made_by: Any
) -> bool:
    """Whether a run's stored fields bear the mark of `key` (values of any type: the
    archive's, as stored)."""
    if key is None or not isinstance(made_by, str):
        return False
    if not (
        isinstance(run_id, int)
        and isinstance(options, str)
        and isinstance(game, str)
        and isinstance(started_at, str)
    ):
        return False
    return hmac.compare_digest(made_by, mark(key, run_id, options, game, started_at))
