"""The contract a client in another language reads (referee.proto's header, docs/protocol.md),
checked against a real referee: the `grpc-status-details-bin` trailer and its detail types,
the google.rpc.BadRequest of every INVALID_ARGUMENT, the statuses of the edge cases, the
defaults ListGames gives for every number of players, and server reflection v1."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from tapis_cartes.referee import errors
from tapis_cartes.referee.server.app import RunningServer
from tapis_cartes.v1 import record_pb2 as rpb
from tapis_cartes.v1 import referee_pb2 as pb
from tapis_cartes.v1 import referee_pb2_grpc as rpc

from .util import auth, new_table, option, run

DETAILS = "grpc-status-details-bin"
TYPE_URL = "type.googleapis.com/"


async def _status(call: Any) -> tuple[grpc.StatusCode, str, status_pb2.Status]:
    """The status of a failing unary call, with the google.rpc.Status read from the trailer
    as a client in another language reads it (no grpc_status helper)."""
    try:
        result = await call
    except grpc.aio.AioRpcError as exc:
        trailer = [v for k, v in exc.trailing_metadata() or () if k == DETAILS]
        assert len(trailer) == 1, exc.trailing_metadata()
        assert isinstance(trailer[0], bytes)
        status = status_pb2.Status.FromString(trailer[0])
        assert status.code == exc.code().value[0]
        assert status.message == exc.details()
        return exc.code(), exc.details() or "", status
    raise AssertionError(f"the call succeeded: {result}")


def _bad_request(status: status_pb2.Status) -> error_details_pb2.BadRequest:
    (detail,) = status.details
    assert detail.type_url == TYPE_URL + "google.rpc.BadRequest"
    out = error_details_pb2.BadRequest()
    assert detail.Unpack(out)
    return out


def _seats(n: int) -> list[pb.SeatRequest]:
    return [pb.SeatRequest(name=f"P{i}") for i in range(n)]


def test_invalid_argument_carries_a_bad_request_naming_the_field(tmp_path: Path) -> None:
    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, channel: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        view = (
            await stub.GetView(
                pb.GetViewRequest(table_id=table_id, seat=0), metadata=auth(tokens[0])
            )
        ).view
        create = stub.CreateTable
        calls: list[tuple[str, str, Any]] = [
            (
                "seats[1].name",
                "longer than 64",
                create(
                    pb.CreateTableRequest(
                        game="hearts",
                        seats=[pb.SeatRequest(name="A"), pb.SeatRequest(name="x" * 100)],
                    )
                ),
            ),
            ("game", "unknown game", create(pb.CreateTableRequest(game="go", seats=_seats(4)))),
            (
                "ruleset",
                "unknown ruleset",
                create(pb.CreateTableRequest(game="hearts", ruleset="x", seats=_seats(4))),
            ),
            (
                "options[1].key",
                "unknown option",
                create(
                    pb.CreateTableRequest(
                        game="hearts",
                        options=[option("end_threshold", 50), option("colour", "red")],
                        seats=_seats(4),
                    )
                ),
            ),
            (
                "options[0].int_value",
                "1 to 1000",
                create(
                    pb.CreateTableRequest(
                        game="hearts", options=[option("end_threshold", 1001)], seats=_seats(4)
                    )
                ),
            ),
            (
                "options[0].string_value",
                "allowed: add_to_others, subtract_self",
                create(
                    pb.CreateTableRequest(
                        game="hearts", options=[option("moon_mode", "both")], seats=_seats(4)
                    )
                ),
            ),
            # Seats against the `players` option: they must agree.
            (
                "options[1].int_value",
                "option 'players' is 5 but 4 players are named",
                create(
                    pb.CreateTableRequest(
                        game="nap",
                        options=[option("deals", 3), option("players", 5)],
                        seats=_seats(4),
                    )
                ),
            ),
            # No `players` option: the number of seats is the number of players.
            ("seats", "", create(pb.CreateTableRequest(game="nap", seats=_seats(2)))),
            ("seats", "exactly 4", create(pb.CreateTableRequest(game="hearts", seats=_seats(3)))),
            ("seats", "a table needs seats", create(pb.CreateTableRequest(game="hearts"))),
            (
                "request",
                "does not decode",
                channel.unary_unary("/tapis.v1.RefereeService/GetTable")(b"\xff\xff\xff"),
            ),
            (
                "seat",
                "does not exist",
                stub.JoinTable(pb.JoinTableRequest(table_id=table_id, seat=9)),
            ),
            # An undefined action code (no game has it): INVALID_ARGUMENT naming `action`.
            (
                "action",
                "is not an action",
                stub.SubmitAction(
                    pb.SubmitActionRequest(
                        table_id=table_id,
                        seat=0,
                        expected_action_index=view.action_index,
                        action=7,
                    ),
                    metadata=auth(tokens[0]),
                ),
            ),
        ]
        for field, words, call in calls:
            code, message, status = await _status(call)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (field, message)
            violations = _bad_request(status).field_violations
            assert len(violations) == 1, violations
            assert violations[0].field == field, (violations[0], message)
            assert words in violations[0].description, (violations[0], words)
            assert message == f"{field}: {violations[0].description}"

    run(body, tmp_path)


def test_list_games_defaults_are_what_a_table_gets_for_every_number_of_players(
    tmp_path: Path,
) -> None:
    """For every game, ruleset and number of players: a table created without options gets,
    in its signed record, the defaults ListGames gives for that number of players
    (`defaults` where the default depends on it, else `default_value`)."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        games = (await stub.ListGames(pb.ListGamesRequest())).games
        depends: set[tuple[str, str, str]] = set()
        tables = 0
        for game in games:
            for ruleset in game.rulesets:
                counts = list(ruleset.player_counts)
                assert counts == sorted(counts) and counts, ruleset
                usual = next(
                    (o.default_value.int_value for o in ruleset.options if o.key == "players"),
                    counts[0],
                )
                for info in ruleset.options:
                    if info.defaults:
                        depends.add((game.name, ruleset.name, info.key))
                        assert [d.players for d in info.defaults] == counts, info
                        # default_value: the default at the usual number of players.
                        at_usual = next(d.value for d in info.defaults if d.players == usual)
                        assert at_usual == info.default_value, info
                        assert any(d.value != info.default_value for d in info.defaults), info
                for n in counts:
                    table_id, tokens = await new_table(stub, game.name, ruleset.name, {}, n)
                    tables += 1
                    await stub.Resign(
                        pb.ResignRequest(table_id=table_id, seat=0), metadata=auth(tokens[0])
                    )
                    got = await stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
                    rules = rpb.GameRecord.FromString(got.envelope.record).rules
                    assert rules.players == n
                    table = {o.key: o for o in rules.options}
                    assert sorted(table) == [o.key for o in ruleset.options]
                    for info in ruleset.options:
                        expected = next(
                            (d.value for d in info.defaults if d.players == n), info.default_value
                        )
                        assert table[info.key] == expected, (game.name, ruleset.name, n, info.key)
        # The defaults that depend on the number of players, as RULES.md has them.
        assert {
            ("napoleon", "standard", "deals"),
            ("triomphe", "equipe", "target"),
            ("napoleon", "standard", "players"),
        } <= depends
        assert tables >= 20

    run(body, tmp_path)


# The part of grpc/reflection/v1/reflection.proto a client needs to list services and fetch
# descriptors (field numbers as the public v1 schema has them), for a client that shares
# nothing with the referee's own reflection code.
REFLECTION_V1 = """
name: "client/reflection_v1.proto"
package: "grpc.reflection.v1"
syntax: "proto3"
message_type {
  name: "ServerReflectionRequest"
  field { name: "host" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "file_containing_symbol" number: 4 label: LABEL_OPTIONAL type: TYPE_STRING
          oneof_index: 0 }
  field { name: "list_services" number: 7 label: LABEL_OPTIONAL type: TYPE_STRING
          oneof_index: 0 }
  oneof_decl { name: "message_request" }
}
message_type {
  name: "ServerReflectionResponse"
  field { name: "valid_host" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
  field { name: "file_descriptor_response" number: 4 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".grpc.reflection.v1.FileDescriptorResponse" oneof_index: 0 }
  field { name: "list_services_response" number: 6 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".grpc.reflection.v1.ListServiceResponse" oneof_index: 0 }
  field { name: "error_response" number: 7 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".grpc.reflection.v1.ErrorResponse" oneof_index: 0 }
  oneof_decl { name: "message_response" }
}
message_type {
  name: "FileDescriptorResponse"
  field { name: "file_descriptor_proto" number: 1 label: LABEL_REPEATED type: TYPE_BYTES }
}
message_type {
  name: "ListServiceResponse"
  field { name: "service" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE
          type_name: ".grpc.reflection.v1.ServiceResponse" }
}
message_type {
  name: "ServiceResponse"
  field { name: "name" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
}
message_type {
  name: "ErrorResponse"
  field { name: "error_code" number: 1 label: LABEL_OPTIONAL type: TYPE_INT32 }
  field { name: "error_message" number: 2 label: LABEL_OPTIONAL type: TYPE_STRING }
}
"""


def test_server_reflection_v1_lists_and_describes_the_services(tmp_path: Path) -> None:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(text_format.Parse(REFLECTION_V1, descriptor_pb2.FileDescriptorProto()))
    request_type = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionRequest")
    )
    response_type = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("grpc.reflection.v1.ServerReflectionResponse")
    )

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, channel: Any) -> None:
        call = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        requests = [
            request_type(list_services=""),
            request_type(file_containing_symbol="tapis.v1.RefereeService"),
            request_type(file_containing_symbol="grpc.reflection.v1.ServerReflection"),
            request_type(file_containing_symbol="tapis.v1.NoSuchThing"),
            request_type(file_containing_symbol="tapis.v1.RefereeService.PlaySeat"),
            request_type(file_containing_symbol="tapis.v1.RefereeService.NoSuchMethod"),
        ]
        replies = [r async for r in call(iter(requests))]
        assert len(replies) == len(requests)
        listed = {s.name for s in replies[0].list_services_response.service}
        assert listed == {
            "tapis.v1.RefereeService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        }
        files = {}
        for reply in replies[1:3]:
            assert reply.WhichOneof("message_response") == "file_descriptor_response", reply
            for data in reply.file_descriptor_response.file_descriptor_proto:
                f = descriptor_pb2.FileDescriptorProto.FromString(data)
                files[f.name] = f
        referee = files["tapis/v1/referee.proto"]
        assert [s.name for s in referee.service] == ["RefereeService"]
        assert "tapis/v1/record.proto" in files  # its dependency comes with it
        assert "SubmitAction" in [m.name for m in referee.service[0].method]
        v1 = files["grpc/reflection/v1/reflection.proto"]
        assert v1.package == "grpc.reflection.v1"
        (method,) = v1.service[0].method
        assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"
        assert method.client_streaming and method.server_streaming
        assert replies[3].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
        # A method (as `grpcurl describe` asks for one): the file of its service.
        (data, *_) = replies[4].file_descriptor_response.file_descriptor_proto
        assert descriptor_pb2.FileDescriptorProto.FromString(data).name == referee.name
        assert replies[5].error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
        # v1alpha still answers, with the same services.
        old = channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        (reply,) = [r async for r in old(iter([request_type(list_services="")]))]
        assert {s.name for s in reply.list_services_response.service} == listed

    run(body, tmp_path)


def _detail(status: status_pb2.Status, kind: type[Any]) -> Any:
    (detail,) = status.details
    assert detail.type_url == TYPE_URL + kind.DESCRIPTOR.full_name
    out = kind()
    assert detail.Unpack(out)
    return out


def test_statuses_of_the_edge_cases(tmp_path: Path) -> None:
    """Each case referee.proto and docs/protocol.md name: its status and its detail."""

    async def body(server: RunningServer, stub: rpc.RefereeServiceStub, _: Any) -> None:
        table_id, tokens = await new_table(stub, "dame-de-pique", "", {}, 4)
        seat0 = auth(tokens[0])
        # JoinTable on a full table: PERMISSION_DENIED, no detail.
        for seat in ({}, {"seat": 2}):
            code, message, status = await _status(
                stub.JoinTable(pb.JoinTableRequest(table_id=table_id, **seat))
            )
            assert code == grpc.StatusCode.PERMISSION_DENIED and not status.details, message
        # GetRecord before the end: FAILED_PRECONDITION, no detail.
        code, message, status = await _status(
            stub.GetRecord(pb.GetRecordRequest(table_id=table_id))
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION and not status.details
        assert "not finished" in message
        view = await stub.GetView(pb.GetViewRequest(table_id=table_id, seat=0), metadata=seat0)
        index = view.view.action_index

        def submit(action: int, expected: int = index) -> Any:
            request = pb.SubmitActionRequest(
                table_id=table_id, seat=0, expected_action_index=expected, action=action
            )
            return stub.SubmitAction(request, metadata=seat0)

        # A defined action the rules refuse, also one of a kind this game never uses (a bid):
        # FAILED_PRECONDITION with an ActionRefusal holding the legal actions: the first 100
        # of the 286 passes, and their count; the status well within 8 KiB of trailers.
        legal = list(view.view.legal_actions)
        assert len(legal) == 286
        for action in (0 << 3 | 0, 1 << 3 | 2):  # play 2S (seat 0 must pass first), bid two
            code, message, status = await _status(submit(action))
            assert code == grpc.StatusCode.FAILED_PRECONDITION, message
            refusal = _detail(status, pb.ActionRefusal)
            assert refusal.rule.startswith("DP.") and refusal.code and refusal.reason
            assert list(refusal.legal_actions) == legal[:100]
            assert refusal.legal_action_count == 286
            assert len(base64.b64encode(status.SerializeToString())) < 4096
        # A stale expected_action_index: ABORTED with a StaleAction giving the current index.
        code, message, status = await _status(submit(view.view.legal_actions[0].action, 5))
        assert code == grpc.StatusCode.ABORTED
        assert _detail(status, pb.StaleAction).action_index == index
        # A retry of an acknowledged submission: the same answer, no second action.
        first = await submit(view.view.legal_actions[0].action)
        again = await submit(view.view.legal_actions[0].action)
        assert again == first
        table = await stub.GetTable(pb.GetTableRequest(table_id=table_id))
        assert table.action_index == index + 1
        # WatchTable on a finished table: every event, MatchEnded last, then the stream ends.
        await stub.Resign(pb.ResignRequest(table_id=table_id, seat=1), metadata=auth(tokens[1]))
        events = [r.event async for r in stub.WatchTable(pb.WatchTableRequest(table_id=table_id))]
        assert events[-1].WhichOneof("event") == "match_ended"
        assert [e.index for e in events] == list(range(len(events)))
        # Unknown table: NOT_FOUND; a watch from past the end: OUT_OF_RANGE.
        code, _, status = await _status(stub.GetTable(pb.GetTableRequest(table_id="nope")))
        assert code == grpc.StatusCode.NOT_FOUND and not status.details
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            request = pb.WatchTableRequest(table_id=table_id, from_event_index=len(events) + 1)
            async for _ in stub.WatchTable(request):
                pass
        assert exc.value.code() == grpc.StatusCode.OUT_OF_RANGE
        # A table whose open seats expire: its watchers get TableClosed, then the stream ends.
        waiting = await stub.CreateTable(
            pb.CreateTableRequest(
                game="hearts", seats=[pb.SeatRequest(name="A"), *[pb.SeatRequest(open=True)] * 3]
            )
        )
        request = pb.WatchTableRequest(table_id=waiting.table_id)
        events = [r.event async for r in stub.WatchTable(request)]
        assert events[-1].table_closed.status == pb.TABLE_STATUS_EXPIRED

    run(body, tmp_path, open_seat_ttl=0.3)


def test_protocol_doc_names_every_status_the_referee_answers_with() -> None:
    """docs/protocol.md's table of status codes (section 9) has a row for every code an
    error of the referee carries (referee/errors.py), and no other."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text("utf-8")
    section = doc.split("## 9. Errors and their details", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \|", section, re.M)
    assert len(rows) == len(set(rows))
    carried = {
        cls.grpc_status
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.TapisError) and cls.grpc_status
    }
    assert set(rows) == carried
    for url in re.findall(r"`type\.googleapis\.com/([\w.]+)`", section):
        assert url in {
            pb.ActionRefusal.DESCRIPTOR.full_name,
            pb.StaleAction.DESCRIPTOR.full_name,
            error_details_pb2.BadRequest.DESCRIPTOR.full_name,
        }


# Bytes that are no request (a field of wire type 7, which does not exist), and a well-formed
# request of each library service, for the raw calls below.
NOT_A_MESSAGE = b"\xff\xff\xff"
LIBRARY_CALLS = [
    ("/grpc.health.v1.Health/Check", "unary", b""),
    ("/grpc.health.v1.Health/List", "unary", b""),
    ("/grpc.health.v1.Health/Watch", "server-stream", b""),
    ("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "stream", b"\x3a\x00"),
    ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "stream", b"\x3a\x00"),
]


@pytest.mark.parametrize(
    ("method", "kind", "good"), LIBRARY_CALLS, ids=[c[0] for c in LIBRARY_CALLS]
)
def test_library_services_refuse_bytes_that_are_no_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, method: str, kind: str, good: bytes
) -> None:
    """Health checking and reflection (gRPC's own packages) given bytes that are not their
    request: INVALID_ARGUMENT naming the request's type, as on the RefereeService, not
    UNKNOWN with an error and its traceback in the log; a request that is one still works."""

    async def call(channel: grpc.aio.Channel, data: bytes) -> Any:
        if kind == "unary":
            return await channel.unary_unary(method)(data, timeout=10)
        if kind == "server-stream":
            stream = channel.unary_stream(method)(data, timeout=10)
            return await stream.read()
        stream = channel.stream_stream(method)(iter([data]), timeout=10)
        return await stream.read()

    async def body(_: Any, __: Any, channel: grpc.aio.Channel) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call(channel, NOT_A_MESSAGE)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value
        assert "does not decode as" in str(exc.value.details())
        reply = await call(channel, good)
        assert isinstance(reply, bytes)

    with caplog.at_level("WARNING"):
        run(body, tmp_path)
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]


# Every method of one request, the RefereeService's and the library services'.
_SERVICE = pb.DESCRIPTOR.services_by_name["RefereeService"]
ONE_REQUEST = [
    f"/{_SERVICE.full_name}/{m.name}" for m in _SERVICE.methods if not m.client_streaming
] + [c[0] for c in LIBRARY_CALLS if c[1] != "stream"]


def test_a_call_that_ends_its_side_with_no_request_is_answered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A method of one request called with none (the client's side ended before a message):
    INVALID_ARGUMENT at once, not a call left without a status until the client gives up;
    the same method called with its request still works. PlaySeat without its `open` too,
    not a call ended OK with nothing said."""

    async def body(_: Any, __: Any, channel: grpc.aio.Channel) -> None:
        assert len(ONE_REQUEST) >= 12
        for method in ONE_REQUEST:
            call = channel.stream_stream(method)(iter([]), timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await call.read()
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, exc.value)
            assert str(exc.value.details()).startswith("request: the call's side ended"), method
            if method.startswith(f"/{_SERVICE.full_name}/"):  # its errors' details too
                (detail,) = rpc_status.from_call(exc.value).details
                violation = error_details_pb2.BadRequest()
                assert detail.Unpack(violation), detail
                assert violation.field_violations[0].field == "request"
        # PlaySeat, a stream of requests, whose first must be its `open`.
        call = channel.stream_stream(f"/{_SERVICE.full_name}/PlaySeat")(iter([]), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await call.read()
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value
        assert str(exc.value.details()).startswith("open: the call's side ended before"), exc.value
        games = await channel.unary_unary(f"/{_SERVICE.full_name}/ListGames")(b"", timeout=10)
        assert pb.ListGamesResponse.FromString(games).games

    with caplog.at_level("WARNING"):
        run(body, tmp_path)
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]
