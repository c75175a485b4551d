"""Lesson 7's context-parallel pictures: the online-softmax text holds the engine's numbers (and its last line equals
one-process attention), the work tables and bars are the simulator's closed forms, the variants' table is `costs`,
a real run's text says ✓ only where it should; the scenes validate, every word at least the figures' smallest
size; the ring player has a frame per ring step; the explorer redraws from the simulator on every knob, refuses a
bad start in one line, says a bad combination in its readout, and runs the shown configuration through the callable
it was given."""
import html
import json
import re

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from simlab import i18n  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.chart import FONT_PX, validate  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.context_parallel import (  # noqa: E402 — after matplotlib.use("Agg")
    busy_steps_of,
    draw_tiles,
    draw_work_bars,
    ring_step_text,
    ring_text,
    run_text,
    token_ranges,
    variants_text,
    work_text,
)
from simlab.render.context_parallel_scene import ring_scene, variants_scene, work_scene  # noqa: E402 — after matplotlib.use("Agg")
from simlab.render.context_parallel_widgets import (  # noqa: E402 — after matplotlib.use("Agg")
    CP_SIZES,
    SEQUENCES,
    explorer,
    ring_player,
)
from simlab.render.style import MIN_FONT  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.context_parallel import busy_steps, imbalance, positions, work_per_rank  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.context_parallel_costs import compare, costs  # noqa: E402 — after matplotlib.use("Agg")
from simlab.sim.context_parallel_online import attention, ring_attention  # noqa: E402 — after matplotlib.use("Agg")
from simlab.trace import Trace  # noqa: E402 — after matplotlib.use("Agg")

from .test_collectives_figures import _font_sizes  # noqa: E402 — every word of a figure, as lesson 1 measures it
from .widget_checks import off_grid  # noqa: E402 — tests/render's helper

pytestmark = pytest.mark.usefixtures("english_afterwards")  # tests/conftest.py: English again after each test
NUMBER = r"(−∞|-?[\d.]+(?:e[-+]\d+)?)"


def seeded_run(world_size=4, seq=16, layout="zigzag", d=4, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((seq, d)) for _ in range(3))
    return (q, k, v), ring_attention(q, k, v, world_size, layout, causal=True)


def value(text: str) -> float:
    return -np.inf if text == "−∞" else float(text)


# ---- the online softmax, step by step ------------------------------------------------------------------------

@pytest.mark.parametrize("world_size, layout", [(4, "zigzag"), (4, "contiguous"), (2, "zigzag"), (8, "zigzag")])
def test_ring_text_prints_the_engines_m_l_and_o_and_ends_at_one_process_attention(world_size, layout):
    (q, k, v), run = seeded_run(world_size, 32, layout)
    reference = attention(q, k, v, causal=True)[0]  # (s, d): one process, the whole sequence
    for rank in range(world_size):
        lines = ring_text(run, rank).splitlines()
        token = int(run.positions[rank][-1])
        assert lines[0].endswith(f"is token {token}") and len(lines) == 1 + 2 * world_size + 1 - sum(
            "sees none" in line for line in lines)
        states = [(s.m[-1], s.l[-1], s.o[-1, 0]) for s in (run.steps[i][rank] for i in range(world_size))]
        updates = [line for line in lines if line.startswith("    ")]
        changed = [st for i, st in enumerate(states) if i == 0 or st[:2] != states[i - 1][:2]]
        assert len(updates) == len(changed)
        old = (-np.inf, 0.0, 0.0)
        for line, (m, l, o) in zip(updates, changed):  # noqa: E741 — the papers' names
            got = re.search(rf"rescale e\^\(m − m'\) = {NUMBER}; l {NUMBER} → {NUMBER}; O\[0\] {NUMBER} → {NUMBER}",
                            line).groups()
            scale = np.exp(old[0] - m) if np.isfinite(old[0]) else 0.0
            assert [float(g) for g in got] == pytest.approx([scale, old[1], l, old[2], o], rel=1e-3, abs=1e-4)
            assert ("> m" in line) == (m > old[0])  # the block raised the running max, or it did not
            old = (m, l, o)
        out = float(re.search(rf"= {NUMBER}; logsumexp", lines[-1]).group(1))
        assert out == pytest.approx(reference[token, 0], rel=1e-3, abs=1e-4)


def test_a_row_the_mask_hides_from_a_block_is_said_to_see_none_of_it():
    _qkv, run = seeded_run(4, 16, "zigzag")
    for rank in range(4):
        for row in range(4):
            token = int(run.positions[rank][row])
            text = ring_text(run, rank, row)
            hidden = [i for i in range(4) if min(run.positions[run.steps[i][rank].kv_from]) > token]
            assert [int(n) for n in re.findall(r"step (\d+): [^\n]*sees none", text)] == hidden


@pytest.mark.parametrize("rank, row, message", [(4, -1, "rank=4: must be between 0 and 3"),
                                                (True, -1, "rank=True"), (0, 4, "row=4: must be between -4 and 3")])
def test_ring_text_refuses_a_rank_or_row_the_run_has_not(rank, row, message):
    _qkv, run = seeded_run()
    with pytest.raises(ValueError, match=re.escape(message)):
        ring_text(run, rank, row)


def test_token_ranges_and_the_step_text():
    assert token_ranges([0, 1, 14, 15]) == "0–1, 14–15" and token_ranges([3]) == "3"
    _qkv, run = seeded_run()
    text = ring_step_text(run, 1)
    for r in range(4):
        s = run.steps[1][r]
        assert f"rank {r}: K,V of rank {(r - 1) % 4}, {s.pairs} pairs" in text
    assert text.splitlines()[-1] == "then each rank sends that block on to rank r + 1"
    assert ring_step_text(run, 3).splitlines()[-1].startswith("last step")


# ---- work per rank, variants, a real run ----------------------------------------------------------------------

@pytest.mark.parametrize("world_size, seq", [(1, 8), (2, 8), (4, 16), (4, 64), (8, 64), (3, 12)])
def test_work_text_is_the_closed_form_and_busy_steps_the_simulations(world_size, seq):
    text = work_text(world_size, seq)
    rows = [line.split() for line in text.splitlines()[2:2 + world_size]]
    contiguous, zigzag = work_per_rank(world_size, seq, "contiguous"), work_per_rank(world_size, seq, "zigzag")
    assert [int(r[1].replace(",", "")) for r in rows] == list(contiguous)
    assert [int(r[3].replace(",", "")) for r in rows] == list(zigzag)
    for layout, column in (("contiguous", 2), ("zigzag", 4)):
        assert [r[column] for r in rows] == [f"{b}/{world_size}" for b in busy_steps(world_size, seq, layout)]
        assert busy_steps_of(world_size, layout) == list(busy_steps(world_size, seq, layout))
    assert f"busiest / mean = {imbalance(contiguous):.2f}" in text and "busiest / mean = 1.00" in text


def test_work_text_without_zigzag_where_the_sequence_does_not_split_and_its_refusals():
    text = work_text(4, 12)
    assert "zig-zag pairs" not in text and text.endswith("zig-zag: 12 tokens do not split into 8 equal chunks")
    for args, message in (((0, 16), "world_size=0"), ((4, 7), "seq=7: must be divisible by 4"), ((4, "x"), "seq='x'")):
        with pytest.raises(ValueError, match=re.escape(message)):
            work_text(*args)


@pytest.mark.parametrize("world_size, heads, kv_heads", [(4, 4, None), (8, 32, 8), (4, 6, 2), (1, 2, None)])
def test_variants_text_is_costs_every_variant(world_size, heads, kv_heads):
    rows = compare(world_size=world_size, seq=64, heads=heads, head_dim=8, kv_heads=kv_heads)
    lines = variants_text(rows).splitlines()
    for variant, c in rows.items():
        line = next(x for x in lines if x.startswith(variant + " "))
        if c is None:
            assert line.endswith("heads do not divide over the CP size")
        else:
            assert re.findall(r"([\d,]+) B", line) == [f"{x:,}" for x in (c.forward_bytes, c.backward_bytes,
                                                                          c.bytes_sent, c.kv_buffer_bytes)]
    assert (rows["ulysses"] is None) == (heads % world_size != 0)


def test_variants_text_in_mib_for_big_layers():
    rows = compare(world_size=8, seq=131072, heads=32, kv_heads=8, head_dim=128, itemsize=2)
    ring = next(x for x in variants_text(rows).splitlines() if x.startswith("ring"))
    forward = costs("ring", world_size=8, seq=131072, heads=32, kv_heads=8, head_dim=128, itemsize=2).forward_bytes
    assert ring.split()[1:3] == [f"{forward / 2**20:,.1f}", "MiB"]


def fake_result(**changes) -> dict:
    r = {"variant": "ring", "layout": "zigzag", "world_size": 2, "backend": "gloo", "seq": 8, "heads": 2, "kv_heads": 2,
         "head_dim": 4, "max_abs_diff_vs_reference": 2e-7, "max_abs_diff_vs_torch": 1e-7, "why_no_torch": None,
         "bytes_sent_per_rank": [1024, 1024], "plan_bytes_sent_per_rank": [1024, 1024], "matches_plan": True,
         "work_per_rank": [18, 18], "plan_work_per_rank": [18, 18], "trace": Trace()}
    return r | changes


def test_run_text_ticks_what_agrees_and_crosses_what_does_not():
    good = run_text(fake_result()).splitlines()
    assert len(good) == 6 and all(line.startswith("✓") for line in good[1:]), good
    bad = run_text(fake_result(max_abs_diff_vs_reference=0.1, bytes_sent_per_rank=[1024, 512], matches_plan=False,
                               work_per_rank=[18, 17], max_abs_diff_vs_torch=None,
                               why_no_torch="compare_torch=False")).splitlines()
    assert [line[0] for line in bad[1:]] == ["✗", "n", "✗", "✗", "✗"]
    assert bad[2] == "no torch comparison: compare_torch=False"


# ---- figures ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("world_size, seq", [(2, 8), (4, 16), (8, 64)])
def test_work_bars_are_the_closed_form_and_every_word_is_at_least_10_pt(world_size, seq):
    fig = draw_work_bars(world_size, seq)
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars == list(work_per_rank(world_size, seq, "contiguous")) + list(work_per_rank(world_size, seq, "zigzag"))
    assert min(_font_sizes(fig)) >= MIN_FONT and fig.get_size_inches()[0] <= 10
    tiles = draw_tiles(world_size, "zigzag")
    assert min(_font_sizes(tiles)) >= MIN_FONT
    # the lower triangle: full tiles are squares, diagonal ones triangles, one per chunk
    assert len(tiles.axes[0].patches) == (2 * world_size) * (2 * world_size - 1) // 2 + 2 * world_size


# ---- scenes -------------------------------------------------------------------------------------------------

def texts_of(s: dict) -> list[dict]:
    marks = s.get("marks") or [m for p in s["panels"] for m in p["marks"]]
    return [m for m in marks if m["kind"] == "text"]


@pytest.mark.parametrize("world_size, layout", [(1, "zigzag"), (2, "contiguous"), (4, "zigzag"), (8, "zigzag")])
def test_ring_scene_draws_each_ranks_tiles_and_block_for_every_step(world_size, layout):
    _qkv, run = seeded_run(world_size, 16 * world_size, layout)
    for step in range(world_size):
        s = ring_scene(run, step)
        assert validate(json.loads(json.dumps(s))) == s and len(json.dumps(s)) < 30_000
        assert s["alt"] == ring_step_text(run, step)
        words = [m["text"] for m in texts_of(s)]
        for r in range(world_size):
            assert f"K,V of rank {(r - step) % world_size}" in words and f"rank {r}" in words
        tiles = [m for m in s["marks"] if m["kind"] == "rect"]
        per_rank = 4 if layout == "zigzag" else 1
        assert len(tiles) == world_size * per_rank
        for r in range(world_size):  # a rank whose tiles are all skipped is one that scored no pair this step
            mine = tiles[r * per_rank:(r + 1) * per_rank]
            assert all(m["tip"].endswith("skip") for m in mine) == (run.steps[step][r].pairs == 0)
        assert all(m["size"] >= FONT_PX for m in texts_of(s))
        arrows = [m for m in s["marks"] if m["kind"] == "arrow"]
        assert len(arrows) == (0 if step == 0 or world_size == 1 else world_size)


def test_ring_scene_tiles_are_the_causal_masks():
    _qkv, run = seeded_run(4, 16, "contiguous")
    s = ring_scene(run, 1)  # rank r holds block r − 1: a full tile for r ≥ 1, rank 0 holds block 3: skipped
    tips = [m["tip"] for m in s["marks"] if m["kind"] == "rect"]
    assert tips == ["query chunk 0 × key chunk 3: skip"] + [f"query chunk {r} × key chunk {r - 1}: full"
                                                           for r in range(1, 4)]
    assert [m["tip"] for m in ring_scene(run, 0)["marks"] if m["kind"] == "rect"] == [
        f"query chunk {r} × key chunk {r}: half" for r in range(4)]
    with pytest.raises(ValueError, match="step=4: must be between 0 and 3"):
        ring_scene(run, 4)


@pytest.mark.parametrize("world_size, seq, layout", [(4, 16, "zigzag"), (8, 131072, "contiguous"), (1, 4, "zigzag")])
def test_work_scene_tiles_and_bars(world_size, seq, layout):
    s = work_scene(world_size, seq, layout)
    assert validate(json.loads(json.dumps(s))) == s and len(json.dumps(s)) < 30_000
    tiles, bars = s["panels"][0]["marks"], s["panels"][1]["marks"]
    parts = 2 * world_size if layout == "zigzag" else world_size
    assert len(tiles) == parts * (parts + 1) // 2  # the lower triangle and the diagonal
    owner = {q: r for r in range(world_size) for q in range(parts) if q * (seq // parts) in positions(r, world_size,
                                                                                                       seq, layout)}
    assert all(m["tip"].endswith(f"rank {owner[int(m['y0'])]}") for m in tiles)
    solid = [m["y1"] for m in bars if m["kind"] == "rect" and m["fill"] != "none"]
    assert solid == list(work_per_rank(world_size, seq, layout))
    assert f"{imbalance(solid):.2f}" in s["panels"][1]["title"]


def test_variants_scene_bars_are_costs_and_a_missing_variant_is_named():
    rows = compare(world_size=4, seq=64, heads=6, head_dim=8)  # 6 heads: Ulysses cannot split them over 4
    s = variants_scene(rows, "all-gather-kv")
    assert validate(json.loads(json.dumps(s))) == s
    sent, held = (p["marks"] for p in s["panels"])
    ring = costs("ring", world_size=4, seq=64, heads=6, head_dim=8)
    assert [m["x1"] for m in sent if m["kind"] == "rect"][:2] == pytest.approx(
        [ring.forward_bytes / 2**20, ring.bytes_sent / 2**20])
    assert [m["x1"] for m in held][0] == pytest.approx(ring.kv_buffer_bytes / 2**20)
    assert any(m["kind"] == "text" and m["text"].startswith("ulysses: heads do not divide") for m in sent)
    assert "▶ all-gather-kv" in [t[1] for t in s["panels"][0]["y"]["ticks"]]


# ---- the player and the explorer ------------------------------------------------------------------------------

def test_ring_player_has_a_frame_and_caption_per_ring_step():
    p = ring_player(world_size=4, seq=16, layout="zigzag")
    assert p.count == 4 and len(p.captions) == 4 and p.value == 0
    assert [f["alt"] for f in p.frames] == [ring_step_text(p.run, i) for i in range(4)]
    assert readout(p.captions[2]) == ring_step_text(p.run, 2)
    assert repr(p).startswith("▶")
    with pytest.raises(ValueError, match=re.escape("seq=10: must be divisible by 8")):
        ring_player(4, 10)


def readout(widget) -> str:
    """The text of a readout (an HTML widget, or its HTML)."""
    return html.unescape(re.sub(r"<[^>]+>", "", getattr(widget, "value", widget)))


def test_explorer_redraws_every_half_from_the_simulator():
    calls = []
    p = explorer(run=lambda **c: calls.append(c) or fake_result(**c))
    assert off_grid(p) == [] and repr(p).startswith("▶")
    assert readout(p.readouts["cp"]).startswith(work_text(4, 32768))
    for name, new in (("seq", 131072), ("cp", 8), ("layout", "contiguous"), ("variant", "ulysses")):
        p.knobs[name].value = new
        assert len(json.dumps(p.charts["work"].scene)) < 30_000
    assert p.charts["work"].scene == work_scene(8, 131072, "contiguous", alt=work_text(8, 131072))
    assert "▶ ulysses" in json.dumps(p.charts["variants"].scene, ensure_ascii=False)
    before = p.charts["moe"].scene
    p.knobs["experts"].value = 64
    assert p.charts["moe"].scene != before and "64 experts" in readout(p.readouts["moe"])
    p.knobs["ep"].value = 8
    p.knobs["experts"].value = 4  # 4 experts over 8 ranks: refused by the simulator, in the readout, in one line
    assert readout(p.readouts["moe"]).startswith("✗ experts=4: must be divisible by ep=8")
    assert p.run_controls["cp"].run_now() is not None and "moe" not in p.run_controls
    assert calls == [{"world_size": 8, "layout": "contiguous", "variant": "ulysses"}]
    assert readout(p.run_controls["cp"].readout) == run_text(fake_result(**calls[0]))
    p.knobs["cp"].value = 2  # another configuration: the old result goes
    assert p.run_controls["cp"].readout.value == ""


def test_explorer_runs_the_shown_moe_layer_through_its_callable():
    calls = []
    p = explorer(run_ep=lambda **c: calls.append(c))  # returns None: the control shows a one-line failure, no traceback
    p.knobs["capacity"].value = 0.0
    p.run_controls["moe"].run_now()
    assert calls == [{"ep": 2, "experts": 8, "top_k": 2, "capacity": 0.0}] and "cp" not in p.run_controls
    assert readout(p.run_controls["moe"].readout).startswith("real run failed: TypeError")


def test_explorer_refuses_a_start_off_its_grid_in_one_line():
    assert 32768 in SEQUENCES and 4 in CP_SIZES
    for knobs, message in (({"seq": 1000}, "seq=1000: must be one of"), ({"cp": 3}, "cp=3"),
                           ({"capacity": 0.7}, "capacity=0.7"), ({"variant": "tree"}, "variant='tree'")):
        with pytest.raises(ValueError, match=re.escape(message)):
            explorer(**knobs)


def test_the_chinese_text_has_no_english_sentence_left():
    _qkv, run = seeded_run()
    i18n.set_language("zh")
    texts = [ring_text(run, 1), work_text(4, 16), variants_text(compare(world_size=4, seq=16, heads=4, head_dim=2)),
             run_text(fake_result()), ring_step_text(run, 1)]
    for text in texts:
        assert re.search(r"[\u4e00-\u9fff]", text) and "pairs" not in text and "busiest" not in text, text
    assert "之字形" in ring_scene(run, 0)["title"]
