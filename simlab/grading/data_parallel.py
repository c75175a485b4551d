"""Lesson 2's exercise: DDP's gradient buckets (`assign_buckets`) and when each may start its all-reduce
(`BucketReadiness`), graded against simlab's own on real models' parameter sizes and several caps."""
from __future__ import annotations

from ..sim.buckets import BucketReadiness, assign_buckets
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
