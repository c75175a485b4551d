"""The one look of every lesson's pictures and tables: the palette, the colour of each thing the course draws,
the helpers every renderer shares, and the one way a simulation is laid over a real run.

- The palette: every colour a picture or a widget uses is named here, once; no other module writes a colour
  of its own (tests/render/test_style.py checks it). `KIND_COLOR` is the colour of a kind, whatever draws
  it: an event's ("send", "recv", "compute", "comm") and a process group's ("tp", "dp", "pp").
- Figures: `new_ax` (the caller's axes, or a fresh Figure without pyplot's global state), `time_unit`
  (s / ms / µs / ns for a time axis), MIN_FONT (the smallest text on any figure).
- Text: `display_width` and `pad` (columns in a fixed-width font: a Chinese character takes two), `align`,
  `rows_table` (a list of dicts as an aligned table: what nbval compares), `mib`, `fmt`.
- `draw_sim_vs_real`: a simulation and a real run of the same work on one time axis, the simulation first.

    >>> print(rows_table([{"rank": "r0", "sent": 96, "step": 0.0021}, {"rank": "r1", "sent": 1024, "step": 3e-5}]))
    rank  sent   step
    r0    96     2.10 ms
    r1    1,024  30.0 µs
"""
from __future__ import annotations

import unicodedata

from ..i18n import _

# ---------------------------------------------------------------- the palette

# seaborn's "deep": what a lesson names (a part of model state, an op, a rank, a kind of group)
BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, PINK, GREY, OLIVE = (
    "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974")
# matplotlib's default cycle: the events of a trace, lesson 1's transfers, and every verdict (✓ green, ✗ red)
TAB_BLUE, TAB_ORANGE, TAB_GREEN, TAB_RED, TAB_GREY = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"
# greys, darkest first
INK = "#333333"  # dark text and outlines
SOFT_INK = "#555555"  # secondary text, thin outlines
ARROW_GREY = "#666666"  # arrows and notes between boxes
FAINT_GREY = "#777777"  # a note standing in for what is not drawn
FRAME_GREY = "#888888"  # a node's dashed frame
EDGE_GREY = "#999999"  # cell outlines; the colour of what has no colour of its own
RULE_GREY = "#cccccc"  # a thin rule between rows
EMPTY_GREY = "#d9d9d9"  # a cell that cannot hold anything (a host holds no parameters)
PAPER_GREY = "#f4f4f4"  # an empty cell's background
PALE_YELLOW = "#fdf2cc"  # someone else's block (ZeRO), a pipeline stage's fill
PAPER = "#ffffff"  # the background of a picture drawn in the browser (render/chart.py), and a text's halo

# ---------------------------------------------------------------- what each colour means

# the kind of an event (lessons 1, 2: `Event.kind`) and of a process group (lesson 6: `Mesh.groups`)
KIND_COLOR = {"send": TAB_ORANGE, "recv": TAB_BLUE, "compute": TAB_GREEN, "comm": TAB_GREY,
              "tp": RED, "dp": ORANGE, "pp": PURPLE}
MATCH_COLOR = {True: TAB_GREEN, False: TAB_RED}  # a verdict: simulated == real, or fits / does not fit
# lesson 1: a chunk's box, a transfer's arrow (the receiver adds, or overwrites)
NOT_HELD_COLOR = "#e6e6e6"
UNKNOWN_COLOR = "#d8c9a8"  # a real run holds values but cannot say whose inputs are in them
TRANSFER_COLOR = {"reduce": TAB_RED, "copy": TAB_BLUE}
# lesson 2: a step's phases, on the compute lane and the comm lane; neighbouring buckets alternate shades
PHASE_COLOR = {"fwd": BLUE, "bwd": GREEN, "loss": PURPLE, "update": BROWN, "scatter inputs": ORANGE,
               "replicate": RED, "gather outputs": PINK, "scatter grads": OLIVE, "reduce grads": "#8c1c13",
               "all-reduce": TAB_RED}
ALL_REDUCE_SHADES = (TAB_RED, "#f08a8b")
# lesson 3: a GPU's model state (and its host's, under Offload); owned vs gathered blocks; Offload's lanes
PART_COLOR = {"params": BLUE, "grads": ORANGE, "optimizer": GREEN}
CPU_COLOR = GREY
OWNED_COLOR, GATHERED_COLOR = BLUE, PALE_YELLOW
OFFLOAD_COLOR = {"compute": BLUE, "comm": ORANGE, "cpu": GREEN}  # the GPU's work, its copies, the host's Adam
# lesson 4: an action's op (F, B, and the split backward's I and W)
OP_COLOR = {"F": BLUE, "B": GREEN, "I": "#8ccf8f", "W": "#c9a227"}
# lesson 5: a rank's shard, a block whole on every rank, a sum of partials; a step of the block
RANK_COLORS = [BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, PINK, GREY]
SHARED_COLOR = "#bdbdbd"  # whole on every rank
SUM_COLOR = "#f2e6a7"  # Y after the all-reduce: every rank's partial added in
STEP_COLOR = {"local": "#dbe6f4", "identity": "#fde9d6", "comm": "#f28e2b"}  # what a step does: `step_kind`
# lesson 6: a pipeline stage's fill (pale, so the group outlines drawn over it stay the loudest marks), the
# parts of a GPU's memory, and where a step's time goes
STAGE_FILL = ["#dbe9f6", "#e2f0d9", PALE_YELLOW, "#f3e0ef", "#e0f3f3", "#f6e3d5", "#e8e8e8", "#eae3f5"]
MEMORY_COLOR = {**PART_COLOR, "activations": PURPLE}
TIME_COLOR = {"compute": BLUE, "tp_comm": KIND_COLOR["tp"], "pp_p2p": KIND_COLOR["pp"], "pp_bubble": "#cdc3e3",
              "dp_comm": KIND_COLOR["dp"], "overlap": "#9fb7d9", "offload": CPU_COLOR,
              "optimizer": PART_COLOR["optimizer"], "cp_comm": PINK, "ep_comm": BROWN}  # lesson 7's CP and EP too
# lesson 5b: one step on one GPU. Model states as lesson 3's parts, the fp32 master copy and Adam's two moments
# in greens (lesson 3's "optimizer" is the three together); activations in purples by what kind of tensor a term
# is (the s² scores red: they are what flash and selective recomputation remove); what the GPU cannot give to
# tensors in greys; a step's phases; the machines on a roofline
STATE_COLOR = {"params": BLUE, "grads": ORANGE, "master": "#2e7d44", "adam_m": GREEN, "adam_v": "#9fd3a8"}
# one colour per kind of stored tensor (segments of one colour get white edges): the norms' inputs, the GEMMs' inputs,
# Q K V, the s² scores, FlashAttention's log-sum-exp, the MLP's 4h-wide tensors, the dropout masks after each block
TERM_GROUP_COLOR = {"norm inputs": "#b7aedb", "GEMM inputs": PURPLE, "Q, K, V": "#9d91c9", "s² scores": RED,
                    "flash log-sum-exp": PINK, "GeLU in and out": "#6a5aa6", "dropout masks": "#d9d2ee"}
TERM_GROUP = {"ln1_input": "norm inputs", "qkv_input": "GEMM inputs", "q": "Q, K, V", "k": "Q, K, V",
              "v": "Q, K, V", "softmax_output": "s² scores", "softmax_dropout_mask": "s² scores",
              "softmax_dropout_output": "s² scores", "flash_lse": "flash log-sum-exp", "out_proj_input": "GEMM inputs",
              "attention_dropout_mask": "dropout masks", "ln2_input": "norm inputs", "fc1_input": "GEMM inputs",
              "gelu_input": "GeLU in and out", "gelu_output": "GeLU in and out", "mlp_dropout_mask": "dropout masks"}
TERM_COLOR = {term: TERM_GROUP_COLOR[group] for term, group in TERM_GROUP.items()}
STEP_EXTRA_COLOR = {"working": "#c9bfe6", "embedding": "#e6e0f5", "logits": OLIVE}  # activations around the layers
RESERVE_COLOR = {"cuda_context": EDGE_GREY, "nccl": RULE_GREY, "fragmentation": EMPTY_GREY, "free": PAPER_GREY}
STEP_PHASE_COLOR = {"forward": BLUE, "backward": GREEN, "recompute": PINK, "output_layer": PURPLE,
                    "optimizer": BROWN}
MACHINE_COLOR = {"this machine": TAB_BLUE, "h100-80gb": TAB_ORANGE}

# ---------------------------------------------------------------- figures

MIN_FONT = 10  # points: every word on a figure, shown at DISPLAY_DPI (10 pt = 14 px)
# the fonts of a picture drawn in the browser (render/chart.py): matplotlib's own first, so a chart reads like
# the course's figures, then the CJK fonts a system may have (Noto Sans CJK, as `i18n.use_cjk_font` registers)
FONT_STACK = ('"DejaVu Sans", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "PingFang SC", '
              '"Microsoft YaHei", "WenQuanYi Micro Hei", sans-serif')


def new_ax(ax, figsize):
    """Use the caller's axes, or make a Figure without touching pyplot's global state."""
    if ax is not None:
        return ax
    from matplotlib.figure import Figure
    return Figure(figsize=figsize, layout="constrained").add_subplot()


def time_unit(span: float) -> tuple[float, str]:
    """(scale, unit): s / ms / µs / ns, so that the numbers on a time axis `span` seconds long are readable."""
    for scale, unit in ((1.0, "s"), (1e3, "ms"), (1e6, "µs"), (1e9, "ns")):
        if span * scale >= 1:
            return scale, unit
    return 1e9, "ns"


def _length(trace) -> float:
    """Seconds from a trace's first event to its last (0 if it has none)."""
    return max((e.end for e in trace), default=0.0) - min((e.start for e in trace), default=0.0)


def draw_sim_vs_real(sim_trace, real_trace, draw, *, figsize, titles=None, overlay: bool = False,
                     span: float | None = None):
    """A simulation and a real run of the same work on one time axis, the simulation first: how every lesson
    lays its prediction over the measurement (lesson 2: one rank's lanes; lessons 4 and 6: Gantt charts).

    `draw(ax, trace, span, real)` draws one of the two into `ax` on a time axis `span` seconds long (`real`:
    False for the simulation, True for the real run); `span` defaults to the longer of the two, each from its
    first event to its last. Two panels, the simulation above, share the time axis (labelled once, under the
    lower) and are titled `titles` (default "simulated" and "real"); `overlay=True` draws both into one axes,
    titled `titles[0]` if given, and leaves it to `draw` to tell them apart. Returns the Figure."""
    from matplotlib.figure import Figure
    span = span or max(_length(sim_trace), _length(real_trace)) or 1.0
    fig = Figure(figsize=figsize, layout="constrained")
    axes = [fig.add_subplot()] * 2 if overlay else list(fig.subplots(2, 1, sharex=True))
    for ax, trace, real in zip(axes, (sim_trace, real_trace), (False, True)):
        draw(ax, trace, span, real)
    titles = titles or (() if overlay else (_("simulated"), _("real")))
    for ax, title in zip(dict.fromkeys(axes), titles):
        ax.set_title(title, fontsize=MIN_FONT + 1, loc="left")
    if not overlay:  # the shared axis is labelled once, under the panel that shows its ticks
        axes[0].set_xlabel("")
    return fig


# ---------------------------------------------------------------- text

def display_width(text: str) -> int:
    """Columns `text` takes in a fixed-width font: 2 for a wide or full-width character (Chinese, and
    full-width punctuation such as '，'), else 1. Ambiguous ones (·, Σ, →, ×) count 1, as Latin fonts
    draw them: English tables keep exactly the widths `len` gave them."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int) -> str:
    """`text` left-aligned in `width` display columns (str.ljust counts characters, not columns)."""
    return text + " " * (width - display_width(text))


def align(rows: list[list[str]]) -> list[str]:
    """Left-align columns two spaces apart, by display width; trailing spaces dropped so goldens stay clean."""
    widths = [max(display_width(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(pad(c, w) for c, w in zip(row, widths)).rstrip() for row in rows]


def mib(nbytes: float) -> str:
    """Bytes in MiB, one decimal: '56.0 MiB'."""
    return f"{nbytes / 2**20:.1f} MiB"


def fmt(value) -> str:
    """A value as a table shows it: a float is seconds (µs, ms or s), an int gets thousands separators."""
    if isinstance(value, float):
        if value < 1e-3:
            return f"{value * 1e6:.1f} µs"
        return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.3f} s"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def rows_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A list of dicts as an aligned table; floats are seconds (µs, ms or s), ints get separators."""
    columns = columns or list(rows[0]) if rows else []
    return "\n".join(align([columns] + [[fmt(row[c]) for c in columns] for row in rows]))
