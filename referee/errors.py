"""The one exception tree of Tapis: every exception the project defines, under `TapisError`.

A broken internal invariant is an `assert`, never one of these. Each class carries, as class
attributes, the gRPC status code the referee answers with when a call ends with it
(`grpc_status`, a `google.rpc.Code` name; None when the referee never returns it) and the exit
status of a `tapis` command it ends (`exit_code`; None when no command ends with it).
`referee/server/service.py` and the command line read them; `docs/errors.md` is the table.

The rules (`tapis_cartes.referee.engine` re-exports these, with no I/O and no protobuf):
- `InvalidAction`: the action cannot be parsed or does not exist in this game.
- `IllegalAction`: the action exists but breaks a rule; carries a stable code, the rule id of
  `RULES.md` and the legal set. `NotYourTurn` (a seat acted out of turn) and `DealError` (a
  malformed deal, or a dealer out of rotation) are kinds of it.
- `RulesError`: bad options (unknown key, wrong type, forbidden combination).
- `RecordError`: a bad or tampered record, with the position of the first fault;
  `RecordFileError` (a file that is not a record file) and `SignatureError` are kinds of it.
- `TranscriptError`: a transcript that does not follow `TRANSCRIPT.md`.

The records (`records/`): `NotReplayable`, `CommentError` (`CommentOutOfRange`),
`ExportError`, `KeyFileError`, `ExecutorError`, `ArchiveError`.

The referee (`referee/server/`): `StoreError` (`StoreLocked`), `ListenError`, and
`ServiceError`, the referee's own refusals of a call (not for a rule): `BadRequest`,
`NotFound`, `Unauthenticated`, `PermissionDenied`, `Stale`, `TooMany`, `NotReady`
(`TableClosed`), `OutOfRange`, `Unavailable`.

The client SDK (`clients/sdk.py`): `RefereeError`, a call the referee answered with an error
status, as the client sees it; `ActionRefused` and `StaleAction` are kinds of it.
"""

from __future__ import annotations

import json
import re
import reprlib
import sqlite3
import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the SDK's errors name gRPC and protobuf types; the engine imports neither
    import grpc

    from tapis_cartes.v1 import referee_pb2

__all__ = [
    "QUOTE_LIMIT",
    "ActionRefused",
    "ArchiveError",
    "BadRequest",
    "CommentError",
    "CommentOutOfRange",
    "DealError",
    "ExecutorError",
    "ExportError",
    "IllegalAction",
    "InvalidAction",
    "KeyFileError",
    "ListenError",
    "NotFound",
    "NotReady",
    "NotReplayable",
    "NotYourTurn",
    "OutOfRange",
    "OutputError",
    "PageTooLarge",
    "PermissionDenied",
    "RecordError",
    "RecordFileError",
    "RefereeError",
    "RulesError",
    "ServiceError",
    "SignatureError",
    "Stale",
    "StaleAction",
    "Stopping",
    "StoreError",
    "StoreLocked",
    "TableClosed",
    "TapisError",
    "TooMany",
    "TranscriptError",
    "Unauthenticated",
    "Unavailable",
    "control_character",
    "exit_status",
    "quoted",
    "terminal_lines",
    "terminal_text",
]

QUOTE_LIMIT = 40  # characters of a value from outside that a message quotes


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`repr(value)` for a message, cut to about `limit` characters: an error names what it
    was given without echoing a megabyte of it (`'aaaa…' (100000 characters)`). An int too
    long to show is named by its size (`<an integer of 4000 bits>`): Python refuses to write
    one of more than 4300 digits, and a message must never fail. Never raises."""
    if isinstance(value, str | bytes) and len(value) > limit:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}… ({len(value)} {unit})"
    try:
        text = repr(value) if isinstance(value, str | bytes) else _SHORT.repr(value)
    except Exception:  # a repr that fails: name the type only
        return f"<{type(value).__name__}>"
    if len(text) > limit:
        return f"{text[:limit]}… ({len(text)} characters)"
    return text


# What a terminal would obey rather than show: the C0 and C1 controls and DEL (escape
# sequences, NUL, line breaks), the line and paragraph separators, and the bidirectional
# controls (U+061C, U+200E/F, U+202A-E, U+2066-9), which reorder the text around them.
# JSON escapes the C0 controls in a string, and writes none outside one but the line breaks
# of an indented text: the others it writes as they are (`terminal_json`).
_BEYOND_C0 = r"\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_UNSAFE = re.compile(rf"[\x00-\x1f{_BEYOND_C0}]")
_UNSAFE_IN_JSON = re.compile(rf"[{_BEYOND_C0}]")


def terminal_text(text: str) -> str:
    """`text` to print for a person: each character a terminal would obey rather than show
    written as its escape (`\\u001b`), the others as they are (a backslash too: the text
    stays readable, and escaping twice changes nothing). For every text a record or an
    archive carries as given (names, provenance, comments) that a command prints."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def terminal_lines(text: str) -> str:
    """`text` of several lines for a person: each line through `terminal_text`, the line
    breaks between them kept (a break inside a value given as one line is escaped)."""
    return "\n".join(map(terminal_text, text.split("\n")))


def json_text(value: Any, **dumps: Any) -> str:
    """`value` as JSON to print (`json.dumps` with `dumps`, characters beyond ASCII as they
    are): `terminal_json` of it."""
    return terminal_json(json.dumps(value, ensure_ascii=False, **dumps))


def terminal_json(text: str) -> str:
    """A JSON text to print for a person: each character a terminal would obey written as
    its JSON escape (`\\u202e`): the same value to a JSON reader. (Such a character can
    only be inside a string, where the escape means it.)"""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def control_character(text: str) -> str | None:
    """The first character of `text` that `terminal_text` escapes (a control character: C0,
    C1, DEL, a line or paragraph separator, a bidirectional control), written `U+202E`; None
    when it has none. A name the referee or a transcript gives a record holds none, and
    verify refuses a record whose names hold one (referee.proto, "Bounds"; record.proto;
    docs/transcripts.md); readers print names through `terminal_text` all the same."""
    found = _UNSAFE.search(text)
    return None if found is None else f"U+{ord(found.group()):04X}"


# Characters that show nothing, so that a name holding one could pass for another or for
# none:
# - Unicode's format characters (category Cf: U+200B, U+FEFF, U+00AD, U+2060, the tags
#   U+E0001-7F...), but the joiners U+200C/D between two characters that Persian, the Indic
#   scripts and emoji sequences join (neither ASCII, nor a cased letter, as Latin, Greek and
#   Cyrillic are, whose letters no joiner changes, nor a space or another format character),
#   and the tags of a flag (after U+1F3F4);
# - the variation selectors (U+FE00-FE0F, U+E0100-E01EF), but after a character they give a
#   glyph to (neither ASCII, nor a cased letter, nor a space, a mark or a format character:
#   an emoji, an ideograph), or U+FE0F in a keycap (`1` U+FE0F U+20E3); the Mongolian ones
#   (U+180B-D, U+180F) after a Mongolian letter; the other marks that Unicode makes ignorable
#   (U+034F, U+17B4/5);
# - the noncharacters.
# A name must also show something: not only spaces, marks, joiners and the fillers that
# Unicode gives a letter's category but no ink (U+115F/60, U+3164, U+FFA0, U+2800).
_JOINERS = "\u200c\u200d"
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
_TAG_BASES = frozenset(["\U0001f3f4", *map(chr, range(0xE0020, 0xE0080))])
_IGNORABLE_MARKS = frozenset("\u034f\u17b4\u17b5")
_KEYCAP_BASES = frozenset("0123456789#*")
# The format characters that show (Unicode's prepended concatenation marks: the Arabic number
# signs, the Syriac abbreviation mark, the Kaithi number sign...).
_SHOWN_FORMATS = frozenset(map(chr, (*range(0x600, 0x606), 0x6DD, 0x70F, 0x890, 0x891, 0x8E2,
                                     0x110BD, 0x110CD)))  # fmt: skip


# The most combining marks one character of a name may carry: enough for any script's
# (Vietnamese stacks two, Hebrew with its points and cantillation four); "A" and 63 marks
# drew over the lines above and below it in every page that lists names.
MAX_MARKS = 8


def _noncharacter(code: int) -> bool:
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def _variation_selector(code: int) -> bool:
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF


def _joinable(ch: str) -> bool:
    """Whether a joiner or a variation selector may stand next to `ch` (see above)."""
    if not ch or ch.isascii() or ch.isspace():
        return False
    return unicodedata.category(ch) not in ("Lu", "Ll", "Lt", "Cf")


def _hidden(name: str, i: int) -> bool:
    """Whether `name[i]` shows nothing where it stands (see above)."""
    ch = name[i]
    code = ord(ch)
    before = name[i - 1] if i else ""
    after = name[i + 1] if i + 1 < len(name) else ""
    if ch in _JOINERS:
        return not (_joinable(before) and _joinable(after))
    if 0xE0020 <= code <= 0xE007F:  # an emoji tag sequence: a flag's tags after U+1F3F4
        return before not in _TAG_BASES
    if _variation_selector(code):
        if before in _KEYCAP_BASES:
            return not (code == 0xFE0F and after == "\u20e3")
        return not _joinable(before) or unicodedata.category(before).startswith("M")
    if 0x180B <= code <= 0x180F and code != 0x180E:  # (U+180E: a format character)
        return not 0x1820 <= ord(before or "\0") <= 0x18AF
    if ch in _SHOWN_FORMATS:
        return False
    return ch in _IGNORABLE_MARKS or unicodedata.category(ch) == "Cf"


def name_fault(name: str) -> str | None:
    """Why `name` cannot be a player's name the referee or a transcript gives a seat, said
    after the name (`holds a control character (U+202E)`, `holds a character that shows
    nothing (U+200B)`, `holds a noncharacter (U+FDD0)`, `shows nothing (U+3164)`); None
    when it can. An empty name is left to the caller (the referee names such a seat `seat
    N`). Records already signed are held to `control_character` only (verify, record.proto)."""
    control = control_character(name)
    if control is not None:
        return f"holds a control character ({control})"
    shown = False
    marks = 0  # the marks in a row so far
    for i, ch in enumerate(name):
        code = ord(ch)
        if _noncharacter(code):
            return f"holds a noncharacter (U+{code:04X})"
        category = unicodedata.category(ch)
        marks = marks + 1 if category.startswith("M") else 0
        if marks > MAX_MARKS:
            return f"holds more than {MAX_MARKS} marks on one character (U+{code:04X})"
        if (category in ("Cf", "Mn") or ch in _IGNORABLE_MARKS) and _hidden(name, i):
            return f"holds a character that shows nothing (U+{code:04X})"
        if ch in _SHOWN_FORMATS or not (
            ch.isspace() or ch in _FILLERS or category in ("Cf", "Mn", "Me")
        ):
            shown = True
    if shown or not name:
        return None
    # (Quoted, such a name shows as blank: its characters are named.)
    codes = " ".join(f"U+{ord(ch):04X}" for ch in name[:8])
    return f"shows nothing ({codes}{' …' if len(name) > 8 else ''})"


def _int_text(value: int) -> str:
    # 2**128 has 39 digits: anything longer is shown by its size.
    if value.bit_length() > 128:
        sign = "a negative" if value < 0 else "an"
        return f"<{sign} integer of {value.bit_length()} bits>"
    return repr(value)


class _ShortRepr(reprlib.Repr):
    """`reprlib`'s bounded repr (a few items of a container, a cut string), with ints too
    long to show named by their size."""

    def repr_int(self, x: int, level: int) -> str:
        return _int_text(x)


_SHORT = _ShortRepr()
_SHORT.maxstring = QUOTE_LIMIT
_SHORT.maxother = QUOTE_LIMIT


# --- the root --------------------------------------------------------------------------------


class TapisError(Exception):
    """Root of every error Tapis raises on purpose."""

    # The google.rpc.Code name the referee answers a call with when it ends with this error
    # (None: the referee never returns it), and the exit status of a `tapis` command this
    # error ends (None: no command ends with it). Read by service.py and the command line.
    grpc_status: ClassVar[str | None] = None
    exit_code: ClassVar[int | None] = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled with its fields as they are, not by calling `__init__` again with `args`
        # (most subclasses take other arguments): errors cross process pools.
        return (_unpickle, (type(self), self.args), self.__dict__)


def _unpickle(cls: type[TapisError], args: tuple[Any, ...]) -> TapisError:
    return cls.__new__(cls, *args)


def sqlite_trouble(exc: Exception) -> str | None:
    """What an SQLite error says of the machine rather than of the file, for a person (the
    disk full or failing, a file that cannot be opened); None when it is the file's own
    doing (not a database, damaged): a store or archive then called "not a store" is not."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return _SQLITE_TROUBLE.get(code)


_SQLITE_TROUBLE = {
    sqlite3.SQLITE_FULL: "the disk is full",
    sqlite3.SQLITE_IOERR: "the disk is failing, or full",
    sqlite3.SQLITE_CANTOPEN: "the file cannot be opened: its folder, or too many files open?",
    sqlite3.SQLITE_NOMEM: "out of memory",
    sqlite3.SQLITE_READONLY: "the file or its folder cannot be written",
    sqlite3.SQLITE_PERM: "no permission",
    # (a file another program made a rollback journal's, and holds locked)
    sqlite3.SQLITE_BUSY: "another program is writing it: try again once it is done",
    sqlite3.SQLITE_LOCKED: "another program is writing it: try again once it is done",
}


def exit_status(exc: TapisError) -> int:
    """The status a `tapis` command ends with when `exc` stops it: the `exit_code` of its
    class (1 for an error that no command expects to end with)."""
    return 1 if exc.exit_code is None else exc.exit_code


# --- the rules (referee/engine/) -------------------------------------------------------------


class InvalidAction(TapisError):
    """An action that cannot be parsed, or that has no meaning in this game."""

    grpc_status = "INVALID_ARGUMENT"
    exit_code = 1


class IllegalAction(TapisError):
    """An action that breaks a rule.

    `code` is stable (for programs), `message` is for a person (it names the action, the
    phase and the legal set), `reason` the same without the action (for callers that print
    the action themselves), `rule` the `RULES.md` id, `legal` the legal actions of the seat at
    that moment (empty for deal errors).
    """

    grpc_status = "FAILED_PRECONDITION"
    exit_code = 1

    def __init__(
        self,
        code: str,
        message: str,
        rule: str,
        *,
        seat: int | None = None,
        legal: tuple[int, ...] = (),
        reason: str | None = None,
    ) -> None:
        super().__init__(f"{message} [{rule}]")
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else message
        self.rule = rule
        self.seat = seat
        self.legal = legal


class NotYourTurn(IllegalAction):
    """A seat acted while it was not one of the seats to act."""


class DealError(IllegalAction):
    """A deal that is not a possible deal of this game (or a dealer out of rotation)."""


class RulesError(TapisError):
    """Bad rules: unknown game or ruleset, unknown option key, wrong type, forbidden combination."""

    grpc_status = "INVALID_ARGUMENT"
    exit_code = 1

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class RecordError(TapisError):
    """A record that cannot be decoded, or whose content does not follow from the rules.

    `code` is stable; `hand` and `action` (1-based, None when not applicable) give the
    position of the first fault.
    """

    grpc_status: ClassVar[str | None] = "INVALID_ARGUMENT"  # a request's options, as a record's
    exit_code = 1

    def __init__(
        self,
        code: str,
        message: str,
        *,
        hand: int | None = None,
        action: int | None = None,
    ) -> None:
        where = ""
        if hand is not None:
            where = f"hand {hand}" + (f", action {action}" if action is not None else "") + ": "
        super().__init__(where + message)
        self.code = code
        self.message = message
        self.hand = hand
        self.action = action


class TranscriptError(TapisError):
    """A transcript that does not follow TRANSCRIPT.md; the message names the place."""

    exit_code = 1


# --- the records (records/) ------------------------------------------------------------------


class RecordFileError(RecordError):
    """A file that cannot be read as a record file at all (wrong magic, truncated, ...)."""

    grpc_status = None
    exit_code = 2


class SignatureError(RecordError):
    """A record's signature that does not hold, or that cannot be checked as asked.

    `code` is `signature-...` (docs/verify.md); `state` the signature state a verify result
    reports.
    """

    grpc_status = None

    def __init__(self, state: str, code: str, message: str) -> None:
        super().__init__(code, message)
        self.state = state


class NotReplayable(TapisError):
    """A record whose deals or actions the changed options refuse.

    `rule` is the rule id that refused (or `option:KEY` for an option that does not hold),
    `detail` says where.
    """

    exit_code = 1

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"not replayable [{rule}]: {detail}")
        self.rule = rule
        self.detail = detail


class CommentError(TapisError):
    """A comment that is malformed (`HAND:ACTION:TEXT`)."""

    exit_code = 2


class CommentOutOfRange(CommentError):
    """A comment on a position the record does not have."""

    exit_code = 1


class ExportError(TapisError):
    """A JSON export that cannot be read back, or a record that cannot be exported."""

    exit_code = 1


class PageTooLarge(TapisError):
    """Records with more positions than one replay page holds (records/html.py)."""

    grpc_status = "FAILED_PRECONDITION"
    exit_code = 1


class OutputError(TapisError):
    """A file that cannot be written: its folder missing, a folder in its place, no
    permission, no space left."""

    exit_code = 2


class KeyFileError(TapisError):
    """A key file that cannot be read or created."""

    exit_code = 2


class ExecutorError(TapisError):
    """An engine that cannot run (Dask missing, a scheduler that does not answer)."""

    exit_code = 2


class ArchiveError(TapisError):
    """A request the archive cannot answer (no such archive, unknown or ambiguous id, ...)."""

    exit_code = 2


# --- the referee (referee/server/) -----------------------------------------------------------


class StoreError(TapisError):
    """The store cannot be opened, read or written (the message says why)."""

    grpc_status: ClassVar[str | None] = "UNAVAILABLE"  # written once closed (when stopping)
    exit_code = 1


class StoreLocked(StoreError):
    """Another referee holds the store."""

    grpc_status = None


class ListenError(TapisError, OSError):
    """The referee cannot listen: on the address given, or for want of the files (descriptors)
    its connections need."""

    exit_code = 1


class ServiceError(TapisError):
    """A call the referee refuses or cannot answer now, for a reason of its own (not a rule)."""


class BadRequest(ServiceError):
    """A request field out of its bounds or meaningless; `field_name` names it."""

    grpc_status = "INVALID_ARGUMENT"

    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.field_name = field_name


class NotFound(ServiceError):
    """No table (or game) by the id given."""

    grpc_status = "NOT_FOUND"


class Unauthenticated(ServiceError):
    """A seat call without a well-formed seat token."""

    grpc_status = "UNAUTHENTICATED"


class PermissionDenied(ServiceError):
    """A token that is not the seat's, or a seat that is taken."""

    grpc_status = "PERMISSION_DENIED"


class Stale(ServiceError):
    """A submission at an action index the table is no longer at; `index` is where it is."""

    grpc_status = "ABORTED"

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class TooMany(ServiceError):
    """A client past one of its limits (open tables, open streams)."""

    grpc_status = "RESOURCE_EXHAUSTED"


class NotReady(ServiceError):
    """A request the table's state does not allow yet (a record before the end, ...)."""

    grpc_status = "FAILED_PRECONDITION"


class TableClosed(NotReady):
    """A call on a table closed without a record (expired, or broken)."""


class OutOfRange(ServiceError):
    """An index past what the table has (WatchTable from a future event)."""

    grpc_status = "OUT_OF_RANGE"


class Unavailable(ServiceError):
    """The referee cannot answer now (starting, stopping, its store failing): retry."""

    grpc_status = "UNAVAILABLE"


class Stopping(Unavailable):
    """The end of a stream as the referee stops: `index`, the lowest event index its client
    has not received, is where it resumes (protocol.md section 11)."""

    def __init__(self, index: int) -> None:
        super().__init__(
            f"the referee is stopping: open the stream again from event index {index}, on the "
            "referee that comes back"
        )
        self.index = index


# --- the client SDK (clients/sdk.py) ---------------------------------------------------------


class RefereeError(TapisError):
    """A call the referee failed, as a client sees it; `status` is its gRPC status code."""

    exit_code = 1

    def __init__(self, status: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{status.name}: {message}")
        self.status = status
        self.message = message


class ActionRefused(RefereeError):
    """FAILED_PRECONDITION with an `ActionRefusal`: the rules refuse the action."""

    def __init__(
        self,
        message: str,
        rule: str,
        code: str,
        reason: str,
        legal_actions: Sequence[referee_pb2.ActionChoice],
    ) -> None:
        import grpc  # the SDK's: at hand whenever a call failed

        super().__init__(grpc.StatusCode.FAILED_PRECONDITION, message)
        self.rule = rule  # the RULES.md rule id, e.g. "DP.FOLLOW"
        self.code = code  # stable code, e.g. "must-follow"
        self.reason = reason  # for a person
        self.legal_actions = list(legal_actions)


class StaleAction(RefereeError):
    """ABORTED with a `StaleAction`: the table is not at the expected action index.

    `view` is a fresh view of the seat when the SDK re-read it.
    """

    def __init__(
        self, message: str, action_index: int, view: referee_pb2.SeatView | None = None
    ) -> None:
        import grpc

        super().__init__(grpc.StatusCode.ABORTED, message)
        self.action_index = action_index
        self.view = view
