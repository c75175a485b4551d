"""`simlab.exec.expert_parallel`: the torch routing against the simulator's (an independent implementation of
the same rules), the unsplit MoE against a token-by-token sum, and the AllToAll autograd Function on real ranks
(rows where they belong, gradients back where they came from, one send and one recv Event per peer)."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.exec.expert_parallel import AllToAll, EPComm, ExpertParallelMoE, make_moe, route
from simlab.exec.launch import launch
from simlab.sim import expert_parallel as sim
from simlab.sim.expert_parallel_dispatch import STEPS
from simlab.trace import Recorder


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 20), st.integers(1, 8), st.data(), st.integers(0, 10_000),
       st.one_of(st.none(), st.sampled_from([0.25, 0.5, 1.0, 1.1, 1.5])), st.booleans())
def test_torch_routing_is_the_simulators(tokens, experts, data, seed, factor, renormalize):
    top_k = data.draw(st.integers(1, experts))
    logits = torch.from_numpy(sim.random_logits(tokens, experts, seed, skew=2.0)).float()
    chosen, weights, kept = route(logits, top_k, factor, renormalize)
    want = sim.route(logits.double().numpy(), top_k, factor, renormalize)
    assert np.array_equal(chosen.numpy(), want.experts) and np.array_equal(kept.numpy(), want.kept)
    assert weights.double().numpy() == pytest.approx(want.weights, abs=1e-6)


def test_torch_routing_drops_in_choice_major_order():
    chosen, _, kept = route(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), 2, 0.5)  # see tests/sim: capacity 1
    assert chosen.tolist() == [[1, 0], [0, 1]] and kept.tolist() == [[True, False], [True, False]]


@pytest.mark.parametrize("factor", [None, 0.5, 1.0])
def test_unsplit_moe_is_the_token_by_token_sum(factor):
    """out[t] = Σ over t's kept choices c of weight[t, c] · expert_c(x[t]), one token at a time."""
    moe = make_moe(hidden=6, ffn=10, experts=4, top_k=2, capacity_factor=factor, seed=3)
    x = torch.randn(9, 6, generator=torch.Generator().manual_seed(0))
    chosen, weights, kept = route(moe.router(x), 2, factor)
    want = torch.stack([sum((weights[t, c] * moe.experts[int(chosen[t, c])](x[t:t + 1])[0]
                             for c in range(2) if kept[t, c]), torch.zeros(6)) for t in range(9)])
    assert (moe(x) - want).abs().max().item() <= 1e-6
    if factor == 0.5:  # capacity ceil(0.5·9·2/4) = 3: something was dropped, and still agrees
        assert not kept.all()


def test_an_unknown_exchange_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^exchange='nccl': must be one of ours, torch$"):
        ExpertParallelMoE.from_full(make_moe(4, 8, 4, 1), exchange="nccl")


def a2a_worker(rank: int, world_size: int) -> dict:
    send = [rank + j + 1 for j in range(world_size)]  # uneven on purpose: rank i sends i + j + 1 rows to rank j
    recv = [i + rank + 1 for i in range(world_size)]
    rows = [[100 * rank + 10 * j + k, -1.0] for j in range(world_size) for k in range(send[j])]
    x = torch.tensor(rows, requires_grad=True)  # (Σ send, 2): each row names its sender, receiver and place
    comm = EPComm(None, Recorder(rank))
    y = AllToAll.apply(x, send, recv, comm, ("dispatch", "dispatch backward"))
    y.backward(3 * y.detach())  # each received row's gradient is 3 × the row: it must return to its sender
    try:
        ExpertParallelMoE.from_full(make_moe(4, 8, 4, 1), exchange="ours")
        refused = None
    except ValueError as err:
        refused = str(err)
    return {"y": y.detach(), "x": x.detach(), "x.grad": x.grad, "events": comm.rec.events, "refused": refused}


def test_all_to_all_moves_rows_and_gradients_on_real_ranks():
    world = 3
    ranks = launch(a2a_worker, world, backend="gloo", timeout=60)
    for me, res in enumerate(ranks):
        want = [[100 * i + 10 * me + k, -1.0] for i in range(world) for k in range(i + me + 1)]
        assert res["y"].tolist() == want  # by source rank, in the order each sent them
        assert torch.equal(res["x.grad"], 3 * res["x"])  # backward: the splits swapped
        events = {(e.kind, e.name, e.peer): e for e in res["events"]}
        for peer in range(world):
            assert ("send", "dispatch", me) not in events  # own rows stay put
            if peer != me:
                assert events["send", "dispatch", peer].nbytes == (me + peer + 1) * 2 * 4
                assert events["recv", "dispatch", peer].nbytes == (peer + me + 1) * 2 * 4
                assert events["send", "dispatch backward", peer].nbytes == (peer + me + 1) * 2 * 4
                assert events["send", "dispatch", peer].step == STEPS.index("dispatch")
        assert len(res["events"]) == 4 * (world - 1)
        assert res["refused"] == "experts=4: must be divisible by ep=3"
