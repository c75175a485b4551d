"""Checks for lesson 6's capstone: write your own 适用场景 as a function, reason about two ZeRO-3 plans, then
predict a real 3-D run (`hybrid_predict`).

- `check_zero3_pair(dp_crosses, faster, decides)`: two ZeRO-3 plans for the 70B over Ethernet (`PAIR`) that
  differ in where their DP group sits. Before evaluating them the learner says whether each plan's DP group has
  ranks on two nodes (from Megatron's rank order), which plan is faster, and which part of the step decides it;
  graded against `sim.mesh.Mesh` and `sim.advisor.evaluate_plan`'s breakdown.
- `check_choose(choose)`: `choose(budget) -> Plan` must give, for every budget in `BUDGETS` — three described in
  the exercise and three variants of them that each change what the rules key on (a GPU, the GPUs, the
  network) — a plan that fits and is within the model's validated error (`sim.advisor_explain.MODEL_ERROR`) of
  the advisor's best step time. While `choose` runs, the model's step time is switched off (`model_switched_off`):
  the advisor, `evaluate_plan` and `sim.hybrid_time.step` raise wherever they are bound, so a search over plans
  fails and a function that reasons from the budget's bytes and links passes. `memory_gb` (memory only) stays on.
  A failing budget is told the concept, not the best plan: what does not fit, or the part of the step where it
  loses most time and what governs that part.

As in every `simlab.grading` module: a ✓ or ✗ line naming the case; a failure raises AssertionError.

    >>> BUDGETS["70b-ethernet"].text
    'Llama-2 70B on 64 × A100 80 GB, 8 per node, over 100 Gb/s Ethernet; global batch 512 sequences'
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass

from ..i18n import N_, _
from ..sim import advisor, hybrid_time
from ..sim.advisor import evaluate_plan, family, fits, search
from ..sim.advisor_explain import MODEL_ERROR
from ..sim.hardware import cluster
from ..sim.hybrid import Plan, check_plan
from ..sim.hybrid_memory import per_gpu
from ..sim.mesh import KINDS, Mesh
from ..sim.model import PRESETS
from .common import fail, passed
from .hybrid_predict import PREDICTION_RUN, check_network_prediction, check_tp_bytes_prediction  # noqa: F401 — part B

WITHIN = MODEL_ERROR  # a plan that ties with the best within the model's error passes: it cannot tell them apart
GB = 1e9


@dataclass(frozen=True)
class Budget:
    model: str
    gpu: str
    gpus: int
    gpus_per_node: int
    inter_node_gbps: float
    global_batch: int
    english: str  # the budget in words; `text` shows it in the language in force

    @property
    def text(self) -> str:
        return _(self.english)

    def cluster(self):
        return cluster(self.gpu, gpus=self.gpus, gpus_per_node=self.gpus_per_node,
                       inter_node_gbps=self.inter_node_gbps)


SHOWN = ("70b-ethernet", "7b-workstation", "175b-h100")  # the exercise's A1-A3; the rest are their variants
BUDGETS = {
    "70b-ethernet": Budget("llama2-70b", "a100-80gb", 64, 8, 100.0, 512,
                           N_("Llama-2 70B on 64 × A100 80 GB, 8 per node, over 100 Gb/s Ethernet; "
                              "global batch 512 sequences")),
    "7b-workstation": Budget("llama2-7b", "rtx-4090", 8, 8, 100.0, 64,
                             N_("Llama-2 7B on one workstation of 8 × RTX 4090 (24 GB, PCIe, no NVLink); "
                                "global batch 64 sequences")),
    "175b-h100": Budget("gpt3-175b", "h100-80gb", 256, 8, 3200.0, 1024,
                        N_("GPT-3 175B on 256 × H100 80 GB, 8 per node, over 8 × 400 Gb/s InfiniBand; "
                           "global batch 1024 sequences")),
    "7b-a100": Budget("llama2-7b", "a100-80gb", 8, 8, 100.0, 64,
                      N_("Llama-2 7B on one node of 8 × A100 80 GB (NVLink); global batch 64 sequences")),
    "70b-h200": Budget("llama2-70b", "h200", 32, 8, 3200.0, 256,
                       N_("Llama-2 70B on 32 × H200 141 GB, 8 per node, over 8 × 400 Gb/s InfiniBand; "
                          "global batch 256 sequences")),
    "175b-512": Budget("gpt3-175b", "h100-80gb", 512, 8, 3200.0, 1024,
                       N_("GPT-3 175B on 512 × H100 80 GB, 8 per node, over 8 × 400 Gb/s InfiniBand; "
                          "global batch 1024 sequences")),
}
# what governs each part of the step: the hint a plan that loses time there gets (never the best plan)
CONCEPTS = {
    "compute": N_("the compute: recomputation redoes the forward, and thin GEMMs (a wide TP, a micro-batch of one) "
                  "run below the GPU's best rate"),
    "tp_comm": N_("TP's all-reduces, 4 per layer per micro-batch: they need NVLink, inside a node, and grow with the "
                  "TP size"),
    "pp_p2p": N_("the pipeline's hand-overs, one activation per stage boundary per micro-batch"),
    "cp_comm": N_("context parallelism's K,V exchange, every layer: does it hide under attention, and which link does "
                  "its group cross?"),
    "ep_comm": N_("the experts' all-to-alls, four per MoE layer: which link does the EP group cross?"),
    "pp_bubble": N_("the pipeline's bubble, about (pp-1)/m of the step: fewer stages or more micro-batches"),
    "dp_comm": N_("DP's traffic: does its group cross the network, and does it talk once per step (ZeRO-0/1) or "
                  "every micro-batch (ZeRO-2/3)?"),
    "overlap": N_("collectives running beside compute slow it: fewer of them"),
    "offload": N_("Offload's PCIe traffic and the host's Adam: only when nothing else fits"),
    "optimizer": N_("the optimizer step: shard it (ZeRO) so each GPU updates less"),
}
MODEL_TIME = ("search", "evaluate_plan", "by_family", "evaluate")  # the advisor's, besides hybrid_time's step


def memory_gb(budget: Budget, plan: Plan) -> dict:
    """GB per GPU that `plan` holds under `budget` (params, grads, optimizer, activations, total), the GPU's
    usable GB, the host's GB per node under Offload, and `fits`. Memory only, no time: `choose` may call it.
    A plan the budget cannot run (the GPUs, the batch or the layers not divided evenly) raises ValueError."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan: expected a simlab.sim.hybrid.Plan, got {type(plan).__name__}")
    model, c = PRESETS[budget.model], budget.cluster()
    check_plan(model, plan, c.gpus, budget.global_batch)
    mem = per_gpu(model, plan, budget.global_batch)
    out = {key: mem[key] / GB for key in ("params", "grads", "optimizer", "activations", "total")}
    return {**out, "usable": c.gpu.usable_memory / GB, "host_per_node": mem["cpu"] * c.gpus_per_node / GB,
            "host_memory": c.host_memory / GB, "fits": bool(fits(mem, c))}


class AskedTheModel(BaseException):
    """Raised where `choose` calls the model's step time; a BaseException, so `except Exception` lets it by."""


@contextmanager
def model_switched_off(fn=None):
    """While inside: the advisor's search and evaluation and `hybrid_time.step` raise AskedTheModel wherever a
    simlab module (or `fn`'s globals: the notebook) binds them; yields the list of the names called."""
    off = {id(getattr(advisor, name)): name for name in MODEL_TIME}
    off.update({id(hybrid_time.step): "step", id(hybrid_time.pipeline_trace): "pipeline_trace"})
    called: list[str] = []

    def blocked(name):
        def refuse(*args, **kwargs):
            called.append(name)
            raise AskedTheModel(name)
        return refuse
    spaces = [vars(m) for name, m in list(sys.modules.items()) if name.split(".")[0] == "simlab" and m is not None]
    spaces += [fn.__globals__] if hasattr(fn, "__globals__") else []
    saved = [(space, key, value) for space in spaces for key, value in list(space.items())
             if callable(value) and id(value) in off]
    for space, key, value in saved:
        space[key] = blocked(off[id(value)])
    try:
        yield called
    finally:
        for space, key, value in saved:
            space[key] = value


def ask_plan(choose, budget):
    """(the plan `choose` returns for `budget`, or None with the reason in words), the model's step time switched
    off while it runs. The stub's NotImplementedError passes through, as in every exercise."""
    plan, error = None, None
    with model_switched_off(choose) as called:
        try:
            plan = choose(budget)
        except NotImplementedError:
            raise
        except AskedTheModel:
            pass
        except Exception as err:  # noqa: BLE001 — the learner's code: any error is reported in one line
            error = err
    if called:  # first: an error after a refusal it swallowed is the refusal's
        return None, _("asked the model for a step time ({name}): decide from the budget's bytes and links; "
                       "memory_gb is allowed").format(name=called[0])
    if error is not None:
        return None, _("raised {error}").format(error=f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}")
    if not isinstance(plan, Plan):
        return None, _("returned {type}, not a simlab.sim.hybrid.Plan").format(type=type(plan).__name__)
    return plan, ""


def crossing(plan: Plan, gpus_per_node: int) -> list[str]:
    """The kinds of group of `plan` that have ranks on more than one node."""
    mesh = Mesh(pp=plan.pp, dp=plan.dp, tp=plan.tp)
    return [kind for kind in KINDS if mesh.link(kind, gpus_per_node) == "inter-node"]


def _grade(key: str, plan: Plan) -> tuple[bool, str]:
    """(passed, the line's text after ✓/✗) for one budget."""
    b = BUDGETS[key]
    model, c = PRESETS[b.model], b.cluster()
    try:
        mine = evaluate_plan(model, c, b.global_batch, plan)
    except ValueError as err:
        return False, _("cannot run here: {reason}").format(reason=err)
    shape = f"tp {plan.tp} × pp {plan.pp} × dp {plan.dp}"
    if not mine["fits"]:
        used = mine["bytes_per_gpu"]
        where = ", ".join(f"{k} {used[k] / GB:.1f}" for k in ("params", "grads", "optimizer", "activations"))
        host = _("; the host holds {held} GB of {memory} GB per node").format(
            held=f"{mine['cpu_bytes_per_gpu'] * c.gpus_per_node / GB:.0f}", memory=f"{c.host_memory / GB:.0f}") \
            if plan.offload else ""
        return False, _("{shape} does not fit: {total} GB per GPU ({where}) > {memory} GB usable{host}: shard more "
                        "(ZeRO over DP, TP inside a node, PP) or recompute").format(
            shape=shape, total=f"{used['total'] / GB:.1f}", where=where, memory=f"{c.gpu.usable_memory / GB:.0f}",
            host=host)
    best = search(model, c, b.global_batch, top=1)["best"]
    ratio = mine["step_seconds"] / best["step_seconds"]
    if ratio > 1 + WITHIN:
        part = max(best["breakdown"], key=lambda name: mine["breakdown"][name] - best["breakdown"][name])
        return False, _("{family}, {shape}, fits but is more than the model's error ({within}) slower than the best "
                        "plan; most of the time it loses goes to {concept}").format(
            family=family(plan.to_dict()), shape=shape, within=f"{WITHIN:.0%}", concept=_(CONCEPTS[part]))
    network = ", ".join(crossing(plan, b.gpus_per_node)) or _("nothing")
    return True, _("{family}, {shape}: {used} of {memory} GB per GPU, {ratio}× the advisor's best ({best}); "
                   "across the network: {network}").format(
        family=family(plan.to_dict()), shape=shape, used=f"{mine['bytes_per_gpu']['total'] / GB:.1f}",
        memory=f"{c.gpu.usable_memory / GB:.0f}", ratio=f"{ratio:.2f}", best=family(best["config"]), network=network)


def check_choose(choose) -> None:
    """Grade `choose(budget) -> Plan` on every budget in BUDGETS, with the model's step time switched off while
    it runs: one line per budget, then the verdict."""
    grade_budgets(choose, BUDGETS, _grade, _("every budget fits and ties with the advisor's best, and choose never "
                                             "asked the model for a step time"))


def grade_budgets(choose, budgets: dict, grade, verdict: str) -> None:
    """Lessons 6 and 7's plan exercises: ask `choose` for each budget (`ask_plan`), `grade(key, plan)` -> (passed,
    the line after ✓/✗), one line per budget, then one verdict."""
    title = _("choose(budget)")
    if not callable(choose):
        fail(title, "choose", _("expected a function of one budget, got {type}").format(type=type(choose).__name__))
    failed = 0
    for key, budget in budgets.items():
        plan, problem = ask_plan(choose, budget)
        ok, line = grade(key, plan) if plan is not None else (False, problem)
        failed += not ok
        print((_("{title}: ✓ {detail}") if ok else _("{title}: ✗ {detail}")).format(title=key, detail=line))
    if failed:
        fail(title, _("{n} of {total} budgets").format(n=failed, total=len(budgets)), _("see the lines above"))
    passed(title, verdict)


# Two ZeRO-3 plans for the 70B over Ethernet: the same family, the same memory order, a different DP group
PAIR_BUDGET = "70b-ethernet"
PAIR = {"P": Plan(tp=4, pp=4, dp=4, zero=3, sequence_parallel=True),
        "Q": Plan(tp=2, pp=8, dp=4, zero=3, sequence_parallel=True)}


def check_zero3_pair(dp_crosses, faster, decides) -> None:
    """Grade the three answers about PAIR: {"P": bool, "Q": bool}, "P" or "Q", and a breakdown key."""
    title = _("two ZeRO-3 plans")
    b = BUDGETS[PAIR_BUDGET]
    model, c = PRESETS[b.model], b.cluster()
    runs = {name: evaluate_plan(model, c, b.global_batch, plan) for name, plan in PAIR.items()}
    parts = tuple(runs["P"]["breakdown"])
    if not isinstance(dp_crosses, dict) or set(dp_crosses) != set(PAIR) or not all(
            isinstance(v, bool) for v in dp_crosses.values()):
        fail(title, "dp_crosses", _("{value}: answer with a dict of True or False for \"P\" and \"Q\"").format(
            value=repr(dp_crosses)))
    if faster not in PAIR:
        fail(title, "faster", _("{value}: answer with \"P\" or \"Q\"").format(value=repr(faster)))
    if decides not in parts:
        fail(title, "decides", _("{value}: answer with one of {kinds}").format(
            value=repr(decides), kinds=", ".join(repr(p) for p in parts)))
    for name, plan in PAIR.items():
        if dp_crosses[name] != ("dp" in crossing(plan, b.gpus_per_node)):
            fail(title, "dp_crosses", _("not for {name}: in Megatron's order a DP group's ranks are tp apart, so one "
                                        "group spans tp·dp consecutive ranks, and a node holds {node}").format(
                name=name, node=b.gpus_per_node))
    quick = min(runs, key=lambda name: runs[name]["step_seconds"])
    if faster != quick:
        fail(title, "faster", _("ZeRO-3 gathers each layer's weights and reduce-scatters its gradients every "
                                "micro-batch (lesson 3): in which plan does that traffic ride Ethernet?"))
    most = max(parts, key=lambda part: abs(runs["P"]["breakdown"][part] - runs["Q"]["breakdown"][part]))
    if decides != most:
        fail(title, "decides", _("not the part that differs most: both plans do the same FLOPs; which collective "
                                 "runs every micro-batch, and over which link?"))
    slow = "Q" if quick == "P" else "P"
    passed(title, _("{quick} is faster: {quick} {quick_s} s per step ({part} {quick_part} s), {slow} {slow_s} "
                    "s ({part} {slow_part} s)").format(
        quick=quick, slow=slow, part=most, quick_s=f"{runs[quick]['step_seconds']:.3g}",
        slow_s=f"{runs[slow]['step_seconds']:.3g}", quick_part=f"{runs[quick]['breakdown'][most]:.3g}",
        slow_part=f"{runs[slow]['breakdown'][most]:.3g}"))
