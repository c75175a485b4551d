"""Lesson 6's plans side by side as scenes for the browser: every bar is the simulator's (per_gpu, step), cut and
labelled where it runs past the picture, exactly where `draw_plan_memory` / `draw_time_breakdown` cut it; and the
strategy explorer's three pictures for a scenario: the winner beside its rivals, and its pipeline."""
import json

import pytest

from simlab.render.hybrid_plans import NO_FIT, memory_layout, time_layout
from simlab.render.hybrid_scene import (
    GANTT_ACTIONS,
    SHOWN,
    bar_name,
    compared_plans,
    pipeline_window,
    plan_memory_scene,
    strategy_scenes,
    time_breakdown_scene,
)
from simlab.render.style import CPU_COLOR, INK, MEMORY_COLOR, TIME_COLOR
from simlab.sim.advisor import evaluate_plan, family, search
from simlab.sim.hardware import cluster
from simlab.sim.hybrid import Plan
from simlab.sim.hybrid_scenarios import BY_KEY, Scenario
from simlab.sim.model import PRESETS

GB = 1e9


def rects(s: dict, fill: str | None = None) -> list[dict]:
    return [m for m in s["marks"] if m["kind"] == "rect" and (fill is None or m["fill"] == fill)]


def words(s: dict) -> list[str]:
    return [m["text"] for m in s["marks"] if m["kind"] == "text"]


@pytest.fixture(scope="module")
def plans():
    """gpt3-175b on 64 A100s: plain DDP and ZeRO-3 (too big), ZeRO-3 + Offload (host bytes), Megatron's way."""
    model, c = PRESETS["gpt3-175b"], cluster(gpus=64)
    return {"DDP": evaluate_plan(model, c, 512, Plan(dp=64)),
            "ZeRO-3": evaluate_plan(model, c, 512, Plan(dp=64, zero=3)),
            "ZeRO-3 + Offload": evaluate_plan(model, c, 512, Plan(dp=64, zero=3, offload=True)),
            "TP 8 PP 8": evaluate_plan(model, c, 512, Plan(tp=8, pp=8, recompute="selective",
                                                           sequence_parallel=True))}


# ---- memory per GPU ---------------------------------------------------------------------------------------

def test_memory_bars_are_per_gpu_bytes_cut_where_the_figure_cuts_them(plans):
    s = plan_memory_scene(plans, 80 * GB, title="gpt3-175b")
    top = memory_layout(plans, 80 * GB)[-1]
    assert s["y"]["max"] == top and 80 < top < max(p["bytes_per_gpu"]["total"] for p in plans.values()) / GB
    bottoms = [0.0] * len(plans)
    for part, color in MEMORY_COLOR.items():  # stacked from the floor, each part the simulator's bytes, cut at top
        bars = rects(s, color)
        sizes = [p["bytes_per_gpu"][part] / GB for p in plans.values()]
        assert [(b["y0"], b["y1"]) for b in bars] == [
            (pytest.approx(min(lo, top)), pytest.approx(min(lo + h, top))) for lo, h in zip(bottoms, sizes)]
        bottoms = [lo + h for lo, h in zip(bottoms, sizes)]
    assert bottoms == pytest.approx([p["bytes_per_gpu"]["total"] / GB for p in plans.values()])
    totals = [w for w in words(s) if w.endswith(" GB")]
    assert totals == [("↑ " if t / GB > top else "") + f"{t / GB:.1f} GB"
                      for t in (p["bytes_per_gpu"]["total"] for p in plans.values())]
    assert any(t.startswith("↑ ") for t in totals)  # the 3,000 GB bar is cut, and says how tall


def test_a_plan_that_does_not_fit_is_outlined_and_named_in_red(plans):
    s = plan_memory_scene(plans, 80 * GB)
    misfits = sum(not p["fits"] for p in plans.values())
    assert misfits and len(rects(s, "none")) == misfits and {b["stroke"] for b in rects(s, "none")} == {NO_FIT}
    assert words(s).count("does not fit") == misfits
    fitting = plan_memory_scene({"TP 8 PP 8": plans["TP 8 PP 8"]}, 80 * GB)
    assert rects(fitting, "none") == [] and "does not fit" not in words(fitting)


def test_host_bytes_are_a_hatched_bar_and_the_gpu_a_dashed_line(plans):
    s = plan_memory_scene(plans, 80 * GB)
    host = [b for b in rects(s) if b.get("hatch") == CPU_COLOR]
    assert [b["y1"] - b["y0"] for b in host] == pytest.approx([p["cpu_bytes_per_gpu"] / GB for p in plans.values()])
    (gpu,) = [m for m in s["marks"] if m["kind"] == "line"]
    assert gpu["y"] == [80, 80] and gpu["dash"] and gpu["stroke"] == INK
    assert s["legend"][-1] == ["usable GPU memory (80 GB)", INK, "dash"]
    assert [t[1].replace("\n", "") for t in s["x"]["ticks"]] == list(plans)  # names, in lines
    assert "DDP: " in s["alt"] and "(does not fit)" in s["alt"] and json.loads(json.dumps(s)) == s
    assert not [b for b in rects(plan_memory_scene({"DDP": plans["DDP"]}, 80 * GB)) if "hatch" in b]


@pytest.mark.parametrize("name, shown", [("best: TP+PP+DP+ZeRO-1", "best: \nTP+PP+DP+\nZeRO-1"), ("DDP", "DDP"),
                                         ("TP+PP+DP+ZeRO-3", "TP+PP+DP+\nZeRO-3"), ("最佳：TP+PP+DP", "最佳：\nTP+PP+DP")])
def test_a_plans_name_is_broken_into_short_lines_under_its_bar(name, shown):
    assert bar_name(name) == shown and bar_name(name).replace("\n", "") == name


# ---- where a step goes ------------------------------------------------------------------------------------

def test_time_bars_are_the_breakdown_and_add_up_to_the_step(plans):
    s = time_breakdown_scene(plans, title="time")
    parts, _end, scale, unit = time_layout(plans)
    for part in parts:
        bars = rects(s, TIME_COLOR.get(part))
        shown = [p for p in plans.values() if p["breakdown"].get(part, 0) > 0]
        assert [b["x1"] - b["x0"] for b in bars] == pytest.approx([p["breakdown"][part] * scale for p in shown])
    ends = [max(b["x1"] for b in rects(s) if round((b["y0"] + b["y1"]) / 2) == i) for i in range(len(plans))]
    assert ends == pytest.approx([p["step_seconds"] * scale for p in plans.values()])  # the parts add up
    assert [w for w in words(s)] == [f"{p['step_seconds'] * scale:.3g} {unit}   MFU {p['mfu']:.0%}"
                                     for p in plans.values()]
    assert [t[1].endswith("(does not fit)") for t in s["y"]["ticks"]] == [not p["fits"] for p in plans.values()]
    assert s["y"]["invert"] and [e[0] for e in s["legend"]] == [k.replace("_", " ") for k in parts]


def test_the_bubble_is_hatched_in_ms():
    model, c = PRESETS["megatron-1.7b-2021"], cluster(gpus=8)
    plans = {s: evaluate_plan(model, c, 8, Plan(pp=8, schedule=s)) for s in ("gpipe", "1f1b")}
    s = time_breakdown_scene(plans)
    bubble = [b for b in rects(s) if b.get("hatch") == TIME_COLOR["pp_bubble"]]
    scale = 1e3 if "(ms)" in s["x"]["label"] else 1.0
    assert [b["x1"] - b["x0"] for b in bubble] == pytest.approx([p["breakdown"]["pp_bubble"] * scale
                                                                 for p in plans.values()])


def test_time_bars_far_past_the_fastest_are_cut_and_say_so():
    model, c = PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25)
    fast = evaluate_plan(model, c, 1536, Plan(tp=8, pp=16, dp=8, zero=1, sequence_parallel=True))
    slow = evaluate_plan(model, c, 1536, Plan(tp=8, dp=128, zero=3, sequence_parallel=True, recompute="full"))
    assert slow["step_seconds"] > 4 * fast["step_seconds"]
    s = time_breakdown_scene({"fast": fast, "slow": slow})
    scale = 1.0 if "(s)" in s["x"]["label"] else 1e3
    assert s["x"]["max"] == pytest.approx(4 * fast["step_seconds"] * scale * 1.3)
    assert max(b["x1"] for b in rects(s)) <= s["x"]["max"]  # cut at the edge, as the figure's axes clip
    totals = words(s)
    assert not totals[0].startswith("→") and totals[1].startswith("→ ")


# ---- the strategy explorer's pictures -----------------------------------------------------------------------

def test_a_scenarios_winner_beside_its_rivals_and_its_pipeline():
    q = BY_KEY["nodes-slow"]
    c = q.cluster()
    result = search(q.model, c, q.global_batch, top=5)
    scenes = strategy_scenes(q, c, result)
    best = family(result["best"]["config"])
    labels = [f"best: {best}", *q.rivals][:SHOWN]
    assert [t[1].replace("\n", "") for t in scenes["memory"]["x"]["ticks"]] == labels == list(
        compared_plans(q, c, result))
    assert [t[1].split("\n")[0] for t in scenes["time"]["y"]["ticks"]] == labels
    gantt = scenes["gantt"]
    assert gantt["title"].startswith("the best plan's pipeline: 1f1b, p=16") and scenes["note"] == ""
    trace, until, _title = pipeline_window(q, c, Plan(**result["best"]["config"]))
    assert f"first {GANTT_ACTIONS} of {len(trace)}" in gantt["title"]  # a window on 16 × 192 × 2 actions
    assert len(rects(gantt)) == sum(e.start < until for e in trace) <= GANTT_ACTIONS  # what started before it
    assert len(gantt["y"]["ticks"]) == 16


def test_no_pipeline_and_nothing_fits_are_said_instead_of_a_gantt_chart():
    q = BY_KEY["node-fits"]
    scenes = strategy_scenes(q, q.cluster(), search(q.model, q.cluster(), q.global_batch, top=5))
    assert scenes["gantt"] is None and scenes["note"] == "no pipeline in the best plan (pp = 1)"
    big = Scenario("custom", "", "", "", PRESETS["megatron-1t"], "a100-80gb", 8, 8, {})
    nothing = strategy_scenes(big, big.cluster(), search(big.model, big.cluster(), 8, top=5))
    assert nothing["gantt"] is None and nothing["note"] == "nothing fits"
    assert "does not fit" in words(nothing["memory"])  # the rivals' bars, all red
