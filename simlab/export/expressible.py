"""The fastest plan a framework can run: the advisor's ranking, filtered by what the framework can say.

The advisor (`simlab.sim.advisor.search`) ranks every plan by the model's step time; an exporter refuses in one
line what its framework cannot express (DeepSpeed's pipeline engine: no ZeRO-2/3, no interleaving, no
gradient reduction under the backward). Choosing a framework is itself a constraint, and its price is a number:
the best plan it accepts against the best plan overall. What overlaps with compute is the framework's setting,
not a searched knob, so the search runs once per overlap setting and the fastest accepted plan wins.

    best_expressible("deepspeed", model, cluster, 1536)   # {"best", "plan", "overall", "overall_refused", …}
"""
from __future__ import annotations

import json

from .._checks import check_choice, check_int
from ..i18n import _
from ..sim.advisor import search
from ..sim.hybrid import Plan
from .common import check_kernel

OVERLAP_SETTINGS = ("dp,params", "dp", "params", "none")  # what a framework may hide behind compute
TARGET_LOSS = {"torchtitan": "chunked"}  # how a framework computes the loss (`hybrid.LOSSES`), where it is not fused


def best_expressible(target: str, model, cluster, global_batch: int, precision: str = "mixed",
                     attention: str = "flash", bucket: tuple = (), scan: int = 400, cp_comm: str = "ring",
                     capacity: float = 0.0, loss: str | None = None, **fixed) -> dict:
    """The fastest fitting plan `target` accepts, among the `scan` fastest of each overlap setting. `loss`: the
    target's own unless given (torchtitan's chunked fp32 cross-entropy, `TARGET_LOSS`; a fused loss elsewhere).

    Returns "best" (the advisor's row for it, or None), "plan" (its `Plan`), "text" (the framework's file for
    it), "overall" (the advisor's best
    under any setting), "overall_refused" (the one-line reason `target` gives for the overall best, or None if
    it accepts it), "slower" (best's step time / overall's) and "scanned" (plans tried)."""
    from . import TARGETS, emit
    check_choice("target", target, TARGETS)
    check_int("scan", scan, 1, 10_000)
    check_kernel(attention)  # every target refuses it: said once, before any search
    outcomes = {}  # plan → (the framework's text, None) or (None, its one-line refusal): each plan tried once

    def attempt(row) -> tuple:
        key = json.dumps(row["config"], sort_keys=True)
        if key not in outcomes:
            try:
                outcomes[key] = (emit(target, model, cluster, global_batch,
                                      Plan(**row["config"], precision=precision)), None)
            except ValueError as err:
                outcomes[key] = (None, str(err))
        return outcomes[key]

    overall, best, text, tried = None, None, None, 0
    for overlap in OVERLAP_SETTINGS:
        found = search(model, cluster, global_batch, precision=precision, top=scan, attention=attention,
                       overlap=overlap, bucket=bucket, cp_comm=cp_comm, capacity=capacity,
                       loss=loss or TARGET_LOSS.get(target, "fused"), **fixed)
        for row in found["candidates"]:
            if overall is None or row["step_seconds"] < overall["step_seconds"]:
                overall = row
            if best is not None and row["step_seconds"] >= best["step_seconds"]:
                break  # ranked by time: nothing later in this list beats the plan already accepted
            tried += 1
            accepted, _refusal = attempt(row)
            if accepted is not None:
                best, text = row, accepted
                break
    if overall is None:
        return {"best": None, "plan": None, "text": None, "overall": None, "overall_refused": None,
                "slower": None, "scanned": tried}
    return {"best": best, "plan": Plan(**best["config"], precision=precision) if best else None, "text": text,
            "overall": overall, "overall_refused": attempt(overall)[1],
            "slower": best["step_seconds"] / overall["step_seconds"] if best else None, "scanned": tried}


def _plan_words(config: dict) -> str:
    """'tp 8 × pp 16 × dp 8, ZeRO-1, 1f1b, micro-batch 1, overlap none': the knobs a framework's refusal is about."""
    cp = f" × cp {config['cp']} ({config['cp_comm']})" if config.get("cp", 1) > 1 else ""
    ep = f", ep {config['ep']}" if config.get("ep", 1) > 1 else ""
    return (f"tp {config['tp']}{cp} × pp {config['pp']} × dp {config['dp']}{ep}, ZeRO-{config['zero']}, "
            f"{config['schedule']}"
            + (f"×{config['chunks']}" if config["chunks"] > 1 else "") + ", " + _("micro-batch {b}").format(
                b=config["microbatch"]) + ", " + _("overlap {what}").format(what=config["overlap"]))


def price_text(found: dict, target: str) -> str:
    """What `best_expressible` found, in the learner's language: whether the framework runs the advisor's best
    plan, and if not why, which plan it runs instead and at what price in step time."""
    if found["best"] is None:
        return _("{target} can run none of the plans that fit: {why}").format(
            target=target, why=found["overall_refused"] or "—")
    if found["overall_refused"] is None:
        return _("{target} runs the advisor's best plan as it is: {plan}").format(
            target=target, plan=_plan_words(found["best"]["config"]))
    return "\n".join([
        _("{target} cannot run the advisor's best plan ({plan}): {why}").format(
            target=target, plan=_plan_words(found["overall"]["config"]), why=found["overall_refused"]),
        _("its fastest plan: {plan}, {slower:.3f}× the best plan's step time").format(
            plan=_plan_words(found["best"]["config"]), slower=found["slower"])])
