"""simlab.exec.context_parallel on real gloo ranks: every variant on a cp group of a 2-D grid (two groups side by
side, each against one process), the ring's work step by step equal to the simulator's, every tensor on the
device of its inputs, and bad shapes refused on every rank before any message is posted."""
import pytest
import torch
import torch.distributed as dist

from simlab.exec.context_parallel import context_parallel_attention, ring_attention
from simlab.exec.launch import launch
from simlab.exec.mesh import new_groups
from simlab.parity.common import max_abs_diff
from simlab.parity.context_parallel import make_inputs, reference
from simlab.sim.context_parallel import plan_trace, positions, step_work
from simlab.sim.context_parallel_costs import VARIANTS, make_plan
from simlab.sim.mesh import Mesh
from simlab.trace import Recorder

TOL = 1e-5
SHAPE = dict(batch=1, heads=4, kv_heads=2, seq=24, head_dim=4)  # 24 tokens: chunks for 2, 3 and 4 ranks


def _run(variant, layout, causal, seed, group, rank_in_group, size, trap=False):
    """One variant forward and backward on this rank's tokens: (max |diff| against one process, recorder, work).
    trap: "meta" is the default device while the engine runs, so a tensor it makes without a device fails it."""
    full = make_inputs(**SHAPE, seed=seed)
    mine = torch.from_numpy(positions(rank_in_group, size, SHAPE["seq"], layout))
    q, k, v, dout = (t[:, :, mine].contiguous() for t in full)
    ours = [t.clone().requires_grad_(True) for t in (q, k, v)]
    rec, work = Recorder(rank_in_group), {}
    torch.set_default_device("meta" if trap else None)
    try:
        out = context_parallel_attention(*ours, variant=variant, layout=layout, causal=causal, group=group,
                                         recorder=rec, work=work)
        out.backward(dout)
    finally:
        torch.set_default_device(None)
    ref = reference(*full, causal)
    got = {"out": out.detach(), "dq": ours[0].grad, "dk": ours[1].grad, "dv": ours[2].grad}
    return max(max_abs_diff(got[n], ref[n][:, :, mine]) for n in got), rec, work


def grid_worker(rank, world_size):
    """Mesh(dp=2, cp=2): each dp replica runs every variant on its own cp group, with its own data."""
    mesh = Mesh(dp=2, cp=2)
    groups = new_groups(mesh)
    coords = mesh.coords(rank)
    out = {}
    for variant in VARIANTS:
        diff, rec, _ = _run(variant, "zigzag", True, coords.dp, groups["cp"], coords.cp, 2)
        out[variant] = (diff, sorted({e.peer for e in rec.events if e.peer is not None}))
    return out


def test_every_variant_runs_on_a_cp_group_of_the_grid():
    for rank, res in enumerate(launch(grid_worker, 4, timeout=60)):
        for variant, (diff, peers) in res.items():
            assert diff <= TOL, variant
            assert peers == [1 - Mesh(dp=2, cp=2).coords(rank).cp]  # its one peer, as a rank of the cp group


def steps_worker(rank, world_size, variant, layout, causal):
    diff, rec, work = _run(variant, layout, causal, 0, None, rank, world_size)
    return diff, rec.events, work


@pytest.mark.parametrize("variant, layout, n", [("ring", "contiguous", 3), ("ring", "zigzag", 4),
                                                ("ulysses", "contiguous", 2), ("all-gather-kv", "zigzag", 1)])
def test_each_step_scores_the_simulators_pairs_and_records_the_plan(variant, layout, n):
    ranks = launch(steps_worker, n, variant, layout, True, timeout=60)
    work = step_work(n, SHAPE["seq"], layout, True)
    for r, (diff, _events, done) in enumerate(ranks):
        assert diff <= TOL
        if variant == "ring":  # forward step i and backward step n + i score the pairs of K,V block r − i
            want = {s: int(work[r, s % n]) for s in range(2 * n) if work[r, s % n]}
            assert done == want
    plan = make_plan(variant, world_size=n, **{k: SHAPE[k] for k in ("seq", "heads", "kv_heads", "head_dim")})
    events = [e for _d, evs, _w in ranks for e in evs]
    assert sorted(e.key() for e in events) == plan_trace(plan, work).signature()


def meta_worker(rank, world_size):
    return [_run(variant, "zigzag", True, 0, None, rank, world_size, trap=True)[0] for variant in VARIANTS]


def test_tensors_stay_on_the_inputs_device():
    assert max(max(r) for r in launch(meta_worker, 2, timeout=60)) <= TOL


def refuse_worker(rank, world_size):
    messages = []
    x = torch.zeros(1, 2, 4, 3)
    for args, kwargs in [((x, x[:, :1, :, :2], x[:, :1, :, :2]), {}), ((x, x, x[:, :, :2]), {}),
                         ((torch.zeros(1, 2, 3, 3),) * 3, {"layout": "zigzag"}),
                         ((x, x, x), {"layout": "stripes"}), ((x, x, x), {"causal": "yes"})]:
        try:
            ring_attention(*args, **kwargs)
        except ValueError as err:
            messages.append(str(err).split(":")[0])
    try:
        context_parallel_attention(torch.zeros(1, 3, 4, 2), *(torch.zeros(1, 3, 4, 2),) * 2, variant="ulysses")
    except ValueError as err:
        messages.append(str(err))
    dist.barrier()  # nobody posted a message: every rank reaches here
    return messages


def test_bad_shapes_are_refused_on_every_rank_before_any_message():
    for messages in launch(refuse_worker, 2, timeout=30):
        assert messages == ["q, k, v", "q, k, v", "q", "layout='stripes'", "causal='yes'",
                            "heads=3: must be divisible by world_size=2"]
