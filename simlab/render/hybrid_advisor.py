"""Lesson 6's advisor, as text: `sim.advisor.search`'s fastest plans as a fixed-width table (what nbval
compares), why the best one wins, where it only ties within the model's error and what would decide, the
notes, and what was rejected.

    >>> from simlab.sim.advisor import search
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.model import PRESETS
    >>> print(advisor_text(search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), 64), top=1).splitlines()[0])
    4380 plans evaluated, 0 rejected; the 1 fastest that fit:
"""
from __future__ import annotations

from ..i18n import _
from ..sim.advisor_explain import tie_line
from .style import rows_table
from .zero import GB

COLUMNS = ("#", "tp", "pp", "dp", "b", "schedule×v", "stages", "zero", "offload", "SP", "recompute", "GB/GPU",
           "s/step", "MFU")
TEXT_COLUMNS = {"schedule×v", "stages", "zero", "offload", "SP", "recompute"}  # left-aligned; numbers align right


def _config_row(i: int, plan: dict) -> list[str]:
    """One plan's row: `stages` is "even" or "ends-1" (one layer fewer on the first and last stage), `zero`
    "3/8" when ZeRO shards over 8 of the DP group's GPUs and replicates across the rest (HSDP)."""
    c, yes = plan["config"], {True: "yes", False: "no"}
    stages = "—" if c["pp"] == 1 else ("even" if not c.get("stage_layers") else
                                       "ends-1" if c["stage_layers"][0] < max(c["stage_layers"]) else "listed")
    return [str(i), str(c["tp"]), str(c["pp"]), str(c["dp"]), str(c["microbatch"]),
            c["schedule"] + (f"×{c['chunks']}" if c["chunks"] > 1 else ""), stages,
            str(c["zero"]) + (f"/{c['shard']}" if c.get("shard") else ""), yes[c["offload"]],
            yes[c["sequence_parallel"]], c["recompute"], f"{plan['bytes_per_gpu']['total'] / GB:.2f}",
            f"{plan['step_seconds']:.4g}", f"{plan['mfu']:.1%}"]


def advisor_text(result: dict, top: int = 5, max_reasons: int = 8) -> str:
    """`advisor.search`'s verdict as fixed-width text: its `top` best plans (best first), why it chose the
    best (and which families tie with it within the model's error, and what would decide), its notes, and what
    it rejected (reason: count; the `max_reasons` commonest, then the rest summed).
    Numbers have fixed precision, for nbval."""
    shown = result["candidates"][:top]
    rejected = sum(result["rejected"].values())
    lines = [_("{plans} plans evaluated, {rejected} rejected").format(plans=result["plans"], rejected=rejected)
             + (_("; the {n} fastest that fit:").format(n=len(shown)) if shown else _(": no plan fits"))]
    table = [list(COLUMNS)] + [_config_row(i, p) for i, p in enumerate(shown, 1)]
    widths = [max(len(row[c]) for row in table) for c in range(len(COLUMNS))]
    lines += ["  ".join(v.ljust(w) if COLUMNS[c] in TEXT_COLUMNS else v.rjust(w)
                        for c, (v, w) in enumerate(zip(row, widths))).rstrip() for row in table if shown]
    lines += [_("why:")] + [f"  {line}" for line in result["explanation"]]
    if result.get("ties"):
        lines += [f"  {tie_line(result['ties'])}"]
    if result["notes"]:
        lines += [_("notes:")] + [f"  {line}" for line in result["notes"]]
    if result["rejected"]:
        reasons = list(result["rejected"].items())
        lines += [_("rejected:")] + [f"  {count:>6}  {reason}" for reason, count in reasons[:max_reasons]]
        rest, more = reasons[max_reasons:], _("… for {n} more reasons").format(n=len(reasons[max_reasons:]))
        lines += [f"  {sum(c for _r, c in rest):>6}  {more}"] if rest else []
    return "\n".join(lines)


def published_runs_text(rows: list[dict], summary: dict) -> str:
    """`sim.published.validation()` as a fixed-width table: each run's tokens/s per GPU published and ours, the
    error and the range its unknown knobs span; then `sim.published.summary` in one paragraph."""
    table = rows_table([{_("run"): r["what"], _("GPUs"): f"{r['gpus']} × {r['gpu']}",
                         _("published"): f"{r['published']:,.0f}", _("ours"): f"{r['ours']:,.0f}",
                         _("error"): f"{r['error']:+.1%}",
                         _("swing"): ", ".join(f"{x:+.0%}" for x in r["swing"]) or "—",
                         _("fits"): _("yes") if r["fits"] else _("no")} for r in rows])
    s = summary
    lean = _("the model is optimistic on average") if s["mean"] > 0 else _("the model is pessimistic on average")
    return table + "\n" + _(
        "{within_20} of {runs} runs within 20 %, {within_35} within 35 %; median |error| {median}, mean {mean} "
        "({lean}); worst {worst} {worst_error}; {not_fitting} published plans the model says do not fit; "
        "published peak memory within 10 % for {memory_within_10} of {memory}").format(
        **{**s, "median": f"{s['median']:.1%}", "mean": f"{s['mean']:+.1%}", "worst_error": f"{s['worst_error']:+.1%}",
           "lean": lean})
