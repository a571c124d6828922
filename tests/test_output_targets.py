"""Every command that writes a file (`-o`) writes what a user names as a shell's `>` would:
through a symlink (the file it names is replaced, the link stays), in place on a character
device or a FIFO (no file put in its place; a full device is exit 2, named), and an existing
file keeps its permissions. A folder, a symlink loop and a block device are refused."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tapis_cartes.records.codec import atomic_write
from tapis_cartes.referee.errors import OutputError
from tests.commands import DATA, ROOT, cli_command, tapis

RECORD = DATA / "napoleon-n1.tapis"
TRANSCRIPT = DATA / "napoleon-n1.json"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A key, a JSON export and an archive, made once."""
    tmp = tmp_path_factory.mktemp("outputs")
    made = {"key": tmp / "k.key", "json": tmp / "records.json", "archive": tmp / "a.db"}
    assert tapis("key", "new", made["key"]).returncode == 0
    assert tapis("record", "export", RECORD, "--format", "json", "-o", made["json"]).returncode == 0
    assert tapis("archive", "add", made["archive"], RECORD).returncode == 0
    return made


@pytest.fixture(scope="module")
def in_place(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A guard before the real devices: a FIFO of our own must be written in place (the same
    path as a device's), else writing to /dev/null would replace the machine's /dev/null."""
    fifo = tmp_path_factory.mktemp("guard") / "fifo"
    os.mkfifo(fifo)
    reader = threading.Thread(target=fifo.read_bytes, daemon=True)
    reader.start()
    done = tapis("record", "import", TRANSCRIPT, "-o", fifo)
    reader.join(60)
    if not stat.S_ISFIFO(fifo.lstat().st_mode):
        pytest.fail("a FIFO was replaced by a file: not trying the real devices")
    assert done.returncode == 0, done.stderr


WRITERS: dict[str, Callable[[dict[str, Path], Path], list[str | Path]]] = {
    "record import": lambda w, out: ["record", "import", TRANSCRIPT, "-o", out],
    "record annotate": lambda w, out: ["record", "annotate", RECORD, "-o", out],
    "record export": lambda w, out: ["record", "export", RECORD, "--format", "json", "-o", out],
    "record sign": lambda w, out: ["record", "sign", RECORD, "--key", w["key"], "-o", out],
    "record import-json": lambda w, out: ["record", "import-json", w["json"], "-o", out],
    "archive export": lambda w, out: ["archive", "export", w["archive"], "-o", out],
    "archive export csv": lambda w, out: [
        *("archive", "export", w["archive"], "-o", out),
        *("--format", "csv", "--table", "results"),
    ],
}


def run(command: str, work: dict[str, Path], out: Path) -> subprocess.CompletedProcess[str]:
    done = tapis(*WRITERS[command](work, out))
    assert "Traceback" not in done.stderr, done.stderr
    return done


def expected(command: str, work: dict[str, Path], tmp_path: Path) -> bytes:
    """What the command writes to a new plain file (`record sign` signs anew: a signature of
    the same bytes by the same key is the same, Ed25519 being deterministic)."""
    plain = tmp_path / "plain.out"
    done = run(command, work, plain)
    assert done.returncode == 0, done.stderr
    data = plain.read_bytes()
    plain.unlink()
    return data


@pytest.mark.parametrize("command", WRITERS)
def test_a_symlink_is_followed_and_the_file_it_names_keeps_its_permissions(
    work: dict[str, Path], tmp_path: Path, command: str
) -> None:
    want = expected(command, work, tmp_path)
    real = tmp_path / "private.out"
    real.write_text("old\n")
    real.chmod(0o600)
    link = tmp_path / "link.out"
    link.symlink_to(real.name)  # relative, as `ln -s` makes it
    done = run(command, work, link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == real.name
    assert real.read_bytes() == want
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.out", "private.out"]  # no temp


def test_a_file_replaced_keeps_its_mode(work: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "shared.tapis"
    out.write_text("old\n")
    out.chmod(0o640)
    done = run("record import", work, out)
    assert done.returncode == 0, done.stderr
    assert out.read_bytes().startswith(b"TAPIS-RECORDS/1\n")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


def test_a_dangling_symlink_makes_the_file_it_names(work: dict[str, Path], tmp_path: Path) -> None:
    link = tmp_path / "link.tapis"
    link.symlink_to("made.tapis")
    done = run("record import", work, link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink()
    assert (tmp_path / "made.tapis").read_bytes().startswith(b"TAPIS-RECORDS/1\n")


@pytest.mark.parametrize("command", ["record import", "record export", "archive export csv"])
def test_a_fifo_is_written_in_place_for_its_reader(
    work: dict[str, Path], tmp_path: Path, command: str
) -> None:
    want = expected(command, work, tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = run(command, work, fifo)
    reader.join(60)
    assert done.returncode == 0, done.stderr
    assert got == [want]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)  # still a FIFO, not a file put in its place


@pytest.mark.parametrize("command", WRITERS)
def test_dev_null_is_written_and_stays_a_device(
    work: dict[str, Path], in_place: None, command: str
) -> None:
    before = os.stat("/dev/null")
    done = run(command, work, Path("/dev/null"))
    assert done.returncode == 0, done.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


@pytest.mark.skipif(
    not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)),
    reason="no /dev/full here",
)
@pytest.mark.parametrize("command", WRITERS)
def test_a_full_device_is_exit_2_named_and_stays_a_device(
    work: dict[str, Path], in_place: None, command: str
) -> None:
    before = os.stat("/dev/full")
    done = run(command, work, Path("/dev/full"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "/dev/full: cannot write: No space left on device" in done.stderr
    assert "->" not in done.stdout  # not said written
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


@pytest.mark.parametrize("target", ["/dev/stdout", "-"])
@pytest.mark.parametrize("command", WRITERS)
def test_stdout_a_pipe_gets_the_output_alone(
    command: str, target: str, work: dict[str, Path], tmp_path: Path, in_place: None
) -> None:
    """Written to the standard output (`/dev/stdout`, or `-` for every command), the output
    is the data alone: the command's closing line (`... -> /dev/stdout`) is not written into
    a record file piped on."""
    want = expected(command, work, tmp_path)
    done = subprocess.run(
        cli_command("", *WRITERS[command](work, Path(target))),
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == want
    assert not (ROOT / "-").exists()


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda p: (p.with_name("a").symlink_to("b"), p.with_name("b").symlink_to("a")),
            id="a symlink loop",
        ),
        pytest.param(lambda p: p.with_name("a").mkdir(), id="a folder"),
        pytest.param(
            lambda p: (p.with_name("d").mkdir(), p.with_name("a").symlink_to("d")),
            id="a symlink to a folder",
        ),
    ],
)
def test_what_cannot_be_written_is_refused_and_left_alone(
    work: dict[str, Path], tmp_path: Path, make: Callable[[Path], object]
) -> None:
    out = tmp_path / "a"
    make(out)
    before = out.lstat()
    done = run("record import", work, out)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"{out}: cannot write" in done.stderr
    assert out.lstat().st_mode == before.st_mode and out.lstat().st_ino == before.st_ino


def test_a_failed_write_to_a_device_raises_output_error_naming_it(in_place: None) -> None:
    if not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("no /dev/full here")
    with pytest.raises(OutputError, match=r"^/dev/full: cannot write: No space left on device$"):
        atomic_write("/dev/full", lambda f: f.write(b"x" * 100_000))
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_failed_fill_leaves_a_replaced_file_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "kept.txt"
    out.write_text("kept\n")
    link = tmp_path / "link.txt"
    link.symlink_to(out)

    def fail(f: object) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match=r"link\.txt: cannot write: No space left on device"):
        atomic_write(link, fail)
    assert out.read_text() == "kept\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "link.txt"]
