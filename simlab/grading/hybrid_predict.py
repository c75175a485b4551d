"""Checks for lesson 6's capstone, part B: predict a real 3-D run before it runs.

- `check_network_prediction(crosses, busiest)`: the learner says which kinds of group ("tp", "dp", "pp") have
  ranks on more than one node when dp=2 × pp=2 × tp=2 runs on **four nodes of 2 GPUs** (lesson 6 draws the same
  grid on two nodes of 4, where only PP crosses: here the answer differs), and on which kind rank 0 sends the
  most bytes per step; the check launches the run (`parity.hybrid.run_hybrid`, 8 processes) and compares with
  the groups torch built and the bytes each rank really sent.
- `check_tp_bytes_prediction(tp_bytes)`: before the same run the learner says how many bytes global rank 0 (the
  first pipeline stage) sends on its TP group per step. The run is the lesson's with hidden 32 and 8
  micro-batches, so the number is reasoned, not looked up, and it is exact: a byte count is deterministic.

A wrong answer is told the concept it missed, never the measured value. Both checks grade one run
(`PREDICTION_RUN`), launched once per kernel.
"""
from __future__ import annotations

from ..i18n import _
from ..sim.mesh import KINDS
from .common import fail, passed

PREDICTION_GRID = {"dp": 2, "pp": 2, "tp": 2}
# the lesson's small GPT with twice its hidden size (still 4 heads) and twice its micro-batches per replica
PREDICTION_RUN = {**PREDICTION_GRID, "zero": 1, "steps": 1, "hidden": 32, "microbatches": 8}
GPUS_PER_NODE = 2  # four nodes of 2 GPUs: the lesson's grid is drawn on two nodes of 4
BLOCKS_PER_STAGE = 2  # the lesson's GPT: 4 blocks over pp = 2 stages
_RUNS = {}  # the default run's result: both predictions grade one launch


def _prediction_run(run) -> dict:
    """The real run the predictions are graded against: `run(**PREDICTION_RUN)`, or the real launcher's
    result, launched once per kernel (bytes and groups are the same every time it runs)."""
    if run is not None:
        return run(**PREDICTION_RUN)
    if "real" not in _RUNS:
        from ..parity.hybrid import run_hybrid
        _RUNS["real"] = run_hybrid(**PREDICTION_RUN)
    return _RUNS["real"]


def _kinds(value) -> frozenset | None:
    """An answer of one kind ("pp") or several ({"dp", "pp"}) as a set; None if it is neither."""
    items = [value] if isinstance(value, str) else value
    try:
        kinds = frozenset(items)
    except TypeError:
        return None
    return kinds if kinds <= set(KINDS) else None


def check_network_prediction(crosses, busiest: str, run=None) -> None:
    """Grade the two predictions against a real dp=2 × pp=2 × tp=2 run with ZeRO-1 (`run`: the launcher,
    `parity.hybrid.run_hybrid` by default), its ranks on nodes of GPUS_PER_NODE each."""
    title = _("3-D run prediction")
    said = _kinds(crosses)
    if said is None:
        fail(title, "crosses", _("{value}: answer with a set of kinds, each one of {kinds}").format(
            value=repr(crosses), kinds=", ".join(repr(k) for k in KINDS)))
    if busiest not in KINDS:
        fail(title, "busiest", _("{value}: answer with one of {kinds}").format(
            value=repr(busiest), kinds=", ".join(repr(k) for k in KINDS)))
    real = _prediction_run(run)
    world = sum(len(g) for g in real["groups"]["tp"])
    node = lambda rank: rank // GPUS_PER_NODE  # noqa: E731 — a one-line local helper
    across = {k for k in KINDS if any(len({node(r) for r in g}) > 1 for g in real["groups"][k])}
    shown = lambda k: " ".join("[" + " ".join(map(str, g)) + "]" for g in real["groups"][k])  # noqa: E731 — a one-line local formatter
    nodes = ", ".join(f"{n}-{n + GPUS_PER_NODE - 1}" for n in range(0, world, GPUS_PER_NODE))
    if said != across:
        fail(title, "crosses", _("you said {said}; the nodes hold ranks {nodes}: write each kind's groups from global "
                                 "rank = (pp_rank·dp + dp_rank)·tp + tp_rank and see which have ranks on two "
                                 "nodes").format(said=", ".join(sorted(said)) or "{}", nodes=nodes))
    sent = {k: real["bytes_sent_per_group"][k][0] for k in KINDS}
    if busiest != max(sent, key=sent.get):
        fail(title, "busiest", _("you said {said}; count what each kind sends per step: TP all-reduces activations "
                                 "in every layer for every micro-batch, PP hands one activation over per stage "
                                 "boundary per micro-batch, DP reduces the gradients (ZeRO-1: reduce-scatters them "
                                 "and all-gathers the parameters) once per step").format(said=busiest))
    passed(title, _("across nodes of {n} GPUs ({nodes}) the {kinds} groups cross: {groups}; rank 0 sends the "
                    "most on its {busiest} group").format(
        n=GPUS_PER_NODE, nodes=nodes, kinds=_(" and ").join(sorted(across)),
        groups="; ".join(shown(k) for k in sorted(across)), busiest=busiest))


def _hint(said: float, sent: int, others: set) -> str:
    """The concept a wrong byte count missed, recognised from how it relates to the real count (never the count)."""
    per_microbatch = 4 * BLOCKS_PER_STAGE + 1  # all-reduces: 2 forward + 2 backward per block, 1 embedding
    if said == sent * (per_microbatch - 1) / per_microbatch:
        return _("You counted the blocks' all-reduces; the vocab-parallel embedding all-reduces its output too, "
                 "once per micro-batch.")
    if said in others:
        return _("That is what a rank of the last stage sends (it also all-reduces for the vocab-parallel loss); "
                 "global rank 0 holds the first stage.")
    if said == 2 * sent:
        return _("A ring all-reduce over N ranks sends 2(N-1)/N of the buffer: over 2 ranks, the buffer once.")
    if said in (sent / 2, sent / 4):
        return _("Check both factors for this run: an activation of b·s·h elements of 4 bytes with its hidden size, "
                 "and its micro-batches per step.")
    return _("Count per micro-batch: each block all-reduces one activation of b·s·h·4 bytes twice forward and twice "
             "backward, the vocab-parallel embedding once; rank 0's stage holds 2 blocks; a ring all-reduce over 2 "
             "ranks sends the buffer once.")


def check_tp_bytes_prediction(tp_bytes, run=None) -> None:
    """Grade a byte count against exactly what global rank 0 sent on its TP group in one step of PREDICTION_RUN."""
    title = _("3-D run, TP bytes")
    if isinstance(tp_bytes, bool) or not isinstance(tp_bytes, (int, float)) or not 0 < tp_bytes < float("inf"):
        fail(title, "tp_bytes", _("{value}: answer with a positive number of bytes").format(value=repr(tp_bytes)))
    real = _prediction_run(run)
    counts = real["bytes_sent_per_group"]["tp"]
    sent = counts[0]
    if tp_bytes != sent:
        fail(title, "tp_bytes", _("you said {said} B; that is not what rank 0 sent on its TP group in one step. "
                                  "{hint}").format(said=f"{tp_bytes:,.0f}" if tp_bytes == int(tp_bytes) else
                                                   f"{tp_bytes:,}", hint=_hint(tp_bytes, sent, set(counts) - {sent})))
    passed(title, _("you said {said} B; rank 0 sent exactly that on its TP group in one step").format(
        said=f"{sent:,}"))
