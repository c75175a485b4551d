"""Lesson 1 on the command line: `simlab collective` (a plan, simulated step by step, no torch) and
`simlab run <collective>` (the same plan on real processes, against torch's own and the simulator).

    simlab collective ring-all-reduce --ranks 4 --size 1048576 --json
    simlab run ring-all-reduce --world-size 4 --json
"""
from __future__ import annotations

from .. import _checks
from ..sim.collectives import ALIASES, PLANS, canonical, run_aliases
from .common import add_json, add_run_flags, check_memory, check_run_flags, run_output

DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}


def _numel(size: int, dtype: str) -> int:
    _checks.check_int("size", size, 1)
    if size % DTYPES[dtype]:
        raise ValueError(f"size={size}: must be a multiple of {DTYPES[dtype]} bytes ({dtype})")
    return size // DTYPES[dtype]


def cmd_collective(args) -> dict:
    """`simlab collective NAME`: the plan's steps, bytes per rank against the optimum, and its α-β cost."""
    from ..render.collectives_text import step_text
    from ..sim.collectives_stepper import simulate
    from ..sim.cost import optimal_bytes_per_rank

    name = canonical(args.collective)
    _checks.check_ranks("ranks", args.ranks)
    numel = _numel(args.size, args.dtype)
    _checks.check_positive("bandwidth", args.bandwidth)
    _checks.check_int("seed", args.seed, 0)
    if not args.alpha >= 0:
        raise ValueError(f"alpha={args.alpha}: must be >= 0 seconds")
    plan = PLANS[name](args.ranks, numel, itemsize=DTYPES[args.dtype])
    res = simulate(plan, seed=args.seed, alpha=args.alpha, bandwidth=args.bandwidth)
    if args.show_steps and not args.json:
        for step in res.steps:
            print(step_text(step, plan), end="\n\n")
    return {"collective": name, "plan": plan.name, "ranks": args.ranks, "size_bytes": plan.nbytes,
            "dtype": args.dtype, "chunk_sizes": list(plan.chunk_sizes), "steps": plan.num_steps,
            "bytes_sent_per_rank": list(res.steps[-1].bytes_sent),
            "bytes_received_per_rank": list(res.steps[-1].bytes_received),
            "optimal_bytes_per_rank": optimal_bytes_per_rank(plan.meta["goal"], args.ranks, plan.nbytes),
            "final_state_ok": res.final_ok,
            "cost": {"alpha_s": args.alpha, "bandwidth_Bps": args.bandwidth, "seconds": res.cost.seconds,
                     "latency_seconds": res.cost.latency_seconds, "bandwidth_seconds": res.cost.bandwidth_seconds}}


def cmd_run_collective(args) -> dict:
    """`simlab run <collective>`: our collective on real processes vs torch's and the simulator."""
    from ..parity.collectives import run_collective

    check_run_flags(args)
    numel = _numel(args.size, "float32")
    # each rank holds about 4 buffers at its peak (benchmarks/collectives_memory.py), the parent next to none
    check_memory(f"--size={args.size}", 4.0 * args.size * args.world_size, "the ranks' buffers")
    res = run_collective(args.target, args.world_size, numel, backend=args.backend, seed=args.seed,
                         timeout=args.timeout)
    return run_output({"collective": args.target, "size_bytes": numel * 4}, res, "matches_simulator")


def add_commands(sub, run) -> None:
    col = sub.add_parser("collective", help="simulate a collective step by step (no torch)")
    col.add_argument("collective", choices=sorted(PLANS) + sorted(ALIASES), metavar="collective",
                     help=f"which plan: {', '.join(PLANS)}")
    col.add_argument("--ranks", type=int, default=4, help="number of ranks, 1..64 (default 4)")
    col.add_argument("--size", type=int, default=1 << 20, help="buffer size in bytes (default 1 MiB)")
    col.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="element type")
    col.add_argument("--alpha", type=float, default=10e-6, help="α: latency per step, seconds")
    col.add_argument("--bandwidth", type=float, default=10e9, help="1/β: bytes per second per link")
    col.add_argument("--seed", type=int, default=0, help="seed of the integer inputs")
    col.add_argument("--show-steps", action="store_true", help="print every step as a table")
    add_json(col)
    col.set_defaults(func=cmd_collective)
    for name in PLANS:  # the names and old spellings: the one registry, `simlab.sim.collectives.COLLECTIVES`
        p = run.add_parser(name, aliases=run_aliases(name), help=f"{name} on real processes vs torch's own")
        p.add_argument("--size", type=int, default=1 << 20, help="buffer size in bytes, float32 (default 1 MiB)")
        add_run_flags(p)
        p.set_defaults(func=cmd_run_collective, target=name)
