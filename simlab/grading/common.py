"""What every exercise check shares: one stable line per check, which nbval compares.

A check that fails prints a line starting with ✗ that names the case, then raises AssertionError,
so the cell fails under nbval and in JupyterLab alike.
"""
from __future__ import annotations


def fail(title: str, case: str, reason: str):
    print(f"{title}: ✗ {case}: {reason}")
    raise AssertionError(f"{case}: {reason}")
