"""Lesson 2's timelines, two lanes per device: compute on top, communication below.

Shows at a glance what `simlab.sim.data_parallel` computes. In DP, device 0's comm lane is busy
(it sends the model, the inputs and the output gradients, and receives everything back) while the
other devices wait. In DDP, the all-reduce bars slide under the backward bars: that part is hidden,
and whatever sticks out after backward is exposed. Any `Trace` works, simulated (model seconds) or
real (wall seconds); a real trace's "send"/"recv" events go to the comm lane.

- `draw_lanes(trace, world_size)`: a matplotlib Figure, one Rectangle per event; `thin_labels` keeps its labels apart.
- `draw_dp_vs_ddp(dp_result, ddp_result)`: the two strategies stacked on one time axis.
- `lanes_text(trace, world_size)`: the same picture as fixed-width text, for nbval to compare.
- `draw_lanes_sim_vs_real(sim, real, rank, step)`: one device's lanes, simulated (outlined) over measured
  (filled), through `render.style.draw_sim_vs_real`.

    >>> from simlab.trace import Event, Trace
    >>> trace = Trace([Event(0, "compute", 0, name="fwd", start=0.0, end=0.002),
    ...                Event(0, "comm", 1, name="all-reduce b0", nbytes=8, start=0.001, end=0.004),
    ...                Event(1, "compute", 0, name="fwd", start=0.0, end=0.002)])
    >>> print(lanes_text(trace, 2, width=16))
    time 0 .. 4.00 ms, one column = 0.250 ms
    r0 compute |FFFFFFFF........|
    r0 comm    |....000000000000|
    r1 compute |FFFFFFFF........|
    r1 comm    |................|
    F fwd  0-9 all-reduce bucket
"""
from __future__ import annotations

import math
import re

from ..i18n import N_, _
from .style import (
    ALL_REDUCE_SHADES,
    KIND_COLOR,
    MIN_FONT,
    PHASE_COLOR,
    RULE_GREY,
    display_width,
    draw_sim_vs_real,
    fmt,
    mib,
    new_ax,
    time_unit,
)

# category -> (text symbol, legend label); the category is found by `_category`, its colour is `COLOR`'s.
# Labels are marked (N_) and translated where drawn, so STYLE itself stays the English tests and callers key on.
STYLE = {
    "fwd": ("F", N_("fwd")),
    "bwd": ("B", N_("bwd")),
    "loss": ("L", N_("loss")),
    "update": ("U", N_("update")),
    "scatter inputs": ("i", N_("scatter inputs")),
    "replicate": ("R", N_("replicate model")),
    "gather outputs": ("o", N_("gather outputs")),
    "scatter grads": ("g", N_("scatter output grads")),
    "reduce grads": ("G", N_("reduce grads")),
    "all-reduce": ("0-9", N_("all-reduce bucket")),  # text: the bucket number
    "send": (">", N_("send")),
    "recv": ("<", N_("recv")),
    "compute": ("#", N_("compute")),
    "comm": ("=", N_("comm")),
}
COLOR = {category: PHASE_COLOR.get(category) or KIND_COLOR[category] for category in STYLE}
# what a bar shows of an event's name: its category's first word(s), in the language in force ("bwd L3")
BAR_WORDS = {"fwd": N_("fwd"), "bwd": N_("bwd"), "loss": N_("loss"), "update": N_("update"),
             "scatter inputs": N_("scatter inputs"), "replicate": N_("replicate"),
             "gather outputs": N_("gather outputs"), "scatter grads": N_("scatter grads"),
             "reduce grads": N_("reduce grads"), "all-reduce": N_("all-reduce")}
LANES = ("compute", "comm")  # the gids and keys; shown through `_lane`
LANE_HEIGHT = 0.42  # each device's row is 1 high: two lanes and a small gap
BAR_LABEL = "bar label"  # the gid of a label drawn inside a bar (`thin_labels` hides those that collide)
_BUCKET = re.compile(r"^all-reduce b(\d+)$")


def _lane(lane: str) -> str:
    """A lane's name as shown: 'compute' / 'comm', or their translation."""
    return _(STYLE[lane][1])


def lane_of(event) -> str:
    """Compute events go on the upper lane; sends, receives and collectives on the lower one."""
    return "compute" if event.kind == "compute" else "comm"


def _category(event) -> str:
    """'bwd L3' -> 'bwd', 'all-reduce b2' -> 'all-reduce'; unknown names fall back to the kind."""
    for key in (event.name, event.name.split(" ")[0]):
        if key in STYLE and key not in ("send", "recv", "compute", "comm"):
            return key
    return event.kind if event.kind in STYLE else lane_of(event)


def _color(event) -> str:
    match = _BUCKET.match(event.name)
    if match:
        return ALL_REDUCE_SHADES[int(match[1]) % 2]
    return COLOR[_category(event)]


def _symbol(event) -> str:
    match = _BUCKET.match(event.name)
    return match[1][-1] if match else STYLE[_category(event)][0]


def _shown_name(name: str) -> str:
    """An event's name in the language in force: its known first word(s) translated ('bwd L3' -> '反向 L3')."""
    for words in sorted(BAR_WORDS, key=len, reverse=True):
        if name == words or name.startswith(words + " "):
            return _(BAR_WORDS[words]) + name[len(words):]
    return name


def _label(event, span: float) -> str | None:
    """The event's name if the bar can hold it, else its last word ('bwd L3' -> 'L3'), else None.
    At MIN_FONT points about 85 characters (a CJK one counts twice) fill the time axis of a 10-inch figure."""
    name = _shown_name(event.name or event.kind)
    for text in (name, name.split(" ")[-1]):
        if (display_width(text) + 1) * span / 85 <= event.end - event.start:
            return text
    return None


def _symbols(category: str) -> str:
    return "0123456789" if category == "all-reduce" else STYLE[category][0]


def _extent(trace, span):
    """Start time and length of the drawing: the trace's own, unless `span` (seconds) is given."""
    t0 = min((e.start for e in trace), default=0.0)
    end = max((e.end for e in trace), default=0.0)
    return t0, span if span else (end - t0 or 1.0)


def draw_lanes(trace, world_size: int, ax=None, title: str | None = None, span: float | None = None):
    """One row per device (device 0 on top): compute bars above, comm bars below; returns the Figure.
    `span` fixes the time axis length in seconds, so several timelines can share it."""
    from matplotlib.patches import Patch, Rectangle
    standalone = ax is None  # its own figure: thin the labels once it is drawn (else the caller does)
    ax = new_ax(ax, (10, 0.7 + _row_inches(world_size) * world_size))
    t0, span = _extent(trace, span)
    scale, unit = time_unit(span)
    for e in sorted(trace, key=lambda e: (e.rank, e.start, e.end)):
        lane = lane_of(e)
        y = e.rank - 0.45 + (0 if lane == "compute" else LANE_HEIGHT + 0.06)
        width = max(e.end - e.start, span * 0.002)  # an instant event still shows as a sliver
        ax.add_patch(Rectangle(((e.start - t0) * scale, y), width * scale, LANE_HEIGHT,
                               facecolor=_color(e), edgecolor="white", linewidth=0.6,
                               gid=f"r{e.rank} {lane}"))
        label = _label(e, span) if len(trace) <= 300 else None
        if label:  # no part in the layout (it sits inside its bar): thin_labels measures it after layout
            ax.text((e.start - t0 + width / 2) * scale, y + LANE_HEIGHT / 2, label, ha="center", va="center",
                    fontsize=MIN_FONT, color="white", clip_on=True, gid=BAR_LABEL, in_layout=False)
    centres = [r - 0.45 + LANE_HEIGHT / 2 + k * (LANE_HEIGHT + 0.06)
               for r in range(world_size) for k in (0, 1)]
    ax.set_yticks(centres, [f"r{r} {_lane(lane)}" for r in range(world_size) for lane in LANES], fontsize=MIN_FONT)
    for r in range(1, world_size):  # a thin rule between devices
        ax.axhline(r - 0.5, color=RULE_GREY, linewidth=0.6)
    ax.set_xlim(0, span * scale)
    ax.set_ylim(world_size - 0.5, -0.5)  # device 0 on top, as in the tables
    ax.set_xlabel(_("time ({unit})").format(unit=unit))
    used = list(dict.fromkeys(_category(e) for e in sorted(trace, key=lambda e: e.start)))
    # outside the axes, right of them: a legend never covers a bar or its label
    ax.legend(handles=[Patch(color=COLOR[c], label=_(STYLE[c][1])) for c in used], fontsize=MIN_FONT,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.tick_params(labelsize=MIN_FONT)
    ax.spines[["top", "right"]].set_visible(False)
    if title:
        ax.set_title(title, fontsize=MIN_FONT + 1, loc="left")
    if standalone:
        thin_labels(ax.figure)
    return ax.figure


def thin_labels(fig) -> None:
    """Hide each bar label that, as drawn (measured after layout, in the order drawn), would overlap one kept or
    leave the axes: a real run's bars overlap and crowd. Call it once the figure is complete."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = (fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)).get_renderer()
    fig.draw_without_rendering()
    for ax in fig.axes:
        inside, kept = ax.get_window_extent(renderer), []
        for text in (t for t in ax.texts if t.get_gid() == BAR_LABEL and t.get_visible()):
            box = text.get_window_extent(renderer).padded(1)  # a pixel apart at least
            if any(box.overlaps(other) for other in kept) or box.x0 < inside.x0 or box.x1 > inside.x1:
                text.set_visible(False)
            else:
                kept.append(box)


def _row_inches(world_size: int) -> float:
    """Height of one device's two lanes: roomy for a few devices, compact for many."""
    return 0.75 if world_size <= 4 else 0.5


def draw_dp_vs_ddp(dp_result, ddp_result):
    """DP above, DDP below, on one time axis: the longer bar is the slower step."""
    from matplotlib.figure import Figure
    n_dp, n_ddp = dp_result.workload.world_size, ddp_result.workload.world_size
    rows = _row_inches(max(n_dp, n_ddp)) * (n_dp + n_ddp)
    fig = Figure(figsize=(10, 1.6 + rows), layout="constrained")
    ax_dp, ax_ddp = fig.subplots(2, 1, sharex=True, height_ratios=[n_dp, n_ddp])
    span = max(dp_result.step_seconds, ddp_result.step_seconds) or 1.0
    draw_lanes(dp_result.trace, n_dp, ax=ax_dp, span=span, title=dp_title(dp_result))
    draw_lanes(ddp_result.trace, n_ddp, ax=ax_ddp, span=span, title=ddp_title(ddp_result))
    ax_dp.set_xlabel("")
    ax_dp.tick_params(labelbottom=True)  # sharex hides them: both panels keep readable times
    thin_labels(fig)
    return fig


def dp_title(dp_result) -> str:
    """DP's panel title: its step and what device 0 (the hub) and the others move (render/data_parallel's chart too)."""
    moved = [s + r for s, r in zip(dp_result.bytes_sent, dp_result.bytes_received)]
    others = _(", every other device {moved}").format(moved=mib(max(moved[1:]))) if len(moved) > 1 else ""
    return _("DP (nn.DataParallel, star model): step {step}; device 0 moves {moved}{others}").format(
        step=fmt(dp_result.step_seconds), moved=mib(moved[0]), others=others)


def ddp_title(ddp_result) -> str:
    """DDP's panel title: its step, its all-reduce and how much of it backward hides."""
    n = len(ddp_result.buckets)
    return _("DDP: step {step}; all-reduce {comm} in {n} bucket{s}: {hidden} hidden behind backward, "
             "{exposed} exposed").format(step=fmt(ddp_result.step_seconds), comm=fmt(ddp_result.comm_seconds), n=n,
                                         s="" if n == 1 else "s", hidden=fmt(ddp_result.hidden_seconds),
                                         exposed=fmt(ddp_result.exposed_seconds))


def _cells(position: float) -> float:
    """A time in columns, rounded so that float noise (35.9999999) cannot move a bar's edge."""
    return round(position, 6)


def lanes_text(trace, world_size: int, width: int = 72, span: float | None = None) -> str:
    """An ASCII Gantt chart: two rows per device, `width` columns for the whole step.

    Each event fills the columns it covers with its symbol (F fwd, B bwd, a digit for an
    all-reduce bucket, ...); '.' is idle. No raw floats are printed, so the text is stable."""
    t0, span = _extent(trace, span)
    scale, unit = time_unit(span)
    header = _("time 0 .. {span} {unit}, one column = {column} {unit}").format(
        span=f"{span * scale:.2f}", column=f"{span * scale / width:.3f}", unit=unit)
    lines, drawn = [header], set()
    names = max(display_width(_lane(lane)) for lane in LANES)  # 7 in English ("compute"): bars line up in any language
    for r in range(world_size):
        for lane in LANES:
            row = ["."] * width
            events = [e for e in trace if e.rank == r and lane_of(e) == lane]
            for e in sorted(events, key=lambda e: (e.start, e.end)):  # a later event wins a shared column
                first = min(width - 1, math.floor(_cells((e.start - t0) / span * width)))
                last = max(first + 1, min(width, math.ceil(_cells((e.end - t0) / span * width))))
                row[first:last] = _symbol(e) * (last - first)
            drawn.update(row)
            name = _lane(lane)
            lines.append(f"r{r} {name}{' ' * (names - display_width(name))} |{''.join(row)}|")
    # the legend names only what is visible: a very short event may be covered by its neighbour
    used = dict.fromkeys(c for c in map(_category, sorted(trace, key=lambda e: e.start))
                         if drawn & set(_symbols(c)))
    lines.append("  ".join(f"{STYLE[c][0]} {_(STYLE[c][1])}" for c in used))
    return "\n".join(lines)


def draw_lanes_sim_vs_real(sim_trace, real_trace, rank: int = 0, step: int = 1, title: str | None = None):
    """One device's lanes twice on one time axis (`render.style.draw_sim_vs_real`, overlaid): the simulator's
    prediction (outlined) above the real run's step `step` (filled), a row each for compute and comm, so where
    they agree and where they drift is plain to see. Times count from the start of the step."""
    from matplotlib.patches import Rectangle
    real = [e for e in real_trace if e.rank == rank and e.step == step]
    sim = [e for e in sim_trace if e.rank == rank]
    span = max([e.end for e in real + sim], default=1.0)
    # (gid, what the row is called, real?, its lane); the gid stays English for tests to find
    rows = [("simulated compute", _("simulated compute"), False, "compute"),
            ("real compute", _("real compute"), True, "compute"),
            ("simulated comm", _("simulated comm"), False, "comm"), ("real comm", _("real comm"), True, "comm")]
    scale, unit = time_unit(span)

    def draw(ax, events, span, filled):
        for y, (gid, _shown, real_row, lane) in enumerate(rows):  # this trace's two rows
            for e in (e for e in events if real_row == filled and lane_of(e) == lane):
                ax.add_patch(Rectangle((e.start * scale, y - 0.35), max(e.end - e.start, span * 0.002) * scale, 0.7,
                                       facecolor=_color(e) if filled else "none", edgecolor=_color(e),
                                       linewidth=0.8 if filled else 1.4, hatch=None if filled else "///", gid=gid))

    default = _("rank {rank}: simulator fitted to the run (outlined) vs measured (filled)").format(rank=rank)
    fig = draw_sim_vs_real(sim, real, draw, figsize=(10, 3.0), titles=(title or default,), overlay=True, span=span)
    ax = fig.axes[0]
    ax.set_yticks(range(len(rows)), [shown for _gid, shown, _real, _lane in rows], fontsize=MIN_FONT)
    ax.tick_params(labelsize=MIN_FONT)
    ax.set_xlim(0, span * scale)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel(_("time ({unit}) from the start of step {step}").format(unit=unit, step=step))
    ax.spines[["top", "right"]].set_visible(False)
    return fig
