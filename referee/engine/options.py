"""Typed, validated options: one pydantic model per game and ruleset, all in this module.

Each model is frozen, forbids unknown keys and is strict about types. A failure becomes a
`RulesError` that names the key and, where the values are a closed list, the allowed values.
"""

from __future__ import annotations

import typing
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from referee.engine.errors import RulesError

__all__ = [
    "DamePiqueOptions",
    "GameOptions",
    "ImperialeAcademieOptions",
    "ImperialeModerneOptions",
    "NapoleonOptions",
    "TriompheAsQuiPilleOptions",
    "TriompheEquipeOptions",
    "TriompheIndividuelleOptions",
    "TriompheOptions",
    "validate_options",
]


class GameOptions(BaseModel):
    """Base of every option model."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def check(self, players: int) -> None:
        """Combination rules (override); raise `RulesError` naming the key."""


OptionsT = TypeVar("OptionsT", bound=GameOptions)


def _allowed(model: type[GameOptions], key: str) -> str:
    field = model.model_fields.get(key)
    if field is None:
        return ""
    ann = field.annotation
    args = typing.get_args(ann)
    literal_args: list[Any] = []
    if typing.get_origin(ann) is Literal:
        literal_args = list(args)
    else:
        for a in args:
            if typing.get_origin(a) is Literal:
                literal_args += list(typing.get_args(a))
    if literal_args:
        return "; allowed: " + ", ".join(str(v).lower() for v in literal_args)
    if ann is bool:
        return "; allowed: true, false"
    if ann is int or int in args:
        return "; expected an integer"
    return ""


def validate_options(model: type[OptionsT], options: dict[str, Any], where: str) -> OptionsT:
    """Build `model` from `options`; raise `RulesError` naming the first bad key."""
    if not isinstance(options, dict):
        raise RulesError(f"options for {where} must be an object of key: value")
    unknown = sorted(k for k in options if k not in model.model_fields)
    if unknown:
        known = ", ".join(sorted(model.model_fields))
        raise RulesError(
            f"unknown option {unknown[0]!r} for {where}; known options: {known}", key=unknown[0]
        )
    try:
        return model(**options)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        value = options.get(key)
        raise RulesError(
            f"option {key!r} of {where}: {value!r} is not allowed{_allowed(model, key)}",
            key=key,
        ) from None


# --- the games' options (RULES.md section 6) ---------------------------------------------


class DamePiqueOptions(GameOptions):
    end_threshold: int = 100  # DP.END 4.1: a total >= this ends the match
    qs_breaks_hearts: bool = False  # 4.2.2
    qs_counts_as_heart_for_lead: bool = False  # 4.2.4
    moon_mode: Literal["add_to_others", "subtract_self"] = "add_to_others"  # 4.2.6
    hearts_broken_by: Literal["played", "discarded"] = "played"  # 4.2.2, 7
    dealer_rotation: Literal["clockwise", "counterclockwise"] = "clockwise"  # 4.2.8


class NapoleonOptions(GameOptions):
    players: int = 4  # 5.1, 5.2.8: 3 to 10
    short_deck: bool = False  # 5.1, 5.2.10: 4 × (players + 3) cards
    misere_trump: Literal["none", "first_card"] = "none"  # 5.2.1
    allpass_redeal_same_dealer: bool = False  # 5.2.3, 7
    scoring: Literal["seed_points", "stakes"] = "seed_points"  # 5.2.4, 7
    deals: int | None = None  # 5.1, 5.2.6: None means 2 × players (filled in on validation)
    stop_when_decided: bool = False  # 5.2.11

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

    def check(self, players: int) -> None:
        if not 3 <= players <= 10:
            raise RulesError(
                f"option 'players' of napoleon: {players} is not allowed; Napoléon is played "
                "by 3 to 10 players",
                key="players",
            )
        if self.effective_deals < 1:
            raise RulesError(
                f"option 'deals' of napoleon: {self.deals} is not allowed; a match has at "
                "least 1 deal",
                key="deals",
            )


class TriompheOptions(GameOptions):
    """The keys every ruleset of La Triomphe has (RULES.md 3, 6); the three rulesets below
    subclass it with their own defaults and keys. Not a ruleset itself."""

    ruleset_name: ClassVar[str] = "individuelle"
    min_players: ClassVar[int] = 2
    max_players: ClassVar[int] = 6

    players: int = 2  # 3.4: 2 to 6 (equipe: 4 or 6; as-qui-pille: 3 to 6)
    regime: Literal["forcee", "forcat", "plaisant"] = "forcee"  # 3.2, 3.6.1
    rank_order: Literal["R1", "R2"] = "R1"  # 3.1, 0.3
    hand_size: int = 5  # 3.1, 3.6.14
    target: int = 5  # TRI.END 3.1
    vole_value: int = 2  # TRI.VOLE 3.1, 3.6.9
    vole_fail_penalty: int = -2  # TRI.VOLE 3.1, 3.6.7 (also a refused abandon's failed vole)
    abandon_allowed: bool = True  # TRI.ABANDON 3.1: only where exactly two sides exist
    refused_abandon_vole_value: int = 2  # TRI.ABANDON 3.6.6

    def _refuse(self, key: str, value: object, why: str) -> RulesError:
        return RulesError(
            f"option {key!r} of triomphe ({self.ruleset_name}): {value!r} is not allowed; {why}",
            key=key,
        )

    def check(self, players: int) -> None:
        if not self.min_players <= players <= self.max_players:
            if self.ruleset_name == "equipe":
                why = "the team game is played 2 v 2 or 3 v 3 (4 or 6 players)"
            else:
                why = f"this game is played by {self.min_players} to {self.max_players} players"
            raise self._refuse("players", players, why)
        if self.ruleset_name == "equipe" and players % 2:
            raise self._refuse("players", players, "the team game is played 2 v 2 or 3 v 3")
        if self.regime == "plaisant":
            if self.ruleset_name == "equipe":
                raise self._refuse(
                    "regime", "plaisant", "plaisant is only for the individual game (3.2)"
                )
            if players < 3:
                raise self._refuse(
                    "regime", "plaisant", "plaisant needs three or more players (3.2)"
                )
        if self.hand_size < 1 or players * self.hand_size + 1 > 32:
            most = 31 // players
            raise self._refuse(
                "hand_size",
                self.hand_size,
                f"{players} hands and the retourne must come from 32 cards (1 to {most} each)",
            )
        if self.target < 1:
            raise self._refuse("target", self.target, "the target is at least 1 point")


class TriompheIndividuelleOptions(TriompheOptions):
    """`individuelle` (RULES.md 3.4): 2 to 6 players, each for himself."""


class TriompheEquipeOptions(TriompheOptions):
    """`equipe` (RULES.md 3.3): 2 v 2 or 3 v 3, partners side by side."""

    ruleset_name: ClassVar[str] = "equipe"
    min_players: ClassVar[int] = 4
    max_players: ClassVar[int] = 6

    players: int = 4
    partners_see_hands: bool = True  # 3.3: the referee shows partners each other's hands

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
    min_players: ClassVar[int] = 3
    max_players: ClassVar[int] = 6

    players: int = 3
    rank_order: Literal["R1", "R2"] = "R2"
    as_pille: bool = True  # TRI.PILLE 3.5: false = "l'As ne pille point"
    pillage_continues: bool = True  # TRI.PILLE 3.6.12(d): rob on after the first take


class ImperialeAcademieOptions(GameOptions):
    """L'Impériale `academie` (RULES.md 2, seed 001): 2 players (32 cards) or 3 (36 cards)."""

    players: int = 2  # 2.1: 2, or 3 with 36 cards (IMP-A.3P)
    target_fiches: int = 5  # IMP-A.TARGET 2.1, 2.3.11
    point_rule: Literal["count_then_pips", "pips"] = "count_then_pips"  # IMP-A.E5, 2.2
    imperiales_before_point: bool = True  # IMP-A.E2-E5, 2.2
    trump_major_value: int = 2  # IMP-A.E2: a quatrième majeure in trump, 1 or 2 fiches (2.2)
    imperiale_de_retourne: bool = False  # IMP-A.E3 (c), 2.3.10: two players only
    imperiale_tombee: bool = False  # IMP-A.E7
    tombee_requires_capture: bool = True  # IMP-A.E7, 2.3.6: not when dealt all four
    cartes_blanches: bool = True  # IMP-A.E2 (a), E4
    effacement: bool = True  # IMP-A.EFFACEMENT
    protect_retourne: bool = True  # IMP-A.EFFACEMENT, 2.3.1
    blanches_erase: bool = True  # 2.3.2
    optional_erase: bool = True  # 2.3.2: the impériales de retourne and tombée erase
    capot_fiches: int = 2  # IMP-A.E8 (0: no capot, twelve tricks score their card jetons)
    packet: int = 3  # 2.1 Deal, 7: 3 or 4 cards a packet
    undertrump_duty: bool = False  # IMP-A.PLAY 2.3.8
    force_after_ruff: bool = False  # IMP-A.PLAY 2.3.7
    three_player_first_lead_trump: bool = False  # IMP-A.3P, 2.3.14: three players only
    allow_overlap: bool = True  # IMP-A.E2, 2.3.9: one card in two impériales

    def _refuse(self, key: str, value: object, why: str) -> RulesError:
        return RulesError(
            f"option {key!r} of imperiale (academie): {value!r} is not allowed; {why}", key=key
        )

    def check(self, players: int) -> None:
        if players not in (2, 3):
            raise self._refuse(
                "players", players, "L'Impériale is played by 2 (32 cards) or 3 (36 cards)"
            )
        if self.target_fiches < 1:
            raise self._refuse("target_fiches", self.target_fiches, "the target is at least 1")
        if self.trump_major_value not in (1, 2):
            raise self._refuse("trump_major_value", self.trump_major_value, "allowed: 1, 2")
        if self.capot_fiches < 0:
            raise self._refuse("capot_fiches", self.capot_fiches, "expected 0 or more fiches")
        if self.packet not in (3, 4):
            raise self._refuse("packet", self.packet, "allowed: 3, 4")
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

    players: int = 2  # 1.1: two players only
    target_fiches: int = 3  # IMP-M.END
    point_rule: Literal["pips", "count_then_pips"] = "pips"  # IMP-M.COULEUR, 1.2.6
    imperiales_before_point: bool = False  # 1.2.4
    tournee_holder: Literal["any", "dealer"] = "any"  # IMP-M.IMPERIALES, 1.2.3
    tombee_mode: Literal["per_trick", "end_of_coup", "off"] = "per_trick"  # IMP-M.TOMBEE, 2.2
    cards_scoring: Literal["flat_first_to_six", "per_trick"] = "flat_first_to_six"  # 2.2
    effacement: bool = False  # 1.2.5, 7
    allow_overlap: bool = True  # IMP-M.IMPERIALES, 1.1 step 3
    honour_timing: Literal["per_trick", "end_of_coup"] = "per_trick"  # IMP-M.HONNEURS, 1.2.8

    def check(self, players: int) -> None:
        if players != 2:
            raise RulesError(
                f"option 'players' of imperiale (moderne): {players} is not allowed; the "
                "modern Impériale is played by two players",
                key="players",
            )
        if self.target_fiches < 1:
            raise RulesError(
                f"option 'target_fiches' of imperiale (moderne): {self.target_fiches} is not "
                "allowed; the target is at least 1",
                key="target_fiches",
            )
