"""Lesson 5's parity: does our tensor parallelism compute exactly what the unsplit block computes, with
exactly the collectives the simulator's plan predicts, and the same as torch's own TP (DTensor
`parallelize_module`)? One launch.

`run_tp(4, "mlp")` builds the same seeded block on every rank, cuts it with `from_full`, runs one forward
and backward (upstream gradient fixed and seeded), and compares the output, dX and every weight gradient
with the unsplit block in one process; it counts the all-reduces per phase and the bytes each rank sent
and sets them next to `simlab.sim.tensor_parallel.block_steps`. With `compare_torch`, each rank also runs
`parallelize_module` with ColwiseParallel / RowwiseParallel on a device mesh of the run's device type
(CPU + gloo, or CUDA + NCCL), same weights.

`run_tp_split("row", "row", 4)` is the split explorer's real run: GeLU(X·A)·B (no biases, fp32, the
explorer's seeded matrices) with any choice of splits, forward only, once with the collectives the choice
needs and once with the tempting shortcut (no sync before GeLU); both against one process and against the
simulator's `split_forward`, the collectives in the order they ran beside the simulator's.

    python -c "from simlab.parity.tensor_parallel import run_tp; print(run_tp(4, 'attention'))"
"""
from __future__ import annotations

import copy
import gc
from dataclasses import asdict

import torch
import torch.distributed as dist
from torch import nn

from .._checks import check_bool, check_choice, check_divisible, check_int
from ..exec.launch import device, launch
from ..exec.models import make_block, make_input
from ..exec.tensor_parallel import CommStats, ParallelMLP, ParallelSelfAttention
from ..sim.tensor_parallel import block_steps, bytes_per_rank, count_collectives, ring_bytes_sent
from ..sim.tensor_parallel_choices import mlp_inputs, split_forward
from ..trace import merge
from .common import check_run, max_abs_diff, result

BLOCKS = ("mlp", "attention")


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
    check_choice("block", block, BLOCKS)
    for name, value in (("batch", batch), ("seq", seq), ("hidden", hidden), ("heads", heads), ("ffn", ffn)):
        check_int(name, value, 1)
    if block == "mlp":
        check_divisible("ffn", ffn, "world_size", world_size)
    else:
        check_divisible("heads", heads, "world_size", world_size)
        check_divisible("hidden", hidden, "heads", heads)


def tp_worker(rank: int, world_size: int, block: str, batch: int, seq: int, hidden: int, heads: int, ffn: int,
              seed: int, compare_torch: bool) -> dict:
    """One rank: our TP block's forward+backward; then, if asked, torch's DTensor TP on the same block."""
    full = make_block(block, hidden, heads, ffn, seed).to(device())
    x, grad_out = (t.to(device()) for t in make_input(batch, seq, hidden, seed))
    par = (ParallelMLP if block == "mlp" else ParallelSelfAttention).from_full(full, device=device())
    ours = _cpu(forward_backward(par, x, grad_out, count=True))
    out = {"out": ours["out"], "x.grad": ours["x.grad"], "backend": dist.get_backend(),
           "shards": {name: (grad.cpu(), dim) for name, (grad, dim) in par.grad_shards().items()},
           "calls": {f"{phase} {op}": n for (phase, op), n in par.stats.calls.items()},
           "calls_seen_by_torch": ours["comm"], "bytes_sent": par.stats.bytes_sent, "events": par.stats.rec.events}
    if compare_torch:
        out["torch"], out["torch_calls"] = torch_tp(block, full, x, grad_out, world_size)
    del par
    gc.collect()  # teardown trap: nothing may hold the group when it is destroyed
    return out


def _cpu(tensors: dict) -> dict:
    """Results travel back to the parent pickled: CPU tensors only (a CUDA one would init CUDA there)."""
    return {k: v.cpu() if hasattr(v, "cpu") else v for k, v in tensors.items()}


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

    mesh = init_device_mesh(device().type, (world_size,))
    model = parallelize_module(copy.deepcopy(full), mesh, torch_plan(block))
    res = _cpu(forward_backward(model, x, grad_out, count=True))  # DTensor (sharded) grads made whole
    return res, res.pop("comm")


def assemble(ranks: list[dict]) -> dict:
    """Every parameter's whole gradient from the ranks' slices (concatenated in rank order)."""
    whole = {}
    for name, (_, dim) in ranks[0]["shards"].items():
        parts = [r["shards"][name][0] for r in ranks]
        whole[name] = parts[0] if dim is None else torch.cat(parts, dim=dim)
    return whole


def run_tp(world_size: int = 4, block: str = "mlp", batch: int = 2, seq: int = 4, hidden: int = 8,
           heads: int = 4, ffn: int = 16, seed: int = 0, compare_torch: bool = True, backend: str = "auto",
           timeout: float = 60.0) -> dict:
    """Launch `world_size` ranks of TP `block`; compare with the unsplit block, the plan and torch's TP.

    Calls are counted twice: by our f/g wrappers and, independently, by torch's CommDebugMode.
    bytes_sent_per_rank is ring-accounted: what a ring all-reduce of each counted call sends (gloo's
    own all-reduce algorithm may move bytes differently)."""
    backend = check_run(world_size, backend, timeout, seed)
    check_tp(world_size, block, batch, seq, hidden, heads, ffn)
    check_bool("compare_torch", compare_torch)
    full = make_block(block, hidden, heads, ffn, seed)
    ref = forward_backward(full, *make_input(batch, seq, hidden, seed))  # one process, no split
    if compare_torch:  # torch's lazy modules: import once here, every forked rank inherits them
        import torch.distributed.tensor.debug  # noqa: F401 — import once here: every forked rank inherits it
        import torch.distributed.tensor.parallel  # noqa: F401 — import once here: every forked rank inherits it
    ranks = launch(tp_worker, world_size, block, batch, seq, hidden, heads, ffn, seed, compare_torch,
                   backend=backend, timeout=timeout)
    grads = assemble(ranks)
    per_rank = [max(max_abs_diff(r["out"], ref["out"]), max_abs_diff(r["x.grad"], ref["x.grad"])) for r in ranks]
    plan = block_steps(block, world_size, batch * seq, hidden, inner=ffn, heads=heads, itemsize=4)
    calls, vs_torch = ranks[0]["calls"], None
    if compare_torch:  # torch's TP against ours: outputs and dX on every rank, and the whole weight grads
        vs_torch = max(max_abs_diff({k: r["torch"][k] for k in ("out", "x.grad")}, {k: r[k] for k in ("out", "x.grad")})
                       for r in ranks)
        vs_torch = max(vs_torch, max(max_abs_diff({n: r["torch"][n] for n in grads}, grads) for r in ranks))
    return result(
        world_size=world_size, backend=ranks[0]["backend"], trace=merge(r["events"] for r in ranks),
        bytes_sent_per_rank=[r["bytes_sent"] for r in ranks],
        max_abs_diff_vs_reference=max(per_rank + [max_abs_diff(grads, {n: ref[n] for n in grads})]),
        max_abs_diff_vs_torch=vs_torch, why_no_torch=None if compare_torch else "compare_torch=False",
        block=block, allreduce_calls_forward=calls.get("forward all-reduce", 0),
        allreduce_calls_backward=calls.get("backward all-reduce", 0),
        calls_per_rank=[r["calls"] for r in ranks],
        calls_seen_by_torch_per_rank=[r["calls_seen_by_torch"] for r in ranks],
        plan_allreduce_calls_forward=count_collectives(plan, "forward"),
        plan_allreduce_calls_backward=count_collectives(plan, "backward"),
        plan_bytes_sent_per_rank=bytes_per_rank(plan),
        plan=[asdict(step) for step in plan],  # plain dicts: the CLI prints it as JSON
        **({"torch_calls": ranks[0]["torch_calls"]} if compare_torch else {}))


# ---------------------------------------------------------------- any split of GeLU(X·A)·B, forward only

def _collective(op: str, t: torch.Tensor, stats: CommStats, where: str) -> torch.Tensor:
    """One forward collective along the last dim, counted under `where`: all-reduce (…, k) → (…, k),
    reduce-scatter (…, k) → this rank's block (…, k/N), all-gather (…, k) → (…, N·k)."""
    n, start = stats.world_size, stats.rec.now()
    if op == "all-reduce":
        out = t.clone()  # summed in place: never into the tensor we were given
        dist.all_reduce(out)
    elif op == "reduce-scatter":  # blocks of the last dim stacked on dim 0, as reduce_scatter_single wants
        out = torch.empty(*t.shape[:-1], t.shape[-1] // n, dtype=t.dtype, device=t.device)
        blocks = torch.stack(t.chunk(n, dim=-1))  # (N, …, k/N): rank i's block at [i]
        dist.reduce_scatter_single(out, blocks.reshape(-1, *out.shape[1:]))  # (N·t, k/N) → (t, k/N)
    else:
        parts = [torch.empty_like(t) for _ in range(n)]
        dist.all_gather(parts, t.contiguous())
        out = torch.cat(parts, dim=-1)
    stats.record(where, op, t.numel() * (n if op == "all-gather" else 1), t.element_size(), start)
    return out


def split_mlp_forward(a_split: str, b_split: str, x, a, b, stats: CommStats, sync: bool = True):
    """This rank's Z (t, h) of GeLU(X·A)·B split as chosen: `split_forward`'s steps on real collectives."""
    n, r, gelu = stats.world_size, stats.rank, lambda u: torch.nn.functional.gelu(u, approximate="tanh")
    f, h = (slice(r * k // n, (r + 1) * k // n) for k in (a.shape[1], a.shape[0]))  # own ffn / hidden block
    owns_block = a_split == "column" or b_split == "row"
    if a_split == "column":
        u = x @ a[:, f]  # (t, ffn/N): whole values
    else:
        u = x[:, h] @ a[h, :]  # (t, ffn): a partial sum
        if sync:
            u = _collective("reduce-scatter" if owns_block else "all-reduce", u, stats, "before GeLU")
        elif owns_block:
            u = u[:, f]  # the shortcut: its own block of its own partial sum
    y = gelu(u)
    if b_split == "row":
        return _collective("all-reduce", y @ b[f, :], stats, "g, after B" if a_split == "column" else "after B")
    if owns_block:
        y = _collective("all-gather", y, stats, "between A and B")  # (t, ffn)
    return _collective("all-gather", y @ b[:, h], stats, "after B")  # (t, h/N) → (t, h)


def split_worker(rank: int, world_size: int, a_split: str, b_split: str, seed: int) -> dict:
    x, a, b = (torch.from_numpy(m).float().to(device()) for m in mlp_inputs(seed))  # the explorer's, fp32
    runs = {}
    for sync in (True, False):
        stats = CommStats()
        z = split_mlp_forward(a_split, b_split, x, a, b, stats, sync)
        runs[sync] = {"z": z.cpu(), "calls": [e.name for e in stats.rec.events], "bytes_sent": stats.bytes_sent,
                      "events": stats.rec.events}
    return {"runs": runs, "backend": dist.get_backend()}


def run_tp_split(a_split: str = "column", b_split: str = "row", world_size: int = 4, seed: int = 0,
                 backend: str = "auto", timeout: float = 60.0) -> dict:
    """The explorer's choice on `world_size` real processes, with its collectives and with the shortcut."""
    backend = check_run(world_size, backend, timeout, seed)
    x, a, b = mlp_inputs(seed)
    for name, value in (("a_split", a_split), ("b_split", b_split)):
        check_choice(name, value, ("column", "row"))
    for name, size in (("hidden", a.shape[0]), ("ffn", a.shape[1])):  # every choice cuts one of them
        check_divisible(name, size, "world_size", world_size)
    sim, plan = split_forward(a_split, b_split, world_size, x, a, b)  # refuses bad choices before launching
    sim_short, _ = split_forward(a_split, b_split, world_size, x, a, b, sync=False)
    x32, a32, b32 = (torch.from_numpy(m).float().double() for m in (x, a, b))  # what the ranks hold, in fp64
    ref = torch.nn.functional.gelu(x32 @ a32, approximate="tanh") @ b32  # one process, unsplit
    ranks = launch(split_worker, world_size, a_split, b_split, seed, backend=backend, timeout=timeout)
    synced, short = ([r["runs"][s] for r in ranks] for s in (True, False))
    diff = lambda runs, want: max(max_abs_diff(r["z"], want) for r in runs)  # noqa: E731 — every rank's Z
    return result(
        world_size=world_size, backend=ranks[0]["backend"], trace=merge(r["events"] for r in synced),
        bytes_sent_per_rank=[r["bytes_sent"] for r in synced], max_abs_diff_vs_reference=diff(synced, ref),
        max_abs_diff_vs_torch=None, why_no_torch="torch's TP plans have Megatron's split only (see run_tp)",
        a_split=a_split, b_split=b_split, collectives=synced[0]["calls"],
        plan_collectives=[f"{where} {op}" for where, op, _ in plan],
        plan_bytes_sent_per_rank=[sum(ring_bytes_sent(op, world_size, numel, 4)[r] for _, op, numel in plan)
                                  for r in range(world_size)],
        max_abs_diff_vs_simulation=max(diff(synced, torch.from_numpy(sim)), diff(short, torch.from_numpy(sim_short))),
        shortcut_error=diff(short, ref), shortcut_collectives=short[0]["calls"],
        shortcut_trace=merge(r["events"] for r in short))
