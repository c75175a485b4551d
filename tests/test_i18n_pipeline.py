"""Lesson 4 speaks the language it is told: its text Gantt charts, figures, schedule explorer and graders print
Chinese after `set_language("zh")`, with the same numbers as in English, and English stays what it was.

No process is started here: a "real run" is built from the simulator (what run_pipeline's counters equal, as
tests/grading/test_pipeline_predict.py and tests/render/test_pipeline_widgets.py check on real processes).
Where a check compares a Chinese line with an English one it compares their numbers (the same multiset of
numbers, in whatever order the sentence puts them), so neither side is a copy of the code's output."""
import re

import matplotlib
import pytest

matplotlib.use("Agg")

from learner_answers import one_f_one_b as one_f_one_b_by_hand  # noqa: E402 — after matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.grading.pipeline import (  # noqa: E402 — after matplotlib.use("Agg")
    BROKEN_ONE_F_ONE_B,
    PREDICT_CHUNKS,
    PREDICT_MICROBATCHES,
    PREDICT_STAGES,
    _first_difference,
    check_one_f_one_b,
    check_peak_prediction,
    check_repaired_schedule,
)
from simlab.plan import Action  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render import pipeline_widgets as PW  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.pipeline import draw_gantt, draw_gantt_sim_vs_real, gantt_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline import explore, peak_activations, simulate  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.pipeline_schedules import gpipe, make_schedule, one_f_one_b  # noqa: E402 — after matplotlib.use("Agg")

NUMBER = re.compile(r"\d+(?:\.\d+)?")


pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test


def in_both(make):
    """(English, Chinese) of what `make()` returns or prints."""
    i18n.set_language("en")
    english = make()
    i18n.set_language("zh")
    return english, make()


def numbers(text: str) -> list[str]:
    return sorted(NUMBER.findall(text))


# ---- the text Gantt chart (what nbval compares) ---------------------------------------------------------

@pytest.mark.parametrize("name, p, m, v, t_w", [("naive", 2, 1, 1, 0.0), ("1f1b", 4, 8, 1, 0.0),
                                                ("interleaved", 4, 8, 2, 0.0), ("zero-bubble", 4, 8, 1, 1.0)])
def test_the_chart_is_the_same_and_only_its_key_line_is_translated(name, p, m, v, t_w):
    trace = simulate(make_schedule(name, p, m, v), t_f=1 / v, t_b=2 / v, t_w=t_w)
    english, chinese = (text.splitlines() for text in in_both(lambda: gantt_text(trace, p)))
    assert english[:-1] == chinese[:-1] and all(row.startswith("rank ") for row in chinese[:-1])  # the notation
    key = chinese[-1]
    assert key.startswith("每列 = ") and key.endswith("'.' = 闲置（气泡）") and "，" in key and not re.search(r"[a-z]{3}", key)
    assert numbers(key) == numbers(english[-1])  # the column's length is the same number


def test_the_key_names_each_op_the_lesson_uses():
    trace = simulate(make_schedule("zero-bubble", 2, 2), t_f=1, t_b=2, t_w=1)
    i18n.set_language("zh")
    key = gantt_text(trace, 2).splitlines()[-1]
    assert "F 前向，I 反向（输入梯度），W 反向（权重梯度）" in key and "数字 = 第几个微批次" in key
    looped = gantt_text(simulate(make_schedule("interleaved", 2, 2, 2)), 2).splitlines()[-1]
    assert "标签 = 级 + 操作 + 微批次" in looped


def test_a_cut_chart_says_so_in_chinese():
    trace = simulate(make_schedule("1f1b", 4, 8))
    english, chinese = in_both(lambda: gantt_text(trace, 4, max_columns=10).splitlines()[-2])
    assert english.startswith("… truncated at 10 of ") and chinese.startswith("… 共 ") and numbers(english) == \
        numbers(chinese)


def test_english_charts_are_unchanged():
    """Section 1's chart, as the lesson shows it (nbval compares the same text in the English notebook)."""
    trace = simulate(make_schedule("naive", 2), t_f=4, t_b=8)
    assert gantt_text(trace, 2).splitlines()[-1] == (
        "one column = 4 time units; F forward, B backward, digits = micro-batch, '.' idle (the bubble)")


# ---- figures ---------------------------------------------------------------------------------------------

def test_the_gantt_figures_legend_and_axis_in_chinese():
    trace = explore("interleaved", 4, 8, 2)[1]
    i18n.set_language("zh")
    ax = draw_gantt(trace, 4).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["前向", "反向", "浅色：靠后的模型块"]
    assert ax.get_xlabel() == "时间"  # model time units: no unit to name
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    seconds = simulate(make_schedule("gpipe", 2, 2), t_f=0.001, t_b=0.002)
    top, bottom = draw_gantt_sim_vs_real(seconds, seconds, 2).axes[:2]
    assert (top.get_title(loc="left"), bottom.get_title(loc="left")) == ("模拟", "真实运行")
    assert bottom.get_xlabel() == "时间（ms）"


# ---- the schedule explorer -------------------------------------------------------------------------------

def test_the_explorer_in_chinese_with_the_same_numbers():
    def build():
        panel = PW.schedule_explorer("1f1b", 4, 8, 2, 2.0, run=lambda *a, **k: None)
        return panel

    english, chinese = in_both(build)
    assert repr(chinese) == "▶ 运行这个单元格，获得调度探索器"
    assert repr(chinese.player) == "▶ 运行这个单元格，获得时间线播放器"
    assert repr(chinese.run_control) == "▶ 运行这个单元格，获得真实运行按钮"
    assert chinese.run_control.button.description == "在真实进程上运行"
    assert [k.description for k in chinese.knobs.values()] == ["调度", "t_B / t_F", "级数 p", "微批次数 m",
                                                               "模型块数 v（交错式）"]
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", chinese.readout.value)
    assert headers == ["调度", "p", "m", "v", "总耗时", "气泡（闲置 / 总时长）", "比值（闲置 / 理想时长）", "每个 rank 的峰值激活"]

    def cells(panel):
        return re.findall(r"<td[^>]*>([^<]*)</td>", panel.readout.value)

    assert cells(chinese) == cells(english)  # the engine's numbers, whatever the language
    assert "峰值激活的单位" in chinese.readout.value
    assert chinese.player.captions[-1] == "时间 33 / 33：已完成 64 / 64 个动作"
    assert numbers(chinese.player.captions[0]) == numbers(english.player.captions[0])


def test_the_readout_line_and_chart_title_keep_their_numbers():
    run = explore("interleaved", 4, 8, 2, 2.0)
    english, chinese = in_both(lambda: PW.readout_text(run[2]))
    assert chinese.startswith("interleaved：p=4 m=8 v=2   总耗时 ") and numbers(chinese) == numbers(english)
    english, chinese = in_both(lambda: PW.chart_title(run[2], 2.0))
    assert chinese.endswith("（模拟）") and numbers(chinese) == numbers(english)


def fake_real_run(name: str, p: int, m: int) -> dict:
    """What run_pipeline returns, the timings taken from the simulator (in seconds)."""
    plan = make_schedule(name, p, m)
    trace = simulate(plan, t_f=0.001, t_b=0.002)
    return {"schedule_name": name, "world_size": p, "microbatches": m, "chunks": 1, "trace": trace,
            "simulated_trace": trace, "max_abs_diff_vs_reference": 2e-7, "measured_bubble_fraction": 0.758,
            "measured_bubble_ratio": 3.13, "simulated_bubble_fraction": 0.741, "simulated_bubble_ratio": 2.86,
            "measured_peak_activations": peak_activations(plan)}


@pytest.mark.parametrize("p", [1, 2])
def test_the_real_runs_readout_in_chinese(p):
    res = fake_real_run("gpipe", p, 4)
    (_, english, _), (fig, chinese, _) = in_both(lambda: PW.real_view(res))
    lines = chinese.splitlines()
    assert lines[0] == f"gpipe，{p} 个进程，m=4：loss 和梯度 = 单进程 ✓（最大 |差| 2.0e-07）"
    assert lines[1] == "气泡：实测 0.758（比值 3.13），用实测耗时模拟 0.741（比值 2.86）"
    assert lines[2] == f"每个 rank 持有的激活值：实测 {[4] * p}，模拟 {[4] * p}"
    assert numbers(chinese) == numbers(english)
    assert [ax.get_title(loc="left") for ax in fig.axes[:2]] == ["模拟（输入实测的每个动作耗时）", f"真实运行，{p} 个进程"]


def test_a_knob_off_its_grid_is_refused_in_one_chinese_line():
    i18n.set_language("zh")
    with pytest.raises(ValueError, match=r"^ratio=2\.2：必须是以下之一：0\.5, 1, 1\.5, 2, 2\.5, 3, 4$"):
        PW.schedule_explorer(ratio=2.2)


# ---- graders ---------------------------------------------------------------------------------------------

def printed(check, *args, capsys, fails: bool = False) -> str:
    """What `check(*args)` prints (one line); `fails`: it must also raise AssertionError."""
    if fails:
        with pytest.raises(AssertionError):
            check(*args)
    else:
        check(*args)
    out = capsys.readouterr().out
    assert out.count("\n") == 1, out
    return out.rstrip("\n")


def graded_in_both(check, *args, capsys, fails: bool = False):
    return in_both(lambda: printed(check, *args, capsys=capsys, fails=fails))


def _one_at_a_time(p, m):
    """Valid, but every rank finishes a micro-batch before starting the next: a bubble far above 1F1B's."""
    return [[a for j in range(m) for a in (Action(r, "F", j), Action(r, "B", j))] for r in range(p)]


def _gpipe_order(p, m):
    """GPipe, written out: 1F1B's bubble, but every rank holds all m micro-batches."""
    return [[Action(r, "F", j) for j in range(m)] + [Action(r, "B", j) for j in range(m)] for r in range(p)]


@pytest.mark.parametrize("fn, chinese_reason", [
    (_one_at_a_time, "有的 rank 等待得比 1F1B 里更久"),
    (_gpipe_order, "每个 rank 应当是 min(p-r, m) = [4, 3, 2, 1]：有一个反向来得比它能做到的更晚"),
])
def test_a_wrong_1f1b_is_refused_with_its_reason_in_chinese(fn, chinese_reason, capsys):
    english, chinese = graded_in_both(check_one_f_one_b, fn, capsys=capsys, fails=True)
    assert chinese.startswith("1F1B 调度：✗ stages=4, microbatches=8：") and chinese_reason in chinese
    assert numbers(chinese) == numbers(english)


def test_the_right_1f1b_passes_in_chinese(capsys):
    english, chinese = graded_in_both(check_one_f_one_b, one_f_one_b_by_hand, capsys=capsys)
    assert chinese == "1F1B 调度：✓ 10 组 (p, m)：有效，顺序与 Megatron 一致，气泡 (p-1)/(m+p-1)，峰值激活 min(p-r, m)"
    assert numbers(chinese) == numbers(english)


def test_a_valid_1f1b_in_another_order_is_told_where_megatrons_differs_in_chinese():
    """The last check's words (reached only by an order with 1F1B's bubble and memory), on the three ways two
    schedules can differ: an action, a rank's length, the number of ranks."""
    want = one_f_one_b(4, 8)
    swapped = [list(rank) for rank in want]
    swapped[1][2], swapped[1][3] = swapped[1][3], swapped[1][2]  # 1F2 and 1B0
    shorter = [list(rank) for rank in want]
    shorter[3] = shorter[3][:-1]
    cases = [(swapped, "rank 1 的第 2 步是 1B0，Megatron 的 1F1B 在这一步运行 1F2"),
             (shorter, "rank 3 有 15 个动作，应当是 16 个"), (want[:3], "3 个 rank，应当是 4 个")]
    for got, chinese in cases:
        english, said = in_both(lambda got=got: _first_difference(got, want))
        assert said == chinese and numbers(said) == numbers(english)


@pytest.mark.parametrize("repair, chinese_reason", [
    (gpipe(3, 4), "有效，也和 1F1B 一样快，但 rank 0 同时持有 4 个微批次的激活值，1F1B 只持有 3 个"),
    ([[str(a) for a in rank] for rank in one_f_one_b(3, 4)[:2]], "2 个动作列表，而流水线有 3 个 rank"),
    ([["0F0", "0B0", "0F1", "0B1", "0F2", "0B2", "0F3", "0B3"],
      ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2", "1F3", "1B3"],
      [str(a) for a in one_f_one_b(3, 4)[2]]], "模拟的总耗时是 36 个时间单位，1F1B 只要 18"),
])
def test_each_wrong_repair_is_refused_in_chinese(repair, chinese_reason, capsys):
    english, chinese = graded_in_both(check_repaired_schedule, repair, capsys=capsys, fails=True)
    assert chinese.startswith("修复后的 1F1B 调度：✗ stages=3, microbatches=4：") and chinese_reason in chinese
    assert numbers(chinese) == numbers(english)


def test_the_repair_passes_and_the_stub_is_unanswered_in_chinese(capsys):
    english, chinese = graded_in_both(check_repaired_schedule, one_f_one_b(3, 4), capsys=capsys)
    assert chinese == "修复后的 1F1B 调度：✓ 有效，总耗时 18 = 1F1B 的总耗时，每个 rank 的峰值激活 [3, 2, 1]"
    assert numbers(chinese) == numbers(english)
    with pytest.raises(NotImplementedError, match="^练习：请在上面的单元格里修好这些列表$"):
        check_repaired_schedule(BROKEN_ONE_F_ONE_B)


def fake_pipeline_run(name, world_size, microbatches, chunks, global_batch, compare_torch):
    """run_pipeline's answer to the check: what each rank held, which equals the simulator's peaks."""
    assert not compare_torch and global_batch % microbatches == 0
    plan = make_schedule(name, world_size, microbatches, chunks)
    return {"schedule_name": name, "world_size": world_size, "microbatches": microbatches, "chunks": chunks,
            "measured_peak_activations": peak_activations(plan)}


P, M, V = PREDICT_STAGES, PREDICT_MICROBATCHES, PREDICT_CHUNKS
RIGHT = {"interleaved": [(V - 1) * P + 2 * (P - r - 1) + 1 for r in range(P)], "zero-bubble": [P] * P}


def test_a_right_prediction_passes_in_chinese(capsys):
    english, chinese = graded_in_both(check_peak_prediction, RIGHT, fake_pipeline_run, capsys=capsys)
    assert chinese.startswith("每个 rank 的峰值激活，预测与真实运行对照：✓ 交错式 [8, 6, 4] 个模型块单位，ZB-H1 [3, 3, 3] 个微批次")
    assert numbers(chinese) == numbers(english)


@pytest.mark.parametrize("name, guess, hint", [
    ("interleaved", [3, 2, 1], "（那是 1F1B 的"),
    ("interleaved", [12, 12, 12], "（那是这一步的全部前向"),
    ("interleaved", [6, 4, 2], "（不是 1F1B 的 v 倍"),
    ("interleaved", [7, 5, 3], "（预热之外，还要加上"),
    ("interleaved", [4, 6, 8], "（rank 0 是第一级"),
    ("zero-bubble", [3, 2, 1], "（那是 1F1B 的"),
    ("zero-bubble", [3, 3, 2], "权重梯度 W"),
])
def test_each_usual_wrong_prediction_gets_its_hint_in_chinese(name, guess, hint, capsys):
    predicted = RIGHT | {name: guess}
    english, chinese = graded_in_both(check_peak_prediction, predicted, fake_pipeline_run, capsys=capsys, fails=True)
    assert chinese.startswith(f"每个 rank 的峰值激活，预测与真实运行对照：✗ {name}：你预测的是 {guess}；rank ")
    assert ("按模型块计数" if name == "interleaved" else "推迟了它的 W") in chinese and hint in chinese
    assert str(RIGHT[name]) not in chinese  # a hint, never the measured numbers
    assert numbers(chinese) == numbers(english)


@pytest.mark.parametrize("predicted, run, chinese_reason", [
    ([8, 6, 4], fake_pipeline_run, "必须是以 'interleaved'（交错式）和 'zero-bubble'（零气泡）为键的 dict，得到的是 [8, 6, 4]"),
    (RIGHT | {"interleaved": [8, 6]}, fake_pipeline_run, "每个 rank 预测一个整数，共 3 个（rank 0 在前）"),
    (RIGHT, "run_pipeline", "需要在真实进程上运行调度的那个函数"),
    (RIGHT, lambda *a, **k: {}, "没有返回 measured_peak_activations"),
])
def test_each_malformed_or_wrong_answer_is_refused_in_chinese(predicted, run, chinese_reason, capsys):
    english, chinese = graded_in_both(check_peak_prediction, predicted, run, capsys=capsys, fails=True)
    assert chinese_reason in chinese and numbers(chinese) == numbers(english)


def test_simlabs_own_1f1b_is_refused_in_chinese(capsys):
    english, chinese = graded_in_both(check_one_f_one_b, lambda p, m: make_schedule("1f1b", p, m), capsys=capsys,
                                      fails=True)
    assert "它调用了 simlab 自己的 make_schedule" in chinese and numbers(chinese) == numbers(english)


def test_an_unanswered_prediction_is_a_stub_in_chinese(capsys):
    i18n.set_language("zh")
    with pytest.raises(NotImplementedError, match="^练习：请在上面的单元格里写下你的预测$"):
        check_peak_prediction({"interleaved": None, "zero-bubble": None}, fake_pipeline_run)
    assert capsys.readouterr().out == ""  # nothing graded, nothing started
