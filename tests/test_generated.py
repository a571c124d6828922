"""The generated protobuf code in tapis/v1/ is exactly what scripts/gen_proto.py makes from
proto/ today: a stale file fails here."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools is not installed (a dev dependency)")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    made = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    have = {
        p.relative_to(ROOT)
        for p in (ROOT / "tapis" / "v1").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert made == have
    stale = [str(p) for p in sorted(made) if (tmp_path / p).read_bytes() != (ROOT / p).read_bytes()]
    assert not stale, f"stale generated code: {stale}; run python scripts/gen_proto.py"
