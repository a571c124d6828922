"""`tapis rules [ID]`: the rule ids that refusals and score lines cite (referee/rules_index.py).

    tapis rules            every id with its one-line statement, by game
    tapis rules ID         its statement, the option keys that change it, the engine functions
                           that apply it and its page of docs/rules/

Exit status: 0 success; 2 an unknown id (the message names it and the closest known ids).
"""

from __future__ import annotations

import argparse
from typing import Any

from tapis_cartes.clients.args import err as _err
from tapis_cartes.referee.engine.errors import quoted
from tapis_cartes.referee.rules_index import PAGES, RULES, closest_ids, engine_sites, find_rule

__all__ = ["add_rules_parser", "cmd_rules"]


def add_rules_parser(sub: Any) -> None:
    """The `rules` subcommand, on the top-level subparsers of `tapis`."""
    p = sub.add_parser("rules", help="list the rule ids, or explain one (statement, code, page)")
    p.add_argument("rule_id", nargs="?", metavar="ID", help="a rule id, e.g. IMP-A.E3")
    p.set_defaults(func=cmd_rules)


def cmd_rules(args: argparse.Namespace) -> int:
    if args.rule_id is None:
        _list_all()
        return 0
    rule = find_rule(args.rule_id)
    if rule is None:
        # (no id is longer than 40 characters: a longer text is near none, and its quote short)
        near = closest_ids(args.rule_id) if len(args.rule_id) <= 40 else []
        hint = f"closest: {', '.join(near)}" if near else "`tapis rules` lists them all"
        _err(f"tapis rules: unknown rule id {quoted(args.rule_id, 60)} ({hint})")
        return 2
    print(f"{rule.id}: {rule.statement}")
    print(f"game: {rule.page.title}")
    if rule.options:
        print(f"options: {', '.join(rule.options)}")
    print("engine:")
    sites = engine_sites(rule.id)
    for site in sites:
        print(f"  {site}")
    if not sites:  # an install without the engine's .py sources (nothing to read)
        print("  (not found: the engine's source files are not installed)")
    print(f"page: {rule.ref}")
    return 0


def _list_all() -> None:
    width = max(len(rule.id) for rule in RULES)
    for key, page in PAGES.items():
        print(f"{page.title} ({page.path})")
        for rule in RULES:
            if rule.page_key == key:
                print(f"  {rule.id:<{width}}  {rule.statement}")
