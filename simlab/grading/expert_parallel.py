"""Lesson 7's exercise B: which choices a mixture-of-experts router drops at a capacity factor. Predict, then run.

`check_drops(fn, run=None)`: `fn(logits, top_k, capacity_factor)` → `kept`, one row per token of `top_k` True/False
(choice c of token t: its c-th most probable expert; False where that expert was already full). The learner writes
the rule — top-k on the router's logits, capacity C = ceil(capacity_factor · T · k / E), and GShard's order: every
token's first choice claims a place before any second choice — not a call: an answer that calls simlab while it
runs is refused. Graded first on `CASES` (seeded router logits the lesson never printed: skewed, top-1 and top-2,
a capacity factor whose float product rounds past an integer) against `sim.expert_parallel.route`, exactly; then
on the logits of `DROP_RUN`'s real run, launched after the answer is written
(`parity.expert_parallel.run_expert_parallel`): the choices and tokens each rank dropped must be the run's.
A wrong answer is told the rule it broke — token-major instead of choice-major order, floor instead of ceil, T
instead of T·k in the capacity, the least probable experts, a float's last bit — never the mask.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from ..i18n import _
from ..sim.expert_parallel import random_logits, route
from .common import fail, first_call, passed

SIMLAB = str(Path(route.__code__.co_filename).parent.parent) + os.sep  # simlab/: what an answer may not call
# (tokens, experts, top_k, capacity_factor, seed, skew): none of them printed by the lesson
CASES = ((16, 4, 1, 1.0, 11, 1.0), (16, 4, 2, 1.0, 12, 1.5), (24, 6, 2, 1.25, 13, 2.0), (25, 5, 2, 1.1, 14, 3.0),
         (32, 8, 2, 0.5, 15, 0.5), (12, 4, 3, 1.0, 16, 1.0), (20, 5, 2, 2.0, 17, 4.0), (9, 3, 1, 0.75, 18, 0.0))
# the real run: 2 ranks of 12 tokens each, 4 experts, top-2, capacity factor 0.75; the lesson runs other shapes
DROP_RUN = {"world_size": 2, "experts": 4, "top_k": 2, "capacity_factor": 0.75, "tokens": 12, "hidden": 8, "ffn": 16,
            "seed": 5}
_RUNS: dict = {}


def _calls_into_simlab(fn, *args):
    return first_call(fn, lambda code: f"{Path(code.co_filename).stem}.{code.co_name}"
                      if code.co_filename.startswith(SIMLAB) else None,
                      *args)


def _mask(value, tokens: int, top_k: int):
    """The answer as a (T, k) bool array, or None if it is not one."""
    try:
        arr = np.asarray(value)
    except ValueError:
        return None
    if arr.shape != (tokens, top_k) or arr.dtype != bool:
        return None
    return arr


def _kept_by(logits: np.ndarray, top_k: int, cap: int, order: str, pick: str = "best") -> np.ndarray:
    """The mask a variant of the rule gives: `order` "choice" (GShard) or "token"; `pick` "best" or "worst"."""
    z = logits if pick == "best" else -logits
    chosen = np.argsort(-z, axis=1, kind="stable")[:, :top_k]
    claimed, kept = np.zeros(logits.shape[1], dtype=np.int64), np.ones(chosen.shape, dtype=bool)
    pairs = [(t, c) for c in range(top_k) for t in range(len(z))] if order == "choice" else \
        [(t, c) for t in range(len(z)) for c in range(top_k)]
    for t, c in pairs:
        kept[t, c] = claimed[chosen[t, c]] < cap
        claimed[chosen[t, c]] += 1
    return kept


def _hint(said: np.ndarray, logits: np.ndarray, top_k: int, factor: float) -> str:
    """The rule a wrong mask broke (never the mask)."""
    tokens, experts = logits.shape
    right_cap = route(logits, top_k, factor).capacity
    if np.array_equal(said, _kept_by(logits, top_k, right_cap, "token")):
        return _("the order of claims: every token's first choice takes its place before any token's second "
                 "choice (GShard), not token by token")
    for cap, why in ((math.floor(factor * tokens * top_k / experts), _("capacity rounds up: C = ceil(factor · T · k "
                                                                       "/ E)")),
                     (math.ceil(factor * tokens * top_k / experts), _("capacity_factor · T · k / E in exact "
                                                                      "arithmetic: a float product can land a hair "
                                                                      "above an integer, and ceil then adds one")),
                     (math.ceil(factor * tokens / experts), _("the capacity counts choices: C = ceil(factor · T · k / "
                                                              "E), k choices per token"))):
        if cap != right_cap and np.array_equal(said, _kept_by(logits, top_k, cap, "choice")):
            return why
    if np.array_equal(said, _kept_by(logits, top_k, right_cap, "choice", "worst")):
        return _("a token goes to its most probable experts: the largest logits")
    if said.all():
        return _("some choices find their expert full: an expert keeps at most C of them")
    return _("column c of a row is the token's c-th choice, most probable first; claims in order: all first "
             "choices token by token, then all second choices; an expert keeps its first C")


def _grade_case(title: str, fn, logits: np.ndarray, top_k: int, factor: float, label: str) -> np.ndarray:
    said, called = _calls_into_simlab(fn, logits.copy(), top_k, factor)
    if called:
        fail(title, label, _("it calls simlab's own router ({name}): write the rule yourself").format(name=called))
    mask = _mask(said, *logits.shape[:1], top_k)
    if mask is None:
        fail(title, label, _("returned {value}: return {tokens} rows of {k} True/False").format(
            value=f"{said!r:.60}", tokens=logits.shape[0], k=top_k))
    if not np.array_equal(mask, route(logits, top_k, factor).kept):
        fail(title, label, _hint(mask, logits, top_k, factor))
    return mask


def run_logits(config: dict) -> list[np.ndarray]:
    """Each rank's router logits in `config`'s run: the same seeded layer and tokens as every rank builds."""
    import torch

    from ..exec.expert_parallel import make_moe, make_tokens
    moe = make_moe(config["hidden"], config["ffn"], config["experts"], config["top_k"], config["capacity_factor"],
                   seed=config["seed"])
    xs, _grads = make_tokens(config["world_size"], config["tokens"], config["hidden"], config["seed"])
    with torch.no_grad():
        return [moe.router(x).double().numpy() for x in xs]


def _real_run(run) -> dict:
    if run is not None:
        return run(**DROP_RUN)
    if "real" not in _RUNS:
        from ..parity.expert_parallel import run_expert_parallel
        _RUNS["real"] = run_expert_parallel(**DROP_RUN)
    return _RUNS["real"]


def check_drops(fn, run=None) -> None:
    """Grade `fn(logits, top_k, capacity_factor)` → kept mask on CASES against the simulator, then on the logits
    of DROP_RUN against the drops of a real expert-parallel run (`run`: the launcher, for tests)."""
    title = _("dropped tokens")
    if not callable(fn):
        fail(title, "fn", _("expected a function of (logits, top_k, capacity_factor), got {type}").format(
            type=type(fn).__name__))
    for tokens, experts, top_k, factor, seed, skew in CASES:
        label = f"T={tokens}, E={experts}, k={top_k}, capacity_factor={factor}, seed={seed}"
        _grade_case(title, fn, random_logits(tokens, experts, seed, skew), top_k, factor, label)
    real = _real_run(run)
    label = _("the real run ({ranks} ranks of {tokens} tokens, {experts} experts, top-{k}, capacity factor "
              "{factor})").format(ranks=DROP_RUN["world_size"], tokens=DROP_RUN["tokens"],
                                  experts=DROP_RUN["experts"], k=DROP_RUN["top_k"], factor=DROP_RUN["capacity_factor"])
    if not real.get("routing_matches_simulator"):
        fail(title, label, _("the run's routing differs from the simulator's: run the cell again"))
    masks = [_grade_case(title, fn, z, DROP_RUN["top_k"], DROP_RUN["capacity_factor"], label)
             for z in run_logits(DROP_RUN)]
    said = [int((~m).sum()) for m in masks], [int((~m.any(axis=1)).sum()) for m in masks]
    if said != (list(real["dropped_per_rank"]), list(real["tokens_dropped_per_rank"])):
        fail(title, label, _("your drops differ from the real run's: the routing the ranks saw is the one above"))
    passed(title, _("{n} routings exactly; then the real run dropped {choices} choices and {tokens} whole tokens on "
                    "its ranks, as you said").format(
        n=len(CASES), choices=" + ".join(map(str, said[0])), tokens=" + ".join(map(str, said[1]))))
