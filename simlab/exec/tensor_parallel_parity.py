"""Does our tensor parallelism compute exactly what the unsplit block computes, with exactly the collectives
the simulator's plan predicts, and the same as torch's own TP (DTensor `parallelize_module`)? One launch.

`run_tp(4, "mlp")` builds the same seeded block on every rank, cuts it with `from_full`, runs one forward
and backward (upstream gradient fixed and seeded), and compares the output, dX and every weight gradient
with the unsplit block in one process; it counts the all-reduces per phase and the bytes each rank sent
and sets them next to `simlab.sim.tensor_parallel.block_steps`. With `compare_torch`, each rank also runs
`parallelize_module` with ColwiseParallel / RowwiseParallel on a CPU device mesh (gloo), same weights.

    python -c "from simlab.exec.tensor_parallel_parity import run_tp; print(run_tp(4, 'attention'))"
"""
from __future__ import annotations

import copy
import gc
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch import nn

from .._checks import check_choice, check_int, check_positive, check_ranks
from ..sim.tensor_parallel import block_steps, bytes_per_rank, check_divisible, count_collectives
from .tensor_parallel import ParallelMLP, ParallelSelfAttention, attend

BLOCKS = ("mlp", "attention")


class MLP(nn.Module):
    """The unsplit reference: fc2(GeLU(fc1(x))), hidden → ffn → hidden."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):  # (b, s, h)
        return self.fc2(F.gelu(self.fc1(x)))  # (b, s, ffn) → (b, s, h)


class SelfAttention(nn.Module):
    """The unsplit reference: wo(attention(wq x, wk x, wv x)). The head count follows from the shapes, so
    torch's parallelize_module can run this very forward on its local (H/N-head) tensors."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.head_dim = hidden // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(hidden, hidden) for _ in range(4))

    def forward(self, x):  # (b, s, h)
        return self.wo(attend(self.wq(x), self.wk(x), self.wv(x), self.head_dim))


def make_block(block: str, hidden: int, heads: int, ffn: int, seed: int = 0) -> nn.Module:
    """The seeded full block: bit-identical in every process."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)  # nn.Linear draws from the global generator: pin it, then restore
    try:
        return MLP(hidden, ffn) if block == "mlp" else SelfAttention(hidden, heads)
    finally:
        torch.random.set_rng_state(gen_state)


def make_input(batch: int, seq: int, hidden: int, seed: int = 0):
    """X (b, s, h) and the upstream gradient dY (b, s, h), from their own generator."""
    gen = torch.Generator().manual_seed(seed + 1)
    return torch.randn(batch, seq, hidden, generator=gen), torch.randn(batch, seq, hidden, generator=gen)


def forward_backward(module: nn.Module, x, grad_out, count: bool = False) -> dict:
    """Output, dX and every parameter's gradient (DTensor gradients made whole) after one backward.
    count=True also returns under "comm" the collectives torch saw, per phase (CommDebugMode): an
    independent count of what our wrappers say they issued."""
    from contextlib import nullcontext
    x = x.clone().requires_grad_(True)
    if count:
        from torch.distributed.tensor.debug import CommDebugMode
    fwd, bwd = (CommDebugMode(), CommDebugMode()) if count else (nullcontext(), nullcontext())
    with fwd:
        out = module(x)  # (b, s, h)
    with bwd:
        out.backward(grad_out)
    grads = {n: p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
             for n, p in module.named_parameters()}
    comm = {f"{phase} {getattr(op, '__name__', op)}": n for phase, mode in (("forward", fwd), ("backward", bwd))
            for op, n in (mode.get_comm_counts().items() if count else ())}  # e.g. "backward all_reduce"
    return {"out": out.detach(), "x.grad": x.grad, **grads, **({"comm": comm} if count else {})}


def check_tp(world_size, block, batch, seq, hidden, heads, ffn) -> None:
    """One-line ValueErrors before any process starts."""
    check_ranks("world_size", world_size)
    check_choice("block", block, BLOCKS)
    for name, value in (("batch", batch), ("seq", seq), ("hidden", hidden), ("heads", heads), ("ffn", ffn)):
        check_int(name, value, 1)
    if block == "mlp":
        check_divisible("ffn", ffn, world_size, "world_size")
    else:
        check_divisible("heads", heads, world_size, "world_size")
        check_divisible("hidden", hidden, heads, "heads")


def tp_worker(rank: int, world_size: int, block: str, batch: int, seq: int, hidden: int, heads: int, ffn: int,
              seed: int, compare_torch: bool) -> dict:
    """One rank: our TP block's forward+backward; then, if asked, torch's DTensor TP on the same block."""
    full = make_block(block, hidden, heads, ffn, seed)
    x, grad_out = make_input(batch, seq, hidden, seed)
    par = (ParallelMLP if block == "mlp" else ParallelSelfAttention).from_full(full, rank, world_size)
    ours = forward_backward(par, x, grad_out, count=True)
    result = {"out": ours["out"], "x.grad": ours["x.grad"], "shards": par.grad_shards(),
              "calls": {f"{phase} {op}": n for (phase, op), n in par.stats.calls.items()},
              "calls_seen_by_torch": ours["comm"], "bytes_sent": par.stats.bytes_sent}
    if compare_torch:
        result["torch"], result["torch_calls"] = torch_tp(block, full, x, grad_out, world_size)
    del par
    gc.collect()  # teardown trap: nothing may hold the group when it is destroyed
    return result


def torch_plan(block: str) -> dict:
    """torch's TP plan for our blocks: the first linear(s) column-wise, the last row-wise (Megatron's)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    if block == "mlp":
        return {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    return {"wq": ColwiseParallel(), "wk": ColwiseParallel(), "wv": ColwiseParallel(), "wo": RowwiseParallel()}


def torch_tp(block: str, full: nn.Module, x, grad_out, world_size: int):
    """torch's own TP: parallelize_module with ColwiseParallel into RowwiseParallel, on a 1-D CPU mesh.
    Also returns its collectives per phase, as CommDebugMode counts them."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    model = parallelize_module(copy.deepcopy(full), init_device_mesh("cpu", (world_size,)), torch_plan(block))
    res = forward_backward(model, x, grad_out, count=True)  # DTensor (sharded) grads made whole
    return res, res.pop("comm")


def assemble(ranks: list[dict]) -> dict:
    """Every parameter's whole gradient from the ranks' slices (concatenated in rank order)."""
    whole = {}
    for name, (_, dim) in ranks[0]["shards"].items():
        parts = [r["shards"][name][0] for r in ranks]
        whole[name] = parts[0] if dim is None else torch.cat(parts, dim=dim)
    return whole


def run_tp(world_size: int = 4, block: str = "mlp", batch: int = 2, seq: int = 4, hidden: int = 8,
           heads: int = 4, ffn: int = 16, seed: int = 0, compare_torch: bool = True,
           timeout: float = 60.0) -> dict:
    """Launch `world_size` ranks of TP `block`; compare with the unsplit block, the plan and torch's TP.

    Calls are counted twice: by our f/g wrappers and, independently, by torch's CommDebugMode.
    bytes_sent_per_rank is ring-accounted: what a ring all-reduce of each counted call sends (gloo's
    own all-reduce algorithm may move bytes differently)."""
    check_tp(world_size, block, batch, seq, hidden, heads, ffn)
    check_int("seed", seed, 0)
    check_choice("compare_torch", compare_torch, (False, True))
    check_positive("timeout", timeout)
    full = make_block(block, hidden, heads, ffn, seed)
    ref = forward_backward(full, *make_input(batch, seq, hidden, seed))  # one process, no split
    if compare_torch:  # torch's lazy modules: import once here, every forked rank inherits them
        import torch.distributed.tensor.debug  # noqa: F401
        import torch.distributed.tensor.parallel  # noqa: F401
    from .launch import launch  # here, so importing this module starts nothing
    ranks = launch(tp_worker, world_size, block, batch, seq, hidden, heads, ffn, seed, compare_torch,
                   backend="gloo", timeout=timeout)
    grads = assemble(ranks)
    diff = lambda a, b: (a - b).abs().max().item()  # noqa: E731
    per_rank = [max(diff(r["out"], ref["out"]), diff(r["x.grad"], ref["x.grad"])) for r in ranks]
    plan = block_steps(block, world_size, batch * seq, hidden, inner=ffn, heads=heads, itemsize=4)
    calls = ranks[0]["calls"]
    result = {"block": block, "world_size": world_size,
              "max_abs_diff_vs_reference": max(per_rank + [diff(grads[n], ref[n]) for n in grads]),
              "allreduce_calls_forward": calls.get("forward all-reduce", 0),
              "allreduce_calls_backward": calls.get("backward all-reduce", 0),
              "calls_per_rank": [r["calls"] for r in ranks],
              "calls_seen_by_torch_per_rank": [r["calls_seen_by_torch"] for r in ranks],
              "bytes_sent_per_rank": [r["bytes_sent"] for r in ranks],
              "plan_allreduce_calls_forward": count_collectives(plan, "forward"),
              "plan_allreduce_calls_backward": count_collectives(plan, "backward"),
              "plan_bytes_sent_per_rank": bytes_per_rank(plan),
              "plan": [asdict(step) for step in plan]}  # plain dicts: the CLI prints it as JSON
    if compare_torch:  # torch's TP against ours: outputs and dX on every rank, and the whole weight grads
        theirs = [diff(r["torch"][k], r[k]) for r in ranks for k in ("out", "x.grad")]
        result["max_abs_diff_vs_torch"] = max(theirs + [diff(r["torch"][n], grads[n]) for r in ranks for n in grads])
        result["torch_calls"] = ranks[0]["torch_calls"]
    return result
