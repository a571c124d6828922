"""`verify` in depth: signatures and trusted keys, the envelope's one stored form, record
files read as a stream, the JSON results, the documented codes, and a byte-flipping corpus:
no changed byte of a signed record file, and no cut of it, goes unreported."""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapis_cartes.clients.corpus import make_corpus
from tapis_cartes.records.codec import MAGIC, encode_file, envelope
from tapis_cartes.records.signing import (
    KeyFileError,
    TrustedKey,
    key_id,
    load_trusted_keys,
    parse_trusted_keys,
    public_pem,
    sign,
)
from tapis_cartes.records.verify import (
    SIGNATURE_STATES,
    VerifyResult,
    result_json,
    verify_data,
    verify_envelope,
    verify_file,
    verify_frame,
)
from tapis_cartes.v1 import record_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

# Short matches of four games, dealt from a seed (so the deal source is checked too).
CORPUS = (
    ("dame-de-pique", {"end_threshold": 10}, None),
    ("napoleon", {"deals": 1}, None),
    ("triomphe", {"target": 1}, None),
    ("imperiale", {"target_fiches": 1}, 2),
)


@pytest.fixture(scope="module")
def signed_envelopes(signing_key: Ed25519PrivateKey) -> list[pb.RecordEnvelope]:
    out = []
    for game, options, players in CORPUS:
        (env,) = make_corpus(game, 1, seed="depth", kind="random", options=options, players=players)
        out.append(sign(env.record, signing_key))
    return out


@pytest.fixture(scope="module")
def signed_file(signed_envelopes: list[pb.RecordEnvelope]) -> bytes:
    return encode_file(signed_envelopes)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def results(data: bytes, keys: object = ()) -> list[tuple[int | None, VerifyResult]]:
    return list(verify_data(data, "mutant", keys))  # type: ignore[arg-type]


# --- signatures ---------------------------------------------------------------------------


def test_signed_file_verifies_and_names_its_signer(
    signed_file: bytes, signing_key: Ed25519PrivateKey
) -> None:
    pub = signing_key.public_key()
    got = results(signed_file, [TrustedKey.from_key(pub, "club referee")])
    assert [i for i, _ in got] == [1, 2, 3, 4]
    for _, r in got:
        assert r.ok, r.error
        assert (r.signature, r.key_id, r.signer) == ("valid", key_id(pub), "club referee")
        assert r.hands > 0
    # Without keys: valid records whose signature was not checked, naming the key id claimed.
    for _, r in results(signed_file):
        assert r.ok and (r.signature, r.key_id, r.signer) == ("unchecked", key_id(pub), None)


def _code(env: pb.RecordEnvelope, keys: object = ()) -> tuple[str | None, str]:
    r = verify_envelope(env, keys)  # type: ignore[arg-type]
    return (r.error.code if r.error else None), r.signature


def test_signature_codes(
    signed_envelopes: list[pb.RecordEnvelope], signing_key: Ed25519PrivateKey
) -> None:
    pub = signing_key.public_key()
    other = Ed25519PrivateKey.generate()
    env = signed_envelopes[0]
    unsigned = envelope(env.record)
    assert _code(unsigned, [pub]) == ("signature-missing", "none")
    assert _code(unsigned) == (None, "none")
    assert _code(env, [other.public_key()]) == ("signature-unknown-key", "unknown-key")
    assert _code(env, [other.public_key(), pub]) == (None, "valid")
    # A key id changed by one hex digit names no key given, even when the right key is given.
    tampered = pb.RecordEnvelope()
    tampered.CopyFrom(env)
    tampered.key_id = ("1" if env.key_id[0] != "1" else "2") + env.key_id[1:]
    assert _code(tampered, [pub]) == ("signature-unknown-key", "unknown-key")
    # The right key id over another key's signature, and a flipped signature byte.
    forged = envelope(env.record, other.sign(env.record), env.key_id)
    assert _code(forged, [pub]) == ("signature-invalid", "invalid")
    flipped = envelope(env.record, bytes([env.signature[0] ^ 1]) + env.signature[1:], env.key_id)
    assert _code(flipped, [pub]) == ("signature-invalid", "invalid")
    short = envelope(env.record, env.signature[:-1], env.key_id)
    assert _code(short, [pub]) == ("signature-invalid", "invalid")
    # A signed record must still replay: a valid signature over a tampered record.
    rec = pb.GameRecord.FromString(env.record)
    rec.outcome.scores[0].points += 1
    bad = sign(rec.SerializeToString(deterministic=True), signing_key)
    r = verify_envelope(bad, [pub])
    assert r.error is not None and r.error.code == "outcome" and r.signature == "valid"
    # Without keys, only the form of a signature is checked.
    for malformed in (
        envelope(env.record, env.signature, ""),
        envelope(env.record, b"", env.key_id),
        envelope(env.record, env.signature[:-1], env.key_id),
        envelope(env.record, env.signature, env.key_id.upper()),
    ):
        assert _code(malformed) == ("signature-malformed", "malformed")


# --- the envelope's one stored form, files as streams -------------------------------------


def test_envelope_unknown_field_and_noncanonical_form(
    signed_envelopes: list[pb.RecordEnvelope], signing_key: Ed25519PrivateKey
) -> None:
    keys = [signing_key.public_key()]
    frame = signed_envelopes[1].SerializeToString(deterministic=True)
    assert verify_frame(frame, keys).ok
    unknown = frame + b"\x28\x01"  # field 5, varint 1
    r = verify_frame(unknown, keys)
    assert r.error is not None and r.error.code == "envelope-unknown-field"
    # The key id twice: protobuf keeps the last one, Tapis never writes that.
    kid = signed_envelopes[1].key_id.encode()
    repeated = b"\x1a" + _varint(len(kid)) + b"0" * len(kid) + frame
    r = verify_frame(repeated, keys)
    assert r.error is not None and r.error.code == "envelope-noncanonical"
    # The record's length as an over-long varint.
    env = signed_envelopes[1]
    n = len(env.record)
    overlong = (
        b"\x0a" + bytes([(n & 0x7F) | 0x80, 0x80 | (n >> 7), 0]) + frame[1 + len(_varint(n)) :]
    )
    assert len(_varint(n)) == 2
    r = verify_frame(overlong, keys)
    assert r.error is not None and r.error.code == "envelope-noncanonical"


def test_file_problems_are_results_after_the_records_before_them(
    signed_envelopes: list[pb.RecordEnvelope], tmp_path: Path
) -> None:
    data = encode_file(signed_envelopes)
    cut = data[:-10]
    got = results(cut)
    assert [(i, r.ok) for i, r in got] == [(1, True), (2, True), (3, True), (4, False)]
    err = got[-1][1].error
    assert err is not None and err.code == "file:truncated"
    assert result_json("f", *got[-1])["error"]["code"] == "file:truncated"
    # An envelope that does not parse: reported, and the records after it still verified.
    good = [e.SerializeToString(deterministic=True) for e in signed_envelopes[:2]]
    junk = b"\x0b\x0b\x0b"
    blob = MAGIC + b"".join(_varint(len(f)) + f for f in (good[0], junk, good[1]))
    got = results(blob)
    assert [(i, r.error.code if r.error else None) for i, r in got] == [
        (1, None),
        (2, "file:bad-envelope"),
        (3, None),
    ]
    assert results(b"{}")[0][0] is None
    assert results(b"{}")[0][1].error.code == "file:not-a-record-file"  # type: ignore[union-attr]
    ((index, r),) = verify_file(tmp_path / "missing.tapis")
    assert index is None and r.error is not None and r.error.code == "file:unreadable"
    assert "missing.tapis" in r.error.message


def test_result_json_shape(signed_file: bytes, signing_key: Ed25519PrivateKey) -> None:
    keys = [TrustedKey.from_key(signing_key.public_key(), "club")]
    for index, r in results(signed_file[:-3], keys):
        doc = json.loads(json.dumps(result_json("games.tapis", index, r)))
        assert set(doc) == {
            "file", "index", "record_id", "ok", "hands", "signature", "key_id", "signer", "error",
        }  # fmt: skip
        assert doc["file"] == "games.tapis" and doc["index"] == index
        if doc["ok"]:
            assert doc["error"] is None and doc["signer"] == "club" and doc["signature"] == "valid"
            assert re.fullmatch(r"[0-9a-f]{64}", doc["record_id"])
        else:
            assert set(doc["error"]) == {"code", "hand", "action", "message"}
            assert doc["signature"] in (None, *SIGNATURE_STATES)


# --- the byte-flipping corpus -------------------------------------------------------------


def _frame_ends(data: bytes) -> list[int]:
    """The offsets at which the file could end and still be a whole record file."""
    ends = [len(MAGIC)]
    pos = len(MAGIC)
    while pos < len(data):
        size = shift = 0
        while True:
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        pos += size
        ends.append(pos)
    assert ends[-1] == len(data)
    return ends


def _assert_reported(data: bytes, keys: object, what: str) -> list[tuple[int | None, VerifyResult]]:
    got = results(data, keys)
    failures = [r.error for _, r in got if r.error is not None]
    assert failures, f"{what}: every record verified"
    for err in failures:
        assert err.code and err.code != "internal", f"{what}: {err.code}: {err}"
    return got


def test_every_byte_flip_of_a_signed_file_is_reported(
    signed_file: bytes, signing_key: Ed25519PrivateKey
) -> None:
    """Each byte of a signed record file of four games, flipped two ways (XOR 0xFF and 0x01):
    the verifier, given the key, never raises and never reports every record valid."""
    keys = [signing_key.public_key()]
    assert all(r.ok for _, r in results(signed_file, keys))
    codes: set[str] = set()
    for i in range(len(signed_file)):
        for mask in (0xFF, 0x01):
            mutant = bytearray(signed_file)
            mutant[i] ^= mask
            got = _assert_reported(bytes(mutant), keys, f"byte {i} ^ {mask:#04x}")
            codes.update(r.error.code for _, r in got if r.error is not None)
    # The flips land in every layer: the magic, the framing, the envelope, the signature.
    assert {
        "file:not-a-record-file",
        "file:truncated",
        "file:bad-envelope",
        "signature-invalid",
        "signature-unknown-key",
    } <= codes, codes


def test_every_cut_of_a_signed_file_is_reported(
    signed_file: bytes, signing_key: Ed25519PrivateKey
) -> None:
    """Each truncation: the records before the cut are reported valid, and a cut inside a
    record is reported. A cut exactly between two records leaves a whole (shorter) record
    file, which the format cannot tell apart: its records are all valid."""
    keys = [signing_key.public_key()]
    ends = _frame_ends(signed_file)
    for cut in range(len(signed_file)):
        data = signed_file[:cut]
        whole = sum(1 for e in ends[1:] if e <= cut)  # records entirely before the cut
        if cut in ends:
            got = results(data, keys)
            if whole == 0:  # the file header alone: a file of no records, said so
                ((index, result),) = got
                assert index is None and result.error is not None
                assert result.error.code == "file:no-records"
                continue
            assert [(i, r.ok) for i, r in got] == [(i, True) for i in range(1, whole + 1)]
            continue
        got = _assert_reported(data, keys, f"cut at {cut}")
        if cut >= len(MAGIC):
            assert [(i, r.ok) for i, r in got[:whole]] == [(i, True) for i in range(1, whole + 1)]
            (index, last), *rest = got[whole:]
            assert not rest and index == whole + 1
            assert last.error is not None and last.error.code == "file:truncated"


# --- fuzzing the streaming and JSON path ----------------------------------------------------


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data())
def test_mutated_files_stream_well_formed_results(
    signed_file: bytes, signing_key: Ed25519PrivateKey, data: st.DataObject
) -> None:
    blob = bytearray(signed_file)
    for _ in range(data.draw(st.integers(0, 6))):
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        # Splice random bytes somewhere (inserting, not only replacing).
        at = data.draw(st.integers(len(MAGIC), len(blob)))
        blob[at:at] = data.draw(st.binary(max_size=40))
    blob = blob[: data.draw(st.integers(0, len(blob)))]
    keys = data.draw(st.sampled_from([(), (signing_key.public_key(),)]))
    last = 0
    for index, r in verify_data(bytes(blob), "fuzz", keys):
        doc = json.loads(json.dumps(result_json("fuzz", index, r)))
        assert doc["ok"] == (doc["error"] is None)
        if r.error is not None:
            assert r.error.code != "internal", r.error
            assert doc["error"]["code"] == r.error.code
        if index is not None:
            assert index > last
            last = index


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300))
def test_random_files_never_crash(data: bytes) -> None:
    for blob in (data, MAGIC + data):
        for _, r in verify_data(blob):
            assert r.ok or (r.error is not None and r.error.code != "internal")


# --- trusted keys -------------------------------------------------------------------------


def _pem(key: Ed25519PrivateKey) -> str:
    return public_pem(key.public_key())


def _show(key: Ed25519PrivateKey) -> str:
    """What `tapis key show` prints."""
    return _pem(key) + f"key id {key_id(key.public_key())}\n"


def test_trusted_keys_file(tmp_path: Path) -> None:
    a, b, c = (Ed25519PrivateKey.generate() for _ in range(3))
    text = (
        "# Keys of the club: shared, public.\n\n"
        f"# Alice\n{_show(a)}\n"
        f"# an old note\n\n{_pem(b)}"
        f"# Chloé's referee\n{_pem(c)}key id {key_id(c.public_key())}\n"
    )
    path = tmp_path / "trusted.txt"
    path.write_text(text, encoding="utf-8")
    keys = load_trusted_keys(path)
    assert [(k.key_id, k.label) for k in keys] == [
        (key_id(a.public_key()), "Alice"),
        (key_id(b.public_key()), None),
        (key_id(c.public_key()), "Chloé's referee"),
    ]
    crlf = parse_trusted_keys(text.replace("\n", "\r\n"))
    assert [k.key_id for k in crlf] == [k.key_id for k in keys]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("PRIVATE", 3, "private key"),
        ("garbled", 2, "not a valid PEM public key"),
        ("mismatch", 5, "is not the id of the key above it"),
        ("stray", 6, "expected a PEM public key"),
        ("unterminated", 2, "no END line"),
        ("twice", 6, "again"),
        ("orphan id", 1, "no key above it"),
        ("certificate", 1, "expected '-----BEGIN PUBLIC KEY-----'"),
    ],
)
def test_trusted_keys_file_errors_name_the_line(text: str, line: int, words: str) -> None:
    a = Ed25519PrivateKey.generate()
    good = f"# A\n{_show(a)}"
    private = a.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    docs = {
        "PRIVATE": f"# A\n\n{private}",
        "garbled": good.replace("MCowBQYDK2Vw", "MCoxBQYDK2Vw"),
        "mismatch": good.replace("key id ", "key id 0"),
        "stray": good + "hello\n",
        "unterminated": "# A\n" + _pem(a).rsplit("-----END", 1)[0],
        "twice": good + f"{_pem(a)}",
        "orphan id": f"key id {key_id(a.public_key())}\n",
        "certificate": "-----BEGIN CERTIFICATE-----\n",
    }
    with pytest.raises(KeyFileError) as exc:
        parse_trusted_keys(docs[text], "keys.txt")
    assert str(exc.value).startswith(f"keys.txt:{line}: "), str(exc.value)
    assert words in str(exc.value)


def test_trusted_keys_file_without_keys_or_text(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="no public key"):
        parse_trusted_keys("# nothing here\n\n", "keys.txt")
    path = tmp_path / "bin.txt"
    path.write_bytes(b"# ok\n\xff\n")
    with pytest.raises(KeyFileError, match=r"bin\.txt:2: not UTF-8"):
        load_trusted_keys(path)
    with pytest.raises(KeyFileError, match="cannot read"):
        load_trusted_keys(tmp_path / "none.txt")


# --- every code is documented -------------------------------------------------------------


DOC = ROOT / "docs" / "verify.md"


def _literal_codes(path: Path, calls: str) -> Iterator[str]:
    pattern = re.compile(rf"\b(?:{calls})\(\s*\"([^\"]+)\"")
    return (m.group(1) for m in pattern.finditer(path.read_text()))


def _documented() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), re.M))


def test_every_verify_code_is_documented() -> None:
    """Each literal code of records/verify.py, records/strict.py, records/codec.py and the
    hands' checks of referee/engine/wire.py is in docs/verify.md's tables (a file problem as
    `file:<code>`, a `deal:`/`action:` code as its engine code), and the families and the
    codes made elsewhere."""
    documented = _documented()
    codes: set[str] = set()
    for path in (
        "records/verify.py",
        "records/strict.py",
        "records/codec.py",
        "referee/engine/wire.py",
    ):
        codes |= set(_literal_codes(ROOT / path, "RecordError"))
    codes |= {f"file:{c}" for c in _literal_codes(ROOT / "records" / "codec.py", "RecordFileError")}
    # SignatureError(state, code, ...): the code is its second argument.
    codes |= set(re.findall(r'"(signature-[a-z-]+)"', (ROOT / "records" / "verify.py").read_text()))
    codes |= {"deal:<engine code>", "action:<engine code>"}
    assert {"decode", "rules", "file:truncated", "signature-unknown-key"} <= codes  # the scan works
    assert {"record-noncanonical", "record-content", "deal:card-not-in-pack"} <= codes
    engine = {c for c in codes if c.startswith(("deal:", "action:")) and "<" not in c}
    engine.discard("action:invalid")  # the verifier's own, in the table of the record
    assert not {c.split(":", 1)[1] for c in engine} - documented, sorted(engine)
    codes -= engine
    assert not codes - documented, sorted(codes - documented)


# The engine's refusals: the code is each one's first argument.
_REFUSALS = frozenset({"illegal", "IllegalAction", "DealError", "NotYourTurn"})


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _strings(node: ast.expr) -> list[str] | None:
    """The texts an expression can be: a literal, or either side of `a if c else b`; None for
    any other expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _strings(node.body), _strings(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


class _EngineCodes:
    """The codes the engine's refusals can carry, followed through its syntax trees: a
    refusal's code is a literal, or a name of its function; a name holds the literals it is
    assigned (alone or in a tuple: `code, rule = "no-pillage", "TRI.PILLE"`), or what the
    function it is unpacked from returns in its place (`code, why, rule = self._why_not(...)`,
    each game's, each literal or name of its returns followed the same way). A code the walk
    cannot follow is in `unfollowed`, for the test to fail on: no form is missed silently."""

    def __init__(self, trees: list[ast.Module]) -> None:
        self.functions: dict[str, list[ast.FunctionDef]] = defaultdict(list)
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    self.functions[node.name].append(node)
        self.codes: set[str] = set()
        self.unfollowed: list[str] = []
        for name, defs in self.functions.items():
            if name in _REFUSALS:  # `illegal(code, ...)` passes its own parameter on
                continue
            for fn in defs:
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and _callee(node) in _REFUSALS and node.args:
                        found = self._values(fn, node.args[0])
                        if found is None:
                            self.unfollowed.append(f"{name}, line {node.lineno}")
                        else:
                            self.codes.update(found)

    def _values(self, fn: ast.FunctionDef, node: ast.expr) -> list[str] | None:
        if not isinstance(node, ast.Name):
            return _strings(node)
        out: list[str] = []
        assigned = False
        for stmt in ast.walk(fn):
            if not isinstance(stmt, ast.Assign):
                continue
            for target in stmt.targets:
                found: list[str] | None
                if isinstance(target, ast.Name) and target.id == node.id:
                    found = _strings(stmt.value)
                elif isinstance(target, ast.Tuple) and any(
                    isinstance(t, ast.Name) and t.id == node.id for t in target.elts
                ):
                    place = next(
                        i for i, t in enumerate(target.elts) if getattr(t, "id", "") == node.id
                    )
                    if isinstance(stmt.value, ast.Tuple):
                        found = self._values(fn, stmt.value.elts[place])
                    elif isinstance(stmt.value, ast.Call):
                        found = self._returned(_callee(stmt.value), place)
                    else:
                        found = None
                else:
                    continue
                if found is None:
                    return None
                assigned = True
                out += found
        return out if assigned else None

    def _returned(self, name: str, place: int) -> list[str] | None:
        """What the functions called `name` return at `place` of their tuples."""
        out: list[str] = []
        for fn in self.functions.get(name, []):
            for node in ast.walk(fn):
                if isinstance(node, ast.Return) and node.value is not None:
                    if not isinstance(node.value, ast.Tuple):
                        return None
                    found = self._values(fn, node.value.elts[place])
                    if found is None:
                        return None
                    out += found
        return out if name in self.functions else None


def test_every_engine_code_is_documented() -> None:
    """The engine codes that follow `action:` and `deal:`: every code a refusal of
    referee/engine can carry (`_EngineCodes`)."""
    documented = _documented()
    trees = [ast.parse(p.read_text()) for p in sorted((ROOT / "referee" / "engine").glob("*.py"))]
    scan = _EngineCodes(trees)
    assert not scan.unfollowed, scan.unfollowed
    codes = scan.codes
    # The scan works: literal first arguments, assigned names (`code, rule = ...`, one side
    # of `if`/`else`), and codes returned through `_why_not` and `explain`.
    assert {"not-your-turn", "dealer-rotation", "pillage-first", "no-pillage"} <= codes
    assert {"must-overtrump", "must-beat", "lead-two-of-clubs", "first-lead-trump"} <= codes
    assert len(codes) > 40
    assert not codes - documented, sorted(codes - documented)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("note", "nine hearts", "its note is 'nine hearts', the rules give '8 hearts'"),
        ("after_action", 3, "its after_action is 3, the rules give 56"),
    ],
)
def test_a_score_line_that_differs_in_its_note_or_action_says_how(
    field: str, value: object, said: str
) -> None:
    """Its message gave the same four fields twice: "score line 1 is (0, 'penalty', (8,),
    'DP.SCORE'), the rules give (0, 'penalty', (8,), 'DP.SCORE')"."""
    from tapis_cartes.records.codec import decode_record, read_envelopes
    from tapis_cartes.records.verify import verify_record
    from tapis_cartes.referee.engine import RecordError

    (env,) = read_envelopes(DATA / "dame-de-pique-dp1.tapis")
    rec = decode_record(env.record)
    setattr(rec.hands[0].lines[0], field, value)
    with pytest.raises(RecordError) as exc:
        verify_record(rec.SerializeToString(deterministic=True))
    assert exc.value.code == "score-lines"
    assert str(exc.value).endswith(
        "score line 1 is (0, 'penalty', (8,), 'DP.SCORE') as the rules give, but " + said
    ), str(exc.value)


def test_a_deal_that_is_not_its_packs_says_where() -> None:
    """It said "the deal is not what the pack gives", naming no seat and no card."""
    from tapis_cartes.clients import play_match
    from tapis_cartes.records.codec import decode_record
    from tapis_cartes.records.verify import verify_record
    from tapis_cartes.referee.engine import RecordError, mask_str

    played = play_match("hearts", seed="deal", options={"end_threshold": 20})
    rec = decode_record(pb.RecordEnvelope.FromString(played.frame).record)
    hands = rec.hands[0].deal.hands
    one, two = hands[1] & -hands[1], hands[2] & -hands[2]  # each seat's lowest card
    hands[1], hands[2] = hands[1] ^ one | two, hands[2] ^ two | one
    with pytest.raises(RecordError) as exc:
        verify_record(rec.SerializeToString(deterministic=True))
    assert exc.value.code == "deal"
    assert str(exc.value) == (
        f"hand 1: the deal is not what the pack gives: seat 1 holds {mask_str(two)} where the "
        f"pack gives it {mask_str(one)}"
    )
