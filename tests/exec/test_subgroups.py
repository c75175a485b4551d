"""Every engine on a process sub-group: two independent groups inside one world run side by side without
interfering, and each gives exactly what a separate run of its own size gives. The groups come from the
rank grid (`simlab.sim.mesh.Mesh` → `simlab.exec.mesh.new_groups`), as lesson 6 will use them."""
import pytest
import torch
import torch.distributed as dist

from simlab.exec.collectives import ring_all_reduce
from simlab.exec.launch import launch
from simlab.exec.mesh import new_groups
from simlab.exec.models import make_batch, make_block, make_input, make_mlp, shard, train_steps
from simlab.exec.pipeline import PipelineRank, make_stages
from simlab.exec.tensor_parallel import ParallelMLP
from simlab.exec.zero import ZeroAdam
from simlab.sim.mesh import Mesh
from simlab.sim.pipeline_schedules import one_f_one_b

TOL = 1e-6


def _group(kind: str, mesh: Mesh):
    """This rank's group of `kind` and the index of that group (which job it belongs to); WORLD if no mesh."""
    if mesh is None:
        return None, None
    groups = new_groups(mesh)
    return groups[kind], mesh.groups(kind).index(mesh.group_of(kind, dist.get_rank()))


# ---------------------------------------------------------------- tensor parallel: two TP pairs in 4 ranks

def _tp(rank, world_size, mesh, job):
    group, found = _group("tp", mesh)
    job = job if found is None else found  # each TP pair computes its own input
    x, dy = make_input(2, 3, 8, seed=10 + job)
    mlp = ParallelMLP.from_full(make_block("mlp", 8, 4, 16), group=group)
    x = x.requires_grad_(True)
    out = mlp(x)
    out.backward(dy)
    return {"job": job, "out": out.detach(), "dx": x.grad, "dw": mlp.fc1.weight.grad, "calls": mlp.stats.calls,
            "bytes": mlp.stats.bytes_sent, "tp_rank": mlp.stats.rank}


def test_two_tp_pairs_in_four_ranks_equal_two_separate_runs():
    together = launch(_tp, 4, Mesh(dp=2, tp=2), None)
    alone = {job: launch(_tp, 2, None, job) for job in (0, 1)}
    for res in together:
        ref = alone[res["job"]][res["tp_rank"]]
        assert all((res[k] - ref[k]).abs().max() <= TOL for k in ("out", "dx", "dw"))
        assert res["calls"] == ref["calls"] == {("forward", "all-reduce"): 1, ("backward", "all-reduce"): 1}
        assert res["bytes"] == ref["bytes"]  # ring accounting over 2 ranks, not 4
    assert [r["job"] for r in together] == [0, 0, 1, 1]  # Megatron's grid: TP pairs are (0, 1) and (2, 3)
    assert (together[0]["out"] - together[2]["out"]).abs().max() > 1e-3  # the pairs really had their own data


# ---------------------------------------------------------------- pipeline: two 2-stage pipelines in 4 ranks

def _pp(rank, world_size, mesh, job):
    group, found = _group("pp", mesh)
    job = job if found is None else found
    p = dist.get_world_size(group)
    stage = dist.get_rank(group)
    mine = {stage: make_stages(2, 8, seed=0)[stage]}
    x, y = make_batch(8, 8, 8, seed=20 + job)
    runner = PipelineRank(mine, 2, x.chunk(4), y.chunk(4), group=group)
    events = runner.run(one_f_one_b(p, 4)[stage])
    grads = [q.grad for q in mine[stage].parameters()]
    return {"job": job, "stage": stage, "loss": sum(runner.losses.values()), "grads": grads,
            "actions": [e.name for e in events], "bytes": runner.bytes_sent}


def test_two_pipelines_in_four_ranks_equal_two_separate_runs():
    together = launch(_pp, 4, Mesh(pp=2, dp=2), None)
    alone = {job: launch(_pp, 2, None, job) for job in (0, 1)}
    for res in together:
        ref = alone[res["job"]][res["stage"]]
        assert res["loss"] == pytest.approx(ref["loss"], abs=TOL)
        assert all((a - b).abs().max() <= TOL for a, b in zip(res["grads"], ref["grads"]))
        assert res["actions"] == ref["actions"] == [str(a) for a in one_f_one_b(2, 4)[res["stage"]]]
        assert res["bytes"] == ref["bytes"] == 8 * 8 * 4  # the batch's activations (or grads), fp32
    # Megatron's grid with pp=2, dp=2: pipelines are ranks (0, 2) and (1, 3)
    assert [(r["job"], r["stage"]) for r in together] == [(0, 0), (1, 0), (0, 1), (1, 1)]


# ---------------------------------------------------------------- ZeRO: two data-parallel groups in 4 ranks

def _zero(rank, world_size, mesh, job, stage):
    group, found = _group("dp", mesh)
    job = job if found is None else found
    n, r = dist.get_world_size(group), dist.get_rank(group)
    sizes = (5, 7, 3)
    x, y = shard(make_batch(8, 5, 3, seed=30 + job), r, n)
    model = make_mlp(sizes, seed=0)
    opt = ZeroAdam(model, stage, group=group, lr=1e-2)
    losses = train_steps(model, opt, x, y, 3)
    params = [m.shard.detach().clone() for m in model if hasattr(m, "shard")] if stage == 3 else \
        [q.detach().clone() for q in model.parameters()]
    sent = sum(e.nbytes for e in opt.rec.events if e.kind == "comm" and e.step == 0)
    opt.close()
    return {"job": job, "dp_rank": r, "losses": losses, "params": params, "sent": sent}


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_two_zero_groups_in_four_ranks_equal_two_separate_runs(stage):
    together = launch(_zero, 4, Mesh(dp=2, tp=2), None, stage)
    alone = {job: launch(_zero, 2, None, job, stage) for job in (0, 1)}
    for res in together:
        ref = alone[res["job"]][res["dp_rank"]]
        assert res["losses"] == pytest.approx(ref["losses"], abs=TOL)
        assert all((a - b).abs().max() <= TOL for a, b in zip(res["params"], ref["params"]))
        assert res["sent"] == ref["sent"] > 0  # shards of 2 ranks, not 4
    # with tp=2 the data-parallel groups are ranks (0, 2) and (1, 3)
    assert [(r["job"], r["dp_rank"]) for r in together] == [(0, 0), (1, 0), (0, 1), (1, 1)]


# ---------------------------------------------------------------- the ring itself, for completeness

def _ring(rank, world_size):
    group, job = _group("tp", Mesh(dp=2, tp=2))
    x = torch.tensor([float(rank), 10.0 * rank])
    ring_all_reduce(x, group=group)
    return job, x.tolist()


def test_rings_on_two_groups_sum_only_their_members():
    assert launch(_ring, 4) == [(0, [1.0, 10.0]), (0, [1.0, 10.0]), (1, [5.0, 50.0]), (1, [5.0, 50.0])]


# ---------------------------------------------------------------- DDP: two data-parallel groups in 4 ranks

def _ddp(rank, world_size, mesh, job):
    from simlab.exec.data_parallel import BucketedDDP
    group, found = _group("dp", mesh)
    job = job if found is None else found
    n, r = dist.get_world_size(group), dist.get_rank(group)
    x, y = shard(make_batch(8, 5, 3, seed=40 + job), r, n)
    ddp = BucketedDDP(make_mlp((5, 7, 3), seed=r), bucket_cap_mb=0.0001, allreduce="ring", count_bytes=True,
                      group=group)  # replicas differ at first: the broadcast from the group's rank 0 equalises
    try:
        losses = train_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1), x, y, 3)
        return {"job": job, "dp_rank": r, "losses": losses, "params": [q.detach().clone() for q in ddp.parameters()],
                "sent": ddp.bytes_sent}
    finally:
        ddp.close()


def test_two_ddp_groups_in_four_ranks_equal_two_separate_runs():
    together = launch(_ddp, 4, Mesh(dp=2, tp=2), None)
    alone = {job: launch(_ddp, 2, None, job) for job in (0, 1)}
    for res in together:
        ref = alone[res["job"]][res["dp_rank"]]
        assert res["losses"] == pytest.approx(ref["losses"], abs=TOL)
        assert all((a - b).abs().max() <= TOL for a, b in zip(res["params"], ref["params"]))
        assert res["sent"] == ref["sent"]
