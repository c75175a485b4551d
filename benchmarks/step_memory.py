"""One training step's peak memory: our model beside torch's own estimator and the H200 we measured.

The step is `make gpu-check`'s timed one (tools/gpu_checks/timing.py): a GPT of 1.11 B parameters (20 layers,
h 2048, 16 heads, s 2048, V 50304, tied), 8 sequences, bf16 autocast, SDPA, AdamW, in plain PyTorch. Three
answers to "how many bytes at its peak?":
  model     simlab.sim.advisor.evaluate_plan on the `h200` preset (tp = pp = dp = 1, mixed precision, flash,
            the fp32 loss autocast runs):
            what the time model's timing row predicts beside it
  torch     torch.distributed._tools.mem_tracker.MemTracker under FakeTensorMode: torch's own estimator runs
            the step on fake tensors (no memory, no GPU) and counts every tensor by kind. On this CPU build it
            runs with CPU bf16 autocast, whose cast lists differ from CUDA's in places: an estimate
  measured  the peak the H200 reported (benchmarks/gpu_check.md, `memory: one train step (peak)`)

    .venv/bin/python benchmarks/step_memory.py              # about 30 s, 2 GB of host memory
    .venv/bin/python benchmarks/step_memory.py --json

At the peak (the loss's backward) the gradients do not exist yet (zero_grad sets them to None), while the
fp32 gradient of the logits and the activations stored by this implementation (fp32 norms' inputs under
autocast, the attention's own output beside its reshaped copy) do; the breakdown shows which term misses.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

from gpu_checks.timing import GPT_STEP, STEP_LOSS, gpt_model  # noqa: E402 — after sys.path gains tools/

KINDS = ("params", "grads", "optimizer", "activations", "temp")


def model_bytes(shape: dict, batch: int) -> dict:
    from simlab.sim.advisor import evaluate_plan
    from simlab.sim.hardware import cluster
    from simlab.sim.hybrid import Plan
    from simlab.sim.model import Transformer
    spec = Transformer("gpt-step", shape["layers"], shape["hidden"], shape["heads"], seq=shape["seq"],
                       vocab=shape["vocab"], tied=True, dropout=False)
    plan = Plan(tp=1, pp=1, dp=1, microbatch=batch, precision="mixed", attention="flash", overlap="none",
                loss=STEP_LOSS)
    got = evaluate_plan(spec, cluster("h200", gpus=1), batch, plan)["bytes_per_gpu"]
    return {k: float(got.get(k, 0.0)) for k in KINDS} | {"total": float(got["total"])}


def torch_estimate(shape: dict, batch: int) -> dict:
    """MemTracker's peak of the second of two steps (the first creates the optimizer's state)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
    from torch.nn import functional as F
    names = {_MemRefType.PARAM: "params", _MemRefType.GRAD: "grads", _MemRefType.OPT: "optimizer",
             _MemRefType.ACT: "activations", _MemRefType.TEMP: "temp"}
    with FakeTensorMode():
        model = gpt_model(**shape, dev=torch.device("cpu"))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        tokens = torch.randint(0, shape["vocab"], (batch, shape["seq"] + 1))
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        tracker = MemTracker()
        tracker.track_external(model, opt, x, y)
        for _ in range(2):
            tracker.reset_mod_stats()  # MemTracker follows one iteration at a time
            with tracker:
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(x).reshape(-1, shape["vocab"]), y.reshape(-1))
                loss.backward()
                opt.step()
        (peak,) = tracker.get_tracker_snapshot("peak").values()  # one device
    out = {name: float(peak.get(kind, 0)) for kind, name in names.items()}
    return out | {"total": float(peak["Total"])}


def measured_peak() -> float | None:
    """The H200's peak from benchmarks/gpu_check.md, in bytes (MB there are 10^6 bytes); None without it."""
    path = ROOT / "benchmarks" / "gpu_check.md"
    found = re.search(r"\| memory: one train step \(peak\) .*?\| peak ([\d,.]+) MB", path.read_text()) \
        if path.exists() else None
    return float(found.group(1).replace(",", "")) * 1e6 if found else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    shape, batch = GPT_STEP["full"], 8
    rows = {"model": model_bytes(shape, batch), "torch": torch_estimate(shape, batch)}
    peak = measured_peak()
    if args.json:
        print(json.dumps({"rows": rows, "measured": peak}))
        return 0
    print(f"one training step's peak memory, MB (GPT 1.11 B, {batch} × {shape['seq']} tokens, bf16 autocast)")
    print(f"{'':10}" + "".join(f"{k:>13}" for k in (*KINDS, "total")) + "   measured/this")
    for name, got in rows.items():
        ratio = f"{peak / got['total']:.2f}×" if peak else "n/a"
        print(f"{name:10}" + "".join(f"{got[k] / 1e6:13,.0f}" for k in (*KINDS, "total")) + f"   {ratio:>14}")
    print(f"{'measured':10}{'':65}{peak / 1e6:13,.0f}   (H200, benchmarks/gpu_check.md)" if peak else
          "measured: none (benchmarks/gpu_check.md has no GPU run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
