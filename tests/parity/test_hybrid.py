"""Lesson 6's 3-D run on real processes: for every (tp, dp, pp) with tp·dp·pp ≤ 8, with ZeRO-1 off and on
(and the interleaved schedule where there is a pipeline), the losses of every step and every parameter
after the last equal one process's within 1e-5, every group carries exactly the bytes the model
predicts, and every rank holds exactly the model states the memory model predicts. And the run is
described once: `simlab run hybrid` (or its first name, `run 3d`) builds one `HybridRun`, checks it once, and
hands that very spec to the workers. Lesson 7's context parallelism runs in the same spec (`cp`): each sequence split
over the CP group, gradients over dp-cp, Megatron's groups, CP's bytes the model's too."""
import inspect
import itertools

import pytest
from sampling import sample  # tests/sampling.py: every grid under make test-full, a daily sample else

import simlab.exec.hybrid as H
import simlab.exec.tensor_parallel as T
import simlab.parity.hybrid as P
from simlab.parity.hybrid import run_hybrid
from simlab.sim.hybrid_run import HybridRun

TOL = 1e-5
GRIDS = [(tp, dp, pp) for tp, dp, pp in itertools.product(range(1, 9), repeat=3) if tp * dp * pp <= 8]
# Always: one process, each dimension alone at 8, each pair, all three, odd sizes; 6 more drawn each day.
EDGE_GRIDS = ((1, 1, 1), (8, 1, 1), (1, 8, 1), (1, 1, 8), (2, 4, 1), (4, 1, 2), (1, 2, 4), (2, 2, 2), (3, 1, 2),
              (1, 3, 2), (1, 1, 7))
SAMPLED = sample(GRIDS, 6, always=EDGE_GRIDS, name="3-D grids")


def variants(pp):
    return ({"zero": 1},) + (({"schedule": "interleaved", "chunks": 2},) if pp > 1 else ())


@pytest.mark.parametrize("tp, dp, pp", SAMPLED, ids=lambda x: str(x))
def test_every_grid_trains_like_one_process_with_the_predicted_bytes_and_memory(tp, dp, pp):
    res = run_hybrid(tp=tp, dp=dp, pp=pp, steps=2, variants=variants(pp))
    runs = [res] + res["variants"]
    assert len(runs) == 1 + len(variants(pp)) and len(GRIDS) == 38
    for run in runs:
        what = run["config"]
        assert run["max_abs_diff_vs_reference"] <= TOL, what  # losses, all parameters, replicas identical
        assert run["max_abs_diff_across_replicas"] == 0.0, what  # DP keeps the replicas bit-identical
        assert run["bytes_sent_per_group"] == run["predicted_bytes_per_group"], what
        assert run["measured_memory_per_rank"] == run["predicted_memory_per_rank"], what
        assert run["world_size"] == dp * pp * tp and len(run["losses"]) == 2
        assert {kind: len(groups) for kind, groups in run["groups"].items()} == {
            "tp": dp * pp, "dp": pp * tp, "pp": dp * tp}


CP_CASES = [  # (tp, cp, dp, pp, variants): 8 ranks each; every way K,V travel, ZeRO-1 over dp-cp, a pipeline
    (2, 2, 2, 1, ({"zero": 1}, {"cp_comm": "all-gather-kv"}, {"cp_comm": "ulysses"})),
    (1, 2, 2, 2, ({"zero": 1}, {"schedule": "interleaved", "chunks": 2})),
    (1, 4, 2, 1, ({"zero": 1}, {"cp_comm": "all-gather-kv"})),
]


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")  # megatron.core without TE/Apex
@pytest.mark.parametrize("tp, cp, dp, pp, more", CP_CASES, ids=[f"tp{c[0]}-cp{c[1]}-dp{c[2]}-pp{c[3]}" for c in CP_CASES])
def test_context_parallel_trains_like_one_process_with_the_predicted_bytes_on_megatrons_groups(tp, cp, dp, pp, more):
    """Lesson 7's CP inside the 3-D run: each rank holds the zig-zag positions of its CP coordinate, attention runs
    over the CP group, gradients are reduced (and ZeRO-1 shards) over dp-cp; every byte on every group, CP's
    too, is `hybrid_traffic`'s, and the groups are Megatron-LM's own (its RankGenerator)."""
    from megatron.core.parallel_state import RankGenerator
    res = run_hybrid(tp=tp, cp=cp, dp=dp, pp=pp, steps=2, variants=more)
    megatron = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
    for run in [res] + res["variants"]:
        what = run["config"]
        assert run["max_abs_diff_vs_reference"] <= TOL, what
        assert run["max_abs_diff_across_replicas"] == 0.0, what  # every (dp, cp) rank holds the same weights
        assert run["bytes_sent_per_group"] == run["predicted_bytes_per_group"], what
        assert min(run["bytes_sent_per_group"]["cp"]) > 0, what
        assert run["measured_memory_per_rank"] == run["predicted_memory_per_rank"], what
        assert run["groups"] == {name: megatron.get_ranks(name) for name in ("tp", "dp", "pp", "cp", "dp-cp")}
        assert run["world_size"] == 8 and len(run["losses"]) == 2


def test_gradients_reduced_over_dp_alone_are_caught(monkeypatch):
    """Each CP rank's gradients are a part of its replica's: leave the dp-cp group out and the CP ranks drift."""
    real = P.new_groups
    monkeypatch.setattr(P, "new_groups", lambda mesh, joint=(): real(mesh))  # forked ranks inherit it
    res = run_hybrid(tp=1, cp=2, dp=1, pp=1, steps=2)
    assert res["max_abs_diff_vs_reference"] > 1e-3 and res["max_abs_diff_across_replicas"] > 0


def test_tokens_at_positions_other_than_the_layouts_are_caught(monkeypatch):
    """The ranks must hold the zig-zag chunks the causal ring assumes: contiguous blocks instead break the mask."""
    from simlab.sim.context_parallel import positions
    monkeypatch.setattr(P, "positions", lambda rank, n, seq: positions(rank, n, seq, layout="contiguous"))
    res = run_hybrid(tp=1, cp=2, dp=1, pp=1, steps=2)
    assert res["max_abs_diff_vs_reference"] > 1e-3


def test_zero_1_shards_the_optimizer_state():
    res = run_hybrid(tp=2, dp=4, pp=1, steps=2, variants=({"zero": 1},))
    plain, zero1 = res["measured_memory_per_rank"][0], res["variants"][0]["measured_memory_per_rank"][0]
    assert zero1["params"] == plain["params"] and zero1["optimizer"] * 4 >= plain["optimizer"] > zero1["optimizer"] * 3


def test_a_missing_data_parallel_reduction_is_caught(monkeypatch):
    monkeypatch.setattr(H, "ring_all_reduce", lambda tensor, recorder=None, group=None: None)  # forked ranks inherit
    res = run_hybrid(tp=1, dp=2, pp=1, steps=2)
    assert res["max_abs_diff_vs_reference"] > 1e-3


def test_a_missing_tensor_parallel_sum_is_caught(monkeypatch):
    monkeypatch.setattr(T.CopyToTP, "backward", staticmethod(lambda ctx, grad: (grad, None)))  # f forgets to sum
    res = run_hybrid(tp=2, dp=1, pp=1, steps=2)
    assert res["max_abs_diff_vs_reference"] > 1e-3


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=3, dp=2, pp=1, heads=4), "heads=4: must be divisible by tp=3"),
    (dict(tp=1, dp=1, pp=3, layers=4), "layers=4: must be divisible by pp × chunks = 3 × 1"),
    (dict(tp=1, dp=2, pp=1, world_size=3), "world_size=3: must be tp × dp × pp = 1 × 2 × 1"),
    (dict(tp=1, dp=1, pp=1, zero=2), "zero=2"),
    (dict(tp=1, dp=1, pp=2, schedule="gpipe"), "schedule='gpipe'"),
])
def test_bad_grids_are_refused_before_anything_runs(kwargs, message, no_launch, monkeypatch):
    monkeypatch.setattr(P, "reference_model", lambda *a, **k: pytest.fail("the reference ran"))
    with pytest.raises(ValueError, match=message):
        run_hybrid(**kwargs)


def test_the_grid_is_keyword_only_in_megatrons_order():
    params = inspect.signature(run_hybrid).parameters
    assert list(params)[:3] == ["tp", "dp", "pp"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    with pytest.raises(TypeError):
        run_hybrid(2, 2, 2)  # which is dp? No order to remember: the names say it


class Stop(BaseException):
    """Raised where the workers would start (a BaseException: the CLI's `except Exception` lets it by)."""


@pytest.mark.parametrize("target", ["hybrid", "3d"])
def test_simlab_run_hybrid_builds_and_checks_the_run_once_and_hands_that_spec_to_the_workers(monkeypatch, target):
    from simlab.cli import main
    built, checked, launched = [], [], []
    build, check_run = HybridRun.build.__func__, P.check_run

    def counted_build(cls, **knobs):
        built.append(build(cls, **knobs))
        return built[-1]

    def fake_launch(fn, world_size, *args, **kwargs):
        launched.append((fn, world_size, args, kwargs))
        raise Stop

    monkeypatch.setattr(HybridRun, "build", classmethod(counted_build))
    monkeypatch.setattr(P, "check_run", lambda *a: checked.append(a) or check_run(*a))
    monkeypatch.setattr(P, "launch", fake_launch)
    with pytest.raises(Stop):
        main(["run", target, "--tp", "2", "--steps", "1", "--backend", "gloo"])
    (spec,) = built
    assert (spec.plan.tp, spec.plan.dp, spec.plan.pp, spec.steps, spec.backend) == (2, 1, 1, 1, "gloo")
    assert checked == [(2, "gloo", 120.0, 0)]  # the backend, resolved once
    assert launched == [(P.train_hybrid, 2, (spec,), {"backend": "gloo", "timeout": 120.0})]


def test_simlab_run_hybrid_splits_the_sequence_with_cp(monkeypatch):
    from simlab.cli import main
    launched = []

    def fake_launch(fn, world_size, spec, **kwargs):
        launched.append(spec)
        raise Stop

    monkeypatch.setattr(P, "launch", fake_launch)
    with pytest.raises(Stop):
        main(["run", "hybrid", "--cp", "2", "--dp", "2", "--cp-comm", "all-gather-kv", "--steps", "1",
              "--backend", "gloo"])
    (spec,) = launched
    assert (spec.plan.tp, spec.plan.cp, spec.plan.dp, spec.plan.pp, spec.plan.cp_comm, spec.world_size) == (
        1, 2, 2, 1, "all-gather-kv", 4)


def test_simlab_run_hybrid_refuses_the_memory_the_spec_computes(monkeypatch, capsys, no_launch):
    import simlab.cli.common as C
    from simlab.cli import main
    spec = HybridRun.build(tp=1, dp=2, pp=1, hidden=64, heads=2)
    monkeypatch.setattr(C, "available_memory", lambda: 1.9 * spec.machine_bytes())
    with pytest.raises(SystemExit):
        main(["run", "hybrid", "--dp", "2", "--hidden", "64", "--heads", "2"])
    err = capsys.readouterr().err
    assert f"--hidden=64 --layers=2 --microbatches=2: the GPT and its batch would need about " \
           f"{spec.machine_bytes() / 1e9:.3g} GB" in err and err.count("\n") == 1
    monkeypatch.setattr(C, "available_memory", lambda: 2.1 * spec.machine_bytes())
    with pytest.raises(BaseException, match="a process was started"):  # room enough: on to the launch
        main(["run", "hybrid", "--dp", "2", "--hidden", "64", "--heads", "2", "--backend", "gloo"])


def test_the_strategy_explorer_runs_its_plan_by_keyword():
    """The one caller in the package that passes `run_hybrid` on (lesson 6's explorer) must name the grid."""
    import matplotlib
    matplotlib.use("Agg")
    from simlab.render.hybrid_widgets import strategy_explorer
    calls = []

    def keyword_only(*, tp, dp, pp, **kw):
        calls.append((tp, dp, pp))
        raise RuntimeError("stop here")

    strategy_explorer("node-fits", run=keyword_only).run_control.run_now()
    assert calls == [(1, 2, 1)]
