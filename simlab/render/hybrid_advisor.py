"""Lesson 6's advisor, as text: `sim.advisor.search`'s fastest plans as a fixed-width table (what nbval
compares), why the best one wins, where it only ties within the model's error and what would decide, the
notes, and what was rejected; then the guide's qualifiers (`sim.hybrid_scenarios`): NVLink or PCIe
(`link_text`), the network sweep (`sweep_text`), ZeRO-1 for memory (`zero1_text`), HSDP (`hsdp_text`) and
how much ZeRO-3 gathers at once (`gather_text`).

    >>> from simlab.sim.advisor import search
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.model import PRESETS
    >>> print(advisor_text(search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), 64), top=1).splitlines()[0])
    8352 plans evaluated, 0 rejected; the 1 fastest that fit:
"""
from __future__ import annotations

from ..i18n import _
from ..sim.advisor_explain import MODEL_ERROR, tie_line
from ..sim.hybrid_scenarios import flip
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


def _with_lesson7(table: list[list[str]], shown: list[dict]) -> list[list[str]]:
    """Lesson 7's columns, cp (with how K,V move) and ep, after dp — only where a shown plan splits that way, so
    lesson 6's tables keep their columns."""
    for key, head in (("ep", "ep"), ("cp", "cp")):
        if any(p["config"].get(key, 1) > 1 for p in shown):
            cells = [str(p["config"][key]) + (f" {p['config']['cp_comm']}" if key == "cp" and p["config"]["cp"] > 1
                                               else "") for p in shown]
            for row, cell in zip(table, [head] + cells):
                row.insert(4, cell)
    return table


def advisor_text(result: dict, top: int = 5, max_reasons: int = 8) -> str:
    """`advisor.search`'s verdict as fixed-width text: its `top` best plans (best first), why it chose the
    best (and which families tie with it within the model's error, and what would decide), its notes, and what
    it rejected (reason: count; the `max_reasons` commonest, then the rest summed).
    Numbers have fixed precision, for nbval."""
    shown = result["candidates"][:top]
    rejected = sum(result["rejected"].values())
    lines = [_("{plans} plans evaluated, {rejected} rejected").format(plans=result["plans"], rejected=rejected)
             + (_("; the {n} fastest that fit:").format(n=len(shown)) if shown else _(": no plan fits"))]
    table = _with_lesson7([list(COLUMNS)] + [_config_row(i, p) for i, p in enumerate(shown, 1)], shown)
    heads = table[0]
    widths = [max(len(row[c]) for row in table) for c in range(len(heads))]
    lines += ["  ".join(v.ljust(w) if heads[c] in TEXT_COLUMNS | {"cp"} else v.rjust(w)
                        for c, (v, w) in enumerate(zip(row, widths))).rstrip() for row in table if shown]
    # the explanation, ties, notes and reasons are the simulator's Messages: said here in the reader's language
    lines += [_("why:")] + [f"  {_(line)}" for line in result["explanation"]]
    if result.get("ties"):
        lines += [f"  {_(tie_line(result['ties']))}"]
    if result["notes"]:
        lines += [_("notes:")] + [f"  {_(line)}" for line in result["notes"]]
    if result["rejected"]:
        reasons = list(result["rejected"].items())
        lines += [_("rejected:")] + [f"  {count:>6}  {_(reason)}" for reason, count in reasons[:max_reasons]]
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


def _vs(plan: dict | None) -> str:
    """A rival's cell: its step time as a multiple of the best's, and its family ("—": none fits)."""
    return "—" if plan is None else f"{plan['ratio']:.2f}× {plan['family']}"


def _tie_rule() -> str:
    return _("each answer: its fastest plan, its step time as a multiple of the best's; a tie within the model's "
             "error is ≤ {limit:.2f}×").format(limit=1 + MODEL_ERROR)


def link_text(rows: list[dict]) -> str:
    """`sim.hybrid_scenarios.link_comparison`: per link inside a node, the best plan and the guide's three answers."""
    table = rows_table([{_("link inside a node"): r["link"], _("bus GB/s"): f"{r['intra_bandwidth'] / GB:.0f}",
                         _("best plan"): r["best"]["family"], _("s/step"): f"{r['best']['step_seconds']:.3g}",
                         **{name: _vs(r[name]) for name in ("PP", "ZeRO", "TP")}} for r in rows])
    return table + "\n" + _tie_rule()


def _where(gbps: list, rows: list[dict]) -> str:
    """Networks as a list of Gbit/s per node, or every one of the sweep, or none of it."""
    if len(gbps) == len(rows):
        return _("every network of this sweep")
    if not gbps:
        return _("no network of this sweep")
    return _("{speeds} Gbit/s per node").format(speeds=", ".join(f"{g:g}" for g in gbps))


def sweep_text(rows: list[dict], names=("ZeRO-3", "DP+TP+PP+ZeRO-1")) -> str:
    """`sim.hybrid_scenarios.network_sweep`: per network, the best plan and each named answer's fastest plan;
    then where each answer first ties with the best and first is the best (`flip`)."""
    table = rows_table([{_("network, Gbit/s per node"): f"{r['gbps']:g}", _("best plan"): r["best"]["family"],
                         _("s/step"): f"{r['best']['step_seconds']:.3g}",
                         **{_("fastest {name}").format(name=n): _vs(r[n]) for n in names}} for r in rows])
    lines = [table, _tie_rule()]
    for n in names:
        f = flip(rows, n)
        lines.append(_("{name}: within the model's error of the best at {tie}; the best at {wins}").format(
            name=n, tie=_where(f["tie"], rows), wins=_where(f["wins"], rows)))
    return "\n".join(lines)


def zero1_text(r: dict) -> str:
    """`sim.hybrid_scenarios.zero1_for_memory`: ZeRO-1 and plain DP on the same grid, memory and time."""
    c = r["zero1"]["config"]
    rows = [{_("plan"): name, _("GB per GPU"): f"{p['bytes_per_gpu']['total'] / GB:.2f}",
             _("s/step"): f"{p['step_seconds']:.4g}"} for name, p in (("ZeRO-1", r["zero1"]), (_("plain DP"), r["plain"]))]
    saved = (r["plain"]["bytes_per_gpu"]["total"] - r["zero1"]["bytes_per_gpu"]["total"]) / GB
    fit = (_("both fit in {usable:.0f} GB usable") if r["plain"]["fits"] else _("plain DP does not fit in {usable:.0f} "
           "GB usable")).format(usable=r["zero1"]["usable_bytes_per_gpu"] / GB)
    return "\n".join([
        _("the best plan and the same plan with plain DP: tp {tp} × pp {pp} × dp {dp}, micro-batch {b}").format(
            tp=c["tp"], pp=c["pp"], dp=c["dp"], b=c["microbatch"]),
        rows_table(rows),
        _("ZeRO-1 takes {ratio:.2f}× plain DP's step time and frees {saved:.2f} GB per GPU ({fit})").format(
            ratio=r["time_ratio"], saved=saved, fit=fit)])


def hsdp_text(rows: list[dict]) -> str:
    """`sim.hybrid_scenarios.hsdp_comparison`: ZeRO-3 over every GPU against ZeRO-3 in a node, replicated."""
    def cell(p):
        return "—" if p is None else _("{ratio:.2f}×, {gb:.1f} GB/GPU").format(
            ratio=p["ratio"], gb=p["bytes_per_gpu"]["total"] / GB) + (
            _(", shards over {n}").format(n=p["config"]["shard"]) if p["config"]["shard"] else "")
    return rows_table([{_("network, Gbit/s per node"): f"{r['gbps']:g}", _("best plan"): r["best"]["family"],
                        _("ZeRO-3 over every GPU"): cell(r["ZeRO-3"]),
                        _("ZeRO-3 in a node, replicated (HSDP)"): cell(r["ZeRO-3 (HSDP)"])} for r in rows])


def gather_text(rows: list[dict]) -> str:
    """`sim.hybrid_scenarios.gather_units`: ZeRO-3 alone, by how much it gathers at once."""
    names = {"layer": _("a whole layer"), "matrix": _("the layer's largest weight matrix"),
             "advisor": _("the advisor's count (≤ 1e9, ≥ one matrix)")}
    return rows_table([{_("ZeRO-3 gathers at once"): names[r["unit"]], _("parameters"): f"{r['params']:,}",
                        _("fewest GB per GPU"): f"{r['bytes_per_gpu'] / GB:.1f}",
                        _("fits in {usable:.0f} GB usable").format(usable=r["usable"] / GB): _("yes") if r["fits"]
                        else _("no")} for r in rows])
