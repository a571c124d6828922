"""The `tapis` command line: the top-level parser; each group of commands is a module of its
own, which adds its subcommands to the parser:

    tapis record ...      import, score, verify, show, sign, annotate, export, import-json
                          (clients/record_cmd.py)
    tapis archive ...     add, query, export, show, rescore, runs (clients/archive_cmd.py)
    tapis serve | table | key | play | bot | example     (clients/referee_cmd.py)
    tapis games [GAME]    games, rulesets, options with ranges and defaults (clients/games_cmd.py)
    tapis rules [ID]      the rule ids: statement, engine functions, page (clients/rules_cmd.py)
    tapis corpus          records of bot matches played here (clients/corpus_cmd.py)

Exit status: 0 success; 1 a transcript refused or a record invalid; 2 a file that cannot be
read as records, or bad command-line usage; 130 interrupted (Ctrl-C, or SIGTERM). An error
that ends a command ends it with the exit code its class carries (`docs/errors.md`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import io
import os
import signal
import sys
from collections.abc import Sequence

from tapis_cartes.referee import __version__
from tapis_cartes.referee.errors import TapisError, exit_status, terminal_text

__all__ = ["build_parser", "main"]

# The command groups, in the order `tapis --help` lists them: the commands of each, its
# module and the function of that module that adds its subcommands. A command imports only
# its own group's module (and that module what the command uses): `tapis record verify`
# never loads the archive's SQLite or the referee's gRPC.
COMMAND_GROUPS = (
    (("record",), "tapis_cartes.clients.record_cmd", "add_record_parser"),
    (("serve", "table", "key", "play", "bot", "example"), "tapis_cartes.clients.referee_cmd",
     "add_referee_parsers"),
    (("archive",), "tapis_cartes.clients.archive_cmd", "add_archive_parser"),
    (("games",), "tapis_cartes.clients.games_cmd", "add_games_parser"),
    (("rules",), "tapis_cartes.clients.rules_cmd", "add_rules_parser"),
    (("corpus",), "tapis_cartes.clients.corpus_cmd", "add_corpus_parser"),
)  # fmt: skip


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `tapis` parser: with `command`, a command some group has, only that group's
    subcommands (the others are not imported); else every group's."""
    parser = argparse.ArgumentParser(
        prog="tapis", description="Referee and record toolkit for trick-taking card games."
    )
    parser.add_argument("--version", action="version", version=f"tapis {__version__}")
    # Every command in the usage, whichever group is loaded (an argument a command does not
    # take is said under this usage: it listed that command's group only).
    every = ",".join(name for names, _, _ in COMMAND_GROUPS for name in names)
    sub = parser.add_subparsers(dest="command", required=True, metavar=f"{{{every}}}")
    groups = [g for g in COMMAND_GROUPS if command in g[0]] or COMMAND_GROUPS
    for _, module, adder in groups:
        getattr(importlib.import_module(module), adder)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's own log lines are for its developers, not JSON, and come as fast as a client
    # sends what they are about (100,000 lines, 9 MB, in 2.3 s from one connection sending a
    # `grpc-encoding` gRPC does not know): none, unless GRPC_VERBOSITY says otherwise. What
    # they report reaches a call as its status, which Tapis says in its own words. (Before
    # grpc is first imported, by a command.)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    argv = sys.argv[1:] if argv is None else list(argv)
    _terminate_as_interrupt()
    _closed_streams()
    _whole_writes()
    try:
        return _run(argv)
    except KeyboardInterrupt:  # Ctrl-C: what was written is whole (files are written whole)
        # (also while the command's modules load, before it starts: nothing done yet)
        print("tapis: interrupted", file=sys.stderr)
        return 130


def _whole_writes() -> None:
    """Under `python -u` (PYTHONUNBUFFERED, common in containers) the standard streams' bytes
    layer is a raw file, whose short write (a full disk) Python's text layer passes over
    without a word: output cut, exit 0. They are given a buffered layer, flushed at each line
    as before, which writes all or raises (`_run` then names the error, exit 2)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        raw = getattr(stream, "buffer", None)
        if isinstance(stream, io.TextIOWrapper) and isinstance(raw, io.RawIOBase):
            setattr(
                sys,
                name,
                io.TextIOWrapper(
                    io.BufferedWriter(raw),
                    encoding=stream.encoding,
                    errors=stream.errors,
                    line_buffering=True,
                ),
            )


class _Closed(io.TextIOBase):
    """A standard output the command was started without (`tapis ... >&-`): writing to it is
    an error of the command (`_run` names it, exit 2), as a write to any file it cannot
    write; a command that writes nothing there runs."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, f"the {self.name} is closed")


def _closed_streams() -> None:
    """A command started with a standard stream closed: no input is an empty input (`tapis
    play` reads its end), and no output is an error where the command writes one (it was an
    AttributeError's traceback)."""
    if sys.stdin is None:
        sys.stdin = open(os.devnull)  # noqa: SIM115 (the process's for its life)
    if sys.stdout is None:
        sys.stdout = _Closed("standard output")
    if sys.stderr is None:
        sys.stderr = _Closed("standard error")


def _terminate_as_interrupt() -> None:
    """SIGTERM (`kill`, `timeout`, a service manager) stops a command as Ctrl-C does: its
    files are left whole or not at all, its stored work is kept, its workers are stopped
    (exit 130). Not when Ctrl-C is ignored (a command started in the background by a shell):
    SIGTERM then keeps its default, so that it still stops the command. (`tapis serve`
    handles both itself.)"""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)  # its handler of the moment decides (executors.py)


def _run(argv: list[str]) -> int:
    """The command of `argv`, parsed and run: its exit status."""
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        status = int(args.func(args))
        sys.stdout.flush()  # (a write that fails at the end is an error of the command too)
        return status
    except BrokenPipeError:  # the reader went away (`| head`): the rest is not wanted
        with contextlib.suppress(OSError, ValueError):
            # (else the exit flushes it again: "Exception ignored ... BrokenPipeError", 120)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except TapisError as exc:  # an error that ends the command: its message, its exit code
        print(terminal_text(str(exc)), file=sys.stderr)  # (it may quote any text)
        return exit_status(exc)
    except OSError as exc:  # a file a command could not read or write, named
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"tapis {args.command}: {where}{exc.strerror or exc}", file=sys.stderr)
        _flush_or_drop()
        return 2


def _flush_or_drop() -> None:
    """The standard output flushed; when it cannot be (its disk full: what failed), what it
    still holds is dropped, so that the exit does not fail on it again (exit 120 and a
    traceback, in place of the command's own status and message)."""
    try:
        sys.stdout.flush()
    except OSError:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
