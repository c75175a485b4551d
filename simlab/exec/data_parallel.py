"""DDP from scratch: gradient buckets all-reduced *during* backward, so communication hides behind compute.

Lesson 2. Every rank holds a full replica and a slice of the batch; one all-reduce averages the
gradients. The trick is *when*: backward produces gradients last layer first, so DDP packs them into
buckets (`simlab.sim.data_parallel_buckets`, the simulator's very plan) and all-reduces each bucket as soon as its turn
comes, while backward still computes earlier layers. Only what is left when backward ends is *exposed*.

`BucketedDDP(module)` behaves like torch's `DistributedDataParallel`: it broadcasts rank 0's weights;
a post-accumulate-grad hook per parameter marks it ready; a ready bucket is packed into a flat buffer
and all-reduced asynchronously — `allreduce="ring"`: one communication thread runs our ring
(`exec.collectives`, can count bytes) bucket after bucket; `"torch"`: `dist.all_reduce(async_op=True)`.
A callback queued on the autograd engine waits for every bucket when backward ends, divides by the
world size and copies back into `.grad`. `no_sync()` skips the all-reduce (gradient accumulation).

`group=` runs it on a sub-group (the data-parallel group of a `simlab.sim.mesh.Mesh`): ranks, the
broadcast's source and the all-reduces are all taken in that group.
Run: `simlab.parity.data_parallel.run_ddp(world_size=4)` → losses and params vs one process and torch's DDP.
Speed against torch's DDP: `.venv/bin/python benchmarks/data_parallel.py`.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable

from .._checks import check_choice, check_positive
from ..sim.collectives import plan_for
from ..sim.data_parallel_buckets import BucketReadiness, assign_buckets
from ..trace import Recorder
from .collectives import ring_all_reduce

ALLREDUCE = ("ring", "torch")
# benchmarks/data_parallel.py (4M params, 4 ranks on 2 cores), step time / torch's DDP, median of runs:
# "torch" 1.05 (1 bucket) and 1.06 (2), our Python ring 1.08 and 1.13 — each ring hop is a Python round
# trip. So the class defaults to "torch"; run_ddp (the lesson) uses "ring", which can count its bytes.
DEFAULT_ALLREDUCE = "torch"


def hidden_and_exposed(intervals, backward_end: float) -> tuple[float, float]:
    """(hidden, exposed) seconds of communication `intervals` [(start, end)] for a backward ending then.

    hidden: wall time before `backward_end` with an all-reduce in flight (overlapping ones count once);
    exposed: how long the step waited for communication after backward — what overlap failed to hide.
    >>> hidden_and_exposed([(1.0, 3.0), (2.0, 4.0), (5.0, 7.0)], backward_end=6.0)
    (4.0, 1.0)
    """
    hidden, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, backward_end)
        hidden, reach = hidden + max(0.0, end - start), max(reach, end)
    return hidden, max([0.0] + [end - backward_end for _, end in intervals])


class _Job:
    """One bucket's all-reduce in flight: its flat buffer, wall-clock start/end, bytes this rank sent."""

    def __init__(self, bucket: int, flat: torch.Tensor):
        self.bucket, self.flat = bucket, flat
        self.start, self.end = time.perf_counter(), None
        self.bytes_sent = self.bytes_received = None  # None: not counted
        self.done, self.error, self.work = threading.Event(), None, None

    def finished(self, _future=None) -> None:
        if self.end is None:  # the first to see it done sets the time: gloo's callback or wait() below
            self.end = time.perf_counter()
        self.done.set()

    def wait(self) -> None:
        if self.work is not None:  # don't also wait for gloo's callback: a thread wake-up, ~ms on a busy box
            self.work.wait()  # raises if gloo failed
            return self.finished()
        self.done.wait()
        if self.error is not None:
            raise RuntimeError(f"all-reduce of bucket {self.bucket} failed") from self.error


class _CommThread:
    """One thread, one queue: buckets are all-reduced in launch order — the same order on every rank,
    which a collective needs. isend/irecv and the adds release the GIL, so backward runs meanwhile."""

    def __init__(self, group, count_bytes: bool):
        self.group, self.count_bytes, self.jobs = group, count_bytes, queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="simlab-ddp-comm", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        error = None
        while (job := self.jobs.get()) is not None:  # None = close()
            try:
                if error is not None:  # the group is broken: fail the rest now, don't wait out a timeout each
                    raise error
                job.start = time.perf_counter()
                # a Recorder counts what we really send, but starts with a barrier (aligned clocks): ~2-5 ms
                recorder = Recorder() if self.count_bytes else None
                ring_all_reduce(job.flat, recorder, self.group)
                if recorder is not None:
                    job.bytes_sent, job.bytes_received = recorder.bytes_sent, recorder.bytes_received
            except BaseException as exc:  # hand it to the waiting main thread rather than dying silently
                job.error = error = exc
            job.finished()

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()


class BucketedDDP(nn.Module):
    """Data-parallel wrapper: `BucketedDDP(model)(x)`, `loss.backward()` → grads averaged over ranks.

    `count_bytes=True` (ring only) counts the bytes this rank sends, per step, in `.bytes_sent`.
    Per step it also keeps `.overlap` ((hidden, exposed) seconds) and, for the first `trace_steps`
    steps, `.events` (the trace; times from the step's forward; ranks are ranks in `group`).
    Call `close()` when done.
    """
    trace_steps = 100  # a long training run must not grow the trace without bound

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0, allreduce: str = DEFAULT_ALLREDUCE,
                 count_bytes: bool = False, group=None):
        super().__init__()
        check_positive("bucket_cap_mb", bucket_cap_mb)
        self.module, self.group, self.allreduce = module, group, check_choice("allreduce", allreduce, ALLREDUCE)
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)
        named = list(module.named_parameters())
        self.names, self.params = [n for n, _ in named], [p for _, p in named]
        with torch.no_grad():  # every replica starts from rank 0's weights
            for p in self.params:
                dist.broadcast(p, group=group, group_src=0)  # rank 0 of the group, whatever its global rank
        cap = max(1, int(bucket_cap_mb * 2**20))
        self.buckets = assign_buckets([p.numel() * p.element_size() for p in self.params], cap)
        self.readiness = BucketReadiness(self.buckets)
        plans = [plan_for("ring-all-reduce", self.world_size, sum(self.params[i].numel() for i in b),
                          self.params[b[0]].element_size()) for b in self.buckets]  # nbytes when not counted
        self._wire = [max(p.bytes_sent_per_rank()[self.rank], p.bytes_received_per_rank()[self.rank]) for p in plans]
        self.flats = [torch.empty(sum(self.params[i].numel() for i in b), dtype=self.params[b[0]].dtype,
                                  device=self.params[b[0]].device) for b in self.buckets]  # (bucket numel,)
        self.require_backward_grad_sync, self._sync_now = True, False
        self.rec = Recorder(self.rank, limit=self.trace_steps)  # rec.step: the optimizer step
        self.bytes_sent, self.overlap = [], []
        self._jobs, self._queued, self._mark = [], False, 0.0
        self._hooks = [p.register_post_accumulate_grad_hook(partial(self._on_grad_ready, i))
                       for i, p in enumerate(self.params)]
        self._comm = _CommThread(group, count_bytes) if allreduce == "ring" else None

    # ---- forward: remember whether this backward syncs (decided here, as torch's DDP does)
    def forward(self, *args, **kwargs):
        self._sync_now = self.require_backward_grad_sync and torch.is_grad_enabled()
        if self._sync_now:
            self.rec.restart()  # every time in this step's trace counts from here
        out = self.module(*args, **kwargs)
        if self._sync_now:
            self._mark = time.perf_counter()  # backward starts no earlier; the hook below makes it exact
            self._event("compute", "fwd", self.rec.origin, self._mark)
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(self._on_backward_start)
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Forward+backward in here only accumulate into `.grad`; the next synced backward averages the sum."""
        old, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ---- backward: hooks fire as gradients land, last layer first
    def _on_backward_start(self, grad):
        self._mark = time.perf_counter()

    def _on_grad_ready(self, index: int, param: torch.Tensor) -> None:
        if not self._sync_now:
            return  # no_sync: the gradient just accumulates in param.grad
        now = time.perf_counter()
        if not self._queued:  # once per backward: run _finish when the engine is done with the graph
            Variable._execution_engine.queue_callback(self._finish)
            self._queued = True
        self._event("compute", f"bwd {self.names[index]}", self._mark, now)
        self._mark = now
        for k in self.readiness.mark_ready(index):  # buckets go strictly in order, on every rank
            self._launch(k)

    def _launch(self, k: int) -> None:
        # pack the bucket into one flat buffer: one big message beats many small ones (fewer α's)
        flat = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[k]], out=self.flats[k])
        job = _Job(k, flat)
        self._jobs.append(job)
        if self._comm is not None:
            self._comm.jobs.put(job)
        else:  # gloo runs it on its own threads; the future tells us when it is done
            job.work = dist.all_reduce(flat, group=self.group, async_op=True)
            job.work.get_future().then(job.finished)

    def _finish(self) -> None:
        bwd_end = time.perf_counter()
        self._queued, self._sync_now = False, False
        if not self.readiness.done:  # some parameter got no gradient (torch's DDP: find_unused_parameters)
            raise RuntimeError(f"backward ended with bucket {self.readiness.launched} not ready: unused parameters?")
        for job in self._jobs:
            job.wait()
            grads = [self.params[i].grad for i in self.buckets[job.bucket]]
            for grad, part in zip(grads, job.flat.split([g.numel() for g in grads])):
                # unpack into .grad, where the optimizer looks; the all-reduce summed, DDP averages
                torch.div(part.view_as(grad), self.world_size, out=grad)  # one pass over memory, not two
        self._record_step(bwd_end)
        self._jobs = []
        self.rec.step += 1
        self.readiness.reset()

    # ---- bookkeeping: trace events, bytes, hidden vs exposed communication
    @property
    def events(self):
        return self.rec.events

    @property
    def step(self) -> int:
        return self.rec.step

    def _event(self, kind: str, name: str, start_abs: float, end_abs: float, nbytes: int = 0, chunk=None):
        self.rec.record(kind, start_abs - self.rec.origin, end_abs - self.rec.origin, name, nbytes=nbytes,
                        chunk=chunk)

    def _record_step(self, bwd_end: float) -> None:
        for job in self._jobs:  # nbytes as in the simulator: this rank's busier direction
            counted = job.bytes_sent is not None
            nbytes = max(job.bytes_sent, job.bytes_received) if counted else self._wire[job.bucket]
            self._event("comm", f"all-reduce b{job.bucket}", job.start, job.end, nbytes, job.bucket)
        self.overlap.append(hidden_and_exposed([(job.start, job.end) for job in self._jobs], bwd_end))
        counted = [job.bytes_sent for job in self._jobs if job.bytes_sent is not None]
        self.bytes_sent.append(sum(counted) if len(counted) == len(self._jobs) else None)  # None: not counted

    def close(self) -> None:
        """Stop the communication thread and remove the hooks (call before destroying the group)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self._comm is not None:
            self._comm.close()
            self._comm = None
