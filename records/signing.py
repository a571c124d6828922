"""Ed25519 keys and record signatures (the `cryptography` package).

A key file is PEM: PKCS#8 for a private key (created with mode 0600), SubjectPublicKeyInfo
for a public key. A signature covers exactly the record bytes of an envelope; the envelope's
`key_id` is the lowercase hex SHA-256 of the raw 32-byte public key.

A trusted-keys file (`load_trusted_keys`) is text to share: PEM public keys, each optionally
labelled by a `# name` line right before its BEGIN line; blank lines and other `#` comments
are allowed, and so are `key id HEX` lines (what `tapis key show` prints after the PEM), each
checked against the key above it. A private key is refused: that file is for sharing.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tapis_cartes.records.codec import read_at_most
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.errors import KeyFileError
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "KeyFileError",
    "TrustedKey",
    "key_id",
    "load_keys",
    "load_or_create_private_key",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "parse_trusted_keys",
    "public_bytes",
    "public_pem",
    "sign",
    "signature_form",
    "signature_holds",
    "signature_ok",
]


# The most a key file holds (a PEM key is about 120 bytes), and a trusted-keys file (a line
# of comment and a key each: a hundred thousand keys): a larger file is not one.
MAX_KEY_FILE = 64 << 10
MAX_TRUSTED_KEYS = 16 << 20


def _read_key_file(p: Path, most: int, what: str) -> bytes:
    """The bytes of a key file; `KeyFileError` when it cannot be read or holds more than
    `most` (read no further)."""
    try:
        data = read_at_most(p, most)
    except OSError as exc:
        raise KeyFileError(f"{p}: cannot read {what}: {exc.strerror or exc}") from None
    if data is None:
        raise KeyFileError(f"{p}: larger than {most:,} bytes: not {what}")
    return data


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    p = Path(path)
    data = _read_key_file(p, MAX_KEY_FILE, "the key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
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
    data = _read_key_file(p, MAX_KEY_FILE, "the key")
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
    """Whether the envelope names `key` and its signature is `key`'s over exactly its record
    bytes."""
    return env.key_id == key_id(key) and signature_holds(env, key)


def signature_holds(env: pb.RecordEnvelope, key: Ed25519PublicKey) -> bool:
    """Whether the envelope's signature is `key`'s over exactly its record bytes (whatever
    key id it names)."""
    try:
        key.verify(env.signature, env.record)
    except InvalidSignature:
        return False
    return True


_KEY_ID = re.compile(r"[0-9a-f]{64}\Z")
_SIGNATURE_SIZE = 64  # an Ed25519 signature


def signature_form(env: pb.RecordEnvelope) -> str | None:
    """What is wrong with the form of an envelope's signature and key id, if anything (None
    when it is unsigned or both have their form; whether the signature holds is
    `signature_holds`'s matter): `verify` without keys, `import-json`."""
    sig, kid = env.signature, env.key_id
    if not sig and not kid:
        return None
    if not sig:
        return "a key id without a signature"
    if not kid:
        return "a signature without a key id"
    if len(sig) != _SIGNATURE_SIZE:
        return f"a signature of {len(sig)} bytes (an Ed25519 signature has {_SIGNATURE_SIZE})"
    if not _KEY_ID.match(kid):
        return f"a key id that is not 64 lowercase hex digits, {kid[:80]!r}"
    return None


# --- trusted keys -------------------------------------------------------------------------


@dataclass(frozen=True)
class TrustedKey:
    """A public key a verifier accepts signatures from, with its id and an optional label."""

    key: Ed25519PublicKey
    key_id: str
    label: str | None = None

    @classmethod
    def from_key(cls, key: Ed25519PublicKey, label: str | None = None) -> TrustedKey:
        return cls(key, key_id(key), label)

    def __reduce__(self) -> tuple[Any, ...]:
        # The key object does not pickle; its raw bytes do (verify's tasks carry the keys to
        # the workers of a process pool).
        return (_trusted_key, (public_bytes(self.key), self.label))


def _trusted_key(raw: bytes, label: str | None) -> TrustedKey:
    return TrustedKey.from_key(Ed25519PublicKey.from_public_bytes(raw), label)


_BEGIN = "-----BEGIN PUBLIC KEY-----"
_END = "-----END PUBLIC KEY-----"
_KEY_ID_LINE = re.compile(r"key id\s+(\S+)\Z")


def parse_trusted_keys(text: str, name: str = "trusted keys") -> list[TrustedKey]:
    """The keys of a trusted-keys file's text (module docstring); `KeyFileError` naming
    `name` and the line at the first problem."""

    def error(line: int, message: str) -> KeyFileError:
        return KeyFileError(f"{name}:{line}: {message}")

    keys: list[TrustedKey] = []
    seen: dict[str, int] = {}  # key id -> line of its BEGIN
    label: str | None = None  # the comment on the line just before, if any
    begun = 0  # the line of the open block's BEGIN, 0 outside a block
    block: list[str] = []
    block_label: str | None = None
    lines = text.splitlines()
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if begun:
            block.append(line)
            if line.startswith("-----END"):
                if line != _END:
                    raise error(
                        n, f"{quoted(line)} does not close the public key begun on line {begun}"
                    )
                key = _block_key(block, error, begun, n)
                kid = key_id(key)
                if kid in seen:
                    raise error(begun, f"the key begun on line {seen[kid]} again (key id {kid})")
                seen[kid] = begun
                keys.append(TrustedKey(key, kid, block_label))
                begun = 0
            elif line.startswith("-----"):
                raise error(n, f"{quoted(line)} inside the public key begun on line {begun}")
            continue
        if line.startswith("-----BEGIN"):
            if "PRIVATE KEY" in line:
                raise error(
                    n,
                    "a private key: a trusted-keys file is for sharing and holds public keys "
                    "only (`tapis key show KEYFILE` prints the public key)",
                )
            if line != _BEGIN:
                raise error(n, f"{quoted(line)}: expected {_BEGIN!r} (an Ed25519 public key)")
            begun, block, block_label = n, [line], label
        elif line.startswith("#"):
            label = line[1:].strip() or None
            continue
        elif line.startswith("key id"):
            m = _KEY_ID_LINE.match(line)
            if m is None:
                raise error(n, f"{quoted(line)}: expected 'key id' and the id")
            if not keys:
                raise error(n, "a key id line with no key above it")
            if m.group(1) != keys[-1].key_id:
                raise error(
                    n,
                    f"key id {m.group(1)} is not the id of the key above it "
                    f"(line {seen[keys[-1].key_id]}), which is {keys[-1].key_id}",
                )
        elif line:
            raise error(
                n,
                f"{quoted(line)}: expected a PEM public key, a '# name' line, a comment, "
                "or a 'key id' line",
            )
        label = None
    if begun:
        raise error(begun, "this public key has no END line")
    if not keys:
        raise KeyFileError(f"{name}: no public key in the file")
    return keys


def _block_key(
    block: list[str], error: Callable[[int, str], KeyFileError], first: int, last: int
) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key("\n".join(block).encode() + b"\n")
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise error(first, f"lines {first}-{last} are not a valid PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise error(first, f"lines {first}-{last}: not an Ed25519 key")
    return key


def load_trusted_keys(path: str | Path) -> list[TrustedKey]:
    """The keys of a trusted-keys file, labelled by their `# name` lines; `KeyFileError`
    naming the file and the line at the first problem."""
    p = Path(path)
    data = _read_key_file(p, MAX_TRUSTED_KEYS, "the trusted keys")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise KeyFileError(f"{p}:{line}: not UTF-8 text") from None
    return parse_trusted_keys(text, str(p))


def load_keys(
    key_paths: Iterable[str | Path] = (), trusted_paths: Iterable[str | Path] = ()
) -> list[TrustedKey]:
    """The keys of `--trusted-keys` files (labelled by their `# name` lines), then those of
    `--key` files (public or private PEM, labelled by their path): the keys `verify` and
    `archive add` take; `KeyFileError` on a bad file."""
    keys: list[TrustedKey] = []
    for path in trusted_paths:
        keys.extend(load_trusted_keys(path))
    for path in key_paths:
        keys.append(TrustedKey.from_key(load_public_key(path), str(path)))
    return keys
