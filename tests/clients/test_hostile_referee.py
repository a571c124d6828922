"""A client against a referee that breaks the contract: what it sends is checked where the
SDK receives it (views, records), and the commands that talk to a referee end with one line
and an exit status, never a traceback, a huge allocation or a file of bytes that are not the
record. A fake referee (grpc.aio, the generated service) answers; `tapis` runs in a child."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from tapis_cartes.clients.sdk import RefereeClient, checked_record, checked_view
from tapis_cartes.records.codec import read_envelopes, record_id
from tapis_cartes.referee.errors import RefereeError
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc
from tests.commands import DATA, ROOT

DP1 = read_envelopes(DATA / "dame-de-pique-dp1.tapis")[0]


def _view(**fields: Any) -> pb.SeatView:
    base: dict[str, Any] = {"seat": 1, "dealer": 0, "hand": [0, 5, 51], "to_act": [1]}
    return pb.SeatView(**(base | fields))


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"hand": [2**32 - 3]}, "a card out of 0..51"),  # 2.3 GB in a bot's pass, once
        ({"hand": list(range(52)) * 400}, "a card out of"),  # a bot's choice was quadratic
        ({"seat": 4_000_000_000}, "a seat out of 0..9"),
        ({"trick": [pb.PlayedCard(seat=11, card=3)]}, "a seat out of"),
        ({"trump": 99}, "whose trump is 99"),
        ({"winners": [4_000_000_000]}, "a seat out of"),
        ({"clocks": [pb.SeatClock(seat=123_456)]}, "a seat out of"),
        ({"legal_actions": [pb.ActionChoice(action=7)]}, "not actions of a game"),
        ({"legal_actions": [pb.ActionChoice(action=8)] * 5000}, "not actions of a game"),
    ],
)
def test_a_view_no_game_has_is_refused_where_it_is_received(
    fields: dict[str, Any], said: str
) -> None:
    assert checked_view(_view()) == _view()
    with pytest.raises(RefereeError, match=said) as exc:
        checked_view(_view(**fields))
    assert exc.value.status == grpc.StatusCode.DATA_LOSS


def test_a_record_is_verified_under_its_id_before_a_client_keeps_it() -> None:
    rid = record_id(DP1.record)
    good = pb.GetRecordResponse(envelope=DP1, record_id=rid)
    assert checked_record(good) is good
    with pytest.raises(RefereeError, match=r"record id .0+. for record"):
        checked_record(pb.GetRecordResponse(envelope=DP1, record_id="0" * 64))
    # The record of another table (here a transcript's): not the one asked for.
    with pytest.raises(RefereeError, match=r"the record of transcript .*, not of table 'T'"):
        checked_record(good, "T")
    garbage = pb.GetRecordResponse(record_id=rid)
    garbage.envelope.record = b"\x08\x01garbage"
    with pytest.raises(RefereeError, match="a record that does not verify"):
        checked_record(garbage)


class _Hostile(referee_pb2_grpc.RefereeServiceServicer):
    """GetRecord: bytes that are no record; CreateTable: a token for a seat the table does
    not have, with names that would clear a terminal."""

    async def GetRecord(self, request: Any, context: Any) -> pb.GetRecordResponse:
        got = pb.GetRecordResponse(record_id="a" * 64)
        got.envelope.record = b"\x08\x01 not a record"
        return got

    async def CreateTable(self, request: Any, context: Any) -> pb.CreateTableResponse:
        return pb.CreateTableResponse(
            table_id="\x1b[2Jt", tokens=[pb.SeatToken(seat=7, token="\x1b]0;x\x07")]
        )

    async def GetTable(self, request: Any, context: Any) -> pb.GetTableResponse:
        await context.abort(grpc.StatusCode.NOT_FOUND, "\x1b[2J\u202eno such table")


def test_tapis_against_a_hostile_referee(tmp_path: Path) -> None:
    """`table record` writes nothing and says the record does not verify; `table create`
    with a token for seat 7 of 4 ends with one line; a referee's message with escapes is
    printed escaped. No traceback, nothing written, exit 1."""

    async def main() -> list[tuple[int, str, str]]:
        server = grpc.aio.server()
        referee_pb2_grpc.add_RefereeServiceServicer_to_server(_Hostile(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        address = f"127.0.0.1:{port}"
        out = tmp_path / "r.tapis"
        commands = [
            ("table", "record", "T", "-o", out, "--address", address),
            ("table", "create", "--address", address),
            ("bot", "--address", address, "--table", "T", "--seat", "1", "--token", "k"),
        ]
        done = []
        try:
            for args in commands:
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "tapis_cartes.clients.cli", *map(str, args),
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                    cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                )  # fmt: skip
                stdout, stderr = await asyncio.wait_for(child.communicate(), 60)
                assert child.returncode is not None
                done.append((child.returncode, stdout.decode(), stderr.decode()))
        finally:
            await server.stop(0)
        return done

    (record, create, bot) = asyncio.run(main())
    for status, stdout, stderr in (record, create, bot):
        assert status == 1, stderr
        assert "Traceback" not in stderr and "\x1b" not in stdout + stderr, stderr
        assert len(stderr.splitlines()) == 1, stderr
    assert "a record that does not verify" in record[2] and not (tmp_path / "r.tapis").exists()
    assert "tapis table create: a reply of the referee cannot be used" in create[2]
    assert "NOT_FOUND: \\u001b[2J\\u202eno such table" in bot[2]


def test_a_token_no_header_can_carry_is_refused_before_any_call() -> None:
    """A token with an escape (from the command line, or a referee's reply) reached gRPC,
    which logged 36 blocks of its own and ended the call INTERNAL after 7.7 s."""
    client = RefereeClient("127.0.0.1:1")
    assert client.seat("t", 0, "Abc-123_x").token == "Abc-123_x"
    for token in ("\x1b[2J", "é", "a\nb"):
        with pytest.raises(RefereeError, match="a token is printable ASCII") as exc:
            client.seat("t", 0, token)
        assert exc.value.status == grpc.StatusCode.INVALID_ARGUMENT


def test_a_client_refuses_settings_and_arguments_that_are_none_before_any_call() -> None:
    """`RefereeClient(retries="3")` failed at its first retry, deep in the client; `act(...,
    attempts=0)` called the referee, then raised AssertionError; a request id 5 was a
    TypeError of protobuf's."""
    for settings, said in [
        ({"retries": "3"}, "retries is '3'"),
        ({"retries": True}, "retries is True"),
        ({"backoff": "0.1"}, "backoff is '0.1'"),
        ({"max_backoff": None}, "max_backoff is None"),
        ({"timeout": float("nan")}, "timeout is nan"),
        ({"timeout": -1}, "timeout is -1"),
    ]:
        with pytest.raises(ValueError, match=re.escape(said)):
            RefereeClient("127.0.0.1:1", **settings)
    client = RefereeClient("127.0.0.1:1")
    handle = client.seat("t", 0, "token")
    with pytest.raises(RefereeError, match="attempts is 0, not 1 or more: nothing was sent"):
        asyncio.run(handle.act(5, attempts=0))
    with pytest.raises(RefereeError, match=r"request_id is 5 .int., not text: nothing was sent"):
        asyncio.run(client.create_table("hearts", request_id=5))  # type: ignore[arg-type]
    for metadata in [(("Authorization\n", "x"),), (("authorization", "Bearer \x1b"),), "ab"]:
        with pytest.raises(RefereeError, match="nothing was sent"):  # (was INTERNAL, retried)
            client.watch("t", metadata=metadata)  # type: ignore[arg-type]
    assert client.calls == {}
