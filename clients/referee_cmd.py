"""`tapis serve`, `table`, `key`, `play`, `bot` and `example`: the referee, its tables and its
key; a person or a bot at a table; the bundled example.

    tapis serve [--listen HOST:PORT] [--db PATH] [--key PATH] [--web HOST:PORT]
    tapis key show [PATH] | tapis key new PATH
    tapis table create [--address A] [--game G] [--players A,B,..] [--open N,..] [--option K=V]
    tapis play [--address HOST:PORT] [--game G] [--ruleset R] [--option KEY=VALUE ...]
               [--name NAME] [--bots heuristic|random] [--seed N]
    tapis bot --address HOST:PORT --table ID (--seat N --token T | --join [--name NAME])
              [--kind heuristic|random] [--seed N]
    tapis example [--print]        (the bundled example transcript, imported and scored)

Exit status: 0 success; 1 a refusal of the referee, a key that cannot be read or made (these
commands end with 1 for any error, whatever its class's exit code: docs/errors.md); 2 bad
command-line usage.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import math
import re
from collections.abc import Callable, Coroutine
from importlib import resources
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from tapis_cartes.clients.args import address_arg, closing_line, output_path, text_arg
from tapis_cartes.clients.args import err as _err
from tapis_cartes.records.codec import decode_record, writable, write_envelopes
from tapis_cartes.records.score import score_sheet
from tapis_cartes.records.signing import (
    key_id,
    load_or_create_private_key,
    load_public_key,
    public_pem,
)
from tapis_cartes.records.transcript import import_transcript
from tapis_cartes.referee.engine.options import parse_option
from tapis_cartes.referee.engine.wire import MAX_HANDS
from tapis_cartes.referee.errors import TapisError, exit_status, json_text, terminal_text
from tapis_cartes.referee.server.limits import (
    MAX_CONNECTIONS,
    MAX_MESSAGE_BYTES,
    MAX_RESTART_GRACE,
    MAX_STREAMS,
    Limits,
)
from tapis_cartes.v1 import record_pb2 as rpb

__all__ = ["add_referee_parsers"]

_LIMITS = Limits()  # the defaults of `tapis serve`'s options


def cmd_serve(args: argparse.Namespace) -> int:
    from tapis_cartes.referee.server.app import (
        Limits,
        default_event_loop,
        run_on,
        serve,
        setup_logging,
    )

    setup_logging()
    limits = Limits(
        max_message_bytes=args.max_message_bytes,
        max_tables_per_client=args.max_tables_per_client,
        max_streams_per_client=args.max_streams_per_client,
        max_connections=args.max_connections,
        open_seat_ttl=args.open_seat_ttl,
        idle_match_ttl=args.idle_match_ttl,
        restart_grace=args.restart_grace,
        max_hands=args.max_hands,
        max_actions=args.max_actions,
    )
    event_loop = args.event_loop or default_event_loop()
    if event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        _err("tapis serve: --event-loop uvloop: uvloop is not installed (or --event-loop asyncio)")
        return 2
    try:
        run_on(event_loop, serve(args.listen, args.db, args.key, limits, args.web))
    except (OSError, TapisError) as exc:
        _err(f"tapis serve: {exc}")
        return 1
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from tapis_cartes.clients.play import run_play

    try:
        options = dict(parse_option(o) for o in args.option or ())
    except ValueError as exc:
        _err(f"tapis play: {exc}")
        return 2
    save = None if args.save is None else writable(args.save)
    return _client_command(
        "play",
        lambda: run_play(
            args.address, args.game, args.ruleset, options, args.name, args.bots, args.seed,
            save=save,
        ),
    )  # fmt: skip


# Seconds a `tapis bot` keeps trying to reach its referee (`--patience`): a referee restarted
# (a new version, a machine rebooted) comes back with every table, and a bot that waits for it
# plays on; the SDK's own retries last 7 s. At most a day.
BOT_PATIENCE, BOT_MOST_PATIENCE = 120.0, 86400.0


def cmd_bot(args: argparse.Namespace) -> int:
    from tapis_cartes.clients.play import run_bot

    seated = args.seat is not None and args.token is not None
    if args.join == seated or (args.join and args.token is not None):
        _err("tapis bot: give --seat N --token T, or --join [--seat N]")
        return 2
    a = args
    return _client_command(
        "bot",
        lambda: run_bot(
            a.address,
            a.table,
            a.seat,
            a.token,
            a.join,
            a.name,
            a.kind,
            a.seed,
            as_json=a.json,
            patience=a.patience,
        ),
    )


# What a reply of the referee that breaks the contract raises where a client reads it (a
# seat past the table's, a game without rulesets...): what the SDK's own checks
# (`checked_view`) do not stop.
_UNUSABLE = (IndexError, KeyError, ValueError, TypeError, AttributeError, DecodeError)


def _client_command(name: str, run: Callable[[], Coroutine[Any, Any, int | None]]) -> int:
    """Run a command that talks to a referee (play, bot, table): an error that ends it is
    one line, its text made safe to print (what a referee sends is any text), with its exit
    status; a reply this client cannot use ends it the same way (exit 1), named, rather than
    with a traceback."""
    try:
        return asyncio.run(run()) or 0
    except (OSError, TapisError) as exc:  # RefereeError, ...
        _err(f"tapis {name}: {terminal_text(str(exc))}")
        return exit_status(exc) if isinstance(exc, TapisError) else 1
    except _UNUSABLE as exc:
        _err(
            f"tapis {name}: a reply of the referee cannot be used"
            f" ({type(exc).__name__}: {terminal_text(str(exc))[:300]})"
        )
        return 1


_SECONDS = re.compile(r"[0-9]{1,7}(\.[0-9]{1,3})?")
_MAX_MS = (1 << 32) - 1  # (TimeControl's fields are uint32)


def time_control(args: argparse.Namespace) -> rpb.TimeControl | None:
    """The clocks asked for by --action-time, --budget, --increment and --on-timeout (None:
    untimed); `ValueError` naming the option for a time that is not a number of seconds. The
    referee checks the ranges."""
    times = {}
    for name, option, value in (
        ("action_ms", "--action-time", args.action_time),
        ("budget_ms", "--budget", args.budget),
        ("increment_ms", "--increment", args.increment),
    ):
        if value is None:
            continue
        # Seconds to the millisecond, as the clocks count (0.0999 is no time: not rounded up
        # past the referee's least), in ASCII digits.
        if not _SECONDS.fullmatch(value):
            raise ValueError(
                f"{option} {value!r}: give a number of seconds, to the millisecond (as 30 or 0.25)"
            )
        times[name] = round(float(value) * 1000)
        if times[name] > _MAX_MS:
            raise ValueError(
                f"{option} {value!r}: at most {_MAX_MS / 1000:.3f} seconds (a time control's"
                " field; the referee's own ranges, narrower, are in `tapis games`)"
            )
    if not times:
        if args.on_timeout is not None:
            raise ValueError("--on-timeout is for a timed table: give --action-time or --budget")
        return None
    if "increment_ms" in times and "budget_ms" not in times:
        raise ValueError("--increment is added to a budget: give --budget too")
    policy = {"forfeit": rpb.TIMEOUT_POLICY_FORFEIT, "autoplay": rpb.TIMEOUT_POLICY_AUTOPLAY}
    return rpb.TimeControl(**times, policy=policy[args.on_timeout or "forfeit"])


def cmd_table_create(args: argparse.Namespace) -> int:
    """Open a table on a referee; print its id and the tokens of the seats taken here."""
    from tapis_cartes.clients.sdk import RefereeClient

    names = args.players.split(",")
    try:
        open_seats = {int(s) for s in args.open.split(",") if s} if args.open else set()
    except ValueError:
        _err(f"tapis table create: --open {args.open!r}: give seat numbers, as 1,3")
        return 2
    missing = sorted(s for s in open_seats if not 0 <= s < len(names))
    if missing:  # (a seat past the names made a table with every seat taken, tokens untold)
        _err(
            f"tapis table create: --open {','.join(map(str, missing))}: the table has seats 0"
            f" to {len(names) - 1} (one per name of --players)"
        )
        return 2
    try:
        given = [parse_option(o) for o in args.option or ()]
        options = dict(given)
    except ValueError as exc:
        _err(f"tapis table create: {exc}")
        return 2
    twice = sorted(k for k, n in collections.Counter(k for k, _ in given).items() if n > 1)
    if twice:
        _err(f"tapis table create: --option {', '.join(twice)} given more than once")
        return 2

    try:
        clocks = time_control(args)
    except ValueError as exc:
        _err(f"tapis table create: {exc}")
        return 2

    async def create() -> None:
        async with RefereeClient(args.address) as client:
            made = await client.create_table(
                args.game,
                args.ruleset or "",
                options,
                [(name, i in open_seats) for i, name in enumerate(names)],
                time_control=clocks,
            )
        if args.json:
            print(
                json_text(
                    {
                        "table_id": made.table_id,
                        "seats": [
                            {"seat": i, "name": name, "open": i in open_seats}
                            | ({"token": made.tokens[i]} if i in made.tokens else {})
                            for i, name in enumerate(names)
                        ],
                        "commitment": {
                            "algorithm": made.commitment.algorithm,
                            "seed_sha256": made.commitment.seed_sha256.hex(),
                        },
                    },
                )
            )
            return
        lines = [f"table {made.table_id}"]
        lines += [
            f"seat {s} ({names[s]}) token {token}" for s, token in sorted(made.tokens.items())
        ]
        lines += [
            f"seat {s} ({names[s]}) open: tapis bot --join --seat {s} ..."
            for s in sorted(open_seats)
        ]
        print("\n".join(map(terminal_text, lines)))

    return _client_command("table create", create)


def cmd_table_record(args: argparse.Namespace) -> int:
    """Fetch the signed record of a finished table into a record file."""
    from tapis_cartes.clients.sdk import RefereeClient

    writable(args.output)

    async def fetch() -> None:
        async with RefereeClient(args.address) as client:
            got = await client.record(args.table)  # (verified: `checked_record`)
        write_envelopes(args.output, [got.envelope])
        signer = got.envelope.key_id[:16]
        closing_line(
            terminal_text(
                f"record {got.record_id} of table {args.table} (signed by {signer})"
                f" -> {args.output}"
            ),
            args.output,
        )

    return _client_command("table record", fetch)


def cmd_key_show(args: argparse.Namespace) -> int:
    try:
        key = load_public_key(args.path)
    except TapisError as exc:
        _err(str(exc))
        return exit_status(exc)
    print(public_pem(key), end="")
    print(f"key id {key_id(key)}")
    return 0


def cmd_key_new(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not args.path:
        _err("tapis key new: '' is no file name")
        return 2
    if path.is_dir():
        _err(f"{args.path}: is a folder")
        return 2
    if path.exists() or path.is_symlink():
        _err(f"{args.path} exists: not overwritten")
        return 2
    try:
        key = load_or_create_private_key(args.path)
    except TapisError as exc:
        _err(str(exc))
        return exit_status(exc)
    print(terminal_text(f"{args.path}: new Ed25519 key, key id {key_id(key.public_key())}"))
    return 0


# --- the bundled example ------------------------------------------------------------------


def cmd_example(args: argparse.Namespace) -> int:
    text = (
        resources.files("tapis_cartes.records").joinpath("examples/dame-de-pique.json").read_text()
    )
    if args.print:
        print(text, end="")
        return 0
    record_bytes = import_transcript(json.loads(text), "examples/dame-de-pique.json")
    print(score_sheet(decode_record(record_bytes)))
    return 0


def _at_least(low: float, kind: type = int, high: float | None = None) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` no smaller than `low` (nor larger than `high`,
    when given)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):  # (nan passes every comparison; inf is no bound)
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is less than {low}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"{text} is more than {high}")
        return value

    return parse


def add_referee_parsers(sub: Any) -> None:
    """`serve`, `table`, `key`, `play`, `bot` and `example`, on the top-level subparsers of
    `tapis`."""
    p = sub.add_parser("serve", help="run the referee (gRPC)")
    p.add_argument("--listen", default="127.0.0.1:50051", metavar="HOST:PORT")
    p.add_argument("--db", default="tapis.db", metavar="PATH", help="the SQLite store")
    p.add_argument("--key", default="referee.key", metavar="PATH", help="Ed25519 signing key")
    p.add_argument(
        "--web",
        metavar="HOST:PORT",
        help="also serve web pages on this address: the tables, each table's live spectator"
        " view, the replay of a finished one (off unless given)",
    )
    p.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        help="the event loop the referee runs on: uvloop's (the default where it is"
        " installed: each submission costs less) or asyncio's own",
    )
    p.add_argument(
        "--max-tables-per-client",
        type=_at_least(1),
        default=_LIMITS.max_tables_per_client,
        metavar="N",
        help=f"tables a client may have open at once (default {_LIMITS.max_tables_per_client})",
    )
    p.add_argument(
        "--max-streams-per-client",
        type=_at_least(1, int, MAX_STREAMS),
        default=_LIMITS.max_streams_per_client,
        metavar="N",
        help="WatchTable streams a client may have open at once"
        f" (default {_LIMITS.max_streams_per_client})",
    )
    p.add_argument(
        "--max-connections",
        type=_at_least(1, int, MAX_CONNECTIONS),
        default=_LIMITS.max_connections,
        metavar="N",
        help="connections at once to each front, gRPC and web: past it a new one is closed"
        f" at once (default {_LIMITS.max_connections}; fewer if the process may not open"
        " enough files)",
    )
    p.add_argument(
        "--open-seat-ttl",
        type=_at_least(0.001, float),
        default=_LIMITS.open_seat_ttl,
        metavar="SECONDS",
        help="a table still waiting for players this long after its creation expires"
        f" (default {_LIMITS.open_seat_ttl:g})",
    )
    p.add_argument(
        "--idle-match-ttl",
        type=_at_least(0.001, float),
        default=_LIMITS.idle_match_ttl,
        metavar="SECONDS",
        help="an untimed match no action has come to for this long (since its last action,"
        " its start or the referee's) is stopped, with its record saying so"
        f" (default {_LIMITS.idle_match_ttl:g}: a day)",
    )
    p.add_argument(
        "--restart-grace",
        type=_at_least(0, float, MAX_RESTART_GRACE),
        default=_LIMITS.restart_grace,
        metavar="SECONDS",
        help="at a start, the running clock of each timed match waits for its seat's first"
        " call, this long at most: the time its client takes to find the referee back is not"
        f" counted (default {_LIMITS.restart_grace:g}; 0: the clocks run at once)",
    )
    p.add_argument(
        "--max-hands",
        type=_at_least(1, int, MAX_HANDS),
        default=_LIMITS.max_hands,
        metavar="N",
        help="the referee stops a match after this many hands"
        f" (default {_LIMITS.max_hands}, at most {MAX_HANDS}: the most a record holds)",
    )
    p.add_argument(
        "--max-actions",
        type=_at_least(1),
        default=_LIMITS.max_actions,
        metavar="N",
        help=f"the referee stops a match after this many actions (default {_LIMITS.max_actions})",
    )
    p.add_argument(
        "--max-message-bytes",
        type=_at_least(1024, int, MAX_MESSAGE_BYTES),
        default=_LIMITS.max_message_bytes,
        metavar="N",
        help=f"the largest request, in bytes (default {_LIMITS.max_message_bytes})",
    )
    p.set_defaults(func=cmd_serve)

    table = sub.add_parser("table", help="tables on a referee")
    tsub = table.add_subparsers(dest="table_command", required=True)
    p = tsub.add_parser("create", help="open a table; print its id and the seats' tokens")
    p.add_argument("--address", default="127.0.0.1:50051", metavar="HOST:PORT", type=address_arg)
    p.add_argument(
        "--game", default="hearts", type=text_arg, help="game name or alias (default hearts)"
    )
    p.add_argument(
        "--ruleset", default="", type=text_arg, help="ruleset (default: the game's first)"
    )
    p.add_argument("--players", default="North,East,South,West", metavar="A,B,...", type=text_arg,
                   help="the seats' names in playing order")  # fmt: skip
    p.add_argument("--open", default="", metavar="N,N,...",
                   help="seats left open for others to join (default: none)")  # fmt: skip
    p.add_argument(
        "--option", action="append", metavar="KEY=VALUE", type=text_arg, help="a rules option"
    )
    p.add_argument("--action-time", metavar="SECONDS", help="clocks: the limit of each action")
    p.add_argument("--budget", metavar="SECONDS", help="clocks: each seat's time for the match")
    p.add_argument("--increment", metavar="SECONDS", help="clocks: added after each action")
    p.add_argument("--on-timeout", choices=("forfeit", "autoplay"),
                   help="clocks: a seat out of time loses (forfeit, the default), or is played"
                   " for")  # fmt: skip
    p.add_argument("--json", action="store_true", help="the table, seats and tokens as JSON")
    p.set_defaults(func=cmd_table_create)
    p = tsub.add_parser("record", help="fetch the signed record of a finished table")
    p.add_argument("table", metavar="TABLE", help="the table's id")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="FILE",
                   help="the record file ('-': standard output)")  # fmt: skip
    p.add_argument("--address", default="127.0.0.1:50051", metavar="HOST:PORT", type=address_arg)
    p.set_defaults(func=cmd_table_record)

    key = sub.add_parser("key", help="the referee's signing key")
    ksub = key.add_subparsers(dest="key_command", required=True)
    p = ksub.add_parser("show", help="print the public key of a key file")
    p.add_argument("path", nargs="?", default="referee.key", metavar="PATH")
    p.set_defaults(func=cmd_key_show)
    p = ksub.add_parser("new", help="create an Ed25519 key file (mode 0600)")
    p.add_argument("path", metavar="PATH")
    p.set_defaults(func=cmd_key_new)

    p = sub.add_parser("play", help="play at a terminal against bots")
    p.add_argument(
        "--address", metavar="HOST:PORT", type=address_arg,
        help="a referee (default: start one here)",
    )  # fmt: skip
    p.add_argument(
        "--game", default="hearts", type=text_arg, help="game name or alias (default hearts)"
    )
    p.add_argument(
        "--ruleset", default="", type=text_arg, help="ruleset (default: the game's first)"
    )
    p.add_argument(
        "--option", action="append", metavar="KEY=VALUE", type=text_arg, help="a rules option"
    )
    p.add_argument("--name", default="You", type=text_arg, help="your name at the table")
    p.add_argument("--bots", choices=("heuristic", "random"), default="heuristic")
    p.add_argument("--seed", type=int, metavar="N", help="seed of the random bots")
    p.add_argument("--save", metavar="FILE", help="write the signed record there at the end")
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("bot", help="seat a bot at a remote table and play it to the end")
    p.add_argument("--address", required=True, metavar="HOST:PORT", type=address_arg)
    p.add_argument("--table", required=True, metavar="ID")
    p.add_argument("--seat", type=int, metavar="N", help="a seat taken at creation ...")
    p.add_argument("--token", metavar="T", help="... with its token")
    p.add_argument("--join", action="store_true", help="take an open seat (--seat: that one)")
    p.add_argument(
        "--name",
        default="",
        type=text_arg,
        help="the name to join with (default: the name the seat was given)",
    )
    p.add_argument("--kind", choices=("heuristic", "random"), default="heuristic")
    p.add_argument("--seed", type=int, metavar="N", help="seed of a random bot")
    p.add_argument(
        "--patience",
        type=_at_least(0.001, float, BOT_MOST_PATIENCE),
        default=BOT_PATIENCE,
        metavar="SECONDS",
        help="how long the bot keeps trying to reach a referee that is down or restarting"
        f" before it gives up (default {BOT_PATIENCE:g})",
    )
    p.add_argument("--json", action="store_true", help="the result as one JSON object")
    p.set_defaults(func=cmd_bot)

    p = sub.add_parser("example", help="import the bundled example transcript and score it")
    p.add_argument("--print", action="store_true", help="print the transcript instead")
    p.set_defaults(func=cmd_example)
