"""Lesson 6's interactive parts: choose a model, a machine and a batch, and see which strategy wins and why;
then run a scaled-down version of the winner for real on this machine.

- `strategy_frame(...)`: (figure, text) for one question: the advisor's verdict (`advisor_text`); the winner
  beside the best plan of each rival family, memory per GPU and where the step goes (`sim.advisor.by_family`,
  `draw_plan_memory`, `draw_time_breakdown`); the winner's pipeline as lesson 4's Gantt chart, stepped by
  lesson 4's simulator with this model's stage times (`sim.hybrid_time.pipeline_trace`).
- `strategy_explorer(run=None)` wraps it in knobs (a primer scenario to start from, the model preset and its
  sizes, GPU, GPUs, GPUs per node, network, batch) and, given `run` (e.g. `parity.hybrid.run_hybrid`; this
  module never starts processes itself), a button that runs `scaled_down(winner)` for real.

The frames are pure, so tests need no browser.

    >>> print(strategy_frame(scenario="nodes-slow", figure=False)[1].splitlines()[0])
    gpt3-175b (175B parameters) on 1024 × a100-80gb, 25 Gbit/s per node between nodes, batch 1536
    >>> scaled_down({"tp": 8, "pp": 16, "dp": 8, "zero": 1, "schedule": "interleaved", "chunks": 3})
    {'dp': 2, 'pp': 2, 'tp': 2, 'zero': 1, 'schedule': 'interleaved', 'chunks': 2}
"""
from __future__ import annotations

import html

from .._checks import check_choice
from ..sim.advisor import by_family, family, search
from ..sim.hardware import GPUS
from ..sim.hybrid import Plan
from ..sim.hybrid_scenarios import BY_KEY, GPT2, WIDE, Scenario
from ..sim.hybrid_time import pipeline_trace
from ..sim.model import PRESETS
from .hybrid import advisor_text, draw_plan_memory, draw_time_breakdown
from .hybrid_run import draw_predicted_vs_real, run_text, time_text
from .mpl import figure_png
from .pipeline import draw_gantt

MODELS = {**PRESETS, GPT2.name: GPT2, WIDE.name: WIDE}
GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
NETWORKS = (25.0, 100.0, 400.0, 1600.0)  # Gbit/s per node: one 25 GbE link … 8 × 200 Gb/s InfiniBand
RIVALS = ("single GPU", "single GPU + Offload", "DDP", "DP+ZeRO-1", "DP+ZeRO-3", "TP+DP", "PP+DP", "TP+PP+DP",
          "TP+PP+DP+ZeRO-1", "TP+PP+DP+ZeRO-3")
SHOWN = 4  # bars: the winner and up to three rivals
GANTT_ACTIONS = 600  # a longer pipeline is drawn up to its 600th action (with a cursor): drawing stays fast


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


def _gantt(ax, q: Scenario, c, plan: Plan) -> None:
    trace = pipeline_trace(q.model, plan, c, q.global_batch, mesh=None, executor=False, precision="mixed")
    starts = sorted(e.start for e in trace)
    until = starts[GANTT_ACTIONS] if len(starts) > GANTT_ACTIONS else None
    m = q.global_batch // (plan.dp * plan.microbatch)
    shown = f", its first {GANTT_ACTIONS} of {len(trace)} actions" if until is not None else ""
    title = (f"the best plan's pipeline: {plan.schedule}, p={plan.pp}, m={m}"
             + (f", v={plan.chunks}" if plan.chunks > 1 else "") + shown)
    draw_gantt(trace, plan.pp, ax=ax, until=until, span=until, title=title)


def strategy_frame(scenario: str | None = None, model: str = "gpt3-175b", gpu: str = "a100-80gb", gpus: int = 8,
                   gpus_per_node: int = 8, inter_node_gbps: float = 1600.0, global_batch: int = 64,
                   layers: int | None = None, hidden: int | None = None, heads: int | None = None,
                   top: int = 5, figure: bool = True):
    """(figure or None, text): the advisor's answer for a scenario (its key) or for the knobs given
    (`layers`, `hidden`, `heads` change the preset's sizes)."""
    return _answer(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch, layers, hidden, heads,
                   top, figure)[:2]


def _answer(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch, layers, hidden, heads, top,
            figure):
    """`strategy_frame`'s (figure, text), and the best plan's config (None when nothing fits)."""
    q = _question(scenario, model, gpu, gpus, gpus_per_node, inter_node_gbps, global_batch,
                  {"layers": layers, "hidden": hidden, "heads": heads})
    c = q.cluster()
    result = search(q.model, c, q.global_batch, top=top)
    lines = [q.title()]
    if q.primer:
        lines += [f"primer ({q.where}): {q.primer}", f"  {q.english}"]
    lines.append(advisor_text(result, top=top))
    text, config = "\n".join(lines), result["best"]["config"] if result["best"] is not None else None
    if not figure:
        return None, text, config
    winner = family(config) if config is not None else None
    rivals = by_family(q.model, c, q.global_batch, families=q.rivals or RIVALS)
    if not q.rivals:  # a question of the learner's own: the fastest rival families (those that fit first)
        rivals = dict(sorted(rivals.items(), key=lambda kv: (not kv[1]["fits"], kv[1]["step_seconds"])))
    plans = {f"best: {winner}": result["best"]} if winner else {}
    plans = dict(list((plans | {name: p for name, p in rivals.items() if name != winner}).items())[:SHOWN])
    from matplotlib.figure import Figure
    plan = Plan(**config) if config is not None else None
    piped = plan is not None and plan.pp > 1
    fig = Figure(figsize=(12, 8.2 if piped else 4.8), layout="constrained")
    grid = fig.add_gridspec(2 if piped else 1, 2, height_ratios=(1.3, 1) if piped else None, width_ratios=(1, 1.25))
    memory, time = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    if plans:  # a family list that matched nothing draws no bars
        draw_plan_memory(plans, c.gpu.memory, ax=memory, title="memory per GPU")
        draw_time_breakdown(plans, ax=time, title="where one step goes")
        memory.tick_params(axis="x", labelrotation=20)
    if piped:
        _gantt(fig.add_subplot(grid[1, :]), q, c, plan)
    else:
        fig.suptitle("no pipeline in the best plan (pp = 1)" if plan else "nothing fits", fontsize=9, x=0.02,
                     ha="left")
    return fig, text, config


def scaled_down(config: dict) -> dict:
    """A plan's shape on ≤ 8 local processes: each of dp, pp, tp that is > 1 becomes 2; ZeRO 1-3 becomes
    ZeRO-1 (the executor's), interleaved keeps 2 chunks."""
    out = {k: min(config[k], 2) for k in ("dp", "pp", "tp")}
    out |= {"zero": min(config["zero"], 1), "schedule": config["schedule"] if out["pp"] > 1 else "1f1b"}
    out["schedule"] = "1f1b" if out["schedule"] == "gpipe" else out["schedule"]
    out["chunks"] = 2 if out["schedule"] == "interleaved" else 1
    return out


def strategy_explorer(scenario: str = "nodes-slow", run=None, predict=None):
    """Pick a primer scenario, then change the model, its sizes, the GPUs, the network or the batch; with
    `run`, a button runs the winner scaled down (`scaled_down`) on local processes, and with `predict`
    (result → predicted trace, e.g. `parity.hybrid.predicted_trace`) draws the prediction above the run."""
    import ipywidgets as w
    start = BY_KEY[scenario]
    knobs = {"model": w.Dropdown(options=sorted(MODELS), value=start.model.name, description="model"),
             "layers": w.BoundedIntText(value=start.model.layers, min=1, max=1024, description="layers"),
             "hidden": w.BoundedIntText(value=start.model.hidden, min=1, max=1 << 17, description="hidden"),
             "heads": w.BoundedIntText(value=start.model.heads, min=1, max=1024, description="heads"),
             "gpu": w.Dropdown(options=tuple(GPUS), value=start.gpu, description="GPU"),
             "gpus": w.Dropdown(options=GPU_COUNTS, value=start.gpus, description="GPUs"),
             "gpus_per_node": w.Dropdown(options=(1, 2, 4, 8), value=8, description="GPUs/node"),
             "inter_node_gbps": w.Dropdown(options=NETWORKS, value=start.cluster_args.get("inter_node_gbps", 1600.0),
                                           description="Gbit/s/node"),
             "global_batch": w.BoundedIntText(value=start.global_batch, min=1, max=1 << 20, description="batch")}
    pick = w.Dropdown(options=[(f"{s.where}: {s.english}", s.key) for s in BY_KEY.values()], value=scenario,
                      description="scenario", layout=w.Layout(width="95%"))
    text, image, ran, timeline = w.HTML(), w.Image(format="png"), w.HTML(), w.Image(format="png")
    button = w.Button(description="run it for real (scaled down)", button_style="primary",
                      layout=w.Layout(width="auto"))
    busy, best = [], {}  # busy: a scenario is filling the knobs, so they redraw once, not nine times

    def show(_=None) -> None:
        if busy:
            return
        try:
            fig, summary, config = _answer(None, **{k: knob.value for k, knob in knobs.items()}, top=5, figure=True)
        except ValueError as err:  # e.g. a batch no layout divides: say so, keep the last picture
            text.value = f"<pre>{html.escape(str(err))}</pre>"
            return
        text.value = f"<pre>{html.escape(summary)}</pre>"
        image.value = figure_png(fig)
        best.clear()
        best.update(config or {})

    def choose(change) -> None:
        s = BY_KEY[change["new"]]
        busy.append(1)
        for name, value in (("model", s.model.name), ("layers", s.model.layers), ("hidden", s.model.hidden),
                            ("heads", s.model.heads), ("gpu", s.gpu), ("gpus", s.gpus), ("gpus_per_node", 8),
                            ("inter_node_gbps", s.cluster_args.get("inter_node_gbps", 1600.0)),
                            ("global_batch", s.global_batch)):
            knobs[name].value = value
        busy.clear()
        show()

    def preset(change) -> None:  # a new preset brings its own sizes
        m = MODELS[change["new"]]
        busy.append(1)
        knobs["layers"].value, knobs["hidden"].value, knobs["heads"].value = m.layers, m.hidden, m.heads
        busy.clear()

    def go(_=None) -> None:
        if not best:
            ran.value = "<pre>nothing fits: nothing to run</pre>"
            return
        small = scaled_down(best)
        button.disabled, ran.value = True, f"<pre>running {html.escape(str(small))} …</pre>"
        try:
            result = run(small["dp"], small["pp"], small["tp"], zero=small["zero"], schedule=small["schedule"],
                         chunks=small["chunks"])
            ran.value = f"<pre>{html.escape(run_text(result) + chr(10) + time_text(result))}</pre>"
            if predict is not None:
                timeline.value = figure_png(draw_predicted_vs_real(predict(result), result))
        except (ValueError, RuntimeError) as err:  # a run that fails is one line, as everywhere else
            ran.value = f"<pre>{html.escape(str(err).splitlines()[0])}</pre>"
        finally:
            button.disabled = False

    pick.observe(choose, names="value")
    knobs["model"].observe(preset, names="value")
    for knob in knobs.values():
        knob.observe(show, names="value")
    button.on_click(go)
    show()
    rows = [pick, w.HBox([knobs[k] for k in ("model", "layers", "hidden", "heads")]),
            w.HBox([knobs[k] for k in ("gpu", "gpus", "gpus_per_node")]),
            w.HBox([knobs[k] for k in ("inter_node_gbps", "global_batch")]), text, image]
    return w.VBox(rows + ([button, ran, timeline] if run is not None else []))
