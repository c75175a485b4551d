"""Lesson 7 on the command line: `simlab cp` (context parallelism simulated: the (query, key) pairs each rank
scores under a causal mask, contiguous vs zig-zag, and the bytes and K,V buffers of ring attention,
all-gather-kv and Ulysses) and `simlab run cp` (one variant on real processes, forward and backward, against
one process, the plan and torch's own ring).

    simlab cp --world-size 4 --seq 16 --heads 4 --head-dim 2
    simlab cp --world-size 8 --seq 131072 --heads 32 --kv-heads 8 --head-dim 128 --variant ulysses --json
    simlab run cp --world-size 4 --seq 16 --variant all-gather-kv --layout contiguous
"""
from __future__ import annotations

from .. import _checks
from ..i18n import _
from .common import add_json, add_run_flags, check_memory, check_run_flags, run_output

MAX_RUN_SEQ = 4096  # a real run on CPUs: the one-process reference holds heads·s² scores, twice over


def _shape(args) -> dict:
    return {"world_size": args.world_size, "seq": args.seq, "heads": args.heads, "head_dim": args.head_dim,
            "kv_heads": args.kv_heads, "batch": args.batch}


def cmd_cp(args) -> dict:
    """`simlab cp`: `sim.context_parallel.work_per_rank` for both layouts and `costs` of every variant."""
    from ..render.context_parallel import layouts_for, variants_text, work_text
    from ..sim.context_parallel import imbalance, work_per_rank
    from ..sim.context_parallel_costs import check_shape, compare, costs

    _checks.check_int("itemsize", args.itemsize, 1, 16)
    kv_heads = check_shape(args.variant, **_shape(args), itemsize=args.itemsize, layout=args.layout)
    work = {layout: list(work_per_rank(args.world_size, args.seq, layout))
            for layout in layouts_for(args.world_size, args.seq)}
    rows = compare(**_shape(args), itemsize=args.itemsize)
    chosen = costs(args.variant, **_shape(args), itemsize=args.itemsize, layout=args.layout)
    out = {"world_size": args.world_size, "seq": args.seq, "heads": args.heads, "kv_heads": kv_heads,
           "head_dim": args.head_dim, "batch": args.batch, "itemsize": args.itemsize, "layout": args.layout,
           "variant": args.variant, "work_per_rank": work[args.layout],
           "imbalance": round(imbalance(work[args.layout]), 6),
           "work_per_rank_by_layout": work,
           "bytes_sent_per_rank": chosen.bytes_sent, "forward_bytes": chosen.forward_bytes,
           "backward_bytes": chosen.backward_bytes, "kv_buffer_bytes": chosen.kv_buffer_bytes,
           "variants": {v: None if c is None else c._asdict() | {"bytes_sent": c.bytes_sent} for v, c in rows.items()}}
    if not args.json:
        print(work_text(args.world_size, args.seq))
        print(variants_text(rows))
        print(_("chosen: {variant} with {layout} layout: {sent} bytes sent per rank, {kv} bytes of K,V buffers").format(
            variant=args.variant, layout=args.layout, sent=f"{chosen.bytes_sent:,}", kv=f"{chosen.kv_buffer_bytes:,}"))
    return out


def cmd_run_cp(args) -> dict:
    """`simlab run cp`: `parity.context_parallel.run_context_parallel` with the flags given."""
    from ..parity.context_parallel import run_context_parallel
    from ..sim.context_parallel_costs import check_shape

    check_run_flags(args)
    kv_heads = check_shape(args.variant, **_shape(args), layout=args.layout)
    _checks.check_int("seq", args.seq, 1, MAX_RUN_SEQ)
    _checks.check_int("heads", args.heads, 1, 32)
    _checks.check_int("head_dim", args.head_dim, 1, 1024)
    _checks.check_int("batch", args.batch, 1, 8)
    # the reference's scores, probabilities and their gradients, and every rank's copy of Q, K, V, dO and grads
    scores = 3 * args.batch * args.heads * args.seq ** 2
    tensors = 8 * args.batch * (args.heads + kv_heads) * args.seq * args.head_dim
    check_memory(f"--seq={args.seq} --heads={args.heads}", 4 * (scores + (args.world_size + 1) * tensors),
                 "attention over the whole sequence")
    res = run_context_parallel(world_size=args.world_size, seq=args.seq, heads=args.heads, head_dim=args.head_dim,
                               kv_heads=args.kv_heads, batch=args.batch, variant=args.variant, layout=args.layout,
                               causal=not args.no_causal, seed=args.seed, compare_torch=not args.no_torch,
                               backend=args.backend, timeout=args.timeout)
    head = {"variant": res["variant"], "layout": res["layout"], "causal": res["causal"]}
    return run_output(head, res, "seq", "heads", "kv_heads", "head_dim", "batch", "max_abs_diff_per_tensor",
                      "matches_plan", "plan_bytes_sent_per_rank", "work_per_rank", "plan_work_per_rank",
                      "torch_compared")


def _add_shape_flags(p, seq: int, heads: int, head_dim: int) -> None:
    from ..sim.context_parallel import LAYOUTS
    from ..sim.context_parallel_costs import VARIANTS
    p.add_argument("--seq", type=int, default=seq, help=f"sequence length s (default {seq})")
    p.add_argument("--heads", type=int, default=heads, help=f"query heads a (default {heads})")
    p.add_argument("--head-dim", type=int, default=head_dim, help=f"features per head (default {head_dim})")
    p.add_argument("--kv-heads", type=int, default=None, help="K,V heads (GQA; default: as many as --heads)")
    p.add_argument("--batch", type=int, default=1, help="sequences b (default 1)")
    p.add_argument("--layout", choices=LAYOUTS, default="zigzag", help="which tokens each rank holds (default zigzag)")
    p.add_argument("--variant", choices=VARIANTS, default="ring", help="how K,V move (default ring)")


def add_commands(sub, run) -> None:
    p = sub.add_parser("cp", help="context parallelism simulated: work per rank (contiguous vs zig-zag) and the "
                                  "bytes and K,V memory of ring, all-gather-kv and ulysses")
    p.add_argument("--world-size", type=int, default=4, help="CP size N: ranks the sequence is split over (default 4)")
    _add_shape_flags(p, seq=16, heads=4, head_dim=2)
    p.add_argument("--itemsize", type=int, default=4, help="bytes per element (default 4: fp32; 2 for bf16)")
    add_json(p)
    p.set_defaults(func=cmd_cp, summary=False)
    r = run.add_parser("cp", help="context-parallel attention on real processes, forward and backward: vs one "
                                  "process, the plan's bytes and steps, and torch's ring")
    _add_shape_flags(r, seq=16, heads=2, head_dim=4)
    r.add_argument("--no-causal", action="store_true", help="attend to every key (default: causal mask)")
    r.add_argument("--no-torch", action="store_true", help="skip the comparison with torch's ring attention")
    add_run_flags(r)
    r.set_defaults(func=cmd_run_cp, target="cp")
