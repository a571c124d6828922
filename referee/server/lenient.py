"""Requests that do not decode: `Undecodable`, answered INVALID_ARGUMENT in the method, never
UNKNOWN with an error and its traceback in the log. The RefereeService decodes its requests
with `lenient` (service.py `add_referee_service`); the services the referee takes from
gRPC's own packages (health checking, reflection) get it from `LenientRequests`.

Those packages register their handlers with the messages' `FromString`: bytes that are not
the request raise in gRPC's own code, which answers UNKNOWN. `LenientRequests`, a server
interceptor, gives each such handler a deserializer that returns `Undecodable` instead, and a
method that answers it INVALID_ARGUMENT naming the request's type (a stream's request read
so ends the call the same way). The RefereeService's own handlers are left as they are.

A request that decodes but holds a field the decoder could not read as the request's field
(`unread_field`: a field number the message does not have, or a known field sent with another
wire type) is `Undecodable` too, naming that field: protobuf's decoder keeps such a field
aside and reads the request as if it were not there (an `action` sent length-delimited is read
as action 0), and the referee acts on no request other than the one sent.

A field of 32 bits (int32, uint32, sint32, an enum) sent with a value that does not fit it
(`narrowed_field`: a varint of up to 64 bits, whose low 32 bits protobuf's decoder keeps, so
that an `action_ms` of 2^32 + 100 reads as 100) is `Undecodable` the same way, naming the
field and the value sent. Only a request whose bytes are longer than it serializes to can
hold one: the others are not walked.

A method of one request is registered as a method of a stream of requests (`one_request`),
the services' and the RefereeService's alike: a call that ends its side with no request is
INVALID_ARGUMENT, not left without a status, and so is one whose request has not come within
REQUEST_SECONDS (a call half-sent holds its connection open). The streams of gRPC's own
services count among their client's streams (`StreamCount`), as the RefereeService's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from tapis_cartes.records.codec import varint_at
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.errors import TooMany
from tapis_cartes.referee.server.limits import StreamCount, client_of
from tapis_cartes.v1 import referee_pb2

__all__ = [
    "LATE_REQUEST",
    "NO_REQUEST",
    "REQUEST_SECONDS",
    "LenientRequests",
    "Undecodable",
    "first_request",
    "lenient",
    "narrowed_field",
    "one_request",
    "served",
    "unchained",
    "unread_field",
]

_OURS = f"/{referee_pb2.DESCRIPTOR.services_by_name['RefereeService'].full_name}/"


class Undecodable:
    """A request whose bytes do not decode (refused as INVALID_ARGUMENT, not UNKNOWN); with
    `unread`, they decode but hold that field, not read as sent (`unread_field`: its path, or
    "request" for a field number the request does not have)."""

    def __init__(self, name: str, error: str, unread: str | None = None) -> None:
        self.name = name
        self.error = error
        self.field = unread or "request"  # the field a refusal names
        self.unread = unread is not None

    @property
    def text(self) -> str:
        """What is wrong, for a status's message (after the field's name)."""
        if self.unread:
            return f"{self.error}: the {self.name} is not read as it was sent"
        return f"the request does not decode as {self.name} ({quoted(self.error, 120)})"


# How each wire type sends a field, and the wire type of each type of field (a repeated number
# may also come packed, length-delimited: the decoder reads both).
_WIRE = {
    0: "a varint (wire type 0)",
    1: "8 fixed bytes (wire type 1)",
    2: "length-delimited (wire type 2)",
    3: "a group (wire type 3)",
    4: "a group's end (wire type 4)",
    5: "4 fixed bytes (wire type 5)",
}
_FIXED64 = {
    FieldDescriptor.TYPE_DOUBLE,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}
_FIXED32 = {FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32}
_DELIMITED = {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE}


def _wire_of(field: Any) -> int:  # (upb's or the pure descriptor type)
    if field.type in _DELIMITED:
        return 2
    return 1 if field.type in _FIXED64 else 5 if field.type in _FIXED32 else 0


_messages_in: dict[str, tuple[Any, ...]] = {}


def _message_fields(descriptor: Any) -> tuple[Any, ...]:
    """The fields of a message type that hold messages (the requests have no maps)."""
    fields = _messages_in.get(descriptor.full_name)
    if fields is None:
        fields = tuple(f for f in descriptor.fields if f.type == FieldDescriptor.TYPE_MESSAGE)
        _messages_in[descriptor.full_name] = fields
    return fields


def unread_field(message: Message, path: str = "") -> tuple[str, str] | None:
    """The first field that `message`'s bytes held and its decoder did not read as a field of
    the message, in it or in a message it holds: (its path, e.g. `seats[1].name`, or the
    message's own when the number is none of its fields; what was sent); None if every one was
    read."""
    descriptor = message.DESCRIPTOR
    unknowns = UnknownFieldSet(message)
    if len(unknowns):
        unknown = unknowns[0]
        number, wire = unknown.field_number, unknown.wire_type
        sent = _WIRE.get(wire, f"wire type {wire}")
        field = descriptor.fields_by_number.get(number)
        if field is None:
            return (
                path or "request",
                f"field {number}, sent as {sent}, is none of {descriptor.full_name}'s",
            )
        return (
            f"{path}.{field.name}" if path else field.name,
            f"sent as {sent}; field {number} of {descriptor.full_name} is sent as "
            f"{_WIRE[_wire_of(field)]}",
        )
    for field in _message_fields(descriptor):
        name = f"{path}.{field.name}" if path else field.name
        if field.is_repeated:
            for i, item in enumerate(getattr(message, field.name)):
                if isinstance(item, Message) and (found := unread_field(item, f"{name}[{i}]")):
                    return found
        elif message.HasField(field.name) and (
            found := unread_field(getattr(message, field.name), name)
        ):
            return found
    return None


# The fields of 32 bits sent as varints, and the name of each type.
_NARROW = {
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_SINT32: "sint32",
    FieldDescriptor.TYPE_ENUM: "enum (int32)",
}
_UNSIGNED = {FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_SINT32}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at `i` (the bytes decoded already: it ends) and where it ends."""
    found = varint_at(data, i, len(data))
    assert found is not None  # (protobuf decoded these bytes)
    return found


def _fits(kind: int, value: int) -> bool:
    """Whether a varint's value (its 64 bits unsigned) is one of a field of `kind`: under
    2^32 (uint32, sint32's zigzag), or an int32 as 64 bits in two's complement."""
    if kind in _UNSIGNED:
        return value < 1 << 32
    return value < 1 << 31 or (1 << 64) - (1 << 31) <= value < 1 << 64


def _shown(kind: int, value: int) -> str:
    if kind in _UNSIGNED or value < 1 << 63:
        return str(value)
    return str(value - (1 << 64))  # (an int32's varint: a signed 64-bit value)


_narrow_in: dict[str, bool] = {}


def _holds_narrow(descriptor: Any, seen: frozenset[str] = frozenset()) -> bool:
    """Whether a message type holds a field of 32 bits (`_NARROW`), in it or a message it
    holds: a message that holds none is not walked."""
    name = descriptor.full_name
    known = _narrow_in.get(name)
    if known is None:
        known = any(
            f.type in _NARROW
            or (
                f.type == FieldDescriptor.TYPE_MESSAGE
                and f.message_type.full_name not in seen
                and _holds_narrow(f.message_type, seen | {name})
            )
            for f in descriptor.fields
        )
        _narrow_in[name] = known
    return known


def narrowed_field(data: bytes, descriptor: Any, path: str = "") -> tuple[str, str] | None:
    """The first field of 32 bits (`_NARROW`) whose value in `data`, a message of type
    `descriptor` that decoded, does not fit it, in it or a message it holds: (its path,
    what was sent); None if each fits."""
    seen: dict[int, int] = {}  # the items of each repeated message field so far
    i, end = 0, len(data)
    try:
        while i < end:
            key, i = _varint(data, i)
            number, wire = key >> 3, key & 7
            field = descriptor.fields_by_number.get(number)
            name = "" if field is None else f"{path}.{field.name}" if path else field.name
            if wire == 0:
                value, i = _varint(data, i)
                values = [value]
            elif wire == 2:
                length, i = _varint(data, i)
                chunk, i = data[i : i + length], i + length
                values = []
                if (
                    field is not None
                    and field.type == FieldDescriptor.TYPE_MESSAGE
                    and _holds_narrow(field.message_type)
                ):
                    if field.is_repeated:
                        n = seen[number] = seen.get(number, -1) + 1
                        name = f"{name}[{n}]"
                    found = narrowed_field(chunk, field.message_type, name)
                    if found is not None:
                        return found
                elif field is not None and field.type in _NARROW:  # packed
                    j = 0
                    while j < len(chunk):
                        value, j = _varint(chunk, j)
                        values.append(value)
            else:
                i += 8 if wire == 1 else 4 if wire == 5 else end  # (no groups: decoded)
                values = []
            if field is not None and field.type in _NARROW:
                for value in values:
                    if not _fits(field.type, value):
                        kind = _NARROW[field.type]
                        return name, f"{_shown(field.type, value)} does not fit its type, {kind}"
    except IndexError:  # (bytes that decoded end their varints: not reached)
        return None
    return None


def lenient(deserialize: Callable[[bytes], Any] | None, name: str) -> Callable[[bytes], Any]:
    """`deserialize`, giving `Undecodable` (naming the message `name`) for bytes that are
    not the message, or that hold a field it does not read as sent (`unread_field`); None:
    the bytes as they are."""

    def deserialized(data: bytes) -> Any:
        try:
            request = deserialize(data) if deserialize is not None else data
        except (DecodeError, ValueError, RecursionError) as exc:
            return Undecodable(name, str(exc))
        if isinstance(request, Message):
            unread = unread_field(request)
            if unread is None and request.ByteSize() != len(data):
                # (a value that does not fit its field is sent longer than it serializes)
                unread = narrowed_field(data, request.DESCRIPTOR)
            if unread is not None:
                return Undecodable(name, unread[1], unread[0])
        return request

    return deserialized


async def _refuse(request: Undecodable, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{request.field}: {request.text}")


async def _decoded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    """`request`, once it decoded: else the call is ended INVALID_ARGUMENT."""
    if isinstance(request, Undecodable):
        await _refuse(request, context)
    return request


def _unary_in(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """The method for one request: `behavior`, or INVALID_ARGUMENT for one that does not
    decode; of the same kind (a coroutine, or an async generator of the responses)."""
    return around(behavior, given=_decoded)


NO_REQUEST = "the call's side ended with no request (a unary request is one message)"

# Seconds a call's request (its first message: PlaySeat's `open`) may take to come after the
# call began: a call left without it holds its connection (not idle, not closed) and a stream
# of it, which half-sent calls by the thousand would keep from every other client.
REQUEST_SECONDS = 10.0
LATE_REQUEST = f"the call's request did not come within {REQUEST_SECONDS:g} s of the call"


async def first_request(requests: AsyncIterator[Any]) -> Any:
    """The first message of a call's requests (None when its side ended with none);
    `TimeoutError` when it has not come within REQUEST_SECONDS."""
    async with asyncio.timeout(REQUEST_SECONDS):
        return await anext(aiter(requests), None)


async def _late(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: {LATE_REQUEST}")


async def _no_request(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request: {NO_REQUEST}")


def one_request(
    behavior: Callable[..., Any],
    refuse: Callable[[grpc.aio.ServicerContext[Any, Any]], Awaitable[None]] = _no_request,
) -> Callable[..., Any]:
    """`behavior`, a method of one request, as a method of a stream of requests: it is
    given the first (the stream's later messages, which no client of the method sends, are
    not read); a call whose side ends with none is ended by `refuse` (INVALID_ARGUMENT,
    NO_REQUEST). (Registered as a method of one request, such a call would get no status at
    all: gRPC's own handler returns without one, and the call waits for the client to cancel
    it.) Same kind: a coroutine, or an async generator of the responses."""

    async def opened(requests: AsyncIterator[Any], context: Any) -> Any:
        """The call's request; the call ended (INVALID_ARGUMENT) when late or missing."""
        try:
            request = await first_request(requests)
        except TimeoutError:
            await _late(context)
        if request is None:
            await refuse(context)
        return request

    return around(behavior, given=opened)


def _stream_in(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """The method for a stream of requests: `behavior` reading them, the call ended
    INVALID_ARGUMENT at the first that does not decode."""

    async def checked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async def each() -> AsyncIterator[Any]:
            async for request in requests:
                yield await _decoded(request, context)

        return each()

    return around(behavior, given=checked)


def _counted(behavior: Callable[..., Any], streams: StreamCount) -> Callable[..., Any]:
    """A method that streams its responses, holding one of its client's streams (`streams`)
    while it runs: RESOURCE_EXHAUSTED past the client's limit. Same kind: a coroutine, or an
    async generator of the responses."""

    @contextlib.asynccontextmanager
    async def holding(context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
        try:
            slot = streams.open(client_of(context.peer()))
        except TooMany as exc:
            await context.abort(grpc.StatusCode[exc.grpc_status], str(exc))
        try:
            yield
        finally:
            slot.release()

    return around(behavior, within=holding)


class _LetGo:
    """The exception that ends an aborted call (`grpc.aio.AbortError`) caught, let go of
    what it holds, and not raised further (`unchained`)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if not isinstance(exc, grpc.aio.AbortError):
            return False
        exc.__traceback__ = None  # (its frames)
        exc.__context__ = exc.__cause__ = None  # (the refusal it was raised with, its frames)
        return True


_LET_GO = _LetGo()  # (it holds nothing: one for every call)
_NOTHING = contextlib.nullcontext()  # (an async context manager too)

# The most metadata a call may carry, in bytes as gRPC counts them (each entry's key and
# value and 32 more): gRPC's own hard bound (`grpc.absolute_max_metadata_size`, 16 KiB).
MAX_METADATA = 16 << 10


def metadata_size(context: grpc.aio.ServicerContext[Any, Any]) -> int:
    """The size of the call's metadata, as gRPC counts it against its bound."""
    return sum(len(k) + len(v) + 32 for k, v in context.invocation_metadata() or ())


def _metadata_bounded(context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    """Nothing to do, or the call ended RESOURCE_EXHAUSTED as it begins when its metadata is
    past MAX_METADATA. gRPC refuses such a call itself, but only once the client has
    acknowledged the server's settings: a client that sends its calls at once (raw HTTP/2)
    had up to 16 MiB of metadata a call taken, each held while the call waited for its
    request (10 s): one connection made the referee 850 MB larger. Ended here, the call lets
    go of it at once."""
    size = metadata_size(context)
    if size <= MAX_METADATA:
        return _NOTHING
    return _Refusing(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f"metadata: {size:,} bytes; at most {MAX_METADATA:,} (gRPC's bound)",
        context,
    )


class _Refusing:
    """An async context manager that ends the call with a status as it is entered."""

    def __init__(
        self, code: grpc.StatusCode, text: str, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.code, self.text, self.context = code, text, context

    async def __aenter__(self) -> None:
        await self.context.abort(self.code, self.text)

    async def __aexit__(self, *exc: object) -> None:
        return None


def served(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """The outermost wrappers of every method the referee serves, its own and gRPC's
    services': its metadata bounded (`_metadata_bounded`), the aborted call let go
    (`unchained`)."""
    return unchained(around(behavior, within=_metadata_bounded))


def unchained(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """`behavior` as gRPC calls it, the exception that ends an aborted call let go of what it
    holds. gRPC keeps the exception of `context.abort` on the call's state; raised through
    the referee's frames, its traceback (and the exception it was raised while handling,
    with its own) holds them, and each holds the call's context, which holds that state: a
    cycle of about 40 objects a refused call, which the young collections leave once the
    call outlives one of them, and only a full collection frees (the referee makes one every
    10 minutes: app.py `sweep_garbage`). A client refused 2,000 calls a second held 3 MB
    more each second. Caught here, stripped, and not raised further: gRPC ends the call with
    the aborted status all the same. The outermost wrapper of every method the referee
    serves (`served`). Same kind: a coroutine, or an async generator."""
    return around(behavior, within=lambda context: _LET_GO)


def around(
    behavior: Callable[..., Any],
    given: Callable[[Any, Any], Awaitable[Any]] | None = None,
    within: Callable[[Any], contextlib.AbstractAsyncContextManager[Any]] | None = None,
) -> Callable[..., Any]:
    """`behavior(argument, context)`, a method as gRPC calls it (a coroutine function, or an
    async generator function of the responses), as a method of the same kind that gives it
    `await given(argument, context)` (default: the argument as it came) and runs, the
    argument's making included, within `within(context)` (an async context manager; default:
    none). A method whose `behavior` returns a plain value is a coroutine."""

    enclosing = within or (lambda context: _NOTHING)
    if inspect.isasyncgenfunction(behavior):

        async def each(arg: Any, context: Any) -> Any:
            async with enclosing(context):
                if given is not None:
                    arg = await given(arg, context)
                async for response in behavior(arg, context):
                    yield response

        return each

    async def one(arg: Any, context: Any) -> Any:
        async with enclosing(context):
            if given is not None:
                arg = await given(arg, context)
            result = behavior(arg, context)
            return await result if inspect.isawaitable(result) else result

    return one


class LenientRequests(grpc.aio.ServerInterceptor):
    """The interceptor (see the module's docstring); with `streams`, each stream of responses
    of gRPC's own services (health Watch, reflection) counts among its client's streams."""

    def __init__(self, streams: StreamCount | None = None) -> None:
        self.streams = streams

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(_OURS):
            return handler
        source = getattr(handler.request_deserializer, "__self__", None)  # (its class)
        message = getattr(source, "DESCRIPTOR", None)
        name = message.full_name if message is not None else f"{method}'s request"
        kept: dict[str, Any] = {
            "request_deserializer": lenient(handler.request_deserializer, name),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            unary = one_request(_unary_in(handler.unary_unary))
            return grpc.stream_unary_rpc_method_handler(served(unary), **kept)
        if handler.unary_stream is not None:
            streamed = one_request(_unary_in(handler.unary_stream))
            if self.streams is not None:
                streamed = _counted(streamed, self.streams)
            return grpc.stream_stream_rpc_method_handler(served(streamed), **kept)
        if handler.stream_unary is not None:
            read = _stream_in(handler.stream_unary)
            return grpc.stream_unary_rpc_method_handler(served(read), **kept)
        assert handler.stream_stream is not None
        both = _stream_in(handler.stream_stream)
        if self.streams is not None:
            both = _counted(both, self.streams)
        return grpc.stream_stream_rpc_method_handler(served(both), **kept)
