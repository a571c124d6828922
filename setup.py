"""How the repository installs: one namespace, and the engine compiled with mypyc when it can.

The repository keeps `referee/`, `records/` and `clients/` at its top; they install as
`tapis_cartes.referee`, `tapis_cartes.records` and `tapis_cartes.clients`, under the package
`tapis_cartes` whose directory is `tapis/` (with the generated `tapis/v1/`, installed as
`tapis_cartes.v1`). Nothing is installed outside that one namespace; the wheel also carries
the `.proto` files (`tapis_cartes/proto/`). Tools that read sources by path (mypy, mypyc) see
the same namespace through `build/ns/tapis_cartes/`, a tree of symbolic links to those
directories that `namespace_tree()` makes (`python setup.py --namespace-tree`: scripts/test
makes it before running mypy over it).

The engine is written once, in Python. When mypyc and a C compiler are at hand, `pip install`
also compiles these modules (`COMPILED`: the engine and the records' replay glue) to C
extensions (2 to 3 times faster replay); otherwise, or with `TAPIS_PURE_PYTHON=1`, the same
modules run as plain Python. A build records the SHA-256 of each compiled source in
`referee/engine/_compiled.json`; `referee/engine/_native.py` has the compiled modules used
only while every source still matches, so an edited module never runs stale compiled code.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
NAMESPACE = "tapis_cartes"
# The namespace's packages and the repository directory each one is.
PACKAGE_DIR = {
    NAMESPACE: "tapis",
    f"{NAMESPACE}.referee": "referee",
    f"{NAMESPACE}.records": "records",
    f"{NAMESPACE}.clients": "clients",
}
# Where mypy and mypyc find the namespace by path (see the docstring).
TREE = ROOT / "build" / "ns"


def _compiled_sources() -> list[str]:
    """The modules compiled (the engine's, then the records' replay glue): the one list,
    `_ENGINE + _GLUE` in referee/engine/_native.py (read here without importing it)."""
    tree = ast.parse((ROOT / "referee" / "engine" / "_native.py").read_text())
    found: dict[str, list[str]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("_ENGINE", "_GLUE"):
            found[target.id] = list(ast.literal_eval(node.value))
    return found["_ENGINE"] + found["_GLUE"]


COMPILED = _compiled_sources()
STAMP = "referee/engine/_compiled.json"


def packages() -> list[str]:
    """Every package of the namespace, by its installed name."""
    found = [NAMESPACE]
    for name, folder in PACKAGE_DIR.items():
        subs = find_packages(where=str(ROOT / folder))
        found += [f"{name}.{sub}" for sub in subs]
        if name != NAMESPACE:
            found.append(name)
    return sorted(found)


def namespace_tree() -> Path:
    """Make `build/ns/tapis_cartes/`: links to the namespace's directories; return its root."""
    top = TREE / NAMESPACE
    shutil.rmtree(top, ignore_errors=True)
    top.mkdir(parents=True)
    for name, folder in PACKAGE_DIR.items():
        if name == NAMESPACE:
            for entry in (ROOT / folder).iterdir():
                if entry.name != "__pycache__":
                    (top / entry.name).symlink_to(entry)
        else:
            (top / name.rpartition(".")[2]).symlink_to(ROOT / folder)
    return TREE


class BuildPy(build_py):
    """Also put the `.proto` files in what is built (a wheel's `tapis_cartes/proto/`)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them in the repository's proto/
        for source in sorted((ROOT / "proto").rglob("*.proto")):
            target = Path(self.build_lib, NAMESPACE, "proto", source.relative_to(ROOT / "proto"))
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def _pure() -> bool:
    return os.environ.get("TAPIS_PURE_PYTHON", "") not in ("", "0")


def _stamp() -> str:
    digests = {p: hashlib.sha256((ROOT / p).read_bytes()).hexdigest() for p in COMPILED}
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
            target = ROOT / STAMP if self.inplace else Path(self.build_lib, NAMESPACE, STAMP)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_stamp())


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
        tree = namespace_tree() / NAMESPACE
        args = ["--ignore-missing-imports", *(str(tree / path) for path in COMPILED)]
        group = f"{NAMESPACE}.referee.engine._compiled"
        return list(mypycify(args, opt_level="3", group_name=group))
    except (Exception, SystemExit) as exc:  # mypy's type check exits on errors
        print(f"WARNING: mypyc failed ({exc}); Tapis runs as pure Python", file=sys.stderr)
        return []


if sys.argv[1:] == ["--namespace-tree"]:  # for mypy: scripts/test
    print(namespace_tree())
else:
    setup(
        packages=packages(),
        package_dir=PACKAGE_DIR,
        ext_modules=ext_modules(),
        cmdclass={"build_ext": OptionalBuildExt, "build_py": BuildPy},
    )
