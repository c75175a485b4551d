"""Step player: builds with and without a real run, and shows the engine's verdict for each step."""
import dataclasses

import ipywidgets as w
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from simlab.sim.collectives import ring_all_reduce  # noqa: E402
from simlab.sim.stepper import simulate  # noqa: E402
from simlab.render.collectives import player_figure, player_frame, step_player, verdict_html  # noqa: E402

PLAN = ring_all_reduce(3, 6)
SIM = simulate(PLAN).steps


def real_run(steps):
    """Stand-in for a real run: same values, no sources (a buffer cannot know who contributed)."""
    return [dataclasses.replace(s, sources=tuple((None,) * len(row) for row in s.sources)) for s in steps]


def corrupted(steps, k):
    """A real run whose step k has one wrong element on rank 1, chunk 0."""
    out = real_run(steps)
    values = [list(row) for row in out[k].values]
    values[1][0] = values[1][0] + np.int64(1)
    out[k] = dataclasses.replace(out[k], values=tuple(tuple(row) for row in values))
    return out


def parts(box):
    """(play, slider, status, view) out of the player's VBox."""
    (controls, view) = box.children
    play, slider, status = controls.children
    return play, slider, status, view


def test_player_without_real_steps():
    box = step_player(SIM, PLAN)
    play, slider, status, view = parts(box)
    assert isinstance(box, w.VBox) and isinstance(play, w.Play) and isinstance(slider, w.IntSlider)
    assert slider.max == play.max == PLAN.num_steps == len(SIM) - 1
    assert status.value == "" and "step 0/4 of ring_all_reduce" in view.value
    slider.value = 2  # what Play does in the browser, through jslink
    assert "step 2/4" in view.value and "Σ0..2" in view.value


def test_player_with_matching_real_steps():
    box = step_player(SIM, PLAN, real_steps=real_run(SIM))
    _, slider, status, view = parts(box)
    assert "match ✓" in status.value and "5/5 steps match" in status.value
    assert "simulated" in view.value and "real" in view.value


def test_corrupted_real_step_is_flagged_on_that_step_only():
    real = corrupted(SIM, 3)
    frames = [player_frame(k, SIM, PLAN, real_steps=real) for k in range(len(SIM))]
    assert [f.splitlines()[0].endswith("match ✓") for f in frames] == [True, True, True, False, True]
    _, slider, status, _ = parts(step_player(SIM, PLAN, real_steps=real))
    assert "4/5 steps match" in status.value
    slider.value = 3
    assert "match ✗" in status.value


def test_given_verdicts_are_shown_as_given():
    verdicts = [True, False, True, True, True]
    assert "match ✗" in player_frame(1, SIM, PLAN, real_steps=SIM, verdicts=verdicts)
    assert "match ✗" in verdict_html(1, verdicts) and "4/5 steps match" in verdict_html(0, verdicts)


def test_a_shorter_real_run_does_not_match_its_missing_steps():
    frame = player_frame(4, SIM, PLAN, real_steps=real_run(SIM)[:3])
    assert frame.splitlines()[0].endswith("match ✗") and "(no such step)" in frame


def test_plot_mode_shows_a_png_per_step():
    box = step_player(SIM, PLAN, real_steps=corrupted(SIM, 3), mode="plot")
    _, slider, _, view = parts(box)
    assert isinstance(view, w.Image) and bytes(view.value).startswith(b"\x89PNG")
    first = bytes(view.value)
    slider.value = 3
    assert bytes(view.value) != first
    fig = player_figure(3, SIM, PLAN, real_steps=corrupted(SIM, 3))
    assert len(fig.axes) == 2 and fig.axes[1].get_title() == "real  (match ✗)"
    assert len(player_figure(0, SIM, PLAN).axes) == 1


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="mode="):
        step_player(SIM, PLAN, mode="video")
