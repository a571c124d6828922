"""A client gone without a word (its network cut: no FIN, no RST) holds nothing for long: the
referee's keepalive ping goes unanswered, the connection is closed and its streams end, so the
client's place under its stream cap is free again (referee.proto, "Keepalive")."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest

from tapis_cartes.referee.server import lenient
from tapis_cartes.referee.server.limits import Limits
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import new_table, referee


class Cut:
    """A TCP relay to `port` that can be cut silently: once cut it neither reads nor writes,
    and keeps every socket open (what a pulled cable looks like to both ends)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cut = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writers += [writer, up_writer]
        for a, b in ((reader, up_writer), (up_reader, writer)):
            self.tasks.append(asyncio.create_task(self._pipe(a, b)))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(1 << 16)
            if not data or self.cut.is_set():  # cut: what came is dropped, and all after
                break
            writer.write(data)
            await writer.drain()
        await asyncio.Event().wait()  # silent, the sockets held open, until closed

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for writer in self.writers:
            writer.close()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.mark.parametrize("keepalive", [0.5, None], ids=["keepalive", "none"])
def test_a_silent_cut_frees_the_clients_streams(tmp_path: Path, keepalive: float | None) -> None:
    """A WatchTable stream through a relay that goes silent: with the referee's keepalive
    (here every half second), the stream ends and the client opens another within seconds;
    without it (gRPC's default: two hours), the dead stream still holds the client's only
    place after those seconds."""

    async def main() -> tuple[grpc.StatusCode | None, bool]:
        # Without: gRPC's own default, a ping after two hours.
        every = 7200.0 if keepalive is None else keepalive
        limits = Limits(max_streams_per_client=1, keepalive=every, keepalive_timeout=every)
        async with referee(tmp_path, limits=limits) as server:
            relay = Cut(server.port)
            port = await relay.start()
            async with (
                grpc.aio.insecure_channel(f"127.0.0.1:{port}") as far,
                grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as near,
            ):
                far_stub, near_stub = rpc.RefereeServiceStub(far), rpc.RefereeServiceStub(near)
                table_id, _ = await new_table(near_stub, "hearts", "", {}, 4)
                watch = far_stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
                await watch.read()  # open: it holds the client's one place
                relay.cut.set()
                refused: grpc.StatusCode | None = None
                opened = False
                for _ in range(40):  # 6 seconds at most
                    again = near_stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
                    try:
                        await asyncio.wait_for(again.read(), 5)
                        opened = True
                        break
                    except grpc.aio.AioRpcError as exc:
                        refused = exc.code()
                    finally:
                        again.cancel()
                    await asyncio.sleep(0.15)
                watch.cancel()
                await relay.close()
                return refused, opened

    refused, opened = asyncio.run(asyncio.wait_for(main(), 60))
    if keepalive is not None:
        assert opened, refused
    else:
        assert (refused, opened) == (grpc.StatusCode.RESOURCE_EXHAUSTED, False)


def test_client_pings_at_the_allowed_rate_keep_the_connection(tmp_path: Path) -> None:
    """A client pinging more often than referee.proto asks (every 6 s; it asks for 10) while
    its stream waits and hears nothing is not closed for it: its stream still runs after
    five pings (gRPC's default policy closes it at the fifth, GOAWAY too_many_pings)."""

    async def main() -> bool:
        async with referee(tmp_path) as server:
            options = [
                ("grpc.keepalive_time_ms", 6_000),
                ("grpc.http2.max_pings_without_data", 0),  # (by default: two, then none)
            ]
            async with grpc.aio.insecure_channel(
                f"127.0.0.1:{server.port}", options=options
            ) as channel:
                stub = rpc.RefereeServiceStub(channel)
                created = await stub.CreateTable(
                    pb.CreateTableRequest(
                        game="hearts", seats=[pb.SeatRequest(name="P", open=True)] * 4
                    )
                )
                table_id = created.table_id
                watch = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
                read = asyncio.ensure_future(watch.read())  # nothing comes: seats are open
                done, _ = await asyncio.wait({read}, timeout=33)
                if done:
                    read.result()  # the stream ended: raises how
                    return False
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                    await read
                return True

    assert asyncio.run(asyncio.wait_for(main(), 60))


def test_one_connection_holds_a_bounded_number_of_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams at once on one connection are bounded (the client's streams cap and 64 more),
    whatever they are: 100 calls whose request never comes (which no cap of streams counts:
    they end when their request is late, here after 3 s) on one channel with the cap at 2:
    66 are taken, and end first; the others wait in the client's channel (as HTTP/2 asks: the
    referee advertises the bound) and hold nothing in the referee until then."""
    monkeypatch.setattr(lenient, "REQUEST_SECONDS", 3.0)

    async def main() -> int:
        async with (
            referee(tmp_path, limits=Limits(max_streams_per_client=2)) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            # (the connection made first: calls started before its settings came, past the
            # bound, are refused REFUSED_STREAM, as protocol.md says)
            await rpc.RefereeServiceStub(channel).ListGames(pb.ListGamesRequest())
            method = channel.stream_stream("/tapis.v1.RefereeService/GetTable")
            calls = [method() for _ in range(100)]
            reads = [asyncio.ensure_future(c.read()) for c in calls]
            done, _ = await asyncio.wait(reads, timeout=4.5)  # the others end at 6 s or later
            for call in calls:
                call.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            taken = 0
            for read in done:
                error = read.exception()
                assert isinstance(error, grpc.aio.AioRpcError), error
                # (one the channel started as the first ended, before the referee had them
                # all closed, may be refused REFUSED_STREAM: UNAVAILABLE, nothing done)
                assert error.code() in (INVALID, grpc.StatusCode.UNAVAILABLE), error
                taken += error.code() == INVALID
            return taken

    assert asyncio.run(asyncio.wait_for(main(), 60)) == 2 + 64


INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("idle", [1.0, 3600.0], ids=["closed", "kept"])
def test_an_idle_connection_is_closed(tmp_path: Path, idle: float) -> None:
    """A connection with no call under way is closed after `idle_connection` seconds (here
    one; by default a minute): the client's channel goes IDLE, and its next call opens
    another connection and is answered."""

    async def main() -> grpc.ChannelConnectivity:
        async with (
            referee(tmp_path, limits=Limits(idle_connection=idle)) as server,
            grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel,
        ):
            stub = rpc.RefereeServiceStub(channel)
            await stub.ListGames(pb.ListGamesRequest())
            await asyncio.sleep(3)
            state = channel.get_state()
            assert (await stub.ListGames(pb.ListGamesRequest())).games
            return state

    state = asyncio.run(asyncio.wait_for(main(), 60))
    want = grpc.ChannelConnectivity.IDLE if idle < 3 else grpc.ChannelConnectivity.READY
    assert state == want
