"""One contract for every lesson's parity run: the same signature shape, the same core result keys, the
same refusals before any work, and a torch comparison that is either there or explains its absence."""
import inspect

import pytest

from simlab.parity import CORE_KEYS
from simlab.parity.collectives import run_collective
from simlab.parity.common import result
from simlab.parity.context_parallel import run_context_parallel
from simlab.parity.data_parallel import run_ddp, run_dp, run_dp_and_ddp
from simlab.parity.expert_parallel import run_expert_parallel
from simlab.parity.hybrid import run_hybrid
from simlab.parity.pipeline import run_pipeline
from simlab.parity.tensor_parallel import run_tp, run_tp_split
from simlab.parity.training_step import run_training_step
from simlab.parity.zero import run_zero
from simlab.trace import Trace

RUNS = {  # each run with small, fast arguments on 2 ranks
    "collectives": lambda **kw: run_collective("ring-all-reduce", numel=8, **kw),
    "dp": lambda **kw: run_dp(steps=1, global_batch=4, **kw),
    "ddp": lambda **kw: run_ddp(steps=1, global_batch=4, **kw),
    "dp_and_ddp": lambda **kw: run_dp_and_ddp(bucket_cap_mb=25.0, model_bytes=58720256, steps=1, global_batch=4,
                                              **kw),  # lesson 2's explorer: both, for real
    "zero": lambda **kw: run_zero(2, steps=1, global_batch=4, **kw),
    "pipeline": lambda **kw: run_pipeline("gpipe", microbatches=2, global_batch=4, **kw),
    "tensor_parallel": lambda **kw: run_tp(**kw),
    "tensor_parallel_split": lambda **kw: run_tp_split("row", "column", **kw),  # lesson 5's explorer, any split
    "hybrid": lambda **kw: run_hybrid(dp=2, pp=1, tp=1, steps=1, **kw),
    "expert_parallel": lambda **kw: run_expert_parallel(experts=4, top_k=2, tokens=4, **kw),
    "context_parallel": lambda **kw: run_context_parallel(seq=8, heads=2, head_dim=4, **kw),
    "training_step": lambda **kw: run_training_step(microbatches=2, microbatch_size=1, steps=1, **kw),  # lesson 5b
}
FUNCTIONS = [run_collective, run_dp, run_ddp, run_dp_and_ddp, run_zero, run_pipeline, run_tp, run_tp_split,
             run_hybrid, run_expert_parallel, run_context_parallel, run_training_step]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_one_signature_shape(fn):
    params = inspect.signature(fn).parameters
    assert "world_size" in params and params["backend"].default == "auto" and params["timeout"].default > 0


@pytest.mark.parametrize("name", list(RUNS))
def test_core_keys(name):
    res = RUNS[name](world_size=2)
    assert list(res)[:len(CORE_KEYS)] == list(CORE_KEYS)
    assert res["world_size"] == 2 and res["backend"] == ("threads" if name == "dp" else "gloo")
    assert isinstance(res["trace"], Trace) and len(res["trace"]) > 0
    assert isinstance(res["max_abs_diff_vs_reference"], float) and res["max_abs_diff_vs_reference"] <= 1e-5
    sent = res["bytes_sent_per_rank"]
    assert len(sent) == 2 and all(isinstance(b, int) and b > 0 for b in sent)
    if res["max_abs_diff_vs_torch"] is None:  # only where torch has nothing to compare with here
        why = res["why_no_torch"]
        assert (name == "dp" and "GPUs" in why) or (name == "hybrid" and "in lessons 2-5" in why) or (
            name == "tensor_parallel_split" and "Megatron's split only" in why), why
    else:
        assert res["max_abs_diff_vs_torch"] <= 1e-5 and "why_no_torch" not in res


@pytest.mark.parametrize("name", list(RUNS))
@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=2, timeout=0), "timeout=0"), (dict(world_size=2, timeout=float("nan")), "timeout=nan"),
    (dict(world_size=0), "world_size=0"), (dict(world_size=2, seed=-1), "seed=-1"),
    (dict(world_size=2, backend="mpi"), "backend='mpi'"),
])
def test_refused_before_any_work(name, kwargs, message, no_launch, monkeypatch):
    import simlab.parity.common as C
    import simlab.parity.hybrid as H
    for module in (C, H):  # hybrid imported it by name
        monkeypatch.setattr(module, "reference_model", lambda *a, **k: pytest.fail("the reference ran"))
    with pytest.raises(ValueError, match=message):
        RUNS[name](**kwargs)


def test_no_torch_comparison_must_say_why():
    with pytest.raises(ValueError, match="why_no_torch"):
        result(world_size=1, backend="gloo", trace=Trace(), bytes_sent_per_rank=[0], max_abs_diff_vs_reference=0.0,
               max_abs_diff_vs_torch=None)
