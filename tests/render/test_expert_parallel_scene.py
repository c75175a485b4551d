"""Lesson 7's expert-parallel scenes and widgets, without a browser: the explorer's MoE half draws each expert's
load (what the simulator routed) in its EP rank's colour with the drops on top and the capacity line at ep · C;
the all-to-all player has one scene per step of the plan, its arrows the plan's rows; the routing explorer's
knobs redraw it, a refused combination is one line, and its real-run button shows `run_text` of what `run`
returned. Every scene passes `render.chart.validate` and survives JSON."""
import json

import pytest

from simlab import i18n
from simlab.render.chart import Chart, ChartPlayer, validate
from simlab.render.expert_parallel import ep_routings, merged, routing_summary, run_text
from simlab.render.expert_parallel_scene import dispatch_scene, moe_scene, step_caption
from simlab.render.expert_parallel_widgets import dispatch_player, routing_explorer
from simlab.render.style import RANK_COLORS
from simlab.sim.expert_parallel_dispatch import STEPS, dispatch_plan
from simlab.trace import Trace

from .widget_checks import off_grid

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def checked(s: dict) -> dict:
    """The scene as the browser gets it: checked again from plain JSON."""
    again = validate(json.loads(json.dumps(s)))
    assert again == s
    return s


def bars(s: dict) -> dict[int, dict]:
    """expert → {"kept": (height, fill), "dropped": height}, read off the rects' positions."""
    out: dict[int, dict] = {}
    for m in s["marks"]:
        if m["kind"] == "rect":
            e = round((m["x0"] + m["x1"]) / 2)
            if "hatch" in m:
                out.setdefault(e, {})["dropped"] = (m["y0"], m["y1"] - m["y0"])
            else:
                out.setdefault(e, {})["kept"] = (m["y1"] - m["y0"], m["fill"])
    return out


@pytest.mark.parametrize("tokens, experts, top_k, cf, ep, skew", [
    (16, 8, 2, 1.0, 2, 1.0), (8, 4, 1, 1.25, 1, 0.0), (32, 16, 2, 0.0, 4, 2.0), (12, 32, 4, 1.0, 8, 3.0)])
def test_moe_scene_draws_the_routed_load_the_drops_and_the_capacity(tokens, experts, top_k, cf, ep, skew):
    s = checked(moe_scene(tokens, experts, top_k, cf, ep, 7, skew=skew))
    routings = ep_routings(tokens, experts, top_k, cf, ep, 7, skew)
    group = merged(routings)
    drawn = bars(s)
    assert sorted(drawn) == list(range(experts))
    for e, parts in drawn.items():
        assert parts["kept"] == (group.load[e], RANK_COLORS[e // (experts // ep)])
        dropped = group.demand[e] - group.load[e]
        assert parts.get("dropped") == ((group.load[e], dropped) if dropped else None)
    caps = [m["y"][0] for m in s["marks"] if m["kind"] == "line"]
    assert caps == ([] if cf == 0 else [routings[0].capacity * ep])
    assert routing_summary(group) in s["alt"].splitlines()
    assert s["legend"][:ep] == [[f"experts on rank {r}", RANK_COLORS[r]] for r in range(ep)]
    plan = dispatch_plan(routings, hidden=1)
    assert f"rows each rank's experts compute: {plan.received_rows}" in s["alt"]


def test_moe_scene_refuses_bad_knobs_in_one_line():
    for args, word in (((8, 6, 2, 1.0, 4, 0), "experts=6: must be divisible by ep=4"),
                       ((8, 4, 5, 1.0, 1, 0), "top_k=5"), ((8, 4, 2, -1.0, 1, 0), "capacity=-1.0"),
                       ((0, 4, 2, 1.0, 1, 0), "tokens=0"), ((8, 4, 2, float("inf"), 1, 0), "capacity=inf")):
        with pytest.raises(ValueError, match=word) as err:
            moe_scene(*args)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_each_step_of_the_all_to_all_is_a_scene_of_the_plan(ep):
    plan = dispatch_plan(ep_routings(16, 8, 2, 1.0, ep, 2, 1.5), hidden=8)
    for k, step in enumerate(plan.steps()):
        s = checked(dispatch_scene(plan, k))
        assert s["alt"] == step_caption(plan, k) and s["title"].endswith(step.name)
        arrows = [m for m in s["marks"] if m["kind"] == "arrow"]
        if step.rows is None:  # the rank's own work: a bar as long as its share of the busiest rank's
            assert arrows == []
            work = [m for m in s["marks"] if m["kind"] == "rect" and m["y1"] - m["y0"] == pytest.approx(0.1)]
            lengths = [m["x1"] - m["x0"] for m in work]
            most = max(max(step.work), 1)
            assert lengths == pytest.approx([0.68 * w / most for w in step.work])
        else:  # one arrow per (sender, receiver) with rows, thicker for more, dashed when it stays
            pairs = [(a, b) for a in range(ep) for b in range(ep) if step.rows[a, b]]
            assert len(arrows) == len(pairs)
            assert [m["dash"] for m in arrows] == [a == b for a, b in pairs]
            widths = {int(step.rows[a, b]): m["width"] for (a, b), m in zip(pairs, arrows)}
            assert all(widths[n] < widths[m] for n in widths for m in widths if n < m)
            labels = sorted(int(m["text"]) for m in s["marks"] if m["kind"] == "text" and m["text"].isdigit())
            assert labels == (sorted(int(step.rows[a, b]) for a, b in pairs) if ep <= 4 else [])
    with pytest.raises(ValueError, match="step=8: must be an integer from 0 to 7"):
        dispatch_scene(plan, 8)


def test_step_captions_say_the_steps_words_and_bytes():
    plan = dispatch_plan(ep_routings(16, 8, 2, 1.0, 4, 0, 1.0), hidden=8)
    for k, step in enumerate(plan.steps()):
        head, tail = step_caption(plan, k).splitlines()
        assert head == f"step {k}/7 ({step.phase}) {step.name}: {step.text()}"
        assert tail == (f"work per rank: {list(step.work)}" if step.rows is None else
                        f"bytes sent per rank: {list(step.bytes_sent)}")
    i18n.set_language("zh")
    assert "分发" in step_caption(plan, 2) and "每个 rank 发送的字节数" in step_caption(plan, 2)


def test_the_player_steps_through_every_step_of_the_plan():
    player = dispatch_player(tokens=8, experts=4, top_k=2, ep=2, seed=1)
    assert isinstance(player, ChartPlayer) and player.count == len(STEPS) == 8
    assert [f["alt"] for f in player.frames] == [step_caption(player.plan, k) for k in range(8)]
    assert len(player.captions) == 8 and repr(player) == "▶ run this cell to get the all-to-all player"
    player.value = 2
    assert player.alt == step_caption(player.plan, 2)


def test_the_routing_explorer_redraws_from_its_knobs():
    panel = routing_explorer()
    assert off_grid(panel) == [] and panel.run_control is None and isinstance(panel.chart, Chart)
    assert repr(panel).startswith("▶ run this cell to get the routing explorer")
    before = panel.chart.scene
    panel.knobs["skew"].value = 3.0
    assert panel.chart.scene == moe_scene(16, 8, 2, 1.0, 2, 0, skew=3.0) != before
    panel.knobs["capacity"].value = 0.0  # dropless: no line, nothing dropped
    assert not [m for m in panel.chart.scene["marks"] if m["kind"] == "line"]
    assert "dropped: 0 of" in panel.readout.value
    panel.knobs["ep"].value, panel.knobs["top_k"].value = 8, 4
    assert panel.chart.scene == moe_scene(16, 8, 4, 0.0, 8, 0, skew=3.0)


def test_a_refused_combination_is_one_line_and_the_picture_stays():
    panel = routing_explorer(experts=12, ep=2)
    shown = panel.chart.scene
    panel.knobs["ep"].value = 8  # 12 experts over 8 ranks
    assert "✗ experts=12: must be divisible by ep=8" in panel.readout.value and panel.chart.scene == shown
    with pytest.raises(ValueError, match="skew=0.7: must be one of"):
        routing_explorer(skew=0.7)


RESULT = {"world_size": 2, "backend": "gloo", "ep": 2, "dp": 1, "experts": 8, "top_k": 1, "capacity": None,
          "max_abs_diff_vs_reference": 1e-7, "max_abs_diff_vs_torch": 0.0, "bytes_sent_per_rank": [5, 5],
          "plan_bytes_sent_per_rank": [5, 5], "routing_matches_simulator": True, "trace_matches_plan": True,
          "dropped_per_rank": [0, 0], "tokens_dropped_per_rank": [0, 0], "trace": Trace()}


def test_the_real_run_button_runs_the_shown_knobs_and_shows_run_text():
    calls = []

    def run(**kwargs):
        calls.append(kwargs)
        return RESULT

    panel = routing_explorer(run=run)
    panel.knobs["top_k"].value, panel.knobs["capacity"].value = 1, 0.0
    assert panel.run_control.run_now() is RESULT
    assert calls == [{"world_size": 2, "experts": 8, "top_k": 1, "capacity_factor": None, "tokens": 16}]
    assert "run on 2 processes" in panel.run_control.readout.value
    assert run_text(RESULT).splitlines()[1].replace("'", "&#x27;") in panel.run_control.readout.value
    panel.knobs["skew"].value = 0.0  # another configuration: the old result is cleared
    assert panel.run_control.readout.value == ""
