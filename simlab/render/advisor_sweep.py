"""Lesson 7's "when does it pay?": `sim.advisor_sweep.when_cp` / `when_ep` rows as a text table (what nbval compares)
and as a figure — the step time of the best plan with the knob and of the best without it, along the sweep.

    >>> from simlab.sim.advisor_sweep import when_cp
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.model import PRESETS
    >>> rows = when_cp(PRESETS["llama3-8b"], cluster("h100-80gb", gpus=8), global_tokens=1 << 20, seqs=[8192])
    >>> sweep_text(rows).splitlines()[0].split()[:3]
    ['seq', 'batch', 'best']
"""
from __future__ import annotations

from ..i18n import _
from .style import BLUE, INK, MATCH_COLOR, MIN_FONT, ORANGE, SOFT_INK, align, new_ax

SWEPT = {"cp": "seq", "ep": "experts"}  # the knob a sweep asks about, and what it changes


def _sides(row: dict) -> tuple:
    """(seconds with the knob above 1, seconds without it): the best plan on one side, its rival on the other;
    None where that side has no plan that fits."""
    knob = row["knob"]
    if not row["fits"]:
        return None, None
    best, rival = row["step_seconds"], row["rival_seconds"]
    return (best, rival) if row[knob] > 1 else (rival, best)


def sweep_text(rows: list[dict]) -> str:
    """One line per point: the swept value, the batch, the best plan's family, its cp (or ep), seconds per step, GB
    per GPU and MFU; the rival's seconds (or that it does not fit), how many times slower, and why it loses."""
    if not rows:
        return _("nothing fits")
    knob = rows[0]["knob"]
    swept = SWEPT[knob]
    # the knobs' and units' names stay as the code spells them, as lesson 6's table has them (`hybrid_advisor.COLUMNS`)
    head = [swept, _("batch"), _("best"), knob, "s/step", "GB/GPU", "MFU", _("rival {knob}").format(knob=knob),
            _("rival s/step"), "×", _("why")]
    table = [head]
    for r in rows:
        if not r["fits"]:
            table.append([f"{r[swept]:,}", f"{r['global_batch']:,}", _("nothing fits"), "—", "—", "—", "—", "—",
                          "—", "—", _(r["why"])])
            continue
        rival = (f"{r['rival_seconds']:.4g}" if r["rival_fits"] else _("does not fit")) \
            if r[f"rival_{knob}"] is not None else "—"
        table.append([f"{r[swept]:,}", f"{r['global_batch']:,}", r["family"], str(r[knob]), f"{r['step_seconds']:.4g}",
                      f"{r['gb_per_gpu']:.1f}", f"{r['mfu']:.1%}", str(r[f"rival_{knob}"] or "—"), rival,
                      f"{r['ratio']:.2f}" if r["ratio"] is not None else "—", _(r["why"])])
    return "\n".join(align(table))


def draw_sweep(rows: list[dict], ax=None, figsize=(7.5, 4.0)):
    """Seconds per step along the sweep: the best plan with the knob above 1 (each point labelled with its size)
    and the best with it at 1; a side with no plan that fits is marked ✗ on the axis. Returns the Figure."""
    ax = new_ax(ax, figsize)
    knob = rows[0]["knob"] if rows else "cp"
    swept = SWEPT[knob]
    xs = [r[swept] for r in rows]
    sides = [_sides(r) for r in rows]
    with_knob = [s[0] for s in sides]
    without = [s[1] for s in sides]
    for values, colour, label, marker in ((with_knob, BLUE, _("with {knob} > 1").format(knob=knob.upper()), "o"),
                                          (without, ORANGE, _("{knob} = 1").format(knob=knob), "s")):
        points = [(x, v) for x, v in zip(xs, values) if v is not None]
        if points:
            ax.plot(*zip(*points), marker=marker, color=colour, label=label)
    sizes = [(x, v, r[knob] if r[knob] > 1 else r[f"rival_{knob}"]) for x, v, r in zip(xs, with_knob, rows)
             if v is not None]
    for x, v, size in sizes:
        ax.annotate(f"{knob} {size}", (x, v), textcoords="offset points", xytext=(0, 7), ha="center",
                    fontsize=MIN_FONT, color=SOFT_INK)
    misses = [x for x, s in zip(xs, sides) for v in s if v is None]
    if misses:
        ax.plot(misses, [0] * len(misses), linestyle="none", marker="x", color=MATCH_COLOR[False], markersize=9,
                clip_on=False, label=_("does not fit"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x:,}" for x in xs], fontsize=MIN_FONT)
    ax.minorticks_off()
    top = max([v for side in sides for v in side if v is not None], default=1.0)
    ax.set_ylim(0, top * 1.15)  # room above the highest point for its "cp N" label
    ax.tick_params(labelsize=MIN_FONT, colors=INK)
    ax.set_xlabel(swept, fontsize=MIN_FONT)
    ax.set_ylabel(_("s/step"), fontsize=MIN_FONT)
    ax.set_title(_("when does {knob} pay?").format(knob=knob.upper()), fontsize=MIN_FONT + 1)
    ax.legend(fontsize=MIN_FONT, frameon=False)
    return ax.figure
