"""Lesson 6's advisor in text: the best plan first, every rejection counted, in the simulator's numbers."""
import pytest

from simlab.render.hybrid_advisor import advisor_text
from simlab.sim.advisor import family, search
from simlab.sim.advisor_explain import tie_line
from simlab.sim.hardware import cluster
from simlab.sim.model import PRESETS

GB = 1e9


# ---- advisor_text -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def found():
    return search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), global_batch=64)


def test_advisor_text_best_plan_first(found):
    text = advisor_text(found, top=3)
    lines = text.splitlines()
    assert lines[0] == f"{found['plans']} plans evaluated, {sum(found['rejected'].values())} rejected; " \
                       "the 3 fastest that fit:"
    assert lines[1].split() == ["#", "tp", "pp", "dp", "b", "schedule×v", "stages", "zero", "offload", "SP",
                                "recompute", "GB/GPU", "s/step", "MFU"]
    best = found["best"]
    assert best == found["candidates"][0]
    c, yes = best["config"], {True: "yes", False: "no"}
    schedule = c["schedule"] + (f"×{c['chunks']}" if c["chunks"] > 1 else "")
    assert lines[2].split() == ["1", *(str(c[k]) for k in ("tp", "pp", "dp", "microbatch")), schedule, "—",
                                str(c["zero"]), yes[c["offload"]], yes[c["sequence_parallel"]], c["recompute"],
                                f"{best['bytes_per_gpu']['total'] / GB:.2f}", f"{best['step_seconds']:.4g}",
                                f"{best['mfu']:.1%}"]
    assert (c["tp"], c["pp"], c["dp"]) == (1, 1, 8)  # 1.7B fits on one GPU: data parallel across the node
    assert [line.split()[0] for line in lines[2:5]] == ["1", "2", "3"] and lines[5] == "why:"
    assert lines[6:6 + len(found["explanation"])] == [f"  {e}" for e in found["explanation"]]
    assert lines[6].startswith(f"  best: {family(c)}")
    assert lines[6 + len(found["explanation"])] == f"  {tie_line(found['ties'])}"  # 1.7B: DDP and ZeRO tie
    assert ("notes:" in lines) == bool(found["notes"]) and ("rejected:" in lines) == bool(found["rejected"])
    assert text == advisor_text(found, top=3)


def test_advisor_text_marks_hsdp_and_lighter_end_stages():
    found = search(PRESETS["gpt3-175b"], cluster(gpus=256), 512, shard=4, pp=8, schedule="1f1b", cp=1)  # 3-D columns
    rows = [line.split() for line in advisor_text(found, top=10).splitlines()[2:12]]
    for row, plan in zip(rows, found["candidates"]):
        c = plan["config"]
        assert row[6] == ("ends-1" if c["stage_layers"] else "even")
        assert row[7] == str(c["zero"]) + (f"/{c['shard']}" if c["shard"] else "")


def test_advisor_text_notes_schedules_and_nothing_fits():
    big = search(PRESETS["gpt3-175b"], cluster(gpus=1024), global_batch=1536, cp=1)  # many nodes: FSDP ties
    text = advisor_text(big)
    assert "notes:" in text and big["notes"][0] in text
    best = big["best"]["config"]
    schedule = best["schedule"] + (f"×{best['chunks']}" if best["chunks"] > 1 else "")
    assert best["pp"] > 1 and text.splitlines()[2].split()[5] == schedule  # 175B needs a pipeline
    none = search(PRESETS["gpt3-175b"], cluster(gpus=8), global_batch=8)
    lines = advisor_text(none).splitlines()
    assert lines[0] == f"{none['plans']} plans evaluated, {none['plans']} rejected: no plan fits"
    assert lines[1] == "why:" and lines[2].startswith("  nothing fits")


def test_advisor_text_lists_the_rejections():
    found = search(PRESETS["megatron-18.4b-2021"], cluster(gpus=8), 64)
    lines = advisor_text(found, top=3).splitlines()
    rejected = lines[lines.index("rejected:") + 1:]
    reasons = list(found["rejected"].items())
    assert rejected[:8] == [f"  {n:>6}  {reason}" for reason, n in reasons[:8]]
    assert rejected[8:] == ([f"  {sum(n for _, n in reasons[8:]):>6}  … for {len(reasons) - 8} more reasons"]
                            if len(reasons) > 8 else [])


def test_advisor_text_sums_the_rarer_rejections():
    many = search(PRESETS["gpt3-175b"], cluster(gpus=1024, inter_node_gbps=25), global_batch=1536)
    reasons = list(many["rejected"].items())
    assert len(reasons) > 3
    lines = advisor_text(many, top=1, max_reasons=3).splitlines()
    rejected = lines[lines.index("rejected:") + 1:]
    assert rejected[:3] == [f"  {n:>6}  {reason}" for reason, n in reasons[:3]]
    assert rejected[3:] == [f"  {sum(n for _, n in reasons[3:]):>6}  … for {len(reasons) - 3} more reasons"]


# ---- the guide's conditions, as text ------------------------------------------------------------------------

def test_the_conditions_print_the_advisors_numbers():
    from simlab.render.hybrid_advisor import gather_text, hsdp_text, link_text, sweep_text, zero1_text
    from simlab.sim.hybrid_scenarios import (
        BY_KEY,
        flip,
        gather_units,
        hsdp_comparison,
        link_comparison,
        network_sweep,
        zero1_for_memory,
    )
    rows = link_comparison(BY_KEY["node-too-big"])
    lines = link_text(rows).splitlines()
    assert lines[0].split()[:4] == ["link", "inside", "a", "node"] and len(lines) == len(rows) + 2
    for line, r in zip(lines[1:], rows):
        assert line.startswith(r["link"]) and f"{r['PP']['ratio']:.2f}× {r['PP']['family']}" in line
    sweep = network_sweep(BY_KEY["nodes-slow"], gbps=(25.0, 3200.0))
    text = sweep_text(sweep)
    assert f"{sweep[0]['ZeRO-3']['ratio']:.2f}× {sweep[0]['ZeRO-3']['family']}" in text
    assert flip(sweep, "ZeRO-3")["wins"] == [3200.0] and "ZeRO-3: within the model's error of the best at 3200 " \
        "Gbit/s per node; the best at 3200 Gbit/s per node" in text
    assert "DP+TP+PP+ZeRO-1: within the model's error of the best at every network of this sweep" in text
    z = zero1_for_memory(BY_KEY["nodes-slow"])
    text = zero1_text(z)
    assert f"{z['zero1']['bytes_per_gpu']['total'] / GB:.2f}" in text and f"{z['time_ratio']:.2f}× plain DP" in text
    assert "both fit in 79 GB usable" in text
    text = hsdp_text(hsdp_comparison(gbps=(100.0,)))
    assert "ZeRO-3 in a node, replicated (HSDP)" in text and "shards over 8" in text
    text = gather_text(gather_units(BY_KEY["node-layer-too-big"]))
    assert "a whole layer" in text and "6,090,422,272" in text and text.splitlines()[1].endswith("no")


def test_advisor_text_shows_cp_only_where_a_plan_splits_the_sequence():
    long = search(PRESETS["llama3-8b"].with_(seq=131072), cluster("h100-80gb", gpus=8), 8, cp=4)
    lines = advisor_text(long, top=3).splitlines()
    head = lines[1].split()
    assert head[:5] == ["#", "tp", "pp", "dp", "cp"] and all(line.split()[4:6] == ["4", "ring"] for line in lines[2:5])
    flat = search(PRESETS["megatron-1.7b-2021"], cluster(gpus=8), 64, cp=1)
    assert "cp" not in advisor_text(flat, top=3).splitlines()[1].split()
