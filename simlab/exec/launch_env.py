"""Was this process started by torchrun (or another env:// launcher)? One rule for the whole package.

`launch.launch` runs as one rank of torchrun's world when `torchrun_worker()` says so, and spawns its own
workers when it returns None; the CLI asks the same question before `run` and `calibrate` start anything, and
`plan`, `memory`, `schedule` and `collective` print only on rank 0 of such a world. No torch here: the CLI's
model-only commands import it without loading torch.
"""
from __future__ import annotations

import os

# What every torchrun worker has (torch 2.13 sets them in elastic/agent/server/local_elastic_agent.py, along with
# LOCAL_WORLD_SIZE, GROUP_RANK and TORCHELASTIC_*); other env:// launchers (DeepSpeed's, accelerate) set the same five
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
WHO_AM_I = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # a process's own identity; MASTER_* alone is a job script's export


def torchrun_worker() -> dict | None:
    """{"rank", "world_size", "local_rank"} when this process is a worker that torchrun (or another env://
    launcher) started; None when none of RANK, WORLD_SIZE, LOCAL_RANK is set. Anything between — some of
    torchrun's variables, or values that contradict each other — is refused in one line naming them: a stray
    RANK once silenced every command, and a RANK ≥ WORLD_SIZE waited a minute for peers that never come.
    MASTER_ADDR and MASTER_PORT alone are ignored: a job script exports them for the torchrun it will start."""
    env = os.environ
    if not any(k in env for k in WHO_AM_I):
        return None
    numbers = {}
    for key in WHO_AM_I:
        if key in env:
            try:
                numbers[key] = int(env[key])
            except ValueError:
                what = "a whole number of processes" if key == "WORLD_SIZE" else "a whole number"
                raise ValueError(f"{key}={env[key]!r} (environment): must be {what}") from None
    shown = ", ".join(f"{k}={env[k]}" for k in TORCHRUN_VARS if k in env)
    missing = [k for k in TORCHRUN_VARS if k not in env]
    if missing:
        raise ValueError(f"{shown} (environment) without {', '.join(missing)}: not a torchrun worker; unset "
                         f"{', '.join(k for k in TORCHRUN_VARS if k in env)}, or start simlab with torchrun")
    rank, size, local = numbers["RANK"], numbers["WORLD_SIZE"], numbers["LOCAL_RANK"]
    try:
        port = int(env["MASTER_PORT"])
    except ValueError:
        port = 0
    problem = ("WORLD_SIZE must be at least 1" if size < 1 else "RANK must be between 0 and WORLD_SIZE - 1"
               if not 0 <= rank < size else "LOCAL_RANK must be between 0 and RANK" if not 0 <= local <= rank
               else "MASTER_ADDR must name the rendezvous host" if not env["MASTER_ADDR"].strip()
               else "MASTER_PORT must be a port, 1 to 65535" if not 0 < port < 65536 else None)
    if problem:
        raise ValueError(f"{shown} (environment): {problem}; these are torchrun's, set for each worker it starts")
    return {"rank": rank, "world_size": size, "local_rank": local}
