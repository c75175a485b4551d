"""A mixture-of-experts layer's routing, on numpy: which experts each token goes to, how many an expert
keeps, and which tokens are dropped.

Teaches:
- the router scores every token against every expert (logits (T, E)); softmax turns a row into
  probabilities, and each token goes to its `top_k` most probable experts, weighted by those
  probabilities. Softmax then top-k, weights NOT renormalised: Switch Transformer's top-1, DeepSeek-V2's
  and Qwen-MoE's (`norm_topk_prob=False`) top-k. `renormalize=True` divides the k weights by their sum,
  which is Mixtral's (softmax over the top-k logits). Softmax keeps the order of the logits, so the experts
  are picked on the logits themselves; ties go to the lower expert index.
- capacity: an expert takes at most C = ceil(capacity_factor · T · k / E) of one group's T tokens (a
  group is one rank's tokens, as GShard's groups and Megatron's local tokens), so each expert's buffer
  has a fixed size. `capacity_factor=None` is dropless (Mixtral, DeepSeek, Megatron's default).
- the drop rule (GShard's top-2 gating as Mesh TensorFlow, lingvo and fairscale write it: a second
  choice's place in an expert's buffer counts after every first choice, `locations2 += sum(mask1)`): all
  tokens' first choices claim places first, in token order, then all second choices in token order, and
  so on; an expert keeps its first C claims and drops the rest. With k = 1 that is Switch's token order.
  A dropped choice contributes nothing to the token's output (the residual connection carries it).
- load: how many tokens each expert computes; imbalance = max load / mean load — the busiest expert sets
  the layer's time, so 1.0 is perfect balance and 2.0 means it runs twice as long as balance would.

    >>> r = route(np.array([[3., 1., 0.], [2., 0., 1.], [0., 3., 1.], [1., 2., 0.]]), top_k=1, capacity_factor=1.0)
    >>> r.capacity, r.experts[:, 0].tolist(), r.kept[:, 0].tolist()
    (2, [0, 0, 1, 1], [True, True, True, True])
    >>> r.load.tolist(), r.imbalance, r.dropped
    ([2, 2, 0], 1.5, 0)
    >>> route(np.zeros((3, 2)) + [[1., 0.]], top_k=1, capacity_factor=1.0).kept[:, 0].tolist()  # C = 2
    [True, True, False]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._checks import check_bool, check_int, check_number, check_positive


def capacity(tokens: int, experts: int, top_k: int, capacity_factor: float | None) -> int | None:
    """ceil(capacity_factor · tokens · top_k / experts): the most tokens of one group an expert keeps.

    The factor is taken as written in decimal (1.1 is 11/10), so ceil never rounds a float's last bit up:
    capacity(10, 11, 1, 1.1) is 1, where the float product 1.1·10/11 = 1.0000000000000002 would give 2.
    None means no limit (dropless).

    >>> capacity(8, 4, 2, 1.25), capacity(10, 11, 1, 1.1), capacity(8, 4, 2, None)
    (5, 1, None)
    """
    check_int("tokens", tokens, 1)
    check_int("experts", experts, 1)
    check_int("top_k", top_k, 1, experts)
    if capacity_factor is None:
        return None
    factor = Fraction(repr(check_positive("capacity_factor", capacity_factor)))  # exact: "1.1" → 11/10
    return math.ceil(factor * tokens * top_k / experts)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64, shifted by each row's max so exp never overflows."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@dataclass(frozen=True, eq=False)  # holds arrays: == would be ambiguous, so identity
class Routing:
    """One group's routing: token t's c-th choice is `experts[t, c]` (best first), weighted `weights[t, c]`,
    and `kept[t, c]` says whether that expert had room for it."""

    experts: np.ndarray  # (T, k) int64: expert indices, most probable first
    weights: np.ndarray  # (T, k) float64: router probabilities of those experts
    kept: np.ndarray  # (T, k) bool: False where the expert was full (a dropped choice)
    num_experts: int
    capacity: int | None  # None: dropless

    @property
    def tokens(self) -> int:
        return self.experts.shape[0]

    @property
    def top_k(self) -> int:
        return self.experts.shape[1]

    @property
    def demand(self) -> np.ndarray:
        """(E,) how many choices named each expert, before capacity."""
        return np.bincount(self.experts.ravel(), minlength=self.num_experts)

    @property
    def load(self) -> np.ndarray:
        """(E,) how many tokens each expert computes: the choices it kept."""
        return np.bincount(self.experts[self.kept], minlength=self.num_experts)

    @property
    def dropped(self) -> int:
        """Choices dropped for lack of room: tokens · top_k − sum(load)."""
        return int((~self.kept).sum())

    @property
    def tokens_dropped(self) -> int:
        """Tokens none of whose choices was kept: they leave the layer unchanged (the residual path only)."""
        return int((~self.kept.any(axis=1)).sum())

    @property
    def imbalance(self) -> float:
        """max load / mean load over the experts: 1.0 when every expert computes the same number of tokens."""
        load = self.load
        return float(load.max() * self.num_experts / load.sum())


def check_logits(logits, top_k: int) -> np.ndarray:
    """`logits` as a (T, E) float64 array of finite numbers with T, E >= 1, and 1 <= top_k <= E; one line each."""
    try:
        arr = np.asarray(logits)
    except ValueError:  # ragged nested lists
        arr = np.asarray(None)
    if arr.dtype.kind not in "iuf" or arr.ndim != 2 or 0 in arr.shape:
        raise ValueError("logits: must be a 2-D array of numbers (tokens, experts) with at least one of each")
    if not np.isfinite(arr).all():
        raise ValueError("logits: must be finite numbers (no nan or inf)")
    check_int("top_k", top_k, 1, arr.shape[1])
    return arr.astype(np.float64)


def route(logits, top_k: int, capacity_factor: float | None = 1.0, renormalize: bool = False) -> Routing:
    """One group's routing: softmax, top-k, capacity and drops, by the rules in the module's docstring."""
    z = check_logits(logits, top_k)
    check_bool("renormalize", renormalize)
    tokens, experts = z.shape
    cap = capacity(tokens, experts, top_k, capacity_factor)
    order = np.argsort(-z, axis=1, kind="stable")[:, :top_k]  # (T, k): stable, so ties go to the lower index
    weights = np.take_along_axis(softmax(z), order, axis=1)  # (T, k)
    if renormalize:
        weights = weights / weights.sum(axis=1, keepdims=True)
    kept = np.ones((tokens, top_k), dtype=bool)
    if cap is not None:  # the drop rule, written as the loop it is: choice round by round, tokens in order
        claimed = np.zeros(experts, dtype=np.int64)
        for c in range(top_k):
            for t in range(tokens):
                e = order[t, c]
                kept[t, c] = claimed[e] < cap
                claimed[e] += 1
    return Routing(order.astype(np.int64), weights, kept, experts, cap)


def random_logits(tokens: int, experts: int, seed: int = 0, skew: float = 0.0) -> np.ndarray:
    """(T, E) standard-normal router logits from `seed`; `skew` adds a preference for the low experts,
    linearly from +skew (expert 0) down to 0 (the last): how a router that has not learned to balance looks."""
    check_int("tokens", tokens, 1)
    check_int("experts", experts, 1)
    check_int("seed", seed, 0)
    check_number("skew", skew, 0.0)
    rng = np.random.default_rng(seed)
    bias = skew * (1.0 - np.arange(experts) / max(experts - 1, 1))  # (E,)
    return rng.standard_normal((tokens, experts)) + bias


def balanced_logits(tokens: int, experts: int, top_k: int) -> np.ndarray:
    """(T, E) logits that route perfectly evenly: token t's c-th choice is expert (t·k + c) mod E.

    With tokens · top_k divisible by experts every expert gets exactly tokens · top_k / experts choices
    (the balanced case the closed forms describe), none dropped at capacity_factor >= 1."""
    check_int("tokens", tokens, 1)
    check_int("experts", experts, 1)
    check_int("top_k", top_k, 1, experts)
    logits = np.zeros((tokens, experts))
    for c in range(top_k):  # the c-th choice scores k − c: distinct, and above every other expert's 0
        logits[np.arange(tokens), (np.arange(tokens) * top_k + c) % experts] = top_k - c
    return logits
