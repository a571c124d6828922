"""Optional compilation of the engine's hot modules with mypyc.

The engine is written once, in Python. When mypyc and a C compiler are at hand, `pip install`
also compiles these modules to C extensions (2 to 3 times faster replay); otherwise, or with
`TAPIS_PURE_PYTHON=1`, the same modules run as plain Python. A build records the SHA-256 of
each compiled source in `referee/engine/_compiled.json`; `referee/engine/__init__.py` uses
the compiled modules only while every source still matches, so an edited module never runs
stale compiled code.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
COMPILED = [
    "referee/engine/cards.py",
    "referee/engine/shuffle.py",
    "referee/engine/tricks.py",
    "referee/engine/actions.py",
    "referee/engine/base.py",
    "referee/engine/dame_de_pique.py",
    "referee/engine/napoleon.py",
    "referee/engine/triomphe.py",
    "referee/engine/imperiale.py",
]
STAMP = "referee/engine/_compiled.json"


def _pure() -> bool:
    return os.environ.get("TAPIS_PURE_PYTHON", "") not in ("", "0")


def _stamp() -> str:
    digests = {Path(p).stem: hashlib.sha256((ROOT / p).read_bytes()).hexdigest() for p in COMPILED}
    return json.dumps(digests, indent=1, sort_keys=True) + "\n"


class OptionalBuildExt(build_ext):
    """Build the extensions when possible; on any failure leave none behind (pure Python)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers, ...
            for path in self.get_outputs():
                Path(path).unlink(missing_ok=True)
            print(
                f"WARNING: mypyc build failed ({exc}); Tapis runs as pure Python", file=sys.stderr
            )
            return
        if self.extensions:
            target = ROOT if self.inplace else Path(self.build_lib)
            (target / STAMP).parent.mkdir(parents=True, exist_ok=True)
            (target / STAMP).write_text(_stamp())


def ext_modules() -> list[Any]:
    if _pure():
        (ROOT / STAMP).unlink(missing_ok=True)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    try:
        # The build environment has mypy and pydantic only (pyproject.toml): what the engine's
        # imports name for the type checker alone (the SDK's gRPC types in referee/errors.py)
        # is not there, and need not be to compile the engine.
        args = ["--ignore-missing-imports", *COMPILED]
        return list(mypycify(args, opt_level="3", group_name="tapis_engine"))
    except (Exception, SystemExit) as exc:  # mypy's type check exits on errors
        print(f"WARNING: mypyc failed ({exc}); Tapis runs as pure Python", file=sys.stderr)
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
