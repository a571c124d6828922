"""Requests that do not decode: `Undecodable`, answered INVALID_ARGUMENT in the method, never
UNKNOWN with an error and its traceback in the log. The RefereeService decodes its requests
with `lenient` (service.py `add_referee_service`); the services the referee takes from
gRPC's own packages (health checking, reflection) get it from `LenientRequests`.

Those packages register their handlers with the messages' `FromString`: bytes that are not
the request raise in gRPC's own code, which answers UNKNOWN. `LenientRequests`, a server
interceptor, gives each such handler a deserializer that returns `Undecodable` instead, and a
method that answers it INVALID_ARGUMENT naming the request's type (a stream's request read
so ends the call the same way). The RefereeService's own handlers are left as they are.

A method of one request is registered as a method of a stream of requests (`one_request`),
the services' and the RefereeService's alike: a call that ends its side with no request is
INVALID_ARGUMENT, not left without a status.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.v1 import referee_pb2

__all__ = ["NO_REQUEST", "LenientRequests", "Undecodable", "lenient", "one_request"]

_OURS = f"/{referee_pb2.DESCRIPTOR.services_by_name['RefereeService'].full_name}/"


class Undecodable:
    """A request whose bytes do not decode (refused as INVALID_ARGUMENT, not UNKNOWN)."""

    def __init__(self, name: str, error: str) -> None:
        self.name = name
        self.error = error


def lenient(deserialize: Callable[[bytes], Any] | None, name: str) -> Callable[[bytes], Any]:
    """`deserialize`, giving `Undecodable` (naming the message `name`) for bytes that are
    not the message; None: the bytes as they are."""

    def deserialized(data: bytes) -> Any:
        try:
            return deserialize(data) if deserialize is not None else data
        except (DecodeError, ValueError, RecursionError) as exc:
            return Undecodable(name, str(exc))

    return deserialized


async def _refuse(request: Undecodable, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"request: the request does not decode as {request.name} ({quoted(request.error, 120)})",
    )


def _unary_in(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """The method for one request: `behavior`, or INVALID_ARGUMENT for one that does not
    decode; of the same kind (a coroutine, or an async generator of the responses)."""
    if inspect.isasyncgenfunction(behavior):

        async def each(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, Undecodable):
                await _refuse(request, context)
            async for response in behavior(request, context):
                yield response

        return each

    async def one(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, Undecodable):
            await _refuse(request, context)
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return one


NO_REQUEST = "the call's side ended with no request (a unary request is one message)"


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
    if inspect.isasyncgenfunction(behavior):

        async def each(requests: AsyncIterator[Any], context: Any) -> Any:
            request = await anext(aiter(requests), None)
            if request is None:
                await refuse(context)
            async for response in behavior(request, context):
                yield response

        return each

    async def one(requests: AsyncIterator[Any], context: Any) -> Any:
        request = await anext(aiter(requests), None)
        if request is None:
            await refuse(context)
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return one


def _stream_in(behavior: Callable[..., Any]) -> Callable[..., Any]:
    """The method for a stream of requests: `behavior` reading them, the call ended
    INVALID_ARGUMENT at the first that does not decode."""

    def checked(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        async def each() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, Undecodable):
                    await _refuse(request, context)
                yield request

        return each()

    if inspect.isasyncgenfunction(behavior):

        async def each(requests: AsyncIterator[Any], context: Any) -> Any:
            async for response in behavior(checked(requests, context), context):
                yield response

        return each

    async def one(requests: AsyncIterator[Any], context: Any) -> Any:
        result = behavior(checked(requests, context), context)
        return await result if inspect.isawaitable(result) else result

    return one


class LenientRequests(grpc.aio.ServerInterceptor):
    """The interceptor (see the module's docstring)."""

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
            return grpc.stream_unary_rpc_method_handler(unary, **kept)
        if handler.unary_stream is not None:
            streamed = one_request(_unary_in(handler.unary_stream))
            return grpc.stream_stream_rpc_method_handler(streamed, **kept)
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(_stream_in(handler.stream_unary), **kept)
        assert handler.stream_stream is not None
        return grpc.stream_stream_rpc_method_handler(_stream_in(handler.stream_stream), **kept)
