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

Who holds which block after each event is the scene's bookkeeping (`simlab.sim.zero_scene`); this module
orders the events stage by stage and reads the result (memory curves, the executor's names, a trace, a table).

Memory is counted in the same bytes as `simlab.sim.memory.per_gpu_bytes`: the state at the start
(and end) of a step equals it exactly; the peak adds only the transient full layer.

    >>> steps = walkthrough(3)
    >>> steps[1].description
    'La forward: GPU0 gathers a1 from GPU1 and a2 from GPU2'
"""
from __future__ import annotations

from .._checks import check_choice, check_int, check_ranks
from ..trace import Event, Trace
from .memory import PRECISIONS, check_offload
from .message import Message
from .zero_scene import KINDS, ZeroStep, _order, _Scene


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
            s.all_gather([layer], Message("forward"))
        s.compute(layer, "forward")
        if stage == 3:
            s.free(layer, ["params"], Message("forward done"))
    for layer in reversed(s.names):  # gradients appear from the last layer
        if stage == 3:
            s.all_gather([layer], Message("backward"))
        s.compute(layer, "backward")
        if stage == 0:  # DDP: each layer's gradients are all-reduced as soon as they exist
            s.record(f"all-reduce {layer}", "comm", "all-reduce", layer, Message(
                     "{layer} grads: all-reduce, every GPU gets the sum of every block", layer=layer),
                     [s.blocks[layer]] * n if n > 1 else None, 2 * (n - 1) * b * prec.grad)
            continue
        if stage == 3:  # the gathered params are no longer needed: free them before reducing (as FSDP2 does)
            s.free(layer, ["params"], Message("backward done"))
        if stage >= 2:  # reduce right away: the reduced shard replaces the full gradient
            s.reduce_scatter([layer])
            if offload:
                s.to_cpu(layer)
    if stage == 1:  # gradients stay full-size until the step: reduce all layers at once, in one bucket
        s.reduce_scatter(list(reversed(s.names)))
    mine = Message.listing(sorted(s.own[0], key=_order))  # Messages: said in the reader's language where printed
    if offload:
        s.record("step", "cpu", "step", None, Message("optimizer step on the CPU: GPU0's host runs Adam on {mine}",
                                                      mine=mine))
        s.record("to-gpu", "comm", "to-gpu", None, Message("params to GPU: GPU0 gets its updated {mine} back from its "
                 "host", mine=mine), [s.own[g] for g in range(n)], host=len(s.own[0]) * b * prec.param)
    elif stage == 0:
        s.record("step", "compute", "step", None, Message("optimizer step: every GPU updates every block"))
    else:
        own = Message("optimizer step: GPU0 runs Adam on its own {mine} (its optimizer shard)", mine=mine)
        s.record("step", "compute", "step", None, Message("{own}; its other parameter blocks are stale", own=own)
                 if stage < 3 else own)
    if stage == 1:  # bring everyone's updated blocks back: the second Ψ, one bucket as for the grads
        s.all_gather(s.names, Message("updated params"))
    elif stage == 2:  # layer by layer: each layer's params are whole again as soon as its gather is done
        for layer in s.names:
            s.all_gather([layer], Message("updated params"))
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
    """A deterministic table of who holds what after `step`: one row per GPU (and host, if used). A Message:
    English as a string; `simlab.i18n._` says its two sentences in the reader's language (the table's column
    names are the holdings' own keys, as in `ZeroStep.holdings`, and stay)."""
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
    lines = [Message("step {index}: {name} ({kind})", index=step.index, name=step.name, kind=step.kind),
             step.description]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return Message.lines(lines)
