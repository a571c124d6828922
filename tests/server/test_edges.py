"""The referee under hostile or unlucky clients, on real servers: requests that do not decode or
are out of bounds, callers that go away mid-commit, concurrent creations, a restart during the
reload, a second referee on the same store or port, request ids, expiring seats, tables stopped
at their limits, and tables broken by an internal error, isolated from the rest."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tapis_cartes.records.codec import decode_record, encode_varint
from tapis_cartes.records.signing import load_public_key
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.server import lenient as lenient_module
from tapis_cartes.referee.server import store as store_module
from tapis_cartes.referee.server import tables
from tapis_cartes.referee.server.app import ListenError, RunningServer, create_server
from tapis_cartes.referee.server.store import StoreLocked
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import auth, free_port, new_table, play_random, run

METHODS = [m.name for m in pb.DESCRIPTOR.services_by_name["RefereeService"].methods]


async def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    """The status of a call that is expected to fail (the call itself is awaited)."""
    try:
        result = await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    raise AssertionError(f"the call succeeded: {result}")


def test_undecodable_requests_are_invalid_argument_on_every_method(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, channel: Any) -> None:
        garbage = [b"\xff\xff\xff", b"\x0a\x05ab", b"\x12\xff\xff\xff\xff\x0f", b"\x08" * 3]
        for method in METHODS:
            path = f"/tapis.v1.RefereeService/{method}"
            streaming = method == "WatchTable"
            call = (channel.unary_stream if streaming else channel.unary_unary)(path)
            for data in garbage:
                if streaming:
                    with pytest.raises(grpc.aio.AioRpcError) as exc:
                        async for _ in call(data):
                            pass
                    code, details = exc.value.code(), exc.value.details() or ""
                else:
                    code, details = await _code(call(data))
                assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, data, code, details)
                assert "does not decode" in details

    run(body, tmp_path)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    """One field as protobuf sends it: its key, then `payload` (length-prefixed for wire 2)."""
    key = encode_varint(number << 3 | wire)
    return key + (encode_varint(len(payload)) + payload if wire == 2 else payload)


def test_fields_not_read_as_sent_are_refused_naming_them(tmp_path: Path) -> None:
    """A request holding a field its decoder cannot read as the field sent (a known field
    with another wire type, or a number the message does not have) is INVALID_ARGUMENT
    naming the field, and changes nothing: protobuf would read it as unset (an `action` sent
    length-delimited would be action 0, a `time_control` sent as a number no clock)."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, channel: Any) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        view = (await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=0),
                                   metadata=auth(tokens[0]))).view  # fmt: skip
        action = view.legal_actions[-1].action
        head = pb.SubmitActionRequest(
            table_id=table_id, seat=0, expected_action_index=view.action_index
        ).SerializeToString()
        submit = channel.unary_unary("/tapis.v1.RefereeService/SubmitAction")
        create = channel.unary_unary("/tapis.v1.RefereeService/CreateTable")
        seats = b"".join(_field(4, 2, pb.SeatRequest(name=n).SerializeToString()) for n in "ABCD")
        cases = [
            (
                submit,
                head + _field(4, 2, encode_varint(action)),
                "action: sent as length-delimited",
            ),
            (submit, head + _field(4, 5, action.to_bytes(4, "little")), "action: sent as 4 fixed"),
            (
                submit,
                head + _field(4, 0, encode_varint(action)) + _field(99, 0, b"\x01"),
                "request: field 99, sent as a varint (wire type 0), is none of",
            ),
            (create, _field(1, 2, b"hearts") + seats + _field(6, 0, b"\x01"), "time_control: "),
            (
                create,
                _field(1, 2, b"hearts")
                + seats
                + _field(6, 2, _field(1, 1, (5000).to_bytes(8, "little"))),
                "time_control.action_ms: sent as 8 fixed bytes (wire type 1); field 1 of "
                "tapis.v1.TimeControl is sent as a varint (wire type 0)",
            ),
            (
                create,
                _field(1, 2, b"hearts")
                + seats[: len(seats) // 4 * 3]
                + _field(4, 2, _field(1, 0, b"\x07")),
                "seats[3].name: sent as a varint",
            ),
            # A value that does not fit its field of 32 bits, of which protobuf keeps the
            # low 32 bits: a limit of 100 ms, seat 0, the forfeit policy, not what was sent.
            (
                create,
                _field(1, 2, b"hearts")
                + seats
                + _field(6, 2, _field(1, 0, encode_varint(2**32 + 100))),
                "time_control.action_ms: 4294967396 does not fit its type, uint32",
            ),
            (
                create,
                _field(1, 2, b"hearts")
                + seats
                + _field(6, 2, _field(1, 0, b"\x64") + _field(4, 0, encode_varint(2**32 + 1))),
                "time_control.policy: 4294967297 does not fit its type, enum (int32)",
            ),
            (
                submit,
                head + _field(2, 0, encode_varint(2**32)) + _field(4, 0, encode_varint(action)),
                "seat: 4294967296 does not fit its type, uint32",
            ),
        ]
        for call, data, words in cases:
            code, details = await _code(call(data, metadata=auth(tokens[0])))
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (data, code, details)
            assert details.startswith(words) and "is not read as it was sent" in details, details
        after = (await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=0),
                                    metadata=auth(tokens[0]))).view  # fmt: skip
        assert after.action_index == view.action_index  # no action was applied
        assert list(server.referee.tables) == [table_id]  # no table was made
        # In a PlaySeat stream, the submission is refused in the stream, naming the field.
        play = channel.stream_stream("/tapis.v1.RefereeService/PlaySeat")
        opened = pb.PlaySeatRequest(
            open=pb.PlaySeatOpen(table_id=table_id, seat=0)
        ).SerializeToString()
        bad = _field(2, 2, head + _field(4, 2, encode_varint(action)))
        call = play(iter([opened, bad]), metadata=auth(tokens[0]))
        refused = None
        async for raw in call:
            reply = pb.PlaySeatResponse.FromString(raw)
            if reply.HasField("refused"):
                refused = reply.refused
                break
        call.cancel()
        assert refused is not None and refused.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert refused.message.startswith("submit.action: sent as length-delimited"), refused
        # gRPC's own services (health checking) read their requests so too.
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        code, details = await _code(check(_field(1, 0, b"\x01")))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("service: "), details

    run(body, tmp_path)


def test_oversized_fields_are_refused_with_a_short_message(tmp_path: Path) -> None:
    big = "x" * 60_000  # (a request holds 64 KiB: past it, gRPC's own RESOURCE_EXHAUSTED)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, _ = await new_table(stub, "dame-de-pique", "", {}, 4)
        calls: list[tuple[str, Any]] = [
            ("table_id", stub.GetTable(pb.GetTableRequest(table_id=big))),
            ("table_id", stub.GetView(pb.GetViewRequest(table_id=big))),
            ("table_id", stub.GetRecord(pb.GetRecordRequest(table_id=big))),
            ("game", stub.CreateTable(pb.CreateTableRequest(game=big))),
            ("name", stub.JoinTable(pb.JoinTableRequest(table_id=table_id, name=big))),
            ("request_id", stub.JoinTable(pb.JoinTableRequest(table_id="t", request_id=big))),
            (
                "seats[1].name",
                stub.CreateTable(
                    pb.CreateTableRequest(
                        game="hearts",
                        seats=[pb.SeatRequest(name="A"), pb.SeatRequest(name=big)],
                    )
                ),
            ),
            (
                "options[0].string_value",
                stub.CreateTable(
                    pb.CreateTableRequest(
                        game="hearts",
                        options=[rpb.Option(key="moon_mode", string_value=big)],
                        seats=[pb.SeatRequest(name=n) for n in "ABCD"],
                    )
                ),
            ),
            (
                "options[0].key",
                stub.CreateTable(
                    pb.CreateTableRequest(
                        game="hearts",
                        options=[rpb.Option(key=big, int_value=1)],
                        seats=[pb.SeatRequest(name=n) for n in "ABCD"],
                    )
                ),
            ),
            (
                "seats[0].name",
                stub.CreateTable(
                    pb.CreateTableRequest(game="hearts", seats=[pb.SeatRequest(name="a\nb")] * 4)
                ),
            ),
            (
                "options[1].key",
                stub.CreateTable(
                    pb.CreateTableRequest(
                        game="hearts",
                        options=[rpb.Option(key="end_threshold", int_value=50)] * 2,
                        seats=[pb.SeatRequest(name=n) for n in "ABCD"],
                    )
                ),
            ),
            (
                "seats",
                stub.CreateTable(
                    pb.CreateTableRequest(game="napoleon", seats=[pb.SeatRequest()] * 11)
                ),
            ),
        ]
        for field, call in calls:
            code, details = await _code(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, code, details[:200])
            assert details.startswith(f"{field}: "), details[:200]
            assert len(details) < 400, details[:200]
        # A watch from a huge id, and one from an event the table has not reached.
        for request, code in [
            (pb.WatchTableRequest(table_id=big), grpc.StatusCode.INVALID_ARGUMENT),
            (
                pb.WatchTableRequest(table_id=table_id, from_event_index=10**6),
                grpc.StatusCode.OUT_OF_RANGE,
            ),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                async for _ in stub.WatchTable(request):
                    pass
            assert exc.value.code() == code
            assert len(exc.value.details() or "") < 400
        # Past 64 KiB a request is gRPC's to refuse, before it is parsed: a megabyte of empty
        # options (13 MB once parsed, and held while answered) is refused as cheaply as one
        # long name.
        for request in (
            pb.CreateTableRequest(game="hearts", options=[rpb.Option()] * 500_000),
            pb.CreateTableRequest(game="hearts", seats=[pb.SeatRequest(name="x" * 70_000)] * 4),
        ):
            code, details = await _code(stub.CreateTable(request))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, (code, details[:200])
            assert "larger than max" in details
        # The table refused nothing it should not have, and answers as before.
        got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert [s.name for s in got.seats] == ["P0", "P1", "P2", "P3"]

    run(body, tmp_path)


# Characters a terminal obeys rather than shows (referee/errors.py `control_character`): a
# line break, an escape, a C1 control, the line separator, and bidirectional controls that
# would make a name read backwards on every screen that shows it.
CONTROLS = ["a\nb", "a\x1b[2Jb", "a\x85b", "a\u2028b", "Eve\u202egnirts", "a\u2066b\u2069"]


def test_names_with_control_characters_are_refused(tmp_path: Path) -> None:
    """A player's name with a control character (C0, C1, a separator, a bidirectional
    control) is INVALID_ARGUMENT naming the field and the character, at creation and at
    joining; a name in any script, with accents or emoji, is a name."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        others = [pb.SeatRequest(name=n) for n in "BCD"]
        for name in CONTROLS:
            code, details = await _code(
                stub.CreateTable(
                    pb.CreateTableRequest(game="hearts", seats=[*others, pb.SeatRequest(name=name)])
                )
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
            first = next(ch for ch in name[1:] if not ch.isalnum())
            assert details.startswith("seats[3].name: "), details
            assert f"control character (U+{ord(first):04X})" in details, details
        open_seat = await stub.CreateTable(
            pb.CreateTableRequest(game="hearts", seats=[*others, pb.SeatRequest(open=True)])
        )
        for name in CONTROLS:
            code, details = await _code(
                stub.JoinTable(pb.JoinTableRequest(table_id=open_seat.table_id, name=name))
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
            assert details.startswith("name: ") and "control character" in details, details
        fine = ["Åsa Ødegård", "Łukasz", "Ямщик", "中文名", "زهرة", "Ann 🂡"]
        made = await stub.CreateTable(
            pb.CreateTableRequest(game="hearts", seats=[pb.SeatRequest(name=n) for n in fine[:4]])
        )
        joined = await stub.JoinTable(
            pb.JoinTableRequest(table_id=open_seat.table_id, name=fine[5])
        )
        table = await stub.GetTable(pb.GetTableRequest(table_id=made.table_id))
        assert [s.name for s in table.seats] == fine[:4]
        assert joined.token.seat == 3 and joined.token.token

    run(body, tmp_path)


# Names that show nothing, or less than they hold (referee/errors.py `name_fault`): a zero-
# width space, a byte-order mark, a soft hyphen, a joiner between Latin or Cyrillic letters or
# next to another, a tag, a variation selector after a letter or alone, the grapheme joiner,
# a noncharacter; and names of only spaces, of a blank filler, of a combining mark; and a
# letter under 63 marks (drawn over the lines above and below it in the web pages).
HIDDEN = {
    "Ann\u200b": "shows nothing (U+200B)",
    "\ufeffBob": "shows nothing (U+FEFF)",
    "Ca\u00adrl": "shows nothing (U+00AD)",
    "al\u200dice": "shows nothing (U+200D)",
    "\u0412\u043e\u0432\u200d\u0430": "shows nothing (U+200D)",
    "\u0645\u200d\u200d\u0645": "shows nothing (U+200D)",
    "Eve\U000e0041": "shows nothing (U+E0041)",
    "Ann\ufe0f": "shows nothing (U+FE0F)",
    "\ufe00\ufe01": "shows nothing (U+FE00)",
    "Bo\u034fb": "shows nothing (U+034F)",
    "Dan\ufdd0": "noncharacter (U+FDD0)",
    "   ": "shows nothing (U+0020 U+0020 U+0020)",
    "\u3164": "shows nothing (U+3164)",
    "\u0301": "shows nothing (U+0301)",
    "A" + "\u0301" * 63: "holds more than 8 marks on one character (U+0301)",
}


def test_names_that_show_nothing_are_refused(tmp_path: Path) -> None:
    """A player's name holding a character that shows nothing, or showing nothing at all, is
    INVALID_ARGUMENT naming the field and the character, at creation and at joining: one
    name could pass for another, or for none. The joiners that Persian and emoji sequences
    are written with, and a flag's tags, are parts of a name."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        others = [pb.SeatRequest(name=n) for n in "BCD"]
        open_seat = await stub.CreateTable(
            pb.CreateTableRequest(game="hearts", seats=[*others, pb.SeatRequest(open=True)])
        )
        for name, words in HIDDEN.items():
            code, details = await _code(
                stub.CreateTable(
                    pb.CreateTableRequest(game="hearts", seats=[pb.SeatRequest(name=name), *others])
                )
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
            assert details.startswith("seats[0].name: ") and details.endswith(words), details
            code, details = await _code(
                stub.JoinTable(pb.JoinTableRequest(table_id=open_seat.table_id, name=name))
            )
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (name, code, details)
            assert details.startswith("name: ") and details.endswith(words), details
        fine = [
            "\u0632\u0647\u0631\u200c\u0647",
            "\U0001f468\u200d\U0001f469",
            "Flag \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
            "",
            "\u2764\ufe0f Bob",  # an emoji's presentation
            "\u845b\U000e0100",  # an ideograph's variant
            "\u0915\u094d\u200d\u0937",  # Devanagari: a virama, then a joiner
            "Player 1\ufe0f\u20e3",  # a keycap
        ]
        for four in (fine[:4], fine[4:]):
            made = await stub.CreateTable(
                pb.CreateTableRequest(game="hearts", seats=[pb.SeatRequest(name=n) for n in four])
            )
            table = await stub.GetTable(pb.GetTableRequest(table_id=made.table_id))
            assert [s.name for s in table.seats] == [n or "seat 3" for n in four]

    run(body, tmp_path)


def test_a_resignation_racing_other_seats_actions_is_never_stale(tmp_path: Path) -> None:
    """A seat resigns at any moment of play and names no index: sent while another seat's
    action is being applied (in play, and during the Dame de Pique exchange, whose passes are
    stored together), it is applied after that action, never refused as stale (it was:
    ABORTED, "expected_action_index is 7 but the table is at 8")."""

    async def view(stub: rpc.RefereeServiceStub, table_id: str, token: str, seat: int) -> Any:
        request = pb.GetViewRequest(table_id=table_id, seat=seat)
        return (await stub.GetView(request, metadata=auth(token))).view

    async def act(stub: rpc.RefereeServiceStub, table_id: str, token: str, seen: Any) -> int:
        done = await stub.SubmitAction(
            pb.SubmitActionRequest(
                table_id=table_id,
                seat=seen.seat,
                expected_action_index=seen.action_index,
                action=seen.legal_actions[0].action,
            ),
            metadata=auth(token),
        )
        return int(done.action_index)

    async def submit(stub: rpc.RefereeServiceStub, table_id: str, token: str, seat: int) -> int:
        return await act(stub, table_id, token, await view(stub, table_id, token, seat))

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        for trial in range(12):
            table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
            in_play = trial % 2 == 0
            if in_play:  # the exchange made, the first trick under way: seat 0..3 in turn
                for seat in range(4):
                    await submit(stub, table_id, tokens[seat], seat)
                movers = list((await view(stub, table_id, tokens[0], 0)).to_act[:1])
            else:  # three seats pass at once
                movers = [0, 1, 2]
            seen = [await view(stub, table_id, tokens[s], s) for s in movers]
            resigner = next(s for s in range(4) if s not in movers)
            moved, resigned = await asyncio.gather(
                asyncio.gather(
                    *(act(stub, table_id, tokens[v.seat], v) for v in seen),
                    return_exceptions=True,
                ),
                stub.Resign(
                    pb.ResignRequest(table_id=table_id, seat=resigner),
                    metadata=auth(tokens[resigner]),
                ),
            )
            # A submission the resignation came before finds the match over, whatever its
            # index: no turn will come.
            for m in moved:
                if isinstance(m, BaseException):
                    assert isinstance(m, grpc.aio.AioRpcError), m
                    assert m.code() == grpc.StatusCode.FAILED_PRECONDITION, m
                    assert m.details() == "the match is already over [DP.END]", m
            got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
            record = decode_record(got.envelope.record)
            assert "resign" in record.outcome.reason, (trial, record.outcome.reason)
            assert f"seat {resigner}" in record.outcome.reason, (trial, record.outcome.reason)
            last = record.hands[-1]
            assert list(last.seats)[-1] == resigner, trial
            applied = [m for m in moved if isinstance(m, int)]
            assert all(resigned.action_index > m for m in applied), (trial, moved, resigned)

    run(body, tmp_path)


def test_exactly_one_authorization_entry(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        request = pb.GetViewRequest(table_id=table_id, seat=0)
        good = auth(tokens[0])[0]
        for metadata in [
            (good, good),
            (good, ("authorization", "Bearer nope")),
            (("authorization", "Basic abc"),),
            (("authorization", "Bearer "),),
        ]:
            code, _ = await _code(stub.GetView(request, metadata=metadata))
            assert code == grpc.StatusCode.UNAUTHENTICATED, metadata
        assert (await stub.GetView(request, metadata=(good,))).view.seat == 0

    run(body, tmp_path)


def test_concurrent_creations_by_one_client_keep_the_count_exact(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        referee = server.referee

        async def create() -> str | grpc.StatusCode:
            try:
                table_id, _ = await new_table(stub, "dame-de-pique", "", {}, 4)
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            return table_id

        results = await asyncio.gather(*(create() for _ in range(60)))
        made = [r for r in results if isinstance(r, str)]
        refused = [r for r in results if not isinstance(r, str)]
        assert len(made) == 20
        assert refused == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 40
        assert referee.open_tables("ipv4:127.0.0.1") == 20
        # Every one resigned at once: each closes once, and the count comes back to 0.
        resigned = await asyncio.gather(
            *(referee.resign(referee.tables[t], 0) for t in made), return_exceptions=True
        )
        assert all(isinstance(r, int) for r in resigned), resigned
        assert referee.open_tables("ipv4:127.0.0.1") == 0
        assert all(referee.tables[t].envelope is not None for t in made)
        await new_table(stub, "dame-de-pique", "", {}, 4)  # room again
        assert referee.open_tables("ipv4:127.0.0.1") == 1

    run(body, tmp_path, max_tables_per_client=20)


SLOW_WRITER = Path(__file__).with_name("slow_writer.py")


def _slow_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The referees started from now on store through tests/server/slow_writer.py, whose
    commits `_slow_commits` slows down."""
    monkeypatch.setattr(store_module, "_WRITER", SLOW_WRITER)


def _slow_commits(tmp_path: Path, seconds: float) -> None:
    """Every commit of the store (`run`'s, in `tmp_path`) takes `seconds` longer from now on
    (a slow disk)."""
    (tmp_path / "t.db.commit-delay").write_text(str(seconds))


def test_a_caller_gone_mid_commit_leaves_the_match_finished_with_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        watched: list[pb.TableEvent] = []

        async def watch() -> None:
            async for response in stub.WatchTable(pb.WatchTableRequest(table_id=table_id)):
                watched.append(response.event)

        watcher = asyncio.create_task(watch())
        _slow_commits(tmp_path, 0.4)
        code, _ = await _code(
            stub.Resign(
                pb.ResignRequest(table_id=table_id, seat=2), metadata=auth(tokens[2]), timeout=0.1
            )
        )
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        await asyncio.wait_for(watcher, 10)  # the stream ends with the match's end
        assert watched[-1].HasField("match_ended")
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
        assert decode_record(got.envelope.record).outcome.resigned == 2
        assert server.referee.open_tables("ipv4:127.0.0.1") == 0

    _slow_writer(monkeypatch)
    run(body, tmp_path)


def test_the_record_of_a_match_that_has_just_ended_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the last action was applied, GetRecord said UNAVAILABLE until the record was
    stored (a commit later): a client that fetched the record then was told to retry."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        _slow_commits(tmp_path, 0.4)
        resign = asyncio.ensure_future(
            stub.Resign(pb.ResignRequest(table_id=table_id, seat=2), metadata=auth(tokens[2]))
        )
        table = server.referee.tables[table_id]
        while not table.finished:  # the resignation stored (0.4 s) and applied
            await asyncio.sleep(0.005)
        assert table.envelope is None  # its record being stored (0.4 s)
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
        assert decode_record(got.envelope.record).outcome.resigned == 2
        await resign

    _slow_writer(monkeypatch)
    run(body, tmp_path)


def test_a_cancelled_submission_is_applied_once_and_answered_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        view = (await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=0),
                                   metadata=auth(tokens[0]))).view  # fmt: skip
        submit = pb.SubmitActionRequest(
            table_id=table_id, seat=0, expected_action_index=0, action=view.legal_actions[0].action
        )
        _slow_commits(tmp_path, 0.3)
        code, _ = await _code(stub.SubmitAction(submit, metadata=auth(tokens[0]), timeout=0.05))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        again = await stub.SubmitAction(submit, metadata=auth(tokens[0]))  # the client retries
        assert again.action_index == 0
        assert (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).action_index == 1

    _slow_writer(monkeypatch)
    run(body, tmp_path)


def test_requests_during_the_reload_are_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def first(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        return [await new_table(stub, "dame-de-pique", "", {}, 4) for _ in range(3)]

    made = run(first, tmp_path)
    reload = tables.Referee._reload

    async def slow_reload(self: Any, stored: Any) -> None:
        await asyncio.sleep(0.3)
        await reload(self, stored)

    monkeypatch.setattr(tables.Referee, "_reload", slow_reload)

    port = free_port()

    async def main() -> None:
        starting = asyncio.create_task(
            create_server(f"127.0.0.1:{port}", tmp_path / "t.db", tmp_path / "k.key")
        )
        await asyncio.sleep(0.2)  # bound and serving, the tables still loading
        assert not starting.done()
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = rpc.RefereeServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            table_id, tokens = made[-1]
            request = pb.GetViewRequest(table_id=table_id, seat=0)
            code, details = await _code(stub.GetView(request, metadata=auth(tokens[0])))
            assert code == grpc.StatusCode.UNAVAILABLE and "starting" in details
            status = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
            server = await starting
            try:
                status = await health.Check(health_pb2.HealthCheckRequest(service=""))
                assert status.status == health_pb2.HealthCheckResponse.SERVING
                view = await stub.GetView(request, metadata=auth(tokens[0]))
                assert view.view.action_index == 0
            finally:
                await server.stop(0)

    asyncio.run(main())


def test_one_referee_per_store_and_per_port(tmp_path: Path) -> None:
    async def main() -> None:
        server = await create_server("127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key")
        try:
            with pytest.raises(StoreLocked, match="in use by another referee"):
                await create_server("127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key")
            with pytest.raises(ListenError, match="cannot listen"):
                await create_server(
                    f"127.0.0.1:{server.port}", tmp_path / "u.db", tmp_path / "k.key"
                )
            assert not (tmp_path / "u.db").exists()  # nothing made for a port in use
            with pytest.raises(ListenError):
                await create_server("nonsense", tmp_path / "v.db", tmp_path / "v.key")
            assert not (tmp_path / "v.db").exists() and not (tmp_path / "v.key").exists()
        finally:
            await server.stop(0)
        again = await create_server("127.0.0.1:0", tmp_path / "t.db", tmp_path / "k.key")
        await again.stop(0)  # the lock went with the first referee

    asyncio.run(main())


def test_request_ids_make_create_and_join_idempotent(tmp_path: Path) -> None:
    def create(request_id: str, threshold: int = 50) -> pb.CreateTableRequest:
        return pb.CreateTableRequest(
            game="hearts",
            options=[rpb.Option(key="end_threshold", int_value=threshold)],
            seats=[pb.SeatRequest(name="A"), pb.SeatRequest(name="B", open=True)]
            + [pb.SeatRequest(name=n) for n in "CD"],
            request_id=request_id,
        )

    async def first(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        replies = await asyncio.gather(*(stub.CreateTable(create("r-1")) for _ in range(5)))
        assert len({r.table_id for r in replies}) == 1  # concurrent repeats: one table
        assert len({tuple((t.seat, t.token) for t in r.tokens) for r in replies}) == 1
        assert server.referee.open_tables("ipv4:127.0.0.1") == 1
        code, details = await _code(stub.CreateTable(create("r-1", threshold=60)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("request_id:")
        other = await stub.CreateTable(create("r-2"))
        assert other.table_id != replies[0].table_id
        table_id = replies[0].table_id
        join = pb.JoinTableRequest(table_id=table_id, name="Bee", request_id="j-1")
        joined = await asyncio.gather(*(stub.JoinTable(join) for _ in range(3)))
        assert len({(j.token.seat, j.token.token) for j in joined}) == 1
        view = await stub.GetView(
            pb.GetViewRequest(table_id=table_id, seat=1), metadata=auth(joined[0].token.token)
        )
        assert view.view.status == pb.TABLE_STATUS_PLAYING
        return replies[0], joined[0]

    created, joined = run(first, tmp_path)

    async def after_restart(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        again = await stub.CreateTable(create("r-1"))
        assert again == created
        join = pb.JoinTableRequest(table_id=created.table_id, name="Bee", request_id="j-1")
        assert await stub.JoinTable(join) == joined
        assert server.referee.open_tables("ipv4:127.0.0.1") == 2  # no table made twice

    run(after_restart, tmp_path)


def test_open_seats_expire_and_free_the_cap(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        waiting = await stub.CreateTable(
            pb.CreateTableRequest(
                game="hearts",
                seats=[pb.SeatRequest(name="A")] + [pb.SeatRequest(open=True)] * 3,
            )
        )
        code, _ = await _code(new_table(stub, "hearts", "", {}, 4))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED  # the cap of 1 is taken
        events = [
            r.event async for r in stub.WatchTable(pb.WatchTableRequest(table_id=waiting.table_id))
        ]
        closed = events[-1].table_closed
        assert closed.status == pb.TABLE_STATUS_EXPIRED and "seats 1, 2, 3" in closed.reason
        got = await stub.GetTable(pb.GetTableRequest(table_id=waiting.table_id))
        assert got.status == pb.TABLE_STATUS_EXPIRED
        code, details = await _code(stub.JoinTable(pb.JoinTableRequest(table_id=got.table_id)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "expired" in details
        await new_table(stub, "hearts", "", {}, 4)  # the cap is free again
        return None

    run(body, tmp_path, max_tables_per_client=1, open_seat_ttl=0.5)

    async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        rows = sqlite3.connect(tmp_path / "t.db").execute(
            "SELECT id FROM tables WHERE closed_status = 'expired'"
        )
        (table_id,) = rows.fetchone()
        got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert got.status == pb.TABLE_STATUS_EXPIRED  # still, after a restart

    run(after, tmp_path, max_tables_per_client=1, open_seat_ttl=0.5)


def test_a_player_who_resigns_a_table_still_waiting_leaves_it_and_frees_the_cap(
    tmp_path: Path,
) -> None:
    """Resign at a table waiting for players was FAILED_PRECONDITION ("the table is waiting
    for players"): its creator, who the documentation tells to resign the tables it leaves,
    held its place until the open seats expired (an hour)."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> str:
        waiting = await stub.CreateTable(
            pb.CreateTableRequest(
                game="hearts",
                seats=[pb.SeatRequest(name="A")] + [pb.SeatRequest(open=True)] * 3,
            )
        )
        joined = await stub.JoinTable(pb.JoinTableRequest(table_id=waiting.table_id, name="B"))
        code, _ = await _code(new_table(stub, "hearts", "", {}, 4))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED  # the cap of 1 is taken
        resign = pb.ResignRequest(table_id=waiting.table_id, seat=joined.token.seat)
        left = await stub.Resign(resign, metadata=auth(joined.token.token))
        assert left.action_index == 0
        events = [
            r.event async for r in stub.WatchTable(pb.WatchTableRequest(table_id=waiting.table_id))
        ]
        closed = events[-1].table_closed
        assert closed.status == pb.TABLE_STATUS_EXPIRED
        assert closed.reason == "seat 1 left before the match began", closed.reason
        code, details = await _code(stub.Resign(resign, metadata=auth(joined.token.token)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "expired" in details
        code, details = await _code(stub.JoinTable(pb.JoinTableRequest(table_id=waiting.table_id)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "expired" in details
        await new_table(stub, "hearts", "", {}, 4)  # the cap is free at once
        return waiting.table_id

    table_id = run(body, tmp_path, max_tables_per_client=1)

    async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert got.status == pb.TABLE_STATUS_EXPIRED  # still, after a restart
        assert server.referee.open_tables("ipv4:127.0.0.1") == 1  # (the table made after)

    run(after, tmp_path, max_tables_per_client=1)


def test_a_match_is_stopped_at_the_referees_limits_with_a_record(tmp_path: Path) -> None:
    async def hands(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "hearts", "", {"end_threshold": 1000}, 4)
        await play_random(stub, table_id, tokens, random.Random(3))
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        rec = decode_record(got.envelope.record)
        assert not rec.outcome.finished and len(rec.hands) == 2
        assert rec.outcome.reason == (
            "stopped by the referee after 2 hands, the most a table plays"
        )
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok

    run(hands, tmp_path, max_hands=2)

    async def actions(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "nap", "", {}, 4)
        await play_random(stub, table_id, tokens, random.Random(4))
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        rec = decode_record(got.envelope.record)
        assert not rec.outcome.finished and sum(len(h.actions) for h in rec.hands) == 30
        assert rec.outcome.reason.endswith("after 30 actions, the most a table plays")
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
        code, details = await _code(
            stub.SubmitAction(
                pb.SubmitActionRequest(table_id=table_id, seat=0, expected_action_index=30),
                metadata=auth(tokens[0]),
            )
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "stopped" in details

    run(actions, tmp_path, max_actions=30)


def test_a_restart_with_lower_limits_stops_the_matches_past_them(tmp_path: Path) -> None:
    """Tables that played past limits a restart lowers keep every acknowledged action and are
    stopped, with a record that says so and verifies; under the same limits again, they stay
    as they were. (They were replayed under the new limits, refused, and closed as broken for
    good, without a record.)"""

    async def play(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        rng = random.Random(7)
        tables = []
        for game, options in (("hearts", {"end_threshold": 1000}), ("nap", {})):
            table_id, tokens = await new_table(stub, game, "", options, 4)
            played = 0
            while played < 70:  # seventy actions, the match under way
                for seat, token in tokens.items():
                    request = pb.GetViewRequest(table_id=table_id, seat=seat)
                    view = (await stub.GetView(request, metadata=auth(token))).view
                    if view.legal_actions and played < 70:
                        submit = pb.SubmitActionRequest(
                            table_id=table_id,
                            seat=seat,
                            expected_action_index=view.action_index,
                            action=rng.choice(view.legal_actions).action,
                        )
                        await stub.SubmitAction(submit, metadata=auth(token))
                        played += 1
            got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
            assert got.status == pb.TABLE_STATUS_PLAYING and got.action_index == 70
            tables.append(table_id)
        return tables

    tables = run(play, tmp_path)

    async def lowered(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        reasons = []
        for table_id in tables:
            got = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
            assert got.status == pb.TABLE_STATUS_FINISHED, (table_id, got.status)
            assert got.action_index == 70
            record = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
            rec = decode_record(record.envelope.record)
            assert sum(len(h.actions) for h in rec.hands) == 70 and not rec.outcome.finished
            key = load_public_key(tmp_path / "k.key")
            assert verify_envelope(record.envelope, [key]).ok
            reasons.append(rec.outcome.reason)
        return reasons

    reasons = run(lowered, tmp_path, max_actions=30)
    assert (
        reasons
        == [
            "stopped by the referee after 70 actions, past the 30 a table now plays (the referee's"
            " limits were lowered)"
        ]
        * 2
    )
    again = run(lowered, tmp_path)
    assert again == reasons


def test_a_poisoned_store_still_starts_and_isolates_the_bad_tables(tmp_path: Path) -> None:
    async def first(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        return [await new_table(stub, "hearts", "", {}, 4) for _ in range(4)]

    made = run(first, tmp_path)
    conn = sqlite3.connect(tmp_path / "t.db")
    bad_options, bad_json, bad_action, good = (t for t, _ in made)
    conn.execute(
        "UPDATE tables SET options = ? WHERE id = ?",
        (json.dumps({"end_threshold": "many"}), bad_options),
    )
    conn.execute("UPDATE tables SET options = '{not json' WHERE id = ?", (bad_json,))
    conn.execute(
        "INSERT INTO actions (table_id, idx, seat, action) VALUES (?, 0, 0, ?)",
        (bad_action, 2**62),
    )
    conn.commit()
    conn.close()

    async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        assert set(server.referee.tables) == {good}
        for table_id in (bad_options, bad_json, bad_action):
            code, details = await _code(stub.GetTable(pb.GetTableRequest(table_id=table_id)))
            assert code == grpc.StatusCode.FAILED_PRECONDITION and "broken" in details, details
        assert server.referee.open_tables("ipv4:127.0.0.1") == 1
        tokens = dict(made)[good]
        view = await stub.GetView(
            pb.GetViewRequest(table_id=good, seat=0), metadata=auth(tokens[0])
        )
        assert view.view.status == pb.TABLE_STATUS_PLAYING

    run(after, tmp_path)
    rows = sqlite3.connect(tmp_path / "t.db").execute(
        "SELECT count(*) FROM tables WHERE closed_status = 'broken'"
    )
    assert rows.fetchone() == (3,)
    run(after, tmp_path)  # and again: the broken tables stay out of the way


def test_a_table_that_fails_inside_the_referee_is_isolated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        doomed, doomed_tokens = await new_table(stub, "hearts", "", {}, 4)
        fine, fine_tokens = await new_table(stub, "hearts", "", {}, 4)
        original = tables.build_record

        def failing(match: Any, *args: Any, **kwargs: Any) -> Any:
            if match is server.referee.tables[doomed].match:
                raise OverflowError("a score does not fit")
            return original(match, *args, **kwargs)

        monkeypatch.setattr(tables, "build_record", failing)
        reply = await stub.Resign(pb.ResignRequest(table_id=doomed, seat=1),
                                  metadata=auth(doomed_tokens[1]))  # fmt: skip
        assert reply.action_index == 0
        events = [r.event async for r in stub.WatchTable(pb.WatchTableRequest(table_id=doomed))]
        assert events[-1].table_closed.status == pb.TABLE_STATUS_BROKEN
        assert "OverflowError" in events[-1].table_closed.reason
        view = await stub.GetView(
            pb.GetViewRequest(table_id=doomed, seat=0), metadata=auth(doomed_tokens[0])
        )
        assert view.view.status == pb.TABLE_STATUS_BROKEN and not view.view.to_act
        assert (await stub.GetTable(pb.GetTableRequest(table_id=doomed))).status == (
            pb.TABLE_STATUS_BROKEN
        )
        code, details = await _code(stub.GetRecord(pb.GetRecordRequest(table_id=doomed)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "broken" in details
        assert server.referee.open_tables("ipv4:127.0.0.1") == 1
        # The other table plays on to its record.
        await play_random(stub, fine, fine_tokens, random.Random(1))
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=fine))
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
        return doomed

    doomed = run(body, tmp_path, max_hands=1)

    async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        got = await stub.GetTable(pb.GetTableRequest(table_id=doomed))
        assert got.status == pb.TABLE_STATUS_BROKEN  # a restart leaves it closed

    run(after, tmp_path)


def test_a_record_the_store_could_not_keep_is_issued_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store failing (a full disk) as the match's last action is answered: the action is
    stored, the record is not. The table was closed as broken for good, until a restart found
    it finished and issued its record, under the same event index (then `match_ended`). The
    store's failure is logged in one line (it was with a traceback, at every try)."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> Any:
        table_id, tokens = await new_table(stub, "hearts", "", {}, 4)
        store = server.referee.store
        original, failed = store.finish, []

        async def full_once(*args: Any) -> None:
            if not failed:
                failed.append(args)
                raise sqlite3.OperationalError("database or disk is full")
            await original(*args)

        store.finish = full_once  # type: ignore[method-assign]
        watch = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
        reply = await stub.Resign(pb.ResignRequest(table_id=table_id, seat=1),
                                  metadata=auth(tokens[1]))  # fmt: skip
        assert reply.action_index == 0 and failed
        code, details = await _code(stub.GetRecord(pb.GetRecordRequest(table_id=table_id)))
        assert code == grpc.StatusCode.UNAVAILABLE and "not stored yet" in details
        events = [r.event async for r in watch]  # (the record is tried again a second later)
        assert events[-1].WhichOneof("event") == "match_ended", events[-1]
        assert (await stub.GetTable(pb.GetTableRequest(table_id=table_id))).status == (
            pb.TABLE_STATUS_FINISHED
        )
        got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        assert verify_envelope(got.envelope, [load_public_key(tmp_path / "k.key")]).ok
        (said,) = [r for r in caplog.records if r.getMessage() == "record not stored"]
        assert said.exc_info is None and "disk is full" in said.fields["error"]  # type: ignore[attr-defined]
        return table_id, events[-1]

    table_id, last = run(body, tmp_path)

    async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        events = [r.event async for r in stub.WatchTable(pb.WatchTableRequest(table_id=table_id))]
        assert events[-1] == last  # the same event at the same index

    run(after, tmp_path)


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        (("", "-wal", "-shm"), "file was removed or replaced"),
        (("-wal", "-shm"), "-wal was removed or replaced"),
        (("-shm",), "-shm was removed or replaced"),
        ((), "file was cut short"),
    ],
)
def test_a_store_file_removed_under_the_referee_fails_the_store(
    tmp_path: Path, fault: tuple[str, ...], said: str
) -> None:
    """The store's file deleted while the referee runs: its writes went on into the unlinked
    file, acknowledged, and a restart found an empty store. Its -wal (and -shm) deleted, or
    its file cut to nothing: the referee went on acknowledging, and a crash then lost those
    moves (or the store). Now the next write that is answered finds the fault: it fails
    (UNAVAILABLE, nothing acknowledged) and the store fails, which stops `tapis serve` (exit
    1: app.py). (No fault: the file truncated to 0 bytes.)"""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> list[str]:
        failures: list[str] = []
        server.store.on_failure = failures.append
        made = [(await new_table(stub, "hearts", "", {}, 4))[0]]
        await asyncio.sleep(1.1)  # (the files are checked once a second at most)
        made.append((await new_table(stub, "hearts", "", {}, 4))[0])  # (its log seen made)
        for suffix in fault:
            with contextlib.suppress(FileNotFoundError):
                os.remove(server.store.path + suffix)
        if not fault:
            os.truncate(server.store.path, 0)
        await asyncio.sleep(1.1)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await new_table(stub, "hearts", "", {}, 4)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert len(failures) == 1 and said in failures[0], failures
        return made

    made = run(body, tmp_path)
    if fault and fault[0] != "":  # its log removed: what it held was copied into the file
        # (It was lost: the writer was killed, and the commits in the removed log with it.)
        async def after(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
            for table_id in made:
                await stub.GetTable(pb.GetTableRequest(table_id=table_id))  # (NOT_FOUND: lost)

        run(after, tmp_path)


def test_streams_per_client_are_bounded(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, _ = await new_table(stub, "hearts", "", {}, 4)
        request = pb.WatchTableRequest(table_id=table_id)
        calls = [stub.WatchTable(request) for _ in range(2)]
        for call in calls:
            await call.read()  # open: its first event came
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            async for _ in stub.WatchTable(request):
                pass
        assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for call in calls:
            call.cancel()
        await asyncio.sleep(0.2)
        third = stub.WatchTable(request)
        assert (await third.read()).event.index == 0  # room again once they closed
        third.cancel()

    run(body, tmp_path, max_streams_per_client=2)


def test_grpc_own_streams_count_among_the_clients_streams(tmp_path: Path) -> None:
    # Health Watch and reflection streams were not counted: one client held 18,000 of them
    # (517 MB the referee kept after they closed).
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, channel: Any) -> None:
        table_id, _ = await new_table(stub, "hearts", "", {}, 4)
        health = health_pb2_grpc.HealthStub(channel)
        watches = [health.Watch(health_pb2.HealthCheckRequest(service="")) for _ in range(2)]
        for call in watches:
            await call.read()  # open: its first status came
        for refused in (
            health.Watch(health_pb2.HealthCheckRequest(service="")),
            stub.WatchTable(pb.WatchTableRequest(table_id=table_id)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                async for _ in refused:
                    pass
            assert exc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "streams open (limit 2)" in (exc.value.details() or "")
        for call in watches:
            call.cancel()
        await asyncio.sleep(0.2)
        third = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
        assert (await third.read()).event.index == 0  # room again once they closed
        third.cancel()

    run(body, tmp_path, max_streams_per_client=2)


def test_a_call_whose_request_does_not_come_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A call whose headers came but never its request held its connection (neither idle
    # nor closed) and a stream: 4,096 such connections from one client left none for others.
    monkeypatch.setattr(lenient_module, "REQUEST_SECONDS", 0.3)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, channel: Any) -> None:
        for method in ("GetTable", "WatchTable", "PlaySeat"):
            call = channel.stream_stream(f"/tapis.v1.RefereeService/{method}")()
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await asyncio.wait_for(call.read(), 30)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "request did not come within" in (exc.value.details() or ""), method
        health = channel.stream_stream("/grpc.health.v1.Health/Check")()
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await asyncio.wait_for(health.read(), 30)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(body, tmp_path)


def test_a_backlog_comes_in_batches_and_few_streams_of_a_client_replay_at_once(
    tmp_path: Path,
) -> None:
    # 256 spectator streams of one client, each from event 0 of a table of 10,099 events:
    # every message of a stream's backlog was built at once (2.7 GB), and their writes took
    # the event loop from every other table (a 2.5 s match took 130 s).
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        # (At most 26 points a hand to a seat: five hands at least, more than 4 chunks.)
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 130}, 4)
        await play_random(stub, table_id, tokens, random.Random(4))
        table = server.referee.get(table_id)
        total = table.durable_events
        assert total > 4 * tables.WATCH_CHUNK
        sizes = [len(batch) async for batch in server.referee.watch(table, 0)]
        assert sum(sizes) == total and max(sizes) <= tables.WATCH_CHUNK

        async def spectator() -> list[int]:
            request = pb.WatchTableRequest(table_id=table_id)
            return [m.event.index async for m in stub.WatchTable(request)]

        seen = await asyncio.gather(*(spectator() for _ in range(6)))
        assert all(indexes == list(range(total)) for indexes in seen)
        assert server.servicer is not None and server.servicer.replays.most == 1

    run(body, tmp_path)


def test_a_stream_that_does_not_read_its_backlog_gives_its_place_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A stream whose client does not read keeps a write waiting, and would hold its place at
    # the gate as long: a few such clients would keep every other backlog waiting.
    from tapis_cartes.referee.server.limits import Backlog, ReplayGate

    monkeypatch.setattr(Backlog, "HOLD_SECONDS", 0.05)

    async def main() -> None:
        gate = ReplayGate(per_client=1, total=1)
        stuck = Backlog(gate, "a")
        await stuck.sending(True)  # takes the one place, then never sends again
        other = Backlog(gate, "b")
        await asyncio.wait_for(other.sending(True), 5)  # once the first's expired
        assert stuck.held is None and other.held is not None
        other.release()
        await asyncio.wait_for(stuck.sending(True), 5)  # its next batch waits again
        stuck.release()

    asyncio.run(main())


def test_tapis_serve_refuses_a_second_referee_a_used_port_and_a_bad_address(
    tmp_path: Path,
) -> None:
    root = Path(__file__).resolve().parents[2]
    port = free_port()

    def serve(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tapis_cartes.clients.cli", "serve", *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )

    first = serve("--listen", f"127.0.0.1:{port}")
    try:
        assert first.stdout is not None
        assert "listening" in first.stdout.readline()
        for args, said in [
            (("--listen", f"127.0.0.1:{free_port()}"), "in use by another referee"),
            (("--listen", f"127.0.0.1:{port}", "--db", "other.db"), "cannot listen"),
            (("--listen", "nonsense", "--db", "x.db", "--key", "x.key"), "cannot listen"),
        ]:
            second = serve(*args)
            _, err = second.communicate(timeout=60)
            assert second.returncode == 1, err
            assert said in err and "Traceback" not in err, err
        assert not any((tmp_path / f).exists() for f in ("other.db", "x.db", "x.key"))
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0


@pytest.mark.parametrize(
    ("given", "kind"), [((), "uvloop"), (("--event-loop", "asyncio"), "asyncio")]
)
def test_tapis_serve_plays_a_match_on_either_event_loop(
    tmp_path: Path, given: tuple[str, ...], kind: str
) -> None:
    """uvloop's by default (a dependency), asyncio's when asked: the same referee on both,
    a match played through to its record, which verifies; stopped cleanly by SIGTERM."""
    root = Path(__file__).resolve().parents[2]
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tapis_cartes.clients.cli", "serve", "--listen",
         f"127.0.0.1:{port}", *given],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )  # fmt: skip

    async def play() -> Any:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = rpc.RefereeServiceStub(channel)
            table_id, tokens = await new_table(stub, "dame-de-pique", "", {"end_threshold": 20}, 4)
            await play_random(stub, table_id, tokens, random.Random(5))
            reply = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
            return reply.envelope

    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith(f"tapis referee listening on 127.0.0.1:{port}"), line
        assert f"(event loop: {kind})" in line, line
        envelope = asyncio.run(play())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    key = load_public_key(tmp_path / "referee.key")
    assert verify_envelope(envelope, [key]).ok


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--max-message-bytes", "536870912", "is more than 536870911"),
        ("--max-streams-per-client", "2147483584", "is more than 1000000"),
        ("--max-connections", "1000001", "is more than 1000000"),
        ("--open-seat-ttl", "nan", "is not a finite number"),
        ("--open-seat-ttl", "inf", "is not a finite number"),
        ("--max-hands", "0", "is less than 1"),
    ],
)
def test_tapis_serve_refuses_limits_out_of_range_before_it_starts(
    tmp_path: Path, option: str, value: str, said: str
) -> None:
    """A limit past what gRPC takes (a C int), or no number, is a usage error naming the
    option, not a traceback; nothing is made."""
    done = subprocess.run(
        [sys.executable, "-m", "tapis_cartes.clients.cli", "serve", "--listen",
         f"127.0.0.1:{free_port()}", option, value],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"argument {option}: " in done.stderr and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def test_concurrent_joins_and_submissions_with_callers_gone_keep_store_and_counts_in_step(
    tmp_path: Path,
) -> None:
    rng = random.Random(11)

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        referee = server.referee
        waiting = []
        for _ in range(8):
            reply = await stub.CreateTable(
                pb.CreateTableRequest(
                    game="hearts",
                    seats=[pb.SeatRequest(name="A"), pb.SeatRequest(name="B")]
                    + [pb.SeatRequest(open=True)] * 2,
                )
            )
            waiting.append(reply.table_id)
        playing = [await new_table(stub, "hearts", "", {"end_threshold": 20}, 4) for _ in range(4)]

        async def attempt(call: Any) -> None:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await call

        def timeout() -> float | None:
            return rng.choice([None, 0.001, 0.005, 0.02])

        joins = [
            stub.JoinTable(pb.JoinTableRequest(table_id=rng.choice(waiting)), timeout=timeout())
            for _ in range(40)
        ]
        await asyncio.gather(*(attempt(c) for c in joins))
        for _ in range(30):  # rounds of submissions racing at the same index
            calls = []
            for table_id, tokens in playing:
                table = referee.tables[table_id]
                for seat in table.match.to_act() if not table.finished else ():
                    for action in rng.sample(table.legal(seat), min(2, len(table.legal(seat)))):
                        request = pb.SubmitActionRequest(
                            table_id=table_id,
                            seat=seat,
                            expected_action_index=len(table.actions),
                            action=action,
                        )
                        calls.append(
                            stub.SubmitAction(
                                request, metadata=auth(tokens[seat]), timeout=timeout()
                            )
                        )
            rng.shuffle(calls)
            await asyncio.gather(*(attempt(c) for c in calls))
        await asyncio.sleep(0.5)  # the changes whose callers went away finish
        assert not referee._tasks
        conn = sqlite3.connect(tmp_path / "t.db")
        for table_id in waiting + [t for t, _ in playing]:
            table = referee.tables[table_id]
            stored = conn.execute(
                "SELECT seat, action FROM actions WHERE table_id = ? ORDER BY idx", (table_id,)
            ).fetchall()
            assert [tuple(a) for a in stored] == table.actions
            taken = conn.execute(
                "SELECT seat FROM seats WHERE table_id = ? AND token_hash IS NOT NULL ORDER BY"
                " seat",
                (table_id,),
            ).fetchall()
            assert [s for (s,) in taken] == [i for i, s in enumerate(table.seats) if s.taken]
            events = [e async for e in _events(stub, table_id)]
            assert [e.index for e in events] == list(range(len(events)))
        conn.close()
        open_now = sum(1 for t in referee.tables.values() if not t.ended)
        assert referee.open_tables("ipv4:127.0.0.1") == open_now

    run(body, tmp_path)


async def _events(stub: rpc.RefereeServiceStub, table_id: str) -> Any:
    """The events of a table so far (a watch cut once it has caught up)."""
    table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
    if table.event_index == 0:
        return
    call = stub.WatchTable(pb.WatchTableRequest(table_id=table_id))
    async for response in call:
        yield response.event
        if response.event.index + 1 >= table.event_index:
            call.cancel()
            return


_STOP_WITH_STREAMS = """
import asyncio, logging, sys
from pathlib import Path
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tapis_cartes.referee.server.app import create_server
from tapis_cartes.v1 import referee_pb2 as pb, referee_pb2_grpc as rpc
from tests.server.util import auth, new_table

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

async def main(d: Path) -> None:
    server = await create_server(db=d / "t.db", key=d / "k")
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    stub = rpc.RefereeServiceStub(channel)
    calls = [health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())]
    for _ in range(4):
        table, tokens = await new_table(stub, "dame-de-pique", "standard", {}, 4)
        calls += [
            stub.WatchTable(pb.WatchTableRequest(table_id=table), metadata=auth(tokens[s]))
            for s in range(4)
        ]
    for call in calls:
        await call.read()
    await server.stop(0)
    await channel.close()

asyncio.run(main(Path(sys.argv[1])))
"""


def test_a_stop_with_streams_open_logs_no_error(tmp_path: Path) -> None:
    """A referee stopped (no grace) while clients hold streams (tables' streams and a health
    watch), its loop closed right after, each time in a fresh process: no error is logged
    (gRPC's stop returns before the calls it cancelled have ended; the loop's close cancelled
    them once more, each an error with a traceback)."""
    root = Path(__file__).resolve().parents[2]
    for i in range(4):
        (tmp_path / str(i)).mkdir()
        done = subprocess.run(
            [sys.executable, "-c", _STOP_WITH_STREAMS, str(tmp_path / str(i))],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        assert not errors, done.stderr
