"""Every lesson in a real browser: Run All, no error anywhere, every widget drawn and every control alive.

For each notebooks/*.ipynb (discovered, so new lessons are tested without a change here): open it fresh,
check it is not modified on opening, Run All, then check the outputs (no error, no traceback, no raw widget
repr, no broken or too-wide picture), change every slider, dropdown and number box of every widget and see
its picture or readout change, play every player, press one real-run button per lesson, and finally check
the Log Console (where exceptions in widget callbacks go) is empty. A screenshot of each lesson is saved
to browser_artifacts/. test_checks.py proves each of these checks fails on a notebook that deserves it.
"""
from __future__ import annotations

import time

import pytest

from .lab import lessons, new_page
from .notebook import Notebook

RUN_ALL_TIMEOUT_S = 240  # lesson 6 runs 8 processes (~40 s on 2 cores); all lessons run real processes


def exercise_widgets(nb: Notebook) -> list:
    """Every widget's controls, one real run per notebook; returns one `Exercised` per widget."""
    reports, ran_real = [], False
    for widget in nb.check_rendering():
        controls = nb.js("controls(arg)", widget["id"])
        wants_real = not ran_real and any(c["kind"] == "run" and not c["disabled"] for c in controls)
        reports.append(nb.exercise(widget, controls, run_real=wants_real))
        ran_real = ran_real or wants_real
    return reports


def check_notebook(nb: Notebook, run_all_timeout_s: float = RUN_ALL_TIMEOUT_S) -> str:
    """The whole check of one notebook; problems go to `nb.problems`. Returns what was done, one line."""
    nb.open()
    nb.check_fresh()
    ran_s = nb.run_all(run_all_timeout_s)
    start = time.monotonic()
    reports = exercise_widgets(nb)
    nb.problems.extend(nb.js("pictureProblems()"))  # again: the pictures the interactions drew
    for report in reports:
        print(f"  {report.widget}: changed {report.changed}; unchanged {report.unchanged}; "
              f"disabled {report.disabled}; real run left to the first widget {report.skipped}")  # with -s
        if not report.changed:
            nb.problems.append(f"{report.widget}: no control changed what it shows "
                               f"(tried {report.unchanged or 'nothing: no control found'})")
        nb.problems.extend(f"{report.widget}: {c} changed nothing" for c in report.unchanged)
    nb.check_log_console()
    nb.problems[:] = dict.fromkeys(nb.problems)  # a picture checked before and after the interactions
    return (f"Run All {ran_s:.0f} s, {len(reports)} widgets, "
            f"{sum(len(r.changed) for r in reports)} controls in {time.monotonic() - start:.0f} s")


# JupyterLab's own websocket decoding failed once in CI on a loaded 2-core machine ("Kernel message validation
# error: … \"stream.stderr\" is not valid JSON": a frame's offsets, jupyterlab/services, before any of our
# code sees the message). When that is the ONLY problem, the lesson is checked once more from a fresh page,
# and the glitch is printed; any other problem, or the glitch twice, fails as before.
LAB_GLITCH = "Kernel message validation error"


def checked_twice_on_lab_glitch(check, page, fresh_page) -> list:
    """`check(page)` returns a Notebook and closes `page` (`Notebook.close`); its problems, after one more try
    on `fresh_page()` if JupyterLab's glitch was all. The retry once reused the closed page: a fresh-clone CI
    run met the glitch and failed on "Target page … has been closed" instead of checking again."""
    problems = check(page).problems
    if problems and all(LAB_GLITCH in p for p in problems):
        print(f"JupyterLab glitch, checking once more: {problems[0]}")
        problems = check(fresh_page()).problems
    return problems


@pytest.mark.timeout(900)  # the project's 300 s is too short for lesson 6 on a busy 2-core machine (twice at worst)
@pytest.mark.parametrize("lesson", lessons())
def test_lesson_in_the_browser(lab, browser, page, artifacts, lesson):
    summary = ""

    def check(page) -> Notebook:
        nonlocal summary
        nb = Notebook(page, lab, f"notebooks/{lesson}")
        try:
            summary = check_notebook(nb)
            print(f"{lesson}: {summary}")
        finally:
            page.screenshot(path=str(artifacts / lesson.replace(".ipynb", ".png")))
            nb.close()
        return nb
    problems = checked_twice_on_lab_glitch(check, page, lambda: new_page(browser))
    assert not problems, f"{lesson} ({summary}):\n  " + "\n  ".join(problems)


def zh_lessons() -> list[str]:
    from .lab import ROOT
    return sorted(p.name for p in (ROOT / "notebooks" / "zh").glob("*.ipynb"))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("lesson", zh_lessons())
def test_chinese_lesson_in_the_browser(lab, browser, page, artifacts, lesson):
    """The Chinese lessons: Run All with no error, every widget drawn (Chinese hints and labels included), no
    broken picture, an empty Log Console. Their controls are the English lessons' own code, exercised above."""
    def check(page) -> Notebook:
        nb = Notebook(page, lab, f"notebooks/zh/{lesson}")
        try:
            nb.open()
            nb.check_fresh()
            ran_s = nb.run_all(RUN_ALL_TIMEOUT_S)
            widgets = nb.check_rendering()
            nb.problems.extend(nb.js("pictureProblems()"))
            nb.check_log_console()
            print(f"zh/{lesson}: Run All {ran_s:.0f} s, {len(widgets)} widgets")
        finally:
            page.screenshot(path=str(artifacts / ("zh_" + lesson.replace(".ipynb", ".png"))))
            nb.close()
        nb.problems[:] = dict.fromkeys(nb.problems)
        return nb
    problems = checked_twice_on_lab_glitch(check, page, lambda: new_page(browser))
    assert not problems, f"zh/{lesson}:\n  " + "\n  ".join(problems)
