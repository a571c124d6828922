"""`tapis table create --json` and `tapis table record` against a real `tapis serve`: a
script reads the table and its tokens as JSON, and fetches the signed record of the finished
table into a file that `tapis record verify --key` accepts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc

from tapis_cartes.referee.server.tables import new_table_id
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc
from tests.commands import tapis
from tests.server.util import Server, auth


def test_create_as_json_then_fetch_the_signed_record(tmp_path: Path) -> None:
    server = Server(tmp_path)
    server.start()
    address = f"127.0.0.1:{server.port}"
    try:

        async def ready() -> None:
            async with grpc.aio.insecure_channel(address) as channel:
                await server.serving(channel)

        asyncio.run(ready())
        made = tapis("table", "create", "--address", address, "--game", "nap",
                     "--players", "Ann,Bob,Cat,Dan", "--open", "3", "--json")  # fmt: skip
        assert made.returncode == 0, made.stderr
        table = json.loads(made.stdout)
        seats = table["seats"]
        assert [s["name"] for s in seats] == ["Ann", "Bob", "Cat", "Dan"]
        assert [("token" in s, s["open"]) for s in seats] == [(True, False)] * 3 + [(False, True)]
        assert table["commitment"]["algorithm"] == "tapis-deal/1"
        out = tmp_path / "t.tapis"
        early = tapis("table", "record", table["table_id"], "-o", out, "--address", address)
        assert early.returncode == 1 and "not finished" in early.stderr, early.stderr
        assert not out.exists()

        async def finish() -> None:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = rpc.RefereeServiceStub(channel)
                await stub.JoinTable(pb.JoinTableRequest(table_id=table["table_id"]))
                token = seats[0]["token"]
                request = pb.ResignRequest(table_id=table["table_id"], seat=0)
                await stub.Resign(request, metadata=auth(token))

        asyncio.run(finish())
        got = tapis("table", "record", table["table_id"], "-o", out, "--address", address)
        assert got.returncode == 0, got.stderr
        assert f"of table {table['table_id']}" in got.stdout
        checked = tapis("record", "verify", out, "--key", tmp_path / "k.key")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        missing = tapis("table", "record", "nope", "-o", out, "--address", address)
        assert missing.returncode != 0 and "Traceback" not in missing.stderr
        assert "nope" in missing.stderr
        # An int option past 64 bits: the option named, not "a reply ... cannot be used".
        huge = tapis("table", "create", "--address", address, "--option",
                     "end_threshold=99999999999999999999")  # fmt: skip
        assert huge.returncode == 1 and "Traceback" not in huge.stderr, huge.stderr
        assert huge.stderr.strip() == (
            "tapis table create: option 'end_threshold': 99999999999999999999 does not fit 64 bits"
        )
    finally:
        server.terminate()


def test_a_table_id_never_reads_as_an_option() -> None:
    """Table ids are random URL-safe text: one starting with "-" would be read by the command
    line as an option (`tapis table record -Iq... -o FILE`); the referee never makes one."""
    ids = [new_table_id() for _ in range(5000)]  # about 78 would start with "-" by chance
    assert [i for i in ids if i.startswith("-")] == []
    assert len(set(ids)) == len(ids) and {len(i) for i in ids} == {16}
    assert any("-" in i for i in ids)  # the alphabet is still the URL-safe one
