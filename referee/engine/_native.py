"""Choose between the compiled and the pure-Python engine (see setup.py).

Imported first by `referee/engine/__init__.py`, before any engine module. The compiled
extension modules are used only when a build stamp (`_compiled.json`) lists every compiled
module with the SHA-256 of its source as it is now, and `TAPIS_PURE_PYTHON` is not set;
otherwise each of those modules is loaded from its `.py` file, so an edited source never runs
as stale compiled code. `COMPILED` says which engine is running.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

__all__ = ["COMPILED"]

_HERE = Path(__file__).resolve().parent
# In dependency order: each module's imports are loaded before it.
_MODULES = (
    "cards",
    "shuffle",
    "actions",
    "tricks",
    "base",
    "dame_de_pique",
    "napoleon",
    "triomphe",
    "imperiale",
    "wire",
)


def _stamp_matches() -> bool:
    try:
        stamp = json.loads((_HERE / "_compiled.json").read_text())
    except (OSError, ValueError):
        return False
    if set(stamp) != set(_MODULES):
        return False
    for name in _MODULES:
        source = _HERE / f"{name}.py"
        try:
            if hashlib.sha256(source.read_bytes()).hexdigest() != stamp[name]:
                return False
        except OSError:
            return False
    return any(
        (_HERE / f"{name}{suffix}").exists()
        for name in _MODULES
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _load_sources() -> None:
    """Load every compiled module from its .py source instead of its extension."""
    for name in _MODULES:
        full = f"tapis_cartes.referee.engine.{name}"
        if full in sys.modules:
            continue
        loader = importlib.machinery.SourceFileLoader(full, str(_HERE / f"{name}.py"))
        spec = importlib.util.spec_from_loader(full, loader)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        loader.exec_module(module)


COMPILED = os.environ.get("TAPIS_PURE_PYTHON", "") in ("", "0") and _stamp_matches()
if not COMPILED:
    _load_sources()
