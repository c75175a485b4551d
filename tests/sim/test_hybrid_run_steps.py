"""How long a real 3-D run may be: a parity check holds to 1e-5 for `PARITY_STEPS` steps, no longer (float32
round-off that training amplifies; the measurements are in `simlab.sim.hybrid_run`'s docstring). A longer run
is refused before anything starts, instead of exiting 0 with `max_abs_diff_vs_reference` 0.5 at 400 steps."""
import contextlib
import io

import pytest

import simlab.parity.hybrid as P
from simlab.cli import main
from simlab.parity.hybrid import run_hybrid
from simlab.sim.hybrid_run import PARITY_STEPS, HybridRun

REFUSAL = (f"at most {PARITY_STEPS}: past that, float32 round-off amplified by training outgrows the 1e-5 the run is "
           "held to (measured: 1e-5 from 12 steps, 3e-3 at 256, 0.5 at 400)")


def test_a_run_up_to_the_bound_is_built_and_a_longer_one_refused_in_one_line():
    assert PARITY_STEPS == 8 and HybridRun.build(steps=PARITY_STEPS).steps == PARITY_STEPS
    for steps in (PARITY_STEPS + 1, 400):
        with pytest.raises(ValueError) as refused:
            HybridRun.build(steps=steps)
        assert str(refused.value).startswith(f"steps={steps}: {REFUSAL}") and "\n" not in str(refused.value)


def test_the_command_line_refuses_the_issues_400_steps_before_the_reference_trains(no_launch, monkeypatch):
    monkeypatch.setattr(P, "reference_model", lambda *a, **k: pytest.fail("the reference ran"))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as done:
        main(["run", "3d", "--dp", "2", "--steps", "400"])
    assert done.value.code == 2 and out.getvalue() == ""
    assert err.getvalue().startswith(f"simlab run hybrid: error: --steps=400: {REFUSAL}") and err.getvalue().count("\n") == 1


@pytest.mark.slow  # 8 steps on 2 processes: ~5 s on 2 cores
def test_at_the_bound_the_worst_grid_measured_still_trains_like_one_process():
    """tp·dp·pp = 1·1·2 drifted most (7.0e-6 at 8 steps on an AMD EPYC, 1.6e-5 at 16; elsewhere 7.0e-6 at 16)."""
    assert run_hybrid(tp=1, dp=1, pp=2, steps=PARITY_STEPS)["max_abs_diff_vs_reference"] <= 1e-5
