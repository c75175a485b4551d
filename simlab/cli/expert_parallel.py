"""Lesson 7's experts on the command line: `simlab ep` (a mixture of experts' routing on an expert-parallel group,
simulated: each rank's load, drops and imbalance, the send matrix of the all-to-all and the bytes per rank; no
torch) and `simlab run ep` (the layer over real processes, against one process's unsplit layer, the simulator's
plan and torch's differentiable all-to-all).

    simlab ep --tokens 16 --experts 8 --top-k 2 --capacity 1.25 --ep 4 --skew 1
    simlab ep --tokens 64 --experts 8 --capacity 0 --ep 2 --json          # dropless
    simlab run ep --world-size 4 --dp 2 --experts 4 --top-k 2 --json
"""
from __future__ import annotations

from .. import _checks
from .common import add_json, add_run_flags, check_memory, check_run_flags, run_output

ITEMSIZE = 4  # fp32 rows, as the real run's


def cmd_ep(args) -> dict:
    """`simlab ep`: `ep_routings` (each rank routes its own tokens) and the `dispatch_plan` of the group."""
    from ..render.expert_parallel import dispatch_text, ep_routings, merged, routing_text
    from ..sim.expert_parallel_dispatch import balanced_bytes, dispatch_plan
    _checks.check_int("seed", args.seed, 0)
    _checks.check_int("hidden", args.hidden, 1, 1 << 20)
    routings = ep_routings(args.tokens, args.experts, args.top_k, args.capacity, args.ep, args.seed, args.skew)
    plan = dispatch_plan(routings, args.hidden, ITEMSIZE)
    group = merged(routings)
    even = args.tokens * args.top_k % args.ep == 0  # the closed form needs T·k rows to split evenly over N
    out = {"tokens_per_rank": args.tokens, "experts": args.experts, "top_k": args.top_k, "ep": args.ep,
           "capacity_factor": args.capacity or None, "capacity_per_rank": routings[0].capacity,
           "hidden": args.hidden, "itemsize": ITEMSIZE, "seed": args.seed, "skew": args.skew,
           "load": group.load.tolist(), "demand": group.demand.tolist(), "dropped": group.dropped,
           "tokens_dropped": group.tokens_dropped, "imbalance": group.imbalance,
           "load_per_rank": [r.load.tolist() for r in routings], "dropped_per_rank": [r.dropped for r in routings],
           "tokens_dropped_per_rank": [r.tokens_dropped for r in routings],
           "send_counts": plan.send_counts.tolist(), "rows_computed_per_rank": plan.received_rows,
           "dispatch_bytes_per_rank": plan.dispatch_bytes, "combine_bytes_per_rank": plan.combine_bytes,
           "counts_bytes_per_rank": plan.counts_bytes, "bytes_sent_per_rank": plan.bytes_sent_per_rank,
           "balanced_dispatch_bytes_per_rank": balanced_bytes(args.tokens, args.top_k, args.ep, args.hidden,
                                                              ITEMSIZE) if even else None}
    if not args.json:
        print(routing_text(routings if args.ep > 1 else routings[0], show=0))
        print(dispatch_text(plan))
    return out


def cmd_run_ep(args) -> dict:
    """`simlab run ep`: `parity.expert_parallel.run_expert_parallel` with the flags given."""
    from ..parity.expert_parallel import run_expert_parallel
    from ..render.expert_parallel import capacity_factor
    check_run_flags(args)
    for name in ("tokens", "hidden", "ffn", "experts"):
        _checks.check_int(name, getattr(args, name), 1)
    _checks.check_int("top_k", args.top_k, 1, args.experts)
    factor = capacity_factor(args.capacity)
    h, f, e = args.hidden, args.ffn, args.experts
    # every process: the whole layer (router, experts) with its gradients, twice (ours, then torch's a2a), and
    # every rank's tokens with their rows through the experts
    check_memory(f"--hidden={h} --ffn={f} --experts={e} --tokens={args.tokens}",
                 (args.world_size + 1) * 4 * (4 * e * (2 * h * f + h + f) + 8 * args.world_size * args.tokens *
                                              args.top_k * (h + f)), "the MoE layer")
    res = run_expert_parallel(world_size=args.world_size, dp=args.dp, experts=e, top_k=args.top_k,
                              capacity_factor=factor, tokens=args.tokens, hidden=h, ffn=f, seed=args.seed,
                              backend=args.backend, timeout=args.timeout)
    head = {"ep": res["ep"], "dp": res["dp"], "experts": e, "top_k": args.top_k, "capacity_factor": factor,
            "tokens_per_rank": args.tokens}
    return run_output(head, res, "capacity", "plan_bytes_sent_per_rank", "plan_bytes_by_group", "send_counts",
                      "plan_send_counts", "routing_matches_simulator", "trace_matches_plan", "load_per_rank",
                      "dropped_per_rank", "tokens_dropped_per_rank", "imbalance_per_rank")


def add_commands(sub, run) -> None:
    p = sub.add_parser("ep", help="a mixture of experts on an expert-parallel group, simulated: routing, drops, "
                                  "the all-to-all's send matrix and bytes per rank (no torch)")
    p.add_argument("--tokens", type=int, default=16, help="tokens each rank routes (default 16; tokens × ep × top-k at most 65,536)")
    p.add_argument("--experts", type=int, default=8, help="experts in the layer (default 8)")
    p.add_argument("--top-k", type=int, default=2, help="experts per token (default 2)")
    p.add_argument("--capacity", type=float, default=1.0,
                   help="capacity factor: an expert keeps at most ceil(factor·tokens·top_k/experts) of a rank's "
                        "tokens; 0 = dropless (default 1.0)")
    p.add_argument("--ep", type=int, default=4, help="expert-parallel size: ranks the experts are split over "
                                                     "(default 4)")
    p.add_argument("--hidden", type=int, default=8, help="values per token row (default 8; rows are fp32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the router logits (default 0)")
    p.add_argument("--skew", type=float, default=0.0,
                   help="the router's preference for the low experts, 0 = none (default 0)")
    add_json(p)
    p.set_defaults(func=cmd_ep, summary=False)
    r = run.add_parser("ep", help="a mixture of experts over real processes (expert parallel, optionally with "
                                  "data parallel) vs one process, the simulator's plan and torch's all-to-all")
    r.add_argument("--dp", type=int, default=1, help="data-parallel size; ep = world size / dp (default 1)")
    r.add_argument("--experts", type=int, default=4, help="experts in the layer (default 4)")
    r.add_argument("--top-k", type=int, default=2, help="experts per token (default 2)")
    r.add_argument("--capacity", type=float, default=1.0, help="capacity factor; 0 = dropless (default 1.0)")
    r.add_argument("--tokens", type=int, default=8, help="tokens each rank holds (default 8)")
    r.add_argument("--hidden", type=int, default=8, help="hidden size (default 8)")
    r.add_argument("--ffn", type=int, default=16, help="each expert's inner width (default 16)")
    add_run_flags(r)
    r.set_defaults(func=cmd_run_ep, target="ep", renames={"capacity_factor": "--capacity"})
