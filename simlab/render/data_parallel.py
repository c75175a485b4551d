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

from ..sim.calibrate import fit_ddp_workload
from ..sim.data_parallel import DEFAULT_MPARAMS, compare, scaled_workload, simulate_ddp, simulate_dp
from .text import _fmt, mib, plural

# The knobs' values; each default is one of them, and equals the lesson's default scene exactly.
MODEL_MPARAMS = tuple(DEFAULT_MPARAMS * 2.0 ** k for k in range(-4, 7))  # 0.918 M … 14.7 M … 940 M
BUCKET_CAP_MB = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)  # MiB, as torch's
BANDWIDTH_GBPS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 300.0)
DEFAULTS = {"world_size": 4, "model_mparams": DEFAULT_MPARAMS, "bucket_cap_mb": 25.0, "bandwidth_gbps": 10.0}


def explorer_frame(world_size: int, model_mparams: float, bucket_cap_mb: float, bandwidth_gbps: float):
    """(figure, rows, verdict) for one position of the knobs: rows are the two strategies' numbers,
    already formatted for a table; verdict names the faster one, or says "tie"."""
    from .timeline import draw_dp_vs_ddp

    w = scaled_workload(world_size, model_mparams, bucket_cap_mb, bandwidth_gbps)
    c = compare(w)
    fig = draw_dp_vs_ddp(simulate_dp(w), simulate_ddp(w))
    rows = [{"strategy": "DP", "step": _fmt(c["dp_step_seconds"]), "busiest device moves":
             f"{mib(c['dp_device0_bytes'])} (device 0)", "others move": mib(c["dp_max_other_bytes"]),
             "buckets": "-", "all-reduce hidden": "-", "exposed": "-"},
            {"strategy": "DDP", "step": _fmt(c["ddp_step_seconds"]), "busiest device moves":
             mib(c["ddp_max_rank_bytes"]), "others move": "the same", "buckets": str(c["ddp_buckets"]),
             "all-reduce hidden": _fmt(c["ddp_hidden_seconds"]), "exposed": _fmt(c["ddp_exposed_seconds"])}]
    if c["faster"] == "tie":
        verdict = "faster: tie (equal to the precision shown)"
    else:
        verdict = f"faster: {c['faster']} ({max(c['speedup'], 1 / c['speedup']):.2f}x)"
    return fig, rows, verdict


def real_frame(result: dict):
    """What the run button shows: the simulator fitted to the real DDP run (outlined) over the measured
    timeline (filled), the parity line, and the real trace's link. `result`: `run_dp_and_ddp`'s."""
    from .controls import trace_link
    from .timeline import draw_sim_vs_real

    ddp, dp, n = result["ddp"], result["dp"], result["world_size"]
    step = max(e.step for e in ddp["trace"])  # the last step: warm, like a long run's
    fitted = fit_ddp_workload(ddp["trace"], ddp["param_numels"], ddp["param_names"], n,
                              result["global_batch"], result["real_cap_mb"], step=step)
    predicted = simulate_ddp(fitted)
    measured = max(e.end for e in ddp["trace"] if e.step == step and e.rank == 0)
    fig = draw_sim_vs_real(predicted.trace, ddp["trace"], rank=0, step=step,
                           title=f"rank 0, real DDP on {plural(n, 'process')}: "
                                 "simulator fitted to the run (outlined) vs measured (filled)")
    same = [list(b) for b in predicted.buckets] == ddp["buckets"]
    cap_bytes = result["real_cap_mb"] * 2**20
    share = f"the same share of it as {result['bucket_cap_mb']:g} MiB of the explorer's {mib(result['model_bytes'])}"
    parity = (f"max |params - 1 process| DDP {ddp['max_abs_diff_vs_reference']:.1e}, DP "
              f"{dp['max_abs_diff_vs_reference']:.1e}; max |params - torch DDP| {ddp['max_abs_diff_vs_torch']:.1e}")
    sent = (f"DDP {ddp['bytes_sent_per_rank'][0]:,} (ring optimum {ddp['optimal_bytes_per_rank'][0]:,}); "
            f"DP device 0 {dp['bytes_sent_per_rank'][0]:,}")
    text = "\n".join([
        f"tiny MLP ({result['real_model_bytes']:,} bytes), cap {cap_bytes:,.0f} bytes: {share}",
        f"DDP buckets: {ddp['buckets']} (the simulator builds {'the same' if same else 'different ones'})",
        f"bytes sent per step by rank 0: {sent}",
        f"step {step}: measured {_fmt(measured)}, simulated (fitted) {_fmt(predicted.step_seconds)}"
        + (" (one process: the model has no all-reduce to time; the real run still packs every bucket)"
           if n == 1 else ""),
        f"parity: {parity}"])
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

    from .controls import Panel, figure_image, run_control, show_figure, table_html, trace_link

    for name, value, grid in (("model_mparams", model_mparams, MODEL_MPARAMS),
                              ("bucket_cap_mb", bucket_cap_mb, BUCKET_CAP_MB),
                              ("bandwidth_gbps", bandwidth_gbps, BANDWIDTH_GBPS)):
        if value not in grid:  # a knob must start on its grid, or the browser moves it
            raise ValueError(f"{name}={value!r}: must be one of {', '.join(f'{v:.3g}' for v in grid)}")
    knobs = {
        "world_size": W.IntSlider(world_size, 1, 16, description="world size", continuous_update=False),
        "model_mparams": _slider("model_mparams", MODEL_MPARAMS, model_mparams, "model", lambda v: f"{v:.3g} M"),
        "bucket_cap_mb": _slider("bucket_cap_mb", BUCKET_CAP_MB, bucket_cap_mb, "bucket cap",
                                 lambda v: f"{v:g} MiB"),
        "bandwidth_gbps": _slider("bandwidth_gbps", BANDWIDTH_GBPS, bandwidth_gbps, "link", lambda v: f"{v:g} GB/s"),
    }
    picture, summary, sim_link = figure_image(), W.HTML(), W.Box()

    def redraw(_change=None):
        values = {name: knob.value for name, knob in knobs.items()}
        fig, rows, verdict = explorer_frame(**values)
        show_figure(picture, fig)
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

        control = run_control(run_shown, real_frame, label="run DP and DDP on real processes (≤ 4)",
                              hint="▶ run this cell to get the real-run button")
        children.append(control)
    panel = Panel(children, hint="▶ run this cell to get the DP vs DDP explorer")
    # for tests and curious learners: the knobs, what they show, and the real run's control
    panel.knobs, panel.picture, panel.summary = knobs, picture, summary
    panel.sim_link, panel.run_control = sim_link, control
    return panel
