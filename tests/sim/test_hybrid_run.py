"""`simlab.sim.hybrid_run.HybridRun`: one description of a real 3-D run, built from the knobs with every check
made there, once: the defaults the lesson's runs rely on, each refusal in one line naming the argument, the
instance always runnable, and the memory bound `simlab run hybrid` checks, in closed form."""
import dataclasses
import math

import pytest

from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_run import EXECUTOR, HybridRun, gpt_3d
from simlab.sim.mesh import Mesh


def test_the_defaults_are_the_lessons_small_gpt_on_8_ranks():
    run = HybridRun.build()
    assert (run.plan.tp, run.plan.dp, run.plan.pp, run.world_size) == (2, 2, 2, 8)
    assert (run.global_batch, run.replica_batch, run.microbatches) == (16, 8, 4)  # m = 2·pp of b = 2 per replica
    assert run.sizes() == {"layers": 4, "hidden": 16, "heads": 4, "seq": 8, "vocab": 32}
    assert (run.steps, run.seed, run.lr, run.backend, run.timeout, run.variants) == (3, 0, 1e-2, "auto", 120.0, ())
    # the plan the notebooks print (`config`): what the parity run built before the spec existed
    before = Plan(tp=2, pp=2, dp=2, microbatch=2, zero=0, schedule="1f1b", chunks=1, attention="eager",
                  overlap="none")
    assert run.plan.to_dict() == before.to_dict() and run.plan.precision == "fp32"
    assert run.model == gpt_3d(**run.sizes()) and not run.model.tied


def test_the_grid_is_named_in_megatrons_order_and_gives_the_mesh():
    run = HybridRun.build(tp=4, dp=2, pp=1)
    assert run.mesh == Mesh(pp=1, dp=2, tp=4) and run.mesh.groups("tp") == [(0, 1, 2, 3), (4, 5, 6, 7)]
    with pytest.raises(TypeError):
        HybridRun.build(4, 2, 1)  # keyword-only: no order to remember


def test_interleaved_defaults_to_two_chunks_and_two_layers_per_chunk():
    run = HybridRun.build(tp=1, dp=1, pp=2, schedule="interleaved")
    assert (run.plan.chunks, run.model.layers) == (2, 8)
    varied = HybridRun.build(tp=1, dp=1, pp=2, variants=({"schedule": "interleaved", "chunks": 3}, {"zero": 1}))
    assert varied.model.layers == 12 and [p.chunks for p in varied.plans] == [1, 3, 1]
    assert [p.zero for p in varied.plans] == [0, 0, 1]
    assert all(getattr(p, k) == v for p in varied.plans for k, v in EXECUTOR.items())  # fp32, eager, no overlap
    assert all(p.to_dict() | {k: 0 for k in ("zero", "schedule", "chunks")}
               == varied.plan.to_dict() | {k: 0 for k in ("zero", "schedule", "chunks")} for p in varied.plans)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=0), "tp=0: must be >= 1"), (dict(dp="2"), "dp='2': must be an integer"),
    (dict(pp=1.5), "pp=1.5: must be an integer"), (dict(microbatch=0), "microbatch=0: must be >= 1"),
    (dict(chunks=0), "chunks=0: must be >= 1"), (dict(microbatches=0), "microbatches=0: must be >= 1"),
    (dict(layers=0), "layers=0: must be >= 1"), (dict(hidden=-1), "hidden=-1: must be >= 1"),
    (dict(heads=0), "heads=0: must be >= 1"), (dict(seq=0), "seq=0: must be >= 1"),
    (dict(zero=2), "zero=2: must be between 0 and 1"),
    (dict(schedule="gpipe"), "schedule='gpipe': must be one of 1f1b, interleaved"),
    (dict(steps=0), "steps=0: must be >= 1"), (dict(seed=-1), "seed=-1: must be >= 0"),
    (dict(lr=0.0), "lr=0.0"), (dict(timeout=float("nan")), "timeout=nan"),
    (dict(tp=1, dp=2, pp=1, world_size=3), "world_size=3: must be tp × dp × pp = 1 × 2 × 1"),
    (dict(world_size=0), "world_size=0: must be between 1 and 64"),
    (dict(tp=1, dp=65, pp=1), "world_size=65: must be between 1 and 64"),
    (dict(tp=3, dp=2, pp=1, heads=4), "heads=4: must be divisible by tp=3"),
    (dict(tp=1, dp=1, pp=3, layers=4), "layers=4: must be divisible by pp × chunks = 3 × 1"),
    (dict(tp=1, dp=1, pp=3, layers=2), "pp=3: more stages than layers=2"),
    (dict(tp=1, hidden=10, heads=4), "hidden=10: must be divisible by heads=4"),
    (dict(tp=1, dp=1, pp=2, schedule="interleaved", microbatches=3), "microbatches=3: must be divisible by pp=2"),
    (dict(schedule="1f1b", chunks=2), "chunks=2: only the interleaved schedule"),
    (dict(variants=({"dp": 4},)), "variants=({'dp': 4},): must be a tuple of dicts of zero, schedule, chunks"),
    (dict(variants=[{"zero": 1}]), "variants=[{'zero': 1}]"),
    (dict(variants=({"zero": 3},)), "zero=3: must be between 0 and 1"),
    (dict(variants=({"chunks": 0},)), "chunks=0: must be >= 1"),
    (dict(variants=({"schedule": "gpipe"},)), "schedule='gpipe'"),
])
def test_every_bad_knob_is_refused_in_one_line_naming_it(kwargs, message):
    with pytest.raises(ValueError) as err:
        HybridRun.build(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_run_built_by_hand_is_checked_too():
    run = HybridRun.build(tp=2, dp=2, pp=1)
    with pytest.raises(ValueError, match=r"^vocab=33: must be divisible by tp=2$"):
        dataclasses.replace(run, model=run.model.with_(vocab=33))
    with pytest.raises(ValueError, match="plan=.*the executor runs fp32, eager attention"):
        dataclasses.replace(run, plan=run.plan.with_(attention="flash"))
    with pytest.raises(ValueError, match="variants=.*a variant changes only zero, schedule, chunks"):
        dataclasses.replace(run, variants=(run.plan.with_(dp=1, tp=4),))
    with pytest.raises(ValueError, match="plan=.*: must be a simlab.sim.hybrid.Plan"):
        dataclasses.replace(run, plan=run.plan.to_dict())
    with pytest.raises(ValueError, match="backend=None"):
        dataclasses.replace(run, backend=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.steps = 5


def test_a_result_gives_back_its_run():
    run = HybridRun.build(tp=1, dp=2, pp=2, zero=1, microbatches=8)
    result = {"config": run.plan.to_dict(), "model": run.sizes(), "global_batch": run.global_batch,
              "backend": "gloo"}
    assert HybridRun.from_result(result) == dataclasses.replace(run, backend="gloo")


def test_the_memory_bound_is_the_whole_gpt_on_the_whole_batch_in_one_process():
    """16 B per parameter (fp32 weights, gradients, Adam's two moments) and Korthikanti's activations doubled
    for fp32 — per layer 2·sbh(34 + 5as/h), with B = the global batch as one micro-batch — plus the embedding's
    output (2sbh) and the final norm's input with the fp32 logits (4sbh(1 + V/h))."""
    run = HybridRun.build()
    m, b = run.model, run.global_batch
    sbh = m.seq * b * m.hidden
    activations = 2 * m.layers * sbh * (34 + 5 * m.heads * m.seq / m.hidden) + 2 * sbh + 4 * sbh * (1 + m.vocab / m.hidden)
    assert run.process_bytes() == 16 * m.params + activations == 978_432
    assert run.machine_bytes() == 9 * run.process_bytes()  # the reference and 8 ranks


def test_any_size_a_user_can_type_gives_a_number_not_an_overflow():
    huge = HybridRun.build(tp=1, dp=2, pp=1, hidden=2**62, heads=2, layers=2**100, microbatches=10**12)
    assert math.isfinite(huge.machine_bytes()) and huge.machine_bytes() > 1e70
    assert huge.machine_bytes() > HybridRun.build(tp=1, dp=2, pp=1, hidden=2**62, heads=2).machine_bytes()



def test_context_parallelism_splits_each_sequence_over_a_cp_group_in_megatrons_order():
    run = HybridRun.build(tp=2, cp=2, dp=2, pp=1)
    assert run.world_size == 8 and run.mesh == Mesh(pp=1, dp=2, cp=2, tp=2)
    assert run.mesh.groups("cp") == [(0, 2), (1, 3), (4, 6), (5, 7)]  # tp fastest, then cp
    assert run.model.seq == 8 and HybridRun.build(tp=1, cp=4, dp=2, pp=1).model.seq == 16  # 2·cp chunks of 2
    # the ring computes tile by tile with an online softmax, keeping the log-sum-exp: flash attention's memory
    assert run.plan.attention == "flash" and HybridRun.build(tp=2, dp=2, pp=1).plan.attention == "eager"
    assert HybridRun.build(tp=1, cp=2, dp=1, pp=1, variants=({"cp_comm": "ulysses"},)).plans[1].cp_comm == "ulysses"
    result = {"config": run.plan.to_dict(), "model": run.sizes(), "global_batch": run.global_batch, "backend": "gloo"}
    assert HybridRun.from_result(result) == dataclasses.replace(run, backend="gloo")


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=1, cp=2, dp=1, pp=1, world_size=4), "world_size=4: must be tp × cp × dp × pp = 1 × 2 × 1 × 1"),
    (dict(tp=1, cp=3, dp=1, pp=1, seq=8), "cp=3: the sequence seq=8 must split into 2·cp = 6 equal chunks"),
    (dict(tp=1, cp=4, dp=1, pp=1, cp_comm="ulysses"), "cp=4: Ulysses needs heads=2 divisible by tp·cp = 4"),
    (dict(tp=1, cp=2, dp=1, pp=1, cp_comm="p2p"), "cp_comm='p2p'"),
    (dict(cp=0), "cp=0: must be >= 1"),
])
def test_bad_context_parallel_knobs_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError) as err:
        HybridRun.build(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_executor_has_no_experts():
    run = HybridRun.build(tp=1, dp=2, pp=1)
    moe = run.model.with_(experts=2)
    with pytest.raises(ValueError, match="plan=.*no experts"):
        dataclasses.replace(run, model=moe, plan=run.plan.with_(ep=2))


@pytest.mark.parametrize("tp, cp, dp, pp, zero", [(2, 2, 2, 1, 0), (1, 2, 2, 2, 1), (1, 4, 2, 1, 0), (2, 4, 1, 1, 1),
                                                  (1, 2, 3, 2, 1)])
def test_context_parallel_bytes_in_closed_form(tp, cp, dp, pp, zero):
    """Per rank: TP and PP move the (b, s/cp, h) activations of a cp = 1 run on sequences s/cp long; DP's
    reduction runs over dp·cp ranks, as a cp = 1 run's over dp' = dp·cp; the ring moves, per layer and
    micro-batch, (N−1) K,V blocks forward, (N−1) back and N of dK,dV: (3N − 2)·B, B = 2·b·(s/N)·(a/t)·(h/a)·4
    bytes (the rank's K and V of its TP share of the heads)."""
    from simlab.sim.hybrid_traffic import bytes_per_rank, rank_states
    run = HybridRun.build(tp=tp, cp=cp, dp=dp, pp=pp, zero=zero)
    m, plan, batch = run.model, run.plan, run.global_batch
    got = bytes_per_rank(m, plan, batch)
    short = bytes_per_rank(m.with_(seq=m.seq // cp), Plan(tp=tp, dp=dp, pp=pp, microbatch=2, zero=zero), batch)
    wide = bytes_per_rank(m, Plan(tp=tp, dp=dp * cp, pp=pp, microbatch=2, zero=zero), batch * cp)
    mesh, wide_mesh = run.mesh, Mesh(pp=pp, dp=dp * cp, tp=tp)
    for rank in range(run.world_size):
        at = {d: mesh.index_of(d, rank) for d in ("pp", "dp", "cp", "tp")}
        same = wide_mesh.rank_of(at["pp"], at["dp"] * cp + at["cp"], at["tp"])  # its place in the dp-cp group
        assert got["tp"][rank] == short["tp"][rank % tp + tp * (rank // (tp * cp))]
        assert got["pp"][rank] == short["pp"][rank % tp + tp * (rank // (tp * cp))]
        assert got["dp"][rank] == wide["dp"][same]
    block = 2 * plan.microbatch * (m.seq // cp) * (m.heads // tp) * (m.hidden // m.heads) * 4
    layers = m.layers // pp
    assert got["cp"] == [run.microbatches * layers * (3 * cp - 2) * block] * run.world_size
    states = rank_states(m, plan, 0)
    assert states == rank_states(m, Plan(tp=tp, dp=dp * cp, pp=pp, microbatch=2, zero=zero), 0)
    assert "cp" not in bytes_per_rank(m.with_(seq=8), Plan(tp=tp, dp=dp, pp=pp, microbatch=2), batch)
