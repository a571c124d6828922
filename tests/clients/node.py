"""Clients of the tests written in another language from the .proto files alone: Node.js
scripts (grpc-js with proto-loader) run against a real `tapis serve`."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from tests.server.util import ROOT, Server

PACKAGES = ["@grpc/grpc-js@1.14", "@grpc/proto-loader@0.8", "protobufjs@7.5"]


def node_modules() -> Path:
    """The npm packages the Node clients need, installed once next to the venv."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    prefix = Path(sys.prefix) / "node-client"
    marker = prefix / "node_modules" / "@grpc" / "proto-loader"
    if not marker.exists():
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(prefix),
             *PACKAGES],
            check=True,
            capture_output=True,
            timeout=300,
        )  # fmt: skip
    return prefix / "node_modules"


def run_node(
    tmp_path: Path, script: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `script` with the referee's address then `args`, against a `tapis serve` of its
    own (store and key in `tmp_path`; the key stays there for `verify --key`), the .proto
    files in TAPIS_PROTO and `env` added."""
    modules = node_modules()
    server = Server(tmp_path)
    server.start()
    try:

        async def serving() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                await server.serving(channel)

        asyncio.run(serving())
        # ES modules resolve packages from the script's folder: run a copy next to them.
        copy = modules.parent / script.name
        shutil.copy(script, copy)
        return subprocess.run(
            ["node", str(copy), f"127.0.0.1:{server.port}", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TAPIS_PROTO": str(ROOT / "proto"), **(env or {})},
            cwd=tmp_path,
        )
    finally:
        server.terminate()
