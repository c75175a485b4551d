"""Lesson 6's real 3-D run, shown: what a `parity.hybrid.run_hybrid` result proves, as text, and its timeline
per rank beside the model's prediction.

- `run_text(result)`: the rank grid's groups, losses against one process, bytes each rank sent on its TP, PP
  and DP groups against `sim.hybrid_traffic`, each rank's model states against the memory model. Only
  numbers that do not change from run to run are printed (counts, bytes, 4-decimal losses, pass marks), so
  nbval can compare it.
- `time_text(result)`: predicted and measured step time (changes every run: a cell of its own).
- `draw_predicted_vs_real(predicted, result)`: the simulated pipeline (`sim.hybrid_time.pipeline_trace`) above
  the real run's last step, every global rank a row, on one time axis.

    >>> r = {"config": {"tp": 1, "pp": 1, "dp": 2, "zero": 0, "schedule": "1f1b", "chunks": 1, "microbatch": 2},
    ...      "world_size": 2, "backend": "gloo", "groups": {"tp": [[0], [1]], "pp": [[0], [1]], "dp": [[0, 1]]},
    ...      "losses": [2.8, 2.7], "reference_losses": [2.8, 2.7], "max_abs_diff_vs_reference": 3e-7,
    ...      "bytes_sent_per_group": {"tp": [0, 0], "pp": [0, 0], "dp": [96, 96]},
    ...      "predicted_bytes_per_group": {"tp": [0, 0], "pp": [0, 0], "dp": [96, 96]},
    ...      "measured_memory_per_rank": [{"params": 48, "grads": 48, "optimizer": 96}] * 2,
    ...      "predicted_memory_per_rank": [{"params": 48, "grads": 48, "optimizer": 96}] * 2}
    >>> print(run_text(r).splitlines()[0])
    dp=2 × pp=1 × tp=1 = 2 processes (gloo), 1F1B, ZeRO-1 off
"""
from __future__ import annotations

from ..i18n import _
from ..sim.mesh import KINDS
from .pipeline import draw_gantt_sim_vs_real
from .style import rows_table

TOLERANCE = 1e-5  # the parity promise: losses and parameters within this of one process


def _header(result: dict) -> str:
    c = result["config"]
    schedule = _("interleaved 1F1B") + f" (v={c['chunks']})" if c["schedule"] == "interleaved" else "1F1B"
    cp = [f"cp={c['cp']} ({c['cp_comm']})"] if c.get("cp", 1) > 1 else []  # lesson 7: the sequence split too
    grid = " × ".join([f"dp={c['dp']}", *cp, f"pp={c['pp']}", f"tp={c['tp']}"])
    return _("{grid} = {n} processes ({backend}), {schedule}, ZeRO-1 {on_off}").format(
        grid=grid, n=result["world_size"], backend=result["backend"], schedule=schedule,
        on_off=_("on") if c["zero"] else _("off"))


def run_text(result: dict) -> str:
    """What the run proves, in numbers that are the same every time it runs."""
    ok = {True: "✓", False: "✗"}
    diff = result["max_abs_diff_vs_reference"]
    kinds = KINDS + tuple(k for k in ("cp", "dp-cp") if k in result["groups"])  # lesson 7's, where it splits s
    lines = [_header(result)]
    lines += ["  " + _("{kind} groups:").format(kind=kind) + " "
              + " ".join("[" + " ".join(map(str, g)) + "]" for g in result["groups"][kind]) for kind in kinds]
    kinds = tuple(k for k in kinds if k in result["bytes_sent_per_group"])
    lines.append(_("loss per step, mean over replicas: {losses}   one process: {reference}").format(
        losses=", ".join(f"{loss:.4f}" for loss in result["losses"]),
        reference=", ".join(f"{loss:.4f}" for loss in result["reference_losses"])))
    lines.append(_("losses and every parameter after the last step within {tolerance} of one process: {ok}").format(
        tolerance=f"{TOLERANCE:g}", ok=ok[diff <= TOLERANCE]))
    measured, predicted = result["bytes_sent_per_group"], result["predicted_bytes_per_group"]
    rows = [{"rank": r, **{_("{kind} bytes").format(kind=k): measured[k][r] for k in kinds},
             _("= model"): ok[all(measured[k][r] == predicted[k][r] for k in kinds)]}
            for r in range(result["world_size"])]
    lines += [_("bytes each rank sent per step, on each kind of group (measured; the model predicts the same):"),
              rows_table(rows)]
    mem = [{"rank": r, **{_(k): m[k] for k in ("params", "grads", "optimizer")},
            _("= model"): ok[m == p]} for r, (m, p) in enumerate(zip(result["measured_memory_per_rank"],
                                                                  result["predicted_memory_per_rank"]))]
    lines += [_("bytes of model states each rank holds (measured; the model predicts the same):"), rows_table(mem)]
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())


def time_text(result: dict) -> str:
    """Predicted vs measured seconds per step, and where the prediction says the time goes (the measured
    part changes from run to run)."""
    p, m = result["predicted_step_seconds"], result["measured_step_seconds"]
    line = _("step time: predicted {predicted} ms, measured {measured} ms (median of the steps after the first), "
             "predicted / measured = {ratio}").format(predicted=f"{p * 1e3:.1f}", measured=f"{m * 1e3:.1f}",
                                                        ratio=f"{p / m:.2f}")
    parts = sorted(((v, k) for k, v in result.get("predicted_breakdown", {}).items() if v > 0), reverse=True)
    return line + ("\n" + _("predicted:") + " " + ", ".join(f"{k} {v * 1e3:.1f} ms" for v, k in parts) if parts else "")


def draw_predicted_vs_real(predicted, result: dict):
    """The predicted pipeline timeline above the real run's last step (every global rank a row)."""
    return draw_gantt_sim_vs_real(predicted, result["trace"], result["world_size"],
                                  titles=(_("predicted: lesson 6's model on this machine's calibration, "
                                            "lesson 4's simulator"),
                                          _("measured: the real run's last step")))
