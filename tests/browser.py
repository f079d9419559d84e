"""The system's chromium under Playwright, for the dashboard's browser tests and its screenshot.

Browsers cannot be downloaded here, so Playwright drives Debian's ``chromium`` package
(``apt-get install -y chromium``; ``.ci/run`` installs it when missing). ``EMULATOR_CHROMIUM``
points at another binary.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = os.environ.get("EMULATOR_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Headless, and nothing that phones home: the page under test must load from the emulator only.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not os.access(CHROMIUM, os.X_OK):
        return (f"no chromium at {CHROMIUM}: install it with `apt-get install -y chromium` "
                "(.ci/run does), or set EMULATOR_CHROMIUM to a chromium binary")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[test]'"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
