"""The contract a client in another language reads (referee.proto's header, docs/protocol.md),
checked against a real referee: the `grpc-status-details-bin` trailer and its detail types,
the google.rpc.BadRequest of every INVALID_ARGUMENT, the statuses of the edge cases, the
defaults ListGames gives for every number of players, and server reflection v1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

from referee.server.app import RunningServer
from tapis.v1 import record_pb2 as rpb
from tapis.v1 import referee_pb2 as pb
from tapis.v1 import referee_pb2_grpc as rpc

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
                for info in ruleset.options:
                    if info.defaults:
                        depends.add((game.name, ruleset.name, info.key))
                        assert [d.players for d in info.defaults] == counts, info
                        # default_value: the default for the first number of players.
                        assert info.defaults[0].value == info.default_value, info
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
