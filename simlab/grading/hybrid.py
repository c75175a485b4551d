"""Checks for lesson 6's capstone: choose a plan for three budgets, then predict a real 3-D run.

- `check_budget_plan(key, plan)`: the plan must be valid for the budget (`sim.hybrid.check_plan`), fit in the
  GPU's memory (and the host's, under Offload), and take at most 10 % longer per step than the advisor's
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

from ..sim.advisor import evaluate_plan, family, search
from ..sim.hardware import cluster
from ..sim.hybrid import Plan
from ..sim.mesh import KINDS
from ..sim.model import PRESETS
from .common import fail

WITHIN = 0.10  # a plan within 10 % of the best predicted step time passes
GB = 1e9


@dataclass(frozen=True)
class Budget:
    model: str
    gpu: str
    gpus: int
    gpus_per_node: int
    inter_node_gbps: float
    global_batch: int
    text: str

    def cluster(self):
        return cluster(self.gpu, gpus=self.gpus, gpus_per_node=self.gpus_per_node,
                       inter_node_gbps=self.inter_node_gbps)


BUDGETS = {
    "70b-ethernet": Budget("llama2-70b", "a100-80gb", 64, 8, 100.0, 512,
                           "Llama-2 70B on 64 × A100 80 GB, 8 per node, over 100 Gb/s Ethernet; "
                           "global batch 512 sequences"),
    "7b-workstation": Budget("llama2-7b", "rtx-4090", 8, 8, 100.0, 64,
                             "Llama-2 7B on one workstation of 8 × RTX 4090 (24 GB, PCIe, no NVLink); "
                             "global batch 64 sequences"),
    "175b-h100": Budget("gpt3-175b", "h100-80gb", 256, 8, 3200.0, 1024,
                        "GPT-3 175B on 256 × H100 80 GB, 8 per node, over 8 × 400 Gb/s InfiniBand; "
                        "global batch 1024 sequences"),
}


def _parts(d: dict, total: float) -> str:
    top = sorted(d.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{k} {v:.3g} s ({v / total:.0%})" for k, v in top if v > 0)


def check_budget_plan(key: str, plan) -> None:
    """Grade one `Plan` for `BUDGETS[key]`: valid, fits, and within 10 % of the best predicted step time."""
    title = f"budget {key!r}"
    if key not in BUDGETS:
        fail("budget", repr(key), f"not one of {', '.join(BUDGETS)}")
    b = BUDGETS[key]
    if not isinstance(plan, Plan):
        fail(title, "plan", f"expected a simlab.sim.hybrid.Plan(tp=…, pp=…, dp=…, …), got {type(plan).__name__}")
    c, model = b.cluster(), PRESETS[b.model]
    try:
        mine = evaluate_plan(model, c, b.global_batch, plan)
    except ValueError as err:
        fail(title, "plan", str(err))
    if not mine["fits"]:
        used = mine["bytes_per_gpu"]
        where = ", ".join(f"{k} {used[k] / GB:.1f}" for k in ("params", "grads", "optimizer", "activations"))
        host = (f"; the host holds {mine['cpu_bytes_per_gpu'] * c.gpus_per_node / GB:.0f} GB of "
                f"{c.host_memory / GB:.0f} GB per node" if plan.offload else "")
        fail(title, "does not fit", f"{used['total'] / GB:.1f} GB per GPU ({where}) > {c.gpu.memory / GB:.0f} GB{host}")
    best = search(model, c, b.global_batch, top=1)["best"]
    ratio = mine["step_seconds"] / best["step_seconds"]
    if ratio > 1 + WITHIN:
        fail(title, "too slow", f"{mine['step_seconds']:.3g} s per step is {ratio:.2f}× the best plan's "
             f"{best['step_seconds']:.3g} s ({family(best['config'])}); yours goes to "
             f"{_parts(mine['breakdown'], mine['step_seconds'])}; the best's to "
             f"{_parts(best['breakdown'], best['step_seconds'])}")
    print(f"{title}: ✓ {family(plan.to_dict())} fits ({mine['bytes_per_gpu']['total'] / GB:.1f} of "
          f"{c.gpu.memory / GB:.0f} GB per GPU) and takes {mine['step_seconds']:.3g} s per step, "
          f"{ratio:.2f}× the best plan's {best['step_seconds']:.3g} s")


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
    title = "3-D run prediction"
    for name, value in (("crosses", crosses), ("busiest", busiest)):
        if value not in KINDS:
            fail(title, name, f"{value!r}: answer with one of {', '.join(repr(k) for k in KINDS)}")
    real = _prediction_run(run)
    node = lambda rank: rank // GPUS_PER_NODE  # noqa: E731
    across = [k for k in KINDS if any(len({node(r) for r in g}) > 1 for g in real["groups"][k])]
    shown = lambda k: " ".join("[" + " ".join(map(str, g)) + "]" for g in real["groups"][k])  # noqa: E731
    if [crosses] != across:
        fail(title, "crosses", f"you said {crosses}; the run's {crosses} groups are {shown(crosses)}, all inside a "
             f"node (ranks 0-3, 4-7); the {' and '.join(across)} groups {shown(across[0])} cross")
    sent = {k: real["bytes_sent_per_group"][k][0] for k in KINDS}
    most = max(sent, key=sent.get)
    table = ", ".join(f"{k} {v:,} B" for k, v in sent.items())
    if busiest != most:
        fail(title, "busiest", f"you said {busiest}; rank 0 sent {table} per step: {most} carries the most")
    print(f"{title}: ✓ the {crosses} groups ({shown(crosses)}) cross nodes; rank 0 sent {table} per step: "
          f"{busiest} the most")


def check_tp_bytes_prediction(tp_bytes, run=None) -> None:
    """Grade a byte count against what rank 0 really sent on its TP group in one step of `PREDICTION_RUN`."""
    title = "3-D run, TP bytes"
    if isinstance(tp_bytes, bool) or not isinstance(tp_bytes, (int, float)) or not 0 < tp_bytes < float("inf"):
        fail(title, "tp_bytes", f"{tp_bytes!r}: answer with a positive number of bytes")
    real = _prediction_run(run)
    sent = real["bytes_sent_per_group"]["tp"][0]
    ratio = tp_bytes / sent
    if abs(tp_bytes - sent) > BYTES_WITHIN * sent:
        fail(title, "tp_bytes", f"you said {tp_bytes:,.0f} B; rank 0 sent {sent:,} B on its TP group per step "
             f"(yours is {ratio:.2f}× that). Per micro-batch TP all-reduces an activation of b·s·h·4 bytes: in "
             f"each block 2 forward and 2 backward, plus one for the vocab-parallel embedding; over 2 ranks a "
             f"ring all-reduce sends the whole buffer once")
    print(f"{title}: ✓ you said {tp_bytes:,.0f} B; rank 0 sent {sent:,} B on its TP group per step "
          f"({ratio:.2f}×, within {BYTES_WITHIN:.0%})")
