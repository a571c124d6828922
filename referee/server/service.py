"""The gRPC servicer of `tapis.v1.RefereeService` (grpc.aio).

The servicer is separate from process wiring (app.py). It converts requests to calls on the
`Referee` (tables.py) and its answers to messages, each viewer getting only what its seat may
see. Every error becomes a status code in one place, `_status_of`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from tapis_cartes.records.clocks import TimeControl
from tapis_cartes.records.codec import options_from_pb, rules_to_pb, score_to_pb
from tapis_cartes.records.render import fact_text
from tapis_cartes.records.signing import public_bytes
from tapis_cartes.referee.catalog import catalog
from tapis_cartes.referee.engine import find_game
from tapis_cartes.referee.engine.actions import action_str, check_action
from tapis_cartes.referee.engine.base import (
    CardFact,
    CardsPassed,
    CardsShown,
    CardsTaken,
    HandOver,
    MatchOver,
    Note,
    ScoreLine,
    TrickWon,
    View,
)
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.errors import (
    BadRequest,
    IllegalAction,
    InvalidAction,
    RulesError,
    Stale,
    TapisError,
    Unauthenticated,
    name_fault,
)
from tapis_cartes.referee.server.lenient import (
    LATE_REQUEST,
    NO_REQUEST,
    Undecodable,
    first_request,
    lenient,
    one_request,
    served,
)
from tapis_cartes.referee.server.limits import (
    DEFAULT_LIMITS,
    MAX_ID,
    MAX_NAME,
    MAX_OPTION_TEXT,
    MAX_OPTIONS,
    MAX_SEATS,
    Backlog,
    Limits,
    Slot,
    StreamCount,
    client_of,
)
from tapis_cartes.referee.server.store import store_unreadable
from tapis_cartes.referee.server.tables import (
    WATCH_CHUNK,
    ActionEvent,
    ClosedEvent,
    EndEvent,
    HandEvent,
    Referee,
    SeatEvent,
    Stopping,
    Table,
    TableEventData,
    Turn,
    is_backlog,
)
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb

__all__ = [
    "RefereeServicer",
    "add_facts",
    "add_referee_service",
    "event_message",
    "seat_view",
    "turn_message",
]

log = logging.getLogger("tapis.referee")
SERVICE = pb.DESCRIPTOR.services_by_name["RefereeService"]
MAX_MESSAGE = 1000  # characters of a status message (a client value in it is quoted short)
# The legal actions an ActionRefusal lists at most (the first, by code): the status is sent in
# the call's trailers, which some gRPC clients read up to 8 KiB only (grpc-java's default),
# and the 286 passes of the Dame de Pique exchange took 6.3 KB (8.4 KB in base64).
REFUSAL_CHOICES = 100

Req = TypeVar("Req")
Resp = TypeVar("Resp")


# --- errors: the one place where they become status codes ----------------------------------


def _status_of(exc: Exception, request: object = None) -> status_pb2.Status:
    """The status of a call that ends with `exc`: the code its class carries
    (`TapisError.grpc_status`, docs/errors.md), its message and its details (referee.proto,
    "Status codes"): the rule's refusal (ActionRefusal), the table's action index
    (StaleAction), or for INVALID_ARGUMENT a google.rpc.BadRequest whose one field violation
    names the field of `request` at fault, as the message does (`seats[1].name: ...`);
    INTERNAL for any other exception, a bug (`_abort` logs it)."""
    name = _grpc_status(exc)
    if name is None:
        code, message = code_pb2.INTERNAL, f"internal error: {type(exc).__name__} (logged)"
    else:
        code, message = code_pb2.Code.Value(name), str(exc)
    details: list[Any] = []
    if isinstance(exc, IllegalAction):
        refusal = pb.ActionRefusal(
            code=exc.code, rule=exc.rule, reason=exc.reason, legal_action_count=len(exc.legal)
        )
        _add_choices(refusal, exc.legal[:REFUSAL_CHOICES])
        details.append(refusal)
    elif isinstance(exc, Stale):
        details.append(pb.StaleAction(action_index=exc.index))
    elif code == code_pb2.INVALID_ARGUMENT:
        field = _field_of(exc, request)
        message = f"{field}: {exc}"
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=field, description=_cut(str(exc))
        )
        details.append(error_details_pb2.BadRequest(field_violations=[violation]))
    status = status_pb2.Status(code=code, message=_cut(message))
    for d in details:
        packed = any_pb2.Any()
        packed.Pack(d)
        status.details.append(packed)
    return status


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"


def _field_of(exc: Exception, request: object) -> str:
    """The path of the request field an INVALID_ARGUMENT is about (`seats[1].name`,
    `options[2].int_value`, `action`), as google.rpc.BadRequest.FieldViolation.field has it.
    Bad rules name an option key (`RulesError.key`): the option of the request that holds it,
    else the field that stands for it (`seats` for the number of players)."""
    if isinstance(exc, BadRequest):
        return exc.field_name
    if isinstance(exc, InvalidAction):
        return "action"
    key = exc.key if isinstance(exc, RulesError) else None
    if key in ("game", "ruleset"):
        return key
    if isinstance(request, pb.CreateTableRequest):
        for i, o in enumerate(request.options):
            if o.key == key:
                known = _option_keys(request.game, request.ruleset)
                return f"options[{i}].{o.WhichOneof('value') if key in known else 'key'}"
        if key == "players":  # no `players` option: the number of seats stands for it
            return "seats"
    return "options"


def _option_keys(game: str, ruleset: str) -> frozenset[str]:
    """The option keys of a game's ruleset (empty for an unknown game or ruleset)."""
    try:
        spec = find_game(game)
    except RulesError:
        return frozenset()
    model = spec.rulesets.get(ruleset or spec.default_ruleset)
    return frozenset(model.model_fields) if model is not None else frozenset()


def _grpc_status(exc: Exception) -> str | None:
    """The status code name of an error the referee answers with; None for a bug."""
    return exc.grpc_status if isinstance(exc, TapisError) else None


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any], exc: Exception, request: object = None
) -> None:
    """End the call with the status of `exc` (about `request`); an unexpected one (a bug) is
    logged."""
    if isinstance(exc, sqlite3.Error):  # (the store's reads: a write's is Unavailable already)
        exc = store_unreadable(exc)
    if _grpc_status(exc) is None:
        log.error(
            "call failed",
            exc_info=exc,
            extra={"fields": {"error": f"{type(exc).__name__}: {quoted(str(exc), 200)}"}},
        )
    await context.abort_with_status(rpc_status.to_status(_status_of(exc, request)))


async def _no_request(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """A call of a method of one request whose side ended with none (`one_request`)."""
    await _abort(context, BadRequest(NO_REQUEST, "request"))


def _handled(
    method: Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    """A unary method: its request checked first (decoded, within bounds, the referee
    ready), every error turned into its status."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Resp:
        try:
            self._check(request)
            return await method(self, request, context)
        except Exception as exc:
            await _abort(context, exc, request)
            raise  # unreachable: abort raises

    return wrapper


def _token(context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The seat token of a call: its one `authorization: Bearer <token>` entry, or None."""
    values = [v for k, v in context.invocation_metadata() or () if k == "authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise Unauthenticated(
            f"a call carries one authorization entry, not {len(values)}: Bearer <token>"
        )
    value = values[0]
    scheme, _, token = value.partition(" ") if isinstance(value, str) else ("", "", "")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("authorization must be 'Bearer <token>'")
    return token.strip()


def _client(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """How the referee counts a client (limits.py `client_of`)."""
    return client_of(context.peer())


# --- requests: decoded leniently, then checked against their bounds -----------------------


def add_referee_service(servicer: RefereeServicer, server: grpc.aio.Server) -> None:
    """Register the servicer as the generated code would, but with requests decoded
    leniently: bytes that are not the request give INVALID_ARGUMENT, in the method."""
    handlers = {}
    for method in SERVICE.methods:
        request = getattr(pb, method.input_type.name)
        response = getattr(pb, method.output_type.name)
        # Every method reads a stream of requests (`one_request` for a method of one): a call
        # that ends its side with no request is answered, not left without a status.
        behavior = getattr(servicer, method.name)
        if not method.client_streaming:
            behavior = one_request(behavior, _no_request)
        if method.server_streaming:
            make = grpc.stream_stream_rpc_method_handler
        else:
            make = grpc.stream_unary_rpc_method_handler
        handlers[method.name] = make(
            served(behavior),
            request_deserializer=lenient(request.FromString, request.DESCRIPTOR.full_name),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    server.add_registered_method_handlers(SERVICE.full_name, handlers)


def _bounded(value: str, field: str, limit: int) -> None:
    if len(value) > limit:
        raise BadRequest(f"{quoted(value)} is longer than {limit} characters", field)


def _check_name(value: str, field: str) -> None:
    _bounded(value, field, MAX_NAME)
    fault = name_fault(value)  # (None for an empty name: the seat's default)
    if fault is not None:
        raise BadRequest(f"{quoted(value)} {fault}", field)


def _check_options(options: Sequence[rpb.Option]) -> None:
    if len(options) > MAX_OPTIONS:
        raise BadRequest(f"{len(options)} options given; at most {MAX_OPTIONS}", "options")
    seen: set[str] = set()
    for i, o in enumerate(options):
        _bounded(o.key, f"options[{i}].key", MAX_OPTION_TEXT)
        if o.key in seen:
            raise BadRequest(f"option {quoted(o.key)} is given twice", f"options[{i}].key")
        seen.add(o.key)
        if o.WhichOneof("value") is None:
            raise BadRequest(f"option {quoted(o.key)} has no value", f"options[{i}]")
        if o.HasField("string_value"):
            _bounded(o.string_value, f"options[{i}].string_value", MAX_OPTION_TEXT)


_IDS = ("table_id", "game", "ruleset", "request_id")  # fields bounded by MAX_ID


_ids_by_type: dict[str, tuple[str, ...]] = {}


def _ids_of(message: Message) -> tuple[str, ...]:
    """The fields of a request's type bounded by MAX_ID."""
    descriptor = message.DESCRIPTOR
    ids = _ids_by_type.get(descriptor.full_name)
    if ids is None:
        ids = tuple(f.name for f in descriptor.fields if f.name in _IDS)
        _ids_by_type[descriptor.full_name] = ids
    return ids


def check_request(request: object) -> None:
    """`BadRequest` naming the field of a request that is out of its bounds (referee.proto,
    "Bounds"); the rules, seats and tables are the referee's to check."""
    if isinstance(request, Undecodable):
        raise BadRequest(request.text, request.field)
    if not isinstance(request, Message):
        return
    for name in _ids_of(request):
        _bounded(getattr(request, name), name, MAX_ID)
    if isinstance(request, pb.CreateTableRequest):
        _check_options(request.options)
        if len(request.seats) > MAX_SEATS:
            raise BadRequest(f"{len(request.seats)} seats; at most {MAX_SEATS}", "seats")
        for i, seat in enumerate(request.seats):
            _check_name(seat.name, f"seats[{i}].name")
    elif isinstance(request, pb.JoinTableRequest):
        _check_name(request.name, "name")


# --- conversions ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def _text(action: int) -> str:
    return action_str(action)


_Choosing = TypeVar("_Choosing", pb.SeatView, pb.ActionRefusal)


def _add_choices(out: _Choosing, actions: Sequence[int]) -> None:
    """Append the choices of `actions` to `out.legal_actions`: each choice's field as
    protobuf serializes it, made once per action and kind of message, all merged in one
    call (a turn of the Dame de Pique exchange lists 286 of them)."""
    choice = _choice_seat_view if isinstance(out, pb.SeatView) else _choice_refusal
    out.MergeFromString(b"".join(map(choice, actions)))


@functools.lru_cache(maxsize=1 << 16)
def _choice_seat_view(action: int) -> bytes:
    """`SeatView.legal_actions` holding the choice of `action` only, serialized."""
    return pb.SeatView(
        legal_actions=[pb.ActionChoice(action=action, text=_text(action))]
    ).SerializeToString()


@functools.lru_cache(maxsize=1 << 16)
def _choice_refusal(action: int) -> bytes:
    """`ActionRefusal.legal_actions` holding the choice of `action` only, serialized."""
    return pb.ActionRefusal(
        legal_actions=[pb.ActionChoice(action=action, text=_text(action))]
    ).SerializeToString()


@functools.lru_cache(maxsize=1 << 12)
def _scores_part(units: tuple[str, ...], scores: tuple[tuple[int, ...], ...]) -> bytes:
    """`SeatView.scores` holding `scores` only, serialized: the scores change once a hand,
    the view is made after every action."""
    return pb.SeatView(scores=[score_to_pb(units, s) for s in scores]).SerializeToString()


@functools.lru_cache(maxsize=1 << 12, typed=True)  # typed: a fact True is not a fact 1
def _fact_part(key: str, value: object, cards: CardFact | None) -> bytes:
    """`SeatView.facts` and `typed_facts` holding one fact only (`add_facts`), serialized:
    most facts keep their value from one view to the next (made after every action)."""
    out = pb.SeatView()
    add_facts(out, {key: value}, None if cards is None else {key: cards})
    return out.SerializeToString()


def _merge_facts(out: pb.SeatView, view: View) -> None:
    """`add_facts` of the view's facts into `out`: each fact's part made once per value
    (`_fact_part`), the parts merged in one call (repeated fields keep their order); afresh
    when a value cannot be a key (a list)."""
    cards = view.cards
    try:
        parts = [_fact_part(k, v, cards.get(k)) for k, v in view.public.items()]
    except TypeError:  # unhashable
        add_facts(out, view.public, cards)
    else:
        out.MergeFromString(b"".join(parts))


def seat_view(
    table: Table, seat: int | None, view: View | None, out: pb.SeatView | None = None
) -> pb.SeatView:
    """What `seat` (None: a spectator) sees of `table`, from the engine's `view` of it; built
    into `out` (empty) when given."""
    units = find_game(table.rules.game).units
    if out is None:
        out = pb.SeatView()
    out.table_id = table.id
    out.status = table_status(table)
    out.action_index = len(table.actions)
    out.event_index = table.durable_events
    out.MergeFromString(_scores_part(units, tuple(table.match.scores)))
    out.winners.extend(table.match.winners)
    if seat is not None:
        out.seat = seat
    if view is None:
        out.phase = "waiting"
        _add_clocks(out, table)  # (every seat's whole budget: no clock runs yet)
        return out
    out.hand_number = view.hand_number
    out.dealer = view.dealer
    out.phase = view.phase if not table.finished and table.closed is None else "over"
    out.hand.extend(iter_cards(view.hand))
    for other, cards in sorted(view.known.items()):
        out.known.add(seat=other, cards=list(iter_cards(cards)))
    add_play = out.trick.add
    for s, c in view.trick:
        add_play(seat=s, card=c)
    if view.trump >= 0:
        out.trump = view.trump
    if not table.finished and table.closed is None:
        out.to_act.extend(table.match.to_act())
        if seat is not None:
            _add_choices(out, table.legal(seat))
    _merge_facts(out, view)
    _add_clocks(out, table)
    return out


def _add_clocks(out: pb.SeatView, table: Table) -> None:
    """Every seat's clock, at a timed table (none at another)."""
    add_clock = out.clocks.add
    for s, remaining, running, left in table.clock_view():
        clock = add_clock(seat=s, running=running)
        if remaining is not None:
            clock.remaining_ms = remaining
        if left is not None:
            clock.action_left_ms = left


def turn_message(table: Table, seat: int) -> pb.WatchTableResponse | None:
    """The `turn` of the seat when it must act now (`Table.must_act`), else None: its view,
    as a `next_view` gives it too. Built once per action index and seat, shared by the
    seat's streams and its acknowledgement (a message is not changed once built)."""
    if not table.must_act(seat):
        return None
    index = len(table.actions)
    cached = table.turn_views.get(seat)
    # (At a timed table the view's clocks run: a turn is built afresh each time it is sent.)
    if cached is not None and cached[0] == index and table.clocks is None:
        message: pb.WatchTableResponse = cached[1]
        return message
    message = pb.WatchTableResponse()
    seat_view(table, seat, table.match.view(seat), message.turn)
    table.turn_views[seat] = (index, message)
    return message


def add_facts(
    out: pb.SeatView, public: Mapping[str, object], cards: Mapping[str, CardFact] | None = None
) -> None:
    """Add a view's public facts (View.public) to `out`: as text (`facts`) and typed
    (`typed_facts`), in the same order; a fact whose value is None is left out. The facts
    that are cards are typed from `cards` (View.cards), as card ids."""
    add_fact = out.facts.add
    add_typed = out.typed_facts.add
    cards = cards or {}
    for k, v in public.items():
        if v is None:
            continue
        add_fact(key=k, value=fact_text(v, "true", "false"))
        typed = add_typed(key=k)
        ids = cards.get(k)
        if ids is None:
            _typed_fact(typed, v)
        elif ids and isinstance(ids[0], tuple):
            add_group = typed.card_groups.groups.add
            for group in ids:
                assert isinstance(group, tuple)
                add_group(cards=group)
        else:
            typed.cards.SetInParent()
            typed.cards.cards.extend(c for c in ids if isinstance(c, int))


def _typed_fact(out: pb.TypedFact, value: object) -> None:
    """Fill a TypedFact's value from a view's public fact (View.public): by its type."""
    if isinstance(value, bool):
        out.flag = value
    elif isinstance(value, int):
        out.number = value
    elif isinstance(value, str):
        out.word = value
    else:
        assert isinstance(value, tuple | list), value
        items = list(value)
        if items and all(isinstance(v, bool) for v in items):
            out.flags.values.extend(items)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            out.numbers.values.extend(items)  # an empty list too
        elif all(isinstance(v, str) for v in items):
            out.words.values.extend(items)
        elif all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], str) for v in items):
            add = out.seat_words.values.add
            for seat, word in items:
                add(seat=seat, word=word)
        else:
            add_group = out.groups.groups.add
            for group in items:
                add_group(values=list(group))


_CLOSED = {"expired": pb.TABLE_STATUS_EXPIRED, "broken": pb.TABLE_STATUS_BROKEN}


def table_status(table: Table) -> pb.TableStatus.ValueType:
    if table.closed is not None:
        return _CLOSED[table.closed.status]
    if table.finished:
        return pb.TABLE_STATUS_FINISHED
    return pb.TABLE_STATUS_PLAYING if table.started else pb.TABLE_STATUS_WAITING


@functools.lru_cache(maxsize=1 << 12)
def _cards(mask: int) -> tuple[int, ...]:
    """The cards of a mask (`iter_cards`): a seat's hand is sent after every action, the
    same until it plays."""
    return tuple(iter_cards(mask))


def event_message(
    table: Table,
    index: int,
    event: TableEventData,
    viewer: int | None,
    out: pb.TableEvent | None = None,
) -> pb.TableEvent:
    """One event as `viewer` (a seat, or None for a spectator) may know it; built into `out`
    (empty) when given."""
    if out is None:
        out = pb.TableEvent()
    out.index = index
    # (The most frequent first: an action, a trick.)
    if isinstance(event, ActionEvent):
        a = out.action_taken
        a.action_index = event.index
        a.seat = event.seat
        action = event.action if viewer == event.seat else table.match.public_action(event.action)
        a.action = action
        a.text = _text(action)
        if viewer is not None:  # a seat's cards after the action, always
            a.hand.extend(_cards(event.hands[viewer]))
        a.elapsed_ms = event.elapsed
        a.timeout = event.timeout
        if event.remaining is not None:
            a.remaining_ms = event.remaining
    elif isinstance(event, TrickWon):
        t = out.trick_completed
        t.number = event.number
        t.winner = event.winner
        add_play = t.cards.add
        for player, card in event.plays:
            add_play(seat=player, card=card)
    elif isinstance(event, SeatEvent):
        out.seat_taken.seat = event.seat
        out.seat_taken.name = event.name
    elif isinstance(event, HandEvent):
        h = out.hand_started
        h.number = event.number
        h.dealer = event.dealer
        if viewer is not None:
            h.hand.extend(_cards(event.hands[viewer]))
        if event.retourne >= 0:
            h.retourne = event.retourne
    elif isinstance(event, ScoreLine):
        units = find_game(table.rules.game).units
        out.score_line.CopyFrom(
            rpb.ScoreLine(
                seat=event.seat,
                kind=event.kind,
                delta=score_to_pb(units, event.delta),
                rule=event.rule,
                note=event.note,
                after_action=event.at,
            )
        )
    elif isinstance(event, Note):
        out.note.kind = event.kind
        out.note.text = event.text
        if event.seat >= 0:
            out.note.seat = event.seat
    elif isinstance(event, HandOver):
        units = find_game(table.rules.game).units
        out.hand_ended.number = event.number
        out.hand_ended.scores.extend(score_to_pb(units, s) for s in event.scores)
    elif isinstance(event, EndEvent):
        out.match_ended.winners.extend(event.winners)
        out.match_ended.reason = event.reason
        out.match_ended.record_id = event.record_id
    elif isinstance(event, ClosedEvent):
        out.table_closed.status = _CLOSED[event.status]
        out.table_closed.reason = event.reason
    elif isinstance(event, CardsPassed):
        passed = event.visible_to(viewer)
        p = out.cards_passed
        p.seat = passed.seat
        p.to_seat = passed.to_seat
        p.cards.extend(iter_cards(passed.cards))
        p.count = passed.count
    elif isinstance(event, CardsTaken):
        taken = event.visible_to(viewer)
        k = out.cards_taken
        k.seat = taken.seat
        k.took = taken.took
        if taken.discarded >= 0:
            k.discarded = taken.discarded
    elif isinstance(event, CardsShown):
        shown = event.visible_to(viewer)
        c = out.cards_shown
        c.seat = shown.seat
        c.cards.extend(iter_cards(shown.cards))
        c.why = shown.why
        c.rule = shown.rule
    else:
        # (HandsChanged goes with its action: tables.py folds it into the ActionEvent.)
        assert isinstance(event, MatchOver), event
        # The engine's end of match; the referee's EndEvent (with the record) follows it.
        out.note.kind = "match-over"
        out.note.text = event.reason
    return out


# --- the servicer --------------------------------------------------------------------------


class RefereeServicer:
    """`tapis.v1.RefereeService` over a `Referee` (registered by `add_referee_service`)."""

    def __init__(
        self,
        referee: Referee,
        limits: Limits = DEFAULT_LIMITS,
        streams: StreamCount | None = None,
    ) -> None:
        self.referee = referee
        self.limits = limits
        self.public_key = public_bytes(referee.key.public_key())
        # WatchTable and PlaySeat streams (and gRPC's own, when the server's interceptor
        # counts them in the same `streams`)
        self._streams = streams or StreamCount(limits.max_streams_per_client)
        self.replays = referee.replays  # the streams sending a backlog at once (web's too)

    def _check(self, request: object) -> None:
        """What every call checks first: the referee ready, the request within bounds."""
        if not self.referee.ready:
            raise self.referee.not_ready()
        check_request(request)

    def _seat_for(
        self, table: Table, seat: int | None, context: grpc.aio.ServicerContext[Any, Any]
    ) -> int | None:
        """The authenticated seat of a call, or None for a spectator (no seat asked)."""
        if seat is None:
            return None
        self.referee.authenticate(table, seat, _token(context))
        return seat

    @_handled
    async def ListGames(
        self, request: pb.ListGamesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListGamesResponse:
        return catalog()

    @_handled
    async def CreateTable(
        self, request: pb.CreateTableRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CreateTableResponse:
        options = options_from_pb(request.options)
        seats = [(s.name, s.open) for s in request.seats]
        time_control = (
            TimeControl.from_pb(request.time_control) if request.HasField("time_control") else None
        )
        table, tokens = await self.referee.create(
            request.game,
            request.ruleset,
            options,
            seats,
            _client(context),
            request.request_id,
            time_control,
        )
        return pb.CreateTableResponse(
            table_id=table.id,
            tokens=[pb.SeatToken(seat=i, token=t) for i, t in tokens],
            commitment=pb.DealCommitment(algorithm="tapis-deal/1", seed_sha256=table.commitment),
        )

    @_handled
    async def JoinTable(
        self, request: pb.JoinTableRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.JoinTableResponse:
        seat = request.seat if request.HasField("seat") else None
        taken, token = await self.referee.join(
            request.table_id, seat, request.name, _client(context), request.request_id
        )
        table = await self.referee.fetch(request.table_id, _client(context))
        return pb.JoinTableResponse(
            token=pb.SeatToken(seat=taken, token=token),
            commitment=pb.DealCommitment(algorithm="tapis-deal/1", seed_sha256=table.commitment),
        )

    @_handled
    async def GetTable(
        self, request: pb.GetTableRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetTableResponse:
        table = await self.referee.fetch(request.table_id, _client(context))
        async with table.lock:  # committed state only
            return pb.GetTableResponse(
                table_id=table.id,
                rules=table_rules(table),
                seats=[
                    pb.TableSeat(seat=i, name=s.name, taken=s.taken, team=table.match.team_of(i))
                    for i, s in enumerate(table.seats)
                ],
                status=table_status(table),
                commitment=pb.DealCommitment(
                    algorithm="tapis-deal/1", seed_sha256=table.commitment
                ),
                action_index=len(table.actions),
                event_index=table.durable_events,
            )

    @_handled
    async def GetView(
        self, request: pb.GetViewRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetViewResponse:
        table = await self.referee.fetch(request.table_id, _client(context))
        seat = self._seat_for(table, request.seat if request.HasField("seat") else None, context)
        async with table.lock:  # committed state only
            view = table.match.view(seat) if table.started else None
            return pb.GetViewResponse(view=seat_view(table, seat, view))

    @_handled
    async def SubmitAction(
        self, request: pb.SubmitActionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.SubmitActionResponse:
        table = await self.referee.fetch(request.table_id, _client(context))
        seat = self._seat_for(table, request.seat, context)
        assert seat is not None
        check_action(request.action)
        index, first, events = await self.referee.submit(
            table, seat, request.expected_action_index, request.action
        )
        reply = pb.SubmitActionResponse()
        _acknowledge(table, seat, index, first, events, reply)
        return reply

    @_handled
    async def Resign(
        self, request: pb.ResignRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ResignResponse:
        table = await self.referee.fetch(request.table_id, _client(context))
        seat = self._seat_for(table, request.seat, context)
        assert seat is not None
        return pb.ResignResponse(action_index=await self.referee.resign(table, seat))

    async def WatchTable(
        self, request: pb.WatchTableRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.WatchTableResponse]:
        slot: Slot | None = None
        backlog: Backlog | None = None
        try:
            self._check(request)
            table = await self.referee.fetch(request.table_id, _client(context))
            seat = self._seat_for(
                table, request.seat if request.HasField("seat") else None, context
            )
            slot = self._streams.open(_client(context))
            batched = request.batch_events
            watched = self.referee.watch(
                table,
                request.from_event_index,
                seat,
                only_turns=request.only_turns,
                hold=batched,
                chunk=MAX_BATCH if batched else WATCH_CHUNK,
            )
            backlog = Backlog(self.replays, _client(context))
            async for batch in watched:
                await backlog.sending(is_backlog(table, batch))
                # Every message of a batch is built before the first is sent (awaited): a
                # turn's view is the state the batch was decided on.
                messages = (
                    _batched(table, batch, seat) if batched else _one_by_one(table, batch, seat)
                )
                for message in messages:
                    yield message
        except asyncio.CancelledError:
            return  # the client went away, or the server is shutting down
        except Exception as exc:
            await _abort(context, exc, request)
        finally:
            if backlog is not None:
                backlog.release()
            if slot is not None:
                slot.release()

    async def PlaySeat(
        self,
        requests: AsyncIterator[pb.PlaySeatRequest | Undecodable],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        slot: Slot | None = None
        first: object = None
        try:
            self._check(None)
            # The stream counts from its start, not from its `open`: else a client could hold
            # any number of calls that never open.
            slot = self._streams.open(_client(context))
            try:
                first = await first_request(requests)
            except TimeoutError:
                raise BadRequest(LATE_REQUEST, "open") from None
            if first is None:  # (a client that goes away cancels the call: not this)
                raise BadRequest("the call's side ended before its first message, `open`", "open")
            check_request(first)
            assert isinstance(first, pb.PlaySeatRequest)
            if first.WhichOneof("kind") != "open":
                raise BadRequest("the first message of PlaySeat opens it (`open`)", "open")
            opening = first.open
            try:
                check_request(opening)
                table = await self.referee.fetch(opening.table_id, _client(context))
                self.referee.authenticate(table, opening.seat, _token(context))
            except BadRequest as exc:  # a field of `open`
                raise BadRequest(str(exc), f"open.{exc.field_name}") from None
            play = _SeatPlay(self, table, opening.seat, opening.from_event_index, context)
            await play.run(requests)
        except asyncio.CancelledError:
            return  # the client went away, or the server is shutting down
        except Exception as exc:
            await _abort(context, exc, first)
        finally:
            if slot is not None:
                slot.release()

    @_handled
    async def GetRecord(
        self, request: pb.GetRecordRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetRecordResponse:
        envelope, rid = await self.referee.stored_record(request.table_id)
        return pb.GetRecordResponse(
            envelope=rpb.RecordEnvelope.FromString(envelope),
            record_id=rid,
            public_key=self.public_key,
        )


MAX_BATCH = 256  # events in one WatchTableResponse of a batched stream


def _one_by_one(
    table: Table, batch: Sequence[tuple[int, TableEventData] | Turn], seat: int | None
) -> list[pb.WatchTableResponse]:
    """A batch of `Referee.watch` as one message per event and one for a turn."""
    messages = []
    for item in batch:
        if isinstance(item, Turn):
            assert seat is not None
            turn = turn_message(table, seat)
            if turn is not None:  # (it is: nothing was awaited since the batch was made)
                messages.append(turn)
            continue
        index, event = item
        response = pb.WatchTableResponse()
        event_message(table, index, event, seat, response.event)
        messages.append(response)
    return messages


Batched = TypeVar("Batched", pb.WatchTableResponse, pb.PlaySeatResponse)


def _batched(
    table: Table,
    batch: Sequence[tuple[int, TableEventData] | Turn],
    seat: int | None,
    make: Callable[[], Batched] = pb.WatchTableResponse,  # type: ignore[assignment]
) -> list[Batched]:
    """A batch of `Referee.watch` as few messages as can be (WatchTableRequest.batch_events):
    its events, MAX_BATCH at most in each, the turn in the last. `make` makes a message
    (a WatchTableResponse, or a PlaySeatResponse: the same `events` and `turn`)."""
    messages = [make()]
    for item in batch:
        if isinstance(item, Turn):
            assert seat is not None
            turn = turn_message(table, seat)
            if turn is not None:  # (it is: nothing was awaited since the batch was made)
                messages[-1].turn.CopyFrom(turn.turn)
            continue
        if len(messages[-1].events) == MAX_BATCH:
            messages.append(make())
        index, event = item
        event_message(table, index, event, seat, messages[-1].events.add())
    return [m for m in messages if m.events or m.HasField("turn")]


def _acknowledge(
    table: Table,
    seat: int,
    index: int,
    first: int,
    events: Sequence[TableEventData],
    out: pb.SubmitActionResponse,
    fresh: Callable[[int], bool] | None = None,
) -> None:
    """The acknowledgement of a submission (`Referee.submit`'s answer) into `out`: its index,
    its events as the seat sees them (those `fresh` keeps, when given) and the seat's next
    view when it must act again at once."""
    out.action_index = index
    add = out.events.add
    for i, e in enumerate(events):
        if fresh is None or fresh(first + i):
            event_message(table, first + i, e, seat, add())
    turn = turn_message(table, seat)
    if turn is not None:
        out.next_view.CopyFrom(turn.turn)


_HALF_CLOSE_WAIT = 1.0  # seconds a PlaySeat stream at the match's end waits for the client


class _SeatPlay:
    """One PlaySeat stream: the seat's held events and turns (`Referee.watch`, only_turns
    and hold, as WatchTable sends them) merged with the answers to its submissions (the
    SubmitAction path), each written on the call by the task that made it (no queue between:
    a message waits for nothing but the one being written); each event sent once, each turn
    once."""

    def __init__(
        self,
        servicer: RefereeServicer,
        table: Table,
        seat: int,
        start: int,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self.servicer = servicer
        self.table = table
        self.seat = seat
        self.start = start
        self.context = context
        self.answering = asyncio.Lock()  # held while a submission is answered
        self.sending = asyncio.Lock()  # held while a message is written: one at a time
        self.low = start  # every event below this index was sent
        self.ahead: set[int] = set()  # events sent at or above `low`
        self.turn_at = -1  # the action index of the last turn (or next_view) sent
        self.over = False  # the table's last event was sent: nothing is sent after it

    def _fresh(self, index: int) -> bool:
        """Whether event `index` is still to send; it counts as sent from now on."""
        if index < self.low or index in self.ahead:
            return False
        if index == self.low:
            self.low += 1
            while self.low in self.ahead:
                self.ahead.remove(self.low)
                self.low += 1
        else:
            self.ahead.add(index)
        return True

    async def _send(self, message: pb.PlaySeatResponse) -> None:
        async with self.sending:
            if self.over:
                # The message with the table's last event (`match_ended`, `table_closed`) is
                # the stream's last: what a client sends after it (a submission then read
                # by the stream's last moments) gets no answer (protocol.md, PlaySeat).
                return
            await self.context.write(message)
            table = self.table
            self.over = table.ended and self.low >= table.durable_events

    async def run(self, requests: AsyncIterator[pb.PlaySeatRequest | Undecodable]) -> None:
        """Send the seat's messages until the table's last event; an error of either side (a
        bug, or the watch's own: an event index past the table's) is raised here."""
        watcher = asyncio.create_task(self._watch())
        reader = asyncio.create_task(self._read(requests))
        try:
            waiting = {watcher, reader}
            while watcher in waiting:  # (the reader ends first when the client half-closes)
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.exception() is not None and self.context.done():
                        return  # the call ended under it (the client went away)
                    task.result()  # a side's error
        finally:
            watcher.cancel()
            if self.over and not reader.done():
                # At the match's end a client closes its side (the SDK does): its reader then
                # ends by itself, and the call ends with no read left pending; one that does
                # not is cancelled after a moment. (Ended under a submission still being
                # written, the call would be INTERNAL to grpcio's client, not OK: a seat may
                # send one as the match ends, by another's resignation or time.) Any other end
                # (an opening refused, an error) comes at once.
                await asyncio.wait({reader}, timeout=_HALF_CLOSE_WAIT)
            reader.cancel()
            await asyncio.gather(watcher, reader, return_exceptions=True)

    async def _watch(self) -> None:
        table, seat = self.table, self.seat
        watched = self.servicer.referee.watch(
            table, self.start, seat, only_turns=True, hold=True, chunk=MAX_BATCH
        )
        try:
            async for batch in watched:
                await self._sent(batch)
        except Stopping as exc:
            if exc.index != self.low:  # the events answers carried are received too
                raise Stopping(self.low) from None
            raise
        async with self.answering:  # the answer to a last submission goes first
            pass

    async def _sent(self, batch: list[tuple[int, TableEventData] | Turn]) -> None:
        """Send a batch of the watch but what the stream sent already (an acknowledgement
        carries the events its submission caused, and a turn is sent once)."""
        if self.answering.locked():
            # A submission is being answered: its acknowledgement goes first, with the
            # events it caused (then not sent again here).
            async with self.answering:
                pass
        kept: list[tuple[int, TableEventData] | Turn] = []
        for item in batch:
            if isinstance(item, Turn):
                if item.action_index != self.turn_at:
                    self.turn_at = item.action_index
                    kept.append(item)
            elif self._fresh(item[0]):
                kept.append(item)
        for message in _batched(self.table, kept, self.seat, pb.PlaySeatResponse):
            await self._send(message)

    async def _read(self, requests: AsyncIterator[pb.PlaySeatRequest | Undecodable]) -> None:
        async for request in requests:
            async with self.answering:
                await self._send(await self._answer(request))

    async def _answer(self, request: pb.PlaySeatRequest | Undecodable) -> pb.PlaySeatResponse:
        """The answer to one submission: SubmitAction's response, or the status SubmitAction
        would end with (`_status_of`); a bug is raised (it ends the call, logged)."""
        table, seat = self.table, self.seat
        about: object = request
        reply = pb.PlaySeatResponse()
        try:
            self.servicer._check(request)
            assert isinstance(request, pb.PlaySeatRequest)
            if request.WhichOneof("kind") != "submit":
                raise BadRequest("the stream is open: each next message is a `submit`", "open")
            about = submit = request.submit
            check_request(submit)
            if submit.table_id != table.id:
                raise BadRequest(f"this stream plays table {table.id}", "table_id")
            if submit.seat != seat:
                raise BadRequest(f"this stream plays seat {seat}", "seat")
            check_action(submit.action)
            index, first, events = await self.servicer.referee.submit(
                table, seat, submit.expected_action_index, submit.action
            )
        except Exception as exc:
            if _grpc_status(exc) is None:
                raise
            status = _status_of(exc, about)
            reply.refused.code = status.code
            reply.refused.message = status.message
            reply.refused.details.extend(status.details)
            return reply
        _acknowledge(table, seat, index, first, events, reply.ack, self._fresh)
        if reply.ack.HasField("next_view"):
            if reply.ack.next_view.action_index == self.turn_at:
                reply.ack.ClearField("next_view")  # the stream's turn gave it already
            else:
                self.turn_at = reply.ack.next_view.action_index
        return reply


def table_rules(table: Table) -> rpb.Rules:
    """A table's rules as its record gives them: game, ruleset, options, time control."""
    rules = rules_to_pb(table.rules)
    if table.time_control is not None:
        rules.time_control.CopyFrom(table.time_control.to_pb())
    return rules
