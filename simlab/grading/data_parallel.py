"""Lesson 2's exercise: DDP's gradient buckets (`assign_buckets`) and when each may start its all-reduce
(`BucketReadiness`), graded against simlab's own on real models' parameter sizes and several caps; and a
prediction (buckets, bytes rank 0 sends) made before a real DDP run, graded against what it measured."""
from __future__ import annotations

from ..sim.buckets import BucketReadiness, assign_buckets, torch_rule_buckets
from .common import fail

BUCKET_MODELS = {  # parameter bytes in module order (weight, bias, …), from real layer shapes
    "tiny MLP 8-16-16-4": [512, 64, 1024, 64, 256, 16],
    "MLP 1024x4": [4 * 1024 * 1024, 4096] * 4,
    "transformer block h=256": [4 * 256 * 768, 4 * 768, 4 * 256 * 256, 4 * 256, 4 * 256, 4 * 256,
                                4 * 256 * 1024, 4 * 1024, 4 * 1024 * 256, 4 * 256, 4 * 256, 4 * 256],
    "one huge layer": [64 << 20, 1024],
}
BUCKET_CAPS = [1, 1000, 4096, 1 << 20, 25 << 20]


def _backward_orders(n: int) -> list[list[int]]:
    """Grad-ready orders to replay: true reverse order, plus a scrambled one (hooks can fire out of order)."""
    reverse = list(reversed(range(n)))
    scrambled = reverse[1::2] + reverse[0::2]
    return [reverse, scrambled]


def _launch_sequence(readiness_cls, buckets, order) -> list[list[int]]:
    tracker = readiness_cls(buckets)
    return [list(tracker.mark_ready(p)) for p in order]


def check_bucketing(assign_fn, readiness_cls) -> None:
    """Grade a student's `assign_buckets` and `BucketReadiness` against simlab's on several models."""
    title, cases = "DDP bucketing", 0
    for model, sizes in BUCKET_MODELS.items():
        for cap in BUCKET_CAPS:
            case = f"{model}, cap_bytes={cap}"
            want, got = assign_buckets(sizes, cap), assign_fn(sizes, cap)
            if [list(b) for b in got] != want:
                fail(title, case, f"buckets {got} but expected {want}")
            for order in _backward_orders(len(sizes)):
                expected = _launch_sequence(BucketReadiness, want, order)
                if _launch_sequence(readiness_cls, want, order) != expected:
                    fail(title, f"{case}, grads ready in order {order}",
                          f"launches differ from {expected} (a bucket may only go after all earlier ones)")
            cases += 1
    print(f"{title}: ✓ {cases} model/cap cases: buckets in reverse order under the cap, "
          f"each launched when its last gradient is ready, in bucket order")


# ---------------------------------------------------------------- predict, then run

PREDICT_CAP_BYTES = 5000  # the tiny MLP's 8 tensors (11,152 bytes): 3 buckets by simlab's rule, 2 by torch's


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def check_ddp_prediction(predicted_buckets, predicted_bytes, real: dict, cap_bytes: int = PREDICT_CAP_BYTES) -> None:
    """Grade a prediction made before the run against what the real DDP run (`run_ddp`) measured:
    how many buckets it formed, and how many bytes rank 0's ring sent in one step."""
    title = "DDP prediction"
    n, sizes = real["world_size"], [4 * k for k in real["param_numels"]]  # fp32 bytes per tensor
    buckets, sent, model = len(real["buckets"]), real["bytes_sent_per_rank"][0], sum(sizes)
    if predicted_buckets is None or predicted_bytes is None:  # not answered yet: the exercise's stub state
        raise NotImplementedError("exercise: set predicted_buckets and predicted_bytes before the run")
    for name, value in (("predicted_buckets", predicted_buckets), ("predicted_bytes", predicted_bytes)):
        if isinstance(value, bool) or not isinstance(value, int):
            fail(title, name, f"{value!r}: write a whole number before running the cell")
    if predicted_buckets != buckets:
        why = {1: f"one bucket would need the whole model ({model:,} bytes) under the {cap_bytes:,}-byte cap",
               len(sizes): "a bucket packs several tensors until the next one would not fit",
               len(torch_rule_buckets(sizes, cap_bytes)): "that is torch's rule (a bucket closes once it "
               "reaches the cap, keeping the tensor that crossed it); simlab starts a new bucket instead"}
        fail(title, f"predicted {_count(predicted_buckets, 'bucket')}", f"the real run formed {buckets}: "
             + why.get(predicted_buckets, "walk the tensors last to first, adding while the total stays <= the cap"))
    if predicted_bytes != sent:
        why = {model: "that is the model once: a ring all-reduce is a reduce-scatter then an all-gather, "
                      "each sending (N-1)/N of every bucket",
               2 * model: f"2x the model is the limit for many ranks; with N={n} each rank sends 2(N-1)/N of it",
               (n - 1) * model: "that is DP's hub sending the model to N-1 devices; in a ring every rank "
                                "sends the same 2(N-1)/N of the model"}
        fail(title, f"predicted {predicted_bytes:,} bytes", f"rank 0 really sent {sent:,} per step: "
             + why.get(predicted_bytes, "sum 2(N-1)/N of each bucket's bytes"))
    print(f"{title}: ✓ {_count(buckets, 'bucket')} and {sent:,} bytes from rank 0 per step, as the real run measured")
