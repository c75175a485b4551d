"""`simlab.parity.data_parallel`: `run_ddp` and `run_dp` refuse bad input in one line before any process or thread
starts, a DP that does not reduce its gradients is caught, and DP's bytes per phase are counted in closed form."""
import pytest

import simlab.exec.data_parallel_threads as DP
import simlab.parity.data_parallel as P
from simlab.exec.models import make_mlp

TOL = 1e-5  # fp32: the sums run in another order, nothing more


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=4, global_batch=10), "global_batch=10: must be divisible by world_size=4"),
    (dict(world_size=2, global_batch=6, accumulate=2),
     "global_batch=6: must be divisible by world_size=2 x accumulate=2"),
    (dict(world_size=2, bucket_cap_mb=0), "bucket_cap_mb=0: must be a positive number"),
    (dict(world_size=0), "world_size=0: must be between 1 and 64"),
    (dict(world_size=2, steps=0), "steps=0: must be >= 1"),
    (dict(world_size=2, allreduce="nccl"), "allreduce='nccl': must be one of ring, torch"),
])
def test_run_ddp_refuses_bad_input_in_one_line_before_launching(kwargs, message, no_launch):
    with pytest.raises(ValueError) as err:
        P.run_ddp(**kwargs)
    assert str(err.value) == message


def test_a_dp_that_does_not_reduce_the_gradients_is_caught(monkeypatch):
    """If backward kept only device 0's gradients (no reduce), parity must fail."""
    def device_zero_only(ctx, *grads):
        k = len(grads) // ctx.n
        return (None, None, *grads[:k])

    assert P.run_dp(2, steps=3)["max_abs_diff_vs_reference"] <= TOL
    monkeypatch.setattr(DP._Replicate, "backward", staticmethod(device_zero_only))
    assert P.run_dp(2, steps=3)["max_abs_diff_vs_reference"] > 1e-3


def test_simulator_bytes_small_case():
    model = make_mlp([3, 5, 1])  # 20 + 6 = 26 parameters: 104 bytes
    assert P.simulated_bytes(model, world_size=2, global_batch=4, in_features=3, out_features=1) == {
        "scatter inputs": [24, 0], "replicate": [104, 0], "gather outputs": [0, 8], "scatter grads": [8, 0],
        "reduce grads": [0, 104]}


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=4, global_batch=10), "global_batch=10: must be divisible by world_size=4"),
    (dict(world_size=0), "world_size=0: must be between 1 and 64"),
    (dict(world_size=2, steps=0), "steps=0: must be >= 1"),
    (dict(world_size=2, backend="gloo"), "backend='gloo': must be one of auto, threads"),
])
def test_run_dp_refuses_bad_input_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        P.run_dp(**kwargs)
    assert str(err.value) == message
