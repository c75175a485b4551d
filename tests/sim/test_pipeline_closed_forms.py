"""`closed_form_bubble` (what the lesson prints next to the simulation) equals the simulated bubble."""
import pytest

from simlab.sim.pipeline import as_ratio, bubble_fraction, bubble_ratio, closed_form_bubble, explore, simulate
from simlab.sim.pipeline_schedules import make_schedule

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


# ---------------------------------------------------------------- the papers' convention: idle / ideal

@pytest.mark.parametrize("name, p, m", CASES)
def test_bubble_ratio_is_the_papers_closed_form(name, p, m):
    """Narayanan et al. 2021 write the 1F1B bubble as (p-1)/m (idle over ideal time); the Zero Bubble
    paper and the Ultra-Scale Playbook do the same. Each closed form is written out here, not derived."""
    v = 2 if name == "interleaved" else 1
    t = simulate(make_schedule(name, p, m, v), t_f=1.0 / v, t_b=2.0 / v, t_w=1.0 / v)
    papers = {"gpipe": (p - 1) / m, "1f1b": (p - 1) / m, "interleaved": (p - 1) / (v * m),
              "zero-bubble": (p - 1) / (3 * m)}[name]
    assert bubble_ratio(t, p) == pytest.approx(papers, abs=1e-12)
    assert closed_form_bubble(name, p, m, v, convention="ratio") == pytest.approx(papers, abs=1e-15)
    # the conversion the lesson states: ratio = fraction / (1 - fraction)
    f = bubble_fraction(t, p)
    assert as_ratio(f) == pytest.approx(f / (1 - f)) == pytest.approx(papers, abs=1e-12)


def test_the_lessons_headline_numbers():
    """The lesson says the same 1F1B (p=4, m=8) reads 0.273 here and 0.375 in the papers."""
    t = simulate(make_schedule("1f1b", 4, 8))
    assert f"{bubble_fraction(t, 4):.3f}" == "0.273" and f"{bubble_ratio(t, 4):.3f}" == "0.375"
    assert closed_form_bubble("naive", 2, convention="ratio") == 1.0  # idle as long as the work itself


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_as_ratio_refuses_what_is_not_a_fraction(bad):
    with pytest.raises(ValueError, match="fraction=.*: must be a bubble fraction between 0 and 1"):
        as_ratio(bad)


def test_all_bubble_is_an_infinite_ratio():
    assert as_ratio(1.0) == float("inf") and as_ratio(0) == 0


def test_explore_reads_out_both_conventions():
    readout = explore("interleaved", 4, 8, 2)[2]
    assert readout["bubble_fraction"] == pytest.approx(3 / 19) and readout["bubble_ratio"] == pytest.approx(3 / 16)


def test_unknown_convention_is_a_one_line_error():
    with pytest.raises(ValueError, match="convention='percent'"):
        closed_form_bubble("1f1b", 4, 8, convention="percent")
