"""A corpus of records: bots play matches in-process, each finished match becomes a record.

    PYTHONPATH=. python scripts/corpus.py --game hearts -n 200 [-o corpus.tapis]
        [--archive archive.db] [--bots heuristic|random] [--option KEY=VALUE ...]
        [--seed TEXT] [--players N] [--jobs N]

The same as `tapis corpus` (clients/corpus_cmd.py; how matches are played and dealt:
clients/corpus.py), kept for the benchmarks that call it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tapis_cartes.clients.cli import main as tapis
from tapis_cartes.clients.corpus import CHUNK, make_corpus, play_record

__all__ = ["CHUNK", "main", "make_corpus", "play_record"]  # the library: clients/corpus.py


def main(argv: Sequence[str] | None = None) -> int:
    return tapis(["corpus", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
