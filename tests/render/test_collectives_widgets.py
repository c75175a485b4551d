"""Lesson 1's ring lab: knobs on their grid at the text's values, the simulated ring as one browser-drawn
scene per step (its nodes, boxes, shades and arrows exactly the engine's step), every knob changing the scenes
as the engine says, and a run control that runs the shown ring on real gloo processes and draws the real steps
beside the simulated ones with the engine's verdicts."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.colors import to_hex  # noqa: E402 — after matplotlib.use("Agg")

from simlab.parity.collectives import run_collective  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.chart import ChartPlayer  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.collectives import pair_scene, ring_lab, ring_scene  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.collectives_figures import contribution_color, rank_position  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.collectives_text import side_by_side_text, step_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import MATCH_COLOR, TRANSFER_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.collectives import power_inputs, ring_all_reduce  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.collectives_stepper import simulate  # noqa: E402 — after matplotlib.use("Agg")


def run_ring(world_size, numel):  # what the notebook passes in: render/ never starts processes
    return run_collective("ring-all-reduce", world_size=world_size, numel=numel, snapshots=True,
                          inputs="powers-of-two")


@pytest.fixture(scope="module")
def lab():
    return ring_lab(run_ring, world_sizes=(2, 3, 4), sizes=(4, 8, 16))


def test_the_lab_is_a_panel_whose_defaults_are_the_lessons_ring(lab):
    assert repr(lab) == "▶ run this cell to get the ring lab"
    # explicit options, so the default is exactly one of them: 4 ranks, 8 float32 = 32 B, as in the text
    assert lab.ranks.value == 4 and lab.ranks.value in dict(lab.ranks.options).values()
    assert lab.size.value == 8 and dict(lab.size.options)["32 B"] == 8 and lab.size.label == "32 B"
    assert isinstance(lab.player, ChartPlayer) and lab.player.count == 7  # 2(N−1) steps + the start
    assert lab.sim.final_ok and [int(x[0]) for x in lab.sim.inputs] == [1, 2, 4, 8]  # 2**r: decodable
    assert "ring_all_reduce_n4_simulated.json" in lab.sim_link.value and "base64," in lab.sim_link.value


def test_a_default_off_the_options_is_refused():
    with pytest.raises(ValueError, match="world_size=7: must be one of 2, 3, 4"):
        ring_lab(run_ring, world_sizes=(2, 3, 4), world_size=7)


def test_run_now_runs_the_shown_ring_for_real_and_draws_it_beside_the_simulation(lab):
    lab.ranks.value = 3  # the knobs decide what runs
    assert lab.player.count == 5 and "n3_simulated" in lab.sim_link.value
    assert [len(f["panels"]) for f in lab.player.frames] == [1] * 5
    result = lab.control.run_now()
    assert lab.control.error is None and result["world_size"] == 3 and result["inputs"] == "powers-of-two"
    # the overlay: every step is now simulated | real side by side, with the engine's verdict under it
    assert lab.player.count == 5 and [len(f["panels"]) for f in lab.player.frames] == [2] * 5
    assert all(f["columns"] == 2 and f["panels"][1]["title_color"] == MATCH_COLOR[True] for f in lab.player.frames)
    assert all("5/5 steps match" in c for c in lab.player.captions)
    assert lab.player.frames[2]["alt"] == side_by_side_text(lab.sim.steps[2], result["steps"][2], lab.plan, True,
                                                            "values")
    # the readout holds the real run's own numbers
    sent = result["bytes_sent_per_rank"]
    # chunks of 3, 3, 2 float32 = 12, 12, 8 B; rank r sends chunks r-1, r-2, then r, r-1 (mod 3):
    assert sent == [8 + 12 + 12 + 8, 12 + 8 + 12 + 12, 12 + 12 + 8 + 12]  # counted on the real ranks
    assert f"real {sent}" in lab.control.readout.value and "3 processes (gloo)" in lab.control.readout.value
    assert "5/5 steps match the simulation" in lab.control.readout.value
    link, = lab.control.extra.children
    assert "ring_all_reduce_n3_real.json" in link.value
    # the real panel is coloured by whose inputs each chunk holds, decoded from the real values
    assert all(r.sources == s.sources for r, s in zip(result["steps"], lab.sim.steps))


def test_changing_a_knob_drops_the_real_run_that_no_longer_applies(lab):
    lab.size.value = 16
    assert lab.player.captions == [] and lab.control.readout.value == "" and lab.control.extra.children == ()


def test_a_failed_run_is_one_line():
    def broken(world_size, numel):
        raise RuntimeError("gloo: connection closed\nmore detail")
    lab = ring_lab(broken, world_sizes=(2, 4), sizes=(8,))
    assert lab.control.run_now() is None
    assert "real run failed: RuntimeError: gloo: connection closed" in lab.control.readout.value
    assert "more detail" not in lab.control.readout.value


def test_a_run_without_decodable_inputs_is_refused_in_one_line():
    lab = ring_lab(lambda world_size, numel: run_collective("ring-all-reduce", world_size, numel, snapshots=True),
                   world_sizes=(2, 4), sizes=(8,))
    lab.control.run_now()
    assert "inputs=&#x27;powers-of-two&#x27;" in lab.control.readout.value


# ---- the scenes: the engine's step, drawn in the browser ----------------------------------------------------

def marks(scene, kind):
    return [m for p in scene["panels"] for m in p["marks"] if m["kind"] == kind]


@pytest.mark.parametrize("n, numel", [(2, 4), (3, 6), (4, 8), (6, 1024)])
def test_a_ring_scene_is_the_engines_step(n, numel):
    plan = ring_all_reduce(n, numel)
    for step in simulate(plan, power_inputs(n, numel)).steps:
        s = ring_scene(step, plan)
        assert s["alt"] == step_text(step, plan, "sources")  # the text alternative: the step's own table
        nodes = marks(s, "circle")
        assert [(m["x"], m["y"]) for m in nodes] == [pytest.approx(rank_position(r, n)) for r in range(n)]
        # one box per chunk each rank has, shaded by how many ranks' inputs the engine says it sums
        shades = [to_hex(contribution_color(len(src), n, v is not None))
                  for vals, srcs in zip(step.values, step.sources) for v, src in zip(vals, srcs)]
        assert [m["fill"] for m in marks(s, "rect")] == shades
        # one arrow per transfer, from its sender's node towards its receiver's, coloured by what it does
        arrows = marks(s, "arrow")
        assert len(arrows) == len(step.transfers)
        for m, t in zip(arrows, step.transfers):
            (sx, sy), (dx, dy) = rank_position(t.src, n), rank_position(t.dst, n)
            assert math.dist((m["x0"], m["y0"]), (sx, sy)) < math.dist((m["x0"], m["y0"]), (dx, dy))
            assert math.dist((m["x1"], m["y1"]), (dx, dy)) < math.dist((m["x1"], m["y1"]), (sx, sy))
            assert m["stroke"] == TRANSFER_COLOR[t.op] and m.get("dash", False) == (t.op == "copy")


def test_a_pair_scene_says_so_when_the_real_run_has_no_such_step():
    plan = ring_all_reduce(3, 6)
    steps = simulate(plan, power_inputs(3, 6)).steps
    s = pair_scene(3, steps, plan, steps[:2], None)
    assert s["panels"][1]["marks"] == [] and "no step 3" in s["panels"][1]["title"]
    assert s["panels"][1]["title_color"] == MATCH_COLOR[False]


@pytest.mark.parametrize("knob, value", [("ranks", 2), ("ranks", 3), ("size", 4), ("size", 16)])
def test_each_knob_changes_the_scenes_as_the_engine_says(knob, value):
    lab = ring_lab(run_ring, world_sizes=(2, 3, 4), sizes=(4, 8, 16))
    getattr(lab, knob).value = value
    n, numel = lab.ranks.value, lab.size.value
    plan = ring_all_reduce(n, numel)
    steps = simulate(plan, power_inputs(n, numel)).steps
    assert lab.player.count == len(steps) == 2 * (n - 1) + 1 and lab.player.value == 0
    assert [f["alt"] for f in lab.player.frames] == [step_text(st, plan, "sources") for st in steps]
    assert lab.player.frames == [ring_scene(st, plan) for st in steps]
