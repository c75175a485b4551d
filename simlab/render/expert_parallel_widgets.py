"""Lesson 7's expert-parallel widgets, built from the course's toolkit (`render.chart`, `render.controls`): the
kernel routes and plans (milliseconds), the browser draws.

- `dispatch_player(tokens=…, experts=…, top_k=…, ep=…, seed=…)`: a `chart_player` over the eight steps of one MoE
  layer's all-to-all (`DispatchPlan.steps`: route, counts, dispatch, experts, combine, weighted sum, and the two
  exchanges of the backward), one `dispatch_scene` per step, its caption the step's words and bytes.
- `routing_explorer(run=None)`: knobs — how skewed the router is, the capacity factor, top-k, the EP size — tied
  to the load per expert (`moe_scene` in a `Chart`) and its readout. With `run` (e.g.
  `parity.expert_parallel.run_expert_parallel`, passed in by the notebook: render/ never starts processes) a
  `run_control` runs the shown top-k, capacity and EP size on real processes and shows `run_text`.

Both return widgets whose text form is a hint (what nbval compares); tests drive them without a browser.
"""
from __future__ import annotations

from .._checks import check_int
from ..i18n import _
from ..sim.expert_parallel_dispatch import STEPS, dispatch_plan
from .chart import Chart, chart_player
from .controls import Panel, readout_html, run_control, trace_link
from .expert_parallel import capacity_factor, ep_routings, run_text
from .expert_parallel_scene import dispatch_scene, moe_scene

SKEWS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)  # the router's preference for the low experts (`random_logits`' skew)
CAPACITIES = (0.0, 1.0, 1.25, 1.5, 2.0)  # capacity factors; 0 = dropless
TOP_K = (1, 2, 4)
EP_SIZES = (1, 2, 4, 8)


def dispatch_plan_of(tokens: int = 16, experts: int = 8, top_k: int = 2, ep: int = 4, seed: int = 0,
                     capacity: float = 1.0, skew: float = 1.0, hidden: int = 8):
    """The `DispatchPlan` of `ep` ranks each routing its own `tokens` tokens (`ep_routings`), rows of `hidden`
    fp32 values."""
    return dispatch_plan(ep_routings(tokens, experts, top_k, capacity, ep, seed, skew), check_int("hidden", hidden, 1))


def dispatch_player(tokens: int = 16, experts: int = 8, top_k: int = 2, ep: int = 4, seed: int = 0,
                    capacity: float = 1.0, skew: float = 1.0, hidden: int = 8, seconds: float = 10.0):
    """A player over the layer's steps (`STEPS`): tokens to experts, the experts' work, and back; every scene
    built once here, stepped in the browser. `.plan` is the plan it shows."""
    plan = dispatch_plan_of(tokens, experts, top_k, ep, seed, capacity, skew, hidden)
    scenes = [dispatch_scene(plan, k) for k in range(len(STEPS))]
    player = chart_player(scenes, captions=[readout_html(s["alt"]) for s in scenes], seconds=seconds,
                          hint=_("▶ run this cell to get the all-to-all player"))
    player.plan = plan
    return player


def _choice(name: str, grid, value):
    if value not in grid:  # a knob must start on its grid
        raise ValueError(f"{name}={value!r}: must be one of {', '.join(map(str, grid))}")
    return value


def routing_explorer(run=None, tokens: int = 16, experts: int = 8, top_k: int = 2, ep: int = 2,
                     capacity: float = 1.0, skew: float = 1.0, seed: int = 0):
    """The knobs (skew, capacity factor, top-k, EP size), the load per expert and the readout. With
    `run(world_size=, experts=, top_k=, capacity_factor=, tokens=)` a button runs the shown configuration for
    real. Returns a `Panel`; `.knobs`, `.chart`, `.readout` and `.run_control` are its parts, for tests."""
    import ipywidgets as w
    first = moe_scene(tokens, experts, _choice("top_k", TOP_K, top_k), _choice("capacity", CAPACITIES, capacity),
                      _choice("ep", EP_SIZES, ep), seed, skew=_choice("skew", SKEWS, skew))  # refused before widgets
    caps = [(_("dropless") if c == 0 else f"{c:g}", c) for c in CAPACITIES]
    knobs = {"skew": w.SelectionSlider(options=SKEWS, value=skew, description=_("router skew"),
                                       continuous_update=False, style={"description_width": "initial"}),
             "capacity": w.Dropdown(options=caps, value=capacity, description=_("capacity factor"),
                                    style={"description_width": "initial"}),
             "top_k": w.ToggleButtons(options=TOP_K, value=top_k, description="top-k"),
             "ep": w.ToggleButtons(options=EP_SIZES, value=ep, description=_("EP size"))}
    chart = Chart(first, hint=_("▶ run this cell to get the routing explorer"))
    readout = w.HTML(readout_html(first["alt"]))
    readout.add_class("simlab-readout")
    values = lambda: {k: knob.value for k, knob in knobs.items()}  # noqa: E731 — read at each redraw

    def show(_change=None) -> None:
        v = values()
        try:
            s = moe_scene(tokens, experts, v["top_k"], v["capacity"], v["ep"], seed, skew=v["skew"])
        except ValueError as err:  # e.g. experts not divisible by the EP size: one line, the last picture stays
            readout.value = readout_html("✗ " + str(err).splitlines()[0])
            return
        chart.scene, readout.value = s, readout_html(s["alt"])
        if control is not None:  # a result of another configuration would be misread as this one's
            control.readout.value, control.extra.children, control.progress.value = "", (), ""

    def show_real(real: dict):
        return None, run_text(real), [trace_link(real["trace"], "expert_parallel_real.json")]

    control = None
    if run is not None:
        control = run_control(lambda: run(world_size=knobs["ep"].value, experts=experts, top_k=knobs["top_k"].value,
                                          capacity_factor=capacity_factor(knobs["capacity"].value), tokens=tokens),
                              show_real, label=_("run this routing on real processes"))
    for knob in knobs.values():
        knob.observe(show, names="value")
    parts = [w.HBox([knobs["skew"], knobs["capacity"]]), w.HBox([knobs["top_k"], knobs["ep"]]), chart, readout]
    panel = Panel(parts + ([control] if control is not None else []),
                  hint=_("▶ run this cell to get the routing explorer: router skew, capacity factor, top-k and EP "
                         "size against the load per expert"))
    panel.knobs, panel.chart, panel.readout, panel.run_control = knobs, chart, readout, control
    return panel
