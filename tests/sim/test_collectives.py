"""Closed forms and exact states of the simulated collectives (no torch)."""
import math

import numpy as np
import pytest
from sampling import sample  # tests/sampling.py: every case under make test-full, a daily sample else

from simlab.plan import split_sizes
from simlab.sim.collectives import (
    ALIASES,
    COLLECTIVES,
    canonical,
    make_inputs,
    make_plan,
    naive_all_reduce,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    tree_broadcast,
)
from simlab.sim.collectives_stepper import PlanError, simulate
from simlab.sim.cost import alpha_beta, naive_all_reduce_seconds, ring_all_reduce_seconds

SIZES = [1, 2, 3, 7, 64, 1000, 1001]
# n = 1..64 under `make test-full`; `make test` always checks the edges (1, 2, 3, powers of two, a prime, 63, 64)
# and 10 more drawn with the day's seed
EDGES = (1, 2, 3, 4, 5, 7, 8, 13, 16, 63, 64)
RANKS = sample(range(1, 65), 10, always=EDGES, name="ring sizes")
PLANS = [c.plan for c in COLLECTIVES.values()]  # the one registry of lesson 1's collectives


@pytest.mark.parametrize("plan_fn", PLANS)
@pytest.mark.parametrize("n", RANKS)
def test_every_plan_reaches_its_goal(plan_fn, n):
    # small and uneven sizes for every n; big ones for a few n below (cost grows with n * numel)
    for numel in (3, n + 1) + ((1, 1000, 1001) if n in (1, 2, 3, 4, 8, 13, 64) else ()):
        res = simulate(plan_fn(n, numel), seed=n)
        assert res.final_ok, (plan_fn.__name__, n, numel)


@pytest.mark.parametrize("n", RANKS)
def test_ring_all_reduce_closed_forms(n):
    for numel in SIZES + [n * 12]:
        plan = ring_all_reduce(n, numel, itemsize=4)
        sizes, S = split_sizes(numel, n), numel * 4
        assert plan.num_steps == 2 * (n - 1)
        sent = plan.bytes_sent_per_rank()
        if n <= 8 and numel < 100:  # the stepper counts what actually moved: same numbers
            assert list(simulate(plan).steps[-1].bytes_sent) == sent
        # rank r never sends the chunk it reduces (r) nor the one it receives last in all-gather (r+1)
        assert sent == [0 if n == 1 else 2 * S - 4 * (sizes[r] + sizes[(r + 1) % n]) for r in range(n)]
        assert sum(sent) == 2 * (n - 1) * S
        if numel % n == 0:
            assert all(s * n == 2 * (n - 1) * S for s in sent)  # 2(n-1)/n * S exactly


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 13, 64])
@pytest.mark.parametrize("plan_fn", [ring_reduce_scatter, ring_all_gather])
def test_half_collectives_cost_n_minus_1_over_n(plan_fn, n):
    for numel in SIZES + [n * 5]:
        plan = plan_fn(n, numel, itemsize=2)
        S, sizes = numel * 2, split_sizes(numel, n)
        sent = plan.bytes_sent_per_rank()
        assert plan.num_steps == n - 1
        assert sum(sent) == (n - 1) * S
        # reduce-scatter: rank r sends every chunk but r; all-gather: every chunk but r+1
        skip = (lambda r: r) if plan_fn is ring_reduce_scatter else (lambda r: (r + 1) % n)
        assert sent == [0 if n == 1 else S - 2 * sizes[skip(r)] for r in range(n)]
        if numel % n == 0:
            assert all(s * n == (n - 1) * S for s in sent)


def test_reduce_scatter_gives_rank_r_chunk_r_like_torch():
    res = simulate(ring_reduce_scatter(4, 10))
    total = np.sum(res.inputs, axis=0)
    bounds = [0, 3, 6, 8, 10]
    for r in range(4):
        held = res.steps[-1].values[r][r]
        assert np.array_equal(held, total[bounds[r]:bounds[r + 1]])
        assert res.steps[-1].sources[r][r] == frozenset(range(4))


def test_every_intermediate_state_is_exact():
    """After step k of the ring reduce-scatter a chunk holds exactly k+2 ranks' contributions."""
    n, res = 5, simulate(ring_all_reduce(5, 23))
    for k in range(1, n):
        step = res.steps[k]
        for t in step.transfers:
            held = step.values[t.dst][t.chunk]
            srcs = step.sources[t.dst][t.chunk]
            assert len(srcs) == k + 1
            assert np.array_equal(held, sum(res.steps[0].values[r][t.chunk] for r in srcs))


def test_ring_moves_one_chunk_to_the_next_rank_each_step():
    plan = ring_all_reduce(4, 16)
    for step in plan.steps:
        assert sorted((t.src, t.dst) for t in step) == [(0, 1), (1, 2), (2, 3), (3, 0)]
        assert len({t.chunk for t in step}) == 4  # every link busy with a different chunk


def test_broadcast_and_naive_closed_forms():
    for n in RANKS:
        S = 400
        tree = tree_broadcast(n, 100)
        assert tree.num_steps == math.ceil(math.log2(n))
        assert sum(tree.bytes_sent_per_rank()) == (n - 1) * S
        naive = naive_all_reduce(n, 100)
        assert naive.num_steps == (0 if n == 1 else 2)
        assert naive.bytes_received_per_rank()[0] == (n - 1) * S  # the root takes everything in
        assert naive.bytes_sent_per_rank()[0] == (n - 1) * S


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64])
def test_alpha_beta_matches_closed_forms(n):
    alpha, bw, numel = 7e-6, 3e9, n * 1000
    ring = alpha_beta(ring_all_reduce(n, numel), alpha, bw)
    assert ring.seconds == pytest.approx(ring_all_reduce_seconds(n, numel * 4, alpha, bw), rel=1e-12)
    naive = alpha_beta(naive_all_reduce(n, numel), alpha, bw)
    assert naive.seconds == pytest.approx(naive_all_reduce_seconds(n, numel * 4, alpha, bw), rel=1e-12)
    big = n * 10**6  # bandwidth-bound: the ring wins by about a factor n
    assert alpha_beta(ring_all_reduce(n, big), alpha, bw).seconds < alpha_beta(naive_all_reduce(n, big), alpha, bw).seconds


def test_latency_bound_messages_favour_fewer_steps():
    # 8 bytes on 8 ranks: the ring's 14 latencies cost more than the naive algorithm's 2
    ring, naive = alpha_beta(ring_all_reduce(8, 2)), alpha_beta(naive_all_reduce(8, 2))
    assert naive.seconds < ring.seconds


def test_simulated_trace_has_one_send_and_recv_per_transfer():
    res = simulate(ring_all_reduce(3, 9))
    assert len(res.trace) == 2 * len(res.plan.transfers())
    assert res.trace.bytes_sent_per_rank(3) == list(res.steps[-1].bytes_sent)
    assert res.trace.bytes_received_per_rank(3) == list(res.steps[-1].bytes_received)
    ends = [e.end for e in res.trace]
    assert max(ends) == pytest.approx(res.cost.seconds)


def test_simulation_is_deterministic():
    a, b = simulate(ring_all_reduce(6, 50), seed=3), simulate(ring_all_reduce(6, 50), seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a.inputs, b.inputs))
    assert a.trace.signature() == b.trace.signature()
    assert not np.array_equal(make_inputs(6, 50, seed=3)[0], make_inputs(6, 50, seed=4)[0])


@pytest.mark.parametrize("kwargs, param", [
    (dict(world_size=0, numel=4), "world_size=0"),
    (dict(world_size=65, numel=4), "world_size=65"),
    (dict(world_size=4, numel=-1), "numel=-1"),
    (dict(world_size=4, numel=0), "numel=0"),
    (dict(world_size=4, numel=4, itemsize=0), "itemsize=0"),
])
def test_bad_input_names_the_parameter(kwargs, param):
    with pytest.raises(ValueError, match=param):
        ring_all_reduce(**kwargs)


def test_unknown_collective_is_rejected():
    with pytest.raises(ValueError, match="collective='ring-allgatherx'"):
        make_plan("ring-allgatherx", 4, 4)


def test_a_broken_plan_is_reported_with_step_and_rank():
    plan = ring_all_gather(3, 6)
    wrong = plan.steps[0][:1] + (plan.steps[0][1].__class__(0, 1, 2, 2, 8, "copy"),) + plan.steps[0][2:]
    broken = plan.__class__(plan.name, 3, plan.chunk_sizes, 4, "own", (wrong,) + plan.steps[1:],
                            meta=plan.meta)
    with pytest.raises(PlanError, match="step 0: rank 1 -> rank 2, chunk 2: rank 1 does not hold"):
        simulate(broken)


def test_missing_step_means_goal_not_reached():
    plan = ring_all_reduce(4, 8)
    short = plan.__class__(plan.name, 4, plan.chunk_sizes, 4, "all", plan.steps[:-1], meta=plan.meta)
    assert simulate(short).final_ok is False


def test_huge_buffers_are_simulated_symbolically_and_still_checked():
    plan = ring_all_reduce(64, 1 << 28)  # 64 GiB of int64 values if tracked: sources only
    res = simulate(plan)
    assert res.final_ok and res.expected is None
    assert list(res.steps[-1].bytes_sent) == plan.bytes_sent_per_rank()
    # a plan that overwrites instead of adding loses contributions, and the sources show it
    from simlab.plan import Transfer
    copy_steps = tuple(tuple(Transfer(t.step, t.src, t.dst, t.chunk, t.nbytes, "copy") for t in s)
                       for s in plan.steps)
    wrong = plan.__class__(plan.name, 64, plan.chunk_sizes, 4, "all", copy_steps, meta=plan.meta)
    assert simulate(wrong).final_ok is False


def test_copy_instead_of_reduce_is_caught_on_values_too():
    plan = ring_all_reduce(3, 9)
    from simlab.plan import Transfer
    steps = tuple(tuple(Transfer(t.step, t.src, t.dst, t.chunk, t.nbytes, "copy") for t in s) for s in plan.steps)
    wrong = plan.__class__(plan.name, 3, plan.chunk_sizes, 4, "all", steps, meta=plan.meta)
    assert simulate(wrong).final_ok is False


def test_powers_of_two_inputs_decode_to_the_simulated_sources():
    """Simulated on 2**r inputs, every held value's bits are exactly its contribution set."""
    from simlab.sim.collectives import input_pieces, power_inputs, power_sources
    for plan_fn in PLANS:
        plan = plan_fn(5, 13)
        for step in simulate(plan, power_inputs(5, 13)).steps:
            for vrow, srow in zip(step.values, step.sources):
                assert [None if v is None else power_sources(v, 5) for v in vrow] == list(srow)
    assert power_sources(np.array([3, 5]), 3) is None  # elements disagree: no single contribution set
    assert power_sources(np.array([8]), 3) is None and power_sources(np.array([0]), 3) is None  # out of range
    assert power_sources(np.array([], np.int64), 3) is None
    pieces = dict(input_pieces(3, 5, ranks=[2], start=1, kind="powers-of-two"))
    assert pieces[1][2].tolist() == [4, 4, 4, 4]
    with pytest.raises(ValueError, match="world_size=25"):
        power_inputs(25, 1)


def test_one_registry_names_every_collective_and_its_old_spellings():
    import inspect
    assert list(COLLECTIVES) == ["ring-all-reduce", "ring-reduce-scatter", "ring-all-gather", "tree-broadcast",
                                 "naive-all-reduce"]
    for name, c in COLLECTIVES.items():  # the name is the function's, with hyphens; rooted iff it takes root=
        assert name == c.plan.__name__.replace("_", "-")
        assert c.rooted == ("root" in inspect.signature(c.plan).parameters)
        assert all(canonical(old) == name for old in c.old_names) and canonical(name) == name
    assert ALIASES == {"ring-allreduce": "ring-all-reduce", "broadcast": "tree-broadcast",
                       "naive-allreduce": "naive-all-reduce"}
    assert make_plan("broadcast", 4, 8, root=2).root == 2
