"""The engine and the records' replay glue run compiled (mypyc, when built) or as pure Python,
and never run compiled code older than their source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tapis_cartes.referee.engine

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import tapis_cartes.referee.engine as e, tapis_cartes.referee.engine.tricks as t,"
    " tapis_cartes.referee.engine.napoleon as n, tapis_cartes.records.replay as r;"
    "print(e.COMPILED, t.__file__.endswith('.py'), n.__file__.endswith('.py'),"
    " r.__file__.endswith('.py'))"
)


def probe(path: Path, **env: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        check=True,
        cwd=path,
        env={"PYTHONPATH": str(path), "PATH": os.environ.get("PATH", "")} | env,
    )
    return result.stdout.strip()


def test_pure_python_on_request() -> None:
    assert probe(ROOT, TAPIS_PURE_PYTHON="1") == "False True True True"


@pytest.mark.parametrize("edited", ["referee/engine/tricks.py", "records/replay.py"])
def test_compiled_only_while_sources_match(tmp_path: Path, edited: str) -> None:
    built = list((ROOT / "referee" / "engine").glob("*.so"))
    if not built or not tapis_cartes.referee.engine.COMPILED:
        pytest.skip("no current compiled build in this checkout (pure Python, or sources edited)")
    # A copy of the namespace as installed (found on PYTHONPATH before the editable install).
    copy = tmp_path / "tapis_cartes"
    shutil.copytree(ROOT / "tapis", copy)
    for folder in ("referee", "records"):
        shutil.copytree(ROOT / folder, copy / folder)
    assert probe(tmp_path) == "True False False False"
    with (copy / edited).open("a") as f:
        f.write("\n# an edit after the build\n")
    # Every compiled module then runs from its source: the engine's and the glue's.
    assert probe(tmp_path) == "False True True True"


def test_this_process_matches_its_flag() -> None:
    import tapis_cartes.records.replay as replay
    import tapis_cartes.referee.engine.cards as cards

    for module in (cards, replay):
        assert (not module.__file__.endswith(".py")) == tapis_cartes.referee.engine.COMPILED
