"""Exports of record files: protobuf JSON (lossless, both ways) and transcripts.

- `envelopes_to_json(envs)`: the document `{"format": "tapis-records-json/1", "records": [...]}`
  whose records are each the protobuf JSON mapping of a `RecordEnvelope` (proto field names;
  `record` and `signature` base64) plus `decoded`: the record bytes decoded as a `GameRecord`,
  for a person to read. The base64 bytes are the source of truth.
- `envelopes_from_json(text)`: back to envelopes whose serialization is byte for byte the
  original's. The record bytes are never re-serialized; a `decoded` copy that does not match
  them is an error (edit a transcript and import it instead). It reads as strictly as
  `tapis record import` reads a transcript and as the record readers read an envelope: no key
  given twice, no NaN or Infinity, base64 of the standard alphabet only, no unknown key, and
  no envelope a reader would refuse (`file:bad-envelope`); each refusal names its place.
- `record_to_transcript(rec)`: the `tapis-transcript/1` document of a record, which
  `tapis record import` turns back into the same record bytes (given the same file name, which
  the record keeps as its provenance reference).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf import json_format

from tapis_cartes.records.codec import MAX_ENVELOPE, decode_record, options_from_pb, score_from_pb
from tapis_cartes.records.replay import BaseVisitor, replay
from tapis_cartes.records.signing import signature_form
from tapis_cartes.records.transcript import DuplicateKeys, json_object, json_path, walk_json
from tapis_cartes.referee.engine import RecordError, make_rules
from tapis_cartes.referee.engine.actions import action_to_json
from tapis_cartes.referee.engine.cards import card_str, iter_cards
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.engine.wire import check_envelope_size
from tapis_cartes.referee.errors import ExportError, quoted
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "JSON_FORMAT",
    "MAX_EXPORT_JSON",
    "ExportError",
    "envelopes_from_json",
    "envelopes_to_json",
    "json_chunks",
    "record_to_transcript",
    "transcript_text",
]

JSON_FORMAT = "tapis-records-json/1"
# The largest export `import-json` reads (bytes): its JSON is read whole, a few times its
# size in memory. (An export is about a hundred times its records' bytes: export fewer
# records per file.)
MAX_EXPORT_JSON = 256 << 20


# --- protobuf JSON ------------------------------------------------------------------------


def _to_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def envelopes_to_json(envelopes: Iterable[pb.RecordEnvelope]) -> str:
    text = "".join(json_chunks(envelopes))
    return text or json.dumps({"format": JSON_FORMAT, "records": []}, indent=2)


def json_chunks(envelopes: Iterable[pb.RecordEnvelope]) -> Iterator[str]:
    """`envelopes_to_json`'s text in pieces, one record at a time (a file of thousands of
    records, made whole, took 80 times its size in memory); nothing at all for no
    envelope. The same text as `json.dumps` of the whole document (indent 2)."""
    first = True
    for env in envelopes:
        doc = _to_dict(env)
        doc["decoded"] = _to_dict(decode_record(env.record))
        text = json.dumps(doc, indent=2, ensure_ascii=False).replace("\n", "\n    ")
        if first:
            yield f'{{\n  "format": {json.dumps(JSON_FORMAT)},\n  "records": [\n    {text}'
            first = False
        else:
            yield f",\n    {text}"
    if not first:
        yield "\n  ]\n}"


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class _NotANumber(str):
    """What `json.loads` reads for `NaN`, `Infinity` and `-Infinity` (its `parse_constant`):
    no JSON number, which Python would read as a float; `_first_fault` names its place."""


def _first_fault(value: Any, where: str) -> str | None:
    """The first object that gives a key twice (JSON would let the last one win) or the first
    NaN or infinity in `value` (named `where`), as `<place>: <fault>`; None when there is
    none. (Not the transcript's bounds, whose bound on texts would refuse a record's base64.)"""
    for keys, item in walk_json(value, where):
        if isinstance(item, _NotANumber):
            return f"{json_path(keys)}: {item} is not a JSON number"
        if isinstance(item, DuplicateKeys):
            return f"{json_path(keys)}: duplicate key {quoted(item.key)}"
    return None


def _check_base64(raw: dict[str, Any], field: str, where: str) -> None:
    """`ExportError` when the text of a bytes field is not base64 as `envelopes_to_json` writes
    it (protobuf's own reading would skip any character outside the alphabet, and read the
    rest)."""
    value = raw.get(field)
    if isinstance(value, str):  # (protobuf names a value of another type)
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ExportError(f"{where}.{field}: not base64 ({str(exc).lower()})") from None


def envelopes_from_json(text: str) -> list[pb.RecordEnvelope]:
    """The envelopes of a JSON export; `ExportError` naming what is wrong."""
    # A byte order mark, which some editors write first, is no part of the JSON.
    text = text.removeprefix("\ufeff")
    try:
        doc = json.loads(text, object_pairs_hook=json_object, parse_constant=_NotANumber)
    except json.JSONDecodeError as exc:
        raise ExportError(
            f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    except RecursionError:
        raise ExportError("not a record export: JSON nested too deep") from None
    except ValueError:  # Python reads no integer of more than 4300 digits
        raise ExportError("not a record export: a number of more than 4300 digits") from None
    if not isinstance(doc, dict) or doc.get("format") != JSON_FORMAT:
        raise ExportError(f"not a record export: expected an object with format {JSON_FORMAT!r}")
    if isinstance(doc, DuplicateKeys):
        raise ExportError(f"duplicate key {quoted(doc.key)}")
    unknown = sorted(set(doc) - {"format", "records"})
    if unknown:
        raise ExportError(f"unknown key {quoted(unknown[0])}; expected format, records")
    records = doc.get("records")
    if not isinstance(records, list) or not records:
        raise ExportError("'records' must be a non-empty list of envelopes")
    out = []
    for i, raw in enumerate(records, 1):
        where = f"records[{i}]"
        if not isinstance(raw, dict):
            raise ExportError(f"{where}: expected an envelope object")
        fault = _first_fault(raw, where)
        if fault is not None:
            raise ExportError(fault)
        raw = dict(raw)
        decoded = raw.pop("decoded", None)
        if not raw.get("record"):
            raise ExportError(f"{where}.record: missing (the record's bytes, in base64)")
        if not isinstance(raw["record"], str):
            kind = type(raw["record"]).__name__
            raise ExportError(f"{where}.record: expected the record's bytes in base64, not {kind}")
        _check_base64(raw, "record", where)
        _check_base64(raw, "signature", where)
        env = pb.RecordEnvelope()
        try:
            json_format.ParseDict(raw, env)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
            # protobuf's message may hold what it was given: a short prefix of it only
            raise ExportError(f"{where}: {_cut(str(exc))}") from None
        # The envelope as it would be written must be one the readers read: its size
        # (`read_frames`), then its annotations bounded by its record (`parse_envelope`),
        # before its record is decoded.
        frame = env.SerializeToString(deterministic=True)
        if len(frame) > MAX_ENVELOPE:
            raise ExportError(
                f"{where}: an envelope of {len(frame)} bytes, more than a record holds"
                f" ({MAX_ENVELOPE})"
            )
        try:
            check_envelope_size(frame)
        except RecordError as exc:
            raise ExportError(f"{where}: {exc.message}") from None
        try:
            rec = decode_record(env.record)
        except RecordError as exc:
            raise ExportError(f"{where}.record: {exc}") from None
        # The signature travels as exported: a well-formed one is written (whether it holds
        # is `verify`'s matter, with the keys); one that cannot be a signature is refused.
        problem = signature_form(env)
        if problem is not None:
            raise ExportError(f"{where}: the envelope has {problem}")
        if decoded is not None and decoded != _to_dict(rec):
            raise ExportError(
                f"{where}.decoded does not match the record bytes: the decoded copy is for "
                "reading only (export a transcript to edit a record)"
            )
        out.append(env)
    return out


# --- transcripts --------------------------------------------------------------------------


def _cards(data: bytes | list[int]) -> list[str]:
    return [card_str(c) for c in data]


def _option_value(o: pb.Option) -> Option:
    return options_from_pb([o])[o.key]


def record_to_transcript(rec: pb.GameRecord) -> dict[str, Any]:
    """The transcript of a record: rules (options that differ from the defaults), players,
    start, and each hand's dealer, deal (or pack) and actions. `RecordError` when a field of
    the record does not fit its game (it is not replayed); `ExportError` for a match stopped
    in the middle of a hand (by the referee's limits): a transcript holds whole hands
    (TRANSCRIPT.md), and its import would refuse the last one; and for a timed match: a
    transcript holds no clocks, and a loss on time would come back as a resignation, a move
    the referee made on time as the seat's own."""
    if rec.rules.HasField("time_control"):
        raise ExportError(
            "a timed match: a transcript holds no clocks (the time control, each action's time,"
            " the moves and losses on time), so this record has no transcript (--format json"
            " keeps it whole)"
        )
    if rec.hands and not rec.hands[-1].scores_after:
        raise ExportError(
            f"hand {len(rec.hands)} was stopped before its end ({rec.outcome.reason or 'stopped'}):"
            " a transcript holds whole hands, so this record has no transcript (--format json"
            " keeps it whole)"
        )
    return replay(rec, _TranscriptVisitor())


class _TranscriptVisitor(BaseVisitor[dict[str, Any]]):
    """The record's hands and actions written out as a transcript, walked without the engine:
    a record whose actions the rules refuse is exported too (to be edited)."""

    replays = False

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {}
        self.hand: dict[str, Any] = {}

    def begin_record(self) -> None:
        rec = self.rec
        rules = rec.rules
        doc = self.doc
        doc |= {"format": "tapis-transcript/1", "game": rules.game}
        if rules.ruleset != "standard":
            doc["ruleset"] = rules.ruleset
        defaults = make_rules(rules.game, rules.ruleset, {}, rules.players).option_values()
        options = {
            o.key: _option_value(o)
            for o in rules.options
            if o.key != "players" and defaults.get(o.key) != _option_value(o)
        }
        if options:
            doc["options"] = options
        doc["players"] = [s.name for s in rec.seats]
        units = self.units
        scores = [score_from_pb(units, s) for s in rec.start.scores]
        if rec.start.hand_number > 1 or any(any(s) for s in scores):
            start: dict[str, Any] = {"hand_number": rec.start.hand_number or 1}
            if scores:
                start["scores"] = [dict(zip(units, s, strict=True)) for s in scores]
            doc["start"] = start
        doc["hands"] = []

    def begin_hand(self, h: int, hand: pb.HandRecord) -> None:
        out: dict[str, Any] = {"dealer": hand.dealer}
        if hand.deal.deck:
            out["deck"] = _cards(hand.deal.deck)
        else:
            deal: dict[str, Any] = {"hands": [_cards(list(iter_cards(m))) for m in hand.deal.hands]}
            if hand.deal.HasField("retourne"):
                deal["retourne"] = card_str(hand.deal.retourne)
            if hand.deal.talon:
                deal["talon"] = _cards(hand.deal.talon)
            out["deal"] = deal
        out["actions"] = []
        self.hand = out

    def visit_action(self, h: int, a: int, seat: int, action: int) -> None:
        entry = {"seat": seat, **action_to_json(action)}
        if entry.get("pass") == [] or entry.get("pille") == "hidden":
            raise ExportError(f"hand {h}, action {a}: the record hides this action's cards")
        self.hand["actions"].append(entry)

    def end_hand(self, h: int, hand: pb.HandRecord) -> None:
        self.doc["hands"].append(self.hand)

    def result(self) -> dict[str, Any]:
        return self.doc


def _dump(value: Any, indent: int) -> str:
    """JSON with one line per short object or list (a deal's hand, an action)."""
    flat = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(value, dict | list) or len(flat) + indent <= 96:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, list) and not any(isinstance(v, dict | list) for v in value):
        rows: list[str] = []  # a long list of cards: filled, several to a line
        for v in value:
            item = json.dumps(v, ensure_ascii=False)
            if rows and len(rows[-1]) + len(item) + 2 <= 96:
                rows[-1] += ", " + item
            else:
                rows.append(pad + item)
        return "[\n" + ",\n".join(rows) + "\n" + " " * indent + "]"
    if isinstance(value, list):
        items = [pad + _dump(v, indent + 2) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    items = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 2)}" for k, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def transcript_text(rec: pb.GameRecord) -> str:
    return _dump(record_to_transcript(rec), 0) + "\n"
