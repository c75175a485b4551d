"""What each rank of a real 3-D run holds and sends, exactly: the predictions `simlab.parity.hybrid` holds
the executor (`simlab.exec.hybrid`) to, byte for byte.

Teaches where 3-D parallelism's traffic goes, per rank and per group, for one step of m micro-batches
of b sequences (fp32, as the CPU run trains):
- TP group: every layer 4 all-reduces of a (b, s/cp, h) activation (2 forward: g after attention and after
  the MLP; 2 backward: f before them); the vocab-parallel embedding 1 more (forward); the output layer's
  f 1 (backward) and the vocab-parallel cross-entropy 3 of (b, s/cp) (max, sum of exponentials, target logit);
- CP group (lesson 7, only when cp > 1, its own key "cp"): every layer's attention exchanges K,V of its
  heads/t heads by `cp_comm`, forward and backward: `sim.context_parallel_costs.costs`, the formula the
  lesson's own CP run is held to;
- PP group: each micro-batch's activation forward and its gradient backward, wherever a chunk's
  neighbour lives on another rank (chunks are dealt round-robin: rank r holds r, r+p, …);
- DP group, once per step: an all-reduce of the rank's gradients, or ZeRO-1's reduce-scatter + all-gather
  of its padded flat bucket (N·ceil(P/N) elements). With cp > 1 this runs over the dp-cp group (`Mesh.
  joint_groups("dp-cp")`, N = dp·cp), as Megatron reduces: every CP rank saw other tokens of the same
  sequences, so its gradients are a part of the replica's.
Every collective is our ring (`simlab.sim.collectives.ring_bytes_sent`): exact per rank, uneven chunks too.

    >>> from simlab.sim.model import Transformer
    >>> from simlab.sim.hybrid import Plan
    >>> m = Transformer("tiny", layers=4, hidden=16, heads=4, seq=8, vocab=32, tied=False)
    >>> bytes_per_rank(m, Plan(tp=2, pp=2, dp=2, microbatch=2), global_batch=8)["pp"]
    [2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048]
"""
from __future__ import annotations

from .collectives import ring_bytes_sent
from .context_parallel_costs import costs
from .hybrid import Plan
from .memory import per_gpu_bytes
from .mesh import Mesh
from .model import Transformer


def chunks_of(plan: Plan, pp_rank: int) -> list[int]:
    """The model chunks (pipeline stages) rank `pp_rank` holds: pp_rank, pp_rank + p, … (v of them)."""
    return [pp_rank + k * plan.pp for k in range(plan.chunks)]


def layers_per_chunk(layers: int, plan: Plan) -> int:
    """L / (p·v): the real run cuts the model into equal chunks."""
    if layers % (plan.pp * plan.chunks):
        raise ValueError(f"layers={layers}: must be divisible by pp × chunks = {plan.pp} × {plan.chunks}")
    return layers // (plan.pp * plan.chunks)


def rank_params(model: Transformer, plan: Plan, pp_rank: int) -> int:
    """Parameters one rank of pipeline stage `pp_rank` holds: its chunks' layers (its share of t), the
    embedding with chunk 0 and the output layer with the last chunk (both vocab-split)."""
    last, per = plan.pp * plan.chunks - 1, layers_per_chunk(model.layers, plan)
    total = sum(per * model.layer_params_per_rank(plan.tp) + (model.embedding_params_per_rank(plan.tp) if c == 0
                else 0) + (model.output_params_per_rank(plan.tp, plan.pp) if c == last else 0)
                for c in chunks_of(plan, pp_rank))
    return round(total)


def rank_states(model: Transformer, plan: Plan, pp_rank: int) -> dict:
    """Bytes of parameters, gradients and Adam's state (fp32) one rank keeps: lesson 3's model of one flat
    buffer of `rank_params`, sharded over the DP group (dp-cp with cp > 1) under ZeRO-1."""
    states = per_gpu_bytes(rank_params(model, plan, pp_rank), plan.dp * plan.cp, plan.zero, precision="fp32")
    return {k: states[k] for k in ("params", "grads", "optimizer")}


def bytes_per_rank(model: Transformer, plan: Plan, global_batch: int, itemsize: int = 4) -> dict:
    """{"tp" | "pp" | "dp" (| "cp" when cp > 1): [bytes each global rank sends in one step]}, in the mesh's
    rank order."""
    mesh = Mesh(pp=plan.pp, dp=plan.dp, cp=plan.cp, tp=plan.tp)
    m, b, h = global_batch // (plan.dp * plan.microbatch), plan.microbatch, model.hidden
    s = model.seq // plan.cp  # (b, s/cp, h): the tokens one CP rank holds
    last, per = plan.pp * plan.chunks - 1, layers_per_chunk(model.layers, plan)
    # one layer's attention over the CP group, per micro-batch: the TP rank's heads, every rank the same bytes
    attention = costs(plan.cp_comm, world_size=plan.cp, seq=model.seq, heads=model.heads // plan.tp,
                      head_dim=h // model.heads, batch=b, itemsize=itemsize).bytes_sent if plan.cp > 1 else 0
    grads = mesh.joint_groups("dp-cp")  # the DP group itself when cp = 1
    out = {"tp": [], "pp": [], "dp": []} | ({"cp": []} if plan.cp > 1 else {})
    for rank in range(mesh.world_size):
        pp_r, tp_r = mesh.index_of("pp", rank), mesh.index_of("tp", rank)
        group = next(g for g in grads if rank in g)
        def ar(numel, n=plan.tp, r=tp_r):  # noqa: E306 — a nested helper: one ring all-reduce of `numel` on n ranks
            return ring_bytes_sent("all-reduce", n, numel, itemsize)[r]
        tp = pp = cp = 0
        for c in chunks_of(plan, pp_r):
            tp += per * 4 * ar(b * s * h) + (ar(b * s * h) if c == 0 else 0)
            tp += ar(b * s * h) + 3 * ar(b * s) if c == last else 0
            pp += b * s * h * itemsize * ((c < last and (c + 1) % plan.pp != pp_r) + (c > 0 and (c - 1) % plan.pp != pp_r))
            cp += per * attention
        params, n = rank_params(model, plan, pp_r), len(group)
        shard = -(-params // n)
        dp = (ar(params, n, group.index(rank)) if plan.zero == 0 else 2 * (n - 1) * shard * itemsize)
        out["tp"].append(m * tp)
        out["pp"].append(m * pp)
        out["dp"].append(dp)
        if plan.cp > 1:
            out["cp"].append(m * cp)
    return out
