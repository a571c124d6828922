"""Rule ids that resolve: each id a refusal or a score line cites, with what it states, the
engine functions that apply it and the page of `docs/rules/` that explains it.

The statements and pages are data (`RULES`, one entry per id, grouped by page). The engine
functions are not: `engine_sites` reads the engine's source with `ast` and finds, for every
id, the functions whose code names it, so this index stays right when functions move. A
function names an id through a string literal (a refusal's or a score line's rule, a
docstring), a comment inside it (`# IMP-A.E1 / IMP-M.RETOURNE: ...`), or a table: an id
written in a module-level or class-level assignment, or as a keyword argument (imperiale.py's
`FIXED` table: `point_id="IMP-A.E5"`), is also credited to the functions of that module that
read the name it is bound to (`_REGIME_RULES`, `self.ids.point_id`).

Nothing here imports the engine: the sources are read as text, so `tapis rules` works the same
whether the engine runs compiled or as pure Python.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = [
    "PAGES",
    "RULES",
    "Rule",
    "Site",
    "closest_ids",
    "engine_sites",
    "find_rule",
    "ids_in_engine",
    "scan_module",
]

ENGINE_DIR = Path(__file__).resolve().parent / "engine"

# A rule id: an upper-case prefix (`CARD`, `IMP-A`, `TRI`, ...), a dot, then upper-case words
# joined by hyphens (`FIRST-TRICK`). A range such as `IMP-A.E2-E5` names E2 to E5.
ID_PATTERN = re.compile(r"\b[A-Z]{2,}(?:-[A-Z]+)?\.[A-Z0-9]+(?:-[A-Z0-9]+)*\b")
_RANGE = re.compile(r"^(?P<head>.+\.)(?P<word>[A-Z]+)(?P<low>\d+)-(?P=word)(?P<high>\d+)$")


@dataclass(frozen=True)
class Page:
    """One page of the rules reference."""

    path: str  # relative to the repository root
    title: str


PAGES: dict[str, Page] = {
    "common": Page("docs/rules/common.md", "Shared by every game"),
    "imperiale": Page("docs/rules/imperiale.md", "L'Impériale (moderne and académie)"),
    "triomphe": Page("docs/rules/triomphe.md", "La Triomphe"),
    "dame-de-pique": Page("docs/rules/dame-de-pique.md", "Dame de Pique"),
    "napoleon": Page("docs/rules/napoleon.md", "Napoléon (Nap)"),
}


@dataclass(frozen=True)
class Rule:
    """A rule id, its one-line statement, its page and the option keys that change it."""

    id: str
    page_key: str
    statement: str
    options: tuple[str, ...] = ()

    @property
    def anchor(self) -> str:
        """The anchor of the id on its page: lower case, dots as hyphens (`imp-a-e3`)."""
        return self.id.lower().replace(".", "-")

    @property
    def page(self) -> Page:
        return PAGES[self.page_key]

    @property
    def ref(self) -> str:
        """`path#anchor` of the id's entry in `docs/rules/`."""
        return f"{self.page.path}#{self.anchor}"


def _rules(page_key: str, *entries: tuple[str, str] | tuple[str, str, str]) -> list[Rule]:
    out = []
    for entry in entries:
        options = tuple(entry[2].split()) if len(entry) == 3 else ()
        out.append(Rule(entry[0], page_key, entry[1], options))
    return out


# id, one-line statement, option keys that change it (space-separated). The order is the
# order of each page.
RULES: tuple[Rule, ...] = tuple(
    _rules(
        "common",
        ("CARD.WIN", "The highest trump on the trick wins; with no trump on it, the highest "
         "card of the suit led; a card of any other suit never wins.", "rank_order"),
        ("CLOCK.FORFEIT", "At a timed table under the forfeit policy, a seat whose time runs "
         "out loses the match: the referee resigns for it."),
        ("CLOCK.AUTOPLAY", "At a timed table under the autoplay policy, the referee makes the "
         "action of a seat whose time runs out: the choice that binds it to nothing, its "
         "legal action with the smallest code but an offer to concede (a pillage: stop)."),
    )
    + _rules(
        "imperiale",
        # moderne (seed 000)
        ("IMP-M.RETOURNE", "Moderne: twelve cards each in threes, the 25th card turned sets "
         "trump; a turned 7, A, J, Q or K gives the dealer a jeton. Also cites dealing and "
         "dealers."),
        ("IMP-M.COULEUR", "Moderne: the point is each player's best suit by pip total (A 11, "
         "K Q J 10 worth 10); the higher scores a jeton, a tie goes to the elder hand.",
         "point_rule imperiales_before_point"),
        ("IMP-M.IMPERIALES", "Moderne: a carré of K, Q, J, A or 7, K Q J A of one suit, or "
         "the tournée (the retourne completing trump K Q J A) is an impériale: one fiche each.",
         "tournee_holder allow_overlap imperiales_before_point"),
        ("IMP-M.PLAY", "Moderne: follow suit and take the trick if able; void, trump; else "
         "discard (LEGAL_IMP000)."),
        ("IMP-M.TOMBEE", "Moderne: a trick holding two trumps among K, Q, J, A is an "
         "impériale tombée: one fiche to its winner instead of honour jetons.", "tombee_mode"),
        ("IMP-M.HONNEURS", "Moderne: the winner of a trick scores a jeton for each trump 7, A, "
         "J, Q or K in it.", "honour_timing"),
        ("IMP-M.CARTES", "Moderne: seven tricks or more score one jeton; at six all, the "
         "player who reached six first scores it.", "cards_scoring"),
        ("IMP-M.END", "Moderne: the first to hold three fiches wins at that instant, even in "
         "the middle of a coup.", "target_fiches"),
        # académie (seed 001)
        ("IMP-A.E1", "Académie: twelve cards each in packets of three or four, the 25th "
         "turned sets trump; a turned honour gives the dealer a protected jeton. Also cites "
         "dealing and dealers.", "packet protect_retourne"),
        ("IMP-A.E2", "Académie: the elder hand's impériales d'emblée: cartes blanches (two "
         "fiches), quatrièmes majeures (one fiche, two in trump) and carrés (one fiche).",
         "cartes_blanches trump_major_value allow_overlap imperiales_before_point"),
        ("IMP-A.E3", "Académie: the dealer's impériales d'emblée, as E2, then his optional "
         "impériale de retourne (one fiche).",
         "cartes_blanches trump_major_value imperiale_de_retourne allow_overlap"),
        ("IMP-A.E4", "Académie: when cartes blanches were shown the coup stops after the "
         "impériales: no Point and no play.", "cartes_blanches"),
        ("IMP-A.E5", "Académie: the Point is the suit with most cards, then most points; the "
         "better scores a jeton, a full tie goes to the elder hand.",
         "point_rule imperiales_before_point"),
        ("IMP-A.E6", "Académie: the winner of each trick scores a jeton per trump honour (A, "
         "K, Q, J, 7) in it, whoever played it."),
        ("IMP-A.E7", "Académie, optional: a player whose tricks hold trump K, Q, J and A, not "
         "all dealt to him, scores the impériale tombée (one fiche).",
         "imperiale_tombee tombee_requires_capture"),
        ("IMP-A.E8", "Académie: all twelve tricks are capot (two fiches); else each trick "
         "above six scores a jeton.", "capot_fiches"),
        ("IMP-A.PLAY", "Académie: follow and beat if able, else trump and overtrump, else "
         "free (LEGAL_IMP1725).", "undertrump_duty force_after_ruff"),
        ("IMP-A.EFFACEMENT", "Whenever a player gains a fiche, every opponent's jetons fall "
         "to 0; before the Point the dealer keeps this coup's retourne jeton.",
         "effacement protect_retourne blanches_erase optional_erase"),
        ("IMP-A.TARGET", "Académie: the first to hold the target in fiches (5) wins at that "
         "instant; nothing after it is scored.", "target_fiches"),
        ("IMP-A.3P", "Académie with three players: 36 cards, no talon, the dealer's last card "
         "is the retourne; the 6 is the low honour; tricks above four score.",
         "players three_player_first_lead_trump"),
    )
    + _rules(
        "triomphe",
        ("TRI.DEAL", "Five cards each, 2 then 3, from the seat after the dealer; the next "
         "card turned sets trump; the deal passes to the seat after the dealer.",
         "hand_size rank_order"),
        ("TRI.FORCEE", "Forcée: follow and beat if able; void, trump; after a ruff follow "
         "with any card of the suit, else overtrump or, failing that, undertrump.", "regime"),
        ("TRI.FORCAT", "Forçat: always become master if able, by beating the suit led, by "
         "trumping or by overtrumping, even while holding the suit led.", "regime"),
        ("TRI.PLAISANT", "Plaisant (three players or more, individual): only follow suit; "
         "the last to play is under the forçat.", "regime"),
        ("TRI.ABANDON", "Two sides only: before its first card a side may offer to concede; "
         "accepted, the other side scores 1; refused, the refuser is bound to the vole.",
         "abandon_allowed refused_abandon_vole_value vole_fail_penalty"),
        ("TRI.VOLE", "A side that won every trick so far and a majority stops (+1) or plays "
         "on for the vole: +2 if it takes every trick, -2 at the first trick lost.",
         "vole_value vole_fail_penalty"),
        ("TRI.POINT", "Otherwise the side with most tricks scores 1; a tie goes to the side "
         "seated earliest after the dealer (primauté).", "hand_size"),
        ("TRI.END", "The first side whose score reaches the target (5; 7 for a team game of "
         "six) wins.", "target"),
        ("TRI.EQUIPE", "Team game, 2 v 2 or 3 v 3: partners side by side, each team's last "
         "seat is its fixed dealer and the two dealers alternate.", "players partners_see_hands"),
        ("TRI.PILLE", "L'As qui pille: the holder of the trump ace may take the face-up "
         "trump and discard, and go on while the next turned card is a trump.",
         "as_pille pillage_continues rank_order"),
    )
    + _rules(
        "dame-de-pique",
        ("DP.DEAL", "Thirteen cards each, one at a time from the seat after the dealer; the "
         "deal passes clockwise.", "dealer_rotation"),
        ("DP.PASS", "Before play each player passes three cards left, right, across, or "
         "none, by the manche number, choosing them before seeing what he receives."),
        ("DP.LEAD", "Play goes clockwise; the winner of a trick leads the next."),
        ("DP.FOLLOW", "Follow the suit led if able; otherwise play any card."),
        ("DP.FIRST-TRICK", "The holder of 2♣ leads it; on that trick no heart or Q♠ may be "
         "played unless the player holds nothing else."),
        ("DP.HEARTS", "No heart may be led until hearts are broken, unless the leader holds "
         "only hearts.", "hearts_broken_by qs_breaks_hearts qs_counts_as_heart_for_lead"),
        ("DP.SCORE", "Each heart taken is a penalty point, the queen of spades thirteen: 26 "
         "in a manche."),
        ("DP.VOLTE", "A player who takes every heart and the queen of spades scores 0 and "
         "each other player 26.", "moon_mode"),
        ("DP.END", "The game ends after the manche in which a total reaches 100; the lowest "
         "total wins, ties share.", "end_threshold"),
    )
    + _rules(
        "napoleon",
        ("NAP.DECK", "52 cards, or the top players + 3 ranks of each suit; five cards each, "
         "one at a time from the dealer's left; the deal passes left.",
         "players short_deck allpass_redeal_same_dealer"),
        ("NAP.BID", "One round from the dealer's left: pass or bid above the highest (Deux, "
         "Trois, Misère, Quatre, Nap, Wellington, Blücher); all pass, a new deal.",
         "allpass_redeal_same_dealer"),
        ("NAP.TRUMP", "The declarer leads trick 1 and the suit of that card is trump; Misère "
         "is played without trump.", "misere_trump"),
        ("NAP.FOLLOW", "Follow the suit led if able; otherwise play any card, with no duty to "
         "trump or to beat."),
        ("NAP.SCORE", "A contract made scores its value to the declarer; failed, each "
         "opponent scores it.", "scoring"),
        ("NAP.END", "The match is a fixed number of deals (2 × players); the highest total "
         "wins, ties share.", "deals stop_when_decided"),
    )
)  # fmt: skip

_BY_ID = {rule.id: rule for rule in RULES}
assert len(_BY_ID) == len(RULES), "a rule id is registered twice"


def find_rule(rule_id: str) -> Rule | None:
    """The registered rule of `rule_id` (case-insensitive), or None."""
    return _BY_ID.get(rule_id.strip().upper())


def closest_ids(rule_id: str, n: int = 3) -> list[str]:
    """The registered ids nearest to `rule_id`, best first (for an unknown id)."""
    return difflib.get_close_matches(rule_id.strip().upper(), list(_BY_ID), n=n, cutoff=0.5)


# --- where the engine applies each id --------------------------------------------------------


@dataclass(frozen=True, order=True)
class Site:
    """An engine function: its module, its qualified name and the line of its `def`."""

    module: str  # tapis_cartes.referee.engine.imperiale
    qualname: str  # ImperialeHand._announce
    line: int

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname} (line {self.line})"


@dataclass(frozen=True)
class _Function:
    qualname: str
    first: int  # the `def` line
    last: int
    names: frozenset[str]  # every name and attribute its code reads
    loads: frozenset[str]  # the attributes it reads (not those it only assigns)


def _expand(token: str) -> list[str]:
    """`IMP-A.E2-E5` -> IMP-A.E2 ... IMP-A.E5; any other id as it is."""
    m = _RANGE.match(token)
    if m is None:
        return [token]
    low, high = int(m["low"]), int(m["high"])
    return [f"{m['head']}{m['word']}{i}" for i in range(low, high + 1)]


def _ids(text: str) -> list[str]:
    return [rule_id for token in ID_PATTERN.findall(text) for rule_id in _expand(token)]


def _functions(tree: ast.Module) -> list[_Function]:
    out: list[_Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = prefix + child.name
                names = frozenset(
                    n.id if isinstance(n, ast.Name) else n.attr
                    for n in ast.walk(child)
                    if isinstance(n, ast.Name | ast.Attribute)
                )
                loads = frozenset(
                    n.attr
                    for n in ast.walk(child)
                    if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
                )
                last = child.end_lineno or child.lineno
                out.append(_Function(qualname, child.lineno, last, names, loads))
                visit(child, qualname + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _bound_names(tree: ast.Module) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, name, is_keyword) of each table entry an id may be written in:
    module- and class-level assignments (`_REGIME_RULES = {...}`, an enum member, a dataclass
    field) and keyword arguments (`point_id="IMP-A.E5"`)."""
    out: list[tuple[int, int, str, bool]] = []

    def assigned(stmt: ast.stmt) -> list[str]:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets = stmt.targets
        elif isinstance(stmt, ast.AnnAssign):
            targets = [stmt.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]

    def level(body: list[ast.stmt]) -> None:
        for stmt in body:
            for name in assigned(stmt):
                out.append((stmt.lineno, stmt.end_lineno or stmt.lineno, name, False))
            if isinstance(stmt, ast.ClassDef):
                level(stmt.body)

    level(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg is not None:
            out.append((node.lineno, node.end_lineno or node.lineno, node.arg, True))
    return out


def _attribute_entries(tree: ast.Module) -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(id, attribute, classes) of each `self.play_rule = "DP.FOLLOW"` in a class's method: an
    id a game sets on an attribute that the class and the classes it derives from (the base's
    card play) read; `classes` is the class's name and its bases' names."""
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        classes = (cls.name, *(b.id for b in cls.bases if isinstance(b, ast.Name)))
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and ID_PATTERN.fullmatch(node.value.value.strip())
            ):
                for target in node.targets:
                    if isinstance(target, ast.Attribute):
                        for rule_id in _ids(node.value.value):
                            yield rule_id, target.attr, classes


def _mentions(source: str, tree: ast.Module) -> Iterator[tuple[int, str, str]]:
    """(line, id, how) of every id in a string literal or a comment: how is "entry" for a
    literal that is the id alone, "text" for one that says more, "comment" for a comment."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            alone = ID_PATTERN.fullmatch(node.value.strip()) is not None
            for rule_id in _ids(node.value):
                yield node.lineno, rule_id, "entry" if alone else "text"
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            for rule_id in _ids(tok.string):
                yield tok.start[0], rule_id, "comment"


def _next_code_line(lines: list[str], line: int) -> int:
    """The line itself if it holds code, else the next line that does (after a comment block)."""
    i = line
    while i <= len(lines) and lines[i - 1].strip().startswith("#"):
        i += 1
    return i


def scan_module(path: Path, module: str) -> Iterator[tuple[str, Site | None]]:
    """(id, None) for every mention of an id in the source file at `path` (module name
    `module`), and (id, site) for each function credited with it."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    return _scan_tree(source, tree, _functions(tree), module)


def _scan_tree(
    source: str, tree: ast.Module, functions: list[_Function], module: str
) -> Iterator[tuple[str, Site | None]]:
    """`scan_module` on a source already parsed."""
    lines = source.splitlines()
    bound = _bound_names(tree)

    def site(fn: _Function) -> Site:
        return Site(module, fn.qualname, fn.first)

    for line, rule_id, how in _mentions(source, tree):
        yield rule_id, None
        inner = [fn for fn in functions if fn.first <= line <= fn.last]
        if inner:
            yield rule_id, site(max(inner, key=lambda fn: fn.first))
        if how == "text":
            continue
        # A table entry: the functions that read the name it is bound to. A comment names
        # the assignment on its line (or under it); a keyword takes only the id alone.
        at = _next_code_line(lines, line) if how == "comment" else line
        for first, last, name, is_keyword in bound:
            if first <= at <= last and not (is_keyword and how == "comment"):
                for fn in functions:
                    if name in fn.names:
                        yield rule_id, site(fn)


def _engine_modules() -> Iterator[tuple[Path, str]]:
    package = __name__.rpartition(".")[0] + ".engine"  # tapis_cartes.referee.engine
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        parts = path.relative_to(ENGINE_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield path, ".".join((package, *parts))


@cache
def _scan() -> tuple[dict[str, tuple[Site, ...]], frozenset[str]]:
    sites: dict[str, set[Site]] = {}
    seen: set[str] = set()
    readers: list[tuple[str, _Function]] = []  # every engine function, with its module
    attributes: list[tuple[str, str, tuple[str, ...]]] = []  # (id, attribute, classes)
    for path, module in _engine_modules():
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, str(path))
        functions = _functions(tree)
        for rule_id, found in _scan_tree(source, tree, functions, module):
            seen.add(rule_id)
            if found is not None:
                sites.setdefault(rule_id, set()).add(found)
        readers.extend((module, fn) for fn in functions)
        attributes.extend(_attribute_entries(tree))
    # An id set on an attribute is applied where that class or a class it derives from (the
    # base's card play) reads the attribute.
    for rule_id, attr, classes in attributes:
        for module, fn in readers:
            if attr in fn.loads and fn.qualname.split(".")[0] in classes:
                sites.setdefault(rule_id, set()).add(Site(module, fn.qualname, fn.first))
    return {k: tuple(sorted(v)) for k, v in sites.items()}, frozenset(seen)


def engine_sites(rule_id: str) -> tuple[Site, ...]:
    """The engine functions whose code names `rule_id`, by module then line."""
    return _scan()[0].get(rule_id, ())


def ids_in_engine() -> frozenset[str]:
    """Every rule id the engine's source names (string literals and comments)."""
    return _scan()[1]
