"""Ed25519 keys and record signatures (the `cryptography` package).

A key file is PEM: PKCS#8 for a private key (created with mode 0600), SubjectPublicKeyInfo
for a public key. A signature covers exactly the record bytes of an envelope; the envelope's
`key_id` is the lowercase hex SHA-256 of the raw 32-byte public key.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from referee.engine import TapisError
from tapis.v1 import record_pb2 as pb

__all__ = [
    "KeyFileError",
    "key_id",
    "load_or_create_private_key",
    "load_private_key",
    "load_public_key",
    "public_bytes",
    "public_pem",
    "sign",
    "signature_ok",
]


class KeyFileError(TapisError):
    """A key file that cannot be read or created."""


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    p = Path(path)
    try:
        key = serialization.load_pem_private_key(p.read_bytes(), password=None)
    except OSError as exc:
        raise KeyFileError(f"{p}: cannot read the key: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{p}: not a PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{p}: not an Ed25519 key")
    return key


def load_or_create_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The key at `path`; a new one written there (mode 0600) if the file does not exist."""
    p = Path(path)
    if p.exists():
        return load_private_key(p)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise KeyFileError(f"{p}: cannot create the key: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    """A public key from a PEM file holding either the public or the private key."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"{p}: cannot read the key: {exc.strerror}") from None
    if b"PRIVATE KEY" in data:
        return load_private_key(p).public_key()
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise KeyFileError(f"{p}: not a PEM public or private key: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileError(f"{p}: not an Ed25519 key")
    return key


def public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(public_bytes(key)).hexdigest()


def sign(record_bytes: bytes, key: Ed25519PrivateKey) -> pb.RecordEnvelope:
    """An envelope of the record bytes signed with `key`."""
    return pb.RecordEnvelope(
        record=record_bytes,
        signature=key.sign(record_bytes),
        key_id=key_id(key.public_key()),
    )


def signature_ok(env: pb.RecordEnvelope, key: Ed25519PublicKey) -> bool:
    """Whether the envelope's signature is `key`'s over exactly its record bytes."""
    if env.key_id != key_id(key):
        return False
    try:
        key.verify(env.signature, env.record)
    except InvalidSignature:
        return False
    return True
