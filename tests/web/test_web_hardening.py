"""The web front against clients that misuse it, over real connections to a real referee:
a request body sent slowly holds no connection past HEAD_SECONDS; proxy headers do not make
one client many; a finished table's replay page is built once; every response forbids
framing and sniffing; no redirect is built from the Host header; a WebSocket upgrade is
answered as plain HTTP, and not logged."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.referee.server import tables, web
from tapis_cartes.referee.server.app import Limits
from tests.server.util import new_table, play_random
from tests.web.test_live import closed_by_server, web_referee

SECURITY_HEADERS = {
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


async def request(
    port: int, path: str, headers: str = "", body: bytes = b""
) -> tuple[int, dict[str, str], asyncio.StreamReader, Any]:
    """Sends a GET (`headers`: more header lines, each ending in CRLF; `body`: sent after the
    head as it is) and reads the response's status and head; the body is left to read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if "Host:" not in headers:
        headers = "Host: tapis\r\n" + headers
    writer.write(f"GET {path} HTTP/1.1\r\n{headers}\r\n".encode() + body)
    await writer.drain()
    status, head = await read_head(reader)
    return status, head, reader, writer


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    lines = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode().split("\r\n")
    head = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            head[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), head


async def read_body(reader: asyncio.StreamReader, head: dict[str, str]) -> bytes:
    return await asyncio.wait_for(reader.readexactly(int(head["content-length"])), 30)


async def close(*writers: Any) -> None:
    for writer in writers:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def trickle(writer: Any, every: float) -> None:
    """One small chunk of a chunked request body every `every` seconds, without end."""
    with contextlib.suppress(ConnectionError):
        while True:
            writer.write(b"1\r\na\r\n")
            await writer.drain()
            await asyncio.sleep(every)


def test_a_request_body_sent_slowly_holds_no_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's body must come within HEAD_SECONDS as its head does, even when it has
    been answered already (a page, or an event stream under way): else the connection is
    closed. A body that ends in time leaves the next request its own HEAD_SECONDS."""
    monkeypatch.setattr(web, "HEAD_SECONDS", 2.0)
    chunked = "Transfer-Encoding: chunked\r\n"

    async def main() -> None:
        async with web_referee(tmp_path, Limits(max_connections=8)) as (server, stub):
            port = server.web_port
            assert port is not None
            table_id, _ = await new_table(stub, "nap", "", {}, 4)
            held = []
            for path in ("/", f"/tables/{table_id}/events"):
                status, _, reader, writer = await request(port, path, chunked)
                assert status == 200
                held.append((reader, writer, asyncio.create_task(trickle(writer, 0.2))))
            for reader, _, task in held:  # closed, though still sending
                assert await closed_by_server(reader, 4)
                task.cancel()
            await close(*(writer for _, writer, _ in held))
            # This one sends its body's end in time, and its next request after the first
            # request's time is over, but within its own.
            status, head, reader, writer = await request(port, "/", chunked, b"1\r\na\r\n")
            assert status == 200
            await read_body(reader, head)
            await asyncio.sleep(1.0)
            writer.write(b"0\r\n\r\n")
            await asyncio.sleep(1.5)  # 2.5 s after the first response, 1.5 s after the body
            writer.write(b"GET / HTTP/1.1\r\nHost: tapis\r\n\r\n")
            status, head = await read_head(reader)
            assert status == 200
            await read_body(reader, head)
            await close(writer)

    asyncio.run(main())


def test_the_client_is_the_sockets_peer_not_a_proxy_header(tmp_path: Path) -> None:
    """X-Forwarded-For from 127.0.0.1 (which uvicorn trusts by default) does not make one
    client many: its streams are counted as the same client's."""

    async def main() -> None:
        limits = Limits(max_streams_per_client=1)
        async with web_referee(tmp_path, limits) as (server, stub):
            assert server.web_port is not None
            table_id, _ = await new_table(stub, "nap", "", {}, 4)
            path = f"/tables/{table_id}/events"
            writers = []
            for i, expected in enumerate((200, 429, 429)):
                forwarded = f"X-Forwarded-For: 10.0.0.{i}\r\nForwarded: for=10.0.1.{i}\r\n"
                status, _, _, writer = await request(server.web_port, path, forwarded)
                writers.append(writer)
                assert status == expected, i
            await close(*writers)

    asyncio.run(main())


def test_a_finished_tables_replay_page_is_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked at once, or again, or after another table's: one build per finished table, in a
    process other than the referee's; the same page each time."""
    builds: list[int] = []
    make = web._Pages._make

    async def counted(self: Any, page: Any) -> Any:
        builds.append(1)
        made = await make(self, page)
        (worker,) = self._pool._processes.values()  # the page's builder: another process
        assert worker.pid != os.getpid()
        return made

    monkeypatch.setattr(web._Pages, "_make", counted)

    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            assert server.web_port is not None
            tables = []
            for seed in range(2):
                table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 20}, 4)
                await play_random(stub, table_id, tokens, random.Random(seed))
                tables.append(table_id)

            async def page(table_id: str) -> bytes:
                path = f"/tables/{table_id}/replay"
                status, head, reader, writer = await request(server.web_port or 0, path)
                assert status == 200
                body = await read_body(reader, head)
                await close(writer)
                return body

            first = await asyncio.gather(*(page(tables[0]) for _ in range(4)))
            assert len(set(first)) == 1 and tables[0].encode() in first[0]
            assert len(builds) == 1
            assert await page(tables[0]) == first[0]
            assert len(builds) == 1
            other = await page(tables[1])
            assert other != first[0] and len(builds) == 2
            assert await page(tables[0]) == first[0] and await page(tables[1]) == other
            assert len(builds) == 2

    asyncio.run(main())


def test_live_streams_share_each_message_and_take_turns_to_replay_a_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live pages of one client, each from event 0 of a long finished table: one of them at a
    time sends its backlog (the referee's gate, as for WatchTable: 256 such streams took a
    2-minute toll on every other match), and each event's message is made once for all."""
    made: list[int] = []
    event_message = web.event_message

    def counted(table: Any, index: int, *args: Any) -> Any:
        made.append(index)
        return event_message(table, index, *args)

    monkeypatch.setattr(web, "event_message", counted)

    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            # At most 26 points a hand to a seat: five hands at least, about 300 events (at
            # 60 a match of random deals had 243 events in one run of 2,700: too short).
            table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 130}, 4)
            await play_random(stub, table_id, tokens, random.Random(4))
            total = server.referee.get(table_id).durable_events
            assert total > 4 * tables.WATCH_CHUNK

            async def live() -> list[int]:
                path = f"/tables/{table_id}/events"
                status, _, reader, writer = await request(server.web_port or 0, path)
                assert status == 200
                text = b""
                while b"event: end\n" not in text:
                    chunk = await asyncio.wait_for(reader.read(1 << 16), 60)
                    assert chunk, "the stream ended before its end event"
                    text += chunk
                await close(writer)
                return [int(i) - 1 for i in re.findall(rb"id: (\d+)\nevent: event\n", text)]

            seen = await asyncio.gather(*(live() for _ in range(6)))
            assert all(indexes == list(range(total)) for indexes in seen)
            assert server.referee.replays.most == 1
            assert sorted(made) == list(range(total))  # each event's message made once

    asyncio.run(main())


def test_replay_pages_kept_are_bounded_in_bytes() -> None:
    """The most recently asked pages are kept, within the bound; one larger is kept alone
    (the page of a long match, built again for each request, cost seconds each time)."""
    builds: list[str] = []

    class Pages(web._Pages):
        async def _make(self, page: tuple[bytes, bytes, str]) -> bytes:
            name, size = page[2], len(page[0])  # (a title, and the page's size)
            builds.append(name)
            return name.encode() * size

    def build(name: str, size: int) -> tuple[bytes, bytes, str]:
        return b"x" * size, b"", name

    async def main() -> None:
        pages = Pages(10)
        for name, size in (("a", 4), ("b", 4), ("a", 4), ("c", 4), ("a", 4), ("b", 4)):
            assert await pages.get((name, ""), build(name, size)) == name.encode() * size
        # a kept throughout (asked last but one each time); b dropped for c, c for b.
        assert builds == ["a", "b", "c", "b"] and pages.size == 8
        for _ in range(2):
            await pages.get(("d", ""), build("d", 11))
        assert builds[-2:] == ["b", "d"] and pages.size == 11
        await pages.get(("a", ""), build("a", 4))
        assert builds[-1] == "a" and pages.size == 4

    asyncio.run(main())


def test_every_response_forbids_framing_and_sniffing(tmp_path: Path) -> None:
    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            port = server.web_port
            assert port is not None
            table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 20}, 4)
            paths = {
                "/": 200,
                f"/tables/{table_id}": 200,
                f"/tables/{table_id}/events": 200,  # a stream
                f"/tables/{table_id}/replay": 409,
                f"/tables/{table_id}/events?from=x": 400,
                "/tables/no-such-table": 404,
                "/no/such/page": 404,
            }
            writers = []
            for path, expected in paths.items():
                status, head, _, writer = await request(port, path)
                writers.append(writer)
                assert status == expected, path
                assert {k: head.get(k) for k in SECURITY_HEADERS} == SECURITY_HEADERS, path
            await play_random(stub, table_id, tokens, random.Random(1))
            for path in (f"/tables/{table_id}/replay", f"/tables/{table_id}/record.tapis"):
                status, head, _, writer = await request(port, path)
                writers.append(writer)
                assert status == 200
                assert {k: head.get(k) for k in SECURITY_HEADERS} == SECURITY_HEADERS, path
            await close(*writers)

    asyncio.run(main())


def test_no_redirect_is_built_from_the_host_header(tmp_path: Path) -> None:
    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            assert server.web_port is not None
            table_id, _ = await new_table(stub, "nap", "", {}, 4)
            for path in ("/tables/abc/", f"/tables/{table_id}/", f"/tables/{table_id}/replay/"):
                host = "Host: evil.example\r\n"
                status, head, _, writer = await request(server.web_port, path, host)
                await close(writer)
                assert status == 404 and "location" not in head, path

    asyncio.run(main())


def test_an_upgrade_is_answered_as_plain_http_and_not_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    upgrades = {
        "websocket": "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
        "h2c": "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
    }

    async def main() -> None:
        async with web_referee(tmp_path) as (server, _):
            assert server.web_port is not None
            for name, headers in upgrades.items():
                status, head, reader, writer = await request(server.web_port, "/", headers)
                assert status == 200, name  # the page: not switched, the handshake fails
                assert b"<html" in await read_body(reader, head)
                # and the connection serves the next request as any other
                writer.write(b"GET /no-such-page HTTP/1.1\r\nHost: tapis\r\n\r\n")
                assert (await read_head(reader))[0] == 404
                await close(writer)

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.name.startswith("uvicorn")], caplog.text


def test_a_title_that_holds_a_place_of_the_template_stays_text() -> None:
    # `tapis record html '{{data}}.tapis'` put the page's whole data in its <title>: each
    # place was replaced in turn, over the text replaced before.
    from tapis_cartes.records.html import replay_page

    page = replay_page({"records": []}, "{{data}} /*{{js}}*/ {{title}}")
    assert "<title>{{data}} /*{{js}}*/ {{title}}</title>" in page
    assert page.count('{"records":[]}') == 1


def test_the_index_is_a_bounded_page_of_the_latest_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/` lists INDEX_ROWS tables a page, the latest first, and links to the others; a
    page number that is none is refused (400)."""
    monkeypatch.setattr(web, "INDEX_ROWS", 2)

    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            port = server.web_port or 0
            made = [(await new_table(stub, "nap", "", {}, 4))[0] for _ in range(5)]
            # The first made comes into memory again last (as a table over, loaded from the
            # store when asked for): it was listed first.
            tables = server.referee.tables
            tables[made[0]] = tables.pop(made[0])

            async def listed(path: str) -> tuple[list[str], str]:
                status, head, reader, writer = await request(port, path)
                body = (await read_body(reader, head)).decode()
                await close(writer)
                assert status == 200, body
                return re.findall(r'data-table="([^"]+)"', body), body

            first, body = await listed("/")
            assert first == made[:-3:-1] and '"/?page=2">older' in body
            assert (
                "5 tables (waiting, being played, and the latest finished), the most recent" in body
            )
            second, body = await listed("/?page=2")
            assert second == made[-3:-5:-1] and "more recent" in body and "older" in body
            last, body = await listed("/?page=3")
            assert last == made[:1] and "older" not in body
            assert (await listed("/?page=9"))[0] == []
            for bad in ("0", "x", "1234567", "-1"):
                status, _, _, writer = await request(port, f"/?page={bad}")
                assert status == 400, bad
                await close(writer)
            # Each page is made once within INDEX_SECONDS, however many are asked for in
            # turn (every page past the last is one page): a visitor cycling through more
            # page numbers than were kept had every request make its page.
            builds = 0
            page = server.web._index_page  # type: ignore[union-attr]

            def counted(number: int) -> bytes:
                nonlocal builds
                builds += 1
                return page(number)

            monkeypatch.setattr(server.web, "_index_page", counted)
            monkeypatch.setattr(web, "INDEX_SECONDS", 3600.0)
            server.web._index.clear()  # type: ignore[union-attr]
            for _ in range(2):
                for number in range(1, 41):
                    await listed(f"/?page={number}")
            assert builds == 4  # pages 1 to 3, and the one past them

    asyncio.run(main())


def test_the_head_of_a_stream_is_its_head_alone(tmp_path: Path) -> None:
    """HEAD of a table's event stream: its head, and no stream (one would never end, and hold
    one of the client's places); the connection answers its next request."""

    async def main() -> None:
        async with web_referee(tmp_path, Limits(max_streams_per_client=1)) as (server, stub):
            port = server.web_port or 0
            table_id, _ = await new_table(stub, "nap", "", {}, 4)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(3):
                writer.write(f"HEAD /tables/{table_id}/events HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                status, head = await read_head(reader)
                assert status == 200 and head["content-type"].startswith("text/event-stream")
            writer.write(b"GET /?page=1 HTTP/1.1\r\nHost: t\r\n\r\n")
            status, head = await read_head(reader)
            assert status == 200 and b"data-table" in await read_body(reader, head)
            await close(writer)
            # its one place is free: a stream opens
            status, _, _, stream = await request(port, f"/tables/{table_id}/events")
            assert status == 200
            await close(stream)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:80", ("127.0.0.1", 80)),
        ("[::1]:80", ("::1", 80)),
        ("localhost:0", ("localhost", 0)),
        ("::1:80", None),
        ("[127.0.0.1]:80", None),
        ("[::1:80", None),
        ("[[::1]]:80", None),
        (":80", None),
        ("host:65536", None),
    ],
)
def test_a_listening_address_is_host_port_an_ipv6_one_in_brackets(
    address: str, expected: tuple[str, int] | None
) -> None:
    if expected is not None:
        assert web.host_port(address) == expected
    else:
        with pytest.raises(web.ListenError, match="an IPv6 address in brackets"):
            web.host_port(address)


def test_a_finished_tables_pages_are_cached_and_their_head_is_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished table's replay page and record file carry an ETag (its record, Tapis's
    version) and may be kept an hour: asked again with it, 304 and no body. HEAD of a replay
    page does not make the page (asked in turn for more long pages than are kept, it made
    each every time, seconds of a core each). A table's path with its slash written %2F is
    no page (it was the replay page)."""

    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            port = server.web_port or 0
            table_id, tokens = await new_table(stub, "nap", "", {"deals": 1}, 4)
            await play_random(stub, table_id, tokens, random.Random(2))
            assert server.web is not None
            made = 0
            get_page = server.web._pages.get

            async def counted(*args: Any) -> bytes:
                nonlocal made
                made += 1
                return await get_page(*args)

            monkeypatch.setattr(server.web._pages, "get", counted)
            for path in (f"/tables/{table_id}/replay", f"/tables/{table_id}/record.tapis"):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(f"HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
                status, head = await read_head(reader)
                await close(writer)
                assert status == 200 and head["cache-control"] == "public, max-age=3600"
                etag = head["etag"]
                status, head, reader, writer = await request(port, path)
                assert status == 200 and head["etag"] == etag
                assert await read_body(reader, head)
                await close(writer)
                status, head, reader, writer = await request(
                    port, path, f"If-None-Match: {etag}\r\n"
                )
                assert status == 304 and head["etag"] == etag
                await close(writer)
            assert made == 1  # the GET alone
            status, _, reader, writer = await request(port, f"/tables/{table_id}%2Freplay")
            assert status == 404
            await close(writer)

    asyncio.run(main())


def test_a_finished_tables_replay_page_and_record_are_made_without_a_replay(
    tmp_path: Path,
) -> None:
    """The replay page and the record file come from the stored record alone: a finished
    table that left memory is not replayed for them (nor counted against the client's
    budget of replayed actions)."""

    async def main() -> None:
        async with web_referee(tmp_path, Limits(max_loaded_finished=1)) as (server, stub):
            port = server.web_port or 0
            done = []
            for k in range(2):
                table_id, tokens = await new_table(stub, "nap", "", {"deals": 1}, 4)
                await play_random(stub, table_id, tokens, random.Random(k))
                done.append(table_id)
            await server.referee.idle()
            assert done[0] not in server.referee.tables
            for path in ("replay", "record.tapis"):
                status, head, reader, writer = await request(port, f"/tables/{done[0]}/{path}")
                assert status == 200 and await read_body(reader, head)
                await close(writer)
            assert done[0] not in server.referee.tables  # (not replayed)
            status, head, reader, writer = await request(port, "/tables/nope/replay")
            assert status == 404
            await close(writer)

    asyncio.run(main())
