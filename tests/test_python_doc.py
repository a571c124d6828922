"""docs/python.md and the README's library example run as written: each ```python block in a
child Python of its own, in order, in one folder holding the page's record files (`dp1.tapis`,
made by the commands the page gives), with a real referee for the SDK's example; what each
prints must be the ```output block that follows it on the page."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from tests.commands import ROOT, tapis
from tests.server.util import Server

DOC = ROOT / "docs" / "python.md"
README = ROOT / "README.md"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def examples(text: str) -> list[tuple[str, str]]:
    """(code, output) of each ```python block of `text` and the ```output block after it;
    a python block without its output block is an error of the page."""
    fences = [(m.group(1), m.group(2)) for m in _FENCE.finditer(text)]
    out = []
    for i, (kind, body) in enumerate(fences):
        if kind != "python":
            continue
        following = fences[i + 1] if i + 1 < len(fences) else ("", "")
        assert following[0] == "output", f"python block {len(out) + 1} has no output block"
        out.append((body, following[1]))
    return out


def library_section(text: str) -> str:
    """The README's "## Library" section."""
    start = text.index("\n## Library\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


@dataclass(frozen=True)
class Place:
    folder: Path
    port: int  # the referee's


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Place]:
    """A folder with dp1.tapis, made as the page says, and a referee listening (its address
    in TAPIS_ADDRESS for the SDK's example)."""
    here = tmp_path_factory.mktemp("doc")
    example = tapis("example", "--print")
    assert example.returncode == 0, example.stderr
    (here / "dp1.json").write_text(example.stdout)
    made = tapis("record", "import", "dp1.json", "-o", "dp1.tapis", cwd=here)
    assert made.returncode == 0, made.stderr
    server = Server(here)
    server.start()
    try:
        asyncio.run(_serving(server))
        yield Place(here, server.port)
    finally:
        assert server.terminate() == 0


async def _serving(server: Server) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        await server.serving(channel)


def run(code: str, place: Place) -> str:
    """What `code` prints, run by a child Python in the folder."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=place.folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TAPIS_ADDRESS": f"127.0.0.1:{place.port}"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_doc_examples(place: Place) -> None:
    found = examples(DOC.read_text())
    assert len(found) >= 8  # reading, plays, lines, verify, score, games, play, engine, SDK...
    for n, (code, output) in enumerate(found, 1):
        assert output.strip(), f"example {n} shows no output"
        assert run(code, place) == output, f"docs/python.md example {n}"


def test_readme_library_example(place: Place) -> None:
    found = examples(library_section(README.read_text()))
    assert len(found) == 1
    code, output = found[0]
    assert len(code.strip().splitlines()) <= 6  # the import and five lines
    assert output.strip()
    assert run(code, place) == output
