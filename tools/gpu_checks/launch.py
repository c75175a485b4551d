"""The launch groups: where `simlab.exec.launch` puts each rank and whether the collectives gloo (or NCCL) takes
CUDA tensors in are exact there ("launch: gloo on cuda", "launch: device plumbing"); and, on one GPU, whether NCCL
lets two ranks share it (info: it is expected to refuse, "Duplicate GPU detected")."""
from __future__ import annotations

import datetime
import socket
import time

import torch
import torch.distributed as dist

from .plan import checks_of, layouts
from .report import FAIL, INFO, PASS, one_line, row


def probe_launch(rank, world_size):
    """One rank: where device() puts it, and gloo's (or NCCL's) CUDA-capable collectives on its tensors."""
    from simlab.exec.launch import device
    dev = device()
    x = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    b = torch.full((4,), float(rank), device=dev)
    dist.broadcast(b, src=0)
    parts = [torch.empty(2, device=dev) for _ in range(world_size)]
    dist.all_gather(parts, torch.full((2,), float(rank), device=dev))
    return {"device": str(dev), "backend": dist.get_backend(), "all_reduce": x.cpu().tolist(),
            "broadcast": b.cpu().tolist(), "all_gather": torch.cat(parts).cpu().tolist()}


def child_launch(mode, gpus, size):
    from simlab.exec.launch import launch
    lay = layouts(mode, gpus)["collective"]
    (check, how), = checks_of(mode, gpus, "launch")
    try:
        ranks = launch(probe_launch, lay.ranks, backend=lay.backend, timeout=40)  # < the group's 60 s: its reason
        n = lay.ranks
        want_dev = ["cpu"] * n if mode == "cpu" else ["cuda:0"] * n if lay.shared else [f"cuda:{r}" for r in range(n)]
        good = ([r["device"] for r in ranks] == want_dev
                and all(r["all_reduce"] == [n * (n + 1) / 2] * 4 and r["broadcast"] == [0.0] * 4
                        and r["all_gather"] == [float(q) for q in range(n) for _ in range(2)] for r in ranks))
        yield row(check, how, f"devices {', '.join(r['device'] for r in ranks)}; backend {ranks[0]['backend']}",
                  f"devices {', '.join(want_dev)}; exact sums", "all_reduce, broadcast, all_gather exact" if good
                  else f"got {ranks}", PASS if good else FAIL)
    except Exception as err:
        yield row(check, how, result=one_line(err))


def _nccl_rank(rank, port, queue):
    try:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=30))
        x = torch.ones(1, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()
        queue.put((rank, "ran", x.item()))
        dist.destroy_process_group()
    except Exception as err:
        queue.put((rank, "refused", f"{type(err).__name__}: {err}"))


def child_nccl_shared(mode, gpus, size):
    """Two NCCL ranks on cuda:0: NCCL is expected to refuse ("Duplicate GPU detected"); info, not a test."""
    import multiprocessing as mp
    (check, how), = checks_of(mode, gpus, "nccl-shared")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")  # this process has not touched CUDA: the ranks initialise it themselves
    queue = ctx.Queue()
    procs = [ctx.Process(target=_nccl_rank, args=(r, port, queue), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    answers, deadline = {}, time.monotonic() + 35
    while len(answers) < 2 and time.monotonic() < deadline:
        try:
            r, what, detail = queue.get(timeout=1)
            answers[r] = (what, detail)
        except Exception:
            if not any(p.is_alive() for p in procs) and queue.empty():
                break
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)
    if not answers:
        yield row(check, how, "no answer in 35 s", "refused", "hung or died without a word", INFO)
        return
    what = "refused" if any(a[0] == "refused" for a in answers.values()) else "ran"
    detail = next((a[1] for a in answers.values() if a[0] == what), "")
    yield row(check, how, what, "refused (Duplicate GPU detected)",
              one_line(detail) if what == "refused" else f"all_reduce = {detail}: this NCCL lets ranks share a GPU",
              INFO)
