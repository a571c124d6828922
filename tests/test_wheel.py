"""The package as a user installs it: the wheel built from this repository, installed in a
fresh venv beside the PyPI packages `records` and `clients` (top-level names Tapis once took),
gives a working `tapis` and imports of all three. Nothing of Tapis is installed outside its one
namespace, `tapis_cartes`; the wheel carries the `.proto` files, `py.typed` and, when a C
compiler is at hand, the engine compiled by mypyc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tapis_cartes import __version__

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden" / "dame-de-pique.tapis"
COMPILES = shutil.which("gcc") is not None and not os.environ.get("TAPIS_PURE_PYTHON")
# What the subprocesses see: never this repository on the import path.
ENV = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


def _run(*cmd: str | Path, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    said = f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{said}"
    return done


def _source_copy(target: Path) -> Path:
    """The repository's tracked files (what a fresh clone has), copied to `target`."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("building the wheel needs this repository as a git clone")
    work = tmp_path_factory.mktemp("wheel")
    source = _source_copy(work / "src")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", work / "dist", source, cwd=work)
    (built,) = (work / "dist").glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("venv") / "v"
    _run(sys.executable, "-m", "venv", where, cwd=where.parent)
    _run(where / "bin" / "python", "-m", "pip", "install", "-q", wheel, "records", "clients",
         cwd=where.parent)  # fmt: skip
    return where


def test_the_wheel_holds_one_namespace_with_protos_types_and_engine(wheel: Path) -> None:
    assert wheel.name.startswith(f"tapis_cartes-{__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"tapis_cartes", f"tapis_cartes-{__version__}.dist-info"}, tops
    for needed in (
        "tapis_cartes/py.typed",
        "tapis_cartes/proto/tapis/v1/referee.proto",
        "tapis_cartes/proto/tapis/v1/record.proto",
        "tapis_cartes/v1/referee_pb2.py",
        "tapis_cartes/v1/referee_pb2.pyi",
        "tapis_cartes/records/examples/dame-de-pique.json",
        "tapis_cartes/referee/server/page/live.html",
    ):
        assert needed in names, needed
    compiled = [n for n in names if n.startswith("tapis_cartes/referee/engine/") and ".so" in n]
    assert bool(compiled) == COMPILES, compiled
    glue = [n for n in names if n.startswith("tapis_cartes/records/replay.") and ".so" in n]
    assert bool(glue) == COMPILES, glue
    assert ("tapis_cartes/referee/engine/_compiled.json" in names) == COMPILES
    # The runtime dependencies are what serving needs: no development tool among them.
    metadata = zipfile.ZipFile(wheel).read(f"tapis_cartes-{__version__}.dist-info/METADATA")
    required = [
        line.split(":", 1)[1].strip()
        for line in metadata.decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert required and not [r for r in required if r.split(">")[0].split("=")[0] in {
        "pytest", "hypothesis", "open-spiel", "mypy", "ruff", "grpcio-tools", "playwright",
        "dask[distributed]", "pyarrow"}], required  # fmt: skip


def test_installed_beside_records_and_clients_it_runs_and_imports(venv: Path) -> None:
    tapis, python, here = venv / "bin" / "tapis", venv / "bin" / "python", venv.parent
    assert _run(tapis, "--version", cwd=here).stdout.strip() == f"tapis {__version__}"
    games = json.loads(_run(tapis, "games", "--json", cwd=here).stdout)
    assert {g["name"] for g in games["games"]} == {
        "dame-de-pique",
        "imperiale",
        "triomphe",
        "napoleon",
    }
    verified = _run(tapis, "record", "verify", GOLDEN, cwd=here)
    assert "1 valid" in verified.stdout, verified.stdout
    probe = (
        "import json, records, clients, tapis_cartes\n"
        "from importlib import metadata, resources\n"
        "from tapis_cartes.referee import engine\n"
        "from tapis_cartes.records import codec\n"
        "from tapis_cartes.clients import sdk\n"
        "proto = resources.files('tapis_cartes') / 'proto/tapis/v1/referee.proto'\n"
        "print(json.dumps({'records': records.__file__, 'clients': clients.__file__,\n"
        "  'ours': tapis_cartes.__file__, 'Database': hasattr(records, 'Database'),\n"
        "  'compiled': engine.COMPILED, 'proto': 'service RefereeService' in proto.read_text(),\n"
        "  'version': metadata.version('tapis-cartes'), 'sdk': hasattr(sdk, 'RefereeClient'),\n"
        "  'codec': hasattr(codec, 'decode_record')}))\n"
    )
    seen = json.loads(_run(python, "-c", probe, cwd=here).stdout)
    site = str(venv)
    assert all(seen[k].startswith(site) for k in ("records", "clients", "ours")), seen
    assert seen["records"].endswith("site-packages/records.py")  # PyPI's records, intact
    assert seen["clients"].endswith("site-packages/clients/__init__.py")
    assert seen["Database"] and seen["proto"] and seen["sdk"] and seen["codec"]
    assert seen["version"] == __version__ and seen["compiled"] == COMPILES
