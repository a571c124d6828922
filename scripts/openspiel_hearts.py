"""Self-check of the bridge to OpenSpiel's Hearts (tests/engine/openspiel_hearts.py): random
hands played in OpenSpiel round-trip through its replay, and the replay is timed.

    PYTHONPATH=. python scripts/openspiel_hearts.py
"""

from __future__ import annotations

from tests.engine.openspiel_hearts import self_check

if __name__ == "__main__":
    self_check()
