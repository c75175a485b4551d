"""Step player: a frame player with and without a real run, showing the engine's verdict for each step."""
import base64
import dataclasses

import matplotlib
import numpy as np

matplotlib.use("Agg")

from simlab.render.collectives import player_figure, player_frame, step_player, verdict_html  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.picture import png_size  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.player import FramePlayer  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.collectives import ring_all_reduce  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.collectives_stepper import simulate  # noqa: E402 — after matplotlib.use("Agg")

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


def test_player_without_real_steps_is_a_frame_player_of_ring_pictures():
    player = step_player(SIM, PLAN)
    assert isinstance(player, FramePlayer) and repr(player) == "▶ run this cell to get the ring player"
    assert player.count == len(SIM) == PLAN.num_steps + 1 and player.captions == []
    width, height = png_size(base64.b64decode(player.frames[0]))
    # drawn at 2x for HiDPI; shown at half that: a single ring fits a laptop screen
    assert player.width_px == round(width / 2) <= 500 and height / 2 <= 700
    player.value = 2  # what the browser's slider does
    assert player.value == 2
    player.value = 99
    assert player.value == PLAN.num_steps  # clamped to the last step


def test_player_with_matching_real_steps():
    player = step_player(SIM, PLAN, real_steps=real_run(SIM))
    assert all("match ✓" in c and "5/5 steps match" in c for c in player.captions)
    width, height = png_size(base64.b64decode(player.frames[0]))
    assert width / 2 <= 900 and height / 2 <= 700  # simulated | real side by side still fits


def test_corrupted_real_step_is_flagged_on_that_step_only():
    real = corrupted(SIM, 3)
    frames = [player_frame(k, SIM, PLAN, real_steps=real) for k in range(len(SIM))]
    assert [f.splitlines()[0].endswith("match ✓") for f in frames] == [True, True, True, False, True]
    player = step_player(SIM, PLAN, real_steps=real)
    assert all("4/5 steps match" in c for c in player.captions)
    assert ["match ✗" in c.split("</b>")[0] for c in player.captions] == [False, False, False, True, False]
    assert len({f for f in player.frames}) == len(SIM)  # a picture per step


def test_given_verdicts_are_shown_as_given():
    verdicts = [True, False, True, True, True]
    assert "match ✗" in player_frame(1, SIM, PLAN, real_steps=SIM, verdicts=verdicts)
    assert "match ✗" in verdict_html(1, verdicts) and "4/5 steps match" in verdict_html(0, verdicts)


def test_a_shorter_real_run_does_not_match_its_missing_steps():
    frame = player_frame(4, SIM, PLAN, real_steps=real_run(SIM)[:3])
    assert frame.splitlines()[0].endswith("match ✗") and "(no such step)" in frame
    fig = player_figure(4, SIM, PLAN, real_steps=real_run(SIM)[:3])
    assert fig.axes[1].get_title() == "real: no step 4  (match ✗)"


def test_pair_figure_has_two_rings_one_legend_and_readable_text():
    fig = player_figure(3, SIM, PLAN, real_steps=corrupted(SIM, 3))
    assert len(fig.axes) == 2 and fig.axes[1].get_title() == "real  (match ✗)"
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.texts] + \
        [t.get_fontsize() for t in fig.legends[0].get_texts()] + [fig._suptitle.get_fontsize()]
    assert min(sizes) >= 10  # shown at 100 px per inch: 10 pt is 14 px
    assert len(player_figure(0, SIM, PLAN).axes) == 1
