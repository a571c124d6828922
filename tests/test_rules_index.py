"""Rule ids resolve (referee/rules_index.py, docs/rules/, `tapis rules`): every id the engine
names or cites at run time is registered, explained on its page and applied by an engine
function; `tapis rules` prints all that, and refuses an unknown id with exit status 2."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tapis_cartes.referee.engine import GAMES, Match, make_rules, new_match
from tapis_cartes.referee.engine.actions import ABANDON, BID, PILLE, PILLE_STOP, PLAY, VOLE, encode
from tapis_cartes.referee.engine.cards import iter_cards
from tapis_cartes.referee.engine.errors import IllegalAction, RulesError
from tapis_cartes.referee.rules_index import (
    PAGES,
    RULES,
    Rule,
    Site,
    closest_ids,
    engine_sites,
    find_rule,
    ids_in_engine,
    scan_module,
)

ROOT = Path(__file__).resolve().parents[1]
REGISTERED = {rule.id for rule in RULES}


def page_text(page_key: str) -> str:
    return (ROOT / PAGES[page_key].path).read_text(encoding="utf-8")


def section(text: str, anchor: str) -> str:
    """The text of a page from `anchor` to the next anchor."""
    start = text.index(f'<a id="{anchor}"></a>')
    end = text.find("<a id=", start + 1)
    return text[start : end if end >= 0 else len(text)]


# --- the registry against the engine's source ------------------------------------------------


def test_every_id_the_engine_names_is_registered() -> None:
    named = ids_in_engine()
    assert named, "the scan found no rule id in the engine"
    assert sorted(named - REGISTERED) == []


def test_every_registered_id_is_applied_by_an_engine_function() -> None:
    missing = [rule.id for rule in RULES if not engine_sites(rule.id)]
    assert missing == []
    for rule in RULES:
        for site in engine_sites(rule.id):
            assert site.module.startswith("tapis_cartes.referee.engine."), site
            path = ROOT / (site.module.removeprefix("tapis_cartes.").replace(".", "/") + ".py")
            line = path.read_text(encoding="utf-8").splitlines()[site.line - 1]
            name = site.qualname.rsplit(".", 1)[-1]
            assert re.match(rf"\s*(async\s+)?def {re.escape(name)}\b", line), (site, line)


def test_the_scan_finds_literals_comments_and_tables(tmp_path: Path) -> None:
    """An id in a refusal, a comment or a table is found, and credited to the functions that
    apply it; an id only in text (a docstring of the module) is found but credited to none."""
    source = '''"""A module citing ZZ.TEXT only in prose."""
_TABLE = {"a": "ZZ.TABLE"}


class Settings:
    rule_id: str  # ZZ.FIELD


def settings_of() -> Settings:
    return Settings(rule_id="ZZ.KEYWORD")


class Hand:
    def refuse(self) -> None:
        raise self.illegal("code", "ZZ.REFUSE")

    def score(self, cfg: Settings) -> None:
        # ZZ.COMMENT: a comment where the rule is applied
        self.line(cfg.rule_id, _TABLE["a"])
'''
    path = tmp_path / "game.py"
    path.write_text(source, encoding="utf-8")
    found: dict[str, set[str]] = {}
    for rule_id, site in scan_module(path, "tapis_cartes.referee.engine.game"):
        found.setdefault(rule_id, set())
        if site is not None:
            assert isinstance(site, Site) and site.module == "tapis_cartes.referee.engine.game"
            found[rule_id].add(site.qualname)
    assert found == {
        "ZZ.TEXT": set(),
        "ZZ.TABLE": {"Hand.score"},
        "ZZ.FIELD": {"Hand.score"},
        "ZZ.KEYWORD": {"settings_of", "Hand.score"},
        "ZZ.REFUSE": {"Hand.refuse"},
        "ZZ.COMMENT": {"Hand.score"},
    }
    # None of them is registered: had the engine named one, the first test would fail.
    assert not set(found) & REGISTERED


def test_an_id_a_game_sets_on_an_attribute_leads_to_the_base_that_applies_it() -> None:
    # Dame de Pique sets `play_rule = "DP.FOLLOW"`; the base's card play refuses with it. The
    # other games' readers of their own `play_rule` are not credited with it.
    sites = {f"{s.module}:{s.qualname}" for s in engine_sites("DP.FOLLOW")}
    assert "tapis_cartes.referee.engine.base:Hand._play_refusal" in sites
    assert "tapis_cartes.referee.engine.dame_de_pique:DamePiqueHand.__init__" in sites
    others = (
        "tapis_cartes.referee.engine.imperiale",
        "tapis_cartes.referee.engine.triomphe",
        "tapis_cartes.referee.engine.napoleon",
    )
    assert not {s for s in sites if s.startswith(others)}
    napoleon = {f"{s.module}:{s.qualname}" for s in engine_sites("NAP.FOLLOW")}
    assert "tapis_cartes.referee.engine.base:Hand._play_refusal" in napoleon
    assert not {s for s in napoleon if s.startswith("tapis_cartes.referee.engine.dame_de_pique")}


def test_a_range_of_events_names_each_event(tmp_path: Path) -> None:
    path = tmp_path / "options.py"
    path.write_text('HELP = "scored first (RULES.md IMP-A.E2-E5)"\n', encoding="utf-8")
    named = {rule_id for rule_id, _ in scan_module(path, "tapis_cartes.referee.engine.options")}
    assert named == {"IMP-A.E2", "IMP-A.E3", "IMP-A.E4", "IMP-A.E5"}


# --- the registry against the engine at run time ---------------------------------------------


def _configurations() -> list[tuple[str, str, int, dict[str, object]]]:
    out: list[tuple[str, str, int, dict[str, object]]] = []
    for name, spec in GAMES.items():
        for ruleset in spec.rulesets:
            for players in (spec.fixed_players,) if spec.fixed_players else range(2, 11):
                try:
                    make_rules(name, ruleset, {}, players)
                except RulesError:
                    continue
                out.append((name, ruleset, players, {}))
                if spec.fixed_players is None:
                    break  # the fewest players the ruleset allows; more below
    out += [
        ("imperiale", "academie", 3, {"three_player_first_lead_trump": True}),
        ("imperiale", "moderne", 2, {"effacement": True}),
        ("triomphe", "individuelle", 3, {"regime": "plaisant"}),
        ("triomphe", "individuelle", 2, {"regime": "forcat"}),
        ("triomphe", "equipe", 4, {}),
        ("napoleon", "standard", 4, {"short_deck": True}),
    ]
    return out


def _deal(match: Match, rng: random.Random) -> None:
    dealer = match.expected_dealer()
    if dealer is None:
        dealer = rng.choice(match.first_dealers())
    deck = list(iter_cards(match.pack))
    rng.shuffle(deck)
    match.start_hand(dealer, match.deal_deck(dealer, deck))


def _asked() -> list[int]:
    """Actions of every kind: every card, every bid, vole, abandon and some pille."""
    out = [encode(PLAY, c) for c in range(52)]
    out += [encode(BID, b) for b in range(8)]
    out += [encode(VOLE, v) for v in range(2)] + [encode(ABANDON, a) for a in range(3)]
    out += [encode(PILLE, c) for c in range(0, 52, 5)] + [encode(PILLE, PILLE_STOP)]
    return out


def _rules_cited(config: tuple[str, str, int, dict[str, object]], seed: int) -> set[str]:
    name, ruleset, players, options = config
    rng = random.Random(seed)
    match = new_match(make_rules(name, ruleset, options, players), log_events=False)
    cited: set[str] = set()
    for hands in range(4):
        if match.finished:
            break
        deck = list(iter_cards(match.pack))
        dealer = match.expected_dealer()
        try:  # a pack with a card missing: refused by the game's dealing rule
            match.deal_deck(match.first_dealers()[0] if dealer is None else dealer, deck[1:])
        except IllegalAction as exc:
            cited.add(exc.rule)
        _deal(match, rng)
        steps = 0
        while to_act := match.to_act():
            if steps % 4 == 0 or hands == 0:
                for seat in range(match.players):
                    for action in _asked():
                        refusal = match.refusal(seat, action)
                        if isinstance(refusal, IllegalAction):
                            cited.add(refusal.rule)
            seat = rng.choice(to_act)
            match.step(seat, rng.choice(match.legal_actions(seat)))
            steps += 1
    for result in match.results:
        cited.update(line.rule for line in result.lines)
    refusal = match.refusal(0, encode(PLAY, 0))  # between hands, or the match over
    if isinstance(refusal, IllegalAction):
        cited.add(refusal.rule)
    return cited


def test_every_id_cited_in_play_is_registered() -> None:
    """Random play of every game × ruleset: every rule a refusal or a score line cites."""
    cited: set[str] = set()
    for i, config in enumerate(_configurations()):
        cited |= _rules_cited(config, i)
    assert sorted(cited - REGISTERED) == []
    # The play reached every game's refusals and scores, not only a few of them.
    for prefix in ("CARD.", "IMP-M.", "IMP-A.", "TRI.", "DP.", "NAP."):
        if prefix != "CARD.":  # the trick winner is never a refusal nor a score line
            assert any(rule_id.startswith(prefix) for rule_id in cited), prefix


# --- the registry against docs/rules/ --------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.id)
def test_every_id_is_explained_on_its_page(rule: Rule) -> None:
    part = section(page_text(rule.page_key), rule.anchor)
    heading = part.splitlines()[1]
    assert heading.startswith("#") and f"`{rule.id}`" in heading
    for key in rule.options:
        assert f"`{key}`" in part, (rule.id, key)


def test_option_keys_are_options_of_the_game() -> None:
    game_of_page = {
        "imperiale": "imperiale",
        "triomphe": "triomphe",
        "dame-de-pique": "dame-de-pique",
        "napoleon": "napoleon",
    }
    for rule in RULES:
        if rule.page_key not in game_of_page:
            continue
        spec = GAMES[game_of_page[rule.page_key]]
        keys = {key for model in spec.rulesets.values() for key in model.model_fields}
        assert set(rule.options) <= keys, (rule.id, set(rule.options) - keys)


def test_pages_index_and_links() -> None:
    index = (ROOT / "docs/rules/README.md").read_text(encoding="utf-8")
    pages = sorted(p.name for p in (ROOT / "docs/rules").glob("*.md") if p.name != "README.md")
    assert pages == sorted(Path(page.path).name for page in PAGES.values())
    for name in pages:
        assert f"]({name})" in index, name
    # Every link between the pages lands on an anchor that exists.
    for path in (ROOT / "docs/rules").glob("*.md"):
        for target, anchor in re.findall(r"\]\(([\w.-]*)#([\w-]+)\)", path.read_text()):
            text = (path.parent / target).read_text() if target else path.read_text()
            assert f'<a id="{anchor}"></a>' in text, (path.name, target, anchor)
    # Every id a page explains is registered, on that page.
    for key, page in PAGES.items():
        for anchor in re.findall(r'<a id="([\w-]+)"></a>', page_text(key)):
            rule = next((r for r in RULES if r.anchor == anchor), None)
            assert rule is not None and rule.page_key == key, (page.path, anchor)


def test_lookup() -> None:
    rule = find_rule(" imp-a.e3 ")
    assert rule is not None and rule.id == "IMP-A.E3"
    assert rule.ref == "docs/rules/imperiale.md#imp-a-e3"
    assert find_rule("IMP-A.E9") is None
    assert closest_ids("IMP-A.E9")[0].startswith("IMP-A.E")


# --- `tapis rules`, as a person runs it ------------------------------------------------------


def tapis(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapis_cartes.clients.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


def test_tapis_rules_explains_an_id(tmp_path: Path) -> None:
    r = tapis("rules", "IMP-A.E3", cwd=tmp_path)  # anywhere, not only in the repository
    assert r.returncode == 0, r.stderr
    rule = find_rule("IMP-A.E3")
    assert rule is not None
    assert f"IMP-A.E3: {rule.statement}" in r.stdout
    assert "tapis_cartes.referee.engine.imperiale:" in r.stdout
    for site in engine_sites("IMP-A.E3"):
        assert str(site) in r.stdout
    assert "page: docs/rules/imperiale.md#imp-a-e3" in r.stdout
    assert "imperiale_de_retourne" in r.stdout


def test_tapis_rules_lists_every_id(tmp_path: Path) -> None:
    r = tapis("rules", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    listed = re.findall(r"^  (\S+)  ", r.stdout, re.MULTILINE)
    assert listed == [rule.id for page in PAGES for rule in RULES if rule.page_key == page]
    for page in PAGES.values():
        assert f"{page.title} ({page.path})" in r.stdout


def test_tapis_rules_refuses_an_unknown_id(tmp_path: Path) -> None:
    r = tapis("rules", "IMP-A.E9", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert "unknown rule id 'IMP-A.E9'" in r.stderr and "IMP-A.E8" in r.stderr
    # An id of 100,000 characters was quoted whole (and compared with every id, slowly).
    long = tapis("rules", "X" * 100_000, cwd=tmp_path)
    assert long.returncode == 2 and len(long.stderr) < 200, len(long.stderr)
