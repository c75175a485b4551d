"""Pipeline parallelism on real processes: every rank runs ITS list of a schedule, action by action.

What it teaches: a pipeline schedule is nothing but a per-rank list of actions (``2F0``, ``1B3``, …),
and the executor needs no other intelligence. The model is cut into S = p·v stages; rank r of the
pipeline's process `group` (default WORLD; in 3-D parallelism this rank's pipeline group) holds
stages r, r+p, r+2p, … . Each action talks only to the owners of the neighbouring stages:
  F s j: take micro-batch j's activation from stage s−1 (stage 0: the input), compute, hand the output
         to stage s+1 (the last stage computes the loss instead);
  B s j: take the output grad from stage s+1 (last stage: the loss), backward, hand the input grad to s−1;
  I s j: the input grad only (keeping the graph for W), W s j: the weight grads, later.
Receives are posted up front and waited when needed, sends are waited lazily: any schedule whose
dependencies are satisfiable runs without deadlock, whatever order it picks. Neighbour stages on the
same rank hand over in memory. Every action lands in the trace as
``Event(rank, "compute", step=<index in the rank's list>, name="2F0", start, end)`` — the very shape
`simlab.sim.pipeline.simulate` emits, so a real trace and a simulated one compare with one `==`. An
event runs from the end of waiting for its input to the moment its output's send is posted: the rank
is busy all that time, so the gaps between events are exactly the bubble the simulator predicts.
Times are absolute `time.perf_counter()` readings (CLOCK_MONOTONIC: one clock for every process on a
host); the parent subtracts the step's earliest start over all ranks. Per-rank origins would not do:
ranks leave a barrier up to milliseconds apart on a busy machine. Because an event ends only after
its send is posted, a consumer may start up to that posting time before its producer's event ends;
`ready` keeps when each output was computed, and no consumer starts before that.
Messages go to ranks *in the group* (`group_dst`/`group_src`: torch maps them to global ranks); every
buffer lives on the rank's `device`; `bytes_sent` counts what this rank sent (activations and grads).
Run it: see `simlab.parity.pipeline.run_pipeline`.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from ..plan import Action
from ..trace import Recorder
from .models import loss_fn, make_mlp

ACT, GRAD = 0, 1  # what travels: an activation (forward) or an activation's gradient (backward)


def owner(stage: int, world_size: int) -> int:
    """The rank holding `stage`: stages are dealt round-robin, so rank r holds r, r+p, r+2p, …

    >>> [owner(s, 2) for s in range(4)]
    [0, 1, 0, 1]
    """
    return stage % world_size


def make_stages(num_stages: int, hidden: int, seed: int = 0) -> list[nn.Sequential]:
    """The whole model `make_mlp([hidden] * (S + 1))` cut into S stages: Linear+GELU each, the last one
    just the Linear head. The stages share their modules with that model, so the single-process
    reference is literally the same network.

    >>> [len(stage) for stage in make_stages(3, 4)]
    [2, 2, 1]
    """
    model = make_mlp([hidden] * (num_stages + 1), seed)
    return [model[2 * s:2 * s + 2] for s in range(num_stages)]


def tag(kind: int, stage: int, mb: int, microbatches: int) -> int:
    """A message's tag, unique per (what, receiving stage, micro-batch): receives match their sends
    whatever order the two ranks post them in."""
    return 2 * (stage * microbatches + mb) + kind


class PipelineRank:
    """One rank's share of the pipeline: its stages, its micro-batches, its mailbox.

    `stages`: {stage index: module} this rank holds; `x_mbs`, `y_mbs`: the m micro-batches of inputs and
    targets (only stage 0 reads x, only the last stage reads y), on `device` like the stages.
    `activation_shape`: what travels between stages (default: x's micro-batch shape, (b, h));
    `loss`: the last stage's loss(output, target) (default: the MLP's mean squared error).
    `run(actions)` executes one step's action list and returns its Events.
    """

    def __init__(self, stages: dict[int, nn.Module], num_stages: int, x_mbs, y_mbs, group=None, device=None,
                 activation_shape=None, loss=loss_fn):
        self.group, self.rank, self.p = group, dist.get_rank(group), dist.get_world_size(group)
        self.stages, self.S, self.x, self.y, self.m = stages, num_stages, x_mbs, y_mbs, len(x_mbs)
        self.shape = tuple(activation_shape or x_mbs[0].shape)  # every message has it: receivers pre-allocate
        self.loss = loss
        self.device = torch.device(device) if device is not None else x_mbs[0].device
        self.bytes_sent = 0  # over every run: activations forward, input grads backward

    # ------------------------------------------------------------ the mailbox
    def post_receives(self, actions) -> None:
        """Post every receive this step needs now: data may arrive long before we want it."""
        self.inbox, self.local, self.sends = {}, {}, []
        for a in actions:
            if a.op == "F" and a.stage > 0:
                key = (ACT, a.stage, a.mb)
                src = owner(a.stage - 1, self.p)
            elif a.op in "BI" and a.stage < self.S - 1:
                key = (GRAD, a.stage, a.mb)
                src = owner(a.stage + 1, self.p)
            else:
                continue
            if src != self.rank:
                buf = torch.empty(self.shape, device=self.device)  # (b, h)
                self.inbox[key] = (dist.irecv(buf, group=self.group, group_src=src, tag=tag(*key, self.m)), buf)

    def take(self, kind: int, stage: int, mb: int) -> torch.Tensor:
        key = (kind, stage, mb)
        if key in self.local:  # a neighbour stage on this very rank left it here
            return self.local.pop(key)
        if key not in self.inbox:  # from this rank, and not made yet: waiting would wait forever
            what = "activation" if kind == ACT else "output grad"
            raise RuntimeError(f"rank {self.rank}: the {what} for stage {stage} micro-batch {mb} is needed "
                               "before this rank has produced it (the schedule is out of order)")
        work, buf = self.inbox.pop(key)
        work.wait()
        return buf

    def give(self, kind: int, stage: int, mb: int, tensor: torch.Tensor) -> None:
        """Hand `tensor` to the owner of `stage` (the receiving stage)."""
        dst = owner(stage, self.p)
        if dst == self.rank:
            self.local[(kind, stage, mb)] = tensor
        else:  # keep the tensor alive until the send completes: waited at the end of the step
            tensor = tensor.contiguous()
            self.bytes_sent += tensor.numel() * tensor.element_size()
            self.sends.append((dist.isend(tensor, group=self.group, group_dst=dst, tag=tag(kind, stage, mb, self.m)),
                               tensor))

    def finish(self) -> None:
        for work, _ in self.sends:
            work.wait()
        self.sends = []

    # ------------------------------------------------------------ the four actions
    def forward(self, a: Action) -> None:
        s, j = a.stage, a.mb
        inp = self.x[j] if s == 0 else self.take(ACT, s, j).requires_grad_()  # (b, h)
        start = time.perf_counter()
        out = self.stages[s](inp)  # (b, h)
        if s == self.S - 1:  # the loss is a mean over the micro-batch; /m makes the sum the batch mean
            out = self.loss(out, self.y[j]) / self.m
            self.losses[j] = out.item()
        self.saved[(s, j)] = (inp, out)
        ready = time.perf_counter()
        if s < self.S - 1:
            self.give(ACT, s + 1, j, out.detach())
        self.mark(start, ready)  # posting the send is the rank's work too, not idle time

    def output_grad(self, s: int, j: int):
        return None if s == self.S - 1 else self.take(GRAD, s, j)  # last stage: d(loss)/d(loss) = 1

    def backward(self, a: Action) -> None:
        s, j = a.stage, a.mb
        grad = self.output_grad(s, j)
        start = time.perf_counter()
        inp, out = self.saved.pop((s, j))
        torch.autograd.backward(out, grad)  # weight grads accumulate into .grad, and inp.grad is set
        ready = time.perf_counter()
        if s > 0:
            self.give(GRAD, s - 1, j, inp.grad)
        self.mark(start, ready)

    def backward_input(self, a: Action) -> None:
        s, j = a.stage, a.mb
        grad = self.output_grad(s, j)
        start = time.perf_counter()
        inp, out = self.saved[(s, j)]
        grad_in = None
        if s > 0:  # retain_graph: W walks the same graph later for the weights
            (grad_in,) = torch.autograd.grad(out, inp, grad, retain_graph=True)  # (b, h)
        self.for_w[(s, j)] = grad
        ready = time.perf_counter()
        if grad_in is not None:
            self.give(GRAD, s - 1, j, grad_in)
        self.mark(start, ready)

    def backward_weight(self, a: Action) -> None:
        s, j = a.stage, a.mb
        start = time.perf_counter()
        _, out = self.saved.pop((s, j))
        params = list(self.stages[s].parameters())
        grads = torch.autograd.grad(out, params, self.for_w.pop((s, j)))  # frees the graph now
        for p, g in zip(params, grads):
            p.grad = g if p.grad is None else p.grad + g
        self.mark(start)

    # ------------------------------------------------------------ one step
    def mark(self, start: float, ready: float | None = None) -> None:
        """Record the current action: absolute clock readings; `ready`: its output existed (default: now)."""
        a, i = self.current
        end = time.perf_counter()
        self.rec.record("compute", start, end, str(a), step=i)
        self.ready[str(a)] = end if ready is None else ready

    def run(self, actions):
        """Execute `actions` (this rank's list) once; returns one Event per action, in absolute
        perf_counter seconds (`self.t0`: when this rank left the starting barrier; `self.ready`: action
        name → when its output was computed)."""
        run_op = {"F": self.forward, "B": self.backward, "I": self.backward_input, "W": self.backward_weight}
        self.rec = Recorder(self.rank, origin=0.0)  # absolute clock readings: the parent aligns the ranks
        self.saved, self.for_w, self.losses, self.ready = {}, {}, {}, {}
        dist.barrier(self.group)  # a common start; ranks still leave it at slightly different moments
        self.t0 = time.perf_counter()
        self.post_receives(actions)
        for i, a in enumerate(actions):
            self.current = (a, i)
            run_op[a.op](a)
        self.finish()
        if self.saved or self.for_w or self.inbox or self.local:
            left = sorted(map(str, list(self.saved) + list(self.for_w) + list(self.inbox) + list(self.local)))
            raise RuntimeError(f"rank {self.rank}: schedule left work undone: {left[:6]}")
        return self.rec.events
