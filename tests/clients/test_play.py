"""`tapis play`: a person at a terminal against bots, run as a real subprocess with its input
scripted; and the reading of what a person types."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tapis_cartes.clients.play import parse_choice
from tapis_cartes.records.codec import read_envelopes, record_id
from tapis_cartes.records.verify import verify_envelope
from tapis_cartes.referee.engine.actions import (
    BID,
    PILLE,
    PILLE_STOP,
    PLAY,
    VOLE,
    encode,
    pass_action,
)
from tapis_cartes.referee.engine.cards import mask_of, parse_card
from tapis_cartes.v1 import referee_pb2 as pb
from tests.commands import cli_command

ROOT = Path(__file__).resolve().parents[2]


def play(*args: str, stdin: str, tmpdir: str = "/tmp") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapis_cartes.clients.cli", "play", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": tmpdir},
    )


def test_play_hearts_against_bots(tmp_path: Path) -> None:
    # First an illegal card (a card during the exchange), then always the first choice.
    saved = tmp_path / "match.tapis"
    r = play("--game", "hearts", "--option", "end_threshold=20", "--save", str(saved),
             stdin="QS\n" + "1\n" * 400)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert re.search(r"Refused \[DP\.[A-Z-]+\]: ", out), out[:2000]
    assert "-- Your turn: hand 1, pass --" in out
    assert re.search(r"^Trick 1: .* -> won by ", out, re.M)
    assert re.search(r"^  You: \+\d+ \w+ \[DP\.", out, re.M)  # score lines as they happen
    # The points taken in the hand so far, as the engine counts them, move during the hand.
    taken = re.findall(r"^This hand: points taken You \d+, .+ \d+, .+ \d+, .+ \d+$", out, re.M)
    assert taken and len(set(taken)) > 1, out[:3000]
    assert re.search(r"^Match over \(a total reached 20\)\. Winner: ", out, re.M)
    final = re.search(r"^Final scores: You (\d+) \| .+ \| .+ \| .+$", out, re.M)
    assert final, out[-2000:]
    kept = re.search(r"^Record: ([0-9a-f]{64}) -> (.+)$", out, re.M)
    assert kept and kept.group(2) == str(saved), out[-500:]
    envelopes = read_envelopes(saved)
    assert len(envelopes) == 1 and record_id(envelopes[0].record) == kept.group(1)
    assert verify_envelope(envelopes[0]).ok


def test_end_of_input_resigns() -> None:
    r = play("--game", "napoleon", "--bots", "random", "--seed", "1", stdin="")
    assert r.returncode == 0, r.stderr
    assert "End of input: you resign." in r.stdout
    # Facts for a person (seats by name, nothing of "-1" or "false"), no gRPC log line.
    assert "This hand: tricks won You 0, " in r.stdout and "declarer -1" not in r.stdout
    assert not re.search(r"^[IWE]\d{4} ", r.stdout + r.stderr, re.M), r.stderr
    assert re.search(r"^Match over \(seat 0 resigned\)", r.stdout, re.M), r.stdout
    assert re.search(r"^Record: [0-9a-f]{64} \(tapis play --save FILE keeps it\)$", r.stdout, re.M)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_record_that_cannot_be_saved_where_asked_is_kept_in_the_temporary_folder(
    tmp_path: Path,
) -> None:
    """`--save /dev/full` passed the check made before the match (a device), and the write at
    its end failed: the record of the match played went with the private referee's folder."""
    r = play("--game", "napoleon", "--bots", "random", "--seed", "1", "--save", "/dev/full",
             stdin="", tmpdir=str(tmp_path))  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    said = re.search(
        r"^tapis play: /dev/full: cannot write: .*; the record is kept in (\S+)$", r.stderr
    )
    assert said, r.stderr
    kept = Path(said.group(1))
    assert kept.parent == tmp_path and kept.name.startswith("tapis-play-")
    envelopes = read_envelopes(kept)
    assert len(envelopes) == 1 and verify_envelope(envelopes[0]).ok
    assert [p.name for p in tmp_path.iterdir()] == [kept.name]  # (the referee's folder gone)


def _choices(*actions: int) -> list[pb.ActionChoice]:
    return [pb.ActionChoice(action=a, text=str(a)) for a in actions]


def test_parse_choice() -> None:
    qs, two_c = parse_card("QS"), parse_card("2C")
    legal = [
        pb.ActionChoice(action=encode(PLAY, two_c), text="play 2C"),
        pb.ActionChoice(action=encode(PLAY, qs), text="play QS"),
    ]
    assert parse_choice("2", legal) == encode(PLAY, qs)
    for typed in ("\u00b2", "9" * 4301, "3"):  # a superscript two, Python's digits limit
        with pytest.raises(ValueError, match=r"^choose a number from 1 to 2$"):
            parse_choice(typed, legal)
    assert parse_choice("Play qs", legal) == encode(PLAY, qs)
    assert parse_choice("QS", legal) == encode(PLAY, qs)
    assert parse_choice("KH", legal) == encode(PLAY, parse_card("KH"))  # the referee refuses it
    # A person's card, typed as it comes (the transcripts take the contract's forms only).
    assert parse_choice("kh", legal) == parse_choice("K♡", legal) == encode(PLAY, parse_card("KH"))
    assert parse_choice("pass qs as k♥️", []) == parse_choice("pass QS AS KH", [])
    three = mask_of(parse_card(c) for c in ("QS", "AS", "KH"))
    assert parse_choice("pass QS AS KH", []) == pass_action(three)
    assert parse_choice("QS KH AS", []) == pass_action(three)
    bids = _choices(*(encode(BID, b) for b in range(6)))
    assert parse_choice("nap", bids) == encode(BID, 5)
    assert parse_choice("bid misere", bids) == encode(BID, 3)
    assert parse_choice("pass", bids) == encode(BID, 0)
    assert parse_choice("stop", _choices(encode(VOLE, 0), encode(VOLE, 1))) == encode(VOLE, 0)
    pille = _choices(encode(PILLE, qs), encode(PILLE, PILLE_STOP))
    assert parse_choice("stop", pille) == encode(PILLE, PILLE_STOP)
    assert parse_choice("QS", pille) == encode(PILLE, qs)
    for bad in ("", "9", "0", "XX", "play QS KH"):
        with pytest.raises(ValueError):
            parse_choice(bad, legal)


def test_a_seat_the_table_does_not_have_is_said_by_its_number() -> None:
    """A fact naming a seat past the table's, or -1 where a list of seats is expected, is
    shown as that seat's number: never as another player's name (Python's names[-1]), never
    an IndexError that ends `tapis play`."""
    import io

    from tapis_cartes.clients.play import Screen

    screen = Screen(io.StringIO(), ["Ann", "Bob", "Cat"], me=1, units=["points"])
    bound = pb.TypedFact(key="bound")
    bound.numbers.values.extend([0, -1, 1, 7])
    assert screen.fact(bound) == "Bound: Ann, seat -1, You, seat 7"
    declarer = pb.TypedFact(key="declarer", number=3)
    assert screen.fact(declarer) == "Declarer: seat 3"
    assert screen.fact(pb.TypedFact(key="declarer", number=-1)) is None  # none yet
    pairs = pb.TypedFact(key="teams")
    pairs.groups.groups.add(values=[2, 9])
    assert screen.fact(pairs) == "Teams: Cat + seat 9"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_sigterm_or_a_hangup_at_the_prompt_resigns_and_leaves_nothing(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Started with Ctrl-C ignored (in the background, as a shell starts it), `tapis play`
    died of a SIGTERM or of its terminal closing (SIGHUP), status -15, leaving the private
    referee's folder (its store and signing key) in the temporary folder."""
    ignored = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    proc = subprocess.Popen(
        cli_command(ignored, "play", "--game", "hearts", "--bots", "random"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        seen = ""
        while "-- Your turn" not in seen:  # at the prompt (its input held open)
            line = proc.stdout.readline()
            assert line, "the command ended before its prompt"
            seen += line
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Interrupted: you resign." in out and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # the private referee's folder removed


def test_a_line_read_from_a_pipe_is_shown_escaped_and_short() -> None:
    """With its input not a terminal, `tapis play` shows each line read as typed: an escape in
    it reached the terminal, and a 50 MB line was shown whole."""
    r = play("--bots", "random", stdin="\x1b[2Jhello\n" + "x" * 5000 + "\n")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "> \\u001b[2Jhello" in r.stdout
    assert "> " + "x" * 200 + " ...\n" in r.stdout and "x" * 201 not in r.stdout
