"""Checks for lesson 7's context-parallel exercises. Predict, then run.

- `check_ring_bytes_prediction(fn, run=None)` (exercise A): `fn(world_size, seq, heads, kv_heads, head_dim, batch,
  itemsize)` → the bytes ONE rank sends in one forward + backward of zig-zag ring attention. Graded first on
  `SHAPES` (none printed by the lesson; one rank alone, GQA, 2-byte elements among them) against the closed form
  `sim.context_parallel_costs.costs("ring", …).bytes_sent`, exactly; an answer that calls simlab while it runs is
  refused, so the formula is the learner's own. Then `RING_RUN`, a shape the lesson never ran, is launched on real
  processes (`parity.context_parallel.run_context_parallel`) after the answer is written, and `fn`'s number must
  equal what every rank really sent. A wrong answer is told the concept it missed (the dK,dV that travel back, N − 1
  hops and not N, GQA's kv_heads, K and V both, a rank's s/N tokens, the element size, one rank alone), never the
  value.
- `check_long_context_plan(choose)` (exercise C) lives in `grading.context_parallel_plan` and is re-exported here.

As in every `simlab.grading` module: one ✓ or ✗ line naming the case; a failure raises AssertionError.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..i18n import _
from ..sim.context_parallel_costs import costs
from .common import fail, first_call, passed
from .context_parallel_plan import BUDGETS, check_long_context_plan, memory_gb  # noqa: F401 — exercise C, re-exported

SIMLAB = str(Path(costs.__code__.co_filename).parent.parent) + os.sep  # simlab/: what an answer may not call
ARGS = ("world_size", "seq", "heads", "kv_heads", "head_dim", "batch", "itemsize")
# (world_size, seq, heads, kv_heads, head_dim, batch, itemsize): zig-zag needs seq divisible by 2·world_size
SHAPES = ((4, 64, 8, 8, 16, 1, 4), (8, 128, 32, 8, 128, 3, 2), (2, 12, 6, 2, 8, 3, 4), (6, 48, 4, 1, 32, 1, 2),
          (5, 40, 10, 5, 4, 2, 4), (1, 16, 4, 4, 8, 1, 4), (16, 1024, 64, 8, 128, 1, 2))
# the real run: 3 processes, GQA (4 query heads share 2 K,V heads), 2 sequences; the lesson runs other shapes
RING_RUN = {"world_size": 3, "seq": 24, "heads": 4, "kv_heads": 2, "head_dim": 8, "batch": 2}
_RUNS: dict = {}  # the real run's result: launched once per kernel (its byte counts never change)


def truth(world_size, seq, heads, kv_heads, head_dim, batch, itemsize) -> int:
    """The closed form the answer is graded against: a rank's forward + backward bytes of the zig-zag ring."""
    return costs("ring", world_size=world_size, seq=seq, heads=heads, head_dim=head_dim, kv_heads=kv_heads,
                 batch=batch, itemsize=itemsize, layout="zigzag").bytes_sent


def _calls_into_simlab(fn, *args):
    """`fn(*args)`, and the first simlab function (outside simlab.grading) it called, or None."""
    return first_call(fn, lambda code: f"{Path(code.co_filename).stem}.{code.co_name}"
                      if code.co_filename.startswith(SIMLAB) else None,
                      *args)


def _number(title: str, case: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")):
        fail(title, case, _("returned {value}: return a number of bytes").format(value=f"{value!r:.60}"))
    return float(value)


def _hint(said: float, case: tuple) -> str:
    """The concept a wrong count missed, recognised from how it relates to the right one (never the count)."""
    n, seq, heads, kv_heads, head_dim, batch, itemsize = case
    right = truth(*case)
    if n == 1:
        return _("one rank alone holds the whole sequence: no K,V block has anywhere to go")
    block = right / (3 * n - 2)  # one rank's K,V block in bytes
    if said == (n - 1) * block:
        return _("that is the forward alone: the backward sends the K,V blocks around again, and the dK,dV behind "
                 "them")
    if said == 2 * (n - 1) * block:
        return _("you left out the dK,dV: in the backward each block's gradient travels on behind it and ends at "
                 "the block's owner")
    if said == 3 * (n - 1) * block:
        return _("the dK,dV make N hops, not N − 1: after the last rank adds its share they still have to reach "
                 "the block's owner")
    if said in (3 * n * block, (2 * n - 1) * block + n * block):
        return _("N − 1 hops bring every K,V block to every other rank: the block a rank starts with is never sent "
                 "back to it")
    if heads != kv_heads and said == right * heads / kv_heads:
        return _("grouped-query attention: K and V have kv_heads heads, not heads — the queries never travel")
    if said * 2 == right:
        return _("a block is K and V together: 2 · b · (s/N) · kv_heads · head_dim elements")
    if said == right * n:
        return _("a rank holds s/N tokens of the sequence: its K,V block is of those, not the whole sequence")
    if itemsize != 4 and said == right * 4 / itemsize:
        return _("use the element size you are given (itemsize), not 4 bytes")
    if batch > 1 and said * batch == right:
        return _("every block holds the whole micro-batch: it grows with batch")
    return _("count one rank's K,V block B = 2 · b · (s/N) · kv_heads · head_dim · itemsize bytes, then how many "
             "blocks it sends forward, and backward (K,V again, and the dK,dV)")


def _real_run(run) -> dict:
    """The ring on RING_RUN's shape: `run(**RING_RUN)` or the real launch, once per kernel."""
    if run is not None:
        return run(**RING_RUN)
    if "real" not in _RUNS:
        from ..parity.context_parallel import run_context_parallel
        _RUNS["real"] = run_context_parallel(**RING_RUN, variant="ring", layout="zigzag", compare_torch=False)
    return _RUNS["real"]


def check_ring_bytes_prediction(fn, run=None) -> None:
    """Grade `fn(world_size, seq, heads, kv_heads, head_dim, batch, itemsize)` on SHAPES against the closed form,
    then on RING_RUN against the bytes every rank of a real zig-zag ring run sent (`run`: the launcher, for
    tests; default the real one, `parity.context_parallel.run_context_parallel`)."""
    title = _("ring attention's bytes")
    if not callable(fn):
        fail(title, "fn", _("expected a function of ({args}), got {type}").format(
            args=", ".join(ARGS), type=type(fn).__name__))
    for case in SHAPES:
        label = ", ".join(f"{k}={v}" for k, v in zip(ARGS, case))
        said, called = _calls_into_simlab(fn, *case)
        if called:
            fail(title, label, _("it calls simlab's own model ({name}): write the formula yourself").format(
                name=called))
        if _number(title, label, said) != truth(*case):
            fail(title, label, _hint(float(said), case))
    r = RING_RUN
    case = (r["world_size"], r["seq"], r["heads"], r["kv_heads"], r["head_dim"], r["batch"], 4)
    said, _called = _calls_into_simlab(fn, *case)
    real = _real_run(run)
    sent = list(real["bytes_sent_per_rank"])
    label = _("the real run ({shape})").format(shape=", ".join(f"{k}={v}" for k, v in zip(ARGS, case)))
    if not real.get("matches_plan") or len(set(sent)) != 1:
        fail(title, label, _("the run did not follow its plan: run the cell again"))
    if _number(title, label, said) != sent[0]:
        fail(title, label, _hint(float(said), case))
    passed(title, _("{n} shapes exactly; then {ranks} real processes each sent {sent} B in one forward and backward, "
                    "as you said").format(n=len(SHAPES), ranks=len(sent), sent=f"{sent[0]:,}"))
