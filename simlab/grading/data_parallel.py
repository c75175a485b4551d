"""Lesson 2's exercise: DDP's gradient buckets (`assign_buckets`) and when each may start its all-reduce
(`BucketReadiness`), graded against simlab's own on real models' parameter sizes and several caps; and a
prediction (buckets, bytes rank 0 sends) made before a real DDP run, graded against what it measured. An answer
that calls simlab's own bucketing is refused; a wrong prediction is told the idea it missed, not the number."""
from __future__ import annotations

from ..i18n import N_, _
from ..sim.data_parallel_buckets import BucketReadiness, assign_buckets, torch_rule_buckets
from .collectives import call_watched
from .common import fail, passed

BUCKET_MODELS = {  # parameter bytes in module order (weight, bias, …), from real layer shapes; names shown via _()
    N_("tiny MLP 8-16-16-4"): [512, 64, 1024, 64, 256, 16],
    N_("MLP 1024x4"): [4 * 1024 * 1024, 4096] * 4,
    N_("transformer block h=256"): [4 * 256 * 768, 4 * 768, 4 * 256 * 256, 4 * 256, 4 * 256, 4 * 256,
                                4 * 256 * 1024, 4 * 1024, 4 * 1024 * 256, 4 * 256, 4 * 256, 4 * 256],
    N_("one huge layer"): [64 << 20, 1024],
}
BUCKET_CAPS = [1, 1000, 4096, 1 << 20, 25 << 20]
# simlab's own bucketing (what the learner writes): an answer that calls any of it is refused
_REFERENCE_CODE = {assign_buckets.__code__: "assign_buckets", torch_rule_buckets.__code__: "torch_rule_buckets",
                   **{getattr(f, "fget", f).__code__: "BucketReadiness" for f in vars(BucketReadiness).values()
                      if hasattr(getattr(f, "fget", f), "__code__")}}
# boundary cases: buckets that reach the cap exactly (a `>=` off-by-one splits them), one tensor over the cap
EXACT_FIT = N_("five tensors, exact fits")
BOUNDARY_CASES = [(EXACT_FIT, [400, 400, 400, 400, 2000], cap) for cap in (800, 1600, 2000, 2400)]


def _backward_orders(n: int) -> list[list[int]]:
    """Grad-ready orders to replay: true reverse order, plus a scrambled one (hooks can fire out of order)."""
    reverse = list(reversed(range(n)))
    scrambled = reverse[1::2] + reverse[0::2]
    return [reverse, scrambled]


def _delegated(name: str) -> str:
    return _("it calls simlab's own {name}: write the bucketing yourself").format(name=name)


def _launch_sequence(readiness_cls, buckets, order) -> list[list[int]]:
    tracker = readiness_cls(buckets)
    launches = []
    for p in order:
        out = tracker.mark_ready(p)
        launches.append(None if out is None else list(out))  # None: a forgotten return, said as such
    return launches


def _bucket_mistake(got, sizes: list[int], cap: int, want: list[list[int]]) -> str:
    """Why a student's buckets differ from `want` (simlab's), in words a learner can act on."""
    if not isinstance(got, (list, tuple)) or not all(isinstance(b, (list, tuple)) for b in got):
        return _("returned {got}: return a list of buckets, each a list of parameter indices").format(got=repr(got))
    flat = [i for b in got for i in b]
    if sorted(flat) != list(range(len(sizes))):
        return _("buckets {got}: every parameter index 0..{last} must be in exactly one bucket").format(
            got=got, last=len(sizes) - 1)
    if any(len(b) == 0 for b in got):
        return _("buckets {got} include an empty one: open a new bucket only when there is a parameter to put "
                 "in it").format(got=got)
    if [list(b) for b in got] == torch_rule_buckets(sizes, cap):
        return _("buckets {got} follow torch's rule (close a bucket once it reaches the cap, keeping the "
                 "parameter that crossed it); here a parameter that would not fit starts the next bucket: "
                 "{want}").format(got=got, want=want)
    if [list(b) for b in got] == _packed(sizes, cap, lambda used, size: used + size >= cap):
        return _("buckets {got}: a bucket may fill up to the cap exactly; start a new one only when the next "
                 "parameter would go over it (more than the cap, not as much as the cap)").format(got=got)
    over = [list(b) for b in got if len(b) > 1 and sum(sizes[i] for i in b) > cap]
    if over:
        return _("bucket {bucket} holds {held} bytes, over the cap of {cap}: start a new bucket when the next "
                 "parameter would not fit").format(bucket=over[0], held=f"{sum(sizes[i] for i in over[0]):,}",
                                                   cap=f"{cap:,}")
    if flat != list(reversed(range(len(sizes)))):
        return _("buckets {got}: walk the parameters last to first (backward produces the last layer's "
                 "gradients first), so the indices run {last}, {before_last}, … 0").format(
            got=got, last=len(sizes) - 1, before_last=len(sizes) - 2)
    return _("buckets {got} but expected {want}: add while the bucket stays within the cap").format(got=got, want=want)


def _packed(sizes: list[int], cap: int, full) -> list[list[int]]:
    """Last to first, a new bucket whenever `full(used, size)` says the next parameter does not fit."""
    buckets, current, used = [], [], 0
    for i in reversed(range(len(sizes))):
        if current and full(used, sizes[i]):
            buckets, current, used = buckets + [current], [], 0
        current, used = current + [i], used + sizes[i]
    return buckets + ([current] if current else [])


def _launch_mistake(got: list[list[int]], buckets, order: list[int]) -> str:
    """Why a student's launch sequence is wrong: the first rule it breaks, replaying the gradients."""
    ready, launched = set(), []
    for p, out in zip(order, got):
        ready.add(p)
        if out is None:
            return _("mark_ready({p}) returned None: return a list of bucket indices (empty when none may "
                     "start)").format(p=p)
        for b in out:
            if b in launched:
                return _("bucket {b} launched twice").format(b=b)
            if not set(buckets[b]) <= ready:
                return _("bucket {b} launched when gradient {p} was ready, before all of its gradients {grads} "
                         "were").format(b=b, p=p, grads=list(buckets[b]))
            if b != len(launched):
                return _("bucket {b} launched before bucket {first}: every rank must start them in bucket order, "
                         "or the all-reduces pair up wrongly").format(b=b, first=len(launched))
            launched.append(b)
    return _("a bucket waited after it and every earlier one could start: return every bucket that may start now")


def check_bucketing(assign_fn, readiness_cls) -> None:
    """Grade a student's `assign_buckets` and `BucketReadiness` against simlab's on several models."""
    title, cases = _("DDP bucketing"), 0
    every = [(model, sizes, cap) for model, sizes in BUCKET_MODELS.items() for cap in BUCKET_CAPS] + BOUNDARY_CASES
    for model, sizes, cap in every:
        case = f"{_(model)}, cap_bytes={cap}"
        want, (got, called) = assign_buckets(sizes, cap), call_watched(assign_fn, _REFERENCE_CODE, sizes, cap)
        if called:
            fail(title, case, _delegated(called))
        if not isinstance(got, (list, tuple)) or [list(b) if isinstance(b, (list, tuple)) else b
                                                  for b in got] != want:
            fail(title, case, _bucket_mistake(got, sizes, cap, want))
        for order in _backward_orders(len(sizes)):
            expected = _launch_sequence(BucketReadiness, want, order)
            launches, called = call_watched(_launch_sequence, _REFERENCE_CODE, readiness_cls, want, order)
            if called:
                fail(title, case, _delegated(called))
            if launches != expected:
                fail(title, _("{case}, grads ready in order {order}").format(case=case, order=order),
                     _("launches differ from {expected}: {why}").format(
                         expected=expected, why=_launch_mistake(launches, want, order)))
        cases += 1
    passed(title, _("{cases} model/cap cases: buckets in reverse order under the cap, each launched "
                    "when its last gradient is ready, in bucket order").format(cases=cases))


# ---------------------------------------------------------------- predict, then run

# The exercise's run: an MLP the lesson never runs, on 3 ranks (lesson 2 prints 4-rank counts of the tiny MLP, whose
# ring bytes are 2·3/4 of its model whatever the buckets). Its 6 tensors, 4,248 bytes, every one a multiple of 3
# elements: 4 buckets by simlab's rule (a tensor over the cap alone), 2 by torch's.
PREDICT_SIZES, PREDICT_WORLD_SIZE, PREDICT_BATCH, PREDICT_CAP_BYTES = (12, 24, 24, 6), 3, 12, 1200


def check_ddp_prediction(predicted_buckets, predicted_bytes, real: dict, cap_bytes: int = PREDICT_CAP_BYTES) -> None:
    """Grade a prediction made before the run against what the real DDP run (`run_ddp`) measured:
    how many buckets it formed, and how many bytes rank 0's ring sent in one step. A wrong number gets the
    idea it missed, never the measured one: the ✗ line must not hand over the answer."""
    title = _("DDP prediction")
    n, sizes = real["world_size"], [4 * k for k in real["param_numels"]]  # fp32 bytes per tensor
    buckets, sent, model = len(real["buckets"]), real["bytes_sent_per_rank"][0], sum(sizes)
    if predicted_buckets is None or predicted_bytes is None:  # not answered yet: the exercise's stub state
        raise NotImplementedError(_("exercise: set predicted_buckets and predicted_bytes before the run"))
    for name, value in (("predicted_buckets", predicted_buckets), ("predicted_bytes", predicted_bytes)):
        if isinstance(value, bool) or not isinstance(value, int):
            fail(title, name, _("{value}: write a whole number before running the cell").format(value=repr(value)))
    if predicted_buckets != buckets:
        why = {1: _("one bucket would need the whole model ({model} bytes) under the {cap}-byte cap").format(
                   model=f"{model:,}", cap=f"{cap_bytes:,}"),
               len(sizes): _("a bucket packs several tensors until the next one would not fit"),
               len(torch_rule_buckets(sizes, cap_bytes)): _(
                   "that is torch's rule (a bucket closes once it reaches the cap, keeping the tensor that crossed "
                   "it); simlab starts a new bucket instead")}
        fail(title, _("predicted {n} bucket{s}").format(n=predicted_buckets, s="" if predicted_buckets == 1 else "s"),
             _("not the number of buckets the real run formed: ") + why.get(
                 predicted_buckets, _("walk the tensors last to first, adding while the total stays <= the cap")))
    if predicted_bytes != sent:
        why = [(model, _("that is the model once: a ring all-reduce is a reduce-scatter then an all-gather, each "
                         "sending (N-1)/N of every bucket")),
               (2 * model, _("2x the model is the limit for many ranks; with N={n} each rank sends 2(N-1)/N of "
                             "it").format(n=n)),
               ((n - 1) * model, _("that is DP's hub sending the model to N-1 devices; in a ring every rank sends "
                                   "the same 2(N-1)/N of the model")),
               ((n - 1) * model // n, _("that is only the reduce-scatter half of each all-reduce; the all-gather "
                                        "half sends as much again")),
               (2 * sent, _("that counts bytes sent plus bytes received; the question asks what rank 0 sends"))] + [
               (2 * (m - 1) * model // m, _("that is 2(N-1)/N of the model for N={m}; this run has N={n} ranks").format(
                   m=m, n=n)) for m in (4, 8) if m != n and 2 * (m - 1) * model % m == 0]  # N=2: the model once, above
        reasons = [reason for wrong, reason in why if wrong == predicted_bytes]  # where two coincide, both
        fail(title, _("predicted {nbytes} bytes").format(nbytes=f"{predicted_bytes:,}"),
             _("not what rank 0 sent in one step: ") + (_("; or ").join(reasons) or _("sum 2(N-1)/N of each bucket's bytes")))
    passed(title, _("{n} bucket{s} and {sent} bytes from rank 0 per step, as the real run measured").format(
        n=buckets, s="" if buckets == 1 else "s", sent=f"{sent:,}"))
