"""Lesson 7's interactive parts: a player over ring attention's steps, and the lesson's explorer.

- `ring_player(world_size=4, seq=16, layout="zigzag")`: seeded Q, K, V through the simulator's ring
  (`sim.context_parallel_online.ring_attention`), one `ring_scene` per ring step in a `chart_player`, each
  step's `ring_step_text` as its caption. `.run` is the RingRun it shows (for `ring_text`).
- `explorer(run=None, run_ep=None)`: sequence length, CP size, layout and variant redraw the work per rank
  (`work_scene`) and the three variants' bytes and K,V buffers (`variants_scene`, from `costs.compare` for a
  Llama-3-8B-like attention layer: 32 heads, 8 K,V heads of 128, bf16); experts, top-k, capacity factor and EP
  size redraw the MoE load (`render.expert_parallel_scene.moe_scene`). Every knob builds scenes from closed forms
  (milliseconds, a few KB). `run(world_size=, layout=, variant=)` (e.g. `parity.context_parallel.
  run_context_parallel` with a small shape, passed in by the notebook: render/ never starts processes) runs the
  shown CP configuration for real; `run_ep(ep=, experts=, top_k=, capacity=)` the shown MoE layer (capacity 0:
  dropless), e.g. `parity.expert_parallel.run_expert_parallel(world_size=ep, …, capacity_factor=capacity or None,
  tokens=MOE_TOKENS)`: the picture routes MOE_TOKENS tokens per EP rank.

    >>> p = ring_player(world_size=2, seq=8)
    >>> p.count, p.value
    (2, 0)
"""
from __future__ import annotations

import numpy as np

from .._checks import check_choice, check_int
from ..i18n import _
from ..sim.context_parallel import LAYOUTS, check_layout
from ..sim.context_parallel_costs import VARIANTS, compare
from ..sim.context_parallel_online import ring_attention
from .chart import Chart, chart_player
from .context_parallel import layout_name, ring_step_text, run_text, variants_text, work_text
from .context_parallel_scene import ring_scene, variants_scene, work_scene
from .controls import readout_html

SEQUENCES = (4096, 8192, 16384, 32768, 65536, 131072)
CP_SIZES = (1, 2, 4, 8)
# the explorer's attention layer: Llama 3 8B's (32 query heads, 8 K,V heads of 128), one sequence, bf16
SHAPE = {"heads": 32, "kv_heads": 8, "head_dim": 128, "batch": 1, "itemsize": 2}
EXPERTS, TOP_K, CAPACITIES, EP_SIZES = (4, 8, 16, 32, 64), (1, 2, 4), (0.0, 1.0, 1.25, 1.5, 2.0), (1, 2, 4, 8)
MOE_TOKENS = 16  # tokens per EP rank in the MoE picture: a bar chart's worth


def ring_player(world_size: int = 4, seq: int = 16, layout: str = "zigzag", *, head_dim: int = 4, seed: int = 0,
                seconds: float = 10.0):
    """A player over every ring step of seeded attention (causal); `.run` is the RingRun it draws."""
    check_layout(world_size, seq, layout)
    check_int("head_dim", head_dim, 1, 64)
    check_int("seq", seq, 1, 1024)  # a picture's worth of tokens: the scene writes every rank's token runs
    rng = np.random.default_rng(check_int("seed", seed, 0))
    q, k, v = (rng.standard_normal((seq, head_dim)) for _ in range(3))  # (s, d)
    run = ring_attention(q, k, v, world_size, layout, causal=True)
    player = chart_player([ring_scene(run, i) for i in range(world_size)],
                          captions=[readout_html(ring_step_text(run, i)) for i in range(world_size)],
                          seconds=seconds, hint=_("▶ run this cell to get the ring attention player"))
    player.run = run
    return player


def cp_frame(seq: int, cp: int, layout: str, variant: str) -> tuple[dict, dict, str]:
    """(work scene, variants scene, readout) of one CP configuration, all from the simulator's closed forms."""
    check_choice("variant", variant, VARIANTS)
    rows = compare(world_size=cp, seq=seq, **SHAPE)
    shape = _("the layer: {heads} query heads, {kv_heads} K,V heads of {head_dim}, one sequence, bf16").format(**SHAPE)
    work, variants = work_text(cp, seq), shape + "\n" + variants_text(rows)
    return work_scene(cp, seq, layout, alt=work), variants_scene(rows, variant, alt=variants), work + "\n" + variants


def explorer(run=None, run_ep=None, *, seq: int = 32768, cp: int = 4, layout: str = "zigzag", variant: str = "ring",
             experts: int = 8, top_k: int = 2, capacity: float = 1.25, ep: int = 2):
    """The lesson's explorer (a `Panel`): the CP half and the MoE half, each with its knobs, charts and readout;
    with `run` / `run_ep`, a button under each half runs the shown configuration on real processes.
    `.knobs`, `.charts` ("work", "variants", "moe"), `.readouts` ("cp", "moe") and `.run_controls` are its parts."""
    import ipywidgets as w

    from .controls import Panel, run_control, trace_link
    from .expert_parallel_scene import moe_scene
    for name, value, grid in (("seq", seq, SEQUENCES), ("cp", cp, CP_SIZES), ("layout", layout, LAYOUTS),
                              ("variant", variant, VARIANTS), ("experts", experts, EXPERTS), ("top_k", top_k, TOP_K),
                              ("capacity", capacity, CAPACITIES), ("ep", ep, EP_SIZES)):
        check_choice(name, value, grid)  # a knob must start on its grid: one line naming it, before any widget

    def pick(options, value, label, cls=w.Dropdown):
        return cls(options=options, value=value, description=label, style={"description_width": "initial"})

    knobs = {"seq": w.SelectionSlider(options=SEQUENCES, value=seq, description=_("sequence s"),
                                      continuous_update=False, style={"description_width": "initial"}),
             "cp": pick(CP_SIZES, cp, _("CP size")),
             "layout": pick([(layout_name(x), x) for x in LAYOUTS], layout, _("layout"), w.ToggleButtons),
             "variant": pick(VARIANTS, variant, _("variant"), w.ToggleButtons),
             "experts": pick(EXPERTS, experts, _("experts")), "top_k": pick(TOP_K, top_k, _("top-k")),
             "capacity": pick([(_("dropless") if c == 0 else str(c), c) for c in CAPACITIES], capacity,
                              _("capacity factor")),
             "ep": pick(EP_SIZES, ep, _("EP size"))}
    charts = {"work": Chart(hint=_("▶ run this cell to get the work per rank")),
              "variants": Chart(hint=_("▶ run this cell to get the variants' bytes")),
              "moe": Chart(hint=_("▶ run this cell to get the experts' load"))}
    readouts = {"cp": w.HTML(), "moe": w.HTML()}
    for r in readouts.values():
        r.add_class("simlab-readout")
    value = lambda name: knobs[name].value  # noqa: E731 — a knob's value, read at each redraw
    controls = {}

    def forget(half: str) -> None:  # a result of another configuration would be misread as this one's
        if half in controls:
            c = controls[half]
            c.readout.value, c.extra.children, c.progress.value = "", (), ""
            c.image.layout.display = "none"

    def show_cp(_change=None) -> None:
        try:
            work, variants, text = cp_frame(value("seq"), value("cp"), value("layout"), value("variant"))
        except ValueError as err:  # a combination the simulator refuses: one line, the last picture stays
            readouts["cp"].value = readout_html("✗ " + str(err).splitlines()[0])
            return
        charts["work"].scene, charts["variants"].scene = work, variants
        readouts["cp"].value = readout_html(text)
        forget("cp")

    def show_moe(_change=None) -> None:
        try:
            moe = moe_scene(MOE_TOKENS, value("experts"), value("top_k"), value("capacity"), value("ep"), 0)
        except ValueError as err:
            readouts["moe"].value = readout_html("✗ " + str(err).splitlines()[0])
            return
        charts["moe"].scene = moe
        readouts["moe"].value = readout_html(moe["alt"])
        forget("moe")

    if run is not None:
        controls["cp"] = run_control(
            lambda: run(world_size=value("cp"), layout=value("layout"), variant=value("variant")),
            lambda res: (None, run_text(res), [trace_link(res["trace"], "cp_real.json")]),
            label=_("run this CP configuration on real processes"))
    if run_ep is not None:
        from .expert_parallel import run_text as ep_run_text
        controls["moe"] = run_control(
            lambda: run_ep(ep=value("ep"), experts=value("experts"), top_k=value("top_k"),
                           capacity=value("capacity")),
            lambda res: (None, ep_run_text(res), [trace_link(res["trace"], "ep_real.json")]),
            label=_("run this MoE layer on real processes"))
    for name, knob in knobs.items():
        knob.observe(show_moe if name in ("experts", "top_k", "capacity", "ep") else show_cp, names="value")
    show_cp()
    show_moe()
    wrap = w.Layout(flex_flow="row wrap", align_items="flex-start")
    parts = [w.HTML(f"<b>{_('Context parallelism')}</b>"), w.HBox([knobs["seq"], knobs["cp"]], layout=wrap),
             w.HBox([knobs["layout"], knobs["variant"]], layout=wrap), charts["work"], charts["variants"],
             readouts["cp"]] + ([controls["cp"]] if "cp" in controls else [])
    parts += [w.HTML(f"<b>{_('Mixture of experts')}</b>"),
              w.HBox([knobs["experts"], knobs["top_k"], knobs["capacity"], knobs["ep"]], layout=wrap),
              charts["moe"], readouts["moe"]] + ([controls["moe"]] if "moe" in controls else [])
    panel = Panel(parts, hint=_("▶ run this cell to get the explorer: sequence length, CP size, layout and variant; "
                                "experts, top-k, capacity factor and EP size"))
    panel.knobs, panel.charts, panel.readouts, panel.run_controls = knobs, charts, readouts, controls
    return panel
