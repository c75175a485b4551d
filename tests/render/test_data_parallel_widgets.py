"""Lesson 2's explorer: knobs that start exactly on the lesson's values, readable readouts, no false
winner, and a run button that really runs the shown configuration and draws it over the simulation."""
import json
import pathlib
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.parity.data_parallel import run_dp_and_ddp  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.controls import Panel  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.data_parallel import BANDWIDTH_GBPS, BUCKET_CAP_MB, MODEL_MPARAMS, dp_ddp_explorer, explorer_frame  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import fmt  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.data_parallel import compare, workload_from_layers  # noqa: E402 — after matplotlib.use("Agg")

NOTEBOOK = pathlib.Path(__file__).parents[2] / "notebooks/02_data_parallel.ipynb"


def test_every_knob_starts_on_its_grid_at_the_lessons_default_scene():
    panel = dp_ddp_explorer()
    assert isinstance(panel, Panel) and repr(panel) == "▶ run this cell to get the DP vs DDP explorer"
    knobs = panel.knobs
    for name, grid in (("model_mparams", MODEL_MPARAMS), ("bucket_cap_mb", BUCKET_CAP_MB),
                       ("bandwidth_gbps", BANDWIDTH_GBPS)):
        slider = knobs[name]
        # a SelectionSlider cannot leave its options: the browser shows exactly this value
        assert slider.value in grid and slider.value == [v for _, v in slider.options][slider.index]
    assert knobs["world_size"].min <= knobs["world_size"].value <= knobs["world_size"].max
    scene = workload_from_layers()  # the lesson's default scene, printed in its first tables
    assert knobs["world_size"].value == scene.world_size
    assert knobs["bucket_cap_mb"].value == scene.bucket_cap_mb
    assert knobs["bandwidth_gbps"].value * 1e9 == scene.bandwidth
    assert [label for label, v in knobs["model_mparams"].options if v == knobs["model_mparams"].value] == ["14.7 M"]
    # the explorer shows the very step times the lesson printed, and its text says so
    c = compare(scene)
    assert fmt(c["dp_step_seconds"]) in panel.summary.value and fmt(c["ddp_step_seconds"]) in panel.summary.value
    prose = " ".join("".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"])
    assert f"DP {fmt(c['dp_step_seconds'])}, DDP {fmt(c['ddp_step_seconds'])}" in " ".join(prose.split())


def test_a_start_off_the_grid_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^model_mparams=14.7: must be one of"):
        dp_ddp_explorer(model_mparams=14.7)  # the browser would have moved it to its grid


def test_readout_is_a_table_that_does_not_wrap_and_a_tie_is_a_tie():
    panel = dp_ddp_explorer()
    html = panel.summary.value
    assert html.startswith("<table") and "white-space:nowrap" in html
    assert "_" not in re.sub(r"<[^>]+>", "", html)  # no raw key names such as ddp_hidden_seconds
    panel.knobs["world_size"].value = 1  # one device: nothing to exchange, equal steps
    assert "faster: tie" in panel.summary.value and "faster: DP" not in panel.summary.value
    assert "faster: DDP" in explorer_frame(4, MODEL_MPARAMS[4], 25.0, 10.0)[2]


def test_moving_a_knob_redraws_the_picture_and_the_simulated_trace_link():
    panel = dp_ddp_explorer()
    before, link = panel.picture.value, panel.sim_link.children[0].value
    assert before and panel.picture.layout.display is None  # shown, at its natural width
    assert "ddp_simulated.json" in link and "ui.perfetto.dev" in link
    panel.knobs["bucket_cap_mb"].value = 1000.0
    assert panel.picture.value != before and panel.sim_link.children[0].value != link  # one bucket now


def test_run_button_runs_the_shown_configuration_for_real_and_draws_it():
    calls = []

    def run(world_size, bucket_cap_mb, model_bytes):
        calls.append((world_size, bucket_cap_mb, model_bytes))
        return run_dp_and_ddp(world_size, bucket_cap_mb, model_bytes, steps=2)

    panel = dp_ddp_explorer(run=run)
    panel.knobs["world_size"].value = 2
    control = panel.run_control
    assert control.image.layout.display == "none"  # nothing drawn before a run
    result = control.run_now()
    assert control.error is None and calls == [(2, 25.0, workload_from_layers().model_bytes)]
    assert control.image.value and control.image.layout.display is None  # the sim-vs-real picture
    ddp = result["ddp"]
    text = control.readout.value
    assert f"{ddp['bytes_sent_per_rank'][0]:,}" in text and str(ddp["buckets"]) in text  # the real numbers
    assert "the simulator builds the same" in text and "parity:" in text and "measured" in text
    assert ddp["max_abs_diff_vs_reference"] <= 1e-5 and ddp["max_abs_diff_vs_torch"] <= 1e-5
    assert any("ddp_real_2ranks.json" in getattr(w, "value", "") for w in control.extra.children)
    panel.knobs["world_size"].value = 8  # more than this machine runs: one line, no traceback
    assert control.run_now() is None
    assert "real run failed: ValueError: world_size=8" in control.readout.value
    assert "Traceback" not in control.readout.value
