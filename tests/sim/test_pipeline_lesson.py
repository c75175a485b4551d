"""Lesson 4's text against the numbers: every value a sentence states is recomputed here from the
engines, and every printed table is read back from the saved notebook and checked against the closed
forms, so the prose and the outputs cannot drift apart again."""
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from simlab.sim.pipeline import closed_form_bubble, peak_activations
from simlab.sim.pipeline_schedules import make_schedule

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "04_pipeline_parallel.ipynb"
SOLUTION = ROOT / "solutions" / "04_pipeline_parallel.ipynb"


def cells(path: Path) -> dict:
    return {c["id"]: c for c in json.loads(path.read_text())["cells"]}


def source(path: Path, cell_id: str) -> str:
    src = cells(path)[cell_id]["source"]
    return "".join(src) if isinstance(src, list) else src


def printed(path: Path, cell_id: str) -> str:
    return "".join("".join(o.get("text", "")) for o in cells(path)[cell_id]["outputs"])


def test_the_two_conventions_sentence_states_the_closed_forms():
    text = " ".join(source(LESSON, "f82e63c3").split())
    m = re.search(r"\(p = (\d+), m = (\d+)\) reads (\d+)/(\d+) = ([\d.]+) here and (\d+)/(\d+) = ([\d.]+) in those", text)
    p, mbs = int(m[1]), int(m[2])
    fraction, ratio = Fraction(int(m[3]), int(m[4])), Fraction(int(m[6]), int(m[7]))
    assert float(fraction) == pytest.approx(closed_form_bubble("1f1b", p, mbs))
    assert float(ratio) == pytest.approx(closed_form_bubble("1f1b", p, mbs, convention="ratio"))
    assert f"{float(fraction):.3f}" == m[5] and f"{float(ratio):.3f}" == m[8]
    assert ratio == fraction / (1 - fraction)  # the conversion the cell states
    naive = re.search(r"fraction\s+([\d.]+), ratio ([\d.]+)", text)  # "the naive pipeline above"
    assert float(naive[1]) == closed_form_bubble("naive", 2) and float(naive[2]) == closed_form_bubble(
        "naive", 2, convention="ratio")


def test_the_conventions_cell_prints_the_closed_forms():
    lines = printed(LESSON, "l4-bubble-conventions").splitlines()
    for line, (name, p, m) in zip(lines, [("naive", 2, 1), ("1f1b", 4, 8)], strict=True):
        numbers = [float(x) for x in re.findall(r"\d+\.\d{3}", line)]
        f, r = closed_form_bubble(name, p, m), closed_form_bubble(name, p, m, convention="ratio")
        assert numbers == [round(f, 3), round(f, 3), round(r, 3), round(r, 3), round(r, 3)]


def test_the_gpipe_table_and_the_sentence_under_it():
    rows = [line.split() for line in printed(LESSON, "a8347a1f").splitlines()[1:]]
    assert len(rows) == 8
    for row in rows:
        p, m, sim, closed, ratio = int(row[0]), int(row[1]), float(row[2]), float(row[3]), float(row[4])
        assert sim == closed == round(closed_form_bubble("gpipe", p, m), 4)
        assert ratio == round((p - 1) / m, 4)  # the papers' (p-1)/m
    stated = re.search(r"p = (\d+), m = (\d+): (\d+)/(\d+) = ([\d.]+)", " ".join(source(LESSON, "d998c9bd").split()))
    assert Fraction(int(stated[3]), int(stated[4])) == Fraction(int(stated[1]) - 1, int(stated[2]))
    assert float(stated[5]) == (int(stated[1]) - 1) / int(stated[2])


def test_the_five_schedules_table_is_the_closed_forms():
    """Section 6's table, row by row, against formulas written out here: the same whole batch (8
    micro-batch units of forward 1, backward 2, on each of p = 4 stages: 96 units of work), so
    makespan = work / (p · (1 − bubble)); peaks: naive 1, GPipe m, 1F1B p − r, ZB-H1 p, interleaved
    Megatron's warm-up (v − 1)·p + 2(p − r − 1) plus the steady state's first forward."""
    p, m, v, work = 4, 8, 2, 96
    want = {"naive": (3 / 4, [1] * p), "gpipe": (3 / 11, [m] * p), "1f1b": (3 / 11, [p - r for r in range(p)]),
            "interleaved": (3 / 19, [(v - 1) * p + 2 * (p - r - 1) + 1 for r in range(p)]),
            "zero-bubble": (3 / 27, [p] * p)}
    rows = printed(LESSON, "7e2add31").splitlines()[1:]
    assert [row.split()[0] for row in rows] == list(want)
    for row in rows:
        name, span, fraction, ratio = row.split()[:4]
        bubble, peaks = want[name]
        assert float(span) == pytest.approx(work / (p * (1 - bubble)))
        assert float(fraction) == round(bubble, 3) and float(ratio) == round(bubble / (1 - bubble), 3)
        assert json.loads(row[row.index("["):]) == peaks
    text = " ".join(source(LESSON, "70e37435").split())  # "its 11 units on rank 0 weigh 5.5 stage units"
    units = re.search(r"its (\d+) units on rank 0 weigh ([\d.]+) stage units, more than 1F1B's (\d+)", text)
    assert int(units[1]) == want["interleaved"][1][0] and float(units[2]) == int(units[1]) / v
    assert int(units[3]) == want["1f1b"][1][0] < float(units[2])
    assert "4 + 6 + the steady state's 1 = 11 chunk units" in text  # (v-1)·p = 4, 2(p-1) = 6


def test_the_zero_bubble_cell_states_the_times_it_simulates_with():
    assert "t_f=1, t_b=2, t_w=1" in source(LESSON, "98176125")
    assert "split into I = 1 and W = 1 (`t_w=1`: I takes t_B − t_W)" in " ".join(source(LESSON, "bc70932d").split())
    bubble = float(re.search(r"bubble ([\d.]+) vs 1F1B", printed(LESSON, "98176125"))[1])
    assert bubble == round(closed_form_bubble("zero-bubble", 4, 8), 4) == round(3 / 27, 4)


def test_the_exercise_description_matches_the_grader():
    from simlab.grading.pipeline import PREDICT_CHUNKS, PREDICT_MICROBATCHES, PREDICT_STAGES
    text = " ".join(source(LESSON, "98571331").split())
    assert (f"under interleaved 1F1B (v = {PREDICT_CHUNKS}) and under ZB-H1 for p = {PREDICT_STAGES}, "
            f"m = {PREDICT_MICROBATCHES} (a case this lesson does not print)") in text
    prompt = " ".join(source(SOLUTION, "l4-predict-intro").split())
    assert f"p = {PREDICT_STAGES} stages on {PREDICT_STAGES} real processes, m = {PREDICT_MICROBATCHES}" in prompt
    assert f"**v = {PREDICT_CHUNKS} chunks** per rank" in prompt
    # the check runs the asked case itself: the learner hands it the real runner, not results
    assert source(SOLUTION, "l4-predict-run").startswith("check_peak_prediction(peak, run_pipeline)")


def test_the_exercise_is_the_learners_copy_and_the_solution_only_its_key():
    """The lesson sends the learner to exercises/ (a link that resolves) and names solutions/ as the answer key."""
    text = source(LESSON, "98571331")
    first = text.split("\n- ")[1]
    assert first.startswith("[`exercises/04_pipeline_parallel.ipynb`](../exercises/04_pipeline_parallel.ipynb)")
    assert (LESSON.parent / "../exercises/04_pipeline_parallel.ipynb").resolve().exists()
    assert first.index("exercises/") < first.index("solutions/") and "answer key" in first


def test_the_lesson_asks_for_a_prediction_before_it_runs():
    """Issue 23, §5: predict prompts in the lesson, each just before the cell whose output answers it."""
    ids = list(cells(LESSON))
    for prompt, answer in [("ee2aea7c", "7e2add31"), ("e789fb0a", "a85a6751"), ("a5d4ca84", "l4-primer-real"),
                           ("l4-four-stages", "07c644e4")]:
        assert "predict" in source(LESSON, prompt).lower() and ids.index(answer) == ids.index(prompt) + 1


def test_the_sections_are_numbered_once():
    headings = [re.match(r"## (\d+)\.", line) for c in cells(LESSON).values() if c["cell_type"] == "markdown"
                for line in source(LESSON, c["id"]).splitlines()]
    numbers = [int(h[1]) for h in headings if h]
    assert numbers == list(range(1, len(numbers) + 1))
    assert "(lesson 4, section 11)" in source(SOLUTION, "l4-repair-torch-md")
    assert "## 11. Your schedule in torch's own runtime" in source(LESSON, "l4-torch-csv-md")


def test_the_interleaved_rule_is_torchs():
    """The lesson: torch runs r = max(1, m // p) rounds, needs m % r == 0; with p = 4 every m up to 8 and
    m = 10 run, m = 9 and 11 are refused. Built with stand-in stages: the check runs in __init__."""
    from types import SimpleNamespace

    from torch.distributed.pipelining import ScheduleInterleaved1F1B

    def accepts(p: int, m: int, v: int = 2) -> bool:
        stages = [SimpleNamespace(num_stages=p * v, group_size=p, group_rank=0, stage_index=c * p, is_last=False)
                  for c in range(v)]
        try:
            ScheduleInterleaved1F1B(stages, m)
        except ValueError as err:
            assert "multiple of the number of rounds" in str(err)
            return False
        return True

    text = " ".join(source(LESSON, "4440802a").split())
    assert "r = max(1, ⌊m / p⌋) rounds" in text and "every m up to 8 runs" in text
    assert all(accepts(4, m) for m in range(1, 9)) and accepts(4, 10)
    assert not accepts(4, 9) and not accepts(4, 11)
    assert all(accepts(4, m) == (m % max(1, m // 4) == 0) for m in range(1, 25))
    with pytest.raises(ValueError, match="interleaved needs a multiple of stages=4"):  # ours follows Megatron
        make_schedule("interleaved", 4, 6, 2)


def test_the_real_runs_print_the_simulators_peaks():
    primer = printed(LESSON, "l4-primer-real")
    assert "naive 8 layers on 2 processes (4 + 4), m=1: loss and grads = one process ✓ | trace = simulated ✓" in primer
    held = [json.loads(x) for x in re.findall(r"activations held per rank (\[[\d, ]+\])", primer)]
    assert held == [peak_activations(make_schedule("naive", 2)), peak_activations(make_schedule("gpipe", 2, 4))]
    peaks = peak_activations(make_schedule("1f1b", 4, 8))
    assert f"measured {peaks} simulated {peaks}" in printed(LESSON, "07c644e4")
    assert "[" not in source(LESSON, "l4-four-stages")  # the prompt asks for them; the cell prints them


def test_measured_timings_are_never_compared_text():
    """The bubble a real run measures changes from run to run: its cell is ignored by nbval, and no
    compared output elsewhere holds a measured bubble."""
    assert source(LESSON, "f7c95235").startswith("# NBVAL_IGNORE_OUTPUT\n")
    for cid, cell in cells(LESSON).items():
        if cell["cell_type"] == "code" and cid != "f7c95235":
            assert "measured_bubble" not in source(LESSON, cid)


@pytest.mark.parametrize("path", [LESSON, SOLUTION])
def test_each_notebook_ends_with_a_summary_and_a_link_to_the_next_lesson(path):
    last = source(path, "l4-summary")
    assert last.startswith("## Summary\n") and list(cells(path))[-1] == "l4-summary"
    bullets = [line for line in last.splitlines() if line.startswith("- ")]
    assert 3 <= len(bullets) <= 6
    shown, target = re.search(r"\*\*Next:\*\* \[`([^`]+)`\]\(([^)]+)\)", last).groups()
    assert shown == "notebooks/05_tensor_parallel.ipynb"
    assert (path.parent / target).resolve() == ROOT / shown  # a relative link, from where the notebook lies


def test_the_exercise_shows_no_answer_before_it_runs():
    """What a learner opens: no verdict, no 1F1B lists of their own function, no peaks of the predicted case."""
    from simlab.sim.pipeline_schedules import format_grid, one_f_one_b
    exercise = ROOT / "exercises" / "04_pipeline_parallel.ipynb"
    shown = "".join(printed(exercise, cid) for cid, cell in cells(exercise).items() if cell["cell_type"] == "code")
    assert "✓" not in shown
    assert format_grid(one_f_one_b(4, 8)) not in shown and "0F0 0F1 0F2 0F3 0B0" not in shown
    from simlab.grading.pipeline import PREDICT_CHUNKS as V
    from simlab.grading.pipeline import PREDICT_MICROBATCHES as M
    from simlab.grading.pipeline import PREDICT_STAGES as P
    answers = [str(peak_activations(make_schedule("interleaved", P, M, V))),
               str(peak_activations(make_schedule("zero-bubble", P, M)))]
    assert all(a not in shown for a in answers)
    # and what the learner's own earlier cells print, once answered (the solution's outputs), does not show them
    ids = list(cells(SOLUTION))
    before = "".join(printed(SOLUTION, cid) for cid in ids[:ids.index("l4-predict-run")]
                     if cells(SOLUTION)[cid]["cell_type"] == "code")
    assert before and all(a not in before for a in answers)
