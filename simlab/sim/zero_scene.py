"""ZeRO's scene (lesson 3): the primer's layers La, Lb, Lc cut into one block per GPU, and the bookkeeping of who
holds which block of parameters, gradients and optimizer state after every event of a step.

`_Scene` is the mutable state; each of its acts (compute, all-gather, reduce-scatter, free, to-cpu) changes
the holdings and snapshots them into a `ZeroStep` with the bytes each GPU sent and keeps. The order of the
acts, stage by stage, is `simlab.sim.zero.walkthrough`'s.
"""
from __future__ import annotations

from dataclasses import dataclass

from .memory import CPU_GRAD_BYTES, HOST_ADAM_BYTES, PRECISIONS
from .message import Message

KINDS = ("params", "grads", "optim")  # what a GPU holds
KIND_WORDS = {"params": Message("params"), "grads": Message("grads"), "optim": Message("optim")}
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
        # descriptions are Messages: English here, said in the reader's language where they are printed
        sharded = ["", Message("optimizer state"), Message("gradients and optimizer state"),
                   Message("parameters, gradients and optimizer state")][stage]
        holds = (Message("GPU i keeps only its own blocks (block i of every layer) of the {sharded}", sharded=sharded)
                 if stage else Message("every GPU holds everything"))
        self.record("start", "state", "start", None, Message(
            "between steps: {holds}{offload}", holds=holds,
            offload=Message("; gradients and optimizer state live on the CPU") if offload else ""))

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
            gets = Message.series(Message("{block} from GPU{j}", block=blk, j=j) for j, blk in enumerate(first) if j)
            what = Message("{layer} {why}: GPU0 gathers {gets}", layer=layers[0], why=why,
                           gets=gets or Message("nothing"))
        else:
            what = Message("{why} of {layers} in one bucket: GPU0 gathers every other GPU's blocks ({blocks})",
                           why=why, layers=Message.listing(layers),
                           blocks=Message.listing(got[0]) or Message("nothing"))
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
        grads = (Message("{layer} grads", layer=layers[0]) if len(layers) == 1 else
                 Message("grads of {layers} in one bucket", layers=Message.listing(layers)))
        keeps = (Message("{grads}: reduce-scatter, each GPU keeps the summed gradient of its own block (GPU0: {own})",
                         grads=grads, own=own[0][0]) if len(layers) == 1 else
                 Message("{grads}: reduce-scatter, each GPU keeps the summed gradient of its own blocks (GPU0: {own})",
                         grads=grads, own=Message.listing(own[0])))
        self.record(f"reduce-scatter {' '.join(layers)}", "comm", "reduce-scatter", _one(layers),
                    Message("{keeps}; the others' blocks are freed", keeps=keeps) if self.stage >= 2 and self.n > 1
                    else keeps,
                    [set(o) for o in own] if self.n > 1 else None,
                    (self.n - 1) * len(layers) * self.b * self.prec.grad)

    def free(self, layer, kinds, when):
        for g in range(self.n):
            for k in kinds:
                self.gpu[g][k] -= set(self.others(layer, g))
        self.record(f"free {layer}", "compute", "free", layer, Message(
            "{layer} {when}: GPU0 frees the {what} of {others} (keeps its own {own})", layer=layer, when=when,
            what=Message.series(KIND_WORDS[k] for k in kinds),
            others=Message.listing(self.others(layer, 0)) or Message("nothing"), own=self.blocks[layer][0]))

    def compute(self, layer, op):
        if op == "backward":
            for h in self.gpu:
                h["grads"] |= set(self.blocks[layer])
        self.record(f"{op} {layer}", "compute", op, layer, Message(
            "{layer} forward: every GPU runs {layer} on its own slice of the batch", layer=layer) if op == "forward"
            else Message("{layer} backward: every GPU computes the gradients of all blocks of {layer} on its own "
                         "slice of the batch", layer=layer))

    def to_cpu(self, layer):
        for g in range(self.n):
            self.gpu[g]["grads"] -= set(self.blocks[layer])
            self.host[g]["grads"].add(self.blocks[layer][g])
        self.record(f"to-cpu {layer}", "comm", "to-cpu", layer, Message(
                    "{layer} grads to CPU: GPU0 sends {block}'s summed gradient to its host and frees it on the GPU",
                    layer=layer, block=self.blocks[layer][0]),
                    host=self.b * self.prec.grad)
