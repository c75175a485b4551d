"""Fitting the simulator to a run: a simulated run, fed back in, must give its own workload back."""
import dataclasses

import pytest

from simlab.sim.calibrate import fit_alpha_beta, fit_ddp_workload
from simlab.sim.cost import ring_all_reduce_seconds
from simlab.sim.data_parallel import simulate_ddp, workload_from_layers
from simlab.trace import Trace


def test_fit_alpha_beta_recovers_the_law():
    n, alpha, bw = 4, 25e-6, 3e9
    sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 24]
    per_rank = [2 * (n - 1) * s // n for s in sizes]
    durations = [ring_all_reduce_seconds(n, s, alpha, bw) for s in sizes]
    got_alpha, got_bw = fit_alpha_beta(durations, per_rank, n)
    assert got_alpha == pytest.approx(alpha, rel=1e-6) and got_bw == pytest.approx(bw, rel=1e-6)


def test_equal_sizes_leave_only_latency():
    alpha, bw = fit_alpha_beta([0.006, 0.006], [100, 100], world_size=2)
    assert alpha == pytest.approx(0.003) and bw == float("inf")
    assert fit_alpha_beta([1.0], [5], world_size=1) == (0.0, float("inf"))


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
