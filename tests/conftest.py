"""Fixtures shared by every test folder."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@pytest.fixture(scope="session")
def signing_key() -> Ed25519PrivateKey:
    """A referee's signing key, made once for the run."""
    return Ed25519PrivateKey.generate()
