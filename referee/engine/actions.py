"""Actions as ints: `payload << 3 | kind`.

One int per action keeps a record's action list a packed array and replay free of objects.
A card play is kind 0 with the card id as payload (`card << 3`), so a hand of play is a list
of small ints.

| kind | payload |
|---|---|
| PLAY | card id |
| PASS | the three cards given, lowest id first, 6 bits each (`c1 + c2 * 64 + c3 * 4096`) |
| BID | contract index (Napoléon: 0 pass, 1 two ... 7 blucher) |
| VOLE | 0 stop, 1 continue (Triomphe) |
| ABANDON | 0 offer, 1 accept, 2 refuse (Triomphe) |
| PILLE | card discarded, or `PILLE_STOP` (Triomphe `as-qui-pille`) |
| RESIGN | 0 |
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Final

from mypy_extensions import i64

from tapis_cartes.referee.engine.cards import card_str, iter_cards, mask_of, parse_card
from tapis_cartes.referee.engine.errors import InvalidAction, quoted

__all__ = [
    "ABANDON",
    "ABANDON_WORDS",
    "BID",
    "BID_WORDS",
    "KIND_NAMES",
    "PASS",
    "PILLE",
    "PILLE_HIDDEN",
    "PILLE_STOP",
    "PLAY",
    "RESIGN",
    "VOLE",
    "VOLE_WORDS",
    "action_error",
    "action_str",
    "action_to_json",
    "check_action",
    "encode",
    "first_out_of_range",
    "in_range",
    "kind_of",
    "parse_action",
    "pass_action",
    "pass_cards",
    "pass_choices",
    "payload_of",
]

# Module constants are Final: compiled code reads them as C values, not from the module's dict.
PLAY: Final = 0
PASS: Final = 1
BID: Final = 2
VOLE: Final = 3
ABANDON: Final = 4
PILLE: Final = 5
RESIGN: Final = 6
KIND_NAMES: Final = ("play", "pass", "bid", "vole", "abandon", "pille", "resign")
BID_WORDS: Final = ("pass", "two", "three", "misere", "four", "nap", "wellington", "blucher")
VOLE_WORDS: Final = ("stop", "continue")
ABANDON_WORDS: Final = ("offer", "accept", "refuse")
PILLE_STOP: Final = 63
PILLE_HIDDEN: Final = 62  # a pillage discard as the other seats know it (face down)


def pass_action(mask: int) -> int:
    """The PASS action giving the three cards of `mask` (Dame de Pique). Every action code
    stays below 2**53, so clients in any language hold it exactly."""
    a, b, c = iter_cards(mask)
    return encode(PASS, a | b << 6 | c << 12)


def pass_choices(hand: int) -> list[int]:
    """Every PASS action giving three cards of `hand`, sorted (`pass_action` of each)."""
    cards = iter_cards(hand)  # ascending, so each triple comes as a < b < c
    return sorted(encode(PASS, a | b << 6 | c << 12) for a, b, c in combinations(cards, 3))


def pass_cards(action: int) -> int:
    """The mask of the cards a PASS action gives (0 for a pass whose cards are hidden)."""
    p = action >> 3
    if p == 0:
        return 0
    return 1 << (p & 63) | 1 << (p >> 6 & 63) | 1 << (p >> 12)


def encode(kind: int, payload: int = 0) -> int:
    return payload << 3 | kind


def kind_of(action: int) -> int:
    return action & 7


def payload_of(action: int) -> int:
    return action >> 3


# Not inlined where read (a Final tuple is rebuilt at each use in compiled code): a tuple.
_PAYLOAD_LIMIT: Final[tuple[int, ...]] = (52, 1 << 18, len(BID_WORDS), 2, 3, PILLE_STOP + 1, 1)
_KINDS: Final[int] = len(KIND_NAMES)


def action_error(action: int) -> InvalidAction | None:
    """Why the int `action` is not a well-formed action of any game (an `InvalidAction`), or
    None when it is one. Any int is safe to ask about: nothing is built from its size."""
    if action < 0:
        return InvalidAction(f"{quoted(action)} is not an action")
    kind, payload = action & 7, action >> 3
    if kind >= _KINDS or payload >= _PAYLOAD_LIMIT[kind]:
        return InvalidAction(
            f"{quoted(action)} is not an action (kind {kind}, payload {quoted(payload)})"
        )
    if kind == PILLE and payload != PILLE_STOP and payload >= 52:
        return InvalidAction(f"{action} is not an action (pille of card {payload})")
    if kind == PASS and not (payload & 63) < (payload >> 6 & 63) < (payload >> 12) < 52:
        return InvalidAction(f"{action} is not an action (a pass gives three cards)")
    return None


def in_range(action: int, pack: int) -> bool:
    """Whether the int `action` is in the range of a game played with `pack`: a well-formed
    action (`action_error`) whose cards are all of the pack."""
    if 0 <= action < 416 and not action & 7:
        return pack >> (action >> 3) & 1 != 0  # PLAY: the quick case
    if action_error(action) is not None:
        return False
    kind, payload = action & 7, action >> 3
    if kind == PASS:
        return pass_cards(action) & ~pack == 0
    if kind == PILLE and payload != PILLE_STOP:
        return pack >> payload & 1 != 0
    return True


def first_out_of_range(actions: list[int], pack: int, end: int = -1) -> int:
    """The index of the first of `actions` (of the first `end`, when given) not `in_range`
    of `pack`; -1 when all are."""
    cards: i64 = pack  # a pack: at most 52 bits
    n = len(actions) if end < 0 else min(end, len(actions))
    for i in range(n):
        action = actions[i]
        if 0 <= action < 416 and not action & 7:  # PLAY, `in_range`'s quick case, inline
            c: i64 = action >> 3
            if cards >> c & 1:
                continue
            return i
        if not in_range(action, pack):
            return i
    return -1


def check_action(action: object) -> None:
    """`InvalidAction` unless `action` is a well-formed action int (any game); any value."""
    if isinstance(action, bool) or not isinstance(action, int):
        raise InvalidAction(f"{quoted(action)} is not an action")
    error = action_error(action)
    if error is not None:
        raise error


def _word(words: tuple[str, ...], value: Any, key: str) -> int:
    if isinstance(value, str) and value.lower() in words:
        return words.index(value.lower())
    raise InvalidAction(f"'{key}' must be one of {', '.join(words)}; got {quoted(value)}")


def parse_action(entry: object) -> int:
    """The action of one transcript entry (`{"seat": 0, "play": "QS"}` without its seat).

    Exactly one action key must be present; raises `InvalidAction` naming what is wrong.
    """
    if not isinstance(entry, dict):
        raise InvalidAction(f'an action is an object such as {{"play": "QS"}}, not {quoted(entry)}')
    keys = [k for k in entry if k != "seat"]
    if len(keys) != 1 or keys[0] not in KIND_NAMES:
        unknown = [k for k in keys if k not in KIND_NAMES]
        if unknown:
            raise InvalidAction(
                f"unknown action key {quoted(unknown[0])}; expected one of {', '.join(KIND_NAMES)}"
            )
        shown = sorted(keys) if all(isinstance(k, str) for k in keys) else keys
        raise InvalidAction(
            f"an action needs exactly one of {', '.join(KIND_NAMES)}; got {quoted(shown)}"
        )
    key = keys[0]
    value = entry[key]
    kind = KIND_NAMES.index(key)
    if kind == PLAY:
        return encode(PLAY, parse_card(value))
    if kind == PASS:
        if not isinstance(value, list) or len(value) != 3:
            raise InvalidAction(f"'pass' must be a list of three cards; got {quoted(value)}")
        cards = [parse_card(v) for v in value]
        if len(set(cards)) != 3:
            raise InvalidAction(f"'pass' names the same card twice: {quoted(value)}")
        return pass_action(mask_of(cards))
    if kind == BID:
        return encode(BID, _word(BID_WORDS, value, key))
    if kind == VOLE:
        return encode(VOLE, _word(VOLE_WORDS, value, key))
    if kind == ABANDON:
        return encode(ABANDON, _word(ABANDON_WORDS, value, key))
    if kind == PILLE:
        if isinstance(value, str) and value.lower() == "stop":
            return encode(PILLE, PILLE_STOP)
        return encode(PILLE, parse_card(value))
    if value is not True:
        raise InvalidAction(f"'resign' must be true; got {quoted(value)}")
    return encode(RESIGN)


def action_to_json(action: int) -> dict[str, Any]:
    """The transcript form of an action, without its seat."""
    kind, payload = action & 7, action >> 3
    key = KIND_NAMES[kind]
    if kind == PLAY:
        return {key: card_str(payload)}
    if kind == PASS:
        return {key: [card_str(c) for c in iter_cards(pass_cards(action))]}  # [] when hidden
    if kind == BID:
        return {key: BID_WORDS[payload]}
    if kind == VOLE:
        return {key: VOLE_WORDS[payload]}
    if kind == ABANDON:
        return {key: ABANDON_WORDS[payload]}
    if kind == PILLE:
        if payload == PILLE_HIDDEN:
            return {key: "hidden"}
        return {key: "stop" if payload == PILLE_STOP else card_str(payload)}
    return {key: True}


def action_str(action: int) -> str:
    """`play QS`, `pass 2H 5H AS`, `bid nap`: an action for a person; `InvalidAction` for
    an int of no kind of action, or a payload past its kind's."""
    kind = action & 7
    if action < 0 or kind >= _KINDS or action >> 3 >= _PAYLOAD_LIMIT[kind]:
        raise InvalidAction(f"{quoted(action)} is not an action")
    ((key, value),) = action_to_json(action).items()
    if isinstance(value, list):
        value = " ".join(value) or "three cards"
    elif value is True:
        return key
    return f"{key} {value}"
