"""Typed, validated options: one pydantic model per game and ruleset, all in this module.

The one form of a game's options. Each model is frozen, forbids unknown keys and is strict
about types; every int option has a range (`int_range`), every closed list of words is an
enum (`OneOf` names the members a ruleset allows, in order: `choices`). A failure becomes a
`RulesError` that names the key and the allowed values (a closed list, or the range).

The options are validated once, where they come in (`make_rules`: a table created, a record
or a transcript read, a command line's `--option`, whose `KEY=VALUE` text `parse_option`
reads); the game modules then read the model as it is (`Rules.options`), and a change makes
new rules (`Rules.with_changes`), validated the same way. `Option` is an option's value as
text, JSON and records carry it.

No score can overflow
---------------------
A record keeps every score in a signed 64-bit field and numbers hands with an unsigned
32-bit one, and the referee must be able to write the record of any match it accepted. So:

- a match starts (`base.Start`) at a hand number from 1 to `START_HAND_MAX`, from scores of
  at most `START_SCORE_MAX` either way (a transcript or a record continuing a match);
- no hand is numbered above `HAND_NUMBER_MAX` (`Match.start_hand` refuses it), so a match
  has fewer than 2**32 hands however long it goes on (a Dame de Pique match under
  `subtract_self`, or a Triomphe match with a heavy `vole_fail_penalty`, need not end);
- with the ranges below no seat's score moves by more than `HAND_DELTA_MAX` in one hand:
  Dame de Pique 26; Napoléon 20 × 9 = 180 (Blücher, stakes, 10 players); La Triomphe 100
  (its largest vole value or penalty); L'Impériale under 40 impériales or jetons (what
  twelve cards announce, a capot of at most 10, the jetons of twelve tricks).

So every score stays within `SCORE_MAX` = 10**6 + (2**32 − 1) × 1000 < 4.3 × 10**12, six
orders of magnitude below 2**63 ≈ 9.2 × 10**18. The ranges themselves follow the games: every
default and every value RULES.md or the seeds name, with a wide margin (targets up to 100
points or impériales, a Dame de Pique threshold up to 1000, up to 1000 Napoléon deals), and
a minimum that still makes a game (a target of at least 1, a vole worth at least 1).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable
from enum import Enum, StrEnum
from typing import Annotated, Any, ClassVar, TypeVar

from annotated_types import Ge, Le
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import core_schema

from tapis_cartes.referee.engine.errors import QUOTE_LIMIT, RulesError, quoted
from tapis_cartes.referee.engine.tricks import Regime

__all__ = [
    "HAND_DELTA_MAX",
    "HAND_NUMBER_MAX",
    "SCORE_MAX",
    "START_HAND_MAX",
    "START_SCORE_MAX",
    "CardsScoring",
    "DamePiqueOptions",
    "DealerRotation",
    "GameOptions",
    "HeartsBrokenBy",
    "HonourTiming",
    "ImperialeAcademieOptions",
    "ImperialeModerneOptions",
    "MisereTrump",
    "MoonMode",
    "NapoleonOptions",
    "NapoleonScoring",
    "OneOf",
    "Option",
    "PointRule",
    "RankOrderName",
    "TombeeMode",
    "TourneeHolder",
    "TriompheAsQuiPilleOptions",
    "TriompheEquipeOptions",
    "TriompheIndividuelleOptions",
    "TriompheOptions",
    "choices",
    "int_range",
    "parse_option",
    "validate_options",
]

Option = bool | int | str  # an option's value as text, JSON and records carry it

START_HAND_MAX = 10**6  # the first hand number of a match: 1 to this
START_SCORE_MAX = 10**6  # a start score (each unit): at most this either way
HAND_NUMBER_MAX = 2**32 - 1  # the record's uint32: no hand is numbered above it
HAND_DELTA_MAX = 1000  # no seat's score moves by more than this in one hand (see above)
SCORE_MAX = START_SCORE_MAX + HAND_NUMBER_MAX * HAND_DELTA_MAX  # |any score| at most this
assert SCORE_MAX < 2**63


def parse_option(text: str) -> tuple[str, Option]:
    """`KEY=VALUE` (a command line's `--option`/`--set`) with VALUE a bool (true/false), an
    int, or text; `ValueError` without `=` or a key. The value is checked against the game's
    options where the rules are made (`make_rules`, `Rules.with_changes`)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"option {text!r}: expected KEY=VALUE")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    # An int is written in ASCII digits, as JSON writes one: `int` also reads `1_0`, ` 50` and
    # other scripts' digits (`٥٠`), which are left text (and refused where an int is due).
    if _INT_TEXT.fullmatch(value):
        return key, int(value)
    return key, value


_INT_TEXT = re.compile(r"[+-]?[0-9]+")


# --- the words an option may take --------------------------------------------------------
# Each enum option's members are its words (a `StrEnum` member equals its word, so text and
# JSON compare and print as before); the engine compares members with `is`. Triomphe's
# `regime` takes the trick module's own `Regime`.


class MoonMode(StrEnum):
    ADD_TO_OTHERS = "add_to_others"
    SUBTRACT_SELF = "subtract_self"


class HeartsBrokenBy(StrEnum):
    PLAYED = "played"
    DISCARDED = "discarded"


class DealerRotation(StrEnum):
    CLOCKWISE = "clockwise"
    COUNTERCLOCKWISE = "counterclockwise"


class MisereTrump(StrEnum):
    NONE = "none"
    FIRST_CARD = "first_card"


class NapoleonScoring(StrEnum):
    SEED_POINTS = "seed_points"
    STAKES = "stakes"


class RankOrderName(StrEnum):
    """The name of a rank order (cards.py `R1`, `R2`)."""

    R1 = "R1"
    R2 = "R2"


class PointRule(StrEnum):
    COUNT_THEN_PIPS = "count_then_pips"
    PIPS = "pips"


class TourneeHolder(StrEnum):
    ANY = "any"
    DEALER = "dealer"


class TombeeMode(StrEnum):
    PER_TRICK = "per_trick"
    END_OF_COUP = "end_of_coup"
    OFF = "off"


class CardsScoring(StrEnum):
    FLAT_FIRST_TO_SIX = "flat_first_to_six"
    PER_TRICK = "per_trick"


class HonourTiming(StrEnum):
    PER_TRICK = "per_trick"
    END_OF_COUP = "end_of_coup"


class OneOf:
    """The members an enum option may take, in the order a refusal and `ListGames` list
    them: `Annotated[Kind, OneOf(Kind.A, Kind.B)]`. A member or its value (the word of
    text, JSON and records) is taken; the value dumped to JSON is the word."""

    def __init__(self, *members: Enum) -> None:
        self.members = members
        self._by_value = {m.value: m for m in members}

    def _member(self, value: object) -> Enum:
        if type(value) is str and value in self._by_value:
            return self._by_value[value]
        for m in self.members:
            if value is m:
                return m
        raise ValueError("not one of the allowed words")

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: Callable[[Any], core_schema.CoreSchema]
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            self._member,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda m: m.value, when_used="json"
            ),
        )


def choices(model: type[GameOptions], key: str) -> list[str]:
    """The words the enum option `key` of `model` may take, in order; [] for any other key."""
    field = model.model_fields.get(key)
    if field is None:
        return []
    return [str(m.value) for o in field.metadata if isinstance(o, OneOf) for m in o.members]


class GameOptions(BaseModel):
    """Base of every option model."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    label: ClassVar[str] = ""  # the game (and ruleset) as a refusal names it

    def check(self, players: int) -> None:
        """Combination rules (override); raise `RulesError` naming the key (`_refuse`)."""

    def _refuse(self, key: str, value: object, why: str) -> RulesError:
        return RulesError(
            f"option {key!r} of {self.label}: {quoted(value)} is not allowed; {why}", key=key
        )


OptionsT = TypeVar("OptionsT", bound=GameOptions)


def int_range(model: type[GameOptions], key: str) -> tuple[int, int] | None:
    """The least and the greatest value of the int option `key` of `model`; None when `key`
    is not an int option (a bool, a closed list of words, or no option at all)."""
    field = model.model_fields.get(key)
    if field is None:
        return None
    ann = field.annotation
    if ann is bool or not (ann is int or int in typing.get_args(ann)):
        return None
    low = next(m.ge for m in field.metadata if isinstance(m, Ge))
    high = next(m.le for m in field.metadata if isinstance(m, Le))
    assert isinstance(low, int) and isinstance(high, int)
    return low, high


def _range_text(low: int, high: int) -> str:
    if high - low <= 1:
        return ", ".join(str(v) for v in range(low, high + 1))
    return f"{low} to {high}"


def _allowed(model: type[GameOptions], key: str, error: str) -> str:
    field = model.model_fields.get(key)
    if field is None:
        return ""
    bounds = int_range(model, key)
    if bounds is not None:
        if error == "int_type":
            return f"; expected an integer from {_range_text(*bounds)}"
        return f"; allowed: {_range_text(*bounds)}"
    words = choices(model, key)
    if words:
        return "; allowed: " + ", ".join(words)
    if field.annotation is bool:
        return "; allowed: true, false"
    return ""


def _key_name(key: object) -> str:
    # The key as `RulesError.key` carries it: itself, unless it is long or not a string.
    return key if isinstance(key, str) and len(key) <= QUOTE_LIMIT else quoted(key)


def validate_options(model: type[OptionsT], options: dict[str, Any], where: str) -> OptionsT:
    """Build `model` from `options`; raise `RulesError` naming the first bad key."""
    if not isinstance(options, dict):
        raise RulesError(f"options for {where} must be an object of key: value")
    unknown = [k for k in options if not isinstance(k, str) or k not in model.model_fields]
    if unknown:
        first = min(unknown) if all(isinstance(k, str) for k in unknown) else unknown[0]
        known = ", ".join(sorted(model.model_fields))
        raise RulesError(
            f"unknown option {quoted(first)} for {where}; known options: {known}",
            key=_key_name(first),
        )
    try:
        return model(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        value = options.get(key)
        allowed = _allowed(model, key, err["type"])
        raise RulesError(
            f"option {key!r} of {where}: {quoted(value)} is not allowed{allowed}", key=key
        ) from None


# --- the games' options (RULES.md section 6) ---------------------------------------------


class DamePiqueOptions(GameOptions):
    label: ClassVar[str] = "dame-de-pique"

    end_threshold: int = Field(
        100,
        ge=1,
        le=1000,
        description=(
            "the match ends after the manche in which a total reaches this (inclusive) (RULES.md "
            "DP.END 4.1: a total >= this ends the match)"
        ),
    )
    qs_breaks_hearts: bool = Field(
        False, description="the queen of spades, once played, opens hearts (RULES.md 4.2.2)"
    )
    qs_counts_as_heart_for_lead: bool = Field(
        False,
        description=(
            "the queen of spades counts as a heart for leading while hearts are unbroken "
            "(RULES.md 4.2.4)"
        ),
    )
    moon_mode: Annotated[MoonMode, OneOf(MoonMode.ADD_TO_OTHERS, MoonMode.SUBTRACT_SELF)] = Field(
        MoonMode.ADD_TO_OTHERS,
        description=(
            "a seat taking all 26 points: the others score 26 (add_to_others) or it scores -26 "
            "(subtract_self) (RULES.md 4.2.6)"
        ),
    )
    hearts_broken_by: Annotated[
        HeartsBrokenBy, OneOf(HeartsBrokenBy.PLAYED, HeartsBrokenBy.DISCARDED)
    ] = Field(
        HeartsBrokenBy.PLAYED,
        description=(
            "what opens hearts: any heart played on an earlier trick (played), or only a heart "
            "discarded on another suit (discarded) (RULES.md 4.2.2, 7)"
        ),
    )
    dealer_rotation: Annotated[
        DealerRotation, OneOf(DealerRotation.CLOCKWISE, DealerRotation.COUNTERCLOCKWISE)
    ] = Field(
        DealerRotation.CLOCKWISE,
        description=(
            "the next dealer: the seat after (clockwise) or before (counterclockwise) (RULES.md "
            "4.2.8)"
        ),
    )


class NapoleonOptions(GameOptions):
    label: ClassVar[str] = "napoleon"

    players: int = Field(
        4, ge=3, le=10, description="number of players (RULES.md 5.1, 5.2.8: 3 to 10)"
    )
    short_deck: bool = Field(
        False,
        description=(
            "play with the top players + 3 ranks of each suit, 4 x (players + 3) cards (RULES.md "
            "5.1, 5.2.10: 4 × (players + 3) cards)"
        ),
    )
    misere_trump: Annotated[MisereTrump, OneOf(MisereTrump.NONE, MisereTrump.FIRST_CARD)] = Field(
        MisereTrump.NONE,
        description=(
            "Misère is played without trump (none) or with the suit of the first card "
            "(first_card) (RULES.md 5.2.1)"
        ),
    )
    allpass_redeal_same_dealer: bool = Field(
        False,
        description=(
            "after a deal thrown in (all passed) the same dealer deals again (RULES.md 5.2.3, 7)"
        ),
    )
    scoring: Annotated[
        NapoleonScoring, OneOf(NapoleonScoring.SEED_POINTS, NapoleonScoring.STAKES)
    ] = Field(
        NapoleonScoring.SEED_POINTS,
        description=(
            "the seed's points (seed_points) or zero-sum stakes (stakes) (RULES.md 5.2.4, 7)"
        ),
    )
    deals: int | None = Field(
        None,
        ge=1,
        le=1000,
        description=(
            "number of deals in the match (default 2 x players) (RULES.md 5.1, 5.2.6: None means "
            "2 × players (filled in on validation))"
        ),
    )
    stop_when_decided: bool = Field(
        False, description="stop the play once the contract is made or beaten (RULES.md 5.2.11)"
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_deals(cls, data: Any) -> Any:
        # The effective number of deals is stored, so that option_values() and the rules
        # digest show it (2 × players by default).
        if isinstance(data, dict) and data.get("deals") is None:
            players = data.get("players", cls.model_fields["players"].default)
            if type(players) is int:
                data = {**data, "deals": 2 * players}
        return data

    @property
    def effective_deals(self) -> int:
        """The number of deals in the match (`deals`, else 2 × players)."""
        return self.deals if self.deals is not None else 2 * self.players


class TriompheOptions(GameOptions):
    """The keys every ruleset of La Triomphe has (RULES.md 3, 6); the three rulesets below
    subclass it with their own defaults and keys. Not a ruleset itself."""

    ruleset_name: ClassVar[str] = "individuelle"
    label: ClassVar[str] = "triomphe (individuelle)"

    players: int = Field(
        2,
        ge=2,
        le=6,
        description=(
            "number of players (RULES.md 3.4: 2 to 6 (equipe: 4 or 6; as-qui-pille: 3 to 6))"
        ),
    )
    regime: Annotated[Regime, OneOf(Regime.FORCEE, Regime.FORCAT, Regime.PLAISANT)] = Field(
        Regime.FORCEE,
        description="the trump regime: forcée, forçat or plaisant (RULES.md 3.2, 3.6.1)",
    )
    rank_order: Annotated[RankOrderName, OneOf(RankOrderName.R1, RankOrderName.R2)] = Field(
        RankOrderName.R1,
        description=(
            "rank order: R1 (ace between ten and jack) or R2 (ace high) (RULES.md 3.1, 0.3)"
        ),
    )
    hand_size: int = Field(
        5,
        ge=1,
        le=15,
        description="cards dealt to each seat (RULES.md 3.1, 3.6.14; at most 15 with 2 players)",
    )
    target: int = Field(
        5, ge=1, le=100, description="points that win the match (RULES.md TRI.END 3.1)"
    )
    vole_value: int = Field(
        2,
        ge=1,
        le=100,
        description="points for a vole engaged and made (RULES.md TRI.VOLE 3.1, 3.6.9)",
    )
    vole_fail_penalty: int = Field(
        -2,
        ge=-100,
        le=0,
        description=(
            "points for a vole engaged and failed (negative) (RULES.md TRI.VOLE 3.1, 3.6.7 (also "
            "a refused abandon's failed vole))"
        ),
    )
    abandon_allowed: bool = Field(
        True,
        description=(
            "a side may offer to concede the point (two sides only) (RULES.md TRI.ABANDON 3.1: "
            "only where exactly two sides exist)"
        ),
    )
    refused_abandon_vole_value: int = Field(
        2,
        ge=1,
        le=100,
        description=(
            "points for the vole made after refusing an abandon (RULES.md TRI.ABANDON 3.6.6)"
        ),
    )

    def check(self, players: int) -> None:
        # The ranges hold `players` and `hand_size` each on its own; these are the rules
        # between keys.
        if self.ruleset_name == "equipe" and players % 2:
            raise self._refuse("players", players, "the team game is played 2 v 2 or 3 v 3")
        if self.regime is Regime.PLAISANT:
            if self.ruleset_name == "equipe":
                raise self._refuse(
                    "regime", "plaisant", "plaisant is only for the individual game (3.2)"
                )
            if players < 3:
                raise self._refuse(
                    "regime", "plaisant", "plaisant needs three or more players (3.2)"
                )
        if players * self.hand_size + 1 > 32:
            most = 31 // players
            raise self._refuse(
                "hand_size",
                self.hand_size,
                f"{players} hands and the retourne must come from 32 cards (1 to {most} each)",
            )


class TriompheIndividuelleOptions(TriompheOptions):
    """`individuelle` (RULES.md 3.4): 2 to 6 players, each for himself."""


class TriompheEquipeOptions(TriompheOptions):
    """`equipe` (RULES.md 3.3): 2 v 2 or 3 v 3, partners side by side."""

    ruleset_name: ClassVar[str] = "equipe"
    label: ClassVar[str] = "triomphe (equipe)"

    players: int = Field(4, ge=4, le=6, description="number of players: 4 or 6 (RULES.md 3.3)")
    hand_size: int = Field(
        5,
        ge=1,
        le=7,
        description="cards dealt to each seat (RULES.md 3.1, 3.6.14; at most 7 with 4 players)",
    )
    partners_see_hands: bool = Field(
        True,
        description=(
            "partners see each other's hands (RULES.md 3.3: the referee shows partners each "
            "other's hands)"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_target(cls, data: Any) -> Any:
        # TRI.END 3.3: 5 points with 4 players, 7 with 6 (the effective value is stored, so
        # that option_values() and the rules digest show it).
        if isinstance(data, dict) and "target" not in data:
            players = data.get("players", cls.model_fields["players"].default)
            data = {**data, "target": 7 if players == 6 and type(players) is int else 5}
        return data


class TriompheAsQuiPilleOptions(TriompheOptions):
    """`as-qui-pille` (RULES.md 3.5): 3 to 6 players, ace high, the pillage."""

    ruleset_name: ClassVar[str] = "as-qui-pille"
    label: ClassVar[str] = "triomphe (as-qui-pille)"

    players: int = Field(3, ge=3, le=6, description="number of players: 3 to 6 (RULES.md 3.5)")
    hand_size: int = Field(
        5,
        ge=1,
        le=10,
        description="cards dealt to each seat (RULES.md 3.1, 3.6.14; at most 10 with 3 players)",
    )
    rank_order: Annotated[RankOrderName, OneOf(RankOrderName.R1, RankOrderName.R2)] = Field(
        RankOrderName.R2, description="rank order: R2 (ace high) or R1 (RULES.md 3.5, 0.3)"
    )
    as_pille: bool = Field(
        True,
        description=(
            "the holder of the trump ace (or the dealer turning an ace) robs the face-up trump "
            "(RULES.md TRI.PILLE 3.5: false = 'l'As ne pille point')"
        ),
    )
    pillage_continues: bool = Field(
        True,
        description=(
            "the robber may go on taking the next face-up trumps (RULES.md TRI.PILLE 3.6.12(d): "
            "rob on after the first take)"
        ),
    )


class ImperialeAcademieOptions(GameOptions):
    """L'Impériale `academie` (RULES.md 2, seed 001): 2 players (32 cards) or 3 (36 cards)."""

    label: ClassVar[str] = "imperiale (academie)"

    players: int = Field(
        2,
        ge=2,
        le=3,
        description="number of players (RULES.md 2.1: 2, or 3 with 36 cards (IMP-A.3P))",
    )
    target_fiches: int = Field(
        5,
        ge=1,
        le=100,
        description="fiches (impériales) that win the match (RULES.md IMP-A.TARGET 2.1, 2.3.11)",
    )
    point_rule: Annotated[PointRule, OneOf(PointRule.COUNT_THEN_PIPS, PointRule.PIPS)] = Field(
        PointRule.COUNT_THEN_PIPS,
        description=(
            "the Point: by pip total (pips), or by number of cards then pips (count_then_pips) "
            "(RULES.md IMP-A.E5, 2.2)"
        ),
    )
    imperiales_before_point: bool = Field(
        True, description="impériales are scored before the Point (RULES.md IMP-A.E2-E5, 2.2)"
    )
    trump_major_value: int = Field(
        2,
        ge=1,
        le=2,
        description=(
            "fiches for a quatrième majeure in trump (1 or 2) (RULES.md IMP-A.E2: a quatrième "
            "majeure in trump, 1 or 2 fiches (2.2))"
        ),
    )
    imperiale_de_retourne: bool = Field(
        False,
        description=(
            "the dealer scores an impériale completed by the retourne (RULES.md IMP-A.E3 (c), "
            "2.3.10: two players only)"
        ),
    )
    imperiale_tombee: bool = Field(
        False,
        description=(
            "a seat whose tricks hold the trump K, Q, J and A scores a fiche (RULES.md IMP-A.E7)"
        ),
    )
    tombee_requires_capture: bool = Field(
        True,
        description=(
            "the impériale tombée needs the four cards captured, not dealt (RULES.md IMP-A.E7, "
            "2.3.6: not when dealt all four)"
        ),
    )
    cartes_blanches: bool = Field(
        True,
        description=(
            "a hand without figures (cartes blanches) scores 2 fiches and stops the coup "
            "(RULES.md IMP-A.E2 (a), E4)"
        ),
    )
    effacement: bool = Field(
        True, description="a fiche won erases the opponents' jetons (RULES.md IMP-A.EFFACEMENT)"
    )
    protect_retourne: bool = Field(
        True,
        description=(
            "the dealer's retourne jeton cannot be erased before the Point (RULES.md "
            "IMP-A.EFFACEMENT, 2.3.1)"
        ),
    )
    blanches_erase: bool = Field(
        True, description="cartes blanches erase the opponents' jetons (RULES.md 2.3.2)"
    )
    optional_erase: bool = Field(
        True,
        description=(
            "the impériales de retourne and tombée erase the opponents' jetons (RULES.md 2.3.2: "
            "the impériales de retourne and tombée erase)"
        ),
    )
    capot_fiches: int = Field(
        2,
        ge=0,
        le=10,
        description=(
            "fiches for all twelve tricks (0: no capot bonus) (RULES.md IMP-A.E8 (0: no capot, "
            "twelve tricks score their card jetons))"
        ),
    )
    packet: int = Field(
        3,
        ge=3,
        le=4,
        description=(
            "cards per packet when dealing (3 or 4) (RULES.md 2.1 Deal, 7: 3 or 4 cards a packet)"
        ),
    )
    undertrump_duty: bool = Field(
        False,
        description="a seat that cannot overtrump must still trump (RULES.md IMP-A.PLAY 2.3.8)",
    )
    force_after_ruff: bool = Field(
        False,
        description=(
            "after a ruff, a seat following suit must still beat the led suit's best card "
            "(RULES.md IMP-A.PLAY 2.3.7)"
        ),
    )
    three_player_first_lead_trump: bool = Field(
        False,
        description=(
            "with three players the first lead must be a trump (RULES.md IMP-A.3P, 2.3.14: three "
            "players only)"
        ),
    )
    allow_overlap: bool = Field(
        True,
        description=(
            "one card may serve in two impériales (RULES.md IMP-A.E2, 2.3.9: one card in two "
            "impériales)"
        ),
    )

    # What academie fixes where moderne has an option (imperiale.py reads either ruleset's
    # model as one value): no impériale tournée, a jeton per trick above par, honours per
    # trick, and the tombée at the end of the coup when it is played at all.
    tournee_holder: ClassVar[TourneeHolder | None] = None
    cards_scoring: ClassVar[CardsScoring] = CardsScoring.PER_TRICK
    honour_timing: ClassVar[HonourTiming] = HonourTiming.PER_TRICK

    @property
    def tombee_mode(self) -> TombeeMode:
        """IMP-A.E7: the impériale tombée, scored at the end of the coup, or off."""
        return TombeeMode.END_OF_COUP if self.imperiale_tombee else TombeeMode.OFF

    def check(self, players: int) -> None:
        if players != 3 and self.three_player_first_lead_trump:
            raise self._refuse(
                "three_player_first_lead_trump", True, "it applies to three players only"
            )
        if players == 3 and self.imperiale_de_retourne:
            raise self._refuse(
                "imperiale_de_retourne",
                True,
                "with three players the dealer holds the retourne: it is never an impériale "
                "de retourne (RULES.md 7)",
            )


class ImperialeModerneOptions(GameOptions):
    """L'Impériale `moderne` (RULES.md 1, seed 000): 2 players, 32 cards."""

    label: ClassVar[str] = "imperiale (moderne)"
    # What seed 000 fixes where academie has an option (imperiale.py reads either ruleset's
    # model as one value).
    trump_major_value: ClassVar[int] = 1  # an impériale de couleur is worth 1, trump or not
    imperiale_de_retourne: ClassVar[bool] = False
    tombee_requires_capture: ClassVar[bool] = True
    cartes_blanches: ClassVar[bool] = False
    protect_retourne: ClassVar[bool] = False  # RULES.md 7: no retourne protection
    blanches_erase: ClassVar[bool] = True
    optional_erase: ClassVar[bool] = True
    capot_fiches: ClassVar[int] = 0  # no capot
    packet: ClassVar[int] = 3
    three_player_first_lead_trump: ClassVar[bool] = False
    undertrump_duty: ClassVar[bool] = False
    force_after_ruff: ClassVar[bool] = False

    players: int = Field(
        2, ge=2, le=2, description="number of players (RULES.md 1.1: two players only)"
    )
    target_fiches: int = Field(
        3, ge=1, le=100, description="fiches (impériales) that win the match (RULES.md IMP-M.END)"
    )
    point_rule: Annotated[PointRule, OneOf(PointRule.PIPS, PointRule.COUNT_THEN_PIPS)] = Field(
        PointRule.PIPS,
        description=(
            "the Point: by pip total (pips), or by number of cards then pips (count_then_pips) "
            "(RULES.md IMP-M.COULEUR, 1.2.6)"
        ),
    )
    imperiales_before_point: bool = Field(
        False, description="impériales are scored before the Point (RULES.md 1.2.4)"
    )
    tournee_holder: Annotated[TourneeHolder, OneOf(TourneeHolder.ANY, TourneeHolder.DEALER)] = (
        Field(
            TourneeHolder.ANY,
            description=(
                "who may score the impériale tournée: any seat or only the dealer (RULES.md "
                "IMP-M.IMPERIALES, 1.2.3)"
            ),
        )
    )
    tombee_mode: Annotated[
        TombeeMode, OneOf(TombeeMode.PER_TRICK, TombeeMode.END_OF_COUP, TombeeMode.OFF)
    ] = Field(
        TombeeMode.PER_TRICK,
        description=(
            "the impériale tombée: per trick, at the end of the coup, or off (RULES.md "
            "IMP-M.TOMBEE, 2.2)"
        ),
    )
    cards_scoring: Annotated[
        CardsScoring, OneOf(CardsScoring.FLAT_FIRST_TO_SIX, CardsScoring.PER_TRICK)
    ] = Field(
        CardsScoring.FLAT_FIRST_TO_SIX,
        description=(
            "the cards: one jeton for the majority, first to six on a tie (flat_first_to_six), or"
            " one per trick above six (per_trick) (RULES.md 2.2)"
        ),
    )
    effacement: bool = Field(
        False, description="a fiche won erases the opponents' jetons (RULES.md 1.2.5, 7)"
    )
    allow_overlap: bool = Field(
        True,
        description="one card may serve in two impériales (RULES.md IMP-M.IMPERIALES, 1.1 step 3)",
    )
    honour_timing: Annotated[
        HonourTiming, OneOf(HonourTiming.PER_TRICK, HonourTiming.END_OF_COUP)
    ] = Field(
        HonourTiming.PER_TRICK,
        description=(
            "honour jetons scored after each trick or at the end of the coup (RULES.md "
            "IMP-M.HONNEURS, 1.2.8)"
        ),
    )
