"""Lesson 1's exercise check: a ring all-gather plan the learner writes. The right plan passes; a plan that
simlab's own collectives build (the exercise imports simlab, whose `ring_all_gather` is exactly the answer)
is refused however it is reached, and so is a ring that runs the wrong way (the spec says right neighbour).
And nothing printed before the prediction check (lesson 1, the exercise) shows its answer."""
import re
import sys

import pytest
from notebook_cells import texts  # tests/notebook_cells.py: one reader of stored notebooks

import simlab
from simlab.grading.collectives import GATHER_CASES, check_plan_runs_for_real, check_ring_all_gather
from simlab.plan import CollectivePlan, Transfer, split_sizes
from simlab.sim import collectives as reference
from simlab.sim.collectives_stepper import simulate


def _ring(world_size, numel, itemsize=4, right=True):
    """The all-gather by hand: in step s rank r forwards chunk (r ∓ s) % n to its right (or left) neighbour."""
    n, sizes, steps = world_size, split_sizes(numel, world_size), []
    for s in range(n - 1):
        chunks = [(r - s) % n if right else (r + s) % n for r in range(n)]
        steps.append(tuple(Transfer(s, r, (r + 1) % n if right else (r - 1) % n, c, sizes[c] * itemsize, "copy")
                           for r, c in enumerate(chunks)))
    return CollectivePlan("mine", n, sizes, itemsize, "own", tuple(steps), meta={"goal": "all_gather"})


def _left_ring(world_size, numel, itemsize=4):
    return _ring(world_size, numel, itemsize, right=False)


def _refused(capsys, plan_fn, reason):
    with pytest.raises(AssertionError):
        check_ring_all_gather(plan_fn)
    out = capsys.readouterr().out
    assert out.startswith("ring all-gather plan: ✗") and reason in out, out
    return out


def test_a_hand_written_ring_passes(capsys):
    check_ring_all_gather(_ring)
    assert capsys.readouterr().out.startswith(f"ring all-gather plan: ✓ {len(GATHER_CASES)} cases")


def test_the_left_ring_is_a_correct_all_gather_but_not_the_one_asked_for(capsys):
    assert simulate(_left_ring(4, 10)).final_ok  # it does gather everything …
    out = _refused(capsys, _left_ring, "in this ring every rank sends to its right neighbour (r + 1) % n")
    assert "world_size=3" in out and "rank 0 sends to rank 2" in out  # … at n = 2 left and right are the same rank


def _from_all_reduce(world_size, numel, itemsize=4):  # the all-reduce's second half, renumbered
    plan = reference.ring_all_reduce(world_size, numel, itemsize)
    steps = tuple(tuple(Transfer(t.step - (world_size - 1), t.src, t.dst, t.chunk, t.nbytes, "copy") for t in step)
                  for step in plan.steps[world_size - 1:])
    return CollectivePlan("mine", world_size, plan.chunk_sizes, itemsize, "own", steps)


@pytest.mark.parametrize("plan_fn, name", [
    (simlab.ring_all_gather, "ring_all_gather"),                                        # passed as it is
    (lambda n, numel, itemsize=4: simlab.ring_all_gather(n, numel, itemsize), "ring_all_gather"),  # wrapped
    (lambda n, numel, itemsize=4: simlab.make_plan("ring-all-gather", n, numel, itemsize), "make_plan"),
    (lambda n, numel, itemsize=4: reference.plan_for("ring-all-gather", n, numel, itemsize), "plan_for"),  # cached
    (_from_all_reduce, "ring_all_reduce"),
])
def test_simlabs_own_plan_is_refused_however_it_is_reached(capsys, plan_fn, name):
    reference.plan_for("ring-all-gather", 1, 3)  # already in the cache: the check must see the call anyway
    before = sys.getprofile()
    out = _refused(capsys, plan_fn, f"it calls simlab's own {name}: build the transfers yourself")
    assert out.startswith("ring all-gather plan: ✗ world_size=1, numel=3:")  # the first case already
    assert sys.getprofile() is before  # the watch is gone after the check


def test_the_real_run_check_refuses_it_too_before_starting_processes(capsys):
    with pytest.raises(AssertionError):
        check_plan_runs_for_real(simlab.ring_all_gather, world_size=4, numel=10)
    assert "it calls simlab's own ring_all_gather" in capsys.readouterr().out


def test_a_learner_may_still_use_split_sizes_and_the_simulator(capsys):
    def curious(world_size, numel, itemsize=4):
        plan = _ring(world_size, numel, itemsize)
        simulate(plan)  # looking at one's own plan is not delegating
        return plan
    check_ring_all_gather(curious)
    assert "✓" in capsys.readouterr().out


@pytest.mark.parametrize("path, before", [(f"{folder}{lang}01_collectives.ipynb", None if folder != "solutions/" else
                                           "l1-predict-q") for folder in ("notebooks/", "exercises/", "solutions/")
                                          for lang in ("", "zh/")])
def test_nothing_before_the_prediction_gives_its_answer_away(path, before):
    """Rank 2 of 11 float32 on 4 ranks sends 68 B (32 + 36): no lesson or exercise text shows 68 or 36 B,
    and the lesson's one uneven all-reduce table has other chunks (10 float32: 3, 3, 2, 2)."""
    text = "\n".join(texts(path, before))
    assert not re.search(r"\b68\b|\b36 B\b", text)
