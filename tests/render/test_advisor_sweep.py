"""Lesson 7's "when does CP / EP pay?": the rows as a stable text table and as a figure, in both languages."""
import matplotlib
import pytest

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.advisor_sweep import draw_sweep, sweep_text  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.style import MIN_FONT, TAB_RED  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.advisor_sweep import when_cp, when_ep  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.hardware import cluster  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.model import PRESETS, Transformer  # noqa: E402 — after matplotlib.use("Agg")

pytestmark = pytest.mark.usefixtures("english_afterwards")
ONE_HEAD = Transformer("one-head", 2, 1024, 1, seq=1 << 20, vocab=1000)  # neither TP nor PP can split it
SMALL = cluster("h100-80gb", gpus=8)
SMALL = SMALL.with_(gpu=SMALL.gpu.with_(memory=40 * 2**30, name="h100-40gib"))


@pytest.fixture(scope="module")
def cp_rows():
    return when_cp(ONE_HEAD, SMALL, global_batch=8, seqs=[1 << 16, 1 << 20, 1 << 23])


def font_sizes(fig) -> list[float]:
    texts = [t for ax in fig.axes for t in ax.texts + [ax.title, ax.xaxis.label, ax.yaxis.label]
             + ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    texts += [t for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return [t.get_fontsize() for t in texts]


def test_sweep_text_is_one_line_per_point_with_the_rows_numbers(cp_rows):
    text = sweep_text(cp_rows)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["seq", "batch", "best", "cp"] and len(lines) == 1 + len(cp_rows)
    for line, row in zip(lines[1:], cp_rows):
        assert line.startswith(f"{row['seq']:,}")
        if row["fits"]:
            assert f"{row['step_seconds']:.4g}" in line and row["family"] in line and row["why"] in line
        else:
            assert "nothing fits" in line
    assert text == sweep_text(cp_rows)  # nbval compares it: nothing in it may change from run to run
    assert any(not r["rival_fits"] and r["fits"] for r in cp_rows) and "does not fit" in text


def test_sweep_text_in_chinese_translates_the_words_and_the_reasons(cp_rows):
    i18n.set_language("zh")
    text = sweep_text(cp_rows)
    assert "最佳方案" in text and "原因" in text and "放不下" in text and "does not fit" not in text


def test_draw_sweep_draws_both_sides_and_marks_where_one_does_not_fit(cp_rows):
    fig = draw_sweep(cp_rows)
    ax = fig.axes[0]
    with_cp = [r for r in cp_rows if r["fits"]]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert len(lines["with CP > 1"].get_xdata()) == len(with_cp)
    missing = lines["does not fit"]
    assert missing.get_color() == TAB_RED and len(missing.get_xdata()) >= 1
    assert min(font_sizes(fig)) >= MIN_FONT and fig.get_size_inches()[0] <= 10
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{r['seq']:,}" for r in cp_rows]


def test_an_ep_sweep_draws_and_prints_its_own_columns():
    tiny = Transformer("tiny-moe", 4, 512, 8, seq=1024, vocab=1000, experts=4, top_k=2)
    rows = when_ep(tiny, cluster(gpus=8), 16, experts=[2, 8])
    assert sweep_text(rows).splitlines()[0].split()[:4] == ["experts", "batch", "best", "ep"]
    assert draw_sweep(rows).axes[0].get_xlabel() == "experts"


def test_a_sweep_of_a_real_model_reads_as_the_lesson_prints_it():
    rows = when_cp(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), global_tokens=1 << 20, seqs=[8192, 131072])
    assert len(sweep_text(rows).splitlines()) == 3
