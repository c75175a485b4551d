"""The α-β law fitted back: `fit_alpha_beta` recovers α and the bandwidth from all-reduce durations."""
import pytest

from simlab.sim.cost import fit_alpha_beta, ring_all_reduce_seconds


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
