"""Lesson 3's exercises: per-GPU memory of ZeRO stages 0-3 (graded on the paper's Figure 1 and 48 more
cases where shards round up; an answer that calls simlab's own model is refused), fitting a 70 B model on
80 GB GPUs with a DGX H100's host memory (graded by the memory model, GPU and host), and a prediction of the
bytes one rank sends in a ZeRO-2 step (graded against a real run; a wrong guess gets a hint, never the
number). Every ✓/✗ line and reason goes through `_()` (simlab.i18n; Chinese in locale/zh/LC_MESSAGES/zero.po);
parameter names stay."""
from __future__ import annotations

import os
from pathlib import Path

from ..i18n import _
from ..sim.memory import (
    PRECISIONS,
    comm_volume_per_step,
    peak_per_gpu_bytes,
    per_gpu_bytes,
    shard_numel,
    smallest_world_size,
)
from .common import fail, first_call, passed

PAPER = {0: 120e9, 1: 31.40625e9, 2: 16.640625e9, 3: 1.875e9}  # ZeRO paper, Figure 1: Ψ=7.5B, N=64, K=12
LAYERS_70B = [875_000_000] * 80  # a 70 B model as 80 equal layers (Llama-2-70B's depth); embeddings ignored
GPU_BYTES = 80 * 10**9  # an 80 GB GPU, in the paper's GB (1e9 bytes)
HOST_BYTES = 2 * 10**12 // 8  # a DGX H100's 2 TB of host memory shared by its 8 GPUs: 250 GB per GPU
# simlab's own models, as their code names its file: what an answer must not call
SIM = str(Path(per_gpu_bytes.__code__.co_filename).parent) + os.sep


def _calls_into_sim(fn, *args):
    """`fn(*args)`, and the name of the first simlab.sim function it called (None if it called none): an
    answer that hands the question to the model it is graded against has not been written."""
    return first_call(fn, lambda code: f"{Path(code.co_filename).stem}.{code.co_name}"
                      if code.co_filename.startswith(SIM) else None, *args)


def check_zero_memory(fn) -> None:
    """Grade `fn(psi, n_gpus, stage) -> {params, grads, optimizer, total}` (mixed precision, K=12)."""
    title, keys = _("ZeRO memory per GPU"), ("params", "grads", "optimizer", "total")

    def answer(psi, n, stage):
        got, called = _calls_into_sim(fn, psi, n, stage)
        if called:
            fail(title, _("your function"), _("it calls simlab's own model ({name}): write the formulas of "
                                              "section 1 yourself").format(name=called))
        return got

    probe = answer(7_500_000_000, 64, 0)  # a wrong shape of answer is named here, not met as an AttributeError below
    if not isinstance(probe, dict) or any(k not in probe for k in keys):
        fail(title, _("the answer's form"), _("returned {value}; return a dict with {keys} (bytes)").format(
            value=f"{probe!r:.80}", keys=", ".join(keys)))
    for stage, total in PAPER.items():
        got = answer(7_500_000_000, 64, stage)
        if got.get("total") != total:
            fail(title, _("the paper's example, stage {stage}").format(stage=stage),
                 _("total={got} B, paper: {paper} B").format(got=got.get("total"), paper=f"{total:.0f}"))
    cases = [(psi, n, stage) for psi in (1_000_000, 1_000_003, 7_500_000_000) for n in (1, 3, 64, 1000)
             for stage in range(4)]
    for psi, n, stage in cases:
        want, got = per_gpu_bytes(psi, n, stage, precision="mixed"), answer(psi, n, stage)
        wrong = [k for k in keys if got.get(k) != want[k]]
        if wrong:
            fail(title, f"psi={psi}, n_gpus={n}, stage={stage}",
                 _("{key}={got} but expected {want} (shards round up)").format(
                     key=wrong[0], got=got.get(wrong[0]), want=want[wrong[0]]))
    passed(title, _("the paper's 120 / 31.4 / 16.6 / 1.9 GB and {n} more cases (uneven shards round "
                    "up)").format(n=len(cases)))


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.1f} GB"


def _gpus(n: int) -> str:
    return _("{n} GPU{s}").format(n=n, s="s" if n != 1 else "")


def _why_never(stage: int, offload: bool) -> str:
    """Why no number of GPUs makes this stage fit: what every GPU keeps in full, whatever N (with
    mixed-precision Adam's bytes: an 8-bit optimizer would change the counts, not the reason)."""
    psi = sum(LAYERS_70B)
    if offload:
        return _("offload moves gradients and optimizer state to the host, but stage 2 still keeps the full "
                 "16-bit parameters ({size}) on every GPU").format(size=_gb(2 * psi))
    full = {0: _("parameters, gradients and optimizer state"), 1: _("16-bit parameters and gradients"),
            2: _("16-bit parameters")}[stage]
    size = {0: 16 * psi, 1: 4 * psi, 2: 2 * psi}[stage]
    return _("with mixed-precision Adam, stage {stage} keeps the full {full} ({size}) on every GPU, whatever "
             "N").format(stage=stage, full=full, size=_gb(size))


def _host(n_gpus: int, stage: int, offload: bool) -> int:
    """Host bytes per GPU: offload's fp32 gradient shard and Adam's 12 bytes per own parameter (0 without)."""
    return per_gpu_bytes(LAYERS_70B, n_gpus, stage, offload, "mixed")["cpu"]


def fewest_gpus(stage: int, offload: bool) -> int | None:
    """The fewest GPUs on which (stage, offload) fits both an 80 GB GPU at the step's peak and a 250 GB share
    of the host; None if no number does."""
    low = smallest_world_size(LAYERS_70B, stage, GPU_BYTES, offload)
    if low is None or _host(low, stage, offload) <= HOST_BYTES:
        return low
    high = 1 << 20  # the host's share shrinks as N grows: bisect, as smallest_world_size does for the GPU
    if _host(high, stage, offload) > HOST_BYTES:
        return None
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if _host(mid, stage, offload) <= HOST_BYTES else (mid + 1, high)
    return low


def check_fit_70b(stage, n_gpus, offload=False) -> None:
    """Grade (stage, n_gpus, offload) for a 70 B model (80 equal layers), mixed-precision Adam, model state
    only, on 80 GB GPUs in DGX H100s (2 TB of host memory for 8 GPUs): the peak
    (`sim.memory.peak_per_gpu_bytes`) must fit the GPU, what offload moves to the host must fit a GPU's
    250 GB share of it, and no fewer GPUs may do both."""
    title = _("70 B on 80 GB GPUs")
    if type(stage) is not int or not 0 <= stage <= 3:
        fail(title, f"stage={stage!r}", _("must be a ZeRO stage: 0, 1, 2 or 3"))
    if type(n_gpus) is not int or n_gpus < 1:
        fail(title, f"n_gpus={n_gpus!r}", _("must be a whole number of GPUs, at least 1"))
    if type(offload) is not bool or (offload and stage < 2):
        fail(title, f"offload={offload!r}", _("must be True or False, and True needs stage 2 or 3"))
    best = fewest_gpus(stage, offload)
    case = (_("stage {stage} + offload on {gpus}") if offload else _("stage {stage} on {gpus}")).format(
        stage=stage, gpus=_gpus(n_gpus))
    need, host = peak_per_gpu_bytes(LAYERS_70B, n_gpus, stage, offload), _host(n_gpus, stage, offload)
    if best is None:
        fail(title, case, _("needs {need} per GPU and never fits: {why}").format(
            need=_gb(need), why=_why_never(stage, offload)))
    if need > GPU_BYTES:
        steady = per_gpu_bytes(LAYERS_70B, n_gpus, stage, offload, "mixed")["total"]
        fail(title, case, _("needs {need} per GPU ({steady} between steps + {layer} for one layer gathered with "
                            "its full gradient), more than 80 GB").format(
            need=_gb(need), steady=_gb(steady), layer=_gb(need - steady)))
    if host > HOST_BYTES:
        fail(title, case, _("fits the GPU ({need}), but offload keeps {host} per GPU in host memory (an fp32 "
                            "gradient shard and Adam's 12 bytes per own parameter), more than the {cap} each GPU "
                            "has of a DGX H100's 2 TB").format(need=_gb(need), host=_gb(host), cap=_gb(HOST_BYTES)))
    if n_gpus > best:
        fail(title, case, _("fits ({need} per GPU) but is not the fewest: {best} already fit ({best_need})").format(
            need=_gb(need), best=_gpus(best), best_need=_gb(peak_per_gpu_bytes(LAYERS_70B, best, stage, offload))))
    fewer = best - 1
    if fewer and peak_per_gpu_bytes(LAYERS_70B, fewer, stage, offload) <= GPU_BYTES:  # the host is what binds
        passed(title, _("{need} per GPU at the peak and {host} of host memory per GPU (of "
                        "{cap}); {fewer} would need {fewer_host} of host memory each").format(
            need=_gb(need), host=_gb(host), cap=_gb(HOST_BYTES), fewer=_gpus(fewer),
            fewer_host=_gb(_host(fewer, stage, offload))), case)
        return
    passed(title, _("{need} per GPU at the peak, and {fewer} would need {fewer_need}").format(
        need=_gb(need), fewer=_gpus(fewer), fewer_need=_gb(peak_per_gpu_bytes(LAYERS_70B, fewer, stage, offload)))
          + (_("; each GPU's host keeps {host}").format(host=_gb(host)) if offload else ""), case)


def check_bytes_prediction(predicted, real: dict, sizes, rank: int = 1) -> None:
    """Grade a prediction of the bytes `rank` sends in one step against a real run (`run_zero(…, steps=1)`):
    the measured `bytes_sent_per_rank[rank]`. A wrong answer is matched against the usual slips."""
    title = _("bytes rank {rank} sends").format(rank=rank)
    if predicted is None:  # the exercise's placeholder: not answered yet, like a stub
        raise NotImplementedError(_("exercise: commit your prediction in the cell above first"))
    if isinstance(predicted, bool) or not isinstance(predicted, (int, float)):
        fail(title, f"predicted={predicted!r}", _("must be a number of bytes"))
    measured, n, stage = real["bytes_sent_per_rank"][rank], real["world_size"], real["stage"]
    numels = [(a + 1) * b for a, b in zip(sizes, sizes[1:])]  # weight + bias per Linear
    shards = sum(shard_numel(p, n) for p in numels)
    if measured != comm_volume_per_step(numels, stage, n, "fp32"):  # the run must be the one asked about
        fail(title, _("the real run"), _("is not the one asked about: pass the result of the cell's own "
                                         "run_zero(2, world_size=3, steps=1, …) for these sizes"))
    if predicted == measured:
        passed(title, _("{measured} B measured on the real run = (N-1)·ΣS·(4 + 4) with ΣS = {shards} "
                        "(each layer padded to a multiple of {n})").format(measured=measured, shards=shards,
                                                                                    n=n))
        return
    f32 = PRECISIONS["fp32"].grad  # the real run is fp32: 4-byte gradients and parameters
    slips = {  # the usual slips, each with the concept it misses (never the number: the learner works it out)
        (n - 1) * shards * f32: _("that counts one collective (or 2-byte values): a ZeRO-2 step reduce-scatters "
                                  "the gradients and then all-gathers the updated parameters, and the run is fp32"),
        (n - 1) * shards * 2: _("that counts elements, not bytes: the real run is fp32, 4 bytes each"),
        (n - 1) * shards * 3 * f32: _("that is ZeRO-3's 3Ψ: stage 2 gathers the parameters once, after the step"),
        (n - 1) * -(-sum(numels) // n) * 2 * f32: _("the padding is per layer: each layer's buffer is padded "
                                                    "to a multiple of N on its own"),
        2 * sum(numels) * f32 * (n - 1) // n: _("the padding is missing: each layer's buffer is padded to a "
                                                "multiple of N, and a rank sends N-1 whole shards"),
        2 * sum(numels) * f32: _("a ring sends (N-1)/N of the buffer per collective, not all of it"),
    }
    why = slips.get(predicted, "") or _("count it layer by layer: each layer's shard S (its buffer padded to a "
                                        "multiple of N on its own), the N-1 shards a ring sends per collective, "
                                        "the collectives of a ZeRO-2 step, and the bytes of an fp32 value")
    fail(title, _("predicted {predicted} B").format(predicted=predicted),
         _("not what rank {rank} really sent — {why}").format(rank=rank, why=why))
