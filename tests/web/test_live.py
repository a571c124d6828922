"""`tapis serve --web`: the web front on the referee's own loop. Over HTTP: the pages, the
statuses, the record to download. In a real browser: the live page of a table shows each
move made over gRPC within a second, and neither its DOM nor any payload it receives holds
a card a spectator may not see (compared with every seat's cards, as the seats' views give
them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tapis_cartes.records.codec import iter_frames
from tapis_cartes.referee.engine.cards import RANK_NAMES, SUIT_SYMBOLS
from tapis_cartes.referee.errors import ListenError
from tapis_cartes.referee.server.app import Limits, RunningServer, create_server
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc
from tests.server.util import ROOT, auth, free_port, new_table, play_random
from tests.web.conftest import CHROMIUM_ARGS, screenshot_dir


@asynccontextmanager
async def web_referee(
    tmp_path: Path, limits: Limits | None = None
) -> AsyncIterator[tuple[RunningServer, rpc.RefereeServiceStub]]:
    """A referee with its web front, and a stub on a channel to it (which connects at its
    first call)."""
    server = await create_server(
        "127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key", limits or Limits(), web="127.0.0.1:0"
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield server, rpc.RefereeServiceStub(channel)
    finally:
        await server.stop(0)


async def get(url: str) -> tuple[int, bytes]:
    def fetch() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    return await asyncio.to_thread(fetch)


def test_pages_statuses_and_record(tmp_path: Path) -> None:
    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub):
            base = f"http://127.0.0.1:{server.web_port}"
            table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 20}, 4)
            status, body = await get(base + "/")
            assert status == 200 and table_id.encode() in body
            status, body = await get(f"{base}/tables/{table_id}")
            assert status == 200 and b"EventSource" in body
            assert (await get(f"{base}/tables/{table_id}/replay"))[0] == 409  # not finished
            assert (await get(f"{base}/tables/{table_id}/record.tapis"))[0] == 409
            assert (await get(f"{base}/tables/no-such-table"))[0] == 404
            assert (await get(f"{base}/tables/{'x' * 5000}"))[0] == 404
            assert (await get(f"{base}/tables/{table_id}/events?from=-1"))[0] == 400
            assert (await get(f"{base}/tables/{table_id}/events?from=%C2%B2"))[0] == 400
            status, body = await get(f"{base}/tables/{table_id}/events?from=99")  # past its end
            assert status == 400 and b"past the table's" in body
            await play_random(stub, table_id, tokens, random.Random(3))
            status, data = await get(f"{base}/tables/{table_id}/record.tapis")
            assert status == 200
            reply = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
            frames = list(iter_frames(data))
            assert frames == [reply.envelope.SerializeToString(deterministic=True)]
            status, body = await get(f"{base}/tables/{table_id}/replay")
            assert status == 200 and reply.record_id.encode() in body
            assert b'"signature":"valid"' in body  # checked with the referee's own key
            # A finished table's stream: every event, then its end.
            status, body = await get(f"{base}/tables/{table_id}/events")
            assert status == 200
            kinds = re.findall(rb"^event: (\w+)$", body, re.M)
            assert kinds[:2] == [b"table", b"view"] and kinds[-1] == b"end"
            count = (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).event_index
            assert kinds.count(b"event") == count

    asyncio.run(main())


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """Whether the server closes the connection within `within` seconds (what it sends
    before is read and dropped)."""
    try:
        async with asyncio.timeout(within):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


def test_connections_are_bounded_and_a_silent_one_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both fronts, web and gRPC: a connection past `max_connections` is closed at once; one
    that sends no request, or only part of its head, is closed after HEAD_SECONDS; the
    referee then serves as before."""
    monkeypatch.setattr("tapis_cartes.referee.server.web.HEAD_SECONDS", 0.5)
    monkeypatch.setattr("tapis_cartes.referee.server.app.HEAD_SECONDS", 0.5)

    async def main() -> None:
        async with web_referee(tmp_path, Limits(max_connections=3)) as (server, stub):
            for port, partial in (
                (server.web_port, b"GET / HTTP/1.1\r\nHost: x\r\n"),
                (server.port, b""),
            ):
                assert port is not None
                held = []
                for k in range(3):  # (from three addresses: one may hold half of them)
                    reader, writer = await asyncio.open_connection(
                        "127.0.0.1", port, local_addr=(f"127.0.0.{k + 1}", 0)
                    )
                    writer.write(partial)
                    held.append((reader, writer))
                await asyncio.sleep(0.1)  # (the server has taken them)
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.4", 0)
                )
                assert await closed_by_server(reader, 0.4), port  # the fourth, at once
                writer.close()
                for reader, writer in held:  # the silent ones, after HEAD_SECONDS
                    assert await closed_by_server(reader, 5), port
                    writer.close()
            assert (await get(f"http://127.0.0.1:{server.web_port}/"))[0] == 200
            table_id, _ = await new_table(stub, "nap", "", {}, 4)  # (the stub's first call)
            assert table_id.encode() in (await get(f"http://127.0.0.1:{server.web_port}/"))[1]

    asyncio.run(main())


def test_one_address_holds_no_more_than_its_share_of_the_web_connections(tmp_path: Path) -> None:
    """One client address held every web connection (64 of 64, each asking for a page every
    3 s): no one else was served. An address holds at most its streams and 16 more, and
    half of `max_connections`; another is served meanwhile."""

    async def main() -> None:
        async with web_referee(tmp_path, Limits(max_connections=8)) as (server, _):
            port = server.web_port
            assert port is not None
            held = []
            for _ in range(4):  # half of 8
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=("127.0.0.5", 0)
                )
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                assert (await reader.readline()).startswith(b"HTTP/1.1 200")
                held.append(writer)
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.5", 0)
            )
            assert await closed_by_server(reader, 0.4)  # its fifth, at once
            writer.close()
            other, other_writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.6", 0)
            )
            other_writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await other.readline()).startswith(b"HTTP/1.1 200")
            other_writer.close()
            held[0].close()  # one of its own closed: its place is free again
            await asyncio.sleep(0.1)
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=("127.0.0.5", 0)
            )
            writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            for w in [*held[1:], writer]:
                w.close()

    asyncio.run(main())


def test_a_web_address_in_use_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    async def main() -> None:
        async with web_referee(tmp_path / "a") as (server, _):
            with pytest.raises(ListenError):
                await create_server(
                    "127.0.0.1:0",
                    tmp_path / "b.db",
                    tmp_path / "b.key",
                    web=f"127.0.0.1:{server.web_port}",
                )
            assert not (tmp_path / "b.db").exists()
        with pytest.raises(ListenError):
            await create_server("127.0.0.1:0", tmp_path / "c.db", tmp_path / "c.key", web="nope")

    (tmp_path / "a").mkdir()
    asyncio.run(main())


async def open_stream(port: int, table_id: str) -> tuple[asyncio.StreamReader, Any, int]:
    """A table's event stream, as a browser opens it; its HTTP status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /tables/{table_id}/events HTTP/1.1\r\nHost: tapis\r\n\r\n".encode())
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    return reader, writer, status


def test_streams_per_client_are_bounded_and_end_at_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client's streams are bounded; at shutdown an open stream ends as a stream ends (its
    last chunk), and nothing is logged as an error."""

    async def main() -> None:
        server = await create_server(
            "127.0.0.1:0",
            tmp_path / "t.db",
            tmp_path / "k.key",
            Limits(max_streams_per_client=1),
            web="127.0.0.1:0",
        )
        assert server.web_port is not None
        port = server.web_port
        writers: list[Any] = []

        async def stream(table_id: str) -> tuple[asyncio.StreamReader, int]:
            reader, writer, status = await open_stream(port, table_id)
            writers.append(writer)
            return reader, status

        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                table_id, _ = await new_table(rpc.RefereeServiceStub(channel), "nap", "", {}, 4)
            _, status = await stream(table_id)
            assert status == 200
            _, status = await stream(table_id)
            assert status == 429  # one stream at a time for this client
            for writer in writers:
                writer.close()

            async def accepted() -> asyncio.StreamReader:
                # once the first stream is gone, its place is free again
                while True:
                    reader, status = await stream(table_id)
                    if status == 200:
                        return reader
                    writers[-1].close()
                    await asyncio.sleep(0.05)

            reader = await asyncio.wait_for(accepted(), 30)
            # (the referee's streams told to end before the web front is: as a stop under
            # load may see it, the stream's wait for events ends first)
            server.referee.end_streams()
            await asyncio.sleep(0.2)
        finally:
            await asyncio.wait_for(server.stop(0), 30)  # an open stream does not hold it
        rest = await asyncio.wait_for(reader.read(), 30)  # the stream ended
        assert b"event: view" in rest
        assert rest.endswith(b"\r\n0\r\n\r\n"), rest[-200:]  # whole: its last chunk sent
        for writer in writers:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


# --- in the browser ------------------------------------------------------------------------

# Every payload the page's EventSource receives, kept as it came (a test-side wrapper).
RECORD_PAYLOADS = """
window.__payloads = [];
const Original = window.EventSource;
window.EventSource = class extends Original {
  constructor(...args) {
    super(...args);
    for (const kind of ["table", "view", "event", "end"]) {
      this.addEventListener(kind, (m) => window.__payloads.push(m.data));
    }
  }
};
"""

_CARD_TEXT = re.compile(r"(?<![0-9A-Za-z])(10|[2-9JQKA])([SHDC])(?![A-Za-z])")
_CARD_KEYS = {"hand", "cards", "card", "took", "discarded", "retourne"}


def payload_cards(value: Any, key: str = "") -> Iterator[int]:
    """Every card a payload names: card ids under the keys that hold cards, cards played in
    actions, cards written in texts."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from payload_cards(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from payload_cards(v, key)
    elif isinstance(value, str):
        for rank, suit in _CARD_TEXT.findall(value):
            yield "SHDC".index(suit) * 13 + RANK_NAMES.index(rank)
    elif isinstance(value, int) and not isinstance(value, bool):
        if key in _CARD_KEYS:
            yield value
        elif key == "action" and value & 7 == 0:  # a card played
            yield value >> 3


async def secrets(
    stub: rpc.RefereeServiceStub, table_id: str, tokens: dict[int, str]
) -> tuple[set[int], int]:
    """The cards a spectator may not see now (every seat's cards but those shown to all), and
    the hand in progress."""
    held: set[int] = set()
    for seat, token in tokens.items():
        request = pb.GetViewRequest(table_id=table_id, seat=seat)
        held |= set((await stub.GetView(request, metadata=auth(token))).view.hand)
    public = (await stub.GetView(pb.GetViewRequest(table_id=table_id))).view
    for known in public.known:
        held -= set(known.cards)
    # What the spectator's own view shows is public: a card turned face up and then taken
    # into a hand (La Triomphe's pillage), an impériale shown, are known to all.
    shown = json_format.MessageToDict(public, preserving_proto_field_name=True)
    held -= set(payload_cards(shown))
    return held, public.hand_number


# What the page shows now but for the log of earlier hands (whose cards are dealt again):
# the card ids it shows and its text.
SHOWN_NOW = """(hand) => {
  const now = (e) => { const li = e.closest("#log li"); return !li || li.dataset.hand === hand; };
  const ids = [...document.querySelectorAll("[data-card]")].filter(now).map((e) => +e.dataset.card);
  const parts = ["header", "#board", "#facts", "#log li"].flatMap((s) =>
    [...document.querySelectorAll(s)].filter(now).map((e) => e.innerText));
  return [ids, parts.join("\\n")];
}"""


async def check_no_secret(page: Any, hidden: set[int], hand: int) -> None:
    ids, text = await page.evaluate(SHOWN_NOW, str(hand))
    assert not set(ids) & hidden, (set(ids) & hidden, text)
    for c in hidden:
        assert RANK_NAMES[c % 13] + SUIT_SYMBOLS[c // 13] not in text
    # The payloads since this hand was dealt (an earlier hand's cards are dealt again): once
    # the page has this hand's deal (it may still be receiving the end of the hand before).
    for _ in range(100):
        payloads = [json.loads(p) for p in await page.evaluate("window.__payloads")]
        dealt = [
            i
            for i, p in enumerate(payloads)
            if int(p.get("hand_started", {}).get("number", -1)) == hand
        ]
        if dealt or hand <= 1:
            break
        await asyncio.sleep(0.05)
    assert dealt or hand <= 1, f"the page never received the deal of hand {hand}"
    for payload in payloads[dealt[-1] if dealt else 0 :]:
        assert not set(payload_cards(payload)) & hidden, payload


GAMES = [("hearts", "", 4), ("triomphe", "as-qui-pille", 4), ("imperiale", "academie", 2)]
OPTIONS = {"hearts": {"end_threshold": 20}}  # a shorter match


@pytest.mark.parametrize(("game", "ruleset", "players"), GAMES)
def test_live_page_follows_moves_and_shows_no_secret(
    chromium: str, tmp_path: Path, game: str, ruleset: str, players: int
) -> None:
    from playwright.async_api import async_playwright

    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub), async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = await browser.new_page(viewport={"width": 1200, "height": 860})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.add_init_script(RECORD_PAYLOADS)
            table_id, tokens = await new_table(stub, game, ruleset, OPTIONS.get(game, {}), players)
            await page.goto(f"http://127.0.0.1:{server.web_port}/tables/{table_id}")
            await page.wait_for_function(
                "(n) => document.querySelectorAll('.seat').length === n", arg=players
            )
            await check_no_secret(page, *await secrets(stub, table_id, tokens))
            rng = random.Random(11)
            # Moves one by one, through the first hand and into the second (its cards are
            # the first hand's, dealt again), each seen on the page and the page scanned.
            shots = screenshot_dir()
            second = 0
            for move in range(400):
                acting = await _to_act(stub, table_id, tokens)
                if acting is None or second > players:
                    break
                seat, view = acting
                second += view.hand_number >= 2
                choice = rng.choice(view.legal_actions)
                reply = await stub.SubmitAction(
                    pb.SubmitActionRequest(
                        table_id=table_id,
                        seat=seat,
                        expected_action_index=view.action_index,
                        action=choice.action,
                    ),
                    metadata=auth(tokens[seat]),
                )
                # The move shows within a second (a wait that fails after one) in the log;
                # then on the board (the view after it), a card in the trick (unless it ended
                # the hand and the next is dealt).
                moved = page.locator(f'#log li[data-action="{view.action_index}"]')
                await moved.wait_for(timeout=1000)
                after = max(e.index for e in reply.events) + 1
                await page.wait_for_function(
                    "(after) => +document.getElementById('board').dataset.eventIndex >= after",
                    arg=after,
                    timeout=5000,  # the view follows the events it comes after
                )
                dealt = any(e.HasField("hand_ended") for e in reply.events)
                if choice.action & 7 == 0 and not dealt:
                    card = page.locator(f'#trick [data-card="{choice.action >> 3}"]')
                    await card.wait_for(timeout=5000)
                await check_no_secret(page, *await secrets(stub, table_id, tokens))
                if shots is not None and game == "hearts" and move == 3 * players + 6:
                    await page.screenshot(path=str(shots / "live.png"), full_page=True)
            assert second > 0 or acting is None  # into the second hand, or the match is over
            await play_random(stub, table_id, tokens, rng)
            await page.locator("#replay-link").wait_for(timeout=10_000)
            await check_no_secret(page, set(), 0)
            await browser.close()
            assert not errors

    asyncio.run(main())


def test_live_page_shows_seats_taken(chromium: str, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    async def main() -> None:
        async with web_referee(tmp_path) as (server, stub), async_playwright() as p:
            browser = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            page = await browser.new_page()
            seats = [pb.SeatRequest(name="Ann"), pb.SeatRequest(name="seat 1", open=True)]
            created = await stub.CreateTable(
                pb.CreateTableRequest(game="imperiale", ruleset="academie", seats=seats)
            )
            await page.goto(f"http://127.0.0.1:{server.web_port}/tables/{created.table_id}")
            await page.locator("text=(open seat)").wait_for(timeout=10_000)
            await stub.JoinTable(pb.JoinTableRequest(table_id=created.table_id, name="Zoe"))
            zoe = page.locator('.seat[data-seat="1"] .name', has_text="Zoe")
            await zoe.wait_for(timeout=1000)
            assert "Zoe" in await page.locator("#title").inner_text()
            await browser.close()

    asyncio.run(main())


async def _to_act(
    stub: rpc.RefereeServiceStub, table_id: str, tokens: dict[int, str]
) -> tuple[int, pb.SeatView] | None:
    """A seat that may act and its view; None when nobody may (the match is over)."""
    for seat, token in tokens.items():
        request = pb.GetViewRequest(table_id=table_id, seat=seat)
        view = (await stub.GetView(request, metadata=auth(token))).view
        if view.legal_actions:
            return seat, view
    return None


def test_tapis_serve_web(tmp_path: Path) -> None:
    """`tapis serve --web` as a real process: the pages answer; SIGTERM stops both fronts.
    Its log is JSON lines throughout, the web server's own warnings (a request that is no
    HTTP) too."""
    port, web = free_port(), free_port()
    log = tmp_path / "serve.log"
    cmd = [sys.executable, "-m", "tapis_cartes.clients.cli", "serve",
           "--listen", f"127.0.0.1:{port}", "--web", f"127.0.0.1:{web}",
           "--db", str(tmp_path / "t.db"),
           "--key", str(tmp_path / "k.key")]  # fmt: skip
    with (
        log.open("w") as err,
        subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        ) as proc,
    ):
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first.startswith(f"tapis referee listening on 127.0.0.1:{port}")
            assert proc.stdout.readline().strip() == f"tapis web front on http://127.0.0.1:{web}/"
            status, body = asyncio.run(get(f"http://127.0.0.1:{web}/"))
            assert status == 200 and b"no table yet" in body
            with socket.create_connection(("127.0.0.1", web)) as sock:
                sock.sendall(b"\x16\x03\x01 not HTTP\r\n\r\n")
                assert sock.recv(100).startswith(b"HTTP/1.1 400")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(
        line["level"] == "warning" and line.get("logger") == "uvicorn.error" for line in lines
    ), lines
