"""What every exercise check shares: one stable line per check, which nbval compares.

A check that fails prints a line starting with ✗ that names the case and why, then raises `CheckFailed`
(an AssertionError), so the cell fails under nbval and in JupyterLab alike. In a notebook the ✗ line is
all the learner sees: the traceback through the grader is not theirs to read.
"""
from __future__ import annotations

import sys

from ..i18n import _


class CheckFailed(AssertionError):
    """A wrong answer (its ✗ line has been printed)."""


def passed(title: str, detail: str, case: str | None = None) -> None:
    """Print a check's ✓ line: "title: ✓ detail" (or "title: ✓ case: detail"), its colons the language's own
    (full-width "：" in Chinese)."""
    print(_("{title}: ✓ {detail}").format(title=title, detail=detail) if case is None else
          _("{title}: ✓ {case}: {detail}").format(title=title, case=case, detail=detail))


def failed_line(title: str, case: str, reason: str) -> str:
    """A check's ✗ line: "title: ✗ case: reason", its colons the language's own."""
    return _("{title}: ✗ {case}: {reason}").format(title=title, case=case, reason=reason)


def fail(title: str, case: str, reason: str):
    from ..exec.launch_watch import one_line_in_ipython
    print(failed_line(title, case, reason))
    one_line_in_ipython(CheckFailed)
    raise CheckFailed(f"{case}: {reason}")


def first_call(fn, name_of, *args):
    """`fn(*args)`, and `name_of(code)` for the first function it called that `name_of` names (None if none).
    A profile hook sees every Python call however it was reached (an import, an alias, a subclass, a cache in
    front), and only while `fn` runs: how a grader tells a learner's answer from simlab's own."""
    called = []

    def watch(frame, event, _arg):
        if event == "call" and not called:
            name = name_of(frame.f_code)
            if name is not None:
                called.append(name)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(previous)
    return result, (called[0] if called else None)
