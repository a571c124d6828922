"""Helpers of the client tests: a real referee on a free port, in the test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tapis_cartes.clients.sdk import RefereeClient
from tapis_cartes.records.verify import VerifyResult, verify_envelope
from tapis_cartes.referee.server.app import RunningServer
from tapis_cartes.v1 import referee_pb2 as pb
from tests.server.util import referee


@asynccontextmanager
async def referee_and_client(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, RefereeClient]]:
    async with referee(tmp_path) as server, RefereeClient(f"127.0.0.1:{server.port}") as client:
        yield server, client


def verify(record: pb.GetRecordResponse) -> VerifyResult:
    """The record checked by replay, signed by the key the referee gave with it."""
    key = Ed25519PublicKey.from_public_bytes(record.public_key)
    return verify_envelope(record.envelope, [key])
