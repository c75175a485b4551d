"""simlab.sim.context_parallel*: which tokens each rank holds, the causal work per rank (simulated from the mask
and in closed form), ring attention's online softmax against full softmax attention (float64, ≤ 1e-12), the
ring's plan, and the three variants' bytes and memory against hand-computed cases and their own plans."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simlab.sim.context_parallel import (
    busy_steps,
    chunks_of,
    imbalance,
    plan_trace,
    positions,
    ring_attention_plan,
    step_work,
    tile,
    work_per_rank,
)
from simlab.sim.context_parallel_costs import VARIANTS, compare, costs, kv_block_numel, make_plan
from simlab.sim.context_parallel_online import attention, ring_attention

LAYOUTS = ("zigzag", "contiguous")
ranks = st.integers(1, 8)
chunk = st.integers(1, 4)  # tokens per chunk: s = chunks × this


def seq_for(n, c, layout):
    return c * (2 * n if layout == "zigzag" else n)


# ---- tokens and work -------------------------------------------------------------------------------------

@settings(deadline=None)  # no timing is asserted: a loaded machine must not fail a test
@given(n=ranks, c=chunk, layout=st.sampled_from(LAYOUTS))
def test_every_token_is_held_by_exactly_one_rank(n, c, layout):
    seq = seq_for(n, c, layout)
    held = np.concatenate([positions(r, n, seq, layout) for r in range(n)])
    assert sorted(held.tolist()) == list(range(seq))
    assert all(len(positions(r, n, seq, layout)) == seq // n for r in range(n))


def test_zigzag_gives_rank_r_chunks_r_and_2n_minus_1_minus_r():
    assert [chunks_of(r, 4, "zigzag") for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]
    assert positions(3, 4, 16, "zigzag").tolist() == [6, 7, 8, 9]  # chunks 3 and 4 of 2 tokens
    assert positions(0, 4, 16, "zigzag").tolist() == [0, 1, 14, 15]
    assert positions(2, 4, 16, "contiguous").tolist() == [8, 9, 10, 11]


@settings(max_examples=60, deadline=None)
@given(n=ranks, c=chunk, layout=st.sampled_from(LAYOUTS), causal=st.booleans())
def test_simulated_work_equals_the_closed_form(n, c, layout, causal):
    seq = seq_for(n, c, layout)
    work = step_work(n, seq, layout, causal)
    assert tuple(work.sum(axis=1).tolist()) == work_per_rank(n, seq, layout, causal)
    assert work.sum() == (seq * (seq + 1) // 2 if causal else seq * seq)  # every needed pair, once
    if layout == "zigzag" or not causal:
        assert len(set(work_per_rank(n, seq, layout, causal))) == 1  # balanced
        assert busy_steps(n, seq, layout, causal) == (n,) * n


def test_hand_computed_work():
    # s = 8 on 4 ranks. Contiguous, blocks of 2: rank r sees r full blocks (4 pairs each) and its triangle (3).
    assert work_per_rank(4, 8, "contiguous") == (3, 7, 11, 15)
    assert busy_steps(4, 8, "contiguous") == (1, 2, 3, 4)  # rank r needs r + 1 of the 4 blocks: early ranks idle
    # zig-zag, chunks of 1: rank r holds tokens r and 7 - r; token t sees t + 1 keys: (r + 1) + (8 - r) = 9
    assert work_per_rank(4, 8, "zigzag") == (9, 9, 9, 9)
    # 2 ranks, chunks of 2: own step, two triangles of 3 and the late chunk over the early one (4); then 2 × 4
    assert step_work(2, 8, "zigzag").tolist() == [[10, 8], [10, 8]]
    assert work_per_rank(2, 8, "contiguous", causal=False) == (32, 32)
    assert imbalance(work_per_rank(4, 8, "contiguous")) == 15 / 9
    assert imbalance(work_per_rank(8, 8 * 1000, "contiguous")) == pytest.approx(2 - 1 / 8, abs=1e-3)


def test_tiles():
    assert [tile(2, k, True) for k in (1, 2, 3)] == ["full", "diagonal", "skip"]
    assert tile(2, 3, False) == "full"


@pytest.mark.parametrize("call, message", [
    (lambda: positions(0, 3, 8, "contiguous"), "seq=8: must be divisible by 3"),
    (lambda: positions(0, 2, 6, "zigzag"), "seq=6: must be divisible by 4"),
    (lambda: step_work(2, 8, "striped"), "layout='striped'"),
    (lambda: positions(2, 2, 8), "rank=2"),
    (lambda: step_work(0, 8), "world_size=0"),
    (lambda: work_per_rank(2, 8, causal=1), "causal=1"),
])
def test_refusals_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- the online softmax -----------------------------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(n=ranks, c=chunk, d=st.integers(1, 4), layout=st.sampled_from(LAYOUTS), causal=st.booleans(),
       gqa=st.sampled_from([None, (1, 1), (4, 2), (4, 1)]), seed=st.integers(0, 2**16))
def test_ring_attention_equals_full_softmax_attention(n, c, d, layout, causal, gqa, seed):
    rng, seq = np.random.default_rng(seed), seq_for(n, c, layout)
    heads = () if gqa is None else (gqa[0],)
    q = rng.standard_normal(heads + (seq, d)) * 3
    k, v = (rng.standard_normal(((gqa[1],) if gqa else ()) + (seq, d)) * 3 for _ in range(2))
    run = ring_attention(q, k, v, n, layout, causal)
    out, lse = attention(q, k, v, causal)
    assert np.abs(run.out - out).max() <= 1e-12 and np.abs(run.lse - lse).max() <= 1e-12
    assert [[s.pairs for s in step] for step in run.steps] == step_work(n, seq, layout, causal).T.tolist()


def test_each_step_is_the_exact_softmax_over_the_keys_seen_so_far():
    rng = np.random.default_rng(1)
    n, seq, d = 3, 12, 2
    q, k, v = (rng.standard_normal((seq, d)) for _ in range(3))
    run = ring_attention(q, k, v, n, "zigzag", causal=True)
    for r in range(n):
        qp, seen = run.positions[r], []
        for i, state in enumerate(s[r] for s in run.steps):
            seen += run.positions[(r - i) % n].tolist()
            keys = np.array(seen)
            scores = q[qp] @ k[keys].T / np.sqrt(d)
            scores = np.where(keys[None, :] <= qp[:, None], scores, -np.inf)
            m = scores.max(axis=1)  # every row has met at least itself at step 0
            assert np.array_equal(state.m, m)  # a max is exact
            assert np.allclose(state.l, np.exp(scores - m[:, None]).sum(axis=1), rtol=1e-13, atol=0)
            assert np.allclose(state.o, np.exp(scores - m[:, None]) @ v[keys], rtol=1e-12, atol=1e-14)
            if i:
                assert (state.m >= run.steps[i - 1][r].m).all()  # the running max only grows


def test_attention_refuses_nan_and_bad_shapes():
    q = np.zeros((4, 2))
    with pytest.raises(ValueError, match="finite"):
        attention(q, q, np.full((4, 2), np.nan))
    with pytest.raises(ValueError, match="shapes"):
        ring_attention(q, np.zeros((4, 3)), np.zeros((4, 3)), 2)
    with pytest.raises(ValueError, match="heads=3: must be divisible by kv_heads=2"):
        attention(np.zeros((3, 4, 2)), np.zeros((2, 4, 2)), np.zeros((2, 4, 2)))


# ---- the ring's plan -----------------------------------------------------------------------------------------

@settings(deadline=None)
@given(n=st.integers(1, 12), block=st.integers(1, 50))
def test_ring_plan_moves_every_block_past_every_rank_and_brings_gradients_home(n, block):
    plan = ring_attention_plan(n, block, itemsize=2)
    b = block * 2
    assert plan.bytes_sent_per_rank() == [(n - 1) * b + (n - 1) * b + (n * b if n > 1 else 0)] * n
    held = list(range(n))  # forward and backward: K,V block rank r holds at each ring step
    for step in range(2 * n):
        i = step % n
        assert held == [(r - i) % n for r in range(n)]
        kv = [t for t in plan.steps[step] if t.chunk < n]
        assert sorted(t.src for t in kv) == (list(range(n)) if i < n - 1 else [])
        assert all(t.chunk == held[t.src] and t.dst == (t.src + 1) % n for t in kv)  # what it holds, onward
        for t in kv:
            held[t.dst] = t.chunk
        held = held if kv else list(range(n))  # after the last step of a pass each rank holds its own again
    for j in range(n if n > 1 else 0):  # dK,dV of block j: every rank adds its share once, the last hop goes home
        hops = [t for t in plan.transfers() if t.chunk == n + j]
        assert sorted(t.src for t in hops) == list(range(n)) and hops[-1].dst == j
        assert all(t.op == "reduce" for t in hops)


def test_plan_trace_computes_only_where_a_rank_has_work():
    n, seq = 4, 8
    plan = ring_attention_plan(n, 4)
    computes = [(e.rank, e.step) for e in plan_trace(plan, step_work(n, seq, "contiguous")) if e.kind == "compute"]
    assert [s for r, s in computes if r == 0] == [0, 4]  # rank 0 needs only its own block, forward and backward
    assert len([s for r, s in computes if r == 3]) == 8
    sends = [e for e in plan_trace(plan, step_work(n, seq, "zigzag")) if e.kind == "send"]
    assert {e.name for e in sends} == {"kv", "dkv"} and sum(e.nbytes for e in sends) == sum(plan.bytes_sent_per_rank())


# ---- the three variants' bytes and memory --------------------------------------------------------------------

def test_hand_computed_costs():
    # N = 4, s = 16, 4 heads of 2, fp32. K,V block = 2 · 4 tokens · 4 heads · 2 = 64 floats = 256 B
    shape = dict(world_size=4, seq=16, heads=4, head_dim=2)
    assert costs("ring", **shape) == ("ring", 3 * 256, 3 * 256 + 4 * 256, 2 * 256)
    assert costs("all-gather-kv", **shape) == ("all-gather-kv", 3 * 256, 3 * 256, 4 * 256)
    # Ulysses: to each rank, 4 tokens × (1 query head + 1 key + 1 value head) × 2 = 24 floats, and 8 of output
    assert costs("ulysses", **shape) == ("ulysses", 3 * (24 + 8) * 4, 3 * (24 + 8) * 4, 256)
    # GQA: 1 K,V head instead of 4 quarters the ring's bytes
    assert costs("ring", kv_heads=1, **shape).forward_bytes == 3 * 256 // 4
    assert costs("ring", world_size=1, seq=4, heads=1, head_dim=1).bytes_sent == 0
    assert costs("ring", world_size=2, seq=4, heads=1, head_dim=1).kv_buffer_bytes == 2 * 2 * 1 * 4  # one block


def test_llama3_long_context_shape():
    # Llama 3 405B at 128K tokens on CP = 16 (Dubey et al. 2024, Table 4): 8 K,V heads of 128, bf16
    shape = dict(world_size=16, seq=131072, heads=128, kv_heads=8, head_dim=128, itemsize=2)
    block = 2 * 8192 * 8 * 128 * 2
    assert block == 32 * 2**20 == kv_block_numel(world_size=16, seq=131072, kv_heads=8, head_dim=128) * 2
    assert costs("ring", **shape).forward_bytes == 15 * block
    assert costs("all-gather-kv", **shape).kv_buffer_bytes == 512 * 2**20  # the whole sequence's K,V: 512 MiB
    assert compare(**{k: v for k, v in shape.items()})["ulysses"] is None  # 8 K,V heads do not split over 16
    with pytest.raises(ValueError, match="kv_heads=8: must be divisible by world_size=16"):
        costs("ulysses", **shape)


@settings(max_examples=60, deadline=None)
@given(variant=st.sampled_from(VARIANTS), n=st.integers(1, 6), c=chunk, heads_per_rank=st.integers(1, 3),
       group=st.sampled_from([1, 2]), d=st.integers(1, 3), b=st.integers(1, 2), itemsize=st.sampled_from([2, 4]))
def test_closed_forms_equal_the_plans(variant, n, c, heads_per_rank, group, d, b, itemsize):
    heads = n * heads_per_rank * group
    shape = dict(world_size=n, seq=2 * n * c, heads=heads, kv_heads=heads // group, head_dim=d, batch=b,
                 itemsize=itemsize)
    plan = make_plan(variant, **shape)
    assert plan.bytes_sent_per_rank() == [costs(variant, **shape).bytes_sent] * n
    assert plan.bytes_received_per_rank() == plan.bytes_sent_per_rank()


def test_ulysses_bytes_per_rank_shrink_with_n_where_the_rings_do_not():
    sent = {n: {v: costs(v, world_size=n, seq=4096, heads=32, head_dim=128).forward_bytes for v in VARIANTS}
            for n in (2, 4, 8, 16, 32)}
    assert all(sent[n]["ulysses"] > sent[2 * n]["ulysses"] for n in (2, 4, 8, 16))
    assert all(sent[n]["ring"] < sent[2 * n]["ring"] for n in (2, 4, 8, 16))  # (N − 1)/N of all K,V: grows to 1
