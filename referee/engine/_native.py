"""Choose between the compiled and the pure-Python engine (see setup.py).

Imported first by `referee/engine/__init__.py`, before any engine module, and by
`records/__init__.py`, before any records module. The compiled extension modules (the
engine's and the records' replay glue, `_COMPILED`) are used only when a build stamp
(`_compiled.json`) lists every one with the SHA-256 of its source as it is now, and
`TAPIS_PURE_PYTHON` is not set; otherwise each of them is loaded from its `.py` file (a
finder put first on `sys.meta_path` gives their sources), so an edited source never runs as
stale compiled code. `COMPILED` says which is running.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED"]

_HERE = Path(__file__).resolve().parent
_TOP = _HERE.parents[1]  # the namespace's root: referee/, records/ ...
_NAMESPACE = "tapis_cartes"
# The modules compiled: the engine's, then the records' replay glue (setup.py reads these two
# lists, scripts/env.sh the paths: a change to one of them reinstalls).
_ENGINE = (
    "referee/engine/cards.py",
    "referee/engine/shuffle.py",
    "referee/engine/actions.py",
    "referee/engine/tricks.py",
    "referee/engine/base.py",
    "referee/engine/dame_de_pique.py",
    "referee/engine/napoleon.py",
    "referee/engine/triomphe.py",
    "referee/engine/imperiale.py",
    "referee/engine/wire.py",
)
_GLUE = (
    "records/strict.py",
    "records/replay.py",
    "records/score.py",
    "records/rescore.py",
)
_COMPILED = _ENGINE + _GLUE


def _module_name(path: str) -> str:
    return f"{_NAMESPACE}.{path.removesuffix('.py').replace('/', '.')}"


def _stamp_matches() -> bool:
    try:
        stamp = json.loads((_HERE / "_compiled.json").read_text())
    except (OSError, ValueError):
        return False
    if set(stamp) != set(_COMPILED):
        return False
    for path in _COMPILED:
        try:
            if hashlib.sha256((_TOP / path).read_bytes()).hexdigest() != stamp[path]:
                return False
        except OSError:
            return False
    return any(
        (_TOP / f"{path.removesuffix('.py')}{suffix}").exists()
        for path in _COMPILED
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


class _Sources:
    """A finder that gives the compiled modules' `.py` sources (not their extensions)."""

    def __init__(self) -> None:
        self.paths = {_module_name(path): _TOP / path for path in _COMPILED}

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.paths.get(name)
        return None if source is None else importlib.util.spec_from_file_location(name, source)


COMPILED = os.environ.get("TAPIS_PURE_PYTHON", "") in ("", "0") and _stamp_matches()
if not COMPILED and not any(isinstance(finder, _Sources) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Sources())
