"""The hand-written collectives on real gloo ranks: same numbers as torch, same steps as the simulator."""
import copy
import dataclasses

import pytest
import torch
import torch.distributed as dist

from simlab.exec import collectives as C
from simlab.exec.launch import WorkerError, launch
from simlab.parity import collectives as compare
from simlab.plan import split_sizes
from simlab.sim.collectives import PLANS, make_inputs, make_plan
from simlab.sim.collectives_stepper import simulate, steps_match
from simlab.trace import Recorder, merge

WORLD_SIZES = [2, 3, 4, 8]


def test_the_executor_has_every_registered_collective_under_its_plans_name():
    """`run_collective` finds our collective by the simulator plan's function name (sim.collectives.COLLECTIVES)."""
    assert [name for name, plan in PLANS.items() if not callable(getattr(C, plan.__name__, None))] == []


def numels(n):
    """numel < n (zero-size chunks), divisible by n, and uneven."""
    return sorted({1, n - 1 or 1, 4 * n, 4 * n + 3})


# ---- results equal torch's own collectives ----------------------------------------------------

def _ours_vs_torch(rank, n):
    """Per (collective, numel, inputs): max |ours - torch|, via the public torch-like wrappers."""
    diffs = {}
    for numel in numels(n):
        sizes = split_sizes(numel, n)
        gen = torch.Generator().manual_seed(1000 * rank + numel)
        inputs = {"float": torch.randn(numel, generator=gen) * 100,
                  "int": torch.tensor(make_inputs(n, numel, seed=numel)[rank], dtype=torch.float32)}
        for kind, x in inputs.items():
            a, b = x.clone(), x.clone()
            C.ring_all_reduce(a)
            dist.all_reduce(b)
            diffs["allreduce", numel, kind] = (a - b).abs().max().item()
            a = x.clone()
            C.naive_all_reduce(a)
            diffs["naive", numel, kind] = (a - b).abs().max().item()
            a, b = x.clone(), x.clone()
            C.tree_broadcast(a, root=n - 1)
            dist.broadcast(b, src=n - 1)
            diffs["broadcast", numel, kind] = (a - b).abs().max().item()
            out, ref = x.new_empty(sizes[rank]), x.new_empty(sizes[rank])
            C.ring_reduce_scatter(out, x)
            dist.reduce_scatter(ref, list(x.split(sizes)))
            diffs["reduce_scatter", numel, kind] = (out - ref).abs().max().item() if ref.numel() else 0.0
            mine = x.split(sizes)[rank]
            out = torch.full((numel,), float("nan"))
            C.ring_all_gather(out, mine)
            padded = torch.zeros(max(sizes))
            padded[:mine.numel()] = mine
            gathered = [torch.empty_like(padded) for _ in range(n)]
            dist.all_gather(gathered, padded)  # gloo wants equal sizes: pad, then trim
            ref = torch.cat([g[:s] for g, s in zip(gathered, sizes)])
            diffs["all_gather", numel, kind] = (out - ref).abs().max().item()
    big = torch.randn(n * C.LANE_BYTES // 2 + 3, generator=gen)  # chunks of 2 x LANE_BYTES: two lanes
    a, b = big.clone(), big.clone()
    C.ring_all_reduce(a)
    dist.all_reduce(b)
    diffs["allreduce", big.numel(), "float"] = (a - b).abs().max().item()
    return diffs


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_results_equal_torch(n):
    for diffs in launch(_ours_vs_torch, n):
        for (name, numel, kind), diff in diffs.items():
            # a sum of n values of size ~100 in another order: fp32 rounding only
            tol = 1e-3 if kind == "float" and name in ("allreduce", "naive", "reduce_scatter") else 0.0
            assert diff <= tol, (name, n, numel, kind, diff)


# ---- every plan, executed for real, against the simulator -------------------------------------

LANES = [None, 2, 3]  # None: run_plan's own choice (one lane at these sizes); 3 lanes leave empty parts


def _run_every_plan(rank, n):
    """run_plan on integer inputs for each collective, size and lane count; recorders go to the parent."""
    out = {}
    for name in PLANS:
        for numel in numels(n):
            for lanes in LANES:
                x = torch.tensor(make_inputs(n, numel, seed=numel)[rank], dtype=torch.float32)
                recorder = Recorder(snapshots=True)
                C.run_plan(make_plan(name, n, numel), x, recorder, lanes=lanes)
                out[name, numel, lanes] = recorder
    return out


@pytest.fixture(scope="module", params=[1] + WORLD_SIZES, ids=lambda n: f"n{n}")
def real_runs(request):
    n = request.param
    per_rank = launch(_run_every_plan, n)
    return n, {key: [ranks[key] for ranks in per_rank] for key in per_rank[0]}


def test_steps_match_the_simulator(real_runs):
    n, runs = real_runs
    for (name, numel, lanes), recorders in runs.items():
        plan = make_plan(name, n, numel)
        sim = simulate(plan, make_inputs(n, numel, seed=numel))
        real = compare.real_steps(plan, recorders)
        assert len(real) == plan.num_steps + 1
        assert all(steps_match(sim.steps, real)), (name, n, numel, lanes, steps_match(sim.steps, real))
        assert merge(r.events for r in recorders).signature() == sim.trace.signature()


def test_each_rank_does_the_simulated_events_in_order(real_runs):
    n, runs = real_runs
    for (name, numel, lanes), recorders in runs.items():
        sim = simulate(make_plan(name, n, numel), make_inputs(n, numel, seed=numel))
        for rank, rec in enumerate(recorders):
            real = [e.key() for e in sorted(rec.events, key=lambda e: e.step)]  # stable: plan order stays
            assert real == [e.key() for e in sim.trace.for_rank(rank)], (name, n, numel, lanes, rank)
            assert all(0 <= e.start <= e.end for e in rec.events)
            assert rec.bytes_sent == sum(e.nbytes for e in rec.events if e.kind == "send")
            assert rec.bytes_received == sum(e.nbytes for e in rec.events if e.kind == "recv")


@pytest.mark.parametrize("lanes", LANES)
def test_bytes_follow_the_closed_forms(real_runs, lanes):
    n, runs = real_runs
    runs = {(name, numel): recs for (name, numel, ln), recs in runs.items() if ln == lanes}
    for numel in numels(n):
        S, chunk = 4 * numel, [4 * s for s in split_sizes(numel, n)]
        sent = [rec.bytes_sent for rec in runs["ring-all-reduce", numel]]
        # rank r reduces and forwards every chunk but r+1 (its first send), then gathers all but r
        assert sent == [2 * S - chunk[r] - chunk[(r + 1) % n] for r in range(n)]
        assert sum(sent) == 2 * (n - 1) * S
        for name in ("ring-reduce-scatter", "ring-all-gather"):
            assert sum(rec.bytes_sent for rec in runs[name, numel]) == (n - 1) * S
        if numel % n == 0:
            for name, factor in (("ring-all-reduce", 2), ("ring-reduce-scatter", 1), ("ring-all-gather", 1)):
                assert [rec.bytes_sent for rec in runs[name, numel]] == [factor * (n - 1) * S // n] * n
        assert [rec.bytes_sent for rec in runs["naive-all-reduce", numel]] == [(n - 1) * S] + [S] * (n - 1)


def test_a_corrupted_real_run_is_caught(real_runs):
    n, runs = real_runs
    numel = 4 * n + 3
    if n == 1:  # nothing moves, so there is nothing to corrupt: check exactly that instead
        assert make_plan("ring-all-reduce", 1, numel).num_steps == 0
        assert runs["ring-all-reduce", numel, None][0].events == []
        return
    plan = make_plan("ring-all-reduce", n, numel)
    sim = simulate(plan, make_inputs(n, numel, seed=numel))
    recorders = copy.deepcopy(runs["ring-all-reduce", numel, None])
    assert all(steps_match(sim.steps, compare.real_steps(plan, recorders)))
    recorders[1].values[2] = tuple(None if v is None else v + 1 for v in recorders[1].values[2])
    verdicts = steps_match(sim.steps, compare.real_steps(plan, recorders))
    assert verdicts[2] is False and verdicts.count(False) == 1  # exactly the corrupted step
    recorders = copy.deepcopy(runs["ring-all-reduce", numel, 2])
    i = next(i for i, e in enumerate(recorders[0].events) if e.kind == "send" and e.step == 1)
    event = recorders[0].events[i]
    recorders[0].events[i] = dataclasses.replace(event, chunk=(event.chunk + 1) % n)  # wrong chunk sent
    assert steps_match(sim.steps, compare.real_steps(plan, recorders))[2] is False  # step 1 ran -> SimStep 2
    assert merge(r.events for r in recorders).signature() != sim.trace.signature()
    # a rank that recorded nothing: every step after 0 is missing its transfers
    verdicts = steps_match(sim.steps, compare.real_steps(plan, recorders[:-1] + [Recorder()]))
    assert verdicts[1:] == [False] * plan.num_steps


# ---- the parent-side convenience and its checks ------------------------------------------------


def _wrong_size(rank, n):
    C.run_plan(make_plan("ring-all-reduce", n, 8), torch.zeros(7))


def test_run_plan_rejects_a_tensor_that_does_not_fit_the_plan():
    with pytest.raises(WorkerError, match="does not fit plan"):
        launch(_wrong_size, 2)


def test_holdings_start_as_the_plan_says():
    assert C._initially_held(make_plan("ring-all-gather", 4, 8), 2) == {2}  # "own"
    assert C._initially_held(make_plan("tree-broadcast", 4, 8), 1) == set()  # "root", not the root
    assert C._initially_held(make_plan("tree-broadcast", 4, 8), 0) == {0}
    assert C._initially_held(make_plan("ring-all-reduce", 4, 8), 3) == {0, 1, 2, 3}  # "all"


# ---- powers-of-two inputs: a real buffer says whose inputs it holds -----------------------------


