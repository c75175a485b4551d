"""Expert-data parallel (`sim.expert_parallel_layout`): the groups against Megatron-LM's own rank generators, the
gradient all-reduces' bytes against the ring's closed form, and the step's bytes and trace adding up."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.collectives import ring_bytes_sent
from simlab.sim.expert_parallel import random_logits, route
from simlab.sim.expert_parallel_dispatch import STEPS, dispatch_plan
from simlab.sim.expert_parallel_layout import GRAD_STEPS, expert_data_parallel
from simlab.sim.mesh import Mesh


def _routings(ep, tokens, experts, top_k, factor, seed):
    return [route(random_logits(tokens, experts, seed + r), top_k, factor) for r in range(ep)]


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")  # megatron.core without TE/Apex
@pytest.mark.parametrize("tp, ep, dp, pp", [(1, 2, 2, 1), (1, 2, 4, 1), (2, 2, 2, 1), (1, 4, 2, 2), (2, 2, 1, 2)])
def test_layout_groups_are_megatrons(tp, ep, dp, pp):
    """Megatron-LM's own rank generators: the expert grid ("tp-ep-dp-pp", expert dp = dp) and the dense grid,
    whose data-parallel size is ep · dp (expert parallelism is carved out of data parallelism)."""
    from megatron.core.parallel_state import RankGenerator
    lay = expert_data_parallel(Mesh(tp=tp, ep=ep, dp=dp, pp=pp), experts=2 * ep, params_per_expert=6, dense_params=5)
    experts = RankGenerator(tp=tp, ep=ep, dp=dp, pp=pp, cp=1, order="tp-cp-ep-dp-pp")
    dense = RankGenerator(tp=tp, ep=1, dp=ep * dp, pp=pp, cp=1, order="tp-cp-ep-dp-pp")
    as_tuples = lambda groups: sorted(tuple(g) for g in groups)  # noqa: E731 — a one-line helper for the asserts below
    assert lay.ep_groups == as_tuples(experts.get_ranks("ep"))
    assert lay.expert_groups == as_tuples(experts.get_ranks("dp"))
    assert lay.dense_groups == as_tuples(dense.get_ranks("dp"))
    for rank in range(lay.mesh.world_size):  # ranks of one expert group hold the same experts; an ep group all
        assert len({lay.experts_of(r) for g in lay.expert_groups if rank in g for r in g}) == 1
    for group in lay.ep_groups:
        assert sorted(e for r in group for e in lay.experts_of(r)) == list(range(2 * ep))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3, 4]), st.integers(1, 3), st.integers(0, 50),
       st.integers(0, 50))
def test_layout_bytes_closed_forms(ep, dp, per_rank, per_expert, dense):
    lay = expert_data_parallel(Mesh(ep=ep, dp=dp), ep * per_rank, per_expert, dense, itemsize=4)
    expert_numel, n_dense = per_rank * per_expert, ep * dp
    ring = lambda n, numel: ring_bytes_sent("all-reduce", n, numel, 4) if n > 1 and numel else [0] * n  # noqa: E731 — a one-line helper for the asserts below
    want_expert, want_dense = ring(dp, expert_numel), ring(n_dense, dense)
    assert sorted(lay.expert_allreduce_bytes) == sorted(want_expert * ep)
    assert sorted(lay.dense_allreduce_bytes) == sorted(want_dense)
    if expert_numel % max(dp, 1) == 0:  # the ring's closed form, when the buffer splits evenly
        assert lay.expert_allreduce_bytes == [2 * (dp - 1) * expert_numel * 4 // dp] * (ep * dp)
    plans = [dispatch_plan(_routings(ep, 5, ep * per_rank, 1, 1.0, seed=g), hidden=3) for g in range(dp)]
    by_group = lay.step_bytes(plans)
    assert by_group["total"] == [a + b + c for a, b, c in zip(by_group["all-to-all"], lay.expert_allreduce_bytes,
                                                              lay.dense_allreduce_bytes)]
    trace = lay.to_trace(plans)
    sent = [sum(e.nbytes for e in trace if e.rank == r and e.kind in ("send", "comm")) for r in range(ep * dp)]
    assert sent == by_group["total"]
    assert {e.step for e in trace if e.kind == "comm"} <= {len(STEPS), len(STEPS) + 1} and len(GRAD_STEPS) == 2


def test_layout_lines_name_each_ranks_groups():
    lines = expert_data_parallel(Mesh(ep=2, dp=2), 4, 1, 1).lines()
    assert lines[3] == ("rank 3: experts [2, 3]; all-to-all with [2, 3]; expert gradients summed over [1, 3]; "
                        "dense gradients over [0, 1, 2, 3]")


@pytest.mark.parametrize("kwargs, message", [
    (dict(mesh=Mesh(ep=2, cp=2)), "cp=2"), (dict(mesh="ep=2"), "mesh='ep=2'"),
    (dict(experts=3), "experts=3: must be divisible by ep=2"), (dict(params_per_expert=-1), "params_per_expert=-1"),
    (dict(dense_params=1.5), "dense_params=1.5"),
])
def test_layout_refuses_bad_input(kwargs, message):
    args = dict(mesh=Mesh(ep=2, dp=2), experts=4, params_per_expert=1, dense_params=1) | kwargs
    with pytest.raises(ValueError) as err:
        expert_data_parallel(**args)
    assert message in str(err.value) and "\n" not in str(err.value)
