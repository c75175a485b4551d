"""Checks for lesson 6's capstone: choose a plan for three budgets, then predict a real 3-D run.

- `check_budget_plan(key, plan)`: the plan must be valid for the budget (`sim.hybrid.check_plan`), fit in the
  GPU's memory (and the host's, under Offload), and tie with the advisor's best: take at most the model's
  validated error (`sim.advisor_explain.MODEL_ERROR`) longer per step than the advisor's
  best (`sim.advisor.search`). A rejected plan is told why in numbers: the bytes that do not fit, part by
  part, or where its step loses time against the best plan's.
- `check_network_prediction(crosses, busiest)`: before the run the learner says which kind of group ("tp",
  "dp" or "pp") crosses between two nodes of 4 GPUs in dp=2 × pp=2 × tp=2, and which kind carries the most
  bytes for rank 0; the check launches the run (`parity.hybrid.run_hybrid`, 8 processes) and compares with
  the groups torch built and the bytes each rank really sent.
- `check_tp_bytes_prediction(tp_bytes)`: before the same run the learner says how many bytes rank 0 sends on
  its TP group per step. The run is the lesson's with hidden 32 and 8 micro-batches (the lesson measured
  36,864 B with hidden 16 and 4), so the answer is reasoned, not looked up; it must be within 10 % of what
  rank 0 really sent. Both checks grade one run (`PREDICTION_RUN`), launched once per kernel.

As in every `simlab.grading` module: one stable line, ✓ or ✗ naming the case; a failure raises AssertionError.

    >>> BUDGETS["70b-ethernet"].text
    'Llama-2 70B on 64 × A100 80 GB, 8 per node, over 100 Gb/s Ethernet; global batch 512 sequences'
"""
from __future__ import annotations

from dataclasses import dataclass

from ..i18n import N_, _
from ..sim.advisor import evaluate_plan, family, search
from ..sim.advisor_explain import MODEL_ERROR
from ..sim.hardware import cluster
from ..sim.hybrid import Plan
from ..sim.mesh import KINDS
from ..sim.model import PRESETS
from .common import fail

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
}


def _parts(d: dict, total: float) -> str:
    top = sorted(d.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {v:.3g} s ({v / total:.0%})" for k, v in top if v > 0)


def check_budget_plan(key: str, plan) -> None:
    """Grade one `Plan` for `BUDGETS[key]`: valid, fits, and within the model's error of the best step time."""
    title = _("budget {key}").format(key=repr(key))
    if key not in BUDGETS:
        fail(_("budget"), repr(key), _("not one of {keys}").format(keys=", ".join(BUDGETS)))
    b = BUDGETS[key]
    if not isinstance(plan, Plan):
        fail(title, "plan", _("expected a simlab.sim.hybrid.Plan(tp=…, pp=…, dp=…, …), got {type}").format(
            type=type(plan).__name__))
    c, model = b.cluster(), PRESETS[b.model]
    try:
        mine = evaluate_plan(model, c, b.global_batch, plan)
    except ValueError as err:
        fail(title, "plan", str(err))
    if not mine["fits"]:
        used = mine["bytes_per_gpu"]
        where = ", ".join(f"{k} {used[k] / GB:.1f}" for k in ("params", "grads", "optimizer", "activations"))
        host = _("; the host holds {held} GB of {memory} GB per node").format(
            held=f"{mine['cpu_bytes_per_gpu'] * c.gpus_per_node / GB:.0f}", memory=f"{c.host_memory / GB:.0f}") \
            if plan.offload else ""
        fail(title, _("does not fit"), _("{total} GB per GPU ({where}) > {memory} GB usable").format(
            total=f"{used['total'] / GB:.1f}", where=where, memory=f"{c.gpu.usable_memory / GB:.0f}") + host)
    best = search(model, c, b.global_batch, top=1)["best"]
    ratio = mine["step_seconds"] / best["step_seconds"]
    if ratio > 1 + WITHIN:
        fail(title, _("too slow"), _("{mine} s per step is {ratio}× the best plan's {best} s ({family}); yours goes "
                                     "to {mine_parts}; the best's to {best_parts}").format(
            mine=f"{mine['step_seconds']:.3g}", ratio=f"{ratio:.2f}", best=f"{best['step_seconds']:.3g}",
            family=family(best["config"]), mine_parts=_parts(mine["breakdown"], mine["step_seconds"]),
            best_parts=_parts(best["breakdown"], best["step_seconds"])))
    print(f"{title}: ✓ " + _("{family} fits ({used} of {memory} GB usable per GPU) and takes {seconds} s per step, "
                             "{ratio}× the best plan's {best} s").format(
        family=family(plan.to_dict()), used=f"{mine['bytes_per_gpu']['total'] / GB:.1f}",
        memory=f"{c.gpu.usable_memory / GB:.0f}", seconds=f"{mine['step_seconds']:.3g}", ratio=f"{ratio:.2f}",
        best=f"{best['step_seconds']:.3g}"))


PREDICTION_GRID = {"dp": 2, "pp": 2, "tp": 2}
# the lesson's small GPT with twice its hidden size (still 4 heads) and twice its micro-batches per replica
PREDICTION_RUN = {**PREDICTION_GRID, "zero": 1, "steps": 1, "hidden": 32, "microbatches": 8}
GPUS_PER_NODE = 4
BYTES_WITHIN = 0.10  # a byte count within 10 % of the measured one passes
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


def check_network_prediction(crosses: str, busiest: str, run=None) -> None:
    """Grade the two predictions against a real dp=2 × pp=2 × tp=2 run with ZeRO-1 (`run`: the launcher,
    `parity.hybrid.run_hybrid` by default), on two nodes of GPUS_PER_NODE ranks each."""
    title = _("3-D run prediction")
    for name, value in (("crosses", crosses), ("busiest", busiest)):
        if value not in KINDS:
            fail(title, name, _("{value}: answer with one of {kinds}").format(
                value=repr(value), kinds=", ".join(repr(k) for k in KINDS)))
    real = _prediction_run(run)
    node = lambda rank: rank // GPUS_PER_NODE  # noqa: E731 — a one-line local helper
    across = [k for k in KINDS if any(len({node(r) for r in g}) > 1 for g in real["groups"][k])]
    shown = lambda k: " ".join("[" + " ".join(map(str, g)) + "]" for g in real["groups"][k])  # noqa: E731 — a one-line local helper
    if [crosses] != across:
        fail(title, "crosses", _("you said {said}; the run's {said} groups are {groups}, all inside a node (ranks "
                                 "0-3, 4-7); the {across} groups {across_groups} cross").format(
            said=crosses, groups=shown(crosses), across=_(" and ").join(across), across_groups=shown(across[0])))
    sent = {k: real["bytes_sent_per_group"][k][0] for k in KINDS}
    most = max(sent, key=sent.get)
    table = ", ".join(f"{k} {v:,} B" for k, v in sent.items())
    if busiest != most:
        fail(title, "busiest", _("you said {said}; rank 0 sent {table} per step: {most} carries the most").format(
            said=busiest, table=table, most=most))
    print(f"{title}: ✓ " + _("the {crosses} groups ({groups}) cross nodes; rank 0 sent {table} per step: {busiest} "
                             "the most").format(crosses=crosses, groups=shown(crosses), table=table, busiest=busiest))


def check_tp_bytes_prediction(tp_bytes, run=None) -> None:
    """Grade a byte count against what rank 0 really sent on its TP group in one step of `PREDICTION_RUN`."""
    title = _("3-D run, TP bytes")
    if isinstance(tp_bytes, bool) or not isinstance(tp_bytes, (int, float)) or not 0 < tp_bytes < float("inf"):
        fail(title, "tp_bytes", _("{value}: answer with a positive number of bytes").format(
            value=repr(tp_bytes)))
    real = _prediction_run(run)
    sent = real["bytes_sent_per_group"]["tp"][0]
    ratio = tp_bytes / sent
    if abs(tp_bytes - sent) > BYTES_WITHIN * sent:
        fail(title, "tp_bytes", _("you said {said} B; rank 0 sent {sent} B on its TP group per step (yours is "
                                  "{ratio}× that). Per micro-batch TP all-reduces an activation of b·s·h·4 bytes: "
                                  "in each block 2 forward and 2 backward, plus one for the vocab-parallel embedding; "
                                  "over 2 ranks a ring all-reduce sends the whole buffer once").format(
            said=f"{tp_bytes:,.0f}", sent=f"{sent:,}", ratio=f"{ratio:.2f}"))
    print(f"{title}: ✓ " + _("you said {said} B; rank 0 sent {sent} B on its TP group per step ({ratio}×, within "
                             "{within})").format(said=f"{tp_bytes:,.0f}", sent=f"{sent:,}", ratio=f"{ratio:.2f}",
                                                 within=f"{BYTES_WITHIN:.0%}"))
