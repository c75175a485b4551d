"""Lesson 5's interactive parts: an explorer for splitting the MLP GeLU(X·A)·B, and a step player over
a tensor-parallel block's forward and backward.

- `mlp_split_frame(a_split, b_split, ranks)`: (figure, text) for one choice of splits: shapes per rank,
  the collectives the choice needs (bytes from the simulator's ring collectives) and whether the result
  is exact or wrong (`split_forward`, with and without the sync before GeLU). `mlp_explorer(run=…)` wraps
  it in knobs (the picture drawn in the browser from `mlp_scene_of`'s scene by a `render.chart.Chart`, the
  text under it as its readout and text alternative), a button that runs the shown choice on real
  processes (`run`, e.g. `parity.tensor_parallel.run_tp_split`, passed in by the notebook) and sets the
  real run's collectives,
  bytes and errors beside the simulated ones (`real_split_rows`), and Perfetto links to both traces.
- `steps_text`, `step_frame` and `steps_player`: `block_steps` as a table, one step at a time, and a
  player over `draw_tp_steps` (every frame drawn once, stepped in the browser), with the real run's
  counted collectives (`run_tp`) beside the plan.

The frames are pure, so tests need no browser. Text is marked for translation (`simlab.i18n`), including the
simulator's words of `SYNCS` (`SYNC_WORDS`); the knobs' values stay the simulator's "column" / "row".

    >>> print(mlp_split_frame("column", "row", 2, figure=False)[1].splitlines()[0])
    A by columns, B by rows on 2 ranks (X: 8 tokens × hidden 8, ffn 32, fp32) — Megatron's split
"""
from __future__ import annotations

from .._checks import check_choice, check_int
from ..i18n import N_, _
from ..sim.tensor_parallel import KINDS, TPStep, gelu, shard_plan
from ..sim.tensor_parallel_choices import (
    FFN,
    HIDDEN,
    SYNCS,
    TOKENS,
    mlp_inputs,
    split_error,
    split_forward,
    split_trace,
    sync_rows,
)
from .chart import Chart
from .controls import Panel, readout_html, run_control, trace_link
from .player import frame_player
from .style import rows_table
from .tensor_parallel import count_of, draw_mlp_shards, draw_tp_steps, real_counts_line, shown
from .tensor_parallel_scene import mlp_scene

TP_SIZES = (1, 2, 4, 8)
EXACT = 1e-12  # float64, partial sums added in another order: exact up to rounding
REAL_EXACT = 1e-4  # the real run is fp32: rounding of sums of ~30 products of size ~10


# where each choice's collectives sit and what they move (sim.tensor_parallel_choices.SYNCS), as shown
SYNC_WORDS = (N_("g, after B"), N_("between A and B"), N_("after B"), N_("before GeLU"), N_("partial Z"),
              N_("Z columns"), N_("partial X·A"))


def _verdict(error: float) -> str:
    if error < EXACT:
        return _("exact (max error < 1e-12)")
    return _("WRONG without summing X·A before GeLU: max error {error} "
             "(GeLU(XA₁ + XA₂) ≠ GeLU(XA₁) + GeLU(XA₂))").format(error=f"{error:.3g}")


CHOICES = {("column", "row"): N_("A by columns, B by rows"), ("column", "column"): N_("A by columns, B by columns"),
           ("row", "row"): N_("A by rows, B by rows"), ("row", "column"): N_("A by rows, B by columns")}


def choice_title(a_split: str, b_split: str) -> str:
    """'A by columns, B by rows': one choice of splits, in the language in force."""
    return _(CHOICES[a_split, b_split])


def shown_sync_rows(a_split: str, b_split: str, rows: list[dict]) -> list[dict]:
    """`sync_rows` as the explorer's table shows them: headers and the simulator's words translated (the
    tensor's name is SYNCS's; its shape, appended by sync_rows, stays)."""
    return [{_("where"): _(where), _("collective"): shown(op), _("tensor"): _(what) + row["tensor"][len(what):],
             _("bytes/rank"): row["bytes/rank"]}
            for row, (where, op, what, _size) in zip(rows, SYNCS[a_split, b_split])]


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
    name = _(" — Megatron's split") if (a_split, b_split) == ("column", "row") else ""
    head = _("{choice} on {ranks}").format(choice=choice_title(a_split, b_split), ranks=count_of(ranks, "rank"))
    lines = [head + _(" (X: {tokens} tokens × hidden {hidden}, ffn {ffn}, fp32)").format(
                 tokens=TOKENS, hidden=HIDDEN, ffn=FFN) + name,
             _("per rank: A shard {a_shard} of {a_shape}, B shard {b_shard} of {b_shape}").format(
                 a_shard=shard[0], a_shape=a.shape, b_shard=shard[1], b_shape=b.shape),
             rows_table(shown_sync_rows(a_split, b_split, rows)),
             _("forward: {collectives}, {nbytes} B sent per rank").format(
                 collectives=count_of(len(rows), "collective"), nbytes=f"{sum(r['bytes/rank'] for r in rows):,}"),
             _verdict(error)]
    fig = draw_mlp_shards(a_split, b_split, ranks, HIDDEN, FFN, title=head) if figure else None
    return fig, "\n".join(lines)


def real_split_rows(real: dict) -> list[dict]:
    """A `run_tp_split` result beside the simulator: collectives, bytes per rank, errors (one row each)."""
    n, choice, (x, a, b) = real["world_size"], (real["a_split"], real["b_split"]), mlp_inputs()
    sim_error = split_error(*choice, n, x, a, b)  # the shortcut's
    synced = float(abs(split_forward(*choice, n, x, a, b)[0] - gelu(x @ a) @ b).max())  # with the collectives
    small = lambda e, floor, note: f"{e:.3g}" if e >= floor else f"{e:.1g}{note}"  # noqa: E731 — rounding, not a value
    sim, run = _("simulated"), _("real run")
    sent = real["bytes_sent_per_rank"]
    return [{"": _("collectives, in order"), sim: ", ".join(map(shown, real["plan_collectives"])),
             run: ", ".join(map(shown, real["collectives"]))},
            {"": _("bytes sent per rank"), sim: f"{real['plan_bytes_sent_per_rank'][0]:,}",
             run: f"{sent[0]:,}" + ("" if len(set(sent)) == 1 else _(" (ranks: {sent})").format(sent=sent))},
            {"": _("max error, with these collectives"), sim: small(synced, EXACT, " (fp64)"),
             run: small(real["max_abs_diff_vs_reference"], REAL_EXACT, " (fp32)")},
            {"": _("max error, no sync before GeLU"), sim: small(sim_error, EXACT, " (fp64)"),
             run: small(real["shortcut_error"], REAL_EXACT, " (fp32)")},
            {"": _("processes"), sim: "—", run: f"{n} ({real['backend']})"}]


def real_split_line(real: dict) -> str:
    """One line for the explorer's picture: the real run's collectives and errors."""
    same = real["collectives"] == real["plan_collectives"] and \
        real["bytes_sent_per_rank"] == real["plan_bytes_sent_per_rank"]
    return _("real run, {processes}: {collectives} ({same}), error {error}; without the sync before GeLU: error "
             "{shortcut}").format(processes=count_of(real["world_size"], "process"),
                                  collectives=count_of(len(real["collectives"]), "collective"),
                                  same=_("as simulated") if same else _("NOT as simulated"),
                                  error=f"{real['max_abs_diff_vs_reference']:.1g}",
                                  shortcut=f"{real['shortcut_error']:.3g}")


def mlp_scene_of(a_split: str, b_split: str, ranks: int, summary: str = "") -> dict:
    """The explorer's picture of one choice as a scene for the browser (`tensor_parallel_scene.mlp_scene`),
    titled as `mlp_split_frame`'s figure; `summary` (its text) is the scene's text alternative."""
    return mlp_scene(a_split, b_split, ranks, hidden=HIDDEN, ffn=FFN, alt=summary, title=_("{choice} on {ranks}").format(
        choice=choice_title(a_split, b_split), ranks=count_of(ranks, "rank")))


def mlp_explorer(a_split: str = "column", b_split: str = "row", ranks: int = 4, run=None):
    """Pick the split of A, of B and the TP size; see the shards, the communication and the error. With
    `run(a_split=, b_split=, world_size=)` (e.g. `run_tp_split`) a button runs the shown choice for real.
    The picture is a `render.chart.Chart` (drawn in the browser: a knob sends a scene, not a figure); the
    readout under it is its text alternative. `.knobs`, `.chart`, `.readout` and `.run_control` are its parts."""
    import ipywidgets as w
    kinds = [(_(kind), kind) for kind in (N_("column"), N_("row"))]  # (label, value): the value stays the sim's
    knobs = {"a_split": w.ToggleButtons(options=kinds, value=a_split, description=_("A by")),
             "b_split": w.ToggleButtons(options=kinds, value=b_split, description=_("B by")),
             "ranks": w.Dropdown(options=TP_SIZES, value=ranks, description=_("TP size"))}
    chart, text, links = Chart(hint=_("▶ run this cell to get the split explorer")), w.HTML(), w.HBox()
    choice = lambda: {k: knob.value for k, knob in knobs.items()}  # noqa: E731 — the knobs' values, read at each redraw

    def show(_=None) -> None:
        c = choice()
        _fig, summary = mlp_split_frame(**c, figure=False)
        text.value = readout_html(summary)
        chart.scene = mlp_scene_of(c["a_split"], c["b_split"], c["ranks"], summary)
        links.children = (trace_link(split_trace(*c.values()), "tp_split_simulated.json"),)
        if control is not None:  # a result of another choice would be misread as this one's
            control.readout.value, control.extra.children, control.progress.value = "", (), ""
            control.image.layout.display = "none"

    def show_real(real: dict):  # a one-off result: its figure is drawn once, in the kernel
        c = choice()
        fig = draw_mlp_shards(c["a_split"], c["b_split"], c["ranks"], HIDDEN, FFN,
                              title=choice_title(c["a_split"], c["b_split"]), footer=real_split_line(real))
        return fig, rows_table(real_split_rows(real)), [trace_link(real["trace"], "tp_split_real.json")]

    control = None
    if run is not None:
        control = run_control(lambda: run(a_split=knobs["a_split"].value, b_split=knobs["b_split"].value,
                                          world_size=knobs["ranks"].value), show_real,
                              label=_("run this split on real processes"))
    for knob in knobs.values():
        knob.observe(show, names="value")
    show()
    parts = [w.HBox(list(knobs.values())[:2]), knobs["ranks"], chart, text, links]
    panel = Panel(parts + ([control] if control is not None else []),
                  hint=_("▶ run this cell to get the split explorer"))
    panel.knobs, panel.chart, panel.readout, panel.run_control = knobs, chart, text, control
    return panel


def plan_steps(result: dict) -> list[TPStep]:
    """The plan a `run_tp` result carries (plain dicts, for JSON) back as `TPStep`s."""
    return [TPStep(**{**s, "bytes_sent": tuple(s["bytes_sent"])}) for s in result["plan"]]


def steps_text(steps, real: dict | None = None) -> str:
    """The block's steps as a table (f and g marked), then the real run's counts beside the plan's."""
    rows = [{"#": k, _("phase"): shown(s.phase), _("op"): shown(s.name), _("every rank computes"): shown(s.compute),
             _("collective"): shown(s.collective), _("B/rank"): s.bytes_sent[0]} for k, s in enumerate(steps)]
    table = "\n".join(line.rstrip() for line in rows_table(rows).splitlines())
    return table if real is None else table + "\n" + real_counts_line(real)


def step_frame(k: int, steps, real: dict | None = None) -> str:
    """The text the player shows at step k."""
    check_int("k", k, 0, len(steps) - 1)
    s = steps[k]
    comm = _("{collective}, {nbytes} B sent per rank").format(collective=shown(s.collective), nbytes=s.bytes_sent[0]) \
        if s.collective != "none" else _("no communication")
    lines = [_("step {k}/{last} ({phase}) {op}: {compute}").format(
        k=k, last=len(steps) - 1, phase=shown(s.phase), op=shown(s.name), compute=shown(s.compute)), f"  {comm}"]
    if real is not None and s.collective != "none":
        lines.append("  " + (_("real run: {phase} {collective} ×{count}").format(
            phase=shown(s.phase), collective=shown(s.collective), count=real[f"allreduce_calls_{s.phase}"])
            if s.collective == "all-reduce" else _("real run: {calls}").format(calls=real["calls_per_rank"][0])))
    return "\n".join(lines)


def steps_player(steps, real: dict | None = None, seconds: float = 10.0):
    """A player over the steps: `draw_tp_steps` with step k outlined, its text under it (drawn once each)."""
    frames = [draw_tp_steps(steps, current=k, real=real) for k in range(len(steps))]
    return frame_player(frames, captions=[readout_html(step_frame(k, steps, real)) for k in range(len(steps))],
                        seconds=seconds, hint=_("▶ run this cell to get the step player"))
