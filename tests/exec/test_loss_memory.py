"""The loss's bytes per logit (`simlab.sim.hybrid_loss`) measured with torch's own MemTracker on the CPU: plain
PyTorch's cross_entropy on upcast logits, and the same loss on vocabulary-split logits under torch's loss_parallel
(a DTensor on a one-rank mesh runs loss_parallel's own kernels). The peak above the bf16 logits, per logit."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simlab.sim.hybrid import LOSSES
from simlab.sim.hybrid_loss import LOSS_BYTES, LOSS_PARALLEL_BYTES

MEASURE = r"""
import json, torch, torch.distributed as dist
from torch.nn import functional as F
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.tensor import Shard, distribute_tensor
from torch.distributed.tensor.parallel import loss_parallel
from torch.testing._internal.distributed.fake_pg import FakeStore
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (1,))
N, V = 1024, 4096  # tokens, vocabulary
y = torch.randint(0, V, (N,), generator=torch.Generator().manual_seed(0))
out = {}
for parallel in (False, True):
    logits = torch.randn(N, V, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)  # (N, V)
    logits = (distribute_tensor(logits, mesh, [Shard(1)]) if parallel else logits).requires_grad_()
    tracker = MemTracker()
    tracker.track_external(logits)
    with tracker:
        with loss_parallel() if parallel else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            F.cross_entropy(logits.float(), y).backward()
    peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
    out["loss_parallel" if parallel else "plain"] = (peak - 2 * N * V) / (N * V)  # less the bf16 logits themselves
dist.destroy_process_group()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def measured() -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_plain_pytorchs_fp32_loss_holds_twelve_bytes_per_logit(measured):
    assert measured["plain"] == pytest.approx(LOSS_BYTES[LOSSES.index("fp32")], rel=0.01)


def test_under_tp_torchs_loss_parallel_holds_sixteen(measured):
    # its per-token vectors (max, sum of exponentials, the target mask: tens of bytes a token) add under 1 % at V = 4096
    assert measured["loss_parallel"] == pytest.approx(LOSS_PARALLEL_BYTES, rel=0.01)
