"""simlab.parity.context_parallel: each variant on real gloo ranks computes the attention of one process (output
and dQ, dK, dV ≤ 1e-5 in float32), the same as torch's own ring, sends exactly the closed form's bytes, records
exactly the plan's trace and scores exactly the simulator's pairs — and refuses bad shapes before any launch."""
import pytest
import torch

from simlab.parity.context_parallel import run_context_parallel
from simlab.parity.context_parallel_torch import torch_compared, why_no_torch
from simlab.sim.context_parallel import work_per_rank
from simlab.sim.context_parallel_costs import costs

TOL = 1e-5

CASES = [  # (variant, layout, causal, world_size, heads, kv_heads): small, each a different corner
    ("ring", "zigzag", True, 4, 2, 1),  # the balanced ring, GQA with one K,V head
    ("ring", "contiguous", True, 3, 2, 2),  # unbalanced: rank r scores r + 1 blocks
    ("ring", "zigzag", False, 2, 2, 2),
    ("all-gather-kv", "zigzag", True, 4, 4, 2),  # Llama 3's way
    ("ulysses", "contiguous", True, 2, 4, 2),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-{'causal' if c[2] else 'full'}-n{c[3]}")
def run(request):
    variant, layout, causal, n, heads, kv_heads = request.param
    return run_context_parallel(world_size=n, seq=24, heads=heads, kv_heads=kv_heads, head_dim=4, batch=2,
                                variant=variant, layout=layout, causal=causal)


def test_matches_one_process_and_torchs_ring(run):
    assert run["max_abs_diff_vs_reference"] <= TOL
    assert set(run["max_abs_diff_per_tensor"]) == {"out", "dq", "dk", "dv"}
    assert run["max_abs_diff_vs_torch"] <= TOL and "context_parallel() itself needs CUDA" in run["torch_compared"]


def test_bytes_trace_and_work_are_the_plans(run):
    n, shape = run["world_size"], {k: run[k] for k in ("seq", "heads", "kv_heads", "head_dim", "batch", "layout")}
    closed_form = costs(run["variant"], world_size=n, **shape).bytes_sent
    assert run["bytes_sent_per_rank"] == run["plan_bytes_sent_per_rank"] == [closed_form] * n
    assert run["plan"].bytes_sent_per_rank() == [closed_form] * n  # the plan's transfers say the same
    assert run["matches_plan"]
    assert run["work_per_rank"] == run["plan_work_per_rank"]
    if run["variant"] != "ulysses":
        assert run["work_per_rank"] == list(work_per_rank(n, run["seq"], run["layout"], run["causal"]))
    backward = [sum(w for s, w in steps.items() if s >= n) for steps in run["work_per_step"]]
    assert backward == run["work_per_rank"]  # the backward scores the same pairs again
    if run["variant"] == "ring" and (run["layout"] == "zigzag" or not run["causal"]):
        assert all(sorted(steps)[:n] == list(range(n)) for steps in run["work_per_step"])  # nobody idles a step


def test_contiguous_blocks_leave_early_ranks_idle():
    # measured on real ranks: under a causal mask, contiguous rank r computes in r + 1 of the 3 forward steps
    contiguous = run_context_parallel(world_size=3, seq=12, heads=1, head_dim=2, layout="contiguous",
                                      compare_torch=False)
    busy = [len([s for s in steps if s < 3]) for steps in contiguous["work_per_step"]]
    assert busy == [1, 2, 3] and contiguous["work_per_rank"] == [10, 26, 42]  # r·16 + 4·5/2
    assert contiguous["why_no_torch"] == "compare_torch=False" and contiguous["max_abs_diff_vs_torch"] is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(world_size=3, seq=16), "seq=16: must be divisible by 6"),
    (dict(world_size=2, heads=3, kv_heads=2), "heads=3: must be divisible by kv_heads=2"),
    (dict(world_size=4, heads=2, variant="ulysses"), "heads=2: must be divisible by world_size=4"),
    (dict(world_size=2, heads=2, kv_heads=1, variant="ulysses"), "kv_heads=1: must be divisible by world_size=2"),
    (dict(world_size=2, variant="striped-ring"), "variant='striped-ring'"),
    (dict(world_size=2, causal=None), "causal=None"),
    (dict(world_size=2, head_dim=0), "head_dim=0"),
])
def test_refused_before_any_work(kwargs, message, no_launch):
    with pytest.raises(ValueError, match=message):
        run_context_parallel(**kwargs)


def test_torch_comparison_is_said_in_words():
    assert why_no_torch(torch.device("cpu")) is None
    assert "CPUs only" in why_no_torch(torch.device("cuda", 0))
    assert "_templated_ring_attention" in torch_compared()
