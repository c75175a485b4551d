"""Lesson 2's explorer: four knobs (world size, model size, bucket size, bandwidth) drive the
simulated DP and DDP timelines side by side.

Everything it shows comes from `simlab.sim.data_parallel` (the knobs become a `Workload` there,
`scaled_workload`); this module only draws. `explorer_frame` is the pure part, so tests need no browser.
"""
from __future__ import annotations

from ..sim.data_parallel import compare, scaled_workload, simulate_ddp, simulate_dp
from .mpl import figure_png
from .text import rows_table


def explorer_frame(world_size: int, model_mparams: float, bucket_cap_mb: float, bandwidth_gbps: float):
    """(figure, summary text) for one position of the knobs."""
    from .timeline import draw_dp_vs_ddp

    w = scaled_workload(world_size, model_mparams, bucket_cap_mb, bandwidth_gbps)
    numbers = compare(w)
    fig = draw_dp_vs_ddp(simulate_dp(w), simulate_ddp(w))
    keys = ["dp_step_seconds", "ddp_step_seconds", "faster", "dp_device0_bytes", "dp_max_other_bytes",
            "ddp_max_rank_bytes", "ddp_buckets", "ddp_hidden_seconds", "ddp_exposed_seconds"]
    return fig, rows_table([numbers], keys)


def dp_ddp_explorer(world_size: int = 4, model_mparams: float = 14.7, bucket_cap_mb: float = 25.0,
                    bandwidth_gbps: float = 10.0):
    """Sliders + the two timelines; every change re-simulates (it takes milliseconds)."""
    import ipywidgets as W

    knobs = {
        "world_size": W.IntSlider(world_size, 1, 16, description="world size"),
        "model_mparams": W.FloatLogSlider(model_mparams, base=10, min=0, max=3, description="M params"),
        "bucket_cap_mb": W.FloatLogSlider(bucket_cap_mb, base=10, min=-1, max=3, description="bucket MB"),
        "bandwidth_gbps": W.FloatLogSlider(bandwidth_gbps, base=10, min=-1, max=3, description="GB/s"),
    }
    picture, summary = W.Image(format="png"), W.HTML()

    def redraw(_change=None):
        fig, text = explorer_frame(**{name: knob.value for name, knob in knobs.items()})
        picture.value = figure_png(fig)
        summary.value = f"<pre>{text}</pre>"

    for knob in knobs.values():
        knob.observe(redraw, names="value")
    redraw()
    return W.VBox([W.HBox(list(knobs.values())[:2]), W.HBox(list(knobs.values())[2:]), summary, picture])
