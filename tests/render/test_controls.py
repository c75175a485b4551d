"""The widget toolkit: natural-size pictures, hints before a cell runs, run controls, players, trace links."""
import base64
import json

import pytest
from matplotlib.figure import Figure

from simlab.render.controls import Panel, figure_image, readout_html, run_control, show_figure, table_html, trace_link
from simlab.render.picture import DISPLAY_DPI, PIXEL_SCALE, figure_png, png_size, render_png
from simlab.render.player import MAX_INTERVAL_MS, frame_player, reveal_player
from simlab.trace import Event, Trace

from .widget_checks import off_grid


def _fig(width=4.0, height=2.0, x=1):
    fig = Figure(figsize=(width, height))
    ax = fig.subplots()
    ax.plot([0, 10], [0, x])
    ax.set_xlim(0, 10)
    return fig, ax


def test_pictures_are_drawn_at_twice_their_natural_size_and_shown_at_it():
    fig, _ = _fig(4.0, 2.0)
    png = figure_png(fig)
    width, height = png_size(png)
    # "tight" crops to the drawn content, so the picture is at most the figure plus the 0.1 in pads
    assert width <= (4.0 + 0.2) * DISPLAY_DPI * PIXEL_SCALE and width > 3.0 * DISPLAY_DPI * PIXEL_SCALE
    image = figure_image(fig)
    assert image.width == str(round(width / PIXEL_SCALE)) and image.layout.max_width == "100%"
    assert image.layout.margin == "0"  # a margin beside max-width 100% makes the panel scroll sideways
    assert image.layout.display is None


def test_an_empty_picture_is_hidden_so_no_broken_image_shows():
    image = figure_image()
    assert image.layout.display == "none" and image.value == b""
    show_figure(image, _fig()[0])
    assert image.layout.display is None and image.value[:4] == b"\x89PNG"


def test_png_size_refuses_what_is_not_a_png():
    with pytest.raises(ValueError, match="not a PNG"):
        png_size(b"GIF89a" + bytes(30))


def test_a_panel_shows_its_hint_as_text_not_its_children():
    panel = Panel([figure_image()], hint="▶ run this cell to get the player")
    bundle = panel._repr_mimebundle_()
    assert bundle["text/plain"] == "▶ run this cell to get the player"


def test_readouts_never_wrap_mid_word_and_tables_round_numbers():
    assert "white-space:pre" in readout_html("ddp_hidden_seconds 1.0")
    assert "&lt;" in readout_html("<b>")  # escaped
    table = table_html([{"name": "a", "x": 1 / 3}], ["name", "x"])
    assert "0.3333" in table and "0.33333" not in table and "nowrap" in table


def test_a_run_control_shows_the_result_of_a_click_and_a_failure_in_one_line():
    calls = []
    control = run_control(lambda: calls.append(1) or {"n": 3}, lambda r: (_fig()[0], f"n = {r['n']}"))
    assert control.image.layout.display == "none"  # no broken image before the first run
    control.button.click()  # exactly what a learner's click does
    assert calls == [1] and control.result == {"n": 3} and control.image.value[:4] == b"\x89PNG"
    assert "n = 3" in control.readout.value and control.progress.value.startswith("done in")
    assert not control.button.disabled and repr(control).startswith("▶")

    def boom():
        raise RuntimeError("rank 2 failed: out of memory\nTraceback (most recent call last): …")
    failing = run_control(boom, lambda r: (None, ""))
    assert failing.run_now() is None and isinstance(failing.error, RuntimeError)
    assert "real run failed: RuntimeError: rank 2 failed: out of memory" in failing.readout.value
    assert "Traceback" not in failing.readout.value


def test_an_interrupted_run_says_so_in_one_line_and_frees_the_button():
    from simlab.exec.launch_watch import Interrupted

    def interrupted():
        raise Interrupted("interrupted: 4 workers stopped")
    control = run_control(interrupted, lambda r: (None, ""))
    assert control.run_now() is None and control.progress.value == "interrupted: 4 workers stopped"
    assert not control.button.disabled


def test_a_run_control_can_add_widgets_such_as_the_real_traces_link():
    trace = Trace([Event(rank=0, kind="send", step=0, peer=1, nbytes=8, start=0.0, end=1.0)])
    control = run_control(lambda: 1, lambda r: (None, "ok", [trace_link(trace, "real.json")]))
    control.run_now()
    assert len(control.extra.children) == 1 and "real.json" in control.extra.children[0].value


def test_a_trace_link_carries_the_chrome_trace_json():
    trace = Trace([Event(rank=1, kind="compute", step=0, name="F0", start=0.5, end=1.5)])
    link = trace_link(trace, "sim.json")
    data = link.value.split("base64,")[1].split("'")[0]
    assert json.loads(base64.b64decode(data)) == json.loads(trace.to_chrome())
    assert "ui.perfetto.dev" in link.value


def test_a_frame_player_holds_every_frame_once_and_plays_in_about_ten_seconds():
    frames = [_fig(x=k)[0] for k in range(5)]
    player = frame_player(frames, captions=[f"c{k}" for k in range(5)])
    assert player.count == 5 and len(player.frames) == 5 and len(set(player.frames)) == 5
    assert player.interval_ms == MAX_INTERVAL_MS and player.value == 0  # few frames: not slower than 1.5 s each
    assert frame_player([figure_png(frames[0])] * 11).interval_ms == 1000  # 10 steps in 10 s
    player.value = 99  # a value past the end is clamped, as the browser's slider would
    assert player.value == 4
    bundle = player._repr_mimebundle_()
    bundle = bundle[0] if isinstance(bundle, tuple) else bundle  # anywidget returns (data, metadata)
    assert bundle["text/plain"] == "▶ run this cell to get the player"
    long = frame_player([figure_png(frames[0])] * 400)
    assert 40 <= long.interval_ms <= 10_000 / 399 + 40  # 400 frames still play in about 10 s
    assert frame_player(frames[:2]).interval_ms <= MAX_INTERVAL_MS
    with pytest.raises(ValueError, match="frames"):
        frame_player([])


def test_a_reveal_players_veil_starts_exactly_at_the_data_x_in_the_picture():
    fig, ax = _fig(5.0, 2.5)
    player = reveal_player(fig, ax, [0.0, 5.0, 10.0])
    png, bbox = render_png(fig, with_box=True)
    assert png_size(png)[0] == pytest.approx(bbox.width * DISPLAY_DPI * PIXEL_SCALE, abs=1.5)
    left, mid, right = player.reveal
    top, bottom, edge = player.veil_box
    assert right == pytest.approx(edge) and mid == pytest.approx((left + right) / 2)
    # the axes' left edge in the picture: where x = 0 is drawn, found from the figure's own transform
    x0_inches = ax.transData.transform((0, 0))[0] / fig.dpi
    assert left == pytest.approx((x0_inches - bbox.x0) / bbox.width)
    assert 0 < top < bottom < 1 and player.value == 2 and len(player.frames) == 1


def test_off_grid_finds_the_sliders_a_browser_would_snap():
    import ipywidgets as w
    assert off_grid(w.VBox([w.FloatLogSlider(value=1e9, base=10, min=6, max=12, step=0.5)])) == []
    snapped = w.FloatLogSlider(value=7.5e9, base=10, min=6, max=12, step=0.1)  # 10**9.875 ≠ 7.5e9
    lin = w.FloatSlider(value=0.3, min=0, max=1, step=0.25, description="ratio")
    found = off_grid(Panel([w.HBox([snapped, w.IntSlider(value=4, min=1, max=16)]), lin]))
    assert len(found) == 2 and any(f.startswith("ratio=0.3") for f in found)


def test_frames_can_be_drawn_lazily_and_in_the_background_in_a_kernel(monkeypatch):
    import simlab.render.player as P
    built = []

    def frame(k):
        return lambda: built.append(k) or _fig(x=k)[0]
    player = frame_player([frame(k) for k in range(6)])  # not in a kernel: all drawn before it returns
    assert built == list(range(6)) and all(player.frames) and len(set(player.frames)) == 6

    monkeypatch.setattr(P, "_in_kernel", lambda: True)
    slow = frame_player([_fig(x=k)[0] for k in range(6)])  # in a kernel: frame 0 now, the rest in a thread
    slow.wait(60)
    assert all(slow.frames) and len(set(slow.frames)) == 6
    first = slow.frames[0]
    slow.set_frames([_fig(x=9)[0], _fig(x=8)[0]])  # replaced while (or after) drawing: only the new ones stay
    slow.wait(60)
    assert slow.count == 2 and len(slow.frames) == 2 and slow.frames[0] != first


# ---- a figure's fingerprint: what it says, stored beside its picture ---------------------------------------

def _labelled(title="memory", legend="params", ylim=(0, 80)):
    fig, ax = _fig()
    ax.plot([0, 1], [0, 1], label=legend)
    ax.set_title(title)
    ax.set_ylabel("GB per GPU")
    ax.text(5, 5, "68.5")
    ax.legend()
    ax.set_ylim(*ylim)
    return fig


def test_a_fingerprint_holds_a_figures_words_and_extents():
    from simlab.render.controls import figure_fingerprint
    print_ = figure_fingerprint(_labelled())
    assert print_["labels"] == ["memory", "GB per GPU", "params"]  # title, axis labels, legend entries
    assert "68.5" in print_["texts"] and "80" in print_["texts"]  # the other texts and the tick labels
    assert print_["extents"] == [[0.0, 10.0, 0.0, 80.0]]
    assert figure_fingerprint(_labelled()) == print_  # deterministic
    for changed in (_labelled(title="memory per GPU"), _labelled(legend="grads"), _labelled(ylim=(0, 90))):
        assert figure_fingerprint(changed)["sha"] != print_["sha"]  # a word or the data shown: another digest


def test_in_a_notebook_each_figure_shown_carries_its_fingerprint():
    """IPython's display machinery (what a cell's last value goes through) adds it to the output's metadata,
    beside the picture: no data of its own, so the PNG and the text form are what they were."""
    from IPython.core.interactiveshell import InteractiveShell

    from simlab.render.controls import FINGERPRINT_KEY, figure_fingerprint, fingerprint_displayed_figures
    shell = InteractiveShell.instance()
    try:
        fingerprint_displayed_figures()
        fig = _labelled()
        data, metadata = shell.display_formatter.format(fig)
        assert metadata[FINGERPRINT_KEY] == figure_fingerprint(fig)
        assert "text/plain" in data and FINGERPRINT_KEY not in data
    finally:
        InteractiveShell.clear_instance()
