"""Hostile transcripts at the command line: a key given twice in one object is refused at its
place, and a big transcript costs memory near the size of its JSON, wherever its bulk is."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tapis_cartes.records.transcript import MAX_BRACKETS, import_transcript, load_transcript
from tapis_cartes.referee.engine import TranscriptError
from tests.commands import DATA, tapis

# The child prints its peak resident size (KiB) as it exits.
PEAK = (
    "import atexit, resource, sys\n"
    "atexit.register(lambda: print('peak-kb', resource.getrusage(resource.RUSAGE_SELF)"
    ".ru_maxrss, file=sys.stderr))"
)


def n1_text() -> str:
    """napoleon-n1.json on one line, as `json.dumps` writes it."""
    return json.dumps(json.loads((DATA / "napoleon-n1.json").read_text()))


def fifth_action(doc_text: str) -> str:
    """The fifth action of hand 1 (a card played), as JSON."""
    doc = json.loads(doc_text)
    entry = doc["hands"][0]["actions"][4]
    assert set(entry) == {"seat", "play"}, entry
    return json.dumps(entry)


DUPLICATES = [
    ("the game", '"game": ', '"game": "dame-de-pique", "game": ',
     "transcript: duplicate key 'game'"),
    ("the players", '"players": ', '"players": ["W", "X", "Y", "Z"], "players": ',
     "transcript: duplicate key 'players'"),
    ("the format, last", '"format": "tapis-transcript/1"',
     '"format": "tapis-transcript/1", "format": "tapis-transcript/1"',
     "transcript: duplicate key 'format'"),
    ("an option", '"players": ', '"options": {"deals": 4, "deals": 8}, "players": ',
     "options: duplicate key 'deals'"),
    ("a dealer", '"dealer": ', '"dealer": 0, "dealer": ', "hands[0]: duplicate key 'dealer'"),
    ("a deal's hands", '"deal": {"hands": ', '"deal": {"hands": [], "hands": ',
     "hands[0].deal: duplicate key 'hands'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "old", "new", "message"), DUPLICATES, ids=[d[0] for d in DUPLICATES]
)
def test_a_key_given_twice_is_refused_at_its_place(
    name: str, old: str, new: str, message: str, tmp_path: Path
) -> None:
    """JSON lets the last of two equal keys win; a transcript may not hold them at all."""
    text = n1_text()
    assert text.count(old) == 1, name
    path = tmp_path / "t.json"
    path.write_text(text.replace(old, new))
    out = tmp_path / "out.tapis"
    done = tapis("record", "import", path, "-o", out)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == f"{path}: {message}", done.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ('{"seat": 0, "seat": 1, "play": "%s"}', "seat"),
        ('{"seat": 1, "play": "AC", "play": "%s"}', "play"),
    ],
    ids=["seat", "play"],
)
def test_an_action_key_given_twice_names_the_action(entry: str, key: str, tmp_path: Path) -> None:
    text = n1_text()
    play = fifth_action(text)
    card = json.loads(play)["play"]
    path = tmp_path / "t.json"
    path.write_text(text.replace(play, entry % card, 1))
    with pytest.raises(TranscriptError) as exc:
        import_transcript(load_transcript(path))
    assert str(exc.value) == f"hands[0].actions[4]: duplicate key '{key}'"


def test_a_key_given_twice_in_a_start_score(tmp_path: Path) -> None:
    doc = json.loads(n1_text())
    doc["start"] = {"scores": [{"points": 1}] * 4}
    text = json.dumps(doc).replace('{"points": 1}', '{"points": 1, "points": 2}', 2)
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(TranscriptError) as exc:
        import_transcript(load_transcript(path))
    assert str(exc.value) == "start.scores[0]: duplicate key 'points'"


def test_the_walk_names_the_place_of_a_fault_deep_in_a_long_list(tmp_path: Path) -> None:
    """The path of an offending value is exact, however far into a list it is."""
    doc = json.loads(n1_text())
    doc["hands"][0]["deal"]["talon"] = [1] * 1000 + [2**70]
    doc["hands"][0]["actions"][2]["play"] = "x" * 300
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TranscriptError) as exc:
        import_transcript(load_transcript(path))
    assert (
        str(exc.value) == "hands[0].deal.talon[1000]: 1180591620717411303424 does not fit 64 bits"
    )
    doc["hands"][0]["deal"]["talon"] = []
    path.write_text(json.dumps(doc))
    with pytest.raises(TranscriptError) as exc:
        import_transcript(load_transcript(path))
    assert str(exc.value) == "hands[0].actions[2].play: a text of 300 characters (at most 256)"


def peak_kb(path: Path, tmp_path: Path) -> tuple[int, str]:
    """`tapis record import PATH`: the child's peak resident size (KiB) and what it says."""
    done = tapis("record", "import", path, "-o", tmp_path / "out.tapis", setup=PEAK)
    *lines, last = done.stderr.splitlines()
    assert last.startswith("peak-kb "), done.stderr
    return int(last.split()[1]), done.stdout + "\n".join(lines)


# small integers, just under the commas a transcript may hold (`MAX_COMMAS`, 2,000,000):
# 3.8 MB of JSON, a list of 15 MB once read
BIG = 1_900_000
BULK = [
    ("an unknown key", lambda t: t[:-1] + ', "hands2": [0' + ",1" * BIG + "]}",
     "transcript: unknown key 'hands2'"),
    ("a long talon", lambda t: t.replace('"deal": {"hands": ', '"deal": {"talon": ['
     + "1," * BIG + f'{2**70}], "hands": ', 1), f"hands[0].deal.talon[{BIG}]: "),
    ("many actions", lambda t: t.replace('"actions": [', '"actions": ['
     + '{"seat": 0, "play": "2C"}, ' * (BIG // 10) + '{"seat": 0, "seat": 1}, ', 1),
     f"hands[0].actions[{BIG // 10}]: duplicate key 'seat'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "message"), BULK, ids=[b[0] for b in BULK])
def test_memory_stays_near_the_size_of_the_json(
    name: str, make: Callable[[str], str], message: str, tmp_path: Path
) -> None:
    """A transcript well under `MAX_TRANSCRIPT` whose bulk is a long list: refused at its place
    without a copy of the list's paths (the walk once made a text and a tuple per element:
    here some 400 MB more)."""
    small = tmp_path / "small.json"
    small.write_text(n1_text())
    base, text = peak_kb(small, tmp_path)
    assert "imported" in text, text
    path = tmp_path / "big.json"
    path.write_text(make(n1_text()))
    assert path.stat().st_size > 3_500_000
    peak, text = peak_kb(path, tmp_path)
    assert text.startswith(f"{path}: {message}"), text
    assert "Traceback" not in text
    assert peak - base < 150_000, (peak, base)  # KiB


def test_a_file_of_millions_of_brackets_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """Millions of tiny lists (8 MB of `[]`) are no transcript: refused by their count before
    the JSON is read (read and walked, ten million took 18 s and 800 MB), with the count said;
    a transcript of a long match (300,000 actions) stays well within `MAX_BRACKETS`."""
    small = tmp_path / "small.json"
    small.write_text(n1_text())
    base, _ = peak_kb(small, tmp_path)
    path = tmp_path / "tiny-lists.json"
    path.write_text(n1_text().replace('"hands": [', '"hands": [' + "[], " * 2_000_000, 1))
    peak, text = peak_kb(path, tmp_path)
    assert text.startswith(f"{path}: 2,000,0"), text
    assert f"brackets ('[' and '{{'), more than {MAX_BRACKETS:,}: not a transcript" in text, text
    assert peak - base < 60_000, (peak, base)  # KiB: the file's text, no list read from it
    long_match = BULK[2][1](n1_text())
    assert long_match.count("[") + long_match.count("{") < MAX_BRACKETS // 3


def test_a_byte_order_mark_is_no_part_of_the_transcript(tmp_path: Path) -> None:
    """A transcript saved with a UTF-8 byte order mark (as some editors save) gives the same
    record as without; a bad byte after it is placed in the file as it is."""
    plain, marked = tmp_path / "plain" / "n1.json", tmp_path / "marked" / "n1.json"
    for path, head in ((plain, b""), (marked, b"\xef\xbb\xbf")):
        path.parent.mkdir()
        path.write_bytes(head + n1_text().encode("utf-8"))
    assert import_transcript(load_transcript(marked), "n1.json") == import_transcript(
        load_transcript(plain), "n1.json"
    )
    marked.write_bytes(b"\xef\xbb\xbf{\xff}")
    with pytest.raises(TranscriptError, match=r"not UTF-8 text \(invalid start byte at byte 4\)"):
        load_transcript(marked)
