"""Parity runs: each lesson's engine checked against one process and against torch's own, on real ranks.

One contract for every lesson (`simlab.parity.<lesson>.run_*`):

    run_<lesson>(…, world_size, backend="auto", timeout=60.0) -> dict

- every argument is checked first, in one line naming it, before any process or reference starts;
- backend "auto" means NCCL with one GPU per rank where CUDA has enough GPUs, gloo otherwise; a
  backend that cannot run is refused (`simlab.exec.launch.resolve_backend`);
- the result holds the core keys `CORE_KEYS` (`simlab.parity.common`), a value None only where the
  comparison does not exist on this machine (the key `why_no_torch` then says why), plus the lesson's own.

The CLI (`simlab run …`) prints the core keys the same way for every lesson.
"""

# what every run_<lesson> returns (None where no such comparison exists here); torch-free, for the CLI
CORE_KEYS = ("max_abs_diff_vs_reference", "max_abs_diff_vs_torch", "bytes_sent_per_rank", "trace", "backend",
             "world_size")
