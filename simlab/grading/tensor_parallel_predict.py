"""Lesson 5's predict-then-run checks, graded against one real `run_tp(**MLP_RUN)` (answers committed before it
runs). The lesson states Megatron's split in its own convention (A by columns, B by rows) and the all-reduce
counts, so the exercise asks what it does not print:
- `check_split_choice`: which dim of `nn.Linear`'s stored weight, (out, in), each rank keeps a block of, for
  fc1 (A) and fc2 (B), against the executor's own shard layout (`ParallelMLP.shards`); and *why* the backward
  all-reduces (a choice of four statements), against the plan's backward and the collectives the real run counted.
- `check_forward_bytes`: the bytes each rank sends in one forward, against the bytes the real run's ranks
  all-reduced (its trace's forward events: the real tensors' sizes, ring-accounted).
A wrong answer gets a hint naming the idea it missed, never the value to copy. A prediction left as None (the
exercise's stub) raises NotImplementedError, like an unwritten answer.
"""
from __future__ import annotations

from ..i18n import N_, _
from .common import fail, passed

# run_tp(**MLP_RUN); ffn = 4h. Not the lesson's shapes (8 tokens × hidden 8): its printed bytes must not be the answer
MLP_RUN = {"world_size": 4, "block": "mlp", "batch": 2, "seq": 3, "hidden": 12, "ffn": 48}
ITEMSIZE = 4  # run_tp runs fp32
TOL = 1e-5
REASONS = "abcd"  # the exercise's four statements about the backward; "b" is right
RIGHT_REASON = "b"
REASON_HINTS = {
    "a": N_("after g's forward every rank holds the whole Z, so dZ arrives whole, and the same, on every rank: "
            "nothing about it is partial"),
    "c": N_("each rank keeps and updates only its own shards of A and B: their gradients are never summed across "
            "TP ranks. Which gradient does the layer below need, and which part of A did each rank's share of it "
            "come through?"),
    "d": N_("f's forward is the identity: X is already whole on every rank. Backward swaps sum and identity; ask "
            "which gradient is partial on each rank"),
}


def _unanswered(*answers) -> None:
    if any(answer is None for answer in answers):
        raise NotImplementedError(_("exercise: write your prediction in the cell above"))


def _real_mlp_run(title: str, real) -> None:
    """Fail unless `real` is the result of run_tp(**MLP_RUN), equal to one process."""
    from ..sim.tensor_parallel import block_steps
    m = MLP_RUN
    plan = block_steps("mlp", m["world_size"], m["batch"] * m["seq"], m["hidden"], m["ffn"], itemsize=ITEMSIZE)
    ran = real.get("plan") if isinstance(real, dict) else None  # the plan run_tp ran, as plain dicts
    if ran is None or [{**s, "bytes_sent": tuple(s["bytes_sent"])} for s in ran] != [vars(s) for s in plan]:
        fail(title, _("real run"), _("pass the result of run_tp(**MLP_RUN), run after your prediction"))
    if real["max_abs_diff_vs_reference"] > TOL:
        fail(title, _("real run"), _("the real run differs from one process by {diff}").format(
            diff=f"{real['max_abs_diff_vs_reference']:.3g}"))


def shard_dims() -> dict:
    """{"fc1": dim, "fc2": dim}: the dim of nn.Linear's (out, in) weight the executor cuts (rank 0 of MLP_RUN's)."""
    from ..exec.models import make_block
    from ..exec.tensor_parallel import CommStats, ParallelMLP
    m = MLP_RUN
    mlp = ParallelMLP.from_full(make_block("mlp", m["hidden"], 1, m["ffn"]),
                                stats=CommStats(rank=0, world_size=m["world_size"]))
    return {name: mlp.shards()[f"{name}.weight"][1] for name in ("fc1", "fc2")}


def check_split_choice(fc1_dim, fc2_dim, reason, real) -> None:
    """Grade the split of GeLU(X·A)·B in nn.Linear's storage and the reason the backward all-reduces."""
    title, n = _("MLP split"), MLP_RUN["world_size"]
    _unanswered(fc1_dim, fc2_dim, reason)
    _real_mlp_run(title, real)
    for name, said in (("fc1", fc1_dim), ("fc2", fc2_dim)):
        if said not in (0, 1) or isinstance(said, bool):
            fail(title, name, _("{name}_dim={value}: give 0 or 1, a dim of {name}.weight as nn.Linear stores it, "
                                "(out, in)").format(name=name, value=repr(said)))
    dims = shard_dims()
    if fc1_dim != dims["fc1"]:
        fail(title, "fc1", _("fc1 is A, split by columns so that GeLU gets whole columns of X·A on each rank; "
                             "nn.Linear stores A transposed, as weight (out, in) = (ffn, hidden): which of its dims "
                             "indexes A's columns?"))
    if fc2_dim != dims["fc2"]:
        fail(title, "fc2", _("fc2 is B, split by rows (its ffn side) so that each rank's block of GeLU(X·A) meets "
                             "its own rows of B; in nn.Linear's (out, in) storage, which dim is ffn?"))
    if reason not in tuple(REASONS):
        fail(title, _("reason"), _("reason={value}: give one of the letters {letters}").format(
            value=repr(reason), letters=", ".join(REASONS)))
    if reason != RIGHT_REASON:
        fail(title, _("reason"), _("({letter}) is not why: {hint}").format(letter=reason,
                                                                       hint=_(REASON_HINTS[reason])))
    backward = [s["name"] for s in real["plan"] if s["phase"] == "backward" and s["collective"] == "all-reduce"]
    if backward != ["f"] or real["allreduce_calls_backward"] != 1 or real["allreduce_calls_forward"] != 1:
        fail(title, _("real run"), _("the real run's collectives are not the plan's: run run_tp(**MLP_RUN) again"))
    passed(title, _("fc1.weight cut along dim {fc1} (Megatron's A by columns), fc2.weight along dim {fc2} "
                    "(B by rows); in backward f sums the partial dX: the real run on {n} processes counted "
                    "one all-reduce forward (g) and one backward (f)").format(fc1=fc1_dim, fc2=fc2_dim, n=n))


def forward_bytes_sent(real) -> list[int]:
    """Bytes each rank sent in the real run's forward: its trace's forward collectives."""
    sent = [0] * real["world_size"]
    for event in real["trace"]:
        if event.name.startswith("forward"):
            sent[event.rank] += event.nbytes
    return sent


def check_forward_bytes(predicted, real) -> None:
    """Grade the predicted bytes each rank sends in one forward of the TP MLP against the real run's."""
    title, m = _("forward bytes"), MLP_RUN
    _unanswered(predicted)
    _real_mlp_run(title, real)
    n, z = m["world_size"], m["batch"] * m["seq"] * m["hidden"] * ITEMSIZE  # Z (b·s, h) fp32, in bytes
    measured = forward_bytes_sent(real)
    if not isinstance(predicted, int) or isinstance(predicted, bool):
        fail(title, _("prediction"), _("predicted={value}: give a whole number of bytes (an int)").format(
            value=repr(predicted)))
    if predicted != measured[0]:
        inner = m["batch"] * m["seq"] * m["ffn"] * ITEMSIZE
        why = {z: N_("that is Z's own size; on a ring each rank sends (N−1)/N of it in the reduce-scatter and "
                     "again in the all-gather"),
               measured[0] // ITEMSIZE: N_("that counts elements; the run is fp32, 4 bytes each"),
               2 * z: N_("2·Z is the all-reduce's bound for large N; with N ranks each rank sends (N−1)/N of Z in each "
                         "half"),
               2 * measured[0]: N_("that counts backward too: f's all-reduce of dX runs in backward, not forward"),
               2 * (n - 1) * inner // n: N_("only Z (b·s, h) crosses the network: GeLU(X·A) (b·s, ffn) stays on "
                                            "its rank")}.get(predicted, N_("the forward's only collective is g's "
                                                                           "all-reduce of Z (b·s, h), fp32"))
        fail(title, _("bytes per rank"), _("you said {said}, not what the real run's ranks sent in forward: "
                                           "{why}").format(said=f"{predicted:,}", why=_(why)))
    passed(title, _("{said} B per rank = 2(N−1)/N × Z's {z} B with N = {n}: the real run's ranks sent "
                    "{measured} in forward").format(said=f"{predicted:,}", z=f"{z:,}", n=n,
                                                             measured=measured))
