"""What every parity run shares: the result contract, the checks before launching, max |diff|, and the
single-process reference trainers every distributed run is held to.

    >>> import torch
    >>> max_abs_diff({"w": torch.ones(2)}, {"w": torch.tensor([1.0, 1.5])})
    0.5
"""
from __future__ import annotations

import torch

from .._checks import check_int, check_positive, check_ranks
from ..exec.launch import resolve_backend
from ..exec.models import flat_params, train_steps
from . import CORE_KEYS

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def check_run(world_size: int, backend: str, timeout: float, seed: int = 0) -> str:
    """The checks every run makes before any work: returns the backend it will use ('auto' resolved)."""
    check_ranks("world_size", world_size)
    check_positive("timeout", timeout)
    check_int("seed", seed, 0)
    return resolve_backend(backend, world_size)


def max_abs_diff(a, b) -> float:
    """max |a − b| over tensors, or over dicts / lists of them with the same keys (shapes must agree)."""
    if isinstance(a, dict):
        if a.keys() != b.keys():  # a stage or layer nobody ran would otherwise simply go unchecked
            raise RuntimeError(f"compared {sorted(a)} with {sorted(b)}: not the same parts")
        return max((max_abs_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)) and not isinstance(a, torch.Tensor):
        return max((max_abs_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.shape != b.shape:
        raise RuntimeError(f"compared a {tuple(a.shape)} tensor with a {tuple(b.shape)} one")
    return (a.detach().cpu().double() - b.detach().cpu().double()).abs().max().item() if a.numel() else 0.0


def reference_model(model_fn, batch, steps: int, lr: float = 0.1, optimizer: str = "sgd", loss=None, **options):
    """Train `model_fn()` on the whole `batch` (x, y) in one process: the ground truth.

    Returns (losses, model): one float per step, and the trained model, whose `.grad`s still hold the
    last step's gradients (an optimizer step does not clear them).
    """
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    model = model_fn()
    opt = OPTIMIZERS[optimizer](model.parameters(), lr=lr, **options)  # e.g. Adam's eps
    return train_steps(model, opt, *batch, steps, loss=loss), model  # the loss: the mean over the global batch


def reference_train(model_fn, batch, steps: int, lr: float = 0.1, optimizer: str = "sgd"):
    """`reference_model`, keeping only (losses, `flat_params` after the last step)."""
    losses, model = reference_model(model_fn, batch, steps, lr, optimizer)
    return losses, flat_params(model)


def result(*, world_size: int, backend: str, trace, bytes_sent_per_rank, max_abs_diff_vs_reference: float,
           max_abs_diff_vs_torch: float | None, why_no_torch: str | None = None, **specific) -> dict:
    """A run's result under the contract: the core keys first, then the lesson's own."""
    if max_abs_diff_vs_torch is None and not why_no_torch:
        raise ValueError("max_abs_diff_vs_torch=None: say why there is no torch comparison (why_no_torch)")
    values = (max_abs_diff_vs_reference, max_abs_diff_vs_torch, bytes_sent_per_rank, trace, backend, world_size)
    core = dict(zip(CORE_KEYS, values))
    return core | ({"why_no_torch": why_no_torch} if max_abs_diff_vs_torch is None else {}) | specific
