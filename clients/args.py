"""Command-line options that several command groups take (`tapis record verify` and
`tapis archive add` take the same keys), in a module of their own so that a group imports
none of another's."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tapis_cartes.records.signing import TrustedKey, load_keys
from tapis_cartes.referee.errors import terminal_lines, terminal_text

__all__ = [
    "STDOUT",
    "add_key_options",
    "address_arg",
    "closing_line",
    "err",
    "keys_given",
    "output_path",
    "positive_int",
    "shown_file_name",
    "text_arg",
    "writes_stdout",
]

STDOUT = "/dev/stdout"


def address_arg(text: str) -> str:
    """A referee's address (`--address`, an argparse type): HOST:PORT, an IPv6 address in
    brackets (a port of 99999 was taken for another, a missing one for 443)."""
    from tapis_cartes.referee.server.limits import address_parts

    try:
        address_parts(text, least_port=1)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{terminal_text(text)[:80]!r}: {exc}") from None
    return text


def err(message: str) -> None:
    """A command's message to stderr, for a person: what it quotes (a file's name, a table's
    id) may hold any character, each line shown through `terminal_text`."""
    print(terminal_lines(message), file=sys.stderr)


def output_path(text: str) -> str:
    """An output option's value (`-o`, an argparse type): `-` is the standard output."""
    return STDOUT if text == "-" else text


def text_arg(value: str) -> str:
    """An argparse type for an option that is text (a name, a comment, a seed, an option's
    value), not a file name: UTF-8, refused otherwise (bytes a terminal passed as they were
    typed reach Python as surrogates, which nothing can write)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raw = value.encode("utf-8", "surrogateescape")
        raise argparse.ArgumentTypeError(f"{raw[:40]!r} is not UTF-8 text") from None
    return value


def shown_file_name(path: str | Path) -> str:
    """The name of the file at `path`, as text: a byte of it that is not UTF-8 as U+FFFD."""
    return os.fsencode(Path(path).name).decode("utf-8", "replace")


def writes_stdout(path: str | Path) -> bool:
    """Whether writing `path` writes this process's standard output (`-o -`, `/dev/stdout`,
    or the file the standard output goes to)."""
    try:
        there, out = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError):  # no such file yet; no standard output
        return False
    return (there.st_dev, there.st_ino) == (out.st_dev, out.st_ino)


def closing_line(text: str, output: str | Path) -> None:
    """A command's line after it wrote `output` (`20 records -> out.tapis`), on the standard
    output; none when `output` is the standard output (a line in the data would spoil it, and
    the data is there to see)."""
    if not writes_stdout(output):
        print(text)


def add_key_options(p: argparse.ArgumentParser, must: str) -> None:
    """`--key` and `--trusted-keys` (both repeatable, combined), as `verify` and `archive add`
    take them; `must` says what the records then must be."""
    p.add_argument(
        "--key",
        action="append",
        metavar="KEY",
        help=f"a PEM key file (public or private): {must} one of the keys given; may be given "
        "several times",
    )
    p.add_argument(
        "--trusted-keys",
        action="append",
        metavar="FILE",
        help="a text file of PEM public keys, each after an optional '# name' line (the "
        "output of 'tapis key show' may be appended as is); combines with --key",
    )


def keys_given(args: argparse.Namespace) -> list[TrustedKey]:
    """The keys of `--trusted-keys` files, then of `--key` files (`load_keys`)."""
    return load_keys(args.key or (), args.trusted_keys or ())


# The most a count option takes: SQLite's largest integer (`--limit` is passed to it), far
# past any real count. Tighter bounds are checked where they apply (`--workers`: records/
# executors.py, MAX_WORKERS).
MAX_COUNT = (1 << 63) - 1


def positive_int(text: str) -> int:
    """An argparse type: an int of 1 to `MAX_COUNT`, in ASCII digits."""
    if not text.isascii() or not text.lstrip("+-").isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    if n > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT}")
    return n
