"""Lesson 6's interactive parts: choose a model, a machine and a batch, and see which strategy wins and why;
then run a scaled-down version of the winner for real on this machine.

- `strategy_frame(...)`: (figure, text) for one question: the advisor's verdict (`advisor_text`); the winner
  beside the best plan of each rival family, memory per GPU and where the step goes (`sim.advisor.by_family`,
  `draw_plan_memory`, `draw_time_breakdown`); the winner's pipeline as lesson 4's Gantt chart, stepped by
  lesson 4's simulator with this model's stage times (`sim.hybrid_time.pipeline_trace`).
- `strategy_explorer(run=None)` wraps it in knobs (a primer scenario to start from, the model preset and its
  sizes, GPU; GPUs, GPUs per node and network as sliders that start on their grids; batch), built from the
  shared toolkit (`render.controls`: a `Panel` whose saved form is a hint, the advisor's plans as a table —
  the pictures' text alternative) and, given `run` (e.g. `parity.hybrid.run_hybrid`; this module never
  starts processes itself), a `run_control` that runs `scaled_down(winner)` for real and offers its trace
  for Perfetto. Its pictures are the same three, drawn in the browser (`render.chart.Chart`s of
  `render.hybrid_scene.strategy_scenes`): a knob sends scenes, never a figure, and an answer is remembered
  (`explored`), so going back to a setting is instant.

The frames and scenes are pure, so tests need no browser.

    >>> print(strategy_frame(scenario="nodes-slow", figure=False)[1].splitlines()[0])
    gpt3-175b (175B parameters) on 1024 × a100-80gb, 25 Gbit/s per node between nodes, batch 1536
    >>> scaled_down({"tp": 8, "pp": 16, "dp": 8, "zero": 1, "schedule": "interleaved", "chunks": 3})
    {'dp': 2, 'pp': 2, 'tp': 2, 'zero': 1, 'schedule': 'interleaved', 'chunks': 2}
"""
from __future__ import annotations

from functools import lru_cache

from .._checks import check_choice
from ..i18n import _, language
from ..sim.advisor import search
from ..sim.hardware import GPUS
from ..sim.hybrid_scenarios import BY_KEY, GPT2, WIDE, Scenario
from ..sim.model import PRESETS
from .hybrid_advisor import COLUMNS, _config_row, advisor_text
from .hybrid_plans import draw_plan_memory, draw_time_breakdown
from .hybrid_run import draw_predicted_vs_real, run_text, time_text
from .hybrid_scene import best_plan, compared_plans, no_pipeline, pipeline_window, strategy_scenes
from .pipeline import draw_gantt
from .style import MIN_FONT

MODELS = {**PRESETS, GPT2.name: GPT2, WIDE.name: WIDE}
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
NETWORKS = (25.0, 100.0, 400.0, 1600.0)  # Gbit/s per node: one 25 GbE link … 8 × 200 Gb/s InfiniBand


def _question(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch, sizes) -> Scenario:
    if scenario is not None:
        check_choice("scenario", scenario, tuple(BY_KEY))
        return BY_KEY[scenario]
    check_choice("model", model, tuple(MODELS))
    # the rest is checked where it is used: sizes by Transformer, the machine by `cluster`, the batch by `search`
    chosen = {k: v for k, v in sizes.items() if v is not None}
    m = MODELS[model].with_(**chosen) if chosen else MODELS[model]
    return Scenario("custom", "", "", "", m, gpu, gpus, global_batch,
                    {"inter_node_gbps": inter_node_gbps, "gpus_per_node": gpus_per_node})


def strategy_frame(scenario: str | None = None, model: str = "gpt3-175b", gpu: str = "a100-80gb", gpus: int = 8,
                   gpus_per_node: int = 8, inter_node_gbps: float = 1600.0, global_batch: int = 64,
                   layers: int | None = None, hidden: int | None = None, heads: int | None = None,
                   top: int = 5, figure: bool = True):
    """(figure or None, text): the advisor's answer for a scenario (its key) or for the knobs given
    (`layers`, `hidden`, `heads` change the preset's sizes)."""
    q, c, result, text = _answer(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch, layers,
                                 hidden, heads, top)
    return (_figure(q, c, result) if figure else None), text


def _answer(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch, layers, hidden, heads, top):
    """(question, cluster, the advisor's whole result, `strategy_frame`'s text)."""
    q = _question(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch,
                  {"layers": layers, "hidden": hidden, "heads": heads})
    c = q.cluster()
    result = search(q.model, c, q.global_batch, top=top)
    lines = [_(q.title())]
    if q.primer:
        # the primer's sentence is Chinese already: its English gloss only in English
        lines += [_("primer ({where}): {primer}").format(where=q.where, primer=q.primer)]
        lines += [f"  {q.english}"] if language() == "en" else []
    lines.append(advisor_text(result, top=top))
    return q, c, result, "\n".join(lines)


def _figure(q: Scenario, c, result: dict):
    """The static picture: memory per GPU and where a step goes for the compared plans; under them the best
    plan's pipeline as lesson 4's Gantt chart (or a line saying why there is none)."""
    from matplotlib.figure import Figure
    plans, plan = compared_plans(q, c, result), best_plan(result)
    piped = plan is not None and plan.pp > 1
    fig = Figure(figsize=(11, 8.2 if piped else 4.8), layout="constrained")  # 11: 10 pt stays 10 px in a notebook
    grid = fig.add_gridspec(2 if piped else 1, 2, height_ratios=(1.3, 1) if piped else None, width_ratios=(1, 1.25))
    memory, time = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    if plans:  # a family list that matched nothing draws no bars
        draw_plan_memory(plans, c.gpu.usable_memory, ax=memory, title=_("memory per GPU"))
        draw_time_breakdown(plans, ax=time, title=_("where one step goes"))
    if piped:
        trace, until, title = pipeline_window(q, c, plan)
        draw_gantt(trace, plan.pp, ax=fig.add_subplot(grid[1, :]), until=until, span=until, title=title)
    else:
        fig.suptitle(no_pipeline(plan), fontsize=MIN_FONT, x=0.02, ha="left")
    return fig


@lru_cache(maxsize=32)
def explored(knobs: tuple, lang: str):
    """The strategy explorer's answer for one position of its knobs ((name, value) pairs), in language `lang`:
    (text, the advisor's whole result, `strategy_scenes`). Remembered for 32 positions, so going back to a
    setting — how a learner compares two — answers at once; a first visit costs the advisor's search (its two
    evaluations of every plan, `search` and `by_family`: about 0.5 s for 1,024 GPUs on two busy cores)."""
    q, c, result, text = _answer(None, **dict(knobs), top=5)
    return text, result, strategy_scenes(q, c, result)


def scaled_down(config: dict) -> dict:
    """A plan's shape on ≤ 8 local processes: each of dp, pp, tp that is > 1 becomes 2; ZeRO 1-3 becomes
    ZeRO-1 (the executor's), interleaved keeps 2 chunks."""
    out = {k: min(config[k], 2) for k in ("dp", "pp", "tp")}
    out |= {"zero": min(config["zero"], 1), "schedule": config["schedule"] if out["pp"] > 1 else "1f1b"}
    out["schedule"] = "1f1b" if out["schedule"] == "gpipe" else out["schedule"]
    out["chunks"] = 2 if out["schedule"] == "interleaved" else 1
    return out


def explorer_rows(result: dict, top: int = 5) -> list[dict]:
    """The advisor's `top` plans as table rows (the columns of `advisor_text`), best first."""
    return [dict(zip(COLUMNS, _config_row(i, p))) for i, p in enumerate(result["candidates"][:top], 1)]


def _slider(name: str, grid, value, label: str, fmt):
    import ipywidgets as w
    if value not in grid:  # a knob must start on its grid, or the browser moves it (and redraws)
        raise ValueError(f"{name}={value!r}: must be one of {', '.join(fmt(v) for v in grid)}")
    return w.SelectionSlider(options=[(fmt(v), v) for v in grid], value=value, description=label,
                             continuous_update=False, style={"description_width": "initial"})


def _knob_values(s: Scenario) -> dict:
    """What a scenario puts in the knobs (a one-node case keeps the network knob at its default)."""
    return {"model": s.model.name, "layers": s.model.layers, "hidden": s.model.hidden, "heads": s.model.heads,
            "gpu": s.gpu, "gpus": s.gpus, "gpus_per_node": s.cluster_args.get("gpus_per_node", 8),
            "inter_node_gbps": float(s.cluster_args.get("inter_node_gbps", 1600.0)), "global_batch": s.global_batch}


def _small_text(small: dict) -> str:
    n = small["dp"] * small["pp"] * small["tp"]
    return (_("scaled down for this machine: dp={dp} × pp={pp} × tp={tp} = {n} process{es}, {schedule}").format(
        dp=small["dp"], pp=small["pp"], tp=small["tp"], n=n, es="es" * (n > 1), schedule=small["schedule"])
            + (f" ×{small['chunks']}" if small["chunks"] > 1 else "")
            + f", ZeRO-{small['zero']}" * (small["zero"] > 0))


def strategy_explorer(scenario: str = "nodes-slow", run=None, predict=None):
    """Pick a primer scenario, then change the model, its sizes, the GPUs, the network or the batch; with
    `run`, a button runs the winner scaled down (`scaled_down`) on local processes, and with `predict`
    (result → predicted trace, e.g. `parity.hybrid.predicted_trace`) draws the prediction above the run.
    Returns a `Panel`; `.knobs`, `.scenario`, `.verdict` (the advisor's answer: the charts' text alternative),
    `.charts` (memory, time, gantt: `render.chart.Chart`s, drawn in the browser), `.note`, `.small` and
    `.run_control` are its parts, for tests and curious learners."""
    import ipywidgets as w

    from .chart import Chart
    from .controls import Panel, readout_html, run_control, table_html, trace_link
    check_choice("scenario", scenario, tuple(BY_KEY))
    start = _knob_values(BY_KEY[scenario])
    size = lambda name, top: w.BoundedIntText(value=start[name], min=1, max=top, description=name,  # noqa: E731 — a one-line local helper
                                              layout=w.Layout(width="180px"))
    knobs = {"model": w.Dropdown(options=sorted(MODELS), value=start["model"], description=_("model")),
             "layers": size("layers", 1024), "hidden": size("hidden", 1 << 17), "heads": size("heads", 1024),
             "gpu": w.Dropdown(options=tuple(GPUS), value=start["gpu"], description="GPU"),
             "gpus": _slider("gpus", GPU_COUNTS, start["gpus"], _("GPUs"), str),
             "gpus_per_node": _slider("gpus_per_node", (1, 2, 4, 8), start["gpus_per_node"], _("GPUs per node"), str),
             "inter_node_gbps": _slider("inter_node_gbps", NETWORKS, start["inter_node_gbps"],
                                        _("network per node"), lambda v: f"{v:g} Gbit/s"),
             "global_batch": w.BoundedIntText(value=start["global_batch"], min=1, max=1 << 20, description=_("batch"),
                                              layout=w.Layout(width="200px"))}
    pick = w.Dropdown(options=[(f"{s.where}: {s.english}", s.key) for s in BY_KEY.values()], value=scenario,
                      description=_("scenario"), layout=w.Layout(width="95%"))
    verdict, small_line, note = w.HTML(), w.HTML(), w.HTML()
    charts = {}  # "memory", "time", "gantt": one Chart each, made by the first answer
    busy, best = [], {}  # busy: a scenario is filling the knobs, so they redraw once, not nine times

    def show(change=None) -> None:
        if busy:
            return
        try:
            summary, result, scenes = explored(tuple((k, knob.value) for k, knob in knobs.items()), language())
        except ValueError as err:  # e.g. a batch no layout divides: say so in one line, keep the last picture
            verdict.value = readout_html(str(err).splitlines()[0])
            return
        lines = summary.split("\n")  # the question, "N plans evaluated …", the text table, "why:" …
        counted = next(i for i, line in enumerate(lines) if line.split(" ")[0].isdigit())  # in any language
        rows = explorer_rows(result)
        table = table_html(rows, list(COLUMNS)) if rows else ""
        verdict.value = readout_html("\n".join(lines[:counted + 1])) + table + readout_html(
            "\n".join(lines[lines.index(_("why:")):]))
        for name in ("memory", "time", "gantt"):  # a scene each; a picture with nothing to draw is hidden
            chart = charts.setdefault(name, Chart())  # its hint: chart.py's own
            if scenes[name] is not None:
                chart.scene = scenes[name]
            chart.layout.display = None if scenes[name] is not None else "none"
        note.value = readout_html(scenes["note"]) if scenes["note"] else ""
        best.clear()
        best.update(result["best"]["config"] if result["best"] is not None else {})
        small_line.value = readout_html(_small_text(scaled_down(best)) if best else _("nothing fits: nothing to run"))

    def choose(change) -> None:
        busy.append(1)
        for name, value in _knob_values(BY_KEY[change["new"]]).items():
            knobs[name].value = value
        busy.clear()
        show()

    def preset(change) -> None:  # a new preset brings its own sizes
        m = MODELS[change["new"]]
        busy.append(1)
        knobs["layers"].value, knobs["hidden"].value, knobs["heads"].value = m.layers, m.hidden, m.heads
        busy.clear()

    pick.observe(choose, names="value")
    knobs["model"].observe(preset, names="value")
    for knob in knobs.values():
        knob.observe(show, names="value")
    show()
    children = [pick, w.HBox([knobs[k] for k in ("model", "layers", "hidden", "heads")]),
                w.HBox([knobs[k] for k in ("gpu", "gpus", "gpus_per_node")]),
                w.HBox([knobs[k] for k in ("inter_node_gbps", "global_batch")]), verdict,
                w.HBox([charts["memory"], charts["time"]]), note, charts["gantt"]]
    control = None
    if run is not None:
        def run_small() -> dict:
            if not best:
                raise ValueError(_("nothing fits: nothing to run"))
            small = scaled_down(best)
            return run(tp=small["tp"], dp=small["dp"], pp=small["pp"], zero=small["zero"],
                       schedule=small["schedule"], chunks=small["chunks"])

        def shown(result: dict):
            fig = draw_predicted_vs_real(predict(result), result) if predict is not None else None
            return fig, run_text(result) + "\n" + time_text(result), [trace_link(result["trace"], "hybrid_run.json")]

        control = run_control(run_small, shown, label=_("run it for real (scaled down)"),
                              hint=_("▶ run this cell to get the real-run button"))
        children += [small_line, control]
    panel = Panel(children, hint=_("▶ run this cell to get the strategy explorer: a primer case, then your own "
                                   "model, GPUs, network and batch"))
    panel.knobs, panel.scenario, panel.verdict, panel.charts, panel.note = knobs, pick, verdict, charts, note
    panel.small, panel.run_control = small_line, control
    return panel
