"""`tapis record ...`: records one by one (import, score, verify, show, sign, annotate, export,
import-json).

    tapis record import TRANSCRIPT... (-o RECORD | --out-dir DIR)
    tapis record score RECORD... [--json] [--set KEY=VALUE ...]
    tapis record verify RECORD... [--key KEY ...] [--trusted-keys FILE ...] [--json] [-v]
                        [--workers N]
    tapis record show RECORD
    tapis record sign RECORD --key PATH [-o OUT]
    tapis record annotate RECORD -o OUT [--comment HAND:ACTION:TEXT ...]
    tapis record export RECORD --format json|transcript [-o OUT]
    tapis record import-json JSON -o RECORD
    tapis record html RECORD [-o FILE] [--key KEY ...] [--trusted-keys FILE ...]

Exit status: 0 success; 1 a transcript refused or a record invalid; 2 a file that cannot be
read as records, or bad command-line usage; 130 interrupted (verify).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import operator
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from tapis_cartes.clients.args import (
    add_key_options,
    closing_line,
    keys_given,
    output_path,
    positive_int,
    shown_file_name,
    text_arg,
)
from tapis_cartes.clients.args import (
    err as _err,
)
from tapis_cartes.clients.progress import Progress
from tapis_cartes.records.annotate import CommentError, annotate_envelope, parse_comment
from tapis_cartes.records.codec import (
    MAGIC,
    Provenance,
    atomic_write,
    build_record,
    encode_varint,
    envelope,
    file_chunks,
    parse_envelope,
    put_frames,
    read_at_most,
    read_frames,
    writable,
    write_envelopes,
)
from tapis_cartes.records.executors import make_executor
from tapis_cartes.records.export import (
    MAX_EXPORT_JSON,
    ExportError,
    envelopes_from_json,
    json_chunks,
    transcript_text,
)
from tapis_cartes.records.render import render_record, terminal_text
from tapis_cartes.records.rescore import changes_text, rescored
from tapis_cartes.records.score import counted, replay_changed, score_json, score_sheet
from tapis_cartes.records.signing import key_id, load_private_key, sign
from tapis_cartes.records.transcript import import_transcript, load_transcript
from tapis_cartes.records.verify import (
    VerifyResult,
    result_json,
    verified_match,
    verify_envelope,
    verify_files,
)
from tapis_cartes.referee.engine import RecordError, TapisError, find_game
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.engine.options import Option, parse_option
from tapis_cartes.referee.errors import (
    OutputError,
    PageTooLarge,
    RecordFileError,
    exit_status,
    json_text,
    terminal_json,
)
from tapis_cartes.v1 import record_pb2 as pb

__all__ = ["add_record_parser"]


# --- record import ------------------------------------------------------------------------


def cmd_import(args: argparse.Namespace) -> int:
    if args.output is None and args.out_dir is None:
        _err("tapis record import: give -o RECORD or --out-dir DIR")
        return 2
    if args.output is not None and args.out_dir is not None:
        _err("tapis record import: give -o RECORD or --out-dir DIR, not both")
        return 2
    if args.out_dir is not None:
        try:
            Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{args.out_dir}: cannot make the folder: {exc.strerror}") from None
        clash = _same_outputs(args.transcripts)
        if clash:
            _err(f"tapis record import: {clash}: import them into separate folders")
            return 2
    else:
        writable(args.output, args.transcripts)
    refused = 0
    imported = []
    for name in args.transcripts:
        try:
            doc = load_transcript(name)
        except TapisError as exc:  # its message names the file
            refused += 1
            _err(str(exc))
            continue
        try:
            # The file name is kept as the record's provenance: UTF-8 text, a byte that is
            # not read as U+FFFD (as the name is shown).
            reference = shown_file_name(name)
            record_bytes = import_transcript(doc, reference)
        except TapisError as exc:
            refused += 1
            _err(f"{name}: {exc}")
            continue
        except Exception as exc:  # a bug in Tapis: this transcript only, no traceback
            refused += 1
            _err(f"{name}: the import failed ({type(exc).__name__}: {quoted(str(exc), 200)}): "
                 "a bug in Tapis, to report")  # fmt: skip
            continue
        env = envelope(record_bytes)
        if args.out_dir is not None:
            out = Path(args.out_dir) / (Path(name).stem + ".tapis")
            write_envelopes(out, [env])
            print(terminal_text(f"{name} -> {out}"))
        else:
            imported.append(env)
            closing_line(f"{name}: imported", args.output or "")
    if args.output is not None and imported:
        write_envelopes(args.output, imported)
        closing_line(f"{counted(len(imported), 'record')} -> {args.output}", args.output)
    return 1 if refused else 0


def _same_outputs(transcripts: Sequence[str]) -> str:
    """Two transcripts of `--out-dir` that would be written to the same record file (one
    name, in two folders), said; "" when there is none: neither is written over the other."""
    seen: dict[str, str] = {}
    for name in transcripts:
        stem = Path(name).stem + ".tapis"
        if stem in seen and Path(seen[stem]) != Path(name):
            return f"{seen[stem]} and {name} would both be written to {stem}"
        seen.setdefault(stem, name)
    return ""


# --- reading records ----------------------------------------------------------------------


class _Loaded:
    """(file, index, envelope) of every record of `paths`, in order, each read from its file
    when it is reached: one envelope at a time in memory (a small file of a million empty
    records once took gigabytes). The files are read through once first (their records
    counted: `len`, `counts`), so that `RecordFileError` (which ends the command) comes
    before any record is used when a file cannot be read as records."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self.counts: dict[str, int] = {}  # records by file (a file given twice, twice)
        # A file that can be read once only (a pipe, `/dev/stdin`, a FIFO) is read into a
        # temporary file first, and read from there both times.
        self._copies: dict[str, Any] = {}
        for p in self.paths:
            if p not in self._copies and _read_once(p):
                self._copies[p] = _copied(p)
            self.counts[p] = self.counts.get(p, 0) + sum(1 for _ in self._envelopes(p))

    def __len__(self) -> int:
        return sum(self.counts[p] for p in dict.fromkeys(self.paths))

    def __iter__(self) -> Iterator[tuple[str, int, pb.RecordEnvelope]]:
        for p in self.paths:
            for i, env in enumerate(self._envelopes(p), 1):
                yield p, i, env

    def _envelopes(self, path: str) -> Iterator[pb.RecordEnvelope]:
        """The envelopes of a record file as it is read; `RecordFileError` when it is not
        one."""
        name = str(Path(path))
        copy = self._copies.get(path)
        for first, frames in file_chunks(copy.name if copy else path, 1, name):
            yield parse_envelope(frames[0], name, first)


def _read_once(path: str) -> bool:
    """Whether `path` is a file that exists and is not a regular one (nor a folder)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # (said by the first reading)
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


# The most a file read once (a pipe) is copied for a command that reads its records twice:
# beyond, the command asks for a file. (A stream without end, such as a record file's magic
# followed by /dev/zero, a record of 0 bytes at each byte, would fill the disk.)
MAX_PIPED = 1 << 30


def _copied(path: str) -> Any:
    """A temporary file holding the records `path` gives to its end, read as a record file is
    (a file that is none, `/dev/zero`, is refused at its start), at most `MAX_PIPED` bytes,
    removed when closed or when the process ends; `RecordFileError` when it cannot be read
    as records."""
    name = str(Path(path))

    def bounded(frames: Iterator[bytes]) -> Iterator[bytes]:
        size = len(MAGIC)
        for index, frame in enumerate(frames, 1):
            size += len(encode_varint(len(frame))) + len(frame)  # as the copy holds it
            if size > MAX_PIPED:
                raise RecordFileError(
                    "too-large",
                    f"{name}: record {index} is past the {MAX_PIPED} bytes this command"
                    " takes from a pipe; write the records to a file and give it",
                )
            yield frame

    copy = tempfile.NamedTemporaryFile(prefix="tapis-", suffix=".tapis")  # noqa: SIM115 (kept open: the copy lives while open)
    try:
        with open(path, "rb") as source:
            put_frames(copy, bounded(read_frames(source, None, name)))
        copy.flush()
    except OSError as exc:
        copy.close()
        raise RecordFileError("unreadable", f"{path}: {exc.strerror or exc}") from None
    except BaseException:
        copy.close()
        raise
    return copy


def _where(path: str, index: int, count: int) -> str:
    """Where a record is, for a person (a file's name may hold any character)."""
    shown = terminal_text(path)
    return shown if count == 1 else f"{shown} (record {index})"


def _refused(where: str, exc: TapisError) -> None:
    """A record a command does not take, and why (as `verify` says it of an invalid one)."""
    if isinstance(exc, RecordError):
        _err(f"{where}: INVALID: {exc} ({exc.code})")
    else:
        _err(f"{where}: {exc}")


class _Refusals:
    """The records a command does not take, each said on stderr as `_refused` says it, but
    records of a file refused alike one after another (a file of a million empty records)
    said once, then counted (`_Repeats`), as `verify` says them. `close` at the end."""

    def __init__(self) -> None:
        self.run: _Repeats | None = None  # the file of the last record refused

    def say(self, path: str, index: int, count: int, exc: TapisError) -> None:
        if self.run is None or self.run.path != path:
            self.close()
            self.run = _Repeats(path, _err)
        if not self.run.seen(index, f"{getattr(exc, 'code', '')}: {exc}"):
            _refused(_where(path, index, count), exc)

    def close(self) -> None:
        if self.run is not None:
            self.run.close()


def _changes(texts: Sequence[str]) -> dict[str, Option]:
    """The options of `--set KEY=VALUE ...`; `ValueError` for a text that is not KEY=VALUE,
    or a key set twice (which value was meant is not for Tapis to guess)."""
    changes: dict[str, Option] = {}
    given: dict[str, str] = {}
    for text in texts:
        key, value = parse_option(text)
        if key in changes:
            raise ValueError(
                f"option {quoted(key)} is set twice: --set {quoted(given[key])} and "
                f"--set {quoted(text)}"
            )
        changes[key], given[key] = value, text
    return changes


def _rescored(rec: pb.GameRecord, changes: dict[str, Option]) -> tuple[pb.GameRecord, str]:
    """The record as its match goes under the changed options (the same deals and actions;
    unsigned), and the report of what changes (records/rescore.py); `NotReplayable` when the
    new rules refuse them."""
    match = replay_changed(rec, changes)
    p = rec.provenance
    new = build_record(
        match,
        [s.name for s in rec.seats],
        Provenance(p.source, p.reference, p.played_at),
        [list(h.deal.deck) or None for h in rec.hands],
        rec.deal_source if rec.HasField("deal_source") else None,
    )
    units = find_game(rec.rules.game).units
    names = [s.name for s in rec.seats]
    return new, changes_text(rescored("", rec, match), names, units)


def cmd_score(args: argparse.Namespace) -> int:
    try:
        changes = _changes(args.set or ())
    except ValueError as exc:
        _err(f"tapis record score: {exc}")
        return 2
    loaded = _Loaded(args.records)
    status = 0
    counts = loaded.counts
    under = ", ".join(f"{k}={v}" for k, v in sorted(changes.items()))
    refusals = _Refusals()
    for path, index, env in loaded:
        where = _where(path, index, counts[path])
        try:
            # verified first: no score is shown that the rules did not make
            rec, _ = verified_match(env.record)
            shown, report = _rescored(rec, changes) if changes else (rec, None)
        except TapisError as exc:  # RecordError, NotReplayable
            refusals.say(path, index, counts[path], exc)
            status = 1
            continue
        if args.json:
            print(json_text(score_json(shown), separators=(",", ":")))
        else:
            if len(loaded) > 1 or changes:
                print(f"== {where}" + (f" under {under}" if changes else ""))
            print(score_sheet(shown))
            if report is not None:
                print(report)
    refusals.close()
    return status


def _signature_note(result: VerifyResult) -> str:
    if result.signature == "valid":
        by = f"{terminal_text(result.signer)} " if result.signer else ""
        return f", signed by {by}(key {result.key_id[:16]})"
    if result.signature == "unchecked":
        return f", signed by key {result.key_id[:16]}, not checked (no --key)"
    return ""


class _VerifyTally:
    """The counts of `verify`'s summary."""

    def __init__(self) -> None:
        self.valid = self.invalid = self.file_errors = self.hands = self.unchecked = 0

    def count(self, result: VerifyResult) -> None:
        self.hands += result.hands
        self.unchecked += result.signature == "unchecked"
        if result.ok:
            self.valid += 1
        elif _is_file_error(result):
            self.file_errors += 1
        else:
            self.invalid += 1


def _show_result(
    path: str, index: int | None, result: VerifyResult, several: bool, verbose: bool
) -> None:
    """One result for a person: a file problem on stderr, an invalid record (and with
    `verbose` a valid one) on stdout."""
    error = result.error
    if error is None and not verbose:
        return
    if error is not None and _is_file_error(result):
        _err(str(error))
        return
    where = _where(path, index or 1, 2 if several else 1)
    if error is not None:
        print(f"{where}: INVALID: {error} ({error.code})")
    else:
        print(f"{where}: valid ({result.record_id[:16]}){_signature_note(result)}")


class _Repeats:
    """The records of a file refused with the same error as the one before each: counted, not
    each said (`seen`), then said in one line by `say` (`close`, or when another comes)."""

    def __init__(self, path: str, say: Callable[[str], None] = print) -> None:
        self.path = path
        self.say = say
        self.error = ""  # the error of the last record seen ("" for one taken)
        self.last = 0  # its index
        self.first = 0  # the first of the repeats not said yet (0: none)

    def seen(self, index: int | None, error: str) -> bool:
        """Whether `error` (of record `index`; "" for none) repeats the error of the record
        just before (counted, not to be said)."""
        if error and error == self.error and index is not None and index == self.last + 1:
            self.first = self.first or index
            self.last = index
            return True
        self.close()
        self.error, self.last = error, index or 0
        return False

    def close(self) -> None:
        if self.first:
            many = f"records {self.first} to {self.last}" if self.last > self.first else ""
            self.say(f"{terminal_text(self.path)} ({many or f'record {self.first}'}): the same")
        self.first = 0


def _error_of(result: VerifyResult) -> str:
    return "" if result.error is None else f"{result.error.code}: {result.error}"


def _is_file_error(result: VerifyResult) -> bool:
    return result.error is not None and result.error.code.startswith("file:")


def cmd_verify(args: argparse.Namespace) -> int:
    """Verify every record of the files, here or with `--workers N` on a local process pool
    (the same output either way, in file and record order)."""
    keys = keys_given(args)
    tally = _VerifyTally()
    t0 = time.perf_counter()
    results = verify_files(args.records, keys, make_executor("local", args.workers))
    bar = Progress("verifying", not args.json)
    try:
        for file, found in itertools.groupby(results, key=operator.itemgetter(0)):
            path = args.records[file]
            # A person reads "FILE (record I)" when the file holds more than one record: the
            # first result is held back until a second shows (or the file ends).
            held: tuple[int | None, VerifyResult] | None = None
            several = False
            # Records refused alike one after another (a file of a million empty records) are
            # said once, then counted: "(records 2 to 1000000: the same)".
            same = _Repeats(path)
            for _, index, result in found:
                tally.count(result)
                bar.update(tally.valid + tally.invalid)
                if args.json:
                    print(json_text(result_json(path, index, result)))
                    continue
                if held is not None:
                    same.seen(held[0], _error_of(held[1]))
                    _show_result(path, *held, True, args.verbose)
                    held, several = None, True
                if not several:
                    held = (index, result)
                elif not same.seen(index, _error_of(result)):
                    _show_result(path, index, result, True, args.verbose)
            same.close()
            if held is not None:
                _show_result(path, *held, False, args.verbose)
    except KeyboardInterrupt:
        _err("interrupted: not every record was verified")
        return 130
    finally:
        bar.stop()
        results.close()  # stop the pool's workers now
    elapsed = time.perf_counter() - t0
    status = 2 if tally.file_errors else 1 if tally.invalid else 0
    if args.json:
        return status
    rate = tally.hands / elapsed if elapsed > 0 else 0.0
    problems = ""
    if tally.file_errors:
        problems = f"; {tally.file_errors} file error{'s' if tally.file_errors != 1 else ''}"
    print(
        f"{counted(tally.valid + tally.invalid, 'record')}, {tally.valid} valid, "
        f"{tally.invalid} invalid, {counted(tally.hands, 'hand')} in {elapsed:.3f} s "
        f"({rate:,.0f} hands/s){problems}"
    )
    if tally.unchecked:
        print(
            f"{tally.unchecked} signed record{'s' if tally.unchecked != 1 else ''}: "
            "signatures not checked (give --key or --trusted-keys)"
        )
    return status


def cmd_show(args: argparse.Namespace) -> int:
    loaded = _Loaded([args.record])
    status = 0
    shown = 0  # records shown, each after a rule from the one before (one left out: none)
    refusals = _Refusals()
    for path, index, env in loaded:
        try:
            rec, match = verified_match(env.record)  # nothing shown the rules did not make
            notes = env.annotations if env.HasField("annotations") else None
            text = render_record(rec, env.record, notes, match)
        except RecordError as exc:
            refusals.say(path, index, len(loaded), exc)
            status = 1
            continue
        if shown:
            print("\n" + "=" * 72 + "\n")
        print(text)
        shown += 1
    refusals.close()
    return status


# --- sign, annotate, export -------------------------------------------------------------


def cmd_sign(args: argparse.Namespace) -> int:
    """Sign every record of a file (each must verify first); annotations are kept."""
    key = load_private_key(args.key)
    loaded = _Loaded([args.record])
    writable(args.output or args.record)
    signed = []
    for path, index, env in loaded:
        result = verify_envelope(env)
        if not result.ok:
            _err(f"{_where(path, index, len(loaded))}: not signed, INVALID: {result.error}")
            return 1
        new = sign(env.record, key)
        if env.HasField("annotations"):
            new.annotations.CopyFrom(env.annotations)
        signed.append(new)
    out = args.output or args.record
    write_envelopes(out, signed)
    kid = key_id(key.public_key())
    closing_line(f"{counted(len(signed), 'record')} signed ({kid[:16]}) -> {out}", out)
    return 0


def cmd_annotate(args: argparse.Namespace) -> int:
    try:
        comments = [parse_comment(c) for c in args.comment or ()]
    except CommentError as exc:
        _err(f"tapis record annotate: {exc}")
        return exit_status(exc)
    loaded = _Loaded([args.record])
    writable(args.output)
    if comments and len(loaded) != 1:
        _err(f"{args.record} holds {len(loaded)} records: --comment needs a file of one record")
        return 2
    actions = 0
    at = ""  # the record being annotated, as messages name it

    def annotated() -> Iterator[pb.RecordEnvelope]:
        """Each record annotated as it is written: one in memory at a time."""
        nonlocal actions, at
        for path, index, env in loaded:
            at = _where(path, index, len(loaded))
            new = annotate_envelope(env, comments)
            actions += len(new.annotations.actions)
            yield new

    try:
        written = write_envelopes(args.output, annotated())
    except (RecordError, CommentError) as exc:  # the record at `at`: no file is made
        if isinstance(exc, RecordFileError):
            raise  # (the file itself, not a record: said as every command says it)
        _refused(at, exc)
        return exit_status(exc)
    closing_line(
        f"{counted(written, 'record')}, {actions} actions annotated -> {args.output}", args.output
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export the valid records of a file (each verified: an export passes on no content the
    rules did not make); an invalid one is named and left out, and the command ends with 1."""
    loaded = _Loaded([args.record])
    if args.output is not None:
        writable(args.output, [args.record])
    if args.format == "transcript" and len(loaded) != 1:
        _err(f"{args.record} holds {len(loaded)} records; a transcript holds one match")
        return 1
    refused = 0

    def valid() -> Iterator[tuple[pb.RecordEnvelope, pb.GameRecord]]:
        """The records that verify, one at a time (the others named as they come)."""
        nonlocal refused
        refusals = _Refusals()
        for path, index, env in loaded:
            try:
                rec, _ = verified_match(env.record)
            except RecordError as exc:
                refusals.say(path, index, len(loaded), exc)
                refused += 1
                continue
            yield env, rec
        refusals.close()

    try:
        if args.format == "json":  # written as the records come: one in memory at a time
            chunks = json_chunks(env for env, _ in valid())
        else:  # (a file of one record: said above)
            chunks = (transcript_text(rec) for _, rec in valid())
        first = next(chunks, None)
        if first is None:
            return 1 if refused else 0  # (no file made: every record refused, each named)
        chunks = itertools.chain([first], chunks)
        if args.output is None:  # to a terminal, perhaps: JSON escapes (the same values)
            last = ""
            for last in chunks:
                print(terminal_json(last), end="")
            if not last.endswith("\n"):
                print()
        else:
            atomic_write(args.output, functools.partial(_write_text, chunks))
    except TapisError as exc:  # ExportError
        _err(f"{args.record}: {exc}")
        return exit_status(exc)
    return 1 if refused else 0


def _write_text(chunks: Iterable[str], f: IO[bytes]) -> None:
    """Write the chunks of an export (a JSON document ends with a newline)."""
    last = ""
    for last in chunks:
        f.write(last.encode("utf-8"))
    if not last.endswith("\n"):
        f.write(b"\n")


def cmd_import_json(args: argparse.Namespace) -> int:
    try:
        data = read_at_most(args.json, MAX_EXPORT_JSON)
        if data is None:
            _err(f"{args.json}: larger than {MAX_EXPORT_JSON >> 20} MiB: not an export to read")
            return 2
        text = data.decode("utf-8")
    except OSError as exc:
        _err(f"{args.json}: cannot read: {exc.strerror or exc}")
        return 2
    except UnicodeDecodeError as exc:
        _err(f"{args.json}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return 2
    writable(args.output, [args.json])
    try:
        envs = envelopes_from_json(text)
    except ExportError as exc:
        _err(f"{args.json}: {exc}")
        return exit_status(exc)
    write_envelopes(args.output, envs)
    closing_line(f"{counted(len(envs), 'record')} -> {args.output}", args.output)
    return 0


def cmd_html(args: argparse.Namespace) -> int:
    """One self-contained page that replays every valid record of the file (records/html.py);
    an invalid one is named and left out, and the command ends with 1."""
    from tapis_cartes.records.html import PageRecords, replay_page  # (only here)

    keys = keys_given(args)
    loaded = _Loaded([args.record])
    out = args.output or str(Path(args.record).with_suffix(".html"))
    if out != "-":
        writable(out, [args.record])
    status = 0
    records = PageRecords()
    refusals = _Refusals()
    for path, index, env in loaded:
        try:
            records.add(env, keys)
        except (RecordError, PageTooLarge) as exc:  # not from the rules, or past the page
            refusals.say(path, index, len(loaded), exc)
            status = 1
    refusals.close()
    if not records.records:
        return status
    page = replay_page(records.data(), f"{shown_file_name(args.record)} - Tapis replay")
    atomic_write(out, lambda f: f.write(page.encode("utf-8")))
    closing_line(f"{counted(len(records.records), 'record')} -> {out}", out)
    return status


def add_record_parser(sub: Any) -> None:
    """The `record` subcommands, on the top-level subparsers of `tapis`."""
    record = sub.add_parser("record", help="import, score, verify and show game records")
    rsub = record.add_subparsers(dest="record_command", required=True)

    p = rsub.add_parser("import", help="replay transcripts and write canonical records")
    p.add_argument("transcripts", nargs="+", metavar="TRANSCRIPT")
    p.add_argument(
        "-o", "--output", type=output_path, metavar="RECORD", help="one record file for all"
    )
    p.add_argument("--out-dir", metavar="DIR", help="one record file per transcript")
    p.set_defaults(func=cmd_import)

    p = rsub.add_parser("score", help="print the scores of records (or under other options)")
    p.add_argument("records", nargs="+", metavar="RECORD")
    p.add_argument("--json", action="store_true", help="the JSON of TRANSCRIPT.md, one per line")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", type=text_arg,
                   help="re-score under this option changed (repeatable): the same deals and "
                   "actions, to where the match now ends")  # fmt: skip
    p.set_defaults(func=cmd_score)

    p = rsub.add_parser(
        "verify",
        help="check signatures, replay records and recompute everything (docs/verify.md)",
    )
    p.add_argument("records", nargs="+", metavar="RECORD")
    p.add_argument("-v", "--verbose", action="store_true", help="also list the valid records")
    add_key_options(p, "the records must be signed by")
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line per record (and per file problem)",
    )
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="processes verifying the records (default 1: this one); "
                   "the output is the same")  # fmt: skip
    p.set_defaults(func=cmd_verify)

    p = rsub.add_parser("show", help="render a record for a person")
    p.add_argument("record", metavar="RECORD")
    p.set_defaults(func=cmd_show)

    p = rsub.add_parser("sign", help="sign every record of a file with an Ed25519 key")
    p.add_argument("record", metavar="RECORD")
    p.add_argument("--key", required=True, metavar="PATH", help="the PEM private key")
    p.add_argument(
        "-o", "--output", type=output_path, metavar="OUT",
        help="where to write (default: in place; '-': standard output)",
    )  # fmt: skip
    p.set_defaults(func=cmd_sign)

    p = rsub.add_parser(
        "annotate", help="add legal actions, forced plays, trick winners, comments per action"
    )
    p.add_argument("record", metavar="RECORD")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="OUT")
    p.add_argument("--comment", action="append", metavar="HAND:ACTION:TEXT", type=text_arg,
                   help="a comment on an action (hand and action counted from 1)")  # fmt: skip
    p.set_defaults(func=cmd_annotate)

    p = rsub.add_parser("export", help="write records as protobuf JSON or as a transcript")
    p.add_argument("record", metavar="RECORD")
    p.add_argument("--format", required=True, choices=("json", "transcript"))
    p.add_argument(
        "-o", "--output", type=output_path, metavar="OUT", help="default: standard output"
    )
    p.set_defaults(func=cmd_export)

    p = rsub.add_parser("import-json", help="turn a JSON export back into a record file")
    p.add_argument("json", metavar="JSON")
    p.add_argument("-o", "--output", type=output_path, required=True, metavar="RECORD")
    p.set_defaults(func=cmd_import_json)

    p = rsub.add_parser("html", help="write a web page that replays records trick by trick")
    p.add_argument("record", metavar="RECORD")
    p.add_argument(
        "-o",
        "--output",
        type=output_path,
        metavar="FILE",
        help="default: RECORD.html; '-': standard output",
    )
    add_key_options(p, "the signature is checked against")
    p.set_defaults(func=cmd_html)
