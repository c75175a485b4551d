"""Lesson 7's expert-parallel text and figures say what the simulator computed: every number in a table read back
equals the routing's, the plan's or the layout's (and the closed forms where routing is balanced), a dropped
choice is marked where the drop rule put it, the load bars are the loads, the heat map's cells are S, every word
on a figure is at least 10 pt, and the text speaks Chinese under set_language("zh")."""
import math
import re

import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.expert_parallel import (  # noqa: E402 — after matplotlib.use("Agg")
    capacity_factor,
    dispatch_text,
    draw_dispatch,
    draw_load,
    ep_routings,
    layout_text,
    merged,
    routing_text,
    run_text,
)
from simlab.render.picture import figure_png, png_size  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import MIN_FONT, PAPER_GREY, RANK_COLORS  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.expert_parallel import balanced_logits, route  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.expert_parallel_dispatch import balanced_bytes, dispatch_plan  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.expert_parallel_layout import expert_data_parallel  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.mesh import Mesh  # noqa: E402 — after matplotlib.use("Agg")

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test
HAND = np.array([[3., 1., 0.], [2., 0., 1.], [0., 3., 1.], [1., 2., 0.], [4., 0., 0.]])  # 5 tokens, 3 experts


def expert_rows(text: str) -> dict[int, list[str]]:
    """The per-expert table of a routing text: expert → [on rank, demand, capacity, kept, dropped]."""
    return {int(m[1]): m[2].split() for m in re.finditer(r"^e(\d+)\s+(.*)$", text, re.M)}


def token_rows(text: str) -> dict[int, list[tuple[int, float, bool]]]:
    """The per-token table: token → [(expert, weight, kept)] in choice order."""
    rows = {}
    for m in re.finditer(r"^(\d+)\s+(e\d.*)$", text, re.M):
        rows[int(m[1])] = [(int(e), float(w), x == "") for e, w, x in re.findall(r"e(\d+) ([\d.]+)( ✗)?", m[2])]
    return rows


def test_a_hand_worked_routing_top_1_capacity_2():
    """Token maxima 0, 0, 1, 1, 0: expert 0 is claimed three times, keeps tokens 0 and 1 (C = ceil(5/3) = 2),
    and token 4 finds it full — a whole token dropped."""
    r = route(HAND, top_k=1, capacity_factor=1.0)
    text = routing_text(r, show=5)
    assert text.splitlines()[0] == "5 tokens, top-1 of 3 experts: an expert keeps at most 2 of them"
    assert [(t, e, kept) for t, ((e, _w, kept),) in token_rows(text).items()] == [
        (0, 0, True), (1, 0, True), (2, 1, True), (3, 1, True), (4, 0, False)]
    assert expert_rows(text) == {0: ["0", "3", "2", "2", "1"], 1: ["0", "2", "2", "2", "0"], 2: ["0", "0", "2", "0", "0"]}
    assert text.splitlines()[-1] == ("dropped: 1 of 5 choices; tokens with no expert (the residual path only): 1; "
                                     "imbalance max/mean load = 1.50")  # max 2 / mean 4/3


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 24), experts=st.sampled_from([2, 4, 8]), top_k=st.integers(1, 2),
       cf=st.sampled_from([0.0, 0.5, 1.0, 1.25]), ep=st.sampled_from([1, 2]), seed=st.integers(0, 50),
       skew=st.sampled_from([0.0, 2.0]))
def test_every_number_in_the_routing_text_is_the_routings(tokens, experts, top_k, cf, ep, seed, skew):
    routings = ep_routings(tokens, experts, top_k, cf, ep, seed, skew)
    group = merged(routings)
    text = routing_text(routings, show=tokens * ep)
    cap = routings[0].capacity
    for e, (rank, demand, capacity, kept, dropped) in expert_rows(text).items():
        assert (int(rank), int(demand), int(kept), int(dropped)) == (
            e // (experts // ep), group.demand[e], group.load[e], group.demand[e] - group.load[e])
        assert capacity == ("—" if cap is None else str(cap * ep))  # each rank's tokens may fill C places
    for t, choices in token_rows(text).items():
        assert [e for e, _w, _k in choices] == group.experts[t].tolist()
        assert [k for _e, _w, k in choices] == group.kept[t].tolist()  # ✗ exactly where the drop rule dropped
        assert [w for _e, w, _k in choices] == pytest.approx(group.weights[t], abs=0.005)
    assert f"dropped: {group.dropped} of {tokens * ep * top_k} choices" in text


def test_only_the_first_tokens_are_listed_and_the_rest_counted():
    r = route(HAND, top_k=2, capacity_factor=None)
    text = routing_text(r, show=2)
    assert sorted(token_rows(text)) == [0, 1] and "… and 3 more tokens" in text and "no capacity limit" in text
    assert "… and 1 more token\n" in routing_text(r, show=4) and "more token" not in routing_text(r, show=5)


def test_capacity_zero_is_dropless_and_bad_values_are_refused():
    assert capacity_factor(0) is None and capacity_factor(1.25) == 1.25
    for bad, word in ((-1, "capacity=-1"), (float("nan"), "capacity=nan"), ("1", "capacity='1'")):
        with pytest.raises(ValueError, match=re.escape(word)):
            capacity_factor(bad)
    with pytest.raises(ValueError, match="experts=6: must be divisible by ep=4"):
        ep_routings(8, 6, 2, 1.0, 4)
    with pytest.raises(ValueError, match="tokens=5000: tokens × ep × top_k = 80,000 choices to route; at most 65,536"):
        ep_routings(5000, 8, 2, 1.0, 8)
    assert len(ep_routings(4096, 8, 2, 1.0, 8)) == 8  # 65,536 choices: the most allowed


def matrix(text: str, corner: str) -> list[list[int]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(corner + " "))
    return [[int(v) for v in line.split()[1:]] for line in lines[start + 1:] if re.match(r"r\d+\s+\d", line)]


def test_dispatch_text_is_the_plans_send_matrix_and_bytes():
    plan = dispatch_plan(ep_routings(16, 8, 2, 1.0, 4, 0, 1.5), hidden=8)
    text = dispatch_text(plan)
    lines = text.splitlines()
    s_rows = lines[2:2 + plan.ep]
    assert [[int(v) for v in row.split()[1:]] for row in s_rows] == plan.send_counts.tolist()
    table = {m[1]: m[2].replace(",", "").split() for m in re.finditer(r"^(r\d+)\s+e\d+–e\d+\s+(.*)$", text, re.M)}
    s = plan.send_counts
    for i in range(plan.ep):
        rows, dispatch, combine, counts, total = map(int, table[f"r{i}"])
        assert rows == s[:, i].sum()  # what rank i's experts compute: column i of S
        assert dispatch == (s[i].sum() - s[i, i]) * 8 * 4 and combine == (s[:, i].sum() - s[i, i]) * 8 * 4
        assert counts == (plan.ep - 1) * 2 * 8  # E/N int64 counts to each peer
        assert total == counts + 2 * (dispatch + combine)


def test_balanced_routing_sends_the_closed_form():
    plan = dispatch_plan([route(balanced_logits(8, 4, 2), 2, 1.0)] * 4, hidden=8)
    table = re.findall(r"^r\d+\s+e\d+–e\d+\s+\d+\s+([\d,]+)\s+([\d,]+)", dispatch_text(plan), re.M)
    closed = balanced_bytes(8, 2, 4, 8, 4)  # T·k·(N−1)/N rows of h fp32 values
    assert closed == 8 * 2 * 3 // 4 * 8 * 4
    assert table == [(f"{closed:,}", f"{closed:,}")] * 4


@pytest.mark.parametrize("ep, dp", [(2, 2), (4, 1), (1, 4), (2, 4)])
def test_layout_text_is_the_layouts_groups_and_ring_bytes(ep, dp):
    lay = expert_data_parallel(Mesh(ep=ep, dp=dp), experts=8, params_per_expert=100, dense_params=64)
    lines = layout_text(lay).splitlines()
    assert lines[0] == f"8 experts on {ep * dp} ranks: ep = {ep} (experts split), dp = {dp} (replicas)"
    assert lines[1:1 + ep * dp] == [str(m) for m in lay.lines()]
    local = 8 // ep  # the ring all-reduce sends 2(d−1)/d of the buffer
    expert_bytes = 2 * (dp - 1) * local * 100 * 4 // dp
    dense_bytes = 2 * (ep * dp - 1) * 64 * 4 // (ep * dp)
    assert lines[-2].endswith(f"{expert_bytes:,} B per rank") and lines[-1].endswith(f"{dense_bytes:,} B per rank")
    assert str(lay.expert_groups) in lines[-2] and str(lay.dense_groups) in lines[-1]


def test_uneven_ring_chunks_show_every_ranks_bytes():
    lay = expert_data_parallel(Mesh(ep=2, dp=4), experts=8, params_per_expert=100, dense_params=60)
    assert len(set(lay.dense_allreduce_bytes)) > 1  # 60 values in 8 chunks: the ring's chunks differ
    assert layout_text(lay).splitlines()[-1].endswith(f"{lay.dense_allreduce_bytes} B per rank")


RESULT = {"world_size": 4, "backend": "gloo", "ep": 2, "dp": 2, "experts": 4, "top_k": 2, "capacity": 4,
          "max_abs_diff_vs_reference": 2e-7, "max_abs_diff_vs_torch": 0.0, "bytes_sent_per_rank": [10, 12],
          "plan_bytes_sent_per_rank": [10, 12], "routing_matches_simulator": True, "trace_matches_plan": True,
          "dropped_per_rank": [3, 1], "tokens_dropped_per_rank": [0, 1]}


def test_run_text_gives_each_verdict_and_can_fail():
    lines = run_text(RESULT).splitlines()
    assert lines[0] == "real run on 4 processes (gloo): ep = 2, dp = 2, 4 experts, top-2, capacity 4"
    assert lines[1].count("✓") == 2 and lines[2].endswith("planned ✓") and lines[3].count("✓") == 2
    assert lines[4] == "choices dropped per rank [3, 1]; tokens with no expert per rank [0, 1]"
    bad = run_text(RESULT | {"max_abs_diff_vs_torch": None, "bytes_sent_per_rank": [10, 13],
                             "trace_matches_plan": False, "max_abs_diff_vs_reference": 1e-3})
    assert bad.splitlines()[1].count("✗") == 2 and "planned ✗" in bad and "trace as the plan's ✗" in bad


def font_sizes(fig) -> list[float]:
    texts = [t for ax in fig.axes for t in ax.texts + [ax.title, ax.xaxis.label, ax.yaxis.label]
             + ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    texts += [t for legend in fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
              for t in legend.get_texts()]
    return [t.get_fontsize() for t in texts]


@pytest.mark.parametrize("ep, experts, cf", [(1, 4, 1.0), (2, 8, 1.0), (4, 16, 1.25), (8, 32, 0.0)])
def test_load_bars_are_the_loads_and_the_dropped_part_sits_on_top(ep, experts, cf):
    routings = ep_routings(16, experts, 2, cf, ep, 3, 2.0)
    group = merged(routings)
    fig = draw_load(routings)
    ax = fig.axes[0]
    kept = [p for p in ax.patches if p.get_hatch() is None]
    dropped = [p for p in ax.patches if p.get_hatch()]
    assert [round(p.get_height()) for p in kept] == group.load.tolist()
    assert [matplotlib.colors.to_hex(p.get_facecolor()) for p in kept] == [
        RANK_COLORS[e // (experts // ep)] for e in range(experts)]
    assert {round(p.get_x() + p.get_width() / 2): (p.get_y(), p.get_height()) for p in dropped} == {
        e: (group.load[e], group.demand[e] - group.load[e]) for e in range(experts) if group.demand[e] > group.load[e]}
    lines = [line.get_ydata()[0] for line in ax.get_lines()]
    assert lines == ([] if cf == 0 else [routings[0].capacity * ep])
    assert min(font_sizes(fig)) >= MIN_FONT
    width, height = png_size(figure_png(fig))
    assert width / 2 <= 1000 and height / 2 <= 700  # drawn at 2x for HiDPI, shown at half


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_the_heat_map_cells_are_s_and_its_diagonal_is_grey(ep):
    plan = dispatch_plan(ep_routings(16, 8, 2, 1.0, ep, 1, 1.0), hidden=4)
    fig = draw_dispatch(plan)
    ax = fig.axes[0]
    cells = {(round(t.get_position()[1] - 0.5), round(t.get_position()[0] - 0.5)): int(t.get_text()) for t in ax.texts}
    assert cells == {(i, j): plan.send_counts[i, j] for i in range(ep) for j in range(ep)}
    shades = {(round(p.get_y()), round(p.get_x())): matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches}
    assert all((shades[i, j] == PAPER_GREY) == (i == j) for i, j in shades)
    off = [(plan.send_counts[i, j], shades[i, j]) for i in range(ep) for j in range(ep) if i != j]
    darkness = {c: -sum(int(c[k:k + 2], 16) for k in (1, 3, 5)) for _n, c in off}
    assert all(darkness[a] <= darkness[b] for n, a in off for m, b in off if n < m)  # more rows, darker
    assert min(font_sizes(fig)) >= MIN_FONT and not math.isnan(ax.get_xlim()[0])


def test_the_text_speaks_chinese():
    routings = ep_routings(8, 4, 2, 1.0, 2, 0, 1.0)
    english = routing_text(routings) + dispatch_text(dispatch_plan(routings, 4))
    i18n.set_language("zh")
    chinese = routing_text(routings) + dispatch_text(dispatch_plan(routings, 4))
    assert chinese != english and "专家" in chinese and "发送矩阵" in chinese
    assert matrix(chinese, "S") == matrix(english, "S")  # the numbers stay
