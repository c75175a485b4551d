"""The fastest plan a framework can run: the advisor's ranking, filtered by what the framework can say.

The advisor (`simlab.sim.advisor.search`) ranks every plan by the model's step time; an exporter refuses in one
line what its framework cannot express (DeepSpeed's pipeline engine: no ZeRO-2/3, no interleaving, no
gradient reduction under the backward). Choosing a framework is itself a constraint, and its price is a number:
the best plan it accepts against the best plan overall. What overlaps with compute is the framework's setting,
not a searched knob, so the search runs once per overlap setting and the fastest accepted plan wins.

    best_expressible("deepspeed", model, cluster, 1536)   # {"best", "plan", "overall", "overall_refused", …}
"""
from __future__ import annotations

from .._checks import check_choice, check_int
from ..sim.advisor import search
from ..sim.hybrid import Plan

OVERLAP_SETTINGS = ("dp,params", "dp", "params", "none")  # what a framework may hide behind compute


def best_expressible(target: str, model, cluster, global_batch: int, precision: str = "mixed",
                     attention: str = "flash", bucket: tuple = (), scan: int = 400, **fixed) -> dict:
    """The fastest fitting plan `target` accepts, among the `scan` fastest of each overlap setting.

    Returns "best" (the advisor's row for it, or None), "plan" (its `Plan`), "overall" (the advisor's best
    under any setting), "overall_refused" (the one-line reason `target` gives for the overall best, or None if
    it accepts it), "slower" (best's step time / overall's) and "scanned" (plans tried)."""
    from . import TARGETS, emit
    check_choice("target", target, TARGETS)
    check_int("scan", scan, 1, 10_000)
    overall, best, tried = None, None, 0
    for overlap in OVERLAP_SETTINGS:
        found = search(model, cluster, global_batch, precision=precision, top=scan, attention=attention,
                       overlap=overlap, **fixed)
        for row in found["candidates"]:
            if overall is None or row["step_seconds"] < overall["step_seconds"]:
                overall = row
            if best is not None and row["step_seconds"] >= best["step_seconds"]:
                break  # ranked by time: nothing later in this list beats the plan already accepted
            tried += 1
            try:
                emit(target, model, cluster, global_batch, Plan(**row["config"], precision=precision))
            except ValueError:
                continue
            best = row
            break
    if overall is None:
        return {"best": None, "plan": None, "overall": None, "overall_refused": None, "slower": None,
                "scanned": tried}
    try:
        emit(target, model, cluster, global_batch, Plan(**overall["config"], precision=precision))
        refused = None
    except ValueError as err:
        refused = str(err)
    return {"best": best, "plan": Plan(**best["config"], precision=precision) if best else None,
            "overall": overall, "overall_refused": refused,
            "slower": best["step_seconds"] / overall["step_seconds"] if best else None, "scanned": tried}
