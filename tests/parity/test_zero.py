"""`simlab.parity.zero.run_zero`: a ZeRO that skips the gradient reduction is caught (one that skips only the
average is almost invisible to Adam: the parity check's limit), and bad input is refused before a launch."""
import pytest

import simlab.exec.zero as Z
from simlab.parity.zero import run_zero

TOL = 1e-5  # fp32: the grads are summed in another order, nothing more
SIZES = (5, 7, 3)  # layers of 42 and 24 params: 42 is padded at n = 4 (S = 11); test_shards covers the rest


def test_skipping_the_reduction_is_caught(monkeypatch):
    # each rank keeps its own slice of its own grads; the forked ranks inherit the patch
    monkeypatch.setattr(Z, "reduce_scatter_mean", lambda rows, group=None: rows[Z.dist.get_rank(group)])
    res = run_zero(2, 2, steps=5, global_batch=8, sizes=SIZES, compare_torch=False)
    assert res["max_abs_diff_vs_reference"] > 100 * TOL


def test_skipping_the_average_is_almost_invisible_to_adam(monkeypatch):
    # Adam divides m by sqrt(v): grads N times too large change only the eps term — a lesson, not a bug
    mean = Z.reduce_scatter_mean
    monkeypatch.setattr(Z, "reduce_scatter_mean", lambda rows, group=None: mean(rows, group).mul_(rows.shape[0]))
    res = run_zero(2, 2, steps=5, global_batch=8, sizes=SIZES, compare_torch=False)
    assert 0 < res["max_abs_diff_vs_reference"] <= TOL


@pytest.mark.parametrize("kwargs, message", [
    (dict(stage=0), "stage=0"), (dict(stage=4), "stage=4"), (dict(stage="1"), "stage='1'"),
    (dict(stage=1, world_size=3), "global_batch=16"), (dict(stage=1, offload=True), "offload=True"),
    (dict(stage=2, offload="yes"), "offload='yes'"), (dict(stage=2, steps=0), "steps=0"),
    (dict(stage=2, lr=0), "lr=0"),
])
def test_invalid_arguments_fail_before_launch(kwargs, message, no_launch):
    with pytest.raises(ValueError, match=message):
        run_zero(**kwargs)
