"""The referee against clients that speak HTTP/2 themselves (a raw socket, as a hostile or
home-made client would): what gRPC refuses only once a client has acknowledged the server's
settings is refused before, and a client that sends past a stream's window is cut off rather
than buffered."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.referee.server.app import RunningServer
from tapis_cartes.referee.server.lenient import MAX_METADATA
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import Server, run

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, GOAWAY = 0, 1, 4, 7
END_STREAM, END_HEADERS = 1, 4


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return (
        struct.pack(">I", len(payload))[1:]
        + bytes([kind, flags])
        + struct.pack(">I", stream)
        + payload
    )


def _number(n: int) -> bytes:
    """An HPACK integer of a 7-bit prefix."""
    if n < 127:
        return bytes([n])
    out, n = [127], n - 127
    while n >= 128:
        out.append(n & 127 | 128)
        n >>= 7
    return bytes([*out, n])


def headers(stream: int, method: str, extra: list[tuple[bytes, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    """A call's HEADERS (literal fields, never indexed), cut into frames of 16 KiB."""
    fields = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", f"/tapis.v1.RefereeService/{method}".encode()),
        (b":authority", b"referee"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *extra,
    ]
    block = b"".join(b"\x00" + _number(len(k)) + k + _number(len(v)) + v for k, v in fields)
    chunks = [block[i : i + 16384] for i in range(0, len(block), 16384)]
    out = []
    for i, chunk in enumerate(chunks):
        kind = HEADERS if i == 0 else 9  # (CONTINUATION)
        out.append(frame(kind, END_HEADERS if i == len(chunks) - 1 else 0, stream, chunk))
    return b"".join(out)


def message(data: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(data)) + data


def _read_until(sock: socket.socket, seconds: float) -> tuple[bytes, str]:
    """What the referee sends until it closes the connection or `seconds` pass; and how it
    ended ("closed", "reset" or "open")."""
    sock.settimeout(seconds)
    got = b""
    try:
        while data := sock.recv(1 << 16):
            got += data
    except TimeoutError:
        return got, "open"
    except ConnectionResetError:
        return got, "reset"
    return got, "closed"


def test_metadata_past_the_bound_is_refused_before_the_settings_are_acknowledged(
    tmp_path: Path,
) -> None:
    """A call sent before the client acknowledged the referee's settings: gRPC took up to
    16 MiB of metadata for it (one connection of such calls made the referee GBs larger)
    and the call was answered OK. It is refused RESOURCE_EXHAUSTED, as after them."""

    def call(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            pad = b"x" * (256 << 10)
            sock.sendall(
                PREFACE
                + frame(SETTINGS, 0, 0, b"")
                + headers(1, "ListGames", [(b"x-pad", pad)])
                + frame(DATA, END_STREAM, 1, message(b""))
            )
            got, _ = _read_until(sock, 5.0)
            return got

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        got = await asyncio.to_thread(call, server.port)
        said = f"metadata: 262,181 bytes; at most {MAX_METADATA:,}".encode()  # (x-pad's)
        assert b"grpc-status\x018" in got and said in got, got[-300:]  # RESOURCE_EXHAUSTED
        assert b"tapis.v1" not in got  # (no ListGames reply)
        assert (await stub.ListGames(pb.ListGamesRequest())).games  # others served

    run(body, tmp_path)


def test_a_client_sending_past_a_streams_window_is_cut_off(tmp_path: Path) -> None:
    """Messages a client sends on a call after its one request are not read: gRPC took them
    up to the 4 MiB window its bandwidth probing grew (1.7 MB a stream held; 250 streams of
    one client, 400 MB). The window stays 64 KiB: a client sending 1 MiB more is cut off."""

    def watch(port: int, table_id: str) -> str:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
            sock.settimeout(2.0)
            sock.recv(1 << 16)  # the referee's settings
            sock.sendall(frame(SETTINGS, 1, 0, b""))  # acknowledged
            request = message(b"\x0a" + bytes([len(table_id)]) + table_id.encode())
            sock.sendall(headers(1, "WatchTable") + frame(DATA, 0, 1, request))
            junk = message(b"\x0a\x80\xe0\x03" + b"j" * 61440)  # a request's size, about
            try:
                for _ in range(17):  # 1 MiB
                    sock.sendall(frame(DATA, 0, 1, junk))
            except (BrokenPipeError, ConnectionResetError):
                return "cut off"
            got, how = _read_until(sock, 5.0)
            flow_control_error = GOAWAY.to_bytes(1, "big") in got and b"\x00\x00\x00\x03" in got
            return "cut off" if how != "open" or flow_control_error else "taken"

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        seats = [pb.SeatRequest(name=n) for n in "ABC"] + [pb.SeatRequest(name="D", open=True)]
        created = await stub.CreateTable(pb.CreateTableRequest(game="hearts", seats=seats))
        assert await asyncio.to_thread(watch, server.port, created.table_id) == "cut off"
        assert (await stub.ListGames(pb.ListGamesRequest())).games  # others served

    run(body, tmp_path)


def test_what_grpc_refuses_itself_leaves_the_log_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers gRPC's own code refuses (a `grpc-encoding` it does not know) wrote a line of
    its own log, not JSON, for every call, as fast as a client sent them. `tapis serve` logs
    JSON lines only (and says where it listens, on stdout)."""
    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)
    server = Server(tmp_path)
    server.start()

    def send(port: int) -> bytes:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, b""))
            for i in range(50):
                call = headers(2 * i + 1, "ListGames", [(b"grpc-encoding", b"br")])
                sock.sendall(call + frame(DATA, END_STREAM, 2 * i + 1, message(b"")))
            got, _ = _read_until(sock, 2.0)
            return got

    async def main() -> bytes:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            await server.serving(channel)
            return await asyncio.to_thread(send, server.port)

    try:
        got = asyncio.run(main())
    finally:
        assert server.terminate() == 0
    assert got.count(b"grpc-status") == 50  # each refused (by gRPC)
    lines = (tmp_path / "server-0.log").read_text().splitlines()
    logged = [line for line in lines if not line.startswith("tapis referee listening on ")]
    assert logged and all(json.loads(line)["event"] for line in logged), logged[:5]
