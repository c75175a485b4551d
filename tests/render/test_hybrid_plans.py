"""Lesson 6's plans side by side: every bar is the simulator's (per_gpu, step), cut and labelled where it runs
past the picture."""
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.render.hybrid_plans import draw_plan_memory, draw_time_breakdown  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import MEMORY_COLOR, PART_COLOR  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.advisor import evaluate_plan  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hardware import cluster  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hybrid import Plan  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.model import PRESETS  # noqa: E402 — after matplotlib.use("Agg")

GB = 1e9


def gid(ax, name):
    return [p for p in ax.patches if p.get_gid() == name]


# ---- memory and time of several plans ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def plans():
    """gpt3-175b on 64 A100s: plain DDP and ZeRO-3 (too big), ZeRO-3 + Offload (host bytes), Megatron's way."""
    model, c = PRESETS["gpt3-175b"], cluster(gpus=64)
    return {"DDP": evaluate_plan(model, c, 512, Plan(dp=64)),
            "ZeRO-3": evaluate_plan(model, c, 512, Plan(dp=64, zero=3)),
            "ZeRO-3 + Offload": evaluate_plan(model, c, 512, Plan(dp=64, zero=3, offload=True)),
            "TP 8 PP 8": evaluate_plan(model, c, 512, Plan(tp=8, pp=8, recompute="selective",
                                                           sequence_parallel=True))}


def test_memory_bars_are_per_gpu_bytes(plans):
    misfits = sum(not p["fits"] for p in plans.values())
    assert not plans["DDP"]["fits"] and plans["TP 8 PP 8"]["fits"]  # the premise: both verdicts are drawn
    ax = draw_plan_memory(plans, 80 * GB, title="gpt3-175b").axes[0]
    assert MEMORY_COLOR["params"] == PART_COLOR["params"] and set(MEMORY_COLOR) == set(PART_COLOR) | {"activations"}
    for part in MEMORY_COLOR:
        assert [b.get_height() for b in gid(ax, part)] == pytest.approx(
            [p["bytes_per_gpu"][part] / GB for p in plans.values()])
    tops = [b.get_y() + b.get_height() for b in gid(ax, "activations")]
    assert tops == pytest.approx([p["bytes_per_gpu"]["total"] / GB for p in plans.values()])
    assert len(gid(ax, "no-fit")) == misfits
    names = ax.get_xticklabels()  # "(does not fit)" under a misfit's name, in red
    assert [t.get_text().endswith("\n(does not fit)") for t in names] == [not p["fits"] for p in plans.values()]
    assert [t.get_color() for t in names] == ["black" if p["fits"] else "#d62728" for p in plans.values()]
    assert [b.get_height() for b in gid(ax, "cpu")] == pytest.approx(
        [p["cpu_bytes_per_gpu"] / GB for p in plans.values()])
    assert gid(ax, "cpu")[2].get_hatch() == "//"
    line = next(x for x in ax.lines if x.get_gid() == "gpu_memory")
    assert list(line.get_ydata()) == [80, 80] and line.get_linestyle() == "--"
    assert ax.get_ylim()[1] > 80  # the line is inside the picture, even with a 3,000 GB bar beside it
    assert any(t.get_text().startswith("↑ ") for t in ax.texts)  # that bar is cut, and says how tall


def test_memory_bars_without_offload_or_misfits(plans):
    fitting = {"TP 8 PP 8": plans["TP 8 PP 8"]}
    ax = draw_plan_memory(fitting, 80 * GB).axes[0]
    assert gid(ax, "cpu") == [] and gid(ax, "no-fit") == []
    assert [t.get_text() for t in ax.get_xticklabels()] == ["TP 8 PP 8"]
    assert [t.get_text() for t in ax.texts] == [f"{plans['TP 8 PP 8']['bytes_per_gpu']['total'] / GB:.1f}"]


def test_time_bars_are_the_breakdown(plans):
    ax = draw_time_breakdown(plans, title="time").axes[0]
    rows = list(plans.values())
    parts = [k for k in rows[0]["breakdown"] if any(p["breakdown"][k] > 0 for p in rows)]
    for part in parts:
        assert [b.get_width() for b in gid(ax, part)] == pytest.approx([p["breakdown"][part] for p in rows])
    assert all(gid(ax, k) == [] for k in rows[0]["breakdown"] if k not in parts)
    ends = [b.get_x() + b.get_width() for b in gid(ax, parts[-1])]
    assert ends == pytest.approx([p["step_seconds"] for p in rows])  # the parts add up to the step
    ticks = ax.get_yticklabels()  # each plan's name, then its step time and MFU
    assert [t.get_text().split("\n")[:2] for t in ticks] == [[k, f"{p['step_seconds']:.3g} s   MFU {p['mfu']:.0%}"]
                                                             for k, p in plans.items()]
    assert [t.get_text().endswith("(does not fit)") for t in ticks] == [not p["fits"] for p in rows]
    assert [t.get_color() for t in ticks] == ["black" if p["fits"] else "#d62728" for p in rows]
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {k.replace("_", " ") for k in parts}


def test_time_bars_show_the_bubble_in_ms():
    model, c = PRESETS["megatron-1.7b-2021"], cluster(gpus=8)
    plans = {s: evaluate_plan(model, c, 8, Plan(pp=8, schedule=s)) for s in ("gpipe", "1f1b")}
    ax = draw_time_breakdown(plans).axes[0]
    bubble = [b.get_width() for b in gid(ax, "pp_bubble")]
    unit = ax.get_xlabel()
    scale = 1e3 if "(ms)" in unit else 1.0
    assert bubble == pytest.approx([p["breakdown"]["pp_bubble"] * scale for p in plans.values()])
    assert all(b > 0 for b in bubble) and gid(ax, "pp_bubble")[0].get_hatch() == "//"


def test_time_bars_far_past_the_fastest_are_cut_and_say_so():
    model, c = PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25)
    fast = evaluate_plan(model, c, 1536, Plan(tp=8, pp=16, dp=8, zero=1, sequence_parallel=True))
    slow = evaluate_plan(model, c, 1536, Plan(tp=8, dp=128, zero=3, sequence_parallel=True, recompute="full"))
    assert slow["step_seconds"] > 4 * fast["step_seconds"]
    ax = draw_time_breakdown({"fast": fast, "slow": slow}).axes[0]
    scale = 1.0 if "(s)" in ax.get_xlabel() else 1e3
    assert ax.get_xlim()[1] == pytest.approx(4 * fast["step_seconds"] * scale)
    assert [(t.get_text(), t.get_position()[1]) for t in ax.texts if t.get_gid() == "cut"] == [("→", 1)]
    assert ax.get_yticklabels()[1].get_text().split("\n")[1].startswith(f"{slow['step_seconds'] * scale:.3g} ")


@pytest.mark.usefixtures("english_afterwards")
def test_the_legends_speak_the_learners_language(plans):
    """Lesson 6's legends went through no catalog (params, tp comm … under Chinese titles): now every entry does."""
    from simlab import i18n
    from simlab.render.hybrid_plans import MEMORY_NAMES, TIME_NAMES

    def legend(fig):
        return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    english = legend(draw_plan_memory(plans, 80 * GB)) + legend(draw_time_breakdown(plans))
    assert {"params", "activations", "compute"} <= set(english)
    i18n.set_language("zh")
    chinese = legend(draw_plan_memory(plans, 80 * GB)) + legend(draw_time_breakdown(plans))
    assert {"参数", "激活值", "计算"} <= set(chinese) and not set(english) & set(chinese)
    assert all(i18n._(name) != name for name in list(MEMORY_NAMES.values()) + list(TIME_NAMES.values()))
