"""`simlab.parity.collectives.run_collective`: our collectives on real ranks against torch's and the simulator's
steps; bad input refused before a process starts, a wrong result caught, old names accepted, and with
`inputs="powers-of-two"` every real chunk decoded to whose inputs it holds."""
import dataclasses

import pytest

from simlab.exec import collectives as C
from simlab.parity import collectives as compare
from simlab.sim.collectives import PLANS
from simlab.sim.collectives_stepper import steps_match


@pytest.mark.parametrize("name", list(PLANS))
def test_run_collective_agrees_with_torch_and_simulator(name):
    res = compare.run_collective(name, world_size=3, numel=8, seed=1, snapshots=True)
    assert res["matches_simulator"] and res["max_abs_diff_vs_torch"] == 0.0
    assert res["max_abs_diff_vs_reference"] == 0.0  # the exact integer sums the simulator expects
    assert res["backend"] == "gloo" and res["world_size"] == 3
    assert res["bytes_sent_per_rank"] == res["plan"].bytes_sent_per_rank()
    assert res["trace"].bytes_sent_per_rank(3) == res["bytes_sent_per_rank"]


def test_run_collective_without_snapshots_still_checks_the_trace():
    res = compare.run_collective("ring-all-reduce", world_size=4, numel=3)
    assert res["matches_simulator"] and res["max_abs_diff_vs_torch"] == 0.0
    assert all(v is None for step in res["steps"] for row in step.values for v in row)


@pytest.mark.parametrize("kwargs", [dict(name="ring", world_size=2, numel=4),
                                    dict(name="tree-broadcast", world_size=0, numel=4),
                                    dict(name="tree-broadcast", world_size=2, numel=0),
                                    dict(name="tree-broadcast", world_size=2, numel=4, seed=-1)])
def test_run_collective_rejects_bad_input_before_starting(kwargs, no_launch):
    with pytest.raises(ValueError):
        compare.run_collective(**kwargs)


def test_run_collective_catches_a_wrong_result(monkeypatch):
    ours = C.ring_all_reduce  # run_collective finds the executor's function by the plan's name
    monkeypatch.setattr(C, "ring_all_reduce", lambda t, recorder=None, group=None: (ours(
        t, recorder, group), t.add_(1)))  # forked ranks inherit the patch
    res = compare.run_collective("ring-all-reduce", world_size=2, numel=4)
    assert res["max_abs_diff_vs_reference"] == 1.0 and res["max_abs_diff_vs_torch"] == 1.0


def test_old_names_still_run_and_the_result_uses_the_new_one():
    res = compare.run_collective("ring-allreduce", world_size=2, numel=4)
    assert res["name"] == "ring-all-reduce" and res["max_abs_diff_vs_torch"] == 0.0


@pytest.mark.parametrize("name", list(PLANS))
def test_powers_of_two_real_runs_decode_to_the_simulated_sources(name):
    """Rank r brings 2**r: every real held chunk decodes to the ranks summed in, and on every step of
    every collective that is exactly the simulator's contribution set (not just its values)."""
    res = compare.run_collective(name, world_size=4, numel=7, snapshots=True, inputs="powers-of-two")
    assert res["matches_simulator"] and res["max_abs_diff_vs_torch"] == 0.0 == res["max_abs_diff_vs_reference"]
    for sim_step, real_step in zip(res["sim"].steps, res["steps"], strict=True):
        for r in range(4):
            for c, want in enumerate(sim_step.sources[r]):
                if want is not None:  # where the simulator says a rank holds a chunk
                    assert real_step.sources[r][c] == want, (name, sim_step.index, r, c)


def test_a_double_add_is_a_mismatch_even_if_it_decodes():
    """1 + 1 = 2 decodes as rank 1 alone: the value check, not the decoding, is what judges a run."""
    res = compare.run_collective("ring-all-reduce", world_size=3, numel=3, snapshots=True, inputs="powers-of-two")
    step = res["steps"][1]
    rows = [list(row) for row in step.values]
    rows[1][0] = rows[1][0] * 2  # pretend rank 1's chunk 0 got its value added twice
    bad = dataclasses.replace(step, values=tuple(map(tuple, rows)))
    assert steps_match(res["sim"].steps[1:2], [bad]) == [False]


def test_powers_of_two_refuses_rings_it_cannot_encode_exactly(no_launch):
    with pytest.raises(ValueError, match="world_size=25: inputs='powers-of-two' takes at most 24"):
        compare.run_collective("ring-all-reduce", world_size=25, numel=25, inputs="powers-of-two")
    with pytest.raises(ValueError, match="inputs='squares'"):
        compare.run_collective("ring-all-reduce", world_size=2, numel=2, inputs="squares")
