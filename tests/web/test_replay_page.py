"""`tapis record html` in a real browser: every record of tests/data/ (each game and
ruleset), stepped through with the page's own buttons and keys, shows every card in the
record's order, in the trick on the table and gone from its player's hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from records.codec import decode_record, read_envelopes
from referee.engine.actions import PLAY
from tests.commands import DATA, tapis
from tests.web.conftest import screenshot_dir

RECORDS = sorted(DATA.glob("*.tapis")) + sorted((DATA / "golden").glob("*.tapis"))

# Steps through one hand with the page's "card" button, noting after each step what the
# page shows: the position, the action just taken (its card, -1 for another action), the
# cards in the trick, and the actor's hand.
STEP_HAND = """(steps) => {
  const seen = [];
  for (let i = 0; i < steps; i++) {
    document.getElementById("next").click();
    const last = document.getElementById("last");
    const card = Number(last.getAttribute("data-card"));
    const ids = (root) => [...root.querySelectorAll("[data-card]")].map((e) => +e.dataset.card);
    const trick = ids(document.getElementById("trick"));
    const where = document.getElementById("where").textContent;
    const seats = [...document.querySelectorAll(".seat")].map(ids);
    seen.push({ card, trick, where, seats });
  }
  return seen;
}"""


def _expected(path: Path) -> list[list[tuple[int, int]]]:
    """Per record, per hand... flattened per record: (seat, action) in the record's order."""
    out = []
    for env in read_envelopes(path):
        rec = decode_record(env.record)
        out.append([list(zip(h.seats, h.actions, strict=True)) for h in rec.hands])
    return out  # type: ignore[return-value]


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_replay_page_shows_every_card_in_order(browser: Any, path: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.html"
    done = tapis("record", "html", path, "-o", out)
    assert done.returncode == 0, done.stderr
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    for r, hands in enumerate(_expected(path)):
        if r:
            page.select_option("#record-choice", str(r))
        assert page.locator("#verdict").inner_text().startswith("verified: valid")
        played: list[int] = []
        shown: list[int] = []
        for h, actions in enumerate(hands):
            if h:
                page.click("#next")  # from the hand's end to the next hand's deal
            assert page.locator("#where").inner_text().startswith(f"hand {h + 1}/{len(hands)}")
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
        # The keys step back and forth, the address opens a position.
        page.keyboard.press("Home")
        assert page.evaluate("location.hash") in ("#h1a0", f"#r{r + 1}h1a0")
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowDown")
        page.keyboard.press("ArrowLeft")
        assert "action" in page.locator("#where").inner_text()
    if len(_expected(path)) == 1:  # the address opens the last hand with actions, after one
        hands = _expected(path)[0]
        last = max(h for h, actions in enumerate(hands, 1) if actions)
        page.goto(out.as_uri() + f"#h{last}a1")
        page.reload()
        where = page.locator("#where").inner_text()
        assert where.startswith(f"hand {last}/{len(hands)}, action 1/")
    shots = screenshot_dir()
    if shots is not None and path.stem == "imperiale-academie-3p":
        page.goto(out.as_uri() + "#h1a6")
        page.reload()
        page.screenshot(path=str(shots / "replay.png"), full_page=True)
    page.close()
    assert not errors
    assert all(u.startswith("file:") for u in requests), requests  # nothing from the network
