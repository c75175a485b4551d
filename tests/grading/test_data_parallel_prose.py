"""Lesson 2's prose against its own outputs: the numbers the markdown states are held to what the cells print
(English and Chinese alike), and the lesson ends with a link to the next one."""
import re

import pytest
from notebook_cells import cells, printed, source  # tests/notebook_cells.py

PATHS = ("notebooks/02_data_parallel.ipynb", "notebooks/zh/02_data_parallel.ipynb")


def _cells(path):
    by_id = cells(path)
    return {i: source(c) for i, c in by_id.items()}, {i: printed(c) for i, c in by_id.items()}


ZH_SCENES = {"default": "默认", "high latency": "高延迟"}  # the Chinese lesson's scene names (its cell's keys)


def _scene_row(out, scene):
    row = next(line for line in out["2fcdc483"].splitlines() if line.startswith((scene, ZH_SCENES[scene])))
    return re.findall(r"([\d.]+ [µm]s)", row)  # DP step, DDP step, DDP hidden, DDP exposed


@pytest.mark.parametrize("path", PATHS)
def test_the_explorers_starting_times_are_the_default_scenes(path):
    text, out = _cells(path)
    dp, ddp, *_ = _scene_row(out, "default")
    assert (dp, ddp) == ("52.40 ms", "17.79 ms")
    assert f"DP {dp}" in text["257093ae"] and f"DDP {ddp}" in text["257093ae"]


@pytest.mark.parametrize("path", PATHS)
def test_the_latency_sum_is_printed_not_typed(path):
    """N10: 16 buckets × 2(N−1) = 14 latencies *each*; the cell prints it, and it exceeds DP's whole step."""
    text, out = _cells(path)
    line = re.search(r"high latency: (\d+) buckets × 2\(N-1\) = (\d+) latencies each × (\d+) µs = ([\d.]+) ms",
                     out["2fcdc483"]) or re.search(  # the Chinese lesson prints the same numbers in its own words
        r"高延迟：(\d+) 个桶 × 每个桶 2\(N-1\) = (\d+) 次延迟 × (\d+) µs = 光延迟就有 ([\d.]+) ms", out["2fcdc483"])
    buckets, latencies, alpha_us, total_ms = int(line[1]), int(line[2]), int(line[3]), float(line[4])
    assert (buckets, latencies, alpha_us) == (16, 14, 100) and total_ms == pytest.approx(buckets * latencies * 0.1)
    dp_step = float(_scene_row(out, "high latency")[0].split()[0])
    assert total_ms > dp_step  # "the latency alone is more than DP's whole step"
    assert not re.search(r"\b(14|16|22\.4)\b", text["07ea5034"].split("##")[0])  # no typed copy of the sum


@pytest.mark.parametrize("path", PATHS)
def test_the_lesson_ends_with_links_not_paths(path):
    summary = _cells(path)[0]["l2-summary"]
    assert re.search(r"\]\(03_zero\.ipynb\)", summary)
    assert re.search(r"\]\(\.\./(\.\./)?exercises/(zh/)?02_data_parallel\.ipynb\)", summary)
    assert "`notebooks/03" not in summary


@pytest.mark.parametrize("path", PATHS)
def test_each_lesson_has_a_predict_prompt_before_the_cell_it_asks_about(path):
    ids = list(cells(path))
    text = _cells(path)[0]
    assert re.search(r"\*\*(Predict, then run|先预测，再运行)", text["13d3a768"])
    assert ids.index("13d3a768") + 1 == ids.index("2fcdc483")
