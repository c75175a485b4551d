"""Lesson 3's widgets, built through their own API: the memory calculator starts exactly at the paper's
numbers and every knob redraws its browser-drawn bars as the engine says, the walkthrough player holds one
scene per step (the grid the figure draws), and the explorer's button runs the chosen stage on
real processes and shows the measured numbers. Every figure's text is ≥ 10 pt at ≤ ~9.6 inches wide, so
≥ 14 px on screen, and no legend covers a label."""
import ipywidgets as w
import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402 — after matplotlib.use("Agg")

from simlab.render.chart import Chart, ChartPlayer  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.picture import PIXEL_SCALE, figure_png, png_size  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import GATHERED_COLOR, INK, OWNED_COLOR, PART_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.zero import (  # noqa: E402 — after matplotlib.use("Agg")
    calculator_rows,
    calculator_title,
    draw_memory_bars,
    draw_memory_curve,
    draw_offload_timeline,
    draw_zero_step,
    gb,
    grid_layout,
)
from simlab.render.zero_widgets import (  # noqa: E402 — after matplotlib.use("Agg")
    memory_calculator,
    walkthrough_player,
    zero_explorer,
    zero_step_scene,
)
from simlab.sim.memory import comm_volume_per_step, per_gpu_bytes  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.zero import holdings_text, walkthrough  # noqa: E402 — after matplotlib.use("Agg")

from .widget_checks import off_grid  # noqa: E402 — after matplotlib.use("Agg")

SIZES = (5, 7, 3, 4)  # the lesson's MLP: three Linears of 42, 24, 16 parameters
LAYERS = [42, 24, 16]
MAX_CSS_PX = 960  # wider pictures are shrunk by the notebook's column, and their text with them


def run_real(stage):
    from simlab.parity.zero import run_zero
    return run_zero(stage, world_size=3, steps=1, global_batch=6, sizes=SIZES, compare_torch=False)


def readable(fig):
    """Every visible text ≥ 10 pt, the picture ≤ MAX_CSS_PX wide: ≥ 14 px as shown."""
    width = png_size(figure_png(fig))[0] / PIXEL_SCALE
    assert width <= MAX_CSS_PX, f"{width} px wide"
    small = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.get_fontsize() < 10]
    assert small == []


def no_legend_covers(fig, gid):
    renderer = fig.canvas.get_renderer() if hasattr(fig.canvas, "get_renderer") else None
    figure_png(fig)  # lays the figure out
    renderer = fig.canvas.get_renderer()
    legends = [lg for lg in fig.legends + [ax.get_legend() for ax in fig.axes] if lg is not None]
    labels = [t for ax in fig.axes for t in ax.texts if t.get_gid() == gid]
    assert labels and legends
    for lg in legends:
        box = lg.get_window_extent(renderer)
        assert not any(box.overlaps(t.get_window_extent(renderer)) for t in labels)


# ---------------------------------------------------------------- the memory calculator

def test_calculator_starts_exactly_at_the_papers_example():
    panel = memory_calculator()
    assert repr(panel) == "▶ run this cell to get the memory calculator"
    knobs = panel.knobs
    assert knobs["params"].value == 7.5e9 and knobs["params"].label == "7.5 B"  # not 7.94e9: explicit options
    assert knobs["gpus"].value == 64 and knobs["precision"].value == "mixed"
    for knob in (knobs["params"], knobs["gpus"]):  # every slider's default lies on its grid
        assert isinstance(knob, w.SelectionSlider) and knob.value == [v for _, v in knob.options][knob.index]
    assert off_grid(panel) == [] and off_grid(zero_explorer(run_real)) == []  # no slider the browser would snap
    chart, table = panel.children[2], panel.children[3]
    assert isinstance(chart, Chart) and chart.scene["alt"].startswith(calculator_title(7.5e9, 64, "mixed"))
    totals = [m["text"] for m in chart.scene["marks"] if m["kind"] == "text" and m.get("bold")]
    for total in ("120", "31.4", "16.6", "1.88"):  # the paper's Figure 1, as the lesson printed it
        assert f">{total}<" in table.value and total in totals and total in chart.alt
    assert "white-space:nowrap" in table.value


def test_calculator_follows_its_knobs():
    panel = memory_calculator()
    panel.knobs["params"].value = 1.75e11
    panel.knobs["offload"].value = True
    rows = per_gpu_bytes(175_000_000_000, 64, 3, offload=True, precision="mixed")
    assert f">{rows['total'] / 1e9:.3g}<" in panel.children[3].value  # 175 B, stage 3 + offload


def assert_bars_are_the_engines(scene, params, gpus, precision, offload):
    """A stacked bar per stage whose parts are `per_gpu_bytes`'s, its total on top; a hatched host bar under
    offload (stages 2 and 3 only), as tall as what the engine puts on the host."""
    bars = [m for m in scene["marks"] if m["kind"] == "rect" and "hatch" not in m]
    hosts = [m for m in scene["marks"] if m["kind"] == "rect" and "hatch" in m]
    totals = [m["text"] for m in scene["marks"] if m["kind"] == "text" and m.get("bold")]
    for stage in range(4):
        model = per_gpu_bytes(int(params), gpus, stage, offload=offload and stage >= 2, precision=precision)
        parts = bars[3 * stage:3 * stage + 3]
        assert [m["y1"] - m["y0"] for m in parts] == [pytest.approx(model[k] / 1e9) for k in PART_COLOR]
        assert [m["fill"] for m in parts] == list(PART_COLOR.values()) and parts[0]["y0"] == 0
        assert parts[-1]["y1"] == pytest.approx(model["total"] / 1e9) and totals[stage] == gb(model["total"])
    assert [m["y1"] for m in hosts] == [pytest.approx(per_gpu_bytes(int(params), gpus, s, offload=True,
                                                                    precision=precision)["cpu"] / 1e9)
                                        for s in (2, 3)] * offload


@pytest.mark.parametrize("knob, value", [("params", 1.75e11), ("params", 1e6), ("gpus", 1), ("gpus", 1024),
                                         ("precision", "fp32"), ("precision", "mixed-fp32-grads"), ("offload", True)])
def test_each_calculator_knob_changes_the_scene_as_the_engine_says(knob, value):
    panel = memory_calculator()
    before = panel.children[2].scene
    panel.knobs[knob].value = value
    k = {name: w.value for name, w in panel.knobs.items()}
    scene = panel.children[2].scene
    assert scene != before and scene["title"] == calculator_title(k["params"], k["gpus"], k["precision"])
    assert_bars_are_the_engines(scene, k["params"], k["gpus"], k["precision"], k["offload"])


def test_calculator_refuses_an_off_grid_default_in_one_line():
    with pytest.raises(ValueError, match=r"params=7.9e\+09, gpus=64: the calculator offers") as err:
        memory_calculator(params=7.9e9)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("gpus, offload", [(64, False), (1, True), (1024, True)])
def test_calculator_figure_is_readable_and_its_legend_covers_no_label(gpus, offload):
    fig = draw_memory_bars(calculator_rows(7.5e9, gpus, "mixed", offload), title=calculator_title(7.5e9, gpus, "mixed"))
    readable(fig)
    no_legend_covers(fig, "total")


# ---------------------------------------------------------------- the walkthrough

@pytest.mark.parametrize("stage, offload", [(3, False), (2, True)])
def test_walkthrough_player_has_one_frame_per_step(stage, offload):
    steps = walkthrough(stage, offload=offload)
    player = walkthrough_player(steps, 3)
    assert isinstance(player, ChartPlayer) and repr(player).startswith("▶ run this cell")
    assert player.count == len(player.frames) == len(steps)
    assert all(holdings_text(st).split("\n")[0] in cap for st, cap in zip(steps, player.captions))
    assert "white-space:pre" in player.captions[0]  # the table scrolls, never wraps mid-word
    assert player.frames == [zero_step_scene(st, 3) for st in steps]
    sizes = {(f["width"], f["height"]) for f in player.frames}
    assert len(sizes) == 1  # every frame the same size: the picture does not jump while playing


@pytest.mark.parametrize("stage, offload, world_size", [(3, False, 3), (2, True, 3), (1, False, 8)])
def test_a_step_scene_is_the_grid_the_figure_draws(stage, offload, world_size):
    """Every block the engine says a GPU (or host) holds, where `grid_layout` puts it: solid blue if that GPU
    owns it, pale and dashed if gathered; the step's holdings table is its text alternative."""
    for step in walkthrough(stage, world_size=world_size, offload=offload):
        scene, g = zero_step_scene(step, world_size), grid_layout(step, world_size)
        held = sum(len(b) for h in step.holdings + step.cpu for b in h.values() if b)
        blocks = [m for m in scene["marks"] if m["kind"] == "rect" and m["stroke"] == INK]
        assert len(blocks) == len(g["blocks"]) == held
        for m, (_name, bx, y0, owned) in zip(blocks, g["blocks"]):
            assert (m["x0"], m["y0"]) == (pytest.approx(bx + 0.04), pytest.approx(y0 + 0.15))
            assert m["fill"] == (OWNED_COLOR if owned else GATHERED_COLOR) and m.get("dash", False) == (not owned)
        assert scene["alt"].endswith(holdings_text(step)) and f"step {step.index}: {step.name}" == scene["title"]


@pytest.mark.parametrize("fig", [
    lambda: draw_zero_step(walkthrough(3)[1], 3), lambda: draw_zero_step(walkthrough(2, offload=True)[5], 3),
    lambda: draw_zero_step(walkthrough(1, world_size=8)[1], 8), lambda: draw_memory_curve(walkthrough(3), 3),
    lambda: draw_memory_curve(walkthrough(2, offload=True), 3),
    lambda: draw_offload_timeline(walkthrough(2, offload=True))], ids=lambda f: "")
def test_walkthrough_figures_are_readable(fig):
    readable(fig())


# ---------------------------------------------------------------- the real run

def test_explorer_runs_the_chosen_stage_for_real():
    panel = zero_explorer(run_real)
    assert repr(panel) == "▶ run this cell to get the walkthrough and its real run"
    assert panel.pick.value == 3 and panel.player.count == len(walkthrough(3))
    panel.pick.value = 2  # the walkthrough and the simulated trace follow the picked stage
    assert panel.player.count == len(walkthrough(2)) and "zero2_simulated.json" in panel.sim_link.value
    assert panel.player.frames == [zero_step_scene(st, 3) for st in walkthrough(2)]
    control = panel.control
    assert control.image.layout.display == "none"  # hidden until a run has a picture
    real = control.run_now()
    assert control.error is None and real["stage"] == 2
    assert control.image.value[:4] == b"\x89PNG" and control.image.layout.display is None
    kept = [sum(m[k] for k in ("params", "grads", "optimizer")) for m in real["measured_bytes_per_rank"]]
    model = per_gpu_bytes(LAYERS, 3, 2, precision="fp32")
    shards = 14 + 8 + 6  # ceil(42/3) + ceil(24/3) + ceil(16/3): each layer padded on its own
    by_hand = 4 * sum(LAYERS) + 4 * shards + 8 * shards  # full fp32 params, own grad shard, own Adam m and v
    assert kept == [model["params"] + model["grads"] + model["optimizer"]] * 3 == [by_hand] * 3  # 328 + 112 + 224 B
    sent = comm_volume_per_step(LAYERS, 2, 3, "fp32")
    assert sent == (3 - 1) * shards * (4 + 4)  # grads reduce-scattered, params all-gathered: N-1 shards each
    text = control.readout.value
    assert f"{kept[0]} / {kept[0]}" in text and f"{sent} / {sent}" in text and real["bytes_sent_per_rank"] == [sent] * 3
    assert "same events in the same order" in text and "≠" not in text
    assert "zero2_real.json" in control.extra.children[0].value


def test_a_failed_run_is_one_line():
    def broken(stage):
        raise RuntimeError("rank 1 hung\nmore detail")
    control = zero_explorer(broken).control
    assert control.run_now() is None
    assert "real run failed: RuntimeError: rank 1 hung" in control.readout.value
    assert "more detail" not in control.readout.value and control.image.layout.display == "none"


def test_explorer_refuses_stage_0():
    with pytest.raises(ValueError, match="stage=0: the real run has stages 1, 2 and 3"):
        zero_explorer(run_real, stage=0)
