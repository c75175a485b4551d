"""DDP's gradient buckets: which gradients are all-reduced together, and when each bucket may go.

Backward produces gradients from the last layer to the first, so DDP walks the parameters in
*reverse* order and packs them into buckets of at most `cap_bytes`: the first bucket fills up early
in backward, and its all-reduce overlaps with the rest of backward. A bucket is launched as soon as
its last gradient is ready — but, as in torch's DDP, strictly in bucket order, so every rank issues
the same all-reduces in the same order (the ranks' collectives would mismatch otherwise).

The simulator and the real executor (`simlab.exec.data_parallel`) use these very functions.

How torch's own DDP differs (torch 2.13: `torch/nn/parallel/distributed.py`, `_BucketCapacityConfig`
and `_ddp_init_helper`; `torch/csrc/distributed/c10d/reducer.cpp`, `compute_bucket_assignment_by_size`
and `Reducer::rebuild_buckets`; checked on a real run, `_get_ddp_logging_data()`):
- `bucket_cap_mb` is in MiB (`int(bucket_cap_mb * 1024 * 1024)` bytes), 25 by default.
- A torch bucket closes once it *reaches* its limit (`bucket.size >= limit`, after adding the
  parameter), so it may overshoot by its last parameter; ours never exceeds the cap unless one
  parameter alone does. The two rules can differ (`torch_rule_buckets` is torch's; the exercise
  grades ours): the lesson's default scene gets 3 buckets from ours and 2 from torch's.
- The first iteration (default `find_unused_parameters=False`) uses one bucket for everything (limit
  `sys.maxsize`): the declaration order may not be the backward order. After that backward, the
  buckets are rebuilt in the order the gradients became ready, with the first bucket capped at 1 MiB
  (`_DEFAULT_FIRST_BUCKET_BYTES`; in 2.13 only while `bucket_cap_mb` is left at its default).

    >>> assign_buckets([400, 400, 400, 400, 2000], cap_bytes=1000)  # param 4 is the last layer
    [[4], [3, 2], [1, 0]]
"""
from __future__ import annotations

from .._checks import check_int


def assign_buckets(param_nbytes: list[int], cap_bytes: int) -> list[list[int]]:
    """Parameter indices per bucket, filled in reverse order; a bucket never exceeds `cap_bytes`
    unless a single parameter is larger than the cap, which then gets a bucket of its own."""
    check_int("cap_bytes", cap_bytes, 1)
    if not isinstance(param_nbytes, (list, tuple)):
        raise ValueError(f"param_nbytes={param_nbytes!r}: must be a list of byte counts, one per parameter")
    buckets, current, used = [], [], 0
    for index in reversed(range(len(param_nbytes))):
        size = check_int(f"param_nbytes[{index}]", param_nbytes[index], 0)
        if current and used + size > cap_bytes:
            buckets.append(current)
            current, used = [], 0
        current.append(index)
        used += size
    if current:
        buckets.append(current)
    return buckets


def torch_rule_buckets(param_nbytes: list[int], cap_bytes: int, first_cap_bytes: int | None = None,
                       order=None) -> list[list[int]]:
    """torch's rule (`compute_bucket_assignment_by_size`): add the parameter, then close the bucket once
    it holds >= its limit; the first bucket's limit is `first_cap_bytes` (torch's rebuilt buckets: 1 MiB
    with the default cap). `order`: the gradient-ready order (default: reverse, as at a rebuild)."""
    check_int("cap_bytes", cap_bytes, 1)
    limit = check_int("first_cap_bytes", first_cap_bytes, 1) if first_cap_bytes is not None else cap_bytes
    buckets, current, used = [], [], 0
    for index in (reversed(range(len(param_nbytes))) if order is None else order):
        current.append(index)
        used += check_int(f"param_nbytes[{index}]", param_nbytes[index], 0)
        if used >= limit:  # after adding: the parameter that crosses the limit stays in this bucket
            buckets.append(current)
            current, used, limit = [], 0, cap_bytes
    return buckets + ([current] if current else [])


class BucketReadiness:
    """Tracks gradients as backward produces them; says which buckets may start their all-reduce.

    >>> ready = BucketReadiness([[4], [3, 2], [1, 0]])
    >>> ready.mark_ready(2), ready.mark_ready(4), ready.mark_ready(3)  # bucket 1 waits for bucket 0
    ([], [0], [1])
    """

    def __init__(self, buckets: list[list[int]]):
        if not isinstance(buckets, (list, tuple)) or not all(
                isinstance(b, (list, tuple)) and all(type(p) is int for p in b) for b in buckets):
            raise ValueError(f"buckets={buckets!r}: must be lists of parameter indices, as assign_buckets returns")
        self.buckets = buckets
        self.bucket_of = {p: b for b, params in enumerate(buckets) for p in params}
        self.reset()

    def reset(self) -> None:
        """Call at the start of every backward."""
        self.pending = [len(params) for params in self.buckets]
        self.launched = 0  # buckets [0, launched) have started their all-reduce

    def mark_ready(self, param_index: int) -> list[int]:
        """Record that a gradient is ready; return the buckets that may now be launched, in order."""
        if type(param_index) is not int or param_index not in self.bucket_of:  # True would pass for 1
            raise ValueError(f"param_index={param_index!r}: must be a parameter index of one of the buckets")
        bucket = self.bucket_of[param_index]
        if self.pending[bucket] == 0:
            raise ValueError(f"param_index={param_index}: its gradient was already marked ready")
        self.pending[bucket] -= 1
        start = self.launched
        while self.launched < len(self.buckets) and self.pending[self.launched] == 0:
            self.launched += 1
        return list(range(start, self.launched))

    @property
    def done(self) -> bool:
        return self.launched == len(self.buckets)
