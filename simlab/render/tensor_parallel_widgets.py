"""Lesson 5's interactive parts: an explorer for splitting the MLP GeLU(X·A)·B, and a step player over
a tensor-parallel block's forward and backward.

- `mlp_split_frame(a_split, b_split, ranks)`: (figure, text) for one choice of splits: shapes per rank,
  the collectives the choice needs (bytes from the simulator's ring collectives) and whether the result
  is exact or wrong (`split_forward`, with and without the sync before GeLU). `mlp_explorer(run=…)` wraps
  it in knobs, a button that runs the shown choice on real processes (`run`, e.g.
  `parity.tensor_parallel.run_tp_split`, passed in by the notebook) and sets the real run's collectives,
  bytes and errors beside the simulated ones (`real_split_rows`), and Perfetto links to both traces.
- `steps_text`, `step_frame` and `steps_player`: `block_steps` as a table, one step at a time, and a
  player over `draw_tp_steps` (every frame drawn once, stepped in the browser), with the real run's
  counted collectives (`run_tp`) beside the plan.

The frames are pure, so tests need no browser.

    >>> print(mlp_split_frame("column", "row", 2, figure=False)[1].splitlines()[0])
    A by columns, B by rows on 2 ranks (X: 8 tokens × hidden 8, ffn 32, fp32) — Megatron's split
"""
from __future__ import annotations

from .._checks import check_choice, check_int
from ..sim.tensor_parallel import KINDS, TPStep, gelu, shard_plan
from ..sim.tensor_parallel_choices import (FFN, HIDDEN, TOKENS, mlp_inputs, split_error, split_forward, split_trace,
                                           sync_rows)
from .controls import Panel, figure_image, readout_html, run_control, show_figure, trace_link
from .player import frame_player
from .tensor_parallel import draw_mlp_shards, draw_tp_steps, real_counts_line
from .text import rows_table

TP_SIZES = (1, 2, 4, 8)
EXACT = 1e-12  # float64, partial sums added in another order: exact up to rounding
REAL_EXACT = 1e-4  # the real run is fp32: rounding of sums of ~30 products of size ~10


def plural(count: int, noun: str) -> str:
    """'1 rank', '4 ranks', '2 processes': never '1 ranks'."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}{'es' if noun.endswith('s') else 's'}"


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
    lines = [f"A by {a_split}s, B by {b_split}s on {plural(ranks, 'rank')} (X: {TOKENS} tokens × hidden {HIDDEN}, "
             f"ffn {FFN}, fp32){name}",
             f"per rank: A shard {shard[0]} of {a.shape}, B shard {shard[1]} of {b.shape}",
             rows_table(rows),
             f"forward: {plural(len(rows), 'collective')}, {sum(r['bytes/rank'] for r in rows):,} B sent per rank",
             _verdict(error)]
    fig = draw_mlp_shards(a_split, b_split, ranks, HIDDEN, FFN, title=lines[0].split(" (X:")[0]) if figure else None
    return fig, "\n".join(lines)


def real_split_rows(real: dict) -> list[dict]:
    """A `run_tp_split` result beside the simulator: collectives, bytes per rank, errors (one row each)."""
    n, choice, (x, a, b) = real["world_size"], (real["a_split"], real["b_split"]), mlp_inputs()
    sim_error = split_error(*choice, n, x, a, b)  # the shortcut's
    synced = float(abs(split_forward(*choice, n, x, a, b)[0] - gelu(x @ a) @ b).max())  # with the collectives
    small = lambda e, floor, note: f"{e:.3g}" if e >= floor else f"{e:.1g}{note}"  # noqa: E731  rounding, not a value
    return [{"": "collectives, in order", "simulated": ", ".join(real["plan_collectives"]),
             "real run": ", ".join(real["collectives"])},
            {"": "bytes sent per rank", "simulated": f"{real['plan_bytes_sent_per_rank'][0]:,}",
             "real run": f"{real['bytes_sent_per_rank'][0]:,}" + (
                 "" if len(set(real["bytes_sent_per_rank"])) == 1 else f" (ranks: {real['bytes_sent_per_rank']})")},
            {"": "max error, with these collectives", "simulated": small(synced, EXACT, " (fp64)"),
             "real run": small(real["max_abs_diff_vs_reference"], REAL_EXACT, " (fp32)")},
            {"": "max error, no sync before GeLU", "simulated": small(sim_error, EXACT, " (fp64)"),
             "real run": small(real["shortcut_error"], REAL_EXACT, " (fp32)")},
            {"": "processes", "simulated": "—", "real run": f"{n} ({real['backend']})"}]


def real_split_line(real: dict) -> str:
    """One line for the explorer's picture: the real run's collectives and errors."""
    same = real["collectives"] == real["plan_collectives"] and \
        real["bytes_sent_per_rank"] == real["plan_bytes_sent_per_rank"]
    return (f"real run, {plural(real['world_size'], 'process')}: {plural(len(real['collectives']), 'collective')}"
            f" ({'as simulated' if same else 'NOT as simulated'}), error {real['max_abs_diff_vs_reference']:.1g}; "
            f"without the sync before GeLU: error {real['shortcut_error']:.3g}")


def mlp_explorer(a_split: str = "column", b_split: str = "row", ranks: int = 4, run=None):
    """Pick the split of A, of B and the TP size; see the shards, the communication and the error. With
    `run(a_split=, b_split=, world_size=)` (e.g. `run_tp_split`) a button runs the shown choice for real."""
    import ipywidgets as w
    knobs = {"a_split": w.ToggleButtons(options=KINDS, value=a_split, description="A by"),
             "b_split": w.ToggleButtons(options=KINDS, value=b_split, description="B by"),
             "ranks": w.Dropdown(options=TP_SIZES, value=ranks, description="TP size")}
    image, text, links = figure_image(), w.HTML(), w.HBox()
    choice = lambda: {k: knob.value for k, knob in knobs.items()}  # noqa: E731

    def show(_=None) -> None:
        fig, summary = mlp_split_frame(**choice())
        text.value = readout_html(summary)
        show_figure(image, fig)
        links.children = (trace_link(split_trace(*choice().values()), "tp_split_simulated.json"),)
        if control is not None:  # a result of another choice would be misread as this one's
            control.readout.value, control.extra.children, control.progress.value = "", (), ""
            control.image.layout.display = "none"

    def show_real(real: dict):
        c = choice()
        fig = draw_mlp_shards(c["a_split"], c["b_split"], c["ranks"], HIDDEN, FFN,
                              title=f"A by {c['a_split']}s, B by {c['b_split']}s", footer=real_split_line(real))
        return fig, rows_table(real_split_rows(real)), [trace_link(real["trace"], "tp_split_real.json")]

    control = None
    if run is not None:
        control = run_control(lambda: run(a_split=knobs["a_split"].value, b_split=knobs["b_split"].value,
                                          world_size=knobs["ranks"].value), show_real,
                              label="run this split on real processes")
    for knob in knobs.values():
        knob.observe(show, names="value")
    show()
    parts = [w.HBox(list(knobs.values())[:2]), knobs["ranks"], image, text, links]
    return Panel(parts + ([control] if control is not None else []),
                 hint="▶ run this cell to get the split explorer")


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


def steps_player(steps, real: dict | None = None, seconds: float = 10.0):
    """A player over the steps: `draw_tp_steps` with step k outlined, its text under it (drawn once each)."""
    frames = [draw_tp_steps(steps, current=k, real=real) for k in range(len(steps))]
    return frame_player(frames, captions=[readout_html(step_frame(k, steps, real)) for k in range(len(steps))],
                        seconds=seconds, hint="▶ run this cell to get the step player")
