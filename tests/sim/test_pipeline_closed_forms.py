"""`closed_form_bubble` (what the lesson prints next to the simulation) equals the simulated bubble."""
import pytest

from simlab.sim.pipeline import bubble_fraction, closed_form_bubble, simulate
from simlab.sim.schedules import make_schedule

# interleaved needs m % p == 0; ZB-H1's formula holds once a steady state exists (m >= p)
CASES = [(name, p, m) for name in ("gpipe", "1f1b", "interleaved", "zero-bubble")
         for p in (1, 2, 3, 4, 8) for m in (1, 2, 4, 8, 12, 16)
         if not (name == "interleaved" and m % p or name == "zero-bubble" and m < p)]


@pytest.mark.parametrize("name, p, m", CASES)
def test_closed_form_bubble_is_the_simulated_one(name, p, m):
    v = 2 if name == "interleaved" else 1
    t = simulate(make_schedule(name, p, m, v), t_f=1.0 / v, t_b=2.0 / v, t_w=1.0 / v)
    assert bubble_fraction(t, p) == pytest.approx(closed_form_bubble(name, p, m, v), abs=1e-12)


@pytest.mark.parametrize("p", [1, 2, 5])
def test_naive_closed_form(p):
    assert bubble_fraction(simulate(make_schedule("naive", p)), p) == pytest.approx(closed_form_bubble("naive", p))


def test_unknown_schedule_is_a_one_line_error():
    with pytest.raises(ValueError, match="name='1f2b'"):
        closed_form_bubble("1f2b", 4, 8)
