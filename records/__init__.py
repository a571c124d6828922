"""Tapis records: the codec, verify, score and rescore, the archive, and the library a Python
program reads records with (records/library.py, docs/python.md):

    from tapis_cartes.records import read_records

    for record in read_records("dp1.tapis"):
        print(record.game, record.players, record.outcome.text)

The library's names are imported from records/library.py when first used, so that a module
importing `tapis_cartes.records.codec` does not load them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import tapis_cartes.referee.engine._native  # noqa: F401  first: compiled or source modules
from tapis_cartes.lazy import load

if TYPE_CHECKING:
    from tapis_cartes.records.library import (
        Hand,
        Line,
        Outcome,
        Play,
        Record,
        RecordError,
        RecordFileError,
        Rescored,
        VerifyResult,
        read_records,
        write_records,
    )

__all__ = [
    "Hand",
    "Line",
    "Outcome",
    "Play",
    "Record",
    "RecordError",
    "RecordFileError",
    "Rescored",
    "VerifyResult",
    "read_records",
    "write_records",
]


def __getattr__(name: str) -> Any:
    return load(__name__, name, dict.fromkeys(__all__, "library"))
