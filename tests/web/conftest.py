"""The browser tests: headless Chromium (Debian's `chromium`, or the one `TAPIS_CHROMIUM`
names) driven by Playwright. Skipped when either is missing; `scripts/test` installs both
on a fresh Debian machine. With `TAPIS_SCREENSHOTS=DIR` the tests save pictures of the pages
there (docs/img/ for the README)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def chromium_path() -> str | None:
    given = os.environ.get("TAPIS_CHROMIUM")
    if given:
        return given
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Debian's chromium in a container: no sandbox (no user namespaces), no GPU, no /dev/shm
# of a size to speak of.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


@pytest.fixture(scope="session")
def chromium() -> str:
    pytest.importorskip("playwright", reason="playwright is not installed")
    path = chromium_path()
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    """One headless Chromium for a module's synchronous tests."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def screenshot_dir() -> Path | None:
    """Where to save pictures of the pages (`TAPIS_SCREENSHOTS`), or None: not asked."""
    given = os.environ.get("TAPIS_SCREENSHOTS")
    if not given:
        return None
    path = Path(given)
    path.mkdir(parents=True, exist_ok=True)
    return path
