"""Transcripts of tests/data/ for the import tests: one read, one refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tapis_cartes.records.transcript import import_transcript
from tapis_cartes.referee.engine import TranscriptError
from tests.commands import DATA


def load(name: str) -> dict[str, Any]:
    """The transcript tests/data/NAME.json, as a document to change."""
    return json.loads((DATA / f"{name}.json").read_text())


def refused(doc: dict[str, Any]) -> str:
    """The message of the `TranscriptError` importing `doc` raises (it must raise one)."""
    with pytest.raises(TranscriptError) as exc:
        import_transcript(doc)
    return str(exc.value)
