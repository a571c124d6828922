"""Every command as a user gets it wrong: a path that is missing, of the wrong kind (a folder,
a file that is not what the command reads), under a file, or an output that cannot be written;
and Ctrl-C in the middle of a command. Each ends with a clear message naming the path and a
documented exit code (docs/errors.md), never a traceback, and nothing is said done that was not
(no "imported" before a write that fails) nor left half written."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.commands import DATA, INTERRUPTIBLE, ROOT, cli_command, tapis

RECORD = DATA / "napoleon-n1.tapis"
TRANSCRIPT = DATA / "napoleon-n1.json"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A key, a JSON export, an archive, a plain file and a folder, made once."""
    tmp = tmp_path_factory.mktemp("cli")
    made = {
        "key": tmp / "k.key",
        "json": tmp / "records.json",
        "archive": tmp / "a.db",
        "file": tmp / "plain.txt",
        "folder": tmp / "folder",
        "garbage": tmp / "garbage.bin",
    }
    assert tapis("key", "new", made["key"]).returncode == 0
    assert tapis("record", "export", RECORD, "--format", "json", "-o", made["json"]).returncode == 0
    assert tapis("archive", "add", made["archive"], RECORD).returncode == 0
    made["file"].write_text("hello\n")
    made["folder"].mkdir()
    made["garbage"].write_bytes(bytes(range(256)) * 3)
    return made


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr


# --- outputs that cannot be written ---------------------------------------------------------

WRITERS: dict[str, Callable[[dict[str, Path], Path], list[str | Path]]] = {
    "record import": lambda w, out: ["record", "import", TRANSCRIPT, "-o", out],
    "record import --out-dir": lambda w, out: ["record", "import", TRANSCRIPT, "--out-dir", out],
    "record annotate": lambda w, out: ["record", "annotate", RECORD, "-o", out],
    "record export": lambda w, out: ["record", "export", RECORD, "--format", "json", "-o", out],
    "record sign": lambda w, out: ["record", "sign", RECORD, "--key", w["key"], "-o", out],
    "record import-json": lambda w, out: ["record", "import-json", w["json"], "-o", out],
    "archive export": lambda w, out: ["archive", "export", w["archive"], "-o", out],
}
OUTPUTS: dict[str, Callable[[dict[str, Path], Path], Path]] = {
    "in a missing folder": lambda w, tmp: tmp / "nowhere" / "out.tapis",
    "under a file": lambda w, tmp: w["file"] / "out.tapis",
    "a folder": lambda w, tmp: w["folder"],
}


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("command", WRITERS)
def test_an_output_that_cannot_be_written_is_named_and_nothing_is_said_done(
    work: dict[str, Path], tmp_path: Path, command: str, output: str
) -> None:
    out = OUTPUTS[output](work, tmp_path)
    if command.endswith("--out-dir") and output != "under a file":
        pytest.skip("--out-dir takes a folder, and makes it when missing")
    done = tapis(*WRITERS[command](work, out))
    no_traceback(done)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert str(out) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stdout == ""  # nothing said imported, signed or written
    assert not (tmp_path / "nowhere").exists()


# --- inputs that cannot be read ---------------------------------------------------------------

READERS: dict[str, Callable[[dict[str, Path], Path], list[str | Path]]] = {
    "record verify": lambda w, p: ["record", "verify", p],
    "record score": lambda w, p: ["record", "score", p],
    "record show": lambda w, p: ["record", "show", p],
    "record annotate": lambda w, p: ["record", "annotate", p, "-o", w["folder"] / "a.tapis"],
    "record export": lambda w, p: ["record", "export", p, "--format", "json"],
    "record sign": lambda w, p: [
        "record",
        "sign",
        p,
        "--key",
        w["key"],
        "-o",
        w["folder"] / "s.tapis",
    ],
    "record import": lambda w, p: ["record", "import", p, "-o", w["folder"] / "i.tapis"],
    "record import-json": lambda w, p: ["record", "import-json", p, "-o", w["folder"] / "j.tapis"],
    "record sign --key": lambda w, p: [
        "record",
        "sign",
        RECORD,
        "--key",
        p,
        "-o",
        w["folder"] / "k.tapis",
    ],
    "archive add": lambda w, p: ["archive", "add", w["folder"] / "new.db", p],
    "archive query": lambda w, p: ["archive", "query", p],
    "archive show": lambda w, p: ["archive", "show", p, "abc"],
    "archive runs": lambda w, p: ["archive", "runs", p],
    "archive rescore": lambda w, p: ["archive", "rescore", p, "--set", "deals=2"],
    "archive export": lambda w, p: ["archive", "export", p, "-o", w["folder"] / "e.tapis"],
    "key show": lambda w, p: ["key", "show", p],
}
INPUTS: dict[str, Callable[[dict[str, Path]], Path]] = {
    "missing": lambda w: w["folder"] / "missing.tapis",
    "a folder": lambda w: w["folder"],
    "under a file": lambda w: w["file"] / "x.tapis",
    "of the wrong kind": lambda w: w["garbage"],
}


@pytest.mark.parametrize("given", INPUTS)
@pytest.mark.parametrize("command", READERS)
def test_an_input_that_cannot_be_read_is_named_with_its_exit_code(
    work: dict[str, Path], command: str, given: str
) -> None:
    path = INPUTS[given](work)
    done = tapis(*READERS[command](work, path))
    no_traceback(done)
    assert done.returncode in (1, 2), (done.returncode, done.stdout, done.stderr)
    assert str(path) in done.stderr, done.stderr
    if given == "of the wrong kind" and command.startswith("archive"):
        # Not taken for an archive, and not made into one.
        assert path.read_bytes() == bytes(range(256)) * 3


# Options that are text, given bytes that are not UTF-8 (as a terminal passes them: Python
# reads them as surrogates, which no encoder writes): each was a traceback, or a message
# blaming the referee's reply.
NOT_UTF8 = "bad\udcffbyte"
TEXT_OPTIONS: dict[str, Callable[[dict[str, Path], Path], list[str | Path]]] = {
    "annotate --comment": lambda w, out: [
        "record", "annotate", RECORD, "-o", out, "--comment", f"1:1:{NOT_UTF8}"],
    "corpus --seed": lambda w, out: ["corpus", "-n", "1", "-o", out, "--seed", NOT_UTF8],
    "corpus --option": lambda w, out: ["corpus", "-n", "1", "-o", out, "--option", NOT_UTF8],
    "record score --set": lambda w, out: ["record", "score", RECORD, "--set", NOT_UTF8],
    "archive rescore --set": lambda w, out: ["archive", "rescore", w["archive"], "--set",
                                             f"end_threshold={NOT_UTF8}"],
    "table create --players": lambda w, out: [
        "table", "create", "--address", "127.0.0.1:9", "--players", f"{NOT_UTF8},B,C,D"],
    "play --name": lambda w, out: ["play", "--address", "127.0.0.1:9", "--name", NOT_UTF8],
}  # fmt: skip


@pytest.mark.parametrize("command", TEXT_OPTIONS)
def test_a_text_option_that_is_not_utf8_is_refused_naming_it(
    work: dict[str, Path], tmp_path: Path, command: str
) -> None:
    out = tmp_path / "out.tapis"
    args = TEXT_OPTIONS[command](work, out)
    done = tapis(*args)
    no_traceback(done)
    option = command.split()[-1]
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert f"argument {option}: " in done.stderr and "is not UTF-8 text" in done.stderr
    assert "\\xff" in done.stderr, done.stderr  # the bytes shown as given
    assert not out.exists()


def test_a_file_name_that_is_not_utf8_is_shown_as_text(tmp_path: Path) -> None:
    # `record html` titles its page with the record file's name: a name that is not UTF-8 was
    # a traceback when the page was written.
    record = tmp_path / "f\udcff.tapis"
    record.write_bytes(RECORD.read_bytes())
    done = subprocess.run(
        cli_command("", "record", "html", record),
        capture_output=True,  # (bytes: the closing line names the file as its bytes are)
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert done.stdout == b"1 record -> " + bytes(tmp_path / "f\udcff.html") + b"\n"
    page = (tmp_path / "f\udcff.html").read_text()
    assert "<title>f\ufffd.tapis - Tapis replay</title>" in page


def test_a_plain_file_is_not_taken_for_an_archive(work: dict[str, Path], tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    done = tapis("archive", "query", empty)
    no_traceback(done)
    assert done.returncode == 2 and "not a Tapis archive" in done.stderr
    assert empty.read_bytes() == b""  # nothing created in it


def test_a_game_the_archive_cannot_have_is_an_error_not_an_empty_answer(
    work: dict[str, Path],
) -> None:
    done = tapis("archive", "query", work["archive"], "--game", "heart")
    assert done.returncode == 2 and "--game 'heart': no such game" in done.stderr
    done = tapis("archive", "query", work["archive"], "--game", "nap", "--ruleset", "equipe")
    assert done.returncode == 2 and "--ruleset 'equipe'" in done.stderr
    done = tapis("archive", "query", work["archive"], "--game", "nap")
    assert done.returncode == 0 and "1 record" in done.stdout


def test_serve_on_an_address_that_is_no_address(tmp_path: Path) -> None:
    done = tapis("serve", "--listen", "nonsense", "--db", tmp_path / "t.db",
                 "--key", tmp_path / "k.key")  # fmt: skip
    no_traceback(done)
    assert done.returncode == 1 and "give HOST:PORT" in done.stderr
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "k.key").exists()


def test_serve_on_uvloop_where_it_is_not_installed(tmp_path: Path) -> None:
    # (on Windows, uvloop is no dependency) a traceback of ImportError before.
    hidden = "import sys\nsys.modules['uvloop'] = None  # as if not installed\n"
    asked = tapis("serve", "--event-loop", "uvloop", "--listen", "127.0.0.1:0", "--db",
                  tmp_path / "t.db", "--key", tmp_path / "k.key", setup=hidden)  # fmt: skip
    no_traceback(asked)
    assert asked.returncode == 2 and "uvloop is not installed" in asked.stderr, asked.stderr
    assert not (tmp_path / "t.db").exists()


# --- Ctrl-C ----------------------------------------------------------------------------------

# The command blocks in the middle of its work (once it has said so), for the test to
# interrupt it there.
STALL = """
import sys, time
import tapis_cartes.clients.cli
import tapis_cartes.records.codec
decode = tapis_cartes.records.codec.decode_record
def stalled(*args, **kwargs):
    print("working", flush=True)
    time.sleep(60)
for module in list(sys.modules.values()):
    if getattr(module, "decode_record", None) is decode:
        module.decode_record = stalled
"""


def _started(setup: str, *argv: str | Path) -> subprocess.Popen[str]:
    """`tapis ARGV...` after `setup`, as from a terminal (Ctrl-C not ignored: a test run in the
    background inherits SIGINT ignored)."""
    return subprocess.Popen(
        cli_command(INTERRUPTIBLE + setup, *argv),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def _stopped(
    proc: subprocess.Popen[str], stage: str, signum: int, there: Callable[[], None] = lambda: None
) -> str:
    """Send `signum` once the command says it is at `stage` ("working", "loading") and
    `there` (a check of that moment) passed; its stderr, once it ended with 130."""
    assert proc.stdout is not None
    assert proc.stdout.readline() == f"{stage}\n"
    there()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "interrupted" in err, err
    return err


@pytest.mark.parametrize(
    "args",
    [
        ["record", "score", RECORD],
        ["record", "verify", RECORD],
        ["record", "annotate", RECORD, "-o", "{tmp}/a.tapis"],
    ],
    ids=lambda a: " ".join(map(str, a[:2])),
)
def test_ctrl_c_ends_a_command_with_130_and_no_traceback(tmp_path: Path, args: list[str]) -> None:
    argv = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    _stopped(_started(STALL, *argv), "working", signal.SIGINT)
    assert list(tmp_path.iterdir()) == []  # no half-written output


# The command's modules block while they load (before the command starts), for the test to
# interrupt them there: a Ctrl-C right after typing a command.
STALL_LOADING = """
import importlib, time
load = importlib.import_module
def stalled(name, *args, **kwargs):
    if name.startswith("tapis_cartes.clients."):
        print("loading", flush=True)
        time.sleep(60)
    return load(name, *args, **kwargs)
importlib.import_module = stalled
"""


def test_ctrl_c_while_a_command_loads_ends_it_with_130_and_no_traceback(tmp_path: Path) -> None:
    proc = _started(STALL_LOADING, "archive", "query", tmp_path / "a.db")
    assert _stopped(proc, "loading", signal.SIGINT) == "tapis: interrupted\n"
    assert list(tmp_path.iterdir()) == []  # nothing made


# The command blocks in the middle of writing a record file (its temporary file made).
STALL_WRITING = """
import time
import tapis_cartes.clients.cli
import tapis_cartes.records.codec as codec
varint = codec.encode_varint
def stalled(n):
    print("working", flush=True)
    time.sleep(60)
    return varint(n)
codec.encode_varint = stalled
"""


def test_sigterm_ends_a_command_as_ctrl_c_does(tmp_path: Path) -> None:
    """`kill` or `timeout` in the middle of a command: 130, its message, no file left (not
    even the temporary one the write goes through)."""

    def writing() -> None:
        names = [f.name for f in tmp_path.iterdir()]
        assert len(names) == 1 and names[0].startswith(".a.tapis."), names  # the write's

    proc = _started(STALL_WRITING, "record", "annotate", RECORD, "-o", tmp_path / "a.tapis")
    _stopped(proc, "working", signal.SIGTERM, writing)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_output_cut_by_a_full_disk_is_an_error(tmp_path: Path, unbuffered: str) -> None:
    """The standard output to a file that cannot grow (a full disk): the command says so and
    ends with 2, whether Python's output is buffered or not (`-u`, PYTHONUNBUFFERED: a short
    write was passed over, the output cut and the exit 0)."""
    room = "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))\n"
    out = tmp_path / "out.json"
    with out.open("wb") as f:
        done = subprocess.run(
            cli_command(room, "record", "export", DATA / "dame-de-pique-dp1.tapis", "--format",
                        "json"),
            stdout=f, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60,
            # (no bytecode written under the bound: it would be left cut)
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": unbuffered,
                 "PYTHONDONTWRITEBYTECODE": "1"},
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == "tapis record: File too large\n"
    assert out.stat().st_size == 2048


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # The referee made a table with every seat taken, then the command failed on the seat
        # (IndexError) and the tokens were never told; -1 named the last seat open, falsely.
        (["--open", "5"], "--open 5: the table has seats 0 to 3 (one per name of --players)"),
        (["--open=-1"], "--open -1: the table has seats 0 to 3"),
        (["--players", "A,B,C", "--game", "nap", "--open", "1,3"], "--open 3: the table has"),
        (["--option", "end_threshold=5", "--option", "end_threshold=6"],
         "--option end_threshold given more than once"),
    ],
)  # fmt: skip
def test_table_create_refuses_seats_and_options_before_any_call(args: list[str], said: str) -> None:
    got = tapis("table", "create", "--address", "127.0.0.1:1", *args)  # (no referee there)
    assert got.returncode == 2, got.stderr
    assert got.stderr.startswith("tapis table create: ") and got.stderr.count("\n") == 1
    assert said in got.stderr
    assert got.stdout == ""


def test_a_closed_standard_stream_is_no_traceback() -> None:
    """Started with its output closed (`>&-`), a command ended with an AttributeError's
    traceback; with its input closed, `tapis play` blamed the referee. A reader gone (`| head`)
    ended it with exit 120 and "Exception ignored ... BrokenPipeError"."""
    command = [*cli_command("", "games"), ">&-"]
    closed = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *command[:-1]], capture_output=True, text=True,
        cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60,
    )  # fmt: skip
    assert closed.returncode == 2, closed.stderr
    assert closed.stderr == "tapis games: the standard output is closed\n"
    play = subprocess.run(
        ["sh", "-c", 'exec "$@" <&-', "sh", *cli_command("", "play", "--bots", "random")],
        capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120,
    )  # fmt: skip
    assert play.returncode == 0, play.stderr
    assert "resigned" in play.stdout and "Traceback" not in play.stderr
    reader_gone = subprocess.Popen(
        cli_command("", "rules"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert reader_gone.stdout is not None and reader_gone.stderr is not None
    reader_gone.stdout.close()  # before the command writes a line
    with reader_gone.stderr:
        err = reader_gone.stderr.read().decode()
    assert reader_gone.wait(60) == 0, err
    assert err == ""


def test_file_names_reach_no_terminal_raw(tmp_path: Path) -> None:
    """`tapis corpus` ("wrote NAME"), `tapis key new` and `key show`'s error printed a file's
    name as it was: an escape in it reached the terminal. Every command's message now shows
    it escaped, as the others did."""
    esc = "\x1b[31m"
    runs = [
        tapis("corpus", "-n", "1", "-o", tmp_path / f"{esc}x.tapis"),
        tapis("key", "new", tmp_path / f"{esc}k.key"),
        tapis("key", "show", tmp_path / f"{esc}nope"),
    ]
    # `record verify` printed it raw in its lines of valid (-v) and invalid records, `record
    # score` of several files in its headings.
    made = tmp_path / f"{esc}x.tapis"
    bad = tmp_path / f"{esc}bad.tapis"
    bad.write_bytes(b"TAPIS-RECORDS/1\n\x03\x0a\x01\x00")  # one record that is none
    runs += [
        tapis("record", "verify", "-v", made),
        tapis("record", "verify", bad),
        tapis("record", "score", made, made),
    ]
    for got in runs:
        assert "\x1b" not in got.stdout + got.stderr, got
        assert "\\u001b[31m" in got.stdout + got.stderr, got
    assert (runs[0].returncode, runs[1].returncode) == (0, 0) and runs[2].returncode != 0
    assert [got.returncode for got in runs[3:]] == [0, 1, 0], runs[3:]


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "127.0.0.1", "", "host:0", "::1:80"])
def test_a_referee_address_that_is_none_is_refused_naming_it(address: str) -> None:
    """`--address 127.0.0.1:99999` was taken for port 34463 (and the error named that one), a
    missing port for 443, and an empty address printed gRPC's own log lines."""
    got = tapis("bot", "--address", address, "--table", "T", "--join")
    assert got.returncode == 2, got.stderr
    assert f"argument --address: {address!r}: give HOST:PORT (a port 1 to 65535)" in got.stderr


def test_key_new_refuses_what_is_no_new_file(tmp_path: Path) -> None:
    """`key new ""` said " exists: not overwritten", a folder "folder exists", a dangling
    link "cannot create the key: File exists"; each ended with 1 where errors.md says 2."""
    (tmp_path / "k.key").write_text("a key already")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for path, said in [
        ("", "tapis key new: '' is no file name"),
        (str(tmp_path), f"{tmp_path}: is a folder"),
        (str(tmp_path / "k.key"), "k.key exists: not overwritten"),
        (str(tmp_path / "dangling"), "dangling exists: not overwritten"),
    ]:
        got = tapis("key", "new", path)
        assert got.returncode == 2, (path, got.stderr)
        assert said in got.stderr, got.stderr
    assert (tmp_path / "k.key").read_text() == "a key already"
    assert not (tmp_path / "nowhere").exists()


def test_an_argument_no_command_takes_is_said_under_the_whole_usage() -> None:
    """The usage printed with "unrecognized arguments" listed only the loaded command's group
    (`usage: tapis [-h] [--version] {games} ...`), as if tapis had no other command."""
    got = tapis("games", "--bogus")
    assert got.returncode == 2
    assert "{record,serve,table,key,play,bot,example,archive,games,rules,corpus}" in got.stderr
    assert got.stderr.rstrip().endswith("tapis: error: unrecognized arguments: --bogus")
