"""Lesson 2's calibration: fit the simulator to a real DDP run, so the lesson can lay the prediction over the
measurement (lesson 4's is `sim.pipeline_calibrate`, lesson 6's `exec.hybrid_calibrate`).

A real DDP step (`simlab.parity.data_parallel.run_ddp`) records when forward ended, when each parameter's
gradient landed, and when each bucket's all-reduce started and ended. `fit_ddp_workload` turns one
step of that trace into a `Workload`: every parameter tensor becomes one "layer" (so the simulator
builds exactly the real buckets), compute times are the measured ones, and α and bandwidth are fitted
to the all-reduce durations by least squares on the α-β law (`sim.cost.fit_alpha_beta`).
"""
from __future__ import annotations

import numpy as np

from .._checks import check_batch, check_int, check_positive, check_ranks
from .cost import fit_alpha_beta
from .data_parallel import Workload


def _mean_over_ranks(trace, step: int, name: str) -> float:
    durations = [e.end - e.start for e in trace if e.step == step and e.name == name]
    if not durations:
        raise ValueError(f"step={step}: the trace has no {name!r} event in that step")
    return float(np.mean(durations))


def fit_ddp_workload(trace, param_numels, param_names, world_size: int, global_batch: int,
                     bucket_cap_mb: float, step: int = 1, bytes_per_param: int = 4) -> Workload:
    """A Workload measured from `step` of a real DDP trace (step 0 pays for warm-up: avoid it)."""
    check_ranks("world_size", world_size)  # the Workload's range
    check_batch(global_batch, world_size)
    check_positive("bucket_cap_mb", bucket_cap_mb)
    check_int("step", step, 0)
    check_int("bytes_per_param", bytes_per_param, 1)
    if len(param_names) != len(param_numels):
        raise ValueError(f"param_names: has {len(param_names)} names for {len(param_numels)} parameters")
    micro = global_batch // world_size
    fwd = _mean_over_ranks(trace, step, "fwd")
    bwd = [_mean_over_ranks(trace, step, f"bwd {name}") for name in param_names]
    first_grad = min(e.start for e in trace if e.step == step and e.name.startswith("bwd "))
    fwd_end = np.mean([e.end for e in trace if e.step == step and e.name == "fwd"])
    comm = [e for e in trace if e.step == step and e.name.startswith("all-reduce b")]
    alpha, bandwidth = fit_alpha_beta([e.end - e.start for e in comm], [e.nbytes for e in comm], world_size)
    total = sum(param_numels)
    return Workload(tuple(param_numels), tuple(fwd / micro * n / total for n in param_numels),
                    tuple(t / micro for t in bwd), world_size=world_size, global_batch=global_batch,
                    bytes_per_param=bytes_per_param, loss_seconds=max(0.0, first_grad - fwd_end) / micro,
                    alpha=alpha, bandwidth=min(bandwidth, 1e15), bucket_cap_mb=bucket_cap_mb)
