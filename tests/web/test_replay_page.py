"""`tapis record html` in a real browser. Every record of tests/data/ (each game and
ruleset), in one page of many records, stepped through with the page's own button: every
card shows in the record's order, in the trick on the table and gone from its player's hand.
An annotated record's page: its comments, the keys, the address of a position, and nothing
fetched from anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tapis_cartes.records.codec import decode_record, read_envelopes, write_envelopes
from tapis_cartes.referee.engine.actions import PLAY
from tests.commands import DATA, tapis
from tests.web.conftest import screenshot_dir

RECORDS = sorted(DATA.glob("*.tapis")) + sorted((DATA / "golden").glob("*.tapis"))

# Steps through one hand with the page's "card" button, noting after each step what the
# page shows: the position, the card of the action just taken (-1 for another action), the
# cards in the trick and in each seat's hand.
STEP_HAND = """(steps) => {
  const seen = [];
  const ids = (root) => [...root.querySelectorAll("[data-card]")].map((e) => +e.dataset.card);
  for (let i = 0; i < steps; i++) {
    document.getElementById("next").click();
    const card = Number(document.getElementById("last").getAttribute("data-card"));
    const trick = ids(document.getElementById("trick"));
    const where = document.getElementById("where").textContent;
    const seats = [...document.querySelectorAll(".seat")].map(ids);
    seen.push({ card, trick, where, seats });
  }
  return seen;
}"""


def _hands(path: Path) -> list[list[list[tuple[int, int]]]]:
    """Per record of the file, per hand: (seat, action) in the record's order."""
    return [
        [list(zip(h.seats, h.actions, strict=True)) for h in decode_record(env.record).hands]
        for env in read_envelopes(path)
    ]


@pytest.fixture(scope="module")
def every_record(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    """One page of every record of tests/data/, and the records' hands."""
    tmp = tmp_path_factory.mktemp("every")
    envelopes = [env for path in RECORDS for env in read_envelopes(path)]
    write_envelopes(tmp / "all.tapis", envelopes)
    done = tapis("record", "html", tmp / "all.tapis")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{len(envelopes)} records -> {tmp / 'all.html'}"
    records = [h for path in RECORDS for h in _hands(path)]
    assert len(records) == len(RECORDS)  # one record a file: the page's record k is file k
    return tmp / "all.html", records


def _open(browser: Any, url: str) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    return page, errors, requests


@pytest.mark.parametrize("index", range(len(RECORDS)), ids=[p.stem for p in RECORDS])
def test_every_card_in_order(
    browser: Any, every_record: tuple[Path, list[Any]], index: int
) -> None:
    page_path, records = every_record
    hands = records[index]
    page, errors, requests = _open(browser, page_path.as_uri() + f"#r{index + 1}h1a0")
    assert page.locator("#verdict").inner_text().startswith("verified: valid")
    assert page.locator("#record-choice").input_value() == str(index)
    played: list[int] = []
    shown: list[int] = []
    for h, actions in enumerate(hands):
        if h:
            page.click("#next")  # from the hand's end to the next hand's deal
        where = page.locator("#where").inner_text()
        assert where.startswith(f"hand {h + 1}/{len(hands)}, action 0/")
        seen = page.evaluate(STEP_HAND, len(actions))
        for k, ((seat, action), now) in enumerate(zip(actions, seen, strict=True), 1):
            assert now["where"].startswith(f"hand {h + 1}/{len(hands)}, action {k}/")
            if action & 7 != PLAY:
                assert now["card"] == -1
                continue
            card = action >> 3
            played.append(card)
            shown.append(now["card"])
            assert now["trick"] and now["trick"][-1] == card, (h, k, now)
            assert card not in now["seats"][seat], (h, k)
    assert shown == played
    assert page.locator("#next").is_disabled()  # the match's end
    page.close()
    assert not errors
    assert all(u.startswith("file:") for u in requests), requests  # nothing from a network


def test_annotated_record_keys_and_address(browser: Any, tmp_path: Path) -> None:
    source = DATA / "golden" / "imperiale-academie-3p.tapis"
    annotated = tmp_path / "annotated.tapis"
    done = tapis("record", "annotate", source, "-o", annotated, "--comment", "1:6:no choice here")
    assert done.returncode == 0, done.stderr
    done = tapis("record", "html", annotated, "-o", "-")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "page.html"
    out.write_text(done.stdout, encoding="utf-8")
    (hands,) = _hands(annotated)
    page, errors, requests = _open(browser, out.as_uri() + "#h1a6")
    assert page.locator("#record-choice").is_hidden()  # one record: no choice
    last = page.locator("#last").inner_text()
    assert "(forced)" in last and "# no choice here" in last
    assert "# no choice here" in page.locator("#moves li.now").inner_text()
    shots = screenshot_dir()
    if shots is not None:
        page.screenshot(path=str(shots / "replay.png"), full_page=True)
    # The keys: a card, a trick, a hand; the address follows.
    page.keyboard.press("Home")
    assert page.evaluate("location.hash") == "#h1a0"
    page.keyboard.press("ArrowRight")
    assert page.evaluate("location.hash") == "#h1a1"
    page.keyboard.press("ArrowDown")  # to the end of the trick in progress
    players = len(page.locator(".seat").all())
    assert page.evaluate("location.hash") == f"#h1a{players}"
    assert "wins trick 1" in page.locator("#trick-note").inner_text()
    page.keyboard.press("ArrowUp")
    assert page.evaluate("location.hash") == "#h1a0"
    page.keyboard.press("PageDown")
    assert page.evaluate("location.hash") == "#h2a0"
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("location.hash") == f"#h1a{len(hands[0])}"
    page.keyboard.press("End")
    last_hand = len(hands)
    assert page.evaluate("location.hash") == f"#h{last_hand}a{len(hands[-1])}"
    # An address typed in opens its position.
    page.evaluate("location.hash = '#h2a3'")
    at = "(text) => document.getElementById('where').textContent.includes(text)"
    page.wait_for_function(at, arg="action 3/")
    assert page.locator("#where").inner_text().startswith(f"hand 2/{last_hand}, action 3/")
    page.close()
    assert not errors
    assert all(u.startswith("file:") for u in requests), requests


def test_a_comment_on_no_position_is_shown_apart(browser: Any, tmp_path: Path) -> None:
    """The envelope's annotations are anyone's to write: a comment on a position the record
    does not have is shown with the record (as text: markup in it stays text)."""
    (env,) = read_envelopes(DATA / "dame-de-pique-dp1.tapis")
    env.annotations.actions.add(hand=7, action=2, comments=["<b>on no action</b>"])
    path = tmp_path / "stray.tapis"
    write_envelopes(path, [env])
    done = tapis("record", "html", path, "-o", tmp_path / "stray.html")
    assert done.returncode == 0, done.stderr
    page, errors, _ = _open(browser, (tmp_path / "stray.html").as_uri())
    stray = page.locator("#about .stray")
    assert stray.inner_text() == (
        "comment on hand 7, action 2, a position this record does not have (annotations are"
        " unsigned): # <b>on no action</b>"
    )
    assert page.locator("#about b").count() == 0
    page.close()
    assert not errors


def test_a_record_that_does_not_replay_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "broken.tapis"
    broken.write_bytes((DATA / "napoleon-n1.tapis").read_bytes()[:-7])
    done = tapis("record", "html", broken, "-o", tmp_path / "x.html")
    assert done.returncode == 2 and str(broken) in done.stderr
    assert not (tmp_path / "x.html").exists()
