"""What every exercise check shares: one stable line per check, which nbval compares.

A check that fails prints a line starting with ✗ that names the case and why, then raises `CheckFailed`
(an AssertionError), so the cell fails under nbval and in JupyterLab alike. In a notebook the ✗ line is
all the learner sees: the traceback through the grader is not theirs to read.
"""
from __future__ import annotations


class CheckFailed(AssertionError):
    """A wrong answer (its ✗ line has been printed)."""


def fail(title: str, case: str, reason: str):
    from ..exec.launch_watch import one_line_in_ipython
    print(f"{title}: ✗ {case}: {reason}")
    one_line_in_ipython(CheckFailed)
    raise CheckFailed(f"{case}: {reason}")
