"""Lesson 3's real run beside the model: what a `parity.zero.run_zero` result proves, as a picture and as text.

- `draw_real_vs_model`: bytes kept and bytes sent per rank, measured (solid) beside the model (hatched).
- `real_run_text`: the same numbers as text, then one rank's events beside the walkthrough's.

The numbers come from the run and from `simlab.sim.zero`; the zero explorer (`render.zero_widgets`) shows both.
"""
from __future__ import annotations

from ..i18n import _
from ..sim.zero import executor_names, walkthrough
from .style import BLUE, MIN_FONT, display_width, pad


def _kept(mem: dict) -> int:
    return mem["params"] + mem["grads"] + mem["optimizer"]


def draw_real_vs_model(real: dict):
    """Two panels, one pair of bars per rank: bytes kept (device) and bytes sent in step 0, measured on the
    real run (solid) beside the model's prediction (hatched). `real`: what `parity.zero.run_zero` returns."""
    import numpy as np
    from matplotlib.figure import Figure
    n = real["world_size"]
    fig = Figure(figsize=(8.5, 3.4), layout="constrained")
    panels = [(_("bytes kept per rank"), [_kept(m) for m in real["measured_bytes_per_rank"]],
               [_kept(m) for m in real["predicted_bytes_per_rank"]]),
              (_("bytes sent in one step"), real["bytes_sent_per_rank"], real["predicted_bytes_sent_per_rank"])]
    x, same = np.arange(n), all(list(measured) == list(model) for _title, measured, model in panels)
    for ax, (title, measured, model) in zip(fig.subplots(1, 2), panels):
        ax.bar(x - 0.2, measured, 0.4, color=BLUE, label=_("measured (real run)"), gid="measured")
        ax.bar(x + 0.2, model, 0.4, color="white", edgecolor=BLUE, hatch="//", label=_("model"), gid="model")
        for xi, v in zip(x, measured):
            ax.text(xi - 0.2, v, str(v), ha="center", va="bottom", fontsize=MIN_FONT, gid="value")
        ax.set_xticks(x, [f"rank {r}" for r in range(n)], fontsize=MIN_FONT)
        ax.tick_params(axis="y", labelsize=MIN_FONT)
        ax.set_ylim(0, 1.2 * max(max(measured), max(model), 1))
        ax.set_title(title, fontsize=MIN_FONT)
        ax.spines[["top", "right"]].set_visible(False)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=MIN_FONT, frameon=False)
    fig.suptitle(_("ZeRO-{stage} on {n} processes: measured {relation} model").format(
        stage=real["stage"], n=n, relation="=" if same else "≠"), fontsize=MIN_FONT + 1)
    return fig


def real_run_text(real: dict, layers: int, rank: int = 0) -> str:
    """A real run in text: bytes per rank beside the model, then one rank's step-0 events beside the
    walkthrough's (the same names, the same order when the executor follows the walkthrough)."""
    n, stage = real["world_size"], real["stage"]
    header = ["rank", _("kept B (real / model)"), _("sent B (real / model)")]
    rows = [[str(r), f"{_kept(real['measured_bytes_per_rank'][r])} / {_kept(real['predicted_bytes_per_rank'][r])}",
             f"{real['bytes_sent_per_rank'][r]} / {real['predicted_bytes_sent_per_rank'][r]}"] for r in range(n)]
    widths = [max(display_width(row[c]) for row in [header] + rows) for c in (0, 1)]  # display columns: CJK is 2
    lines = [pad(a, widths[0]) + "  " + pad(b, widths[1]) + "  " + c for a, b, c in [header] + rows]
    sim = executor_names(walkthrough(stage, layers, n))
    got = [e.name for e in sorted(real["trace"], key=lambda e: e.start) if e.rank == rank and e.step == 0]
    width = max(display_width(name) for name in sim + [_("walkthrough")])
    lines += ["", pad(_("walkthrough"), width) + "  " + _("real rank {rank}").format(rank=rank)]
    for k in range(max(len(sim), len(got))):
        a, b = (sim[k] if k < len(sim) else "-"), (got[k] if k < len(got) else "-")
        lines.append(f"{a:<{width}}  {b}" + ("" if a == b else "   ≠"))
    lines.append(_("same events in the same order") if sim == got else _("the orders differ (≠)"))
    return "\n".join(lines)

