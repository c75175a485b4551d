"""Lesson 1's ring lab: knobs on their grid at the text's values, the simulated ring in a frame player,
and a run control that runs the shown ring on real gloo processes and draws the real steps beside the
simulated ones with the engine's verdicts."""
import base64

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.parity.collectives import run_collective  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.collectives import ring_lab  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.picture import png_size  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.player import FramePlayer  # noqa: E402 — after matplotlib.use("Agg")


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
    assert isinstance(lab.player, FramePlayer) and lab.player.count == 7  # 2(N−1) steps + the start
    assert lab.sim.final_ok and [int(x[0]) for x in lab.sim.inputs] == [1, 2, 4, 8]  # 2**r: decodable
    assert "ring_all_reduce_n4_simulated.json" in lab.sim_link.value and "base64," in lab.sim_link.value


def test_a_default_off_the_options_is_refused():
    with pytest.raises(ValueError, match="world_size=7: must be one of 2, 3, 4"):
        ring_lab(run_ring, world_sizes=(2, 3, 4), world_size=7)


def test_run_now_runs_the_shown_ring_for_real_and_draws_it_beside_the_simulation(lab):
    lab.ranks.value = 3  # the knobs decide what runs
    assert lab.player.count == 5 and "n3_simulated" in lab.sim_link.value
    single = png_size(base64.b64decode(lab.player.frames[0]))
    result = lab.control.run_now()
    assert lab.control.error is None and result["world_size"] == 3 and result["inputs"] == "powers-of-two"
    # the overlay: every step is now simulated | real, with the engine's verdict under it
    assert lab.player.count == 5 and png_size(base64.b64decode(lab.player.frames[0]))[0] > 1.5 * single[0]
    assert all("5/5 steps match" in c for c in lab.player.captions)
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
