"""ZeRO, one training step at a time: which GPU holds which block of parameters, gradients and
optimizer state, after every collective, compute and free.

Teaches (the primer's scene: layers La, Lb, Lc, each cut into one block per GPU; GPU i *owns*
block i of every layer, a_i, b_i, c_i):
- Stage 0 (plain DP) keeps everything everywhere and all-reduces each layer's gradients.
- Stage 1 keeps full parameters and gradients but only its own optimizer shard: after backward it
  reduce-scatters the gradients of all layers (one bucket, as the executor does), updates its own
  blocks, and all-gathers the updated parameters (one bucket). Same 2Ψ traffic as DP.
- Stage 2 also drops the gradients it does not own, layer by layer during backward: each layer's
  reduce-scatter leaves only the own block's summed gradient.
- Stage 3 keeps only its own parameter blocks: before each layer's forward *and* backward it
  gathers the others, and frees them right after (in backward before the gradients' reduce-scatter,
  as FSDP2 does). Traffic: Ψ (forward gathers) + Ψ (backward gathers) + Ψ (the gradients'
  reduce-scatter) = 3Ψ per step.
- Offload (on stage 2 or 3): the owned gradients go down to the CPU, the CPU runs Adam, and the
  updated parameters come back up. `to_trace` lays it out on GPU and CPU lanes.

The event names and their order are the executor's (`simlab.exec.zero`, layers L0, L1, … there):
`simlab.parity.zero.compare_with_walkthrough` holds a real run to them, event for event.

Memory is counted in the same bytes as `simlab.sim.memory.per_gpu_bytes`: the state at the start
(and end) of a step equals it exactly; the peak adds only the transient full layer.

    >>> steps = walkthrough(3)
    >>> steps[1].description
    'La forward: GPU0 gathers a1 from GPU1 and a2 from GPU2'
"""
from __future__ import annotations

from dataclasses import dataclass

from .._checks import check_choice, check_int, check_ranks
from ..trace import Event, Trace
from .memory import CPU_GRAD_BYTES, HOST_ADAM_BYTES, PRECISIONS, check_offload

KINDS = ("params", "grads", "optim")  # what a GPU holds
CPU_KINDS = ("grads", "optim")  # what a GPU's host holds under offload


@dataclass(frozen=True)
class ZeroStep:
    """One event of the step and the holdings *after* it (sets of block names like "a0")."""

    index: int
    name: str  # short label, also the Trace event name: "all-gather La", "free La", "reduce-scatter Lc Lb La"
    kind: str  # "state" (the starting point) | "compute" | "comm" | "cpu"
    op: str  # start, forward, backward, all-gather, reduce-scatter, all-reduce, free, step, to-cpu, to-gpu
    layer: str | None  # None: no layer (start, step) or a bucket of several layers (stage 1)
    description: str
    holdings: tuple  # per GPU: {"params": frozenset, "grads": ..., "optim": ...}
    cpu: tuple  # per GPU's host: {"grads": frozenset, "optim": frozenset}; empty sets without offload
    received: tuple  # per GPU: the blocks it received in this step
    bytes_sent: tuple  # per GPU: bytes sent to other GPUs (ring accounting: (N-1) blocks per collective)
    host_bytes: tuple  # per GPU: bytes moved over PCIe between the GPU and its host
    gpu_bytes: tuple  # per GPU: bytes of model state held after this step
    cpu_bytes: tuple  # per host


def _order(block: str):
    return block[0], int(block[1:])  # "c10" after "c2"


def _one(layers):
    return layers[0] if len(layers) == 1 else None  # a bucket of several layers has no single layer


class _Scene:
    """The mutable state of the walkthrough; `record` snapshots it into a ZeroStep."""

    def __init__(self, stage, layers, n, offload, precision, block_numel):
        self.stage, self.n, self.offload, self.b = stage, n, offload, block_numel
        self.prec, self.steps = PRECISIONS[precision], []
        self.names = [f"L{chr(ord('a') + i)}" for i in range(layers)]
        self.blocks = {name: [f"{name[1]}{g}" for g in range(n)] for name in self.names}
        self.own = own = [{self.blocks[name][g] for name in self.names} for g in range(n)]
        full = set().union(*self.blocks.values())
        # the state between steps: what per_gpu_bytes counts (buffers are allocated once, reused)
        self.gpu = [{"params": set(own[g] if stage == 3 else full),
                     "grads": set() if offload else set(own[g] if stage >= 2 else full),
                     "optim": set() if offload else set(own[g] if stage >= 1 else full)}
                    for g in range(n)]
        self.host = [{"grads": set(own[g]) if offload else set(),
                      "optim": set(own[g]) if offload else set()} for g in range(n)]
        sharded = ["", "optimizer state", "gradients and optimizer state",
                   "parameters, gradients and optimizer state"][stage]
        self.record("start", "state", "start", None, "between steps: " + (
            f"GPU i keeps only its own blocks (block i of every layer) of the {sharded}" if stage
            else "every GPU holds everything")
            + ("; gradients and optimizer state live on the CPU" if offload else ""))

    def gpu_bytes(self, g) -> int:  # the per-element sizes of memory.per_gpu_bytes
        h, p = self.gpu[g], self.prec
        return self.b * (len(h["params"]) * p.param + len(h["grads"]) * p.grad
                         + len(h["optim"]) * p.optimizer)

    def cpu_bytes(self, g) -> int:  # the host keeps its gradient shard in fp32
        h = self.host[g]
        return self.b * (len(h["grads"]) * CPU_GRAD_BYTES + len(h["optim"]) * HOST_ADAM_BYTES)

    def record(self, name, kind, op, layer, description, received=None, sent=0, host=0):
        n = self.n
        self.steps.append(ZeroStep(
            len(self.steps), name, kind, op, layer, description,
            tuple({k: frozenset(h[k]) for k in KINDS} for h in self.gpu),
            tuple({k: frozenset(h[k]) for k in CPU_KINDS} for h in self.host),
            tuple(frozenset(r) for r in received) if received else (frozenset(),) * n,
            (sent,) * n, (host,) * n, tuple(self.gpu_bytes(g) for g in range(n)),
            tuple(self.cpu_bytes(g) for g in range(n))))

    def others(self, layer, g):
        return [blk for blk in self.blocks[layer] if blk != self.blocks[layer][g]]

    def all_gather(self, layers, why):
        """Every GPU sends its own block of each layer once around the ring: (N-1) blocks per layer.

        Several layers make one bucket (stage 1, like the executor): one collective, one latency."""
        got = [[blk for layer in layers for blk in self.others(layer, g)] for g in range(self.n)]
        for g in range(self.n):
            self.gpu[g]["params"] |= set(got[g])
        first = self.blocks[layers[0]]
        if len(layers) == 1:
            gets = [f"{blk} from GPU{j}" for j, blk in enumerate(first) if j] or ["nothing"]
            gets = " and ".join(filter(None, [", ".join(gets[:-1]), gets[-1]]))  # "x, y and z"
            what = f"{layers[0]} {why}: GPU0 gathers {gets}"
        else:
            what = (f"{why} of {', '.join(layers)} in one bucket: GPU0 gathers every other GPU's blocks "
                    f"({', '.join(b for b in got[0]) or 'nothing'})")
        self.record(f"all-gather {' '.join(layers)}", "comm", "all-gather", _one(layers), what, got,
                    (self.n - 1) * len(layers) * self.b * self.prec.param)

    def reduce_scatter(self, layers):
        """Each GPU ends with the sum over GPUs of its own blocks' gradients: (N-1) blocks per layer sent.

        From stage 2 on, the reduced shard replaces the full gradient: the other blocks go at once."""
        own = [[self.blocks[layer][g] for layer in layers] for g in range(self.n)]
        if self.stage >= 2:
            for g in range(self.n):
                for layer in layers:
                    self.gpu[g]["grads"] -= set(self.others(layer, g))
        grads = f"{layers[0]} grads" if len(layers) == 1 else f"grads of {', '.join(layers)} in one bucket"
        self.record(f"reduce-scatter {' '.join(layers)}", "comm", "reduce-scatter", _one(layers),
                    f"{grads}: reduce-scatter, each GPU keeps the summed gradient of its own block"
                    f"{'s' if len(layers) > 1 else ''} (GPU0: {', '.join(own[0])})"
                    + ("; the others' blocks are freed" if self.stage >= 2 and self.n > 1 else ""),
                    [set(o) for o in own] if self.n > 1 else None,
                    (self.n - 1) * len(layers) * self.b * self.prec.grad)

    def free(self, layer, kinds, when):
        for g in range(self.n):
            for k in kinds:
                self.gpu[g][k] -= set(self.others(layer, g))
        what = " and ".join(kinds)
        self.record(f"free {layer}", "compute", "free", layer, f"{layer} {when}: GPU0 frees the {what} "
                    f"of {', '.join(self.others(layer, 0)) or 'nothing'} (keeps its own "
                    f"{self.blocks[layer][0]})")

    def compute(self, layer, op):
        if op == "backward":
            for h in self.gpu:
                h["grads"] |= set(self.blocks[layer])
        action = "runs" if op == "forward" else "computes the gradients of all blocks of"
        self.record(f"{op} {layer}", "compute", op, layer,
                    f"{layer} {op}: every GPU {action} {layer} on its own slice of the batch")

    def to_cpu(self, layer):
        for g in range(self.n):
            self.gpu[g]["grads"] -= set(self.blocks[layer])
            self.host[g]["grads"].add(self.blocks[layer][g])
        self.record(f"to-cpu {layer}", "comm", "to-cpu", layer, f"{layer} grads to CPU: GPU0 sends "
                    f"{self.blocks[layer][0]}'s summed gradient to its host and frees it on the GPU",
                    host=self.b * self.prec.grad)


def walkthrough(stage: int, layers: int = 3, world_size: int = 3, offload: bool = False,
                precision: str = "mixed", block_numel: int = 1) -> list[ZeroStep]:
    """The ordered events of one training step under ZeRO `stage` (0-3), with holdings after each.

    `block_numel` elements per block (a layer has `world_size` blocks); bytes follow `precision`.
    """
    check_int("stage", stage, 0, 3)
    check_int("layers", layers, 1, 26)  # one letter per layer: La … Lz
    check_ranks("world_size", world_size)
    check_choice("precision", precision, tuple(PRECISIONS))  # `in` a dict fails on a list
    check_int("block_numel", block_numel, 1)
    check_offload(offload, stage)
    s = _Scene(stage, layers, world_size, offload, precision, block_numel)
    n, b, prec = world_size, block_numel, s.prec
    for layer in s.names:
        if stage == 3:
            s.all_gather([layer], "forward")
        s.compute(layer, "forward")
        if stage == 3:
            s.free(layer, ["params"], "forward done")
    for layer in reversed(s.names):  # gradients appear from the last layer
        if stage == 3:
            s.all_gather([layer], "backward")
        s.compute(layer, "backward")
        if stage == 0:  # DDP: each layer's gradients are all-reduced as soon as they exist
            s.record(f"all-reduce {layer}", "comm", "all-reduce", layer, f"{layer} grads: all-reduce, "
                     f"every GPU gets the sum of every block", [s.blocks[layer]] * n if n > 1 else None,
                     2 * (n - 1) * b * prec.grad)
            continue
        if stage == 3:  # the gathered params are no longer needed: free them before reducing (as FSDP2 does)
            s.free(layer, ["params"], "backward done")
        if stage >= 2:  # reduce right away: the reduced shard replaces the full gradient
            s.reduce_scatter([layer])
            if offload:
                s.to_cpu(layer)
    if stage == 1:  # gradients stay full-size until the step: reduce all layers at once, in one bucket
        s.reduce_scatter(list(reversed(s.names)))
    mine = ", ".join(sorted(s.own[0], key=_order))
    if offload:
        s.record("step", "cpu", "step", None, f"optimizer step on the CPU: GPU0's host runs Adam on {mine}")
        s.record("to-gpu", "comm", "to-gpu", None, f"params to GPU: GPU0 gets its updated {mine} back "
                 f"from its host", [s.own[g] for g in range(n)], host=len(s.own[0]) * b * prec.param)
    elif stage == 0:
        s.record("step", "compute", "step", None, "optimizer step: every GPU updates every block")
    else:
        s.record("step", "compute", "step", None, f"optimizer step: GPU0 runs Adam on its own {mine} "
                 f"(its optimizer shard)" + ("; its other parameter blocks are stale" if stage < 3 else ""))
    if stage == 1:  # bring everyone's updated blocks back: the second Ψ, one bucket as for the grads
        s.all_gather(s.names, "updated params")
    elif stage == 2:  # layer by layer: each layer's params are whole again as soon as its gather is done
        for layer in s.names:
            s.all_gather([layer], "updated params")
    return s.steps


def _check_steps(steps) -> list:
    if not isinstance(steps, (list, tuple)) or not steps or not all(isinstance(s, ZeroStep) for s in steps):
        raise ValueError(f"steps={steps!r}: must be the list of ZeroSteps that walkthrough returns")
    return steps


def memory_curve(steps) -> list[list[int]]:
    """Bytes of model state per GPU after each step: one list per GPU (plot one line each)."""
    _check_steps(steps)
    return [[st.gpu_bytes[g] for st in steps] for g in range(len(steps[0].gpu_bytes))]


def peak_bytes(steps) -> list[int]:  # per GPU (memory_curve checks `steps`)
    return [max(curve) for curve in memory_curve(steps)]


def executor_names(steps) -> list[str]:
    """The events after "start", named as the executor names them: layers L0, L1, … for La, Lb, …"""

    def rename(w):
        return f"L{ord(w[1]) - ord('a')}" if len(w) == 2 and w[0] == "L" and w[1].islower() else w

    return [" ".join(map(rename, st.name.split())) for st in _check_steps(steps)[1:]]


def to_trace(steps) -> Trace:
    """A timeline, one time unit per step: GPU g is lane g, its host (CPU) is lane N + g.

    Event kinds: "compute" (forward, backward, free, step on a GPU), "comm" (collectives, and
    PCIe copies: to-cpu from lane g to N + g, to-gpu the other way), "cpu" (Adam on the host).
    """
    _check_steps(steps)
    n, out = len(steps[0].gpu_bytes), Trace()
    for st in steps:
        if st.kind == "state":
            continue  # the starting point: nothing happens
        for g in range(n):
            if st.op == "to-cpu":
                rank, peer, nbytes = g, n + g, st.host_bytes[g]
            elif st.op == "to-gpu":
                rank, peer, nbytes = n + g, g, st.host_bytes[g]
            else:
                rank, peer, nbytes = (n + g if st.kind == "cpu" else g), None, st.bytes_sent[g]
            out.append(Event(rank, st.kind, st.index, peer, None, nbytes, st.name, float(st.index),
                             float(st.index + 1)))
    return out


def holdings_text(step: ZeroStep) -> str:
    """A deterministic table of who holds what after `step`: one row per GPU (and host, if used)."""
    if not isinstance(step, ZeroStep):
        raise ValueError(f"step={step!r}: must be one ZeroStep of a walkthrough")
    def cell(blocks):
        return " ".join(sorted(blocks, key=_order)) or "-"

    rows = [("", "params", "grads", "optim", "bytes")]
    rows += [(f"GPU{g}", *(cell(h[k]) for k in KINDS), str(step.gpu_bytes[g]))
             for g, h in enumerate(step.holdings)]
    rows += [(f"CPU{g}", "-", cell(h["grads"]), cell(h["optim"]), str(step.cpu_bytes[g]))
             for g, h in enumerate(step.cpu) if h["grads"] or h["optim"]]
    widths = [max(len(r[c]) for r in rows) for c in range(5)]
    lines = [f"step {step.index}: {step.name} ({step.kind})", step.description]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)
