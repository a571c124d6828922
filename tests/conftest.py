"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@pytest.fixture(scope="session")
def signing_key() -> Ed25519PrivateKey:
    """A referee's signing key, made once for the run."""
    return Ed25519PrivateKey.generate()


@pytest.fixture(scope="session", autouse=True)
def own_data_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This run's own `XDG_DATA_HOME` (where `archive rescore` keeps the key that marks its
    runs, records/archive/provenance.py), inherited by the commands the tests run: a test
    writes nothing in the home folder of whoever runs it."""
    home = tmp_path_factory.mktemp("data-home")
    before = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = before
