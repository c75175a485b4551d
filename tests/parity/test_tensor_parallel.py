"""`simlab.parity.tensor_parallel.run_tp`: bad input refused in one line before any process starts."""
import pytest

from simlab.parity.tensor_parallel import run_tp


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=0), "world_size=0"), (dict(world_size="2"), "world_size='2'"),
    (dict(block="conv"), "block='conv'"), (dict(batch=0), "batch=0"), (dict(seq=0), "seq=0"),
    (dict(hidden=0), "hidden=0"), (dict(block="attention", hidden=6), "hidden=6: must be divisible by heads=4"),
    (dict(block="attention", heads=2), "heads=2: must be divisible by world_size=4"),
    (dict(ffn=10), "ffn=10: must be divisible by world_size=4"), (dict(seed=-1), "seed=-1"),
    (dict(compare_torch="yes"), "compare_torch='yes'"), (dict(timeout=0), "timeout=0"),
])
def test_bad_input_fails_before_any_process_starts(kwargs, message, no_launch):
    with pytest.raises(ValueError) as err:
        run_tp(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
