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
