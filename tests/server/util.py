"""Helpers of the referee tests: a real referee on a free port, tables, random play."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from clients.sdk import option_messages
from referee.server.app import Limits, create_server
from tapis.v1 import record_pb2 as rpb
from tapis.v1 import referee_pb2 as pb
from tapis.v1 import referee_pb2_grpc as rpc


def run(coro_fn: Callable[..., Awaitable[Any]], tmp_path: Path, **limits: Any) -> Any:
    async def main() -> Any:
        server = await create_server(
            "127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key", Limits(**limits)
        )
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                return await coro_fn(server, rpc.RefereeServiceStub(channel), channel)
        finally:
            await server.stop(0)

    return asyncio.run(main())


def option(key: str, value: Any) -> rpb.Option:
    return option_messages({key: value})[0]


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def new_table(
    stub: rpc.RefereeServiceStub, game: str, ruleset: str, options: dict[str, Any], n: int
) -> tuple[str, dict[int, str]]:
    resp = await stub.CreateTable(
        pb.CreateTableRequest(
            game=game,
            ruleset=ruleset,
            options=[option(k, v) for k, v in options.items()],
            seats=[pb.SeatRequest(name=f"P{i}") for i in range(n)],
        )
    )
    return resp.table_id, {t.seat: t.token for t in resp.tokens}


async def play_random(
    stub: rpc.RefereeServiceStub,
    table_id: str,
    tokens: dict[int, str],
    rng: random.Random,
    on_view: Callable[[int, pb.SeatView], None] | None = None,
    limit: int = 100_000,
) -> int:
    """Play random legal actions until the match ends; returns the number of actions."""
    count = 0
    while count < limit:
        acted = False
        for seat, token in tokens.items():
            view = (await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=seat),
                                       metadata=auth(token))).view  # fmt: skip
            if on_view is not None:
                on_view(seat, view)
            if view.status == pb.TABLE_STATUS_FINISHED:
                return count
            if view.legal_actions:
                choice = rng.choice(view.legal_actions).action
                await stub.SubmitAction(
                    pb.SubmitActionRequest(
                        table_id=table_id,
                        seat=seat,
                        expected_action_index=view.action_index,
                        action=choice,
                    ),
                    metadata=auth(token),
                )
                count += 1
                acted = True
        assert acted, "nobody could act but the match is not over"
    raise AssertionError("the match did not end")
