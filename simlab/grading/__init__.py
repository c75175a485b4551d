"""Checks for the graded exercises, one module per lesson (`simlab.grading.collectives`, `.data_parallel`,
`.zero`, `.pipeline`, `.tensor_parallel`, `.hybrid`). Each check prints one stable line (✓, or ✗ naming the
case), which nbval compares; a failing check raises AssertionError so the cell fails.
"""
