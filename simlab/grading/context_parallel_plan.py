"""Lesson 7's exercise C: a plan for a long-context budget, written as rules.

`check_long_context_plan(choose)`: `choose(budget) -> Plan` must give, for every budget in `BUDGETS` — two described
in the exercise and a variant of each that changes what the rules key on (the sequence length, the GPU's memory,
the GPUs) — a plan that fits and whose predicted step time is within the model's validated error
(`sim.advisor_explain.MODEL_ERROR`) of the best plan known for that budget: the best of the advisor's search and
of every tp·cp·pp·dp layout with each CP variant, ZeRO-0, 1 or 3 and with or without full recomputation
(`best_plan`). While `choose` runs the model's step time is switched off (`grading.hybrid.model_switched_off`): a
search over plans fails; `memory_gb` (memory only) stays on. A failing budget is told the concept, not the plan.

    >>> BUDGETS["8b-64k"].text
    'Llama 3 8B at 65,536 tokens per sequence on 16 × A100 80 GB, 8 per node, over 8 × 200 Gb/s InfiniBand; global batch 16 sequences'
"""
from __future__ import annotations

from dataclasses import dataclass

from ..i18n import N_, _
from ..sim.advisor import evaluate_plan, fits, search
from ..sim.advisor_explain import MODEL_ERROR
from ..sim.hardware import cluster
from ..sim.hybrid import CP_COMMS, Plan, check_plan
from ..sim.hybrid_memory import per_gpu
from ..sim.model import PRESETS
from .hybrid import CONCEPTS, grade_budgets

GB = 1e9
WITHIN = MODEL_ERROR
_BEST: dict = {}


@dataclass(frozen=True)
class LongBudget:
    model_name: str
    seq: int
    gpu: str
    gpus: int
    gpus_per_node: int
    inter_node_gbps: float
    global_batch: int
    english: str  # the budget in words; `text` shows it in the language in force

    @property
    def text(self) -> str:
        return _(self.english)

    @property
    def model(self):
        """The preset at this budget's sequence length."""
        return PRESETS[self.model_name].with_(seq=self.seq)

    def cluster(self):
        return cluster(self.gpu, gpus=self.gpus, gpus_per_node=self.gpus_per_node,
                       inter_node_gbps=self.inter_node_gbps)


SHOWN = ("8b-64k", "70b-128k")  # the exercise's C1 and C2; the others are their variants
BUDGETS = {
    "8b-64k": LongBudget("llama3-8b", 65536, "a100-80gb", 16, 8, 1600.0, 16, N_(
        "Llama 3 8B at 65,536 tokens per sequence on 16 × A100 80 GB, 8 per node, over 8 × 200 Gb/s InfiniBand; "
        "global batch 16 sequences")),
    "70b-128k": LongBudget("llama3-70b", 131072, "h100-80gb", 64, 8, 3200.0, 8, N_(
        "Llama 3 70B at 131,072 tokens per sequence on 64 × H100 80 GB, 8 per node, over 8 × 400 Gb/s InfiniBand; "
        "global batch 8 sequences")),
    "8b-256k": LongBudget("llama3-8b", 262144, "h200", 16, 8, 3200.0, 8, N_(
        "Llama 3 8B at 262,144 tokens per sequence on 16 × H200 141 GB, 8 per node, over 8 × 400 Gb/s "
        "InfiniBand; global batch 8 sequences")),
    "70b-32k": LongBudget("llama3-70b", 32768, "h100-80gb", 32, 8, 3200.0, 16, N_(
        "Llama 3 70B at 32,768 tokens per sequence on 32 × H100 80 GB, 8 per node, over 8 × 400 Gb/s InfiniBand; "
        "global batch 16 sequences")),
}
CONCEPTS_CP = {**CONCEPTS, "cp_comm": N_("CP's K,V exchange: every layer, forward and backward; it hides behind "
                                         "attention's compute only while the blocks are long enough, and crosses "
                                         "the network when the CP group does")}


def memory_gb(budget: LongBudget, plan: Plan) -> dict:
    """GB per GPU that `plan` holds under `budget` (params, grads, optimizer, activations, total), the GPU's usable
    GB and `fits`. Memory only, no time: `choose` may call it. A plan the budget cannot run raises ValueError."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected a simlab.sim.hybrid.Plan, got {type(plan).__name__}")
    model, c = budget.model, budget.cluster()
    check_plan(model, plan, c.gpus, budget.global_batch)
    mem = per_gpu(model, plan, budget.global_batch)
    out = {key: mem[key] / GB for key in ("params", "grads", "optimizer", "activations", "total")}
    return {**out, "usable": c.gpu.usable_memory / GB, "fits": bool(fits(mem, c))}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(budget: LongBudget):
    """Every plan `best_plan` weighs: tp (inside a node) × cp × pp × dp = the GPUs, each CP variant, ZeRO-0, 1 or 3,
    recomputation none or full, sequence parallelism with TP, one sequence per micro-batch."""
    model = budget.model
    for cp in _divisors(budget.gpus):
        if model.seq % (2 * cp):
            continue
        for tp in (t for t in (1, 2, 4, 8) if t <= budget.gpus_per_node and budget.gpus % (t * cp) == 0):
            for pp in _divisors(budget.gpus // (tp * cp)):
                dp = budget.gpus // (tp * cp * pp)
                for comm in (CP_COMMS if cp > 1 else CP_COMMS[:1]):
                    for zero in ((0, 1, 3) if dp * cp > 1 else (0,)):  # ZeRO shards over the DP and CP ranks
                        for recompute in ("none", "full"):
                            yield Plan(tp=tp, cp=cp, pp=pp, dp=dp, cp_comm=comm, zero=zero, recompute=recompute,
                                       sequence_parallel=tp > 1)


def best_plan(key: str) -> dict:
    """The fastest plan that fits `BUDGETS[key]`: the advisor's search, and every plan of `layouts`, evaluated."""
    b = BUDGETS[key]
    model, c = b.model, b.cluster()
    best = search(model, c, b.global_batch, top=1)["best"]
    for plan in layouts(b):
        try:
            r = evaluate_plan(model, c, b.global_batch, plan)
        except ValueError:
            continue
        if r["fits"] and (best is None or r["step_seconds"] < best["step_seconds"]):
            best = r
    return best


def shape_of(plan: Plan) -> str:
    cp = f" × cp {plan.cp} ({plan.cp_comm})" if plan.cp > 1 else ""
    return f"tp {plan.tp}{cp} × pp {plan.pp} × dp {plan.dp}"


def _grade(key: str, plan: Plan) -> tuple[bool, str]:
    """(passed, the line's text after ✓/✗) for one budget."""
    b = BUDGETS[key]
    model, c = b.model, b.cluster()
    try:
        mine = evaluate_plan(model, c, b.global_batch, plan)
    except ValueError as err:
        return False, _("cannot run here: {reason}").format(reason=err)
    shape = shape_of(plan)
    if not mine["fits"]:
        used = mine["bytes_per_gpu"]
        where = ", ".join(f"{k} {used[k] / GB:.1f}" for k in ("params", "grads", "optimizer", "activations"))
        return False, _("{shape} does not fit: {total} GB per GPU ({where}) > {memory} GB usable: activations grow "
                        "with s — split the sequence (CP) or recompute; shard the states (ZeRO, TP, PP)").format(
            shape=shape, total=f"{used['total'] / GB:.1f}", where=where, memory=f"{c.gpu.usable_memory / GB:.0f}")
    if key not in _BEST:  # the model's answer, once per kernel (the grader's, never asked while choose runs)
        _BEST[key] = best_plan(key)
    best = _BEST[key]
    ratio = mine["step_seconds"] / best["step_seconds"]
    if ratio > 1 + WITHIN:
        part = max(best["breakdown"], key=lambda name: mine["breakdown"][name] - best["breakdown"][name])
        concept = _(CONCEPTS_CP[part]) if part in CONCEPTS_CP else part
        return False, _("{shape} fits but is more than the model's error ({within}) slower than the best plan; most "
                        "of the time it loses goes to {concept}").format(
            shape=shape, within=f"{WITHIN:.0%}", concept=concept)
    best_shape = shape_of(Plan(**{k: v for k, v in best["config"].items() if k in Plan.__dataclass_fields__}))
    return True, _("{shape}: {used} of {memory} GB per GPU, {ratio}× the best plan's step ({best})").format(
        shape=shape, used=f"{mine['bytes_per_gpu']['total'] / GB:.1f}", memory=f"{c.gpu.usable_memory / GB:.0f}",
        ratio=f"{ratio:.2f}", best=best_shape)


def check_long_context_plan(choose) -> None:
    """Grade `choose(budget) -> Plan` on every budget in BUDGETS, the model's step time switched off while it runs:
    one line per budget, then the verdict (lesson 6's loop, `grading.hybrid.grade_budgets`)."""
    grade_budgets(choose, BUDGETS, _grade, _("every long-context budget fits and ties with the best plan, and choose "
                                             "never asked the model for a step time"))


__all__ = ["BUDGETS", "SHOWN", "LongBudget", "best_plan", "check_long_context_plan", "memory_gb"]
