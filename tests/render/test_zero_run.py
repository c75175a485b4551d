"""Lesson 3's real run beside the model: the bars and the text say what the run measured, and say so when it
differs from the model."""
import matplotlib

matplotlib.use("Agg")

from simlab.render.zero_run import draw_real_vs_model, real_run_text  # noqa: E402 — after matplotlib.use("Agg")

from .test_zero_widgets import readable, run_real  # noqa: E402 — after matplotlib.use("Agg")


def test_real_run_view_is_readable_and_marks_a_different_order():
    real = run_real(3)
    fig = draw_real_vs_model(real)
    readable(fig)
    values = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "value"]
    assert values == [str(v) for v in [sum(real["measured_bytes_per_rank"][0][k] for k in
                                           ("params", "grads", "optimizer"))] * 3 + real["bytes_sent_per_rank"]]
    assert fig._suptitle.get_text() == "ZeRO-3 on 3 processes: measured = model"
    worse = {**real, "bytes_sent_per_rank": [v + 4 for v in real["bytes_sent_per_rank"]]}
    assert "measured ≠ model" in draw_real_vs_model(worse)._suptitle.get_text()
    assert "same events in the same order" in real_run_text(real, 3)
    assert "the orders differ (≠)" in real_run_text({**real, "stage": 2}, 3)  # a stage 3 run against stage 2
