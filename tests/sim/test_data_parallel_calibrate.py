"""Lesson 2's calibration: a simulated DDP run, fed back in as if measured, must give its own workload back."""
import dataclasses

import pytest

from simlab.sim.data_parallel import simulate_ddp, workload_from_layers
from simlab.sim.data_parallel_calibrate import fit_ddp_workload
from simlab.trace import Trace


def test_a_simulated_step_fits_back_to_its_own_workload():
    layers = [1 << 16, 1 << 18, 1 << 17, 1 << 15]
    w = workload_from_layers(layers, world_size=4, global_batch=32, bucket_cap_mb=1.0, alpha=40e-6,
                             bandwidth=2e9, update_seconds=0.0)
    sim = simulate_ddp(w)
    as_real = Trace(dataclasses.replace(e, step=1) for e in sim.trace)  # a real trace numbers training steps
    fitted = fit_ddp_workload(as_real, layers, [f"L{i}" for i in range(4)], 4, 32, 1.0, step=1)
    assert fitted.alpha == pytest.approx(w.alpha, rel=1e-6)
    assert fitted.bandwidth == pytest.approx(w.bandwidth, rel=1e-6)
    assert fitted.bwd_seconds == pytest.approx(w.bwd_seconds, rel=1e-9)
    assert fitted.fwd_seconds == pytest.approx(w.fwd_seconds, rel=1e-9)
    again = simulate_ddp(fitted)
    assert again.buckets == sim.buckets
    assert again.step_seconds == pytest.approx(sim.step_seconds, rel=1e-6)


def test_missing_events_are_named():
    with pytest.raises(ValueError, match="step=3: the trace has no 'fwd' event"):
        fit_ddp_workload(Trace(), [1], ["w"], 2, 4, 1.0, step=3)
