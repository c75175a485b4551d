"""One real 3-D run, described once: the plan, the GPT it trains, the batch, and how long and how to run it.

`simlab run hybrid`, `parity.hybrid.run_hybrid` and the workers it starts all read the same `HybridRun`, built
and checked once, before anything runs, by `HybridRun.build` from the small knobs a learner turns. The grid
is named in Megatron's order everywhere: tp (fastest: ranks of one TP group are neighbours), cp, dp, pp.

Teaches what a run of the course's executor is made of, and its defaults, each chosen so that 8 processes
fit on 2 cores:
- the plan (`sim.hybrid.Plan`): tp · cp · dp · pp ranks, b = 2 sequences per micro-batch, ZeRO 0 or 1, 1F1B or
  interleaved (2 chunks per rank unless told), and what the executor really does: fp32, eager attention
  (the s² scores stored), nothing overlapped with compute; with cp > 1 (lesson 7) each rank of a CP group holds
  the zig-zag positions of its coordinate and attention exchanges K,V by `cp_comm` (ring unless told), tile by
  tile with an online softmax that keeps only the log-sum-exp and recomputes the scores in the backward:
  flash attention's memory, so the plan says attention="flash" (`executor(cp)`);
- the model (`sim.model.Transformer`, untied, as `exec.models.GPT` is): 2 heads of 4 features per TP rank,
  two layers per model chunk, 8 tokens (4·cp with cp > 2: 2·cp zig-zag chunks of 2), a vocabulary of 16 per
  TP rank (so the TP ranks split it evenly);
- the global batch: dp replicas × m micro-batches × b sequences, m = 2·pp unless told (enough to fill the
  pipeline twice);
- `variants`: more plans on the same grid, model and batch (another ZeRO stage, schedule or chunk count),
  trained in the same launch.
What only torch can check — can this backend run here (one GPU per rank for NCCL)? — `parity` checks,
once, when it launches the run.

How long a run may be: at most `PARITY_STEPS` = 8 Adam steps. The run is a *parity* check, the same training as
one process within 1e-5, and that holds only for a while: the ranks add the same float32 numbers in another
order, and training amplifies those last-bit differences step after step. Measured on this course's GPT (2-core
CPU, gloo; `max_abs_diff_vs_reference` over the losses and every parameter): at 16 steps every grid tried stays
within 7e-6 (tp·dp·pp of 1, 2, 4 and 8 in every arrangement, ZeRO-1, interleaved, seeds 0-3, a wider model; with
cp 2, 4 and 8 beside them, tp·cp·dp·pp = 8, each way K,V travel: 6.4e-6 at most); 1e-5 is crossed from 24 steps
on some grids (1·1·2: 1.02e-5; 1·2·1 at 32: 1.1e-5), then 2e-4 at 64 (1·1·1), 3e-3 at 256 (1·2·1), 1e-2 at 400
(2·2·2), and 0.5 in the run that reported it. How fast it grows depends on the CPU's float kernels: on another
2-core machine (AMD EPYC, 2026-12) 1·1·2 drifted 1.7e-6 at 4 steps, 7.0e-6 at 8, 1.2e-5 at 12 and 1.6e-5 at 16. So
the bound is 8 steps, where every machine measured holds 1e-5; past it the number could no longer tell a bug from
round-off, and a longer run is refused rather than reported as a pass or a failure.

    >>> run = HybridRun.build(tp=2, dp=2, pp=2)
    >>> run.world_size, run.global_batch, run.microbatches, run.model.layers, run.model.hidden, run.model.vocab
    (8, 16, 4, 4, 16, 32)
    >>> HybridRun.build(tp=3, dp=2, pp=1, heads=4)
    Traceback (most recent call last):
    ValueError: heads=4: must be divisible by tp=3
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_choice, check_int, check_positive, check_ranks
from .hardware import Cluster, cluster
from .hybrid import Plan, check_plan, microbatches
from .hybrid_memory import Knobs, knobs, per_gpu
from .hybrid_traffic import layers_per_chunk
from .mesh import Mesh
from .model import Transformer

SCHEDULES = ("1f1b", "interleaved")  # what `exec.pipeline.PipelineRank` runs with a vocab-parallel GPT
VARIED = ("zero", "schedule", "chunks", "cp_comm")  # what a variant may change: the grid, model and batch stay
SIZES = ("layers", "hidden", "heads", "seq", "vocab")  # a run's model, as its result reports it
EXECUTOR = {"precision": "fp32", "attention": "eager", "overlap": "none"}  # the course's executor, as it runs


def executor(cp: int) -> dict:
    """What the executor runs with the sequence split over `cp` ranks: `exec.context_parallel`'s attention is
    tile by tile with an online softmax (flash attention's way) where cp > 1; the one process's is eager."""
    return EXECUTOR | ({"attention": "flash"} if cp > 1 else {})
PARITY_STEPS = 8  # the most steps whose comparison with one process holds to 1e-5 (measured: module docstring)


def gpt_3d(layers: int, hidden: int, heads: int, seq: int, vocab: int) -> Transformer:
    """The course's GPT (`exec.models.GPT`) as the models see it: untied, learned positions."""
    return Transformer("gpt-3d", layers, hidden, heads, seq=seq, vocab=vocab, tied=False)


@dataclass(frozen=True, kw_only=True)
class HybridRun:
    """A real 3-D run: `plan` and `variants` (more plans, trained in the same launch), the `model` they train,
    `global_batch` sequences per step, `steps` Adam steps at `lr`, `seed`, the `backend` ("auto" until parity
    resolves it) and the `timeout` of the launch. Checked when built: every instance can run."""

    plan: Plan
    model: Transformer
    global_batch: int
    steps: int = 3
    seed: int = 0
    lr: float = 1e-2
    backend: str = "auto"
    timeout: float = 120.0
    variants: tuple = ()

    def __post_init__(self):
        if not isinstance(self.plan, Plan):
            raise ValueError(f"plan={self.plan!r}: must be a simlab.sim.hybrid.Plan")
        if not isinstance(self.model, Transformer):
            raise ValueError(f"model={self.model!r}: must be a simlab.sim.model.Transformer")
        if not isinstance(self.variants, tuple) or not all(isinstance(v, Plan) for v in self.variants):
            raise ValueError(f"variants={self.variants!r}: must be a tuple of Plans")
        if check_int("steps", self.steps, 1) > PARITY_STEPS:
            raise ValueError(f"steps={self.steps}: at most {PARITY_STEPS}: past that, float32 round-off amplified by "
                             "training outgrows the 1e-5 the run is held to (measured: 1e-5 from 12 steps, 3e-3 at "
                             "256, 0.5 at 400), so the comparison with one process would no longer mean anything")
        check_int("seed", self.seed, 0)
        check_positive("lr", self.lr)
        check_positive("timeout", self.timeout)
        if not isinstance(self.backend, str):
            raise ValueError(f"backend={self.backend!r}: must be a name, e.g. 'auto'")
        for name in ("tp", "cp", "dp", "pp", "microbatch"):  # what the grid and the batch are computed from
            check_int(name, getattr(self.plan, name), 1)
        check_ranks("world_size", self.plan.gpus)
        for i, plan in enumerate(self.plans):  # the executor runs a plan's grid, batch and these knobs, no more
            runnable = Plan(tp=self.plan.tp, cp=self.plan.cp, pp=self.plan.pp, dp=self.plan.dp,
                            microbatch=self.plan.microbatch,
                            **{k: getattr(plan, k) for k in VARIED}, **executor(self.plan.cp))
            if plan != runnable:
                raise ValueError(f"{'variants' if i else 'plan'}={plan.to_dict()}: the executor runs fp32, "
                                 f"{runnable.attention} attention, nothing overlapped, no experts; a variant changes "
                                 f"only {', '.join(VARIED)}")
            check_int("zero", plan.zero, 0, 1)  # the executor has ZeRO-1 (lesson 3's ZeRO-2 and -3 run alone)
            check_choice("schedule", plan.schedule, SCHEDULES)
            check_plan(self.model, plan, plan.gpus, self.global_batch)
            layers_per_chunk(self.model.layers, plan)  # the executor cuts the model into equal chunks
        if self.model.vocab % self.plan.tp:  # `exec.hybrid`'s vocab-parallel embedding and loss split it evenly
            raise ValueError(f"vocab={self.model.vocab}: must be divisible by tp={self.plan.tp}")

    @classmethod
    def build(cls, *, tp: int = 2, dp: int = 2, pp: int = 2, cp: int = 1, cp_comm: str = "ring", zero: int = 0,
              schedule: str = "1f1b", chunks: int | None = None, microbatch: int = 2, microbatches: int | None = None,
              layers: int | None = None, hidden: int | None = None, heads: int | None = None, seq: int | None = None,
              steps: int = 3, seed: int = 0, lr: float = 1e-2, world_size: int | None = None, backend: str = "auto",
              timeout: float = 120.0, variants: tuple = ()) -> HybridRun:
        """The run from its knobs (None: the default the module's docstring gives). Every check, before any
        work, in one-line ValueErrors naming the argument; the knobs the defaults are computed from first."""
        for name, value in (("tp", tp), ("dp", dp), ("pp", pp), ("cp", cp), ("microbatch", microbatch)):
            check_int(name, value, 1)
        check_choice("schedule", schedule, SCHEDULES)
        chunks = (2 if schedule == "interleaved" else 1) if chunks is None else chunks
        for name, value in (("chunks", chunks), ("microbatches", microbatches), ("layers", layers),
                            ("hidden", hidden), ("heads", heads), ("seq", seq)):
            if value is not None:
                check_int(name, value, 1)
        if world_size is not None and check_ranks("world_size", world_size) != tp * cp * dp * pp:
            grid = (f"tp × cp × dp × pp = {tp} × {cp} × {dp} × {pp}" if cp > 1
                    else f"tp × dp × pp = {tp} × {dp} × {pp}")
            raise ValueError(f"world_size={world_size}: must be {grid}")
        if not isinstance(variants, tuple) or not all(isinstance(v, dict) and set(v) <= set(VARIED) for v in variants):
            raise ValueError(f"variants={variants!r}: must be a tuple of dicts of {', '.join(VARIED)}")
        plan = Plan(tp=tp, pp=pp, dp=dp, cp=cp, cp_comm=cp_comm, microbatch=microbatch, zero=zero,
                    schedule=schedule, chunks=chunks, **executor(cp))
        plans = [plan.with_(**v) for v in variants]
        most = max([chunks] + [check_int("chunks", p.chunks, 1) for p in plans])  # layers: 2 per chunk
        heads = heads or 2 * tp
        model = gpt_3d(layers or 2 * pp * most, hidden or 4 * heads, heads, seq or 4 * max(cp, 2), 16 * tp)
        return cls(plan=plan, model=model, global_batch=dp * microbatch * (microbatches or 2 * pp), steps=steps,
                   seed=seed, lr=lr, backend=backend, timeout=timeout, variants=tuple(plans))

    @classmethod
    def from_result(cls, result: dict) -> HybridRun:
        """The run a `parity.hybrid.run_hybrid` result reports (its config, model and batch; the backend it
        ran on), e.g. to predict its timeline."""
        return cls(plan=Plan(**result["config"] | executor(result["config"].get("cp", 1))),
                   model=gpt_3d(**result["model"]),
                   global_batch=result["global_batch"], backend=result["backend"])

    @property
    def plans(self) -> tuple:
        """The plan, then its variants: what one launch trains, in turn."""
        return (self.plan, *self.variants)

    @property
    def world_size(self) -> int:
        return self.plan.gpus

    @property
    def mesh(self) -> Mesh:
        """The rank grid every plan of the run shares (`sim.mesh`: TP fastest, then CP, DP, PP)."""
        return Mesh(pp=self.plan.pp, dp=self.plan.dp, cp=self.plan.cp, tp=self.plan.tp)

    @property
    def replica_batch(self) -> int:
        """Sequences each DP replica trains on per step: its slice of the global batch."""
        return self.global_batch // self.plan.dp

    @property
    def microbatches(self) -> int:
        """m: micro-batches each pipeline runs per step."""
        return microbatches(self.plan, self.global_batch)

    def sizes(self) -> dict:
        """The model's sizes by name (`gpt_3d(**sizes())` is the model again)."""
        return {name: getattr(self.model, name) for name in SIZES}

    def machine(self, backend: str) -> Cluster:
        """What the run is predicted on: this machine's calibration under gloo, else A100s (NCCL)."""
        return cluster("cpu-this-machine" if backend == "gloo" else "a100-80gb", gpus=self.world_size)

    def process_bytes(self) -> float:
        """The most memory one process of the run needs: the one-process reference's, which trains the whole
        GPT on the whole global batch (each rank holds a part of that). Lesson 6's memory model for one GPU
        whose one micro-batch is the global batch, in fp32: lesson 3's 4 + 4 + 8 = 16 bytes per parameter,
        and Korthikanti's activations with the s² scores stored (eager attention), plus the embedding's output
        and the fp32 logits. Measured on the executor's GPT, the activations autograd stores are 0.7-0.95 of these.
        Evaluated in floats: a size a user may type (any integer) must give a number, not an int64 overflow."""
        one = Knobs(*(np.asarray(k, dtype=float) for k in knobs(Plan(microbatch=self.global_batch, **EXECUTOR),
                                                                 self.model)))
        return float(per_gpu(self.model, one, self.global_batch, precision="fp32")["total"])

    def machine_bytes(self) -> float:
        """At most what the run needs on one machine: the reference and every rank, (world_size + 1) processes,
        none holding more than the reference."""
        return (self.world_size + 1) * self.process_bytes()
