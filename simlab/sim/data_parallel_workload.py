"""Lesson 2's workload: one training step of a model on N devices, as numbers — the parameters and the
compute of each layer, the batch and the network — that `simlab.sim.data_parallel` steps as DP and as DDP.

The explorer turns one knob for the model's size: `scaled_workload` scales the default scene's five layers
(56 MiB of fp32 parameters); `workload_from_layers` makes the compute follow the parameters (forward
2·params·tokens flop per sample, backward twice that).

    >>> w = workload_from_layers([1 << 20] * 4, world_size=4)
    >>> w.model_bytes == 16 << 20, w.micro_batch
    (True, 16)
"""
from __future__ import annotations

import dataclasses
import math

from .._checks import check_batch, check_int, check_number, check_positive, check_ranks
from .cost import DEFAULT_ALPHA, DEFAULT_BANDWIDTH

MIB = 1 << 20
DEFAULT_LAYERS = (1 * MIB, 4 * MIB, 4 * MIB, 4 * MIB, 1 * MIB)  # params per layer: 56 MiB in fp32
DEFAULT_MPARAMS = sum(DEFAULT_LAYERS) / 1e6  # 14.680064: the explorer's knob starts exactly here
TIE_TOLERANCE = 5e-3  # step times within 0.5 % show the same in a 3-digit table: call it a tie
DEFAULT_FLOPS = 50e12  # flop/s one device sustains
UPDATE_SECONDS_PER_PARAM = 1e-11  # the optimizer is memory-bound: ~32 B per param at ~3 TB/s
LOSS_SECONDS_PER_BYTE = 1e-12  # the loss reads the outputs once, at ~1 TB/s


def _check_seconds(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name}={value!r}: must be a number of seconds >= 0")
    if not math.isfinite(value):  # an infinite phase would make every step time inf
        raise ValueError(f"{name}={value!r}: must be a finite number of seconds")


def _check_layers(name: str, layers) -> tuple:
    """One entry per layer, as a tuple (the dataclass is frozen and hashable)."""
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise ValueError(f"{name}={layers!r}: need one entry per layer, and at least one layer")
    return tuple(layers)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One training step: the model (parameters and compute per layer), the batch and the network."""

    layer_params: tuple  # parameters per layer, first layer first
    fwd_seconds: tuple  # forward compute per layer, per sample
    bwd_seconds: tuple  # backward compute per layer, per sample
    world_size: int = 4
    global_batch: int = 64  # split evenly: each device gets global_batch / world_size samples
    input_bytes: int = 2048  # per sample
    output_bytes: int = 256 * 1024  # per sample: the model's output, and later its gradient
    bytes_per_param: int = 4
    loss_seconds: float = 0.0  # per sample
    update_seconds: float = 0.0  # one optimizer step over the whole model
    alpha: float = DEFAULT_ALPHA
    bandwidth: float = DEFAULT_BANDWIDTH  # bytes/s per link
    bucket_cap_mb: float = 25.0  # torch DDP's default

    def __post_init__(self):
        for name in ("layer_params", "fwd_seconds", "bwd_seconds"):  # frozen: lists become tuples here
            object.__setattr__(self, name, _check_layers(name, getattr(self, name)))
            values = getattr(self, name)
            if not values or len(values) != len(self.layer_params):
                raise ValueError(f"{name}={values!r}: need one entry per layer, and at least one layer")
            for i, v in enumerate(values):
                if name == "layer_params":
                    check_int(f"{name}[{i}]", v, 1)
                else:
                    _check_seconds(f"{name}[{i}]", v)
        check_ranks("world_size", self.world_size)
        check_batch(self.global_batch, self.world_size)
        for name in ("input_bytes", "output_bytes", "bytes_per_param"):
            check_int(name, getattr(self, name), 1 if name == "bytes_per_param" else 0)
        for name in ("loss_seconds", "update_seconds", "alpha"):
            _check_seconds(name, getattr(self, name))
        check_positive("bandwidth", self.bandwidth)
        check_positive("bucket_cap_mb", self.bucket_cap_mb)

    @property
    def micro_batch(self) -> int:
        return self.global_batch // self.world_size

    @property
    def param_bytes(self) -> list[int]:
        return [p * self.bytes_per_param for p in self.layer_params]

    @property
    def model_bytes(self) -> int:
        return sum(self.param_bytes)

    def replace(self, **changes) -> "Workload":
        return dataclasses.replace(self, **changes)


def workload_from_layers(layer_params=DEFAULT_LAYERS, *, tokens_per_sample: int = 512,
                         flops_per_second: float = DEFAULT_FLOPS, **fields) -> Workload:
    """A Workload whose compute follows the parameters: forward 2·params·tokens flop per sample,
    backward twice that. So scaling `layer_params` is the one "model size" knob."""
    layer_params = _check_layers("layer_params", layer_params)
    for i, p in enumerate(layer_params):  # before the arithmetic, which would take "x" * 2 as text
        check_int(f"layer_params[{i}]", p, 1)
    check_int("tokens_per_sample", tokens_per_sample, 1)
    check_positive("flops_per_second", flops_per_second)
    check_int("output_bytes", fields.get("output_bytes", 0), 0)
    fwd = [2 * p * tokens_per_sample / flops_per_second for p in layer_params]
    loss_per_sample = fields.get("output_bytes", Workload.output_bytes) * LOSS_SECONDS_PER_BYTE
    fields.setdefault("loss_seconds", loss_per_sample)
    fields.setdefault("update_seconds", sum(layer_params) * UPDATE_SECONDS_PER_PARAM)
    return Workload(tuple(layer_params), tuple(fwd), tuple(2 * f for f in fwd), **fields)


def scaled_workload(world_size: int, model_mparams: float, bucket_cap_mb: float = 25.0,
                    bandwidth_gbps: float = 10.0, samples_per_device: int = 16) -> Workload:
    """The default scene's layers scaled to `model_mparams` million parameters, `samples_per_device`
    each (weak scaling: the global batch grows with the world size) — lesson 2's explorer knobs."""
    check_ranks("world_size", world_size)
    check_number("model_mparams", model_mparams, high=1e9)  # 10¹⁵ parameters: far beyond any model
    check_positive("model_mparams", model_mparams)
    check_number("bandwidth_gbps", bandwidth_gbps, high=1e9)  # so that bytes/s stays a finite float
    check_positive("bandwidth_gbps", bandwidth_gbps)
    check_int("samples_per_device", samples_per_device, 1)
    scale = model_mparams * 1e6 / sum(DEFAULT_LAYERS)
    layers = [max(1, round(p * scale)) for p in DEFAULT_LAYERS]
    return workload_from_layers(layers, world_size=world_size, global_batch=samples_per_device * world_size,
                                bucket_cap_mb=bucket_cap_mb, bandwidth=bandwidth_gbps * 1e9)
