"""Lesson 6's pictures: every box, line and bar is the simulator's (Mesh groups, per_gpu, step, search)."""
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from simlab.sim.advisor import evaluate_plan, family, search  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hardware import cluster  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hybrid import Plan  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.mesh import Mesh  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.model import PRESETS  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.hybrid import (  # noqa: E402 — after matplotlib.use("Agg")
    KINDS, MEMORY_COLOR, TEXT_WIDTH, draw_mesh, draw_plan_memory,
    draw_time_breakdown, mesh_text)
from simlab.render.hybrid_advisor import advisor_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.advisor_explain import tie_line  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.mpl import figure_png  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.zero import PART_COLOR  # noqa: E402 — after matplotlib.use("Agg")

GB = 1e9
# (pp, dp, tp), GPUs per node: a node split by TP and DP, pure DP, the 64-GPU 3-D grid, one GPU, 64 one-GPU
# nodes, TP across nodes, a world smaller than its node
MESHES = [((2, 2, 2), 4), ((1, 8, 1), 8), ((4, 2, 8), 8), ((1, 1, 1), 8), ((1, 64, 1), 1), ((1, 1, 4), 2),
          ((2, 2, 1), 8), ((8, 1, 1), 4)]


def gid(ax, name):
    return [p for p in ax.patches if p.get_gid() == name]


# ---- mesh_text --------------------------------------------------------------------------------------------

def test_mesh_text_2x2x2_on_4_gpu_nodes():
    text = mesh_text(Mesh(pp=2, dp=2, tp=2), gpus_per_node=4)
    assert text.splitlines()[:5] == Mesh(pp=2, dp=2, tp=2).to_text().splitlines()  # the simulator's grid
    assert text.splitlines()[5:] == [
        "2 nodes of 4 GPUs: node 0 = ranks 0-3, node 1 = ranks 4-7",
        "tp groups (NVLink, inside a node): [0 1] [2 3] [4 5] [6 7]",
        "dp groups (NVLink, inside a node): [0 2] [1 3] [4 6] [5 7]",
        "pp groups (network, across nodes): [0 4] [1 5] [2 6] [3 7]"]


def test_mesh_text_size_one_kinds_and_a_partial_node():
    lines = mesh_text(Mesh(pp=1, dp=2, tp=1), gpus_per_node=8, intra="PCIe").splitlines()[4:]
    assert lines == ["1 node of 8 GPUs (2 used): node 0 = ranks 0-1",
                     "tp groups: size 1, no tp communication",
                     "dp groups (PCIe, inside a node): [0 1]",
                     "pp groups: size 1, no pp communication"]


def test_mesh_text_tp_across_nodes_and_long_groups():
    assert "tp groups (network, across nodes): [0 1 2 3]" in mesh_text(Mesh(tp=4), gpus_per_node=2)
    lines = mesh_text(Mesh(dp=64), gpus_per_node=8).splitlines()
    assert "8 nodes of 8 GPUs: node 0 = ranks 0-7, node 1 = ranks 8-15, …, node 7 = ranks 56-63" in lines
    assert "dp groups (network, across nodes): [0 1 2 … 63]" in lines
    assert "1 node of 1 GPU: node 0 = rank 0" in mesh_text(Mesh(), gpus_per_node=1)


@pytest.mark.parametrize("shape,per_node", MESHES)
def test_mesh_text_lists_every_group_and_its_link(shape, per_node):
    mesh = Mesh(**dict(zip(("pp", "dp", "tp"), shape)))
    text = mesh_text(mesh, per_node)
    ours = text.splitlines()[len(mesh.to_text().splitlines()):]
    assert all(len(line) <= TEXT_WIDTH for line in ours)
    assert text == mesh_text(mesh, per_node)  # deterministic
    for kind in KINDS:
        if getattr(mesh, kind) == 1:
            assert f"{kind} groups: size 1, no {kind} communication" in ours
            continue
        words = {"intra-node": "NVLink, inside a node", "inter-node": "network, across nodes"}
        assert f"{kind} groups ({words[mesh.link(kind, per_node)]}):" in text
        for g in mesh.groups(kind):
            shown = g if len(g) <= 8 else g[:3]
            assert "[" + " ".join(map(str, shown)) in text


# ---- draw_mesh --------------------------------------------------------------------------------------------

def tp_runs(mesh, per_node):
    """Pieces of TP groups that sit on one node: one outline each."""
    return sum(len({r // per_node for r in g}) for g in mesh.groups("tp")) if mesh.tp > 1 else 0


@pytest.mark.parametrize("shape,per_node", MESHES)
def test_draw_mesh_has_a_box_per_rank_and_a_mark_per_group(shape, per_node):
    mesh = Mesh(**dict(zip(("pp", "dp", "tp"), shape)))
    ax = draw_mesh(mesh, per_node).axes[0]
    slots = min(per_node, mesh.world_size)
    assert len(gid(ax, "rank")) == mesh.world_size
    assert len(gid(ax, "node")) == math.ceil(mesh.world_size / slots)
    assert len(gid(ax, "tp")) == tp_runs(mesh, per_node)
    for kind in ("dp", "pp"):  # a line per hop between consecutive members
        assert len(gid(ax, kind)) == len(mesh.groups(kind)) * (getattr(mesh, kind) - 1)
    texts = {t.get_text() for t in ax.texts}
    for r in range(mesh.world_size):
        c = mesh.coords(r)
        assert f"r{r}" in texts and f"p{c.pp} d{c.dp} t{c.tp}" in texts
    legend = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
    assert len(legend) == sum(getattr(mesh, k) > 1 for k in KINDS)
    for kind in (k for k in KINDS if getattr(mesh, k) > 1):
        where = "inside a node" if mesh.link(kind, per_node) == "intra-node" else "across nodes"
        assert any(line.startswith(f"{kind} group") and where in line for line in legend)


def test_draw_mesh_one_kind_and_a_png():
    mesh = Mesh(pp=2, dp=2, tp=2)
    fig = draw_mesh(mesh, 4, kinds=("pp",), title="pp only")
    ax = fig.axes[0]
    assert gid(ax, "tp") == [] and gid(ax, "dp") == [] and len(gid(ax, "pp")) == 4
    assert ax.get_title() == "pp only"
    assert figure_png(fig)[:4] == b"\x89PNG"


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
    assert [t.get_text() for t in ax.texts].count("does not fit") == misfits
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
    assert "does not fit" not in [t.get_text() for t in ax.texts]
    assert [t.get_text() for t in ax.texts] == [f"{plans['TP 8 PP 8']['bytes_per_gpu']['total'] / GB:.1f} GB"]


def test_time_bars_are_the_breakdown(plans):
    ax = draw_time_breakdown(plans, title="time").axes[0]
    rows = list(plans.values())
    parts = [k for k in rows[0]["breakdown"] if any(p["breakdown"][k] > 0 for p in rows)]
    for part in parts:
        assert [b.get_width() for b in gid(ax, part)] == pytest.approx([p["breakdown"][part] for p in rows])
    assert all(gid(ax, k) == [] for k in rows[0]["breakdown"] if k not in parts)
    ends = [b.get_x() + b.get_width() for b in gid(ax, parts[-1])]
    assert ends == pytest.approx([p["step_seconds"] for p in rows])  # the parts add up to the step
    totals = [t.get_text() for t in ax.texts if t.get_gid() == "total"]
    assert totals == [f"{p['step_seconds']:.3g} s   MFU {p['mfu']:.0%}" for p in rows]
    ticks = ax.get_yticklabels()
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


# ---- advisor_text -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def found():
    return search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), global_batch=64)


def test_advisor_text_best_plan_first(found):
    text = advisor_text(found, top=3)
    lines = text.splitlines()
    assert lines[0] == f"{found['plans']} plans evaluated, {sum(found['rejected'].values())} rejected; " \
                       "the 3 fastest that fit:"
    assert lines[1].split() == ["#", "tp", "pp", "dp", "b", "schedule×v", "stages", "zero", "offload", "SP",
                                "recompute", "GB/GPU", "s/step", "MFU"]
    best = found["best"]
    assert best == found["candidates"][0]
    c, yes = best["config"], {True: "yes", False: "no"}
    schedule = c["schedule"] + (f"×{c['chunks']}" if c["chunks"] > 1 else "")
    assert lines[2].split() == ["1", *(str(c[k]) for k in ("tp", "pp", "dp", "microbatch")), schedule, "—",
                                str(c["zero"]), yes[c["offload"]], yes[c["sequence_parallel"]], c["recompute"],
                                f"{best['bytes_per_gpu']['total'] / GB:.2f}", f"{best['step_seconds']:.4g}",
                                f"{best['mfu']:.1%}"]
    assert (c["tp"], c["pp"], c["dp"]) == (1, 1, 8)  # 1.7B fits on one GPU: data parallel across the node
    assert [line.split()[0] for line in lines[2:5]] == ["1", "2", "3"] and lines[5] == "why:"
    assert lines[6:6 + len(found["explanation"])] == [f"  {e}" for e in found["explanation"]]
    assert lines[6].startswith(f"  best: {family(c)}")
    assert lines[6 + len(found["explanation"])] == f"  {tie_line(found['ties'])}"  # 1.7B: DDP and ZeRO tie
    assert ("notes:" in lines) == bool(found["notes"]) and ("rejected:" in lines) == bool(found["rejected"])
    assert text == advisor_text(found, top=3)


def test_advisor_text_marks_hsdp_and_lighter_end_stages():
    found = search(PRESETS["gpt3-175b"], cluster(gpus=256), 512, shard=4, pp=8, schedule="1f1b")
    rows = [line.split() for line in advisor_text(found, top=10).splitlines()[2:12]]
    for row, plan in zip(rows, found["candidates"]):
        c = plan["config"]
        assert row[6] == ("ends-1" if c["stage_layers"] else "even")
        assert row[7] == str(c["zero"]) + (f"/{c['shard']}" if c["shard"] else "")


def test_advisor_text_notes_schedules_and_nothing_fits():
    big = search(PRESETS["gpt3-175b"], cluster(gpus=1024), global_batch=1536)  # many nodes: FSDP ties
    text = advisor_text(big)
    assert "notes:" in text and big["notes"][0] in text
    best = big["best"]["config"]
    schedule = best["schedule"] + (f"×{best['chunks']}" if best["chunks"] > 1 else "")
    assert best["pp"] > 1 and text.splitlines()[2].split()[5] == schedule  # 175B needs a pipeline
    none = search(PRESETS["gpt3-175b"], cluster(gpus=8), global_batch=8)
    lines = advisor_text(none).splitlines()
    assert lines[0] == f"{none['plans']} plans evaluated, {none['plans']} rejected: no plan fits"
    assert lines[1] == "why:" and lines[2].startswith("  nothing fits")


def test_advisor_text_lists_the_rejections():
    found = search(PRESETS["megatron-18.4b-2021"], cluster(gpus=8), 64)
    lines = advisor_text(found, top=3).splitlines()
    rejected = lines[lines.index("rejected:") + 1:]
    reasons = list(found["rejected"].items())
    assert rejected[:8] == [f"  {n:>6}  {reason}" for reason, n in reasons[:8]]
    assert rejected[8:] == ([f"  {sum(n for _, n in reasons[8:]):>6}  … for {len(reasons) - 8} more reasons"]
                            if len(reasons) > 8 else [])


def test_advisor_text_sums_the_rarer_rejections():
    many = search(PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25), global_batch=1536)
    reasons = list(many["rejected"].items())
    assert len(reasons) > 3
    lines = advisor_text(many, top=1, max_reasons=3).splitlines()
    rejected = lines[lines.index("rejected:") + 1:]
    assert rejected[:3] == [f"  {n:>6}  {reason}" for reason, n in reasons[:3]]
    assert rejected[3:] == [f"  {sum(n for _, n in reasons[3:]):>6}  … for {len(reasons) - 3} more reasons"]


def test_time_bars_far_past_the_fastest_are_cut_and_say_so():
    model, c = PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25)
    fast = evaluate_plan(model, c, 1536, Plan(tp=8, pp=16, dp=8, zero=1, sequence_parallel=True))
    slow = evaluate_plan(model, c, 1536, Plan(tp=8, dp=128, zero=3, sequence_parallel=True, recompute="full"))
    assert slow["step_seconds"] > 4 * fast["step_seconds"]
    ax = draw_time_breakdown({"fast": fast, "slow": slow}).axes[0]
    scale = 1.0 if "(s)" in ax.get_xlabel() else 1e3
    assert ax.get_xlim()[1] == pytest.approx(4 * fast["step_seconds"] * scale * 1.3)
    totals = [t.get_text() for t in ax.texts if t.get_gid() == "total"]
    assert not totals[0].startswith("→") and totals[1].startswith("→ ")
