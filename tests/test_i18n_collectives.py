"""Lesson 1 speaks the language it is told: its tables, pictures, widgets and graders print Chinese after
`set_language("zh")`, with the same numbers as in English, and English stays exactly what it was.

No process is started here: the graders get a run's result built from the simulator (what the real run's
counters equal, as tests/grading/test_collectives_predict.py checks on real processes)."""
import pytest

from simlab import i18n
from simlab.grading.collectives import check_bytes_prediction, check_ring_all_gather
from simlab.plan import CollectivePlan, Transfer, split_sizes
from simlab.render.collectives import player_figure, real_run_text, ring_lab, step_player, verdict_html
from simlab.render.collectives_figures import draw_bytes, ring_legend_handles, ring_title
from simlab.render.collectives_text import header, phase_name, step_text, transfer_line
from simlab.sim.collectives import naive_all_reduce, ring_all_gather, ring_all_reduce, tree_broadcast
from simlab.sim.collectives_stepper import simulate

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def fake_run(world_size=4, numel=10) -> dict:
    """What run_collective('ring-all-reduce', …) returns, with the plan's own byte counts."""
    plan = ring_all_reduce(world_size, numel)
    return {"name": "ring-all-reduce", "world_size": world_size, "plan": plan, "numel": numel,
            "bytes_sent_per_rank": list(plan.bytes_sent_per_rank()), "backend": "gloo",
            "max_abs_diff_vs_torch": 0.0}


def test_a_transfer_line_is_the_transfers_own_text_in_english_and_translated_in_chinese():
    plan = ring_all_reduce(4, 8)
    assert [transfer_line(t) for t in plan.steps[0]] == [str(t) for t in plan.steps[0]]
    i18n.set_language("zh")
    assert [transfer_line(t) for t in plan.steps[0]] == [str(t).replace("chunk", "块") for t in plan.steps[0]]


@pytest.mark.parametrize("make, phases", [
    (lambda: ring_all_reduce(4, 8), ["初始", "归约分散", "全收集"]),
    (lambda: naive_all_reduce(4, 8), ["初始", "归约", "广播"]),
    (lambda: tree_broadcast(4, 4), ["初始", "广播"]),
    (lambda: ring_all_gather(4, 8), ["初始", "全收集"]),
])
def test_phases_use_the_glossarys_words(make, phases):
    plan = make()
    steps = simulate(plan).steps
    i18n.set_language("zh")
    assert list(dict.fromkeys(phase_name(s, plan) for s in steps)) == phases


def test_the_header_and_the_rings_title_in_chinese():
    plan = ring_all_reduce(4, 8)
    step = simulate(plan).steps[1]
    english = ring_title(step, plan)
    assert english == "step 1/6 of ring_all_reduce (n=4, 32 B):\nreduce-scatter"
    i18n.set_language("zh")
    assert header(step, plan) == "ring_all_reduce 第 1/6 步（n=4，32 B）：归约分散"
    assert ring_title(step, plan) == "ring_all_reduce 第 1/6 步（n=4，32 B）：\n归约分散"  # broken after '：'


def test_the_legend_and_the_bytes_chart_in_chinese():
    plan = ring_all_reduce(4, 8)
    steps = simulate(plan).steps
    i18n.set_language("zh")
    labels = [h.get_label() for h in ring_legend_handles([steps[1]], 4)]
    assert labels == ["未持有", "1 个 rank 的输入", "已累加 2 个", "已累加 3 个", "已累加全部 4 个",
                      "发送，接收方累加 (+=)"]
    ax = draw_bytes({"ring": [48] * 4}, optimum=48).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("进程编号", "发送字节数（B）")
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["ring", "最优值（48 B）"]


def test_the_player_and_its_verdicts_in_chinese():
    plan = ring_all_reduce(3, 6)
    steps = simulate(plan).steps
    i18n.set_language("zh")
    fig = player_figure(1, steps, plan, real_steps=steps[:1], verdicts=[True, False, False, False, False])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["模拟", "真实运行：没有第 1 步  (不一致 ✗)"]
    assert "不一致 ✗" in verdict_html(1, [True, False]) and "1/2 步一致" in verdict_html(1, [True, False])
    player = step_player(steps, plan)
    assert repr(player) == "▶ 运行这个单元格，获得环形算法播放器" and player.label_prefix == "步骤 "


def test_the_ring_lab_in_chinese_and_its_refusal_in_one_line():
    i18n.set_language("zh")
    lab = ring_lab(run=lambda **kw: None)
    assert repr(lab) == "▶ 运行这个单元格，获得环形实验台"
    assert (lab.ranks.description, lab.size.description) == ("rank 数 N", "缓冲区（float32）")
    assert lab.control.button.description == "在 N 个真实进程上运行这个环"
    with pytest.raises(ValueError, match=r"^world_size=7：必须是以下之一：2, 3, 4, 5, 6, 8$"):
        ring_lab(run=None, world_size=7)


def test_the_real_runs_readout_in_chinese():
    result = fake_run(4, 8)
    sim = simulate(result["plan"])
    english = real_run_text(result, sim.steps, [True] * 7)
    assert english.splitlines()[0] == "4 processes (gloo), ring all-reduce of 32 B: 7/7 steps match the simulation"
    i18n.set_language("zh")
    lines = real_run_text(result, sim.steps, [True] * 7).splitlines()
    assert lines[0] == "4 个进程（gloo），32 B 的环形全归约：7/7 步与模拟一致"
    assert lines[1] == "每个 rank 发送的字节数   真实运行 [48, 48, 48, 48]   模拟 [48, 48, 48, 48]"


def _my_ring_all_gather(world_size, numel, itemsize=4, start="own"):
    """Written out, as the exercise asks: simlab's own ring_all_gather would be refused."""
    n, sizes = world_size, split_sizes(numel, world_size)
    steps = tuple(tuple(Transfer(s, r, (r + 1) % n, (r - s) % n, sizes[(r - s) % n] * itemsize, "copy")
                        for r in range(n)) for s in range(n - 1))
    return CollectivePlan("mine", n, sizes, itemsize, start, steps)


def test_the_graders_pass_lines_in_chinese(capsys):
    i18n.set_language("zh")
    check_ring_all_gather(_my_ring_all_gather)
    check_bytes_prediction(64, fake_run(), rank=2)  # 10 float32 on 4 ranks: rank 2 sends 32 + 32 B
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("环形全收集计划：✓ 18 种情形（1 到 8 个 rank")
    assert out[1] == ("预测的发送字节数：✓ 4 个 rank 中的 rank 2，S = 40 B：rank 2 真实发送了 64 B"
                      "（归约分散中 32 B，全收集中 32 B），与你的预测一致")


@pytest.mark.parametrize("predicted, reasons", [
    (60, ["2(N−1)/N·S 是各 rank 的平均值", "60 B 是 rank 1 发送的量", "；或者"]),
    (32, ["只是归约分散这一半", "只是全收集这一半"]),
    (70, ["这不是 rank 2 发送的量", "各块分别有 3, 3, 2, 2 个元素，每个 4 B"]),
    ("64", ["需要一个字节数，得到的是 '64'"]),
])
def test_each_wrong_answer_is_refused_with_its_reason_in_chinese(predicted, reasons, capsys):
    i18n.set_language("zh")
    with pytest.raises(AssertionError):
        check_bytes_prediction(predicted, fake_run(), rank=2)
    line = capsys.readouterr().out
    assert line.startswith(f"预测的发送字节数：✗ 4 个 rank 中的 rank 2，S = 40 B：你的答案是 {predicted!r}：")
    assert all(reason in line for reason in reasons), line


def test_a_wrong_plan_is_refused_in_chinese(capsys):
    def broken(world_size, numel, itemsize=4):  # all-gather steps but starting from every chunk
        return _my_ring_all_gather(world_size, numel, itemsize, start="all")
    i18n.set_language("zh")
    with pytest.raises(AssertionError):
        check_ring_all_gather(broken)
    assert capsys.readouterr().out == ("环形全收集计划：✗ world_size=1, numel=3：start='all'：全收集开始时 rank r "
                                       "只持有自己那一块（'own'）\n")


def test_english_step_text_is_unchanged():
    """The lesson's first table, as the English notebook stores it (nbval compares it there too)."""
    plan = ring_all_reduce(4, 8)
    assert step_text(simulate(plan).steps[0], plan).splitlines()[-2:] == [
        "transfers: none yet (the starting state)",
        "cells: ranks whose inputs are summed in; Σ0..3 = all 4 ranks; · = not held"]
