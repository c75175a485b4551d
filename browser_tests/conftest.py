"""Fixtures: one JupyterLab and one headless Chromium for the whole session, a page per test.

    make test-browser      # or: .venv/bin/python -m pytest browser_tests -p no:cacheprovider -q

Needs the `browser` extra (playwright) and a Chromium at /usr/bin/chromium (Debian's `chromium`
package; set SIMLAB_CHROMIUM to use another). Screenshots go to browser_artifacts/ (git-ignored).
"""
from __future__ import annotations

import pytest

from .lab import ROOT, chromium, new_page, running_lab

ARTIFACTS = ROOT / "browser_artifacts"


@pytest.fixture(scope="session")
def lab():
    with running_lab() as served:
        yield served


@pytest.fixture(scope="session")
def browser():
    with chromium() as opened:
        yield opened


@pytest.fixture
def page(browser):
    page = new_page(browser)
    yield page
    if not page.is_closed():
        page.close()


@pytest.fixture(scope="session")
def artifacts():
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# The lessons whose Run All starts multi-process real runs take 30-110 s where the others take 10-25 s
# (measured, `--durations`): queued first, so that with two workers neither waits alone on one at the end.
LONGEST_FIRST = ("06_", "07_")


def pytest_collection_modifyitems(items):
    """Lessons 6 and 7 (English, then Chinese) first; every other test keeps its order."""
    def slow(item) -> bool:
        lesson = getattr(item, "callspec", None) and item.callspec.params.get("lesson", "")
        return bool(lesson) and lesson.startswith(LONGEST_FIRST)
    items.sort(key=lambda item: not slow(item))  # a stable sort: False (slow) before True
