"""`tapis archive ...`: records in one SQLite file (records/archive/).

    tapis archive add DB FILES... [--key KEY ...] [--trusted-keys FILE ...] [--workers N]
    tapis archive query DB [--game G] [--ruleset R] [--player NAME] [--since DATE]
        [--until DATE] [--limit N] [--json]
    tapis archive show DB RECORD_ID          (a unique prefix of the id is enough)
    tapis archive rescore DB --set KEY=VALUE... [--game G] [--workers N] [--json]
        [--engine local|dask] [--scheduler ADDRESS]
    tapis archive runs DB [RUN_ID [--changed] [--limit N]] [--json]
    tapis archive export DB -o FILE [--game G] [--ruleset R] [--player NAME] [--since DATE]
        [--until DATE] [--limit N]

Exit status: 0 success (rescore: also when some records are not replayable, which the
summary counts); 1 a record refused, or not signed by a key given (add), or left out because
its stored envelope does not decode (export); 2 bad input (no such archive, unknown id, a file
that is not a record file, a bad key file, bad options, an archive damaged or changed by
another program); 130 interrupted (rescore: run the same command again to continue).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from tapis_cartes.clients.args import (
    add_key_options,
    closing_line,
    keys_given,
    output_path,
    positive_int,
    text_arg,
)
from tapis_cartes.clients.args import (
    err as _err,
)
from tapis_cartes.clients.progress import Progress
from tapis_cartes.records.archive import (
    Selection,
    add_files,
    damaged,
    find_record,
    is_damage,
    iter_envelopes,
    iter_records,
    list_runs,
    open_archive,
    rescore,
    run_results,
)
from tapis_cartes.records.codec import decode_record, file_name, writable, write_frames
from tapis_cartes.records.executors import MAX_WORKERS, make_executor
from tapis_cartes.records.render import render_record, terminal_text
from tapis_cartes.records.rescore import Rescored, result_text, runs_text, summary_text
from tapis_cartes.records.research import FORMATS, TABLES, write_table
from tapis_cartes.records.score import counted, seat_name, text_table
from tapis_cartes.referee.engine import GAMES, find_game
from tapis_cartes.referee.engine.options import parse_option
from tapis_cartes.referee.errors import (
    ArchiveError,
    OutputError,
    RulesError,
    TapisError,
    exit_status,
    json_text,
    quoted,
    sqlite_trouble,
    terminal_lines,
)

__all__ = ["add_archive_parser", "add_key_options", "keys_given", "positive_int"]


def _dumps(obj: Any) -> str:
    return json_text(obj, separators=(",", ":"))


def _archive_command(
    run: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """An `archive` command whose SQLite errors (a damaged page, a table dropped, a value
    SQLite refuses) end it as an `ArchiveError` naming the archive and what failed (exit 2),
    never a traceback: the archive is a file anyone may have changed."""

    @functools.wraps(run)
    def command(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except sqlite3.Error as exc:
            if is_damage(exc):
                raise damaged(args.db, str(exc)) from None
            raise ArchiveError(
                f"{args.db}: tapis archive {args.archive_command} failed reading or writing the "
                f"archive: {exc} ({_why(exc)})"
            ) from None

    return command


def _why(exc: sqlite3.Error) -> str:
    """What most likely caused an SQLite error, for the person reading it: the machine's
    doing (`sqlite_trouble`), else the file's."""
    return sqlite_trouble(exc) or "is the file damaged, or was it changed by another program?"


def _say(text: str) -> None:
    """Print a command's text for a person: what an archive holds (names, dates, options,
    rule texts, file names) is any text, so a character a terminal would obey is shown as
    its escape, line by line. (The values put in `text` are escaped first, `_shown`: a line
    break of theirs would make a line of the output.)"""
    print(terminal_lines(text))


def _shown(value: Any) -> Any:
    """A value read from the archive, to be put in a text for a person: each text in it
    (and each key) through `terminal_text`, so that none of its characters, a line break
    or a line separator included, is obeyed by a terminal or starts a line of the output
    (`_say` keeps the breaks between the lines it is given). Not for JSON output: JSON
    escapes them itself."""
    if isinstance(value, str):
        return terminal_text(value)
    if isinstance(value, dict):
        return {_shown(k): _shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(map(_shown, value))
    return value


def _unlisted(more: int, what: str) -> None:
    """The line after the refusals listed (`AddReport.LISTED` of each kind), if more were."""
    if more > 0:
        _err(
            f"... and {counted(more, 'more record', 'more records')} {what}, not listed"
            " (`tapis record verify` names each)"
        )


def _cannot_open(path: str) -> str | None:
    """Why a file given to read cannot be opened (its name first), or None; told without
    opening it (a pipe is read once, when its records are)."""
    try:
        if os.path.isdir(path):
            return f"{file_name(path)}: Is a directory"
        os.stat(path)
    except OSError as exc:
        return f"{file_name(path)}: {exc.strerror or exc}"
    if not os.access(path, os.R_OK):
        return f"{file_name(path)}: Permission denied"
    return None


@_archive_command
def cmd_add(args: argparse.Namespace) -> int:
    keys = keys_given(args)
    executor = make_executor("local", args.workers)  # a bad count refused before the archive
    unopened = [_cannot_open(f) for f in args.files]
    if all(unopened):  # nothing to add: no archive made or opened (a typo makes no file)
        for why in unopened:
            _err(f"{why}: nothing added")
        return 2
    db = open_archive(args.db)
    bar = Progress("adding", not args.json)
    t0 = time.perf_counter()
    stored = 0  # records read and stored so far (whole chunks)

    def progress(done: int) -> None:
        nonlocal stored
        stored = done
        bar.update(done)

    try:
        report = add_files(db, args.files, executor, progress=progress, keys=keys)
    except KeyboardInterrupt:
        bar.stop()
        _err("interrupted: the records stored so far are kept; the same command adds the rest")
        return 130
    except sqlite3.Error:  # (said by `_archive_command`: a full disk, ...)
        bar.stop()
        _err(
            f"stopped after {counted(stored, 'record')} read and stored (kept); once the"
            " cause is fixed, the same command adds the rest"
        )
        raise
    finally:
        bar.stop()
        db.close()
    elapsed = time.perf_counter() - t0
    refused, untrusted = report.refused_count, report.untrusted_count
    status = 2 if report.unreadable else 1 if refused or untrusted else 0
    if args.json:
        print(
            _dumps(
                {
                    "added": report.added,
                    "duplicates": report.duplicates,
                    "refused": [
                        {"file": name, "record": index, "error": str(error)}
                        for name, index, error in report.refused
                    ],
                    "refused_count": refused,
                    "untrusted": [
                        {"file": name, "record": index, "error": str(error)}
                        for name, index, error in report.untrusted
                    ],
                    "untrusted_count": untrusted,
                    "unreadable": [
                        {"file": name, "error": error} for name, error in report.unreadable
                    ],
                    "seconds": round(elapsed, 3),
                }
            )
        )
        return status
    for _, error in report.unreadable:
        _err(error)  # names the file
    for name, index, error in report.refused:
        _err(f"{name} (record {index}): refused: {error}")
    _unlisted(refused - len(report.refused), "refused")
    for name, index, error in report.untrusted:
        _err(f"{name} (record {index}): not signed by a trusted key: {error}")
    _unlisted(untrusted - len(report.untrusted), "not signed by a trusted key")
    duplicates = counted(report.duplicates, "duplicate")
    counts = f"{report.added:,} added, {duplicates}, {refused:,} refused"
    if keys:
        counts += f", {untrusted:,} not signed by a trusted key"
    _say(counts)
    seen = report.added + report.duplicates + refused + untrusted
    rate = seen / elapsed if elapsed > 0 else 0.0
    print(f"{counted(seen, 'record')} read in {elapsed:.1f} s ({rate:,.0f} records/s)")
    return status


def _table(rows: list[dict[str, Any]]) -> str:
    header = ["record", "game", "ruleset", "hands", "players", "scores", "winners", "played"]
    body = []
    for r in map(_shown, rows):
        names = r["players"]
        scores = " ".join("/".join(map(str, s)) for s in r["scores"])
        winners = ", ".join(seat_name(r["players"], w) for w in r["winners"])
        body.append(
            [
                r["record_id"][:12],
                r["game"],
                r["ruleset"],
                str(r["hands"]),
                ", ".join(names),
                scores,
                winners if r["finished"] else "(unfinished)",
                r["played_at"],
            ]
        )
    lines = text_table(header, body)
    lines.append(f"{len(rows)} record{'s' if len(rows) != 1 else ''}")
    return "\n".join(lines)


@_archive_command
def cmd_query(args: argparse.Namespace) -> int:
    db = open_archive(args.db, create=False)
    records = iter_records(db, _selected(args))
    try:
        if args.json:  # a line per record as it is read: memory does not grow with the archive
            for r in records:
                print(_dumps(r))
        else:
            _say(_table(list(records)))  # (the columns' widths: every row first)
    finally:
        records.close()  # its query's cursor, before the archive closes
        db.close()
    return 0


@_archive_command
def cmd_export(args: argparse.Namespace) -> int:
    """The selected records, out of the archive into one record file (as they were added:
    signatures and annotations kept). As `archive add` does with a partly bad file, a record
    whose stored envelope does not decode is named and left out, the others are written (exit
    1); when every record selected is so, nothing is written."""
    if args.table is not None and args.format == "tapis":
        raise ArchiveError(f"--table {args.table} is for --format csv or parquet (a table)")
    table = args.table or "plays"
    _not_the_archive(args.db, args.output)
    db = open_archive(args.db, create=False)
    refused: list[ArchiveError] = []

    def refuse(exc: ArchiveError) -> None:
        refused.append(exc)
        _err(f"{args.db}: left out: {exc}")

    def checked() -> Generator[bytes, None, None]:
        kept = 0
        for frame in iter_envelopes(db, _selected(args), refuse):
            kept += 1
            yield frame
        if refused and not kept:  # raised within the write: no file is left
            raise ArchiveError(f"{args.db}: no record to export: {counted(len(refused), 'record')} "
                               f"selected, none with an envelope that decodes")  # fmt: skip

    frames = checked()
    try:
        if args.format != "tapis":
            records, rows = write_table(args.output, table, args.format, frames, refuse)
            said = f"{counted(rows, 'row')} of {table} from {counted(records, 'record')}"
            closing_line(terminal_lines(f"{said} -> {args.output}"), args.output)
        else:
            count = write_frames(args.output, frames)
            closing_line(
                terminal_lines(f"{counted(count, 'record')} -> {args.output}"), args.output
            )
    finally:
        frames.close()  # its query's cursor, before the archive closes
        db.close()
    return 1 if refused else 0


def _not_the_archive(db: str, output: str) -> None:
    """`OutputError` for an output that is the archive or one of SQLite's files beside it
    (its write-ahead log, shared memory, journal), by any name (a link, another path):
    written, the archive would be lost. Also what `writable` refuses."""
    archive = Path(db).resolve()
    target = Path(output).resolve()  # (symbolic links followed)
    for suffix in ("", "-wal", "-shm", "-journal"):
        if target == archive.with_name(archive.name + suffix):
            raise OutputError(
                f"{output}: it is the archive {db}{' ' if suffix else ''}"
                f"{'(its ' + suffix[1:] + ' file)' if suffix else ''}: written, the archive "
                "would be lost (give another output)"
            )
    writable(output, [db])  # (the same file under another name: a hard link)


@_archive_command
def cmd_show(args: argparse.Namespace) -> int:
    try:
        db = open_archive(args.db, create=False)
        try:
            _, env = find_record(db, args.record_id)
        finally:
            db.close()
        _say(render_record(decode_record(env.record), env.record))
    except TapisError as exc:  # a stored record that does not decode, too: the archive's
        _err(str(exc))
        return 2
    return 0


@_archive_command
def cmd_runs(args: argparse.Namespace) -> int:
    db = open_archive(args.db, create=False)
    try:
        if args.run_id is None:
            runs = list_runs(db)
            if args.json:
                print("\n".join(_dumps(r) for r in runs))
            else:
                _say(runs_text(_shown(runs)))
            return 0
        run, results = run_results(db, args.run_id, args.changed, args.limit)
    finally:
        db.close()
    if args.json:
        for r in results:
            print(_dumps(r))
    else:
        _say(runs_text(_shown([run])))
        for r in results:
            names, units = r.pop("names"), find_game(r.pop("game")).units
            _say("  " + result_text(Rescored(**_shown(r)), _shown(names), units))
    return 0


@_archive_command
def cmd_rescore(args: argparse.Namespace) -> int:
    changes = {}
    try:
        for text in args.set:
            key, value = parse_option(text)
            if key in changes:  # else the last would win, silently
                raise ValueError(f"option {key!r} is given twice (--set {key}=...): give it once")
            changes[key] = value
    except ValueError as exc:
        _err(f"tapis archive rescore: {exc}")
        return 2
    cpus = min(os.cpu_count() or 1, MAX_WORKERS)
    workers = args.workers or cpus
    # (More: each only waits, and costs memory. Past MAX_WORKERS: refused below.)
    if args.engine == "local" and cpus < workers <= MAX_WORKERS:
        _err(f"--workers {workers}: this machine has {counted(cpus, 'CPU')}; {cpus} workers")
        workers = cpus
    t0 = time.perf_counter()
    bar = Progress("re-scoring", not args.json)
    try:
        executor = make_executor(args.engine, workers, args.scheduler)
        summary = rescore(
            args.db, changes, args.game, executor, workers=workers, progress=bar.update
        )
    except KeyboardInterrupt:
        bar.stop()
        _err("interrupted: the results so far are kept; run the same command to continue")
        return 130
    except TapisError as exc:  # ArchiveError, ExecutorError
        bar.stop()
        _err(str(exc))
        return exit_status(exc)
    finally:
        bar.stop()  # (an SQLite error, too: `_archive_command`)
    elapsed = time.perf_counter() - t0
    if args.json:
        print(
            _dumps(
                summary.as_json()
                | {"seconds": round(elapsed, 3), "workers": workers, "engine": args.engine}
            )
        )
    else:
        shown = dataclasses.replace(
            summary,
            options=_shown(summary.options),
            samples=_shown(summary.samples),
            refusals=_shown(summary.refusals),
        )
        _say(summary_text(shown, elapsed))
    return 0


def _selected(args: argparse.Namespace) -> Selection:
    """The records a query or an export selects; `ArchiveError` for a game or a ruleset
    Tapis does not have (a typo would otherwise select nothing, silently)."""
    for flag in ("game", "ruleset", "player", "since", "until"):
        _filter_text(f"--{flag}", getattr(args, flag))
    game, ruleset = args.game, args.ruleset
    if (
        ruleset is not None
        and game is None
        and not any(ruleset in spec.rulesets for spec in GAMES.values())
    ):
        known = ", ".join(sorted({r for spec in GAMES.values() for r in spec.rulesets}))
        raise ArchiveError(f"--ruleset {quoted(ruleset)}: no game has it ({known})")
    if game is not None:
        try:
            spec = find_game(game)
        except RulesError:
            names = ", ".join(GAMES)
            raise ArchiveError(f"--game {game!r}: no such game ({names}, or an alias)") from None
        game = spec.name
        if ruleset is not None and ruleset not in spec.rulesets:
            rulesets = ", ".join(spec.rulesets)
            raise ArchiveError(f"--ruleset {ruleset!r}: {game} has {rulesets}")
    return Selection(game, ruleset, args.player, args.since, args.until, args.limit)


def _filter_text(flag: str, value: str | None) -> None:
    """`ArchiveError` for a filter given empty (a script's unset variable would otherwise
    take every record) or not UTF-8 text (bytes a terminal passed as they were typed)."""
    if value is None:
        return
    if not value:
        raise ArchiveError(f"{flag} is empty: give a value, or leave {flag} out")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raw = value.encode("utf-8", "surrogateescape")
        raise ArchiveError(f"{flag}: {raw[:40]!r} is not UTF-8 text") from None


_MAX_LIMIT = 2**63 - 1  # SQLite's LIMIT is a signed 64-bit integer


def _limit(text: str) -> int:
    """An argparse type: a `--limit`, at least 1 and at most what SQLite counts in (64 bits)."""
    n = positive_int(text)
    if n > _MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be at most {_MAX_LIMIT} (2**63 - 1)")
    return n


def _selection(p: argparse.ArgumentParser) -> None:
    """The options that select records (query, export)."""
    p.add_argument("--game", help="game name or alias")
    p.add_argument("--ruleset")
    p.add_argument("--player", metavar="NAME", help="records where NAME has a seat")
    p.add_argument("--since", metavar="DATE", help="played on or after (YYYY-MM-DD or ISO 8601)")
    p.add_argument("--until", metavar="DATE", help="played on or before (a date: the whole day)")
    p.add_argument("--limit", type=_limit, metavar="N")


def add_archive_parser(sub: Any) -> None:
    """The `archive` subcommands, on the top-level subparsers of `tapis`."""
    archive = sub.add_parser("archive", help="records in one SQLite file: add, query, rescore")
    asub = archive.add_subparsers(dest="archive_command", required=True)

    p = asub.add_parser("add", help="verify record files and add their records")
    p.add_argument("db", metavar="DB")
    p.add_argument("files", nargs="+", metavar="FILE")
    add_key_options(p, "only the records signed by")
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="processes verifying the records (default 1: this one)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="the counts as one JSON object")
    p.set_defaults(func=cmd_add)

    p = asub.add_parser("query", help="list records (a table, or JSON lines)")
    p.add_argument("db", metavar="DB")
    _selection(p)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_query)

    p = asub.add_parser(
        "export", help="write the records selected to a record file, or as a table (CSV, Parquet)"
    )
    p.add_argument("db", metavar="DB")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="FILE",
                   help="'-': standard output")  # fmt: skip
    p.add_argument("--format", choices=("tapis", *FORMATS), default="tapis",
                   help="a record file (default), or --table as CSV or Parquet")  # fmt: skip
    p.add_argument("--table", choices=tuple(TABLES),
                   help="with --format csv or parquet: plays (default), a row per action; "
                   "results, a row per seat")  # fmt: skip
    _selection(p)
    p.set_defaults(func=cmd_export)

    p = asub.add_parser("show", help="render one record (a unique id prefix is enough)")
    p.add_argument("db", metavar="DB")
    p.add_argument("record_id", metavar="RECORD_ID")
    p.set_defaults(func=cmd_show)

    p = asub.add_parser("rescore", help="replay records with options changed; compare scores")
    p.add_argument("db", metavar="DB")
    p.add_argument("--set", action="append", required=True, metavar="KEY=VALUE", type=text_arg,
                   help="an option to change (repeatable)")  # fmt: skip
    p.add_argument("--game", help="only the records of this game")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="processes (default, and at most with --engine local: the CPUs); with "
                   "--engine dask and no --scheduler, "
                   "the workers of a local Dask cluster")  # fmt: skip
    p.add_argument("--engine", choices=("local", "dask"), default="local",
                   help="local: a process pool (default); dask: a Dask cluster")  # fmt: skip
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="the Dask scheduler (tcp://HOST:PORT); without it, --engine dask "
                   "starts a local cluster")  # fmt: skip
    p.add_argument("--json", action="store_true", help="the summary as one JSON object")
    p.set_defaults(func=cmd_rescore)

    p = asub.add_parser("runs", help="the re-scoring runs kept, or one run's results")
    p.add_argument("db", metavar="DB")
    p.add_argument("run_id", type=_limit, nargs="?", metavar="RUN_ID",
                   help="list this run's records")  # fmt: skip
    p.add_argument("--changed", action="store_true",
                   help="only records whose scores, winners or finish changed, or not "
                   "replayable")  # fmt: skip
    p.add_argument("--limit", type=_limit, metavar="N")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_runs)
