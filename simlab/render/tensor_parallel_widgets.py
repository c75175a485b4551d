"""Lesson 5's interactive parts: an explorer for splitting the MLP GeLU(X·A)·B, and a step player over
a tensor-parallel block's forward and backward.

- `mlp_split_frame(a_split, b_split, ranks)`: (figure, text) for one choice of splits: shapes per rank,
  the collectives the choice needs (bytes from the simulator's ring collectives) and whether the result
  is exact or wrong (`megatron_mlp` / `broken_mlp` / `split_linear`). `mlp_explorer()` wraps it in knobs.
- `steps_text`, `step_frame` and `steps_player`: `block_steps` as a table, one step at a time, and a
  Play + slider over `draw_tp_steps`, with the real run's counted collectives (`run_tp`) beside the plan.

The frames are pure, so tests need no browser.

    >>> print(mlp_split_frame("column", "row", 2, figure=False)[1].splitlines()[0])
    A by columns, B by rows on 2 ranks (X: 8 tokens × hidden 8, ffn 32, fp32) — Megatron's split
"""
from __future__ import annotations

import html

from .._checks import check_choice, check_int
from ..sim.tensor_parallel import KINDS, TPStep, shard_plan
from ..sim.tensor_parallel_choices import FFN, HIDDEN, TOKENS, mlp_inputs, split_error, sync_rows
from .mpl import figure_png
from .text import rows_table
from .tensor_parallel import draw_mlp_shards, draw_tp_steps, real_counts_line

TP_SIZES = (1, 2, 4, 8)
EXACT = 1e-12  # float64, partial sums added in another order: exact up to rounding


def _verdict(error: float) -> str:
    if error < EXACT:
        return "exact (max error < 1e-12)"
    return (f"WRONG without summing X·A before GeLU: max error {error:.3g} "
            "(GeLU(XA₁ + XA₂) ≠ GeLU(XA₁) + GeLU(XA₂))")


def mlp_split_frame(a_split: str = "column", b_split: str = "row", ranks: int = 4, seed: int = 0,
                    figure: bool = True):
    """(figure or None, text) for one choice: shapes per rank, the forward's collectives, correctness."""
    check_choice("a_split", a_split, KINDS)
    check_choice("b_split", b_split, KINDS)
    check_choice("ranks", ranks, TP_SIZES)
    x, a, b = mlp_inputs(seed)
    error = split_error(a_split, b_split, ranks, x, a, b)
    rows = sync_rows(a_split, b_split, ranks)
    shard = [tuple(shard_plan(kind, ranks, shape).rank_info(0)["shard_shape"])
             for kind, shape in ((a_split, a.shape), (b_split, b.shape))]
    name = " — Megatron's split" if (a_split, b_split) == ("column", "row") else ""
    lines = [f"A by {a_split}s, B by {b_split}s on {ranks} ranks (X: {TOKENS} tokens × hidden {HIDDEN}, "
             f"ffn {FFN}, fp32){name}",
             f"per rank: A shard {shard[0]} of {a.shape}, B shard {shard[1]} of {b.shape}",
             rows_table(rows),
             f"forward: {len(rows)} collective(s), {sum(r['bytes/rank'] for r in rows):,} B sent per rank",
             _verdict(error)]
    fig = draw_mlp_shards(a_split, b_split, ranks, HIDDEN, FFN, title=lines[0]) if figure else None
    return fig, "\n".join(lines)


def mlp_explorer(a_split: str = "column", b_split: str = "row", ranks: int = 4):
    """Pick the split of A, of B and the TP size; see the shards, the communication and the error."""
    import ipywidgets as w
    knobs = {"a_split": w.ToggleButtons(options=KINDS, value=a_split, description="A by"),
             "b_split": w.ToggleButtons(options=KINDS, value=b_split, description="B by"),
             "ranks": w.Dropdown(options=TP_SIZES, value=ranks, description="TP size")}
    text, image = w.HTML(), w.Image(format="png")

    def show(_=None) -> None:
        fig, summary = mlp_split_frame(**{k: knob.value for k, knob in knobs.items()})
        text.value = f"<pre>{html.escape(summary)}</pre>"
        image.value = figure_png(fig)

    for knob in knobs.values():
        knob.observe(show, names="value")
    show()
    return w.VBox([w.HBox(list(knobs.values())[:2]), knobs["ranks"], text, image])


def plan_steps(result: dict) -> list[TPStep]:
    """The plan a `run_tp` result carries (plain dicts, for JSON) back as `TPStep`s."""
    return [TPStep(**{**s, "bytes_sent": tuple(s["bytes_sent"])}) for s in result["plan"]]


def steps_text(steps, real: dict | None = None) -> str:
    """The block's steps as a table (f and g marked), then the real run's counts beside the plan's."""
    rows = [{"#": k, "phase": s.phase, "op": s.name, "every rank computes": s.compute,
             "collective": s.collective, "B/rank": s.bytes_sent[0]} for k, s in enumerate(steps)]
    table = "\n".join(line.rstrip() for line in rows_table(rows).splitlines())
    return table if real is None else table + "\n" + real_counts_line(real)


def step_frame(k: int, steps, real: dict | None = None) -> str:
    """The text the player shows at step k."""
    check_int("k", k, 0, len(steps) - 1)
    s = steps[k]
    comm = f"{s.collective}, {s.bytes_sent[0]} B sent per rank" if s.collective != "none" else "no communication"
    lines = [f"step {k}/{len(steps) - 1} ({s.phase}) {s.name}: {s.compute}", f"  {comm}"]
    if real is not None and s.collective != "none":
        lines.append(f"  real run: {s.phase} {s.collective} ×{real[f'allreduce_calls_{s.phase}']}"
                     if s.collective == "all-reduce" else f"  real run: {real['calls_per_rank'][0]}")
    return "\n".join(lines)


def steps_player(steps, real: dict | None = None, interval_ms: int = 1200):
    """Play + slider (jslink'ed) over the steps: `draw_tp_steps` with the step outlined, and its text."""
    import ipywidgets as w
    last = len(steps) - 1
    play = w.Play(value=0, min=0, max=last, step=1, interval=interval_ms, description="play")
    slider = w.IntSlider(value=0, min=0, max=last, description="step")
    w.jslink((play, "value"), (slider, "value"))  # Play drives the slider even without a kernel
    text, image = w.HTML(), w.Image(format="png")

    def show(k: int) -> None:
        text.value = f"<pre>{html.escape(step_frame(k, steps, real))}</pre>"
        image.value = figure_png(draw_tp_steps(steps, current=k, real=real))

    slider.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return w.VBox([w.HBox([play, slider]), text, image])
