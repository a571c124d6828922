"""Clocks: the time control of a timed match and its arithmetic.

One implementation, used by the referee as it measures (referee/server/tables.py) and by
`verify` as it checks a record (records/verify.py). The engine knows nothing of time.

A time control has a per-action limit (`action_ms`), a match budget per seat (`budget_ms`)
with an increment added after each of the seat's actions (`increment_ms`), or both, and a
policy for a seat whose time runs out: `forfeit` (CLOCK.FORFEIT: the referee resigns for it)
or `autoplay` (CLOCK.AUTOPLAY: the referee makes the seat's default action, the engine's
`Match.default_action`).

A seat's clock runs from the moment it may act until its action is applied: that is the
action's `elapsed_ms`, 0 for an action made when the seat was not to act (a resignation out
of turn). Each action is allowed `min(action_ms, the seat's budget left)`; the budget left
goes down by the elapsed time, then up by the increment. An action the referee made on time
(its 1-based index in its hand's `timeouts`) took exactly the time allowed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tapis_cartes.referee.engine import RecordError
from tapis_cartes.referee.errors import BadRequest
from tapis_cartes.v1 import record_pb2 as pb

__all__ = [
    "ACTION_MS",
    "AUTOPLAY",
    "AUTOPLAY_RULE",
    "BUDGET_MS",
    "FORFEIT",
    "FORFEIT_RULE",
    "INCREMENT_MS",
    "POLICIES",
    "Clocks",
    "TimeControl",
    "Timing",
    "check_timing",
    "forfeit_reason",
    "iter_hand_timing",
    "record_timing",
]

FORFEIT = "forfeit"
AUTOPLAY = "autoplay"
POLICIES = (FORFEIT, AUTOPLAY)
FORFEIT_RULE = "CLOCK.FORFEIT"
AUTOPLAY_RULE = "CLOCK.AUTOPLAY"

# The ranges of each field (0 is "none" for action_ms and budget_ms): 0.1 s to a day per
# action, 1 s to a week per match, an increment of at most an hour.
ACTION_MS = (100, 86_400_000)
BUDGET_MS = (1_000, 604_800_000)
INCREMENT_MS = (0, 3_600_000)

_POLICY_PB = {FORFEIT: pb.TIMEOUT_POLICY_FORFEIT, AUTOPLAY: pb.TIMEOUT_POLICY_AUTOPLAY}
_POLICY_NAME = {v: k for k, v in _POLICY_PB.items()}


@dataclass(frozen=True, slots=True)
class TimeControl:
    """A table's time control (all times in milliseconds; 0: none)."""

    action_ms: int = 0
    budget_ms: int = 0
    increment_ms: int = 0
    policy: str = FORFEIT

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            field, why = problem
            raise BadRequest(why, f"time_control.{field}")

    def problem(self) -> tuple[str, str] | None:
        """(field, why) for the first thing wrong with this time control, or None."""
        for name, (low, high) in (
            ("action_ms", ACTION_MS),
            ("budget_ms", BUDGET_MS),
            ("increment_ms", INCREMENT_MS),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                return name, "must be a whole number of milliseconds"
            if value != 0 and not low <= value <= high:
                none = ", or 0 for none" if low > 0 else ""
                return name, f"{value} is out of range ({low}..{high}{none})"
        if not self.action_ms and not self.budget_ms:
            return "action_ms", "a time control needs a per-action limit, a budget or both"
        if self.increment_ms and not self.budget_ms:
            return "increment_ms", "an increment needs a budget (budget_ms)"
        if self.policy not in POLICIES:
            return "policy", "must be TIMEOUT_POLICY_FORFEIT or TIMEOUT_POLICY_AUTOPLAY"
        return None

    @property
    def timeout_rule(self) -> str:
        return FORFEIT_RULE if self.policy == FORFEIT else AUTOPLAY_RULE

    def to_pb(self) -> pb.TimeControl:
        return pb.TimeControl(
            action_ms=self.action_ms,
            budget_ms=self.budget_ms,
            increment_ms=self.increment_ms,
            policy=_POLICY_PB[self.policy],
        )

    @classmethod
    def from_pb(cls, msg: pb.TimeControl) -> TimeControl:
        """The time control of a request or a record; `BadRequest` naming the field when
        it is not valid."""
        return cls(
            msg.action_ms,
            msg.budget_ms,
            msg.increment_ms,
            _POLICY_NAME.get(msg.policy, f"policy {msg.policy}"),
        )

    def to_json(self) -> dict[str, int | str]:
        return {
            "action_ms": self.action_ms,
            "budget_ms": self.budget_ms,
            "increment_ms": self.increment_ms,
            "policy": self.policy,
        }

    def describe(self) -> str:
        """For a person: "30 s per action, 5 min + 2 s per seat, forfeit"."""
        parts = []
        if self.action_ms:
            parts.append(f"{_seconds(self.action_ms)} per action")
        if self.budget_ms:
            inc = f" + {_seconds(self.increment_ms)}" if self.increment_ms else ""
            parts.append(f"{_seconds(self.budget_ms)}{inc} per seat")
        parts.append(self.policy)
        return ", ".join(parts)


def _seconds(ms: int) -> str:
    if ms % 60_000 == 0 and ms >= 60_000:
        return f"{ms // 60_000} min"
    return f"{ms / 1000:g} s"


class Clocks:
    """The seats' clocks of one match under a time control: the budget each has left."""

    __slots__ = ("control", "remaining")

    def __init__(self, control: TimeControl, players: int) -> None:
        self.control = control
        self.remaining = [control.budget_ms] * players

    def allowed(self, seat: int) -> int:
        """The milliseconds the seat's next action may take, counted from when it may act."""
        c = self.control
        if not c.budget_ms:
            return c.action_ms
        left = max(0, self.remaining[seat])
        return min(c.action_ms, left) if c.action_ms else left

    def spend(self, seat: int, elapsed: int) -> None:
        """The seat acted after `elapsed` ms: its budget goes down, then up by the increment."""
        c = self.control
        if c.budget_ms:
            self.remaining[seat] += c.increment_ms - elapsed

    def left(self, seat: int) -> int | None:
        """The budget the seat has left (None without a budget)."""
        return self.remaining[seat] if self.control.budget_ms else None


def forfeit_reason(seat: int) -> str:
    """The outcome's reason for a seat that lost on time."""
    return f"seat {seat} lost on time"


# --- in records -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    """A timed match as a record holds it: the time control, each action's elapsed time
    (in action order over the whole match) and the 0-based indexes of the actions the referee
    made on time."""

    control: TimeControl
    elapsed: Sequence[int]
    timeouts: frozenset[int]


def record_timing(rec: pb.GameRecord) -> Timing | None:
    """The timing a record holds (None for an untimed record), its fields read as they are:
    `check_timing` says whether they are right."""
    if not rec.rules.HasField("time_control"):
        return None
    elapsed: list[int] = []
    timeouts: set[int] = set()
    for hand in rec.hands:
        base = len(elapsed)
        elapsed.extend(hand.elapsed_ms)
        timeouts.update(base + t - 1 for t in hand.timeouts)
    return Timing(TimeControl.from_pb(rec.rules.time_control), elapsed, frozenset(timeouts))


def check_timing(rec: pb.GameRecord, players: int) -> None:
    """`RecordError` `clock` at the first fault of a record's clock arithmetic: elapsed times
    where there is no time control, not one elapsed time per action, timeouts not ascending or
    out of range, an action longer than it was allowed, an action made on time not taking
    exactly what it was allowed, a forfeit not last. What needs the match (who may act, the
    default action) is checked during verify's replay (records/verify.py)."""
    if not rec.rules.HasField("time_control"):
        for h, hand in enumerate(rec.hands[:], 1):
            if len(hand.elapsed_ms) or len(hand.timeouts):
                raise RecordError(
                    "clock", "the hand has elapsed times or timeouts but no time control", hand=h
                )
        return
    try:
        control = TimeControl.from_pb(rec.rules.time_control)
    except BadRequest as exc:
        raise RecordError("clock", f"rules.{exc.field_name}: {exc}") from None
    clocks = Clocks(control, players)
    total = sum(len(hand.actions) for hand in rec.hands)
    seen = 0
    for h, hand in enumerate(rec.hands, 1):
        n = len(hand.actions)
        if len(hand.elapsed_ms) != n:
            raise RecordError(
                "clock", f"{len(hand.elapsed_ms)} elapsed times for {n} actions", hand=h
            )
        timeouts = list(hand.timeouts)
        bad = next(
            (i for i, t in enumerate(timeouts) if not 1 <= t <= n or (i and t <= timeouts[i - 1])),
            None,
        )
        if bad is not None:
            raise RecordError(
                "clock",
                f"timeouts[{bad}] is {timeouts[bad]}"
                + (f" after {timeouts[bad - 1]}" if bad else "")
                + f": action numbers 1..{n}, ascending, once each",
                hand=h,
            )
        out = set(timeouts)
        seats = hand.seats
        for a, elapsed in enumerate(hand.elapsed_ms, 1):
            if a > len(seats) or seats[a - 1] >= players:
                break  # check_fields names the seats' fault
            seat = seats[a - 1]
            allowed = clocks.allowed(seat)
            if elapsed > allowed:
                raise RecordError(
                    "clock",
                    f"seat {seat} took {elapsed} ms; it was allowed {allowed} ms",
                    hand=h,
                    action=a,
                )
            if a in out:
                if elapsed != allowed:
                    raise RecordError(
                        "clock",
                        f"an action made on time took {elapsed} ms, not the {allowed} ms"
                        f" seat {seat} was allowed",
                        hand=h,
                        action=a,
                    )
                if control.policy == FORFEIT and seen + a != total:
                    raise RecordError(
                        "clock", "a forfeit on time is not the last action", hand=h, action=a
                    )
            clocks.spend(seat, elapsed)
        seen += n


def iter_hand_timing(timing: Timing, sizes: Sequence[int]) -> Iterator[tuple[list[int], list[int]]]:
    """Per hand of `sizes` actions: its elapsed times and 1-based timeouts (record form)."""
    start = 0
    for n in sizes:
        yield (
            list(timing.elapsed[start : start + n]),
            [i - start + 1 for i in range(start, start + n) if i in timing.timeouts],
        )
        start += n
