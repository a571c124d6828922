"""An async Python client of the Tapis referee (`tapis.v1.RefereeService`, grpc.aio).

    async with RefereeClient("127.0.0.1:50051") as client:
        table = await client.create_table("hearts", seats=[("Ann", False), ("Bob", True), ...])
        ann = client.seat(table.table_id, 0, table.tokens[0])
        bob = await client.join(table.table_id, name="Bob")
        async for message in ann.turns():  # one stream for the match, resumed by itself
            if message.HasField("turn"):   # the seat must act: its view
                view = message.turn
                await ann.act(view.legal_actions[0].action, expected_index=view.action_index)
            else:
                ...                         # message.event, in order, each once
        envelope = (await ann.record()).envelope

The turn loop is one call per move: the seat's own stream (`SeatHandle.turns`) says each
time it must act, with its view, and a submission's `next_view` (the seat must act again at
once: it leads the next trick) comes out of the same iteration at once, as a turn; turns the
seat already acted at are left out. `RefereeClient.calls` counts the calls made, by method.

Or the whole match on one call (PlaySeat), the submissions on the stream itself:

        async for message in (play := ann.play()):
            view = message.ack.next_view if message.HasField("ack") else message.turn
            if message.HasField("refused"):
                error = refusal_error(message.refused)  # ActionRefused, StaleAction, ...
            elif view.legal_actions:
                await play.submit(view.legal_actions[0].action, view.action_index)

Messages are the generated ones (`tapis_cartes.v1.referee_pb2`): a view is a `SeatView`, an event a
`TableEvent`. Seat calls carry the metadata `authorization: Bearer <token>`. Every failed
call raises a `RefereeError` (its `status` is the gRPC code); a move the rules refuse raises
`ActionRefused` (rule id, code, reason, legal actions), a submission at a stale action index
`StaleAction` (the table's current index).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError
from grpc_status import rpc_status

from tapis_cartes.referee.engine.actions import action_error
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.options import Option
from tapis_cartes.referee.errors import ActionRefused, RefereeError, RulesError, StaleAction
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc

__all__ = [
    "ActionRefused",
    "CreatedTable",
    "RefereeClient",
    "RefereeError",
    "SeatHandle",
    "SeatPlay",
    "StaleAction",
    "is_finished",
    "option_messages",
    "refusal_error",
    "retries_for",
]

Resp = TypeVar("Resp")
Metadata = tuple[tuple[str, str], ...]

# A watch stream that fails with one of these is resumed; any other code is final.
_RESUMABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.ABORTED,
    }
)
# A unary call that fails with one of these was lost with its connection, or cancelled by a
# referee that stopped (this client's own cancellation raises asyncio.CancelledError instead):
# retried when it is safe to repeat.
_LOST = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]  # as a google.rpc.Code
# A stream that ends cleanly before match_ended is reopened this many times.
_CLEAN_END_RETRIES = 4
_FINISH_WAIT = 5.0  # seconds a PlaySeat call that ended is read to its end before a cancel
# The channel retries a lost connection quickly (the gRPC defaults start at one second), and
# while a call is under way pings the referee after 20 seconds without a ping (it allows one
# each 10 s: referee.proto, "Keepalive"): a connection cut without a word (a stream waiting
# for a turn hears nothing) fails its calls within 30 seconds, to be retried, not waited on
# for ever. gRPC core holds its pings back after two while this side sends nothing (a seat
# waiting for its turn): without `max_pings_without_data` 0, a cut 50 s into such a wait
# failed the call 40 s later, not 20.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.ping_timeout_ms", 10_000),  # (gRPC core's wait for the answer: both set)
    ("grpc.http2.max_pings_without_data", 0),
)


# --- errors --------------------------------------------------------------------------------


def _error(exc: grpc.aio.AioRpcError, tries: int = 1, waited: float = 0.0) -> RefereeError:
    """The SDK exception of a failed call, with the details of its google.rpc.Status. `tries`:
    the last of that many tries in a row, over `waited` seconds (the message says so: a
    referee down longer than the retries last is not a bug of the caller)."""
    try:
        rich = rpc_status.from_call(exc)
    except (ValueError, DecodeError):  # details that disagree with the call, or are no Status
        rich = None
    message = exc.details() or ""
    if tries > 1:
        message += f" (the last of {tries} tries over {waited:.1f} s)"
    return _status_error(exc.code(), message, rich.details if rich else ())


class _Streak:
    """Failures in a row of one call or stream: how many, from when (the first, or the first
    try's start when given), the wait before the next try, and the error once it gives up."""

    def __init__(self, backoff: float, max_backoff: float, since: float | None = None) -> None:
        self.backoff, self.max_backoff = backoff, max_backoff
        self.count = 0
        self.started = since  # the first try's start, when timed from it
        self.since = since or 0.0

    def failed(self) -> int:
        """One more failure in a row; their number."""
        self.count += 1
        if self.count == 1:
            self.since = time.monotonic() if self.started is None else self.started
        return self.count

    def reset(self) -> None:
        """A success: the next failure is the first of a new streak."""
        self.count = 0

    def delay(self) -> float:
        """The wait before the next try (`_pause`)."""
        return _pause(self.count - 1, self.backoff, self.max_backoff)

    def given_up(self, exc: grpc.aio.AioRpcError) -> RefereeError:
        """The error of the last failure, saying how many tries over how long."""
        return _error(exc, self.count, time.monotonic() - self.since)


def _pause(n: int, backoff: float, max_backoff: float) -> float:
    """The wait before retry `n` (from 0) of failures in a row: doubled with each, from
    `backoff` up to `max_backoff` (the doubling stops long before a float would overflow: a
    client of many retries)."""
    return float(min(max_backoff, backoff * 2 ** min(n, 64)))


def retries_for(seconds: float, backoff: float = 0.05, max_backoff: float = 2.0) -> int:
    """The fewest retries whose pauses (doubled from `backoff` with each failure in a row, up
    to `max_backoff`, as `RefereeClient` makes them) add up to `seconds` at least: the
    `retries` of a client that keeps trying that long to reach a referee that is down or
    restarting. ValueError for a setting that is not a positive number of seconds."""
    seconds = _seconds("patience", seconds)
    backoff = _seconds("backoff", backoff)
    max_backoff = _seconds("max_backoff", max_backoff)
    n, waited = 0, 0.0
    while waited < seconds:
        pause = _pause(n, backoff, max_backoff)
        if n >= 64 or pause == max_backoff:  # every pause from here on is this one
            return n + math.ceil((seconds - waited) / pause)
        n += 1
        waited += pause
    return n


def refusal_error(refused: pb.RefusalStatus) -> RefereeError:
    """The SDK exception of a submission refused on a PlaySeat stream (the status SubmitAction
    would end with): `ActionRefused`, `StaleAction` or a `RefereeError`."""
    code = next((c for c in grpc.StatusCode if c.value[0] == refused.code), None)
    return _status_error(code or grpc.StatusCode.UNKNOWN, refused.message, refused.details)


def _status_error(
    status: grpc.StatusCode, message: str, details: Sequence[any_pb2.Any]
) -> RefereeError:
    for detail in details:
        if detail.Is(pb.ActionRefusal.DESCRIPTOR):
            refusal = pb.ActionRefusal()
            detail.Unpack(refusal)
            return ActionRefused(
                message, refusal.rule, refusal.code, refusal.reason, refusal.legal_actions
            )
        if detail.Is(pb.StaleAction.DESCRIPTOR):
            stale = pb.StaleAction()
            detail.Unpack(stale)
            return StaleAction(message, stale.action_index)
    return RefereeError(status, message)


# --- what the referee sends, checked -----------------------------------------------------

# The most a view holds from any game (the Dame de Pique exchange lists 286 choices), and
# the most submissions a seat leaves unanswered on a PlaySeat stream (one at a time, as a
# bot plays): past them a referee is not one this client can play with.
_MOST_SEATS, _MOST_CARDS, _MOST_CHOICES, _MOST_PENDING = 10, 52, 4096, 64


def _bad_reply(what: str) -> RefereeError:
    return RefereeError(grpc.StatusCode.DATA_LOSS, f"the referee sent {what}")


def checked_view(view: pb.SeatView) -> pb.SeatView:
    """`view`, once its seats, cards and choices are ones a game has (`RefereeError`
    DATA_LOSS otherwise): a bot or a person given it then reads no card id of 2**32, no seat
    past the table's, no million choices."""
    seats = [view.seat, view.dealer, *view.to_act, *(k.seat for k in view.known)]
    seats += [p.seat for p in view.trick] + [*view.winners] + [c.seat for c in view.clocks]
    if any(not 0 <= s < _MOST_SEATS for s in seats) or len(view.scores) > _MOST_SEATS:
        raise _bad_reply(f"a view with a seat out of 0..{_MOST_SEATS - 1}")
    hands = [view.hand, *(k.cards for k in view.known), [p.card for p in view.trick]]
    if any(len(h) > _MOST_CARDS or any(not 0 <= c < _MOST_CARDS for c in h) for h in hands):
        raise _bad_reply(f"a view with a card out of 0..{_MOST_CARDS - 1}")
    if not -1 <= view.trump < 4:
        raise _bad_reply(f"a view whose trump is {view.trump}, not a suit")
    if len(view.legal_actions) > _MOST_CHOICES or any(
        action_error(c.action) is not None for c in view.legal_actions
    ):
        raise _bad_reply("a view whose legal actions are not actions of a game")
    return view


def checked_record(got: pb.GetRecordResponse, table_id: str | None = None) -> pb.GetRecordResponse:
    """`got`, once its record verifies (as `tapis record verify` verifies it, without keys:
    its deal, every action, every score) under the id it is given with, and is the record of
    table `table_id` when given (`RefereeError` DATA_LOSS otherwise): a client writes no file
    of bytes that are not the record it asked for."""
    from tapis_cartes.records.codec import decode_record
    from tapis_cartes.records.verify import verify_envelope  # (the engine's replay)

    result = verify_envelope(got.envelope)
    if result.error is not None:
        raise _bad_reply(f"a record that does not verify: {result.error} ({result.error.code})")
    if result.record_id != got.record_id:
        raise _bad_reply(f"record id {got.record_id[:80]!r} for record {result.record_id}")
    if table_id is not None:
        provenance = decode_record(got.envelope.record).provenance
        if (provenance.source, provenance.reference) != ("referee", table_id):
            raise _bad_reply(
                f"the record of {provenance.source} {quoted(provenance.reference, 80)},"
                f" not of table {quoted(table_id, 80)}"
            )
    return got


# --- helpers -------------------------------------------------------------------------------


def _seat_requests(seats: Sequence[tuple[str, bool]]) -> list[pb.SeatRequest]:
    """`create_table`'s seats, each a (name, open) pair: else `RefereeError`
    INVALID_ARGUMENT naming the seat, nothing sent."""
    out = []
    for i, seat in enumerate(seats):
        if not (isinstance(seat, tuple | list) and len(seat) == 2):
            raise RefereeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"seats[{i}] is {quoted(seat)}, not a (name, open) pair: nothing was sent",
            )
        name, open_ = seat
        if not isinstance(open_, bool):
            raise RefereeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"seats[{i}]'s open is {quoted(open_)}, not a bool: nothing was sent",
            )
        out.append(pb.SeatRequest(name=_text_argument(f"seats[{i}]'s name", name), open=open_))
    return out


def _argument(what: str, value: object, most: int = 2**32 - 1) -> int:
    """`value`, a number of a request (a seat, an action, an index), once it is an int in
    0..`most` (its field's range): else `RefereeError` INVALID_ARGUMENT, nothing sent (given
    None, protobuf would send 0: action 0 is a card)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise RefereeError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{what} is {quoted(value)} ({type(value).__name__}), not an int: nothing was sent",
        )
    if not 0 <= value <= most:
        raise RefereeError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{what} {quoted(value)} is out of 0..{most}: nothing was sent",
        )
    return value


def _seconds(what: str, value: object) -> float:
    """A client's setting in seconds, once it is a positive finite number: else ValueError."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 < value < float("inf")
    ):
        raise ValueError(f"{what} is {quoted(value, 40)}: a number of seconds, more than 0")
    return float(value)


_HEADER_KEY = re.compile(r"[0-9a-z_.-]+")


def _metadata_argument(metadata: object) -> None:
    """`metadata` (a call's headers), once each entry is one gRPC may send: a (key, value)
    pair, the key lowercase ASCII letters, digits and `-_.`, the value printable ASCII (else
    `RefereeError` INVALID_ARGUMENT naming it, nothing sent: gRPC's core refused it as
    INTERNAL, a failure to retry)."""
    if not isinstance(metadata, tuple | list):
        raise RefereeError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"metadata is {quoted(metadata)}, not (key, value) pairs: nothing was sent",
        )
    for i, entry in enumerate(metadata):
        if not (
            isinstance(entry, tuple | list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and _HEADER_KEY.fullmatch(entry[0])
            and isinstance(entry[1], str)
            and entry[1].isascii()
            and entry[1].isprintable()
        ):
            raise RefereeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metadata[{i}] is {quoted(entry, 60)}: a header is a (key, value) pair, the key"
                " lowercase letters, digits and -_., the value printable ASCII: nothing was sent",
            )


def _request_id(given: object) -> str:
    """A request's id: `given` (text), or a new UUID when none is given."""
    return (None if given is None else _text_argument("request_id", given)) or uuid.uuid4().hex


def _text_argument(what: str, value: object) -> str:
    """`value`, a text of a request (a table id, a name), once it is a str: else
    `RefereeError` INVALID_ARGUMENT, nothing sent."""
    if not isinstance(value, str):
        raise RefereeError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{what} is {quoted(value)} ({type(value).__name__}), not text: nothing was sent",
        )
    return value


_INDEX = 2**64 - 1  # an action or event index (uint64)


def option_messages(options: Mapping[str, Option] | None) -> list[rpb.Option]:
    """`{"end_threshold": 50}` as the contract's `Option` messages; `RulesError` for an int
    that no `int_value` holds (64 bits, signed), a value that is not a bool, an int or text,
    or options that are not a mapping of names to values."""
    if options is not None and not isinstance(options, Mapping):
        raise RulesError(
            f"options are {type(options).__name__}, not a mapping of names to values", "options"
        )
    out = []
    for key, value in (options or {}).items():
        if not isinstance(key, str):
            raise RulesError(f"option {quoted(key)}: an option's name is text", "options")
        if not isinstance(value, bool | int | str):
            raise RulesError(
                f"option {key!r}: {quoted(value)} ({type(value).__name__}) is no option value "
                "(a bool, an int or text)",
                key,
            )
        if isinstance(value, bool):
            out.append(rpb.Option(key=key, bool_value=value))
        elif isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                shown = quoted(value)
                raise RulesError(f"option {key!r}: {shown} does not fit 64 bits", key)
            out.append(rpb.Option(key=key, int_value=value))
        else:
            out.append(rpb.Option(key=key, string_value=str(value)))
    return out


def is_finished(view: pb.SeatView) -> bool:
    return view.status == pb.TABLE_STATUS_FINISHED


@dataclass(frozen=True)
class CreatedTable:
    table_id: str
    tokens: dict[int, str]  # seat -> token, for the seats the creator took
    commitment: pb.DealCommitment


# --- the client ----------------------------------------------------------------------------


class RefereeClient:
    """A connection to one referee; an async context manager owning a grpc.aio channel.

    `timeout` bounds each unary call (seconds); `retries` is how many times a lost
    connection (or a referee still starting: UNAVAILABLE) is retried, with exponential
    backoff from `backoff` seconds, by the calls that are safe to repeat (reads, creating and
    joining under a request id, a submission at a given index, and resuming a watch).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout: float | None = 30.0,
        retries: int = 8,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
    ) -> None:
        self.address = _text_argument("address", address)
        if timeout is not None:
            _seconds("timeout", timeout)
        self.timeout = timeout
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
            raise ValueError(f"retries is {quoted(retries, 40)}: a number of retries, 0 or more")
        self.retries = retries
        self.backoff = _seconds("backoff", backoff)
        self.max_backoff = _seconds("max_backoff", max_backoff)
        self._channel: grpc.aio.Channel | None = None
        self._stub: referee_pb2_grpc.RefereeServiceAsyncStub | None = None
        # The calls made, by method name: every attempt of a unary call, and every stream
        # opened (a resumed stream counts again).
        self.calls: collections.Counter[str] = collections.Counter()

    async def __aenter__(self) -> RefereeClient:
        self._channel = grpc.aio.insecure_channel(self.address, options=list(_CHANNEL_OPTIONS))
        self._stub = referee_pb2_grpc.RefereeServiceStub(self._channel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None

    def _closed_under_call(self) -> RefereeError | None:
        """For a call cancelled under way: `RefereeError` CANCELLED when this client was
        closed meanwhile (gRPC cancels its calls: the tasks that made them were not), else
        None (the task's own cancellation, which goes on)."""
        task = asyncio.current_task()
        if self._channel is None and (task is None or not task.cancelling()):
            return RefereeError(
                grpc.StatusCode.CANCELLED, "the client was closed while this call was under way"
            )
        return None

    @property
    def stub(self) -> referee_pb2_grpc.RefereeServiceAsyncStub:
        if self._stub is None:
            raise RuntimeError("RefereeClient is not open: use `async with RefereeClient(...)`")
        return self._stub

    def _streak(self, since: float | None = None) -> _Streak:
        """The failures in a row of a call or stream, timed from `since` when given (the
        first try's start), else from the first failure."""
        return _Streak(self.backoff, self.max_backoff, since)

    async def _unary(
        self,
        method: str,
        call: Callable[[], Awaitable[Resp]],
        retry: bool = True,
    ) -> Resp:
        """One unary call (counted in `calls` under `method`); a lost connection (or a call
        the referee cancelled as it stopped) is retried when the call is safe to repeat."""
        failures = self._streak(since=time.monotonic())
        while True:
            try:
                self.calls[method] += 1
                return await call()
            except asyncio.CancelledError:
                if (closed := self._closed_under_call()) is None:
                    raise
                raise closed from None
            except grpc.aio.AioRpcError as exc:
                if failures.failed() > self.retries or not (retry and exc.code() in _LOST):
                    raise failures.given_up(exc) from exc
            await asyncio.sleep(failures.delay())

    # -- games and tables -----------------------------------------------------------------

    async def list_games(self) -> list[pb.GameInfo]:
        resp = await self._unary(
            "ListGames", lambda: self.stub.ListGames(pb.ListGamesRequest(), timeout=self.timeout)
        )
        return list(resp.games)

    async def create_table(
        self,
        game: str,
        ruleset: str = "",
        options: Mapping[str, Option] | None = None,
        seats: Sequence[tuple[str, bool]] = (),
        request_id: str | None = None,
        time_control: rpb.TimeControl | None = None,
    ) -> CreatedTable:
        """Open a table; `seats` is one (name, open) per seat in playing order: the creator
        takes the seats that are not open and receives their tokens. The request carries a
        request id (a new UUID unless given), so a lost connection is retried without making
        a second table. `time_control`: the table's clocks (none by default)."""
        request = pb.CreateTableRequest(
            game=_text_argument("game", game),
            ruleset=_text_argument("ruleset", ruleset),
            options=option_messages(options),
            seats=_seat_requests(seats),
            request_id=_request_id(request_id),
            time_control=time_control,
        )
        resp = await self._unary(
            "CreateTable", lambda: self.stub.CreateTable(request, timeout=self.timeout)
        )
        return CreatedTable(resp.table_id, {t.seat: t.token for t in resp.tokens}, resp.commitment)

    async def join(
        self,
        table_id: str,
        seat: int | None = None,
        name: str = "",
        request_id: str | None = None,
    ) -> SeatHandle:
        """Take an open seat (`seat`, or the first open one); retried after a lost
        connection under the same request id (a new UUID unless given)."""
        request = pb.JoinTableRequest(
            table_id=_text_argument("table_id", table_id),
            name=_text_argument("name", name),
            request_id=_request_id(request_id),
        )
        if seat is not None:
            request.seat = _argument("seat", seat)
        resp = await self._unary(
            "JoinTable", lambda: self.stub.JoinTable(request, timeout=self.timeout)
        )
        return SeatHandle(self, table_id, resp.token.seat, resp.token.token)

    def seat(self, table_id: str, seat: int, token: str) -> SeatHandle:
        """A handle on a seat whose token is known (from `create_table`)."""
        return SeatHandle(self, table_id, seat, token)

    async def table(self, table_id: str) -> pb.GetTableResponse:
        request = pb.GetTableRequest(table_id=_text_argument("table_id", table_id))
        return await self._unary(
            "GetTable", lambda: self.stub.GetTable(request, timeout=self.timeout)
        )

    async def spectate(self, table_id: str) -> pb.SeatView:
        """A spectator's view: public information only."""
        request = pb.GetViewRequest(table_id=_text_argument("table_id", table_id))
        resp = await self._unary(
            "GetView", lambda: self.stub.GetView(request, timeout=self.timeout)
        )
        return checked_view(resp.view)

    async def record(self, table_id: str) -> pb.GetRecordResponse:
        """The signed record of a finished table (envelope, record id, referee's key)."""
        request = pb.GetRecordRequest(table_id=_text_argument("table_id", table_id))
        return checked_record(
            await self._unary(
                "GetRecord", lambda: self.stub.GetRecord(request, timeout=self.timeout)
            ),
            table_id,
        )

    def watch(
        self,
        table_id: str,
        from_index: int = 0,
        seat: int | None = None,
        metadata: Metadata = (),
    ) -> AsyncGenerator[pb.TableEvent, None]:
        """The table's events from `from_index` on (as a spectator unless `seat` and its
        token's `metadata` are given), until the match ends.

        A dropped stream is reopened at the index after the last event received, so the
        events come without gap or duplicate; after `retries` failures in a row without
        an event, the last error is raised. The iteration ends after the `match_ended`
        event. Breaking out of the loop cancels the stream."""
        _text_argument("table_id", table_id)
        _argument("from_index", from_index, _INDEX)
        if seat is not None:
            _argument("seat", seat)
        _metadata_argument(metadata)
        return self._events(table_id, from_index, seat, metadata)

    async def _events(
        self, table_id: str, from_index: int, seat: int | None, metadata: Metadata
    ) -> AsyncGenerator[pb.TableEvent, None]:
        async for message in self._stream(table_id, from_index, seat, metadata):
            if message.HasField("event"):
                yield message.event

    async def _stream(
        self,
        table_id: str,
        from_index: int,
        seat: int | None,
        metadata: Metadata,
        held: bool = False,
    ) -> AsyncGenerator[pb.WatchTableResponse, None]:
        """The messages of WatchTable (events, and a seat's turns) as `watch` says, one event
        or one turn each: resumed from the next event index after a dropped stream, each
        event once. The referee sends them in batches (WatchTableRequest.batch_events); with
        `held`, a seat's events come with its turns (only_turns)."""
        next_index = from_index
        failures = self._streak()
        while True:
            request = pb.WatchTableRequest(
                table_id=table_id, from_event_index=next_index, batch_events=True
            )
            if seat is not None:
                request.seat = seat
                request.only_turns = held
            self.calls["WatchTable"] += 1
            call = self.stub.WatchTable(request, metadata=metadata)
            messages = _one_by_one(call)
            try:
                async for response in messages:
                    if not response.HasField("event"):
                        yield response  # a turn: no index
                        continue
                    event = response.event
                    if event.index < next_index:
                        continue
                    if event.index > next_index:
                        raise RefereeError(
                            grpc.StatusCode.DATA_LOSS,
                            f"watch: event {event.index} came after {next_index - 1}",
                        )
                    next_index += 1
                    failures.reset()
                    yield response
                    if event.HasField("match_ended"):
                        return
                # A stream ends once the table is finished, normally after match_ended, its
                # last event. Ended before it (the referee can close a stream between storing
                # the record and adding that event), the stream is reopened a few times; a
                # start past the end of a finished table ends this way too.
                if failures.failed() > _CLEAN_END_RETRIES:
                    return
            except asyncio.CancelledError:
                if (closed := self._closed_under_call()) is None:
                    raise
                raise closed from None
            except grpc.aio.AioRpcError as exc:
                if failures.failed() > self.retries or exc.code() not in _RESUMABLE:
                    raise failures.given_up(exc) from exc
            finally:
                call.cancel()
                await messages.aclose()
            await asyncio.sleep(failures.delay())


async def _one_by_one(
    call: AsyncIterable[pb.WatchTableResponse],
) -> AsyncGenerator[pb.WatchTableResponse, None]:
    """The messages of a WatchTable call one event or one turn each: a batch (`events`, then
    its `turn`) taken apart."""
    async for response in call:
        if not response.events:
            yield response
            continue
        for event in response.events:
            yield pb.WatchTableResponse(event=event)
        if response.HasField("turn"):
            yield pb.WatchTableResponse(turn=response.turn)


class SeatHandle:
    """One seat of one table, with its token: what the seat sees and does."""

    def __init__(self, client: RefereeClient, table_id: str, seat: int, token: str) -> None:
        _text_argument("table_id", table_id)
        _argument("seat", seat)
        if not (
            _text_argument("token", token).isascii() and token.isprintable()
        ):  # what a gRPC header may carry
            raise RefereeError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"token {token[:40]!r}: a token is printable ASCII (as the referee makes them)",
            )
        self.client = client
        self.table_id = table_id
        self.seat = seat
        self.token = token
        self.acted_at = -1  # the action index of this seat's last acknowledged action
        # The acknowledgements with a next_view, for the `turns` iteration under way.
        self._ahead: collections.deque[pb.SubmitActionResponse] | None = None

    def __repr__(self) -> str:
        return f"SeatHandle(table={self.table_id!r}, seat={self.seat})"

    @property
    def metadata(self) -> Metadata:
        return (("authorization", f"Bearer {self.token}"),)

    async def view(self) -> pb.SeatView:
        """What this seat sees now."""
        c = self.client
        request = pb.GetViewRequest(table_id=self.table_id, seat=self.seat)
        resp = await c._unary(
            "GetView",
            lambda: c.stub.GetView(request, metadata=self.metadata, timeout=c.timeout),
        )
        return checked_view(resp.view)

    async def act(
        self, action: int, expected_index: int | None = None, attempts: int = 5
    ) -> pb.SubmitActionResponse:
        """Submit `action` (a code from the view's legal actions).

        `expected_index` is the `action_index` of the view (or turn) the choice was made on:
        one call. When it is not given, a fresh view's is used, and on ABORTED (another seat
        acted first) the view is re-read and the action resubmitted while the seat is still
        to act (at most `attempts` times). Raises `ActionRefused` when the rules refuse it,
        `StaleAction` (the table's index) when the table moved on under an explicit
        `expected_index` (the seat's stream then brings its next turn). The response's
        `next_view`, when the seat must act again at once, is also the next turn of a `turns`
        iteration under way."""
        _argument("action", action, _INDEX)
        if _argument("attempts", attempts) < 1:
            raise RefereeError(
                grpc.StatusCode.INVALID_ARGUMENT, "attempts is 0, not 1 or more: nothing was sent"
            )
        if expected_index is not None:
            _argument("expected_index", expected_index, _INDEX)
            return await self._submit(
                pb.SubmitActionRequest(
                    table_id=self.table_id,
                    seat=self.seat,
                    expected_action_index=expected_index,
                    action=action,
                )
            )
        index = (await self.view()).action_index
        for attempt in range(1, attempts + 1):
            request = pb.SubmitActionRequest(
                table_id=self.table_id, seat=self.seat, expected_action_index=index, action=action
            )
            try:
                return await self._submit(request)
            except StaleAction as stale:
                stale.view = view = await self.view()
                if self.seat not in view.to_act or attempt == attempts:
                    raise
                index = view.action_index
        raise AssertionError("unreachable")  # pragma: no cover

    async def _submit(self, request: pb.SubmitActionRequest) -> pb.SubmitActionResponse:
        # A repeat at the same index is answered again without effect: safe to retry.
        c = self.client
        resp = await c._unary(
            "SubmitAction",
            lambda: c.stub.SubmitAction(request, metadata=self.metadata, timeout=c.timeout),
        )
        self.acted_at = max(self.acted_at, resp.action_index)
        if self._ahead is not None and resp.HasField("next_view"):
            self._ahead.append(resp)
        return resp

    async def resign(self) -> int:
        """Concede the match; returns the index the resignation took."""
        c = self.client
        request = pb.ResignRequest(table_id=self.table_id, seat=self.seat)
        resp = await c._unary(
            "Resign",
            lambda: c.stub.Resign(request, metadata=self.metadata, timeout=c.timeout),
            retry=False,
        )
        return resp.action_index

    def watch(self, from_index: int = 0) -> AsyncGenerator[pb.TableEvent, None]:
        """The table's events as this seat sees them (its own cards included); resumes by
        itself after a dropped stream (see `RefereeClient.watch`)."""
        return self.client.watch(self.table_id, from_index, self.seat, self.metadata)

    async def turns(
        self, from_index: int = 0, held: bool = False
    ) -> AsyncGenerator[pb.WatchTableResponse, None]:
        """The seat's stream, to play a match by (one WatchTable for the match): the table's
        events from `from_index` on, in order and each once (`event`), and a `turn` (the
        seat's view) each time the seat must act; it ends after `match_ended` (or
        `table_closed`).

        Act on a turn with `act(choice, expected_index=turn.action_index)`. When the
        acknowledgement has a `next_view` (the seat must act again at once), the events of the
        action and that view come next from here, at once, before the stream brings them. A
        turn at an action index the seat has already acted at, or already given, is left out
        (stale). A dropped stream is reopened at the next event index (the referee sends the
        turn again at the end of the backlog if it is still due). With `held`, the events
        are held back by the referee until the seat's turn (or the match's end) and come
        with it: a bot that acts on its turns only needs no more (WatchTableRequest.only_turns
        with batch_events: one message per turn)."""
        ahead: collections.deque[pb.SubmitActionResponse] = collections.deque()
        self._ahead = ahead
        _argument("from_index", from_index, _INDEX)
        stream = self.client._stream(self.table_id, from_index, self.seat, self.metadata, held)
        next_index = from_index  # the next event to give
        given = -1  # the action index of the last turn given

        def due(view: pb.SeatView) -> bool:
            return view.action_index > max(self.acted_at, given)

        try:
            while True:
                while ahead:
                    # An acknowledgement with a next_view: its events not given yet, then the
                    # view, when they follow on from what was given (else the stream brings
                    # the events, and the turn if it is still due).
                    resp = ahead.popleft()
                    events = [e for e in resp.events if e.index >= next_index]
                    if events and events[0].index != next_index:
                        continue
                    for event in events:
                        next_index = event.index + 1
                        yield pb.WatchTableResponse(event=event)
                        if event.HasField("match_ended") or event.HasField("table_closed"):
                            return
                    view = checked_view(resp.next_view)
                    if next_index == view.event_index and due(view):
                        given = view.action_index
                        yield pb.WatchTableResponse(turn=view)
                try:
                    message = await anext(stream)
                except StopAsyncIteration:
                    return
                if message.HasField("turn"):
                    if due(checked_view(message.turn)):
                        given = message.turn.action_index
                        yield message
                    continue
                event = message.event
                if event.index < next_index:
                    continue  # given from an acknowledgement already
                next_index = event.index + 1
                yield message
                if event.HasField("match_ended") or event.HasField("table_closed"):
                    return
        finally:
            self._ahead = None
            await stream.aclose()

    def play(self, from_index: int = 0) -> SeatPlay:
        """The seat's match on one call (PlaySeat, when the referee offers it): iterate over
        its messages, `submit` on each turn; see `SeatPlay`."""
        return SeatPlay(self, _argument("from_index", from_index, _INDEX))

    async def table(self) -> pb.GetTableResponse:
        return await self.client.table(self.table_id)

    async def record(self) -> pb.GetRecordResponse:
        return await self.client.record(self.table_id)


class SeatPlay:
    """A seat's match on one PlaySeat call: `async for message in play` gives each
    `PlaySeatResponse` (held events and the seat's `turn`, or the answer to a submission: `ack`,
    or `refused`, whose SDK exception `refusal_error` makes), until the match ends (the message
    with `match_ended` or `table_closed`); `submit` sends a submission without waiting for its
    answer, which comes as a message (a submission refused UNAVAILABLE, the referee unable to
    take it now, is sent again after a pause, `retries` times at most). A dropped stream is
    reopened at the next event index not received (the referee sends the turn again if it is
    still due; a submission lost with the stream is not answered: act on that turn again). A
    referee without PlaySeat: `RefereeError` UNIMPLEMENTED from the first iteration. Breaking
    out cancels the call."""

    def __init__(self, handle: SeatHandle, from_index: int = 0) -> None:
        self.handle = handle
        self.next_index = from_index  # every event below it was received
        self._ahead: set[int] = set()  # events received at or above next_index
        self._call: grpc.aio.StreamStreamCall[pb.PlaySeatRequest, pb.PlaySeatResponse] | None
        self._call = None
        # The submissions sent on this call and not answered yet, in order.
        self._pending: collections.deque[pb.PlaySeatRequest] = collections.deque()

    async def submit(self, action: int, expected_index: int) -> None:
        """Send a submission (a code of the turn's legal_actions, at its action_index)."""
        _argument("action", action, _INDEX)
        _argument("expected_index", expected_index, _INDEX)
        h = self.handle
        request = pb.PlaySeatRequest(
            submit=pb.SubmitActionRequest(
                table_id=h.table_id, seat=h.seat, expected_action_index=expected_index,
                action=action,
            )
        )  # fmt: skip
        await self._write(request)

    async def _write(self, request: pb.PlaySeatRequest) -> None:
        if self._call is None:
            raise RuntimeError("the PlaySeat stream is not open: iterate over it first")
        if len(self._pending) >= _MOST_PENDING:
            raise _bad_reply(f"no answer to {_MOST_PENDING} submissions in a row")
        self._pending.append(request)
        # A stream that failed: the iteration says how, and resumes.
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await self._call.write(request)

    def __aiter__(self) -> AsyncGenerator[pb.PlaySeatResponse, None]:
        return self._messages()

    def _received(self, index: int) -> None:
        if index == self.next_index:
            self.next_index += 1
            while self.next_index in self._ahead:
                self._ahead.remove(self.next_index)
                self.next_index += 1
        elif index > self.next_index:
            self._ahead.add(index)

    async def _open(self) -> grpc.aio.StreamStreamCall[pb.PlaySeatRequest, pb.PlaySeatResponse]:
        h, c = self.handle, self.handle.client
        c.calls["PlaySeat"] += 1
        call = c.stub.PlaySeat(metadata=h.metadata)
        self._ahead.clear()
        self._pending.clear()  # lost with the stream: the turn comes again if still due
        opening = pb.PlaySeatOpen(
            table_id=h.table_id, seat=h.seat, from_event_index=self.next_index
        )
        await call.write(pb.PlaySeatRequest(open=opening))
        return call

    async def _messages(self) -> AsyncGenerator[pb.PlaySeatResponse, None]:
        c = self.handle.client
        failures = c._streak()
        unavailable = c._streak()  # submissions the referee could not take, in a row
        try:
            while True:
                try:
                    if self._call is None:
                        self._call = await self._open()
                    message = await self._call.read()
                except asyncio.CancelledError:
                    if (closed := c._closed_under_call()) is None:
                        raise
                    raise closed from None
                except grpc.aio.AioRpcError as exc:
                    if failures.failed() > c.retries or exc.code() not in _RESUMABLE:
                        raise failures.given_up(exc) from exc
                    self._drop()
                    await asyncio.sleep(failures.delay())
                    continue
                if message is grpc.aio.EOF:  # ended before the match did: reopened
                    self._drop()
                    if failures.failed() > _CLEAN_END_RETRIES:
                        return
                    await asyncio.sleep(failures.delay())
                    continue
                assert isinstance(message, pb.PlaySeatResponse)
                failures.reset()
                checked_view(message.turn)
                checked_view(message.ack.next_view)
                if message.WhichOneof("result") is not None and self._pending:
                    request = self._pending.popleft()
                    if message.HasField("refused") and message.refused.code == _UNAVAILABLE:
                        # The referee could not take it now (starting, stopping, or its store
                        # failed: nothing changed): sent again, a retry at the same index.
                        if unavailable.failed() <= c.retries:
                            await asyncio.sleep(unavailable.delay())
                            await self._write(request)
                            continue
                    else:
                        unavailable.reset()
                ended = False
                events = message.ack.events if message.HasField("ack") else message.events
                for event in events:
                    self._received(event.index)
                    ended = ended or event.HasField("match_ended") or event.HasField("table_closed")
                if message.HasField("ack"):
                    self.handle.acted_at = max(self.handle.acted_at, message.ack.action_index)
                if ended:
                    await self._finish()
                yield message
                if ended:
                    return
        finally:
            self._drop()

    async def _finish(self) -> None:
        """The match is over: close our side and read the call to its end (the referee ends
        it), rather than cancel it; a call that does not end soon is cancelled."""
        call, self._call = self._call, None
        if call is None:
            return
        try:
            await asyncio.wait_for(self._drain(call), _FINISH_WAIT)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
            call.cancel()

    @staticmethod
    async def _drain(
        call: grpc.aio.StreamStreamCall[pb.PlaySeatRequest, pb.PlaySeatResponse],
    ) -> None:
        await call.done_writing()
        while await call.read() is not grpc.aio.EOF:
            pass

    def _drop(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
