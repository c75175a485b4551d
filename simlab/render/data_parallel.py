"""Lesson 2's explorer: four knobs (world size, model size, bucket size, bandwidth) drive the
simulated DP and DDP timelines side by side, and a button runs the shown world size and bucket share
on real processes.

Everything it shows comes from `simlab.sim.data_parallel` (the knobs become a `Workload` there,
`scaled_workload`); this module only draws. `explorer_frame` and `real_frame` are the pure parts, so
tests need no browser. The real run is handed in by the notebook (render/ never starts processes).

Every knob is a SelectionSlider over explicit values: a FloatLogSlider snaps its start to its own grid
in the browser and syncs that back (14.7 M became 15.8 M), so the lesson's numbers would not show.
"""
from __future__ import annotations

from ..i18n import _
from ..sim.data_parallel import DEFAULT_MPARAMS, compare, scaled_workload, simulate_ddp, simulate_dp
from ..sim.data_parallel_calibrate import fit_ddp_workload
from .style import PAPER, RULE_GREY, fmt, mib, rows_table, time_unit

# The knobs' values; each default is one of them, and equals the lesson's default scene exactly.
MODEL_MPARAMS = tuple(DEFAULT_MPARAMS * 2.0 ** k for k in range(-4, 7))  # 0.918 M … 14.7 M … 940 M
BUCKET_CAP_MB = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)  # MiB, as torch's
BANDWIDTH_GBPS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 300.0)


CHART_WIDTH = 820  # px of the two timelines, the legend right of them: the figure's 10 inches
MAX_LABELLED = 300  # events in a panel beyond which bars carry no names (as `draw_lanes`)


def lanes_panel(trace, world_size: int, span: float, title: str, time_label: bool = True) -> dict:
    """One strategy's timeline as a chart panel: `draw_lanes`'s picture (device 0 on top, compute above comm,
    a bar per event in its category's colour, named where the name fits), in the same time unit."""
    from .chart import axis, line, panel, rect
    from .data_parallel_timeline import LANE_HEIGHT, LANES, _color, _lane, _row_inches, _shown_name, lane_of

    t0 = min((e.start for e in trace), default=0.0)
    scale, unit = time_unit(span)
    marks = [line([0, span * scale], [r - 0.5] * 2, RULE_GREY, width=0.6) for r in range(1, world_size)]
    for e in sorted(trace, key=lambda e: (e.rank, e.start, e.end)):
        y0 = e.rank - 0.45 + (0 if lane_of(e) == "compute" else LANE_HEIGHT + 0.06)
        start, end = (e.start - t0) * scale, (e.start - t0 + max(e.end - e.start, span * 0.002)) * scale
        name = _shown_name(e.name or e.kind)
        marks.append(rect(start, end, y0, y0 + LANE_HEIGHT, fill=_color(e), stroke=PAPER, width=0.6,
                          label=[name, name.split(" ")[-1]] if len(trace) <= MAX_LABELLED else None,
                          label_color=PAPER, tip=f"r{e.rank} {name}: {fmt(e.end - e.start)}"))
    ticks = [(r - 0.45 + LANE_HEIGHT / 2 + k * (LANE_HEIGHT + 0.06), f"r{r} {_lane(lane)}")
             for r in range(world_size) for k, lane in enumerate(LANES)]
    height = 100 * _row_inches(world_size) * world_size + 70  # the figure's rows, its title and time axis
    # a panel above another on the same time axis keeps its times but leaves the axis's name to the lower one
    return panel(marks, x=axis(0, span * scale, _("time ({unit})").format(unit=unit) if time_label else ""),
                 y=axis(-0.5, world_size - 0.5, "", ticks, invert=True), width=CHART_WIDTH, height=height, title=title)


def dp_ddp_scene(dp_result, ddp_result, alt: str) -> dict:
    """DP above, DDP below, on one time axis (the longer bar is the slower step): `draw_dp_vs_ddp` as a chart."""
    from .chart import scene
    from .data_parallel_timeline import COLOR, STYLE, _category, ddp_title, dp_title

    span = max(dp_result.step_seconds, ddp_result.step_seconds) or 1.0
    panels = [lanes_panel(dp_result.trace, dp_result.workload.world_size, span, dp_title(dp_result), False),
              lanes_panel(ddp_result.trace, ddp_result.workload.world_size, span, ddp_title(ddp_result))]
    # one legend: DP's kinds of bar in the order they start, then those only DDP has
    events = [e for r in (dp_result, ddp_result) for e in sorted(r.trace, key=lambda e: e.start)]
    used = dict.fromkeys(_category(e) for e in events)
    return scene(panels=panels, legend=[(_(STYLE[c][1]), COLOR[c]) for c in used], legend_at="right", alt=alt)


def explorer_frame(world_size: int, model_mparams: float, bucket_cap_mb: float, bandwidth_gbps: float):
    """(scene, rows, verdict) for one position of the knobs: the two timelines as a chart scene, the two
    strategies' numbers already formatted for a table, and the verdict (the faster one, or "tie")."""
    w = scaled_workload(world_size, model_mparams, bucket_cap_mb, bandwidth_gbps)
    c = compare(w)
    dp, ddp = simulate_dp(w), simulate_ddp(w)
    # the columns, in the language in force (the keys are what table_html shows as headers)
    strategy, step, busiest, others = _("strategy"), _("step"), _("busiest device moves"), _("others move")
    buckets, hidden, exposed = _("buckets"), _("all-reduce hidden"), _("exposed")
    rows = [{strategy: "DP", step: fmt(c["dp_step_seconds"]),
             busiest: _("{moved} (device 0)").format(moved=mib(c["dp_device0_bytes"])),
             others: mib(c["dp_max_other_bytes"]), buckets: "-", hidden: "-", exposed: "-"},
            {strategy: "DDP", step: fmt(c["ddp_step_seconds"]), busiest: mib(c["ddp_max_rank_bytes"]),
             others: _("the same"), buckets: str(c["ddp_buckets"]),
             hidden: fmt(c["ddp_hidden_seconds"]), exposed: fmt(c["ddp_exposed_seconds"])}]
    if c["faster"] == "tie":  # compare()'s verdict words are shown here, so translated here
        verdict = _("faster: tie (equal to the precision shown)")
    else:
        verdict = _("faster: {which} ({ratio}x)").format(which=c["faster"],
                                                         ratio=f"{max(c['speedup'], 1 / c['speedup']):.2f}")
    return dp_ddp_scene(dp, ddp, alt=rows_table(rows) + "\n" + verdict), rows, verdict


def real_frame(result: dict):
    """What the run button shows: the simulator fitted to the real DDP run (outlined) over the measured
    timeline (filled), the parity line, and the real trace's link. `result`: `run_dp_and_ddp`'s."""
    from .controls import trace_link
    from .data_parallel_timeline import draw_lanes_sim_vs_real

    ddp, dp, n = result["ddp"], result["dp"], result["world_size"]
    step = max(e.step for e in ddp["trace"])  # the last step: warm, like a long run's
    fitted = fit_ddp_workload(ddp["trace"], ddp["param_numels"], ddp["param_names"], n,
                              result["global_batch"], result["real_cap_mb"], step=step)
    predicted = simulate_ddp(fitted)
    measured = max(e.end for e in ddp["trace"] if e.step == step and e.rank == 0)
    fig = draw_lanes_sim_vs_real(predicted.trace, ddp["trace"], rank=0, step=step,
                                 title=_("rank 0, real DDP on {n} process{es}: simulator fitted to the run "
                                         "(outlined) vs measured (filled)").format(n=n, es="" if n == 1 else "es"))
    same = [list(b) for b in predicted.buckets] == ddp["buckets"]
    cap_bytes = result["real_cap_mb"] * 2**20
    share = _("the same share of it as {cap} MiB of the explorer's {model}").format(
        cap=f"{result['bucket_cap_mb']:g}", model=mib(result["model_bytes"]))
    parity = _("max |params - 1 process| DDP {ddp}, DP {dp}; max |params - torch DDP| {torch}").format(
        ddp=f"{ddp['max_abs_diff_vs_reference']:.1e}", dp=f"{dp['max_abs_diff_vs_reference']:.1e}",
        torch=f"{ddp['max_abs_diff_vs_torch']:.1e}")
    sent = _("DDP {ddp} (ring optimum {optimum}); DP device 0 {dp}").format(
        ddp=f"{ddp['bytes_sent_per_rank'][0]:,}", optimum=f"{ddp['optimal_bytes_per_rank'][0]:,}",
        dp=f"{dp['bytes_sent_per_rank'][0]:,}")
    text = "\n".join([
        _("tiny MLP ({nbytes} bytes), cap {cap} bytes: {share}").format(
            nbytes=f"{result['real_model_bytes']:,}", cap=f"{cap_bytes:,.0f}", share=share),
        (_("DDP buckets: {buckets} (the simulator builds the same)") if same
         else _("DDP buckets: {buckets} (the simulator builds different ones)")).format(buckets=ddp["buckets"]),
        _("bytes sent per step by rank 0: {sent}").format(sent=sent),
        _("step {step}: measured {measured}, simulated (fitted) {simulated}").format(
            step=step, measured=fmt(measured), simulated=fmt(predicted.step_seconds))
        + (_(" (one process: the model has no all-reduce to time; the real run still packs every bucket)")
           if n == 1 else ""),
        _("parity: {parity}").format(parity=parity)])
    return fig, text, [trace_link(ddp["trace"], f"ddp_real_{n}ranks.json")]


def _slider(name: str, options, value, label: str, fmt):
    import ipywidgets as W
    return W.SelectionSlider(options=[(fmt(v), v) for v in options], value=value, description=label,
                             continuous_update=False, style={"description_width": "initial"})


def dp_ddp_explorer(run=None, world_size: int = 4, model_mparams: float = DEFAULT_MPARAMS,
                    bucket_cap_mb: float = 25.0, bandwidth_gbps: float = 10.0):
    """Sliders + the two timelines; every change re-simulates (it takes milliseconds).

    `run(world_size, bucket_cap_mb, model_bytes) -> dict` (the notebook passes
    `simlab.parity.data_parallel.run_dp_and_ddp`) adds a button that runs the shown configuration."""
    import ipywidgets as W

    from .chart import Chart
    from .controls import Panel, run_control, table_html, trace_link

    for name, value, grid in (("model_mparams", model_mparams, MODEL_MPARAMS),
                              ("bucket_cap_mb", bucket_cap_mb, BUCKET_CAP_MB),
                              ("bandwidth_gbps", bandwidth_gbps, BANDWIDTH_GBPS)):
        if value not in grid:  # a knob must start on its grid, or the browser moves it
            raise ValueError(f"{name}={value!r}: must be one of {', '.join(f'{v:.3g}' for v in grid)}")
    knobs = {
        "world_size": W.IntSlider(world_size, 1, 16, description=_("world size"), continuous_update=False),
        "model_mparams": _slider("model_mparams", MODEL_MPARAMS, model_mparams, _("model"), lambda v: f"{v:.3g} M"),
        "bucket_cap_mb": _slider("bucket_cap_mb", BUCKET_CAP_MB, bucket_cap_mb, _("bucket cap"),
                                 lambda v: f"{v:g} MiB"),
        "bandwidth_gbps": _slider("bandwidth_gbps", BANDWIDTH_GBPS, bandwidth_gbps, _("link"),
                                  lambda v: f"{v:g} GB/s"),
    }
    picture, summary, sim_link = Chart(hint=""), W.HTML(), W.Box()

    def redraw(_change=None):
        values = {name: knob.value for name, knob in knobs.items()}
        drawn, rows, verdict = explorer_frame(**values)
        picture.scene = drawn  # drawn in the browser: only the scene travels
        summary.value = table_html(rows, list(rows[0])) + f"<b>{verdict}</b>"
        trace = simulate_ddp(scaled_workload(**values)).trace
        sim_link.children = (trace_link(trace, "ddp_simulated.json"),)

    for knob in knobs.values():
        knob.observe(redraw, names="value")
    redraw()
    children = [W.HBox(list(knobs.values())[:2]), W.HBox(list(knobs.values())[2:]), summary, picture, sim_link]
    control = None
    if run is not None:
        def run_shown():
            values = {name: knob.value for name, knob in knobs.items()}
            w = scaled_workload(**values)
            return run(values["world_size"], values["bucket_cap_mb"], w.model_bytes)

        control = run_control(run_shown, real_frame, label=_("run DP and DDP on real processes (≤ 4)"),
                              hint=_("▶ run this cell to get the real-run button"))
        children.append(control)
    panel = Panel(children, hint=_("▶ run this cell to get the DP vs DDP explorer"))
    # for tests and curious learners: the knobs, what they show, and the real run's control
    panel.knobs, panel.picture, panel.summary = knobs, picture, summary
    panel.sim_link, panel.run_control = sim_link, control
    return panel
