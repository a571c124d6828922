"""The library (records/library.py, docs/python.md): records read one at a time, their plays by
seat with tricks and winners from the engine's replay, verify, score and rescore, and a match
played in process; the catalogue as typed values."""

from __future__ import annotations

import io
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.clients import play_match
from tapis_cartes.records import (
    Record,
    RecordError,
    RecordFileError,
    read_records,
    write_records,
)
from tapis_cartes.records.codec import (
    MAGIC,
    canonical_bytes,
    encode_varint,
    write_envelopes,
    write_frames,
)
from tapis_cartes.records.research import play_rows
from tapis_cartes.referee.catalog import games, games_catalog
from tapis_cartes.referee.engine import RulesError, make_rules
from tapis_cartes.v1 import record_pb2 as pb

PLAYED_AT = "2026-01-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def played() -> list[Record]:
    return [
        play_match("hearts", seed="lib-1", options={"end_threshold": 30}, played_at=PLAYED_AT),
        play_match("nap", bots="random", seed="lib-2", played_at=PLAYED_AT),
        play_match("triomphe", ruleset="equipe", bots="random", seed="lib-3", played_at=PLAYED_AT),
        play_match("imperiale", seed="lib-4", played_at=PLAYED_AT),
    ]


def test_a_match_played_in_process_is_a_valid_record_the_same_from_its_seed(
    played: list[Record],
) -> None:
    for record in played:
        assert record.verify().ok, record.verify().error
        assert record.outcome.finished and record.outcome.winners
        assert record.played_at == PLAYED_AT
    again = play_match("hearts", seed="lib-1", options={"end_threshold": 30}, played_at=PLAYED_AT)
    assert again.envelope == played[0].envelope
    other = play_match("hearts", seed="lib-9", options={"end_threshold": 30}, played_at=PLAYED_AT)
    assert other.id != played[0].id


def test_plays_by_seat_tricks_and_winners_follow_the_replay(played: list[Record]) -> None:
    for record in played:
        rows = list(play_rows(record.id, record.message))
        plays = [p for hand in record.hands for p in hand.plays]
        assert len(plays) == len(rows) == sum(len(h.actions) for h in record.message.hands)
        for play, row in zip(plays, rows, strict=True):
            assert (play.index, play.seat, play.player, play.text, play.card, play.trick) == (
                row[2:8]
            )
            assert play.winner == row[8]
            assert play.player == record.players[play.seat]
            winner = None if play.winner is None else record.players[play.winner]
            assert play.winner_player == winner
        for hand, message in zip(record.hands, record.message.hands, strict=True):
            assert [p.seat for p in hand.plays] == list(message.seats)
            for i, trick in enumerate(hand.tricks, 1):
                # one winner per trick, who played a card to it; none for a trick left
                # unfinished, the hand's last (a Triomphe hand abandoned in mid-trick)
                assert len({p.winner for p in trick}) == 1
                if trick[0].winner is None:
                    assert i == len(hand.tricks) and len(trick) < len(record.players)
                else:
                    assert trick[0].winner in {p.seat for p in trick}
            assert len(hand.lines) == len(message.lines)
            assert [line.rule for line in hand.lines] == [line.rule for line in message.lines]
            assert all(line.rule for line in hand.lines)
        last = record.hands[-1].scores
        assert last == record.outcome.scores


def test_a_hearts_hand_has_thirteen_tricks_of_four_cards(played: list[Record]) -> None:
    hand = played[0].hands[0]
    assert [len(t) for t in hand.tricks] == [4] * 13
    assert [t[0].trick for t in hand.tricks] == list(range(1, 14))
    dealt = {c for cards in hand.cards for c in cards.split()}
    assert {p.card for p in hand.plays if p.card} == dealt


def test_records_are_read_one_at_a_time(tmp_path: Path, played: list[Record]) -> None:
    path = tmp_path / "some.tapis"
    assert write_records(path, played * 50) == 200
    size = path.stat().st_size
    with path.open("rb") as f:
        records = read_records(f)
        first = next(records)
        assert first.id == played[0].id
        assert f.tell() < size / 100  # read only as far as the first record
        assert [r.id for r in records] == [r.id for r in (played * 50)[1:]]
        assert f.tell() == size
    assert [r.id for r in read_records(path)] == [r.id for r in played * 50]


def test_records_from_a_file_object_and_a_pipe(tmp_path: Path, played: list[Record]) -> None:
    path = tmp_path / "some.tapis"
    write_records(path, played)
    data = path.read_bytes()
    assert [r.id for r in read_records(io.BytesIO(data))] == [r.id for r in played]
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as w:
            w.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    with os.fdopen(read_end, "rb") as r:
        assert [rec.id for rec in read_records(r)] == [rec.id for rec in played]
    writer.join()


def test_a_damaged_file_gives_its_records_before_the_damage(
    tmp_path: Path, played: list[Record]
) -> None:
    path = tmp_path / "cut.tapis"
    write_records(path, played)
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    got = []
    with pytest.raises(RecordFileError) as caught:
        for record in read_records(path):
            got.append(record.id)
    assert caught.value.code == "truncated"
    assert got == [r.id for r in played[:-1]]
    for source in (io.BytesIO(data[:-10]), _Unseekable(data[:-10])):
        with pytest.raises(RecordFileError, match="record 4"):
            list(read_records(source))  # type: ignore[arg-type]
    (tmp_path / "not.tapis").write_bytes(b"hello")
    with pytest.raises(RecordFileError) as caught:
        list(read_records(tmp_path / "not.tapis"))
    assert caught.value.code == "not-a-record-file"
    with pytest.raises(RecordFileError) as caught:
        list(read_records(tmp_path / "missing.tapis"))
    assert caught.value.code == "unreadable"


class _Unseekable:
    """A stream that cannot tell its size (as a pipe)."""

    def __init__(self, data: bytes) -> None:
        self._f = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._f.read(n)


def test_a_record_that_does_not_decode_is_a_record_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.tapis"
    write_envelopes(path, [pb.RecordEnvelope(record=b"\xff\xff")])
    with pytest.raises(RecordError, match="record 1") as caught:
        next(read_records(path))
    assert caught.value.code == "decode"
    assert path.read_bytes().startswith(MAGIC)


def test_verify_reports_a_tampered_record(played: list[Record]) -> None:
    rec = pb.GameRecord()
    rec.CopyFrom(played[0].message)
    rec.hands[0].lines[0].rule = "DP.MOON"
    tampered = Record.from_envelope(pb.RecordEnvelope(record=rec.SerializeToString()))
    result = tampered.verify()
    assert not result.ok
    assert result.error is not None and result.error.hand == 1
    assert played[0].verify().ok


def test_score_and_rescore(played: list[Record]) -> None:
    record = played[0]
    sheet = record.score_sheet()
    assert all(name in sheet for name in record.players)
    assert record.score_json()["winners"] == list(record.outcome.winners)
    same = record.rescore()
    assert same.status == "ok" and same.new_scores == same.old_scores and not same.first_diff
    longer = record.rescore(end_threshold=1000)
    assert longer.status == "ok" and longer.new_finished is False
    refused = record.rescore({"end_threshold": 0})
    assert refused.status == "not-replayable" and refused.rule == "option:end_threshold"
    assert "Hand 1" in record.show()


def test_games_are_the_catalogue_as_values() -> None:
    catalogue = games_catalog()
    assert [g.name for g in games()] == [g.name for g in catalogue.games]
    for game, info in zip(games(), catalogue.games, strict=True):
        for ruleset in game.rulesets:
            for n in ruleset.players:
                make_rules(game.name, ruleset.name, {}, n)
            for option in ruleset.options:
                if option.type == "int":
                    assert option.min is not None and option.max is not None
                    assert isinstance(option.default, int)
                    assert option.min <= option.default <= option.max
                elif option.type == "enum":
                    assert option.default in option.allowed
        assert game.units == tuple(info.units)


def test_verify_checks_the_envelope_as_the_file_stores_it(
    tmp_path: Path, played: list[Record]
) -> None:
    path = tmp_path / "odd.tapis"
    # The record's envelope with a field this Tapis does not know, as a file might hold it.
    write_frames(path, [played[0].frame + b"\xf8\x07\x01"])
    (record,) = read_records(path)
    assert record.id == played[0].id
    result = record.verify()
    assert not result.ok and result.error is not None
    assert result.error.code == "envelope-unknown-field"
    assert str(result.error).endswith(": field 127 (not in RecordEnvelope)")
    copy = tmp_path / "copy.tapis"
    write_records(copy, [record])  # as it was read
    assert copy.read_bytes() == path.read_bytes()
    # The envelope's signature written twice (the second one counts): not as Tapis writes it,
    # and the message says where.
    env = pb.RecordEnvelope.FromString(played[0].frame)
    twice = played[0].frame + b"\x12" + encode_varint(len(env.signature)) + env.signature
    write_frames(path, [twice])
    (again,) = read_records(path)
    result = again.verify()
    assert result.error is not None and result.error.code == "envelope-noncanonical"
    assert f"it differs at byte {len(played[0].frame):,}, in signature" in str(result.error)


@pytest.mark.parametrize(
    ("given", "code"),
    [
        ({"names": ["Ann", "", "Cy", "Di"]}, "seat-name"),
        ({"names": ["Ann\x1b[2J", "Bob", "Cy", "Di"]}, "seat-name"),
        ({"names": ["n" * 65, "Bob", "Cy", "Di"]}, "text-length"),
        ({"played_at": "yesterday"}, "provenance"),
    ],
)
def test_a_match_is_not_played_for_names_or_a_date_no_record_may_hold(
    given: dict[str, Any], code: str
) -> None:
    """The library made records its own verify then refused (an empty name, a control
    character, a date that is no date-time); with no names it failed with ZeroDivisionError
    (now a RulesError: `test_play_match_says_what_is_wrong_with_what_it_is_given`)."""
    with pytest.raises(RecordError) as caught:
        play_match("hearts", seed="lib-names", **given)
    assert caught.value.code == code


def test_a_record_reads_its_own_bytes_whatever_its_messages_become(tmp_path: Path) -> None:
    """`message` is a protobuf message a caller may change: `score_sheet` then printed the
    change while `players` and `verify` did not."""
    from tapis_cartes.records.signing import load_or_create_private_key, sign

    record = play_match("hearts", seed="lib-own", options={"end_threshold": 30})
    sheet, shown = record.score_sheet(), record.show()
    fresh = record.envelope.record
    record.message.seats[0].name = "Mallory"
    record.envelope.Clear()
    assert (record.score_sheet(), record.show()) == (sheet, shown)
    assert "Mallory" not in sheet and record.verify().ok

    key = load_or_create_private_key(tmp_path / "k.key")  # a private key, as the CLI's --key
    path = tmp_path / "signed.tapis"
    write_envelopes(path, [sign(fresh, key)])
    (signed,) = read_records(path)
    assert signed.verify(keys=[key]).ok
    for keys in ("abc", None, [b"raw"]):
        with pytest.raises(TypeError, match="public key"):
            signed.verify(keys=keys)  # type: ignore[arg-type]
    with pytest.raises(RulesError, match=r"'moon_mode': .* is no option value"):
        record.rescore(moon_mode={"a": 1})  # type: ignore[arg-type]


def test_play_match_says_what_is_wrong_with_what_it_is_given() -> None:
    """Eight Napoléon seats were named with the seven default names, the first twice; a seed
    that is not text, a bot kind or game unknown, were errors from deep inside (or none)."""
    from tapis_cartes.clients import make_bot

    eight = play_match("nap", options={"players": 8}, bots="random", seed="lib-8")
    assert len(set(eight.players)) == 8 and eight.verify().ok
    for given, said in [
        ({"seed": 5}, "seed is 5 (int), not text"),
        ({"names": ["Ann", "Bob"]}, "2 names for 4 seats"),
        ({"names": ["A", "B", "C", "D", "E"]}, "5 names for 4 seats"),  # the fifth was dropped
        ({"bots": ["random"] * 5}, "played by exactly 4 players; 5 are named"),
        ({"bots": ["genius"] * 4}, "unknown bot kind 'genius'"),
        ({"bots": [make_bot("heuristic", "nap")] * 4}, "bots[0] plays 'napoleon', not"),
    ]:
        with pytest.raises(RulesError, match=re.escape(said)):
            play_match("hearts", **given)
    with pytest.raises(RulesError, match="unknown game 'bridge'"):
        make_bot("random", "bridge")
    with pytest.raises(RulesError, match="4 names for 5 seats"):  # the first was used again
        play_match("nap", bots=["random"] * 5, names=["a", "b", "c", "d"])
    for more, said in [  # each was taken, and the bot played by other rules
        ({"ruleset": "nosuch"}, "unknown ruleset 'nosuch'"),
        ({"options": {"moon_mod": 1}}, "unknown option 'moon_mod'"),
        ({"options": "x"}, "options is 'x', not a mapping"),
        ({"seed": "abc"}, "seed is 'abc' (str), not an int"),
        ({"seed": 1.5}, "seed is 1.5 (float), not an int"),
    ]:
        with pytest.raises(RulesError, match=re.escape(said)):
            make_bot("heuristic", "hearts", **more)


def test_a_record_whose_content_does_not_verify_gives_no_score() -> None:
    """`score_sheet`, `score_json` and `rescore` took the record's scores as they came: a
    final score raised by 100 printed "total 113" and rescored "ok", where `tapis record
    score` refuses the file; a score line of a seat out of range was an IndexError from
    `hands`."""
    played = play_match("hearts", options={"end_threshold": 26}, bots="random", seed="lib-bad")
    rec = pb.GameRecord.FromString(pb.RecordEnvelope.FromString(played.frame).record)
    raised = pb.GameRecord()
    raised.CopyFrom(rec)
    raised.outcome.scores[0].points += 100
    stray = pb.GameRecord()
    stray.CopyFrom(rec)
    stray.hands[0].lines[0].seat = 9
    for changed in (raised, stray):
        bad = Record.from_envelope(pb.RecordEnvelope(record=canonical_bytes(changed)))
        error = bad.verify().error
        assert error is not None
        calls = [bad.score_sheet, bad.score_json, bad.rescore, bad.show, lambda r=bad: r.hands]
        for call in calls:
            with pytest.raises(RecordError) as exc:
                call()
            assert exc.value.code == error.code, (call, exc.value)
    assert Record.from_envelope(pb.RecordEnvelope(record=canonical_bytes(rec))).score_sheet()


def test_a_fifo_and_a_pipe_giving_short_reads_are_read_to_their_end(
    tmp_path: Path, played: list[Record]
) -> None:
    """A FIFO's path gave no record (its size, 0, was taken as the file's), and a pipe read
    unbuffered (a `Popen(bufsize=0).stdout`), whose reads may give fewer bytes than asked,
    was "not a Tapis record file", named by its descriptor's number."""
    path = tmp_path / "some.tapis"
    write_records(path, played)
    data = path.read_bytes()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed(target: Any, chunk: int) -> None:
        with open(target, "wb", buffering=0) as w:
            for i in range(0, len(data), chunk):
                w.write(data[i : i + chunk])
                time.sleep(0.001)  # the reader finds fewer bytes than it asks for

    writer = threading.Thread(target=feed, args=(fifo, 4096))
    writer.start()
    assert [r.id for r in read_records(fifo)] == [r.id for r in played]
    writer.join()
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=feed, args=(write_end, 3))
    writer.start()
    with os.fdopen(read_end, "rb", buffering=0) as raw:
        assert [r.id for r in read_records(raw)] == [r.id for r in played]
    writer.join()
    read_end, write_end = os.pipe()
    os.write(write_end, b"not a record file")
    os.close(write_end)
    with (
        os.fdopen(read_end, "rb", buffering=0) as raw,
        pytest.raises(RecordFileError, match=r"^input is not a Tapis record file"),
    ):
        list(read_records(raw))
    with path.open("r") as text, pytest.raises(TypeError, match="nor a binary file"):
        list(read_records(text))  # type: ignore[arg-type]


def test_a_record_is_made_of_its_own_envelope_and_bytes(played: list[Record]) -> None:
    """`from_envelope(env, frame)` took any bytes for `frame`: a record that said Napoléon
    verified and was written as the Dame de Pique record whose bytes it was given."""
    hearts, nap = played[0], played[1]
    again = Record.from_envelope(nap.envelope, nap.frame)
    assert again.id == nap.id and again.frame == nap.frame
    with pytest.raises(ValueError, match="frame is not the bytes of this envelope"):
        Record.from_envelope(nap.envelope, hearts.frame)
    with pytest.raises(ValueError, match="frame is not the bytes of this envelope"):
        Record.from_envelope(nap.envelope, b"junk")
    with pytest.raises(TypeError, match="frame is str, not bytes"):
        Record.from_envelope(nap.envelope, "junk")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="is no RecordEnvelope"):
        Record.from_envelope(nap.message)  # type: ignore[arg-type]


def test_records_pickle_copy_and_keep_their_options(tmp_path: Path, played: list[Record]) -> None:
    """A record once read (its hands, its score sheet) could not be pickled, so not sent to a
    process pool, nor deep-copied; its options were a dict any holder could change, and so
    was the catalogue every caller (and an in-process referee's ListGames) shares."""
    import copy
    import pickle
    from concurrent.futures import ProcessPoolExecutor

    record = played[1]
    assert record.hands and record.score_sheet()  # read, its replay kept
    for again in (pickle.loads(pickle.dumps(record)), copy.deepcopy(record)):
        assert again.id == record.id and again.options == record.options
        assert again.hands == record.hands and again.verify().ok
    with ProcessPoolExecutor(1) as pool:
        assert pool.submit(_record_id, record).result() == record.id
    with pytest.raises(TypeError):
        record.options["players"] = 5  # type: ignore[index]
    catalogue = games_catalog()
    catalogue.games[0].name = "changed"
    assert games_catalog().games[0].name != "changed"


def _record_id(record: Record) -> str:
    return record.id
