"""simlab.exec.data_parallel_threads (run by simlab.parity.data_parallel.run_dp): nn.DataParallel's recipe on
CPU threads — same numbers as one process, and every byte that goes through device 0 counted, phase by
phase, as the closed form says."""
import threading

import pytest

import simlab.exec.data_parallel_threads as DP
import simlab.parity.data_parallel as PDP
from simlab.exec.models import TINY_MLP, loss_fn, make_batch, make_mlp

TOL = 1e-5


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda n: f"n{n}")
def run(request):
    return PDP.run_dp(request.param, steps=5)


def test_matches_one_process(run):
    assert run["backend"] == "threads" and len(run["losses"]) == 5
    assert all(abs(a - b) <= TOL for a, b in zip(run["losses"], run["reference_losses"]))
    assert run["max_abs_diff_vs_reference"] <= TOL
    assert run["reference_losses"][-1] < run["reference_losses"][0]


def test_counted_bytes_follow_the_closed_form(run):
    n = run["world_size"]
    P = 4 * sum(p.numel() for p in make_mlp(TINY_MLP).parameters())
    b, fin, fout = 16 // n, TINY_MLP[0], TINY_MLP[-1]
    assert run["phase_bytes"] == run["expected_phase_bytes"]  # measured == the simulator's
    assert run["phase_bytes"] == {  # written out by hand: device 0 first, then the others
        "scatter inputs": [(n - 1) * b * fin * 4] + [0] * (n - 1),
        "replicate": [(n - 1) * P] + [0] * (n - 1),
        "gather outputs": [0] + [b * fout * 4] * (n - 1),
        "scatter grads": [(n - 1) * b * fout * 4] + [0] * (n - 1),
        "reduce grads": [0] + [P] * (n - 1)}
    assert run["bytes_sent_per_rank"] == [sum(col) for col in zip(*run["phase_bytes"].values())]
    trace = run["trace"]  # one send Event per transfer, every step: the same bytes, device by device
    assert trace.bytes_sent_per_rank(n) == [5 * b for b in run["bytes_sent_per_rank"]]
    assert {e.step for e in trace} == (set(range(5)) if n > 1 else set())
    assert all(e.peer == 0 or e.rank == 0 for e in trace)  # every transfer goes through device 0


def test_contract_says_why_there_is_no_torch_comparison(run):
    """torch's own nn.DataParallel needs a GPU per device: on this machine the result says so."""
    import torch
    if torch.cuda.device_count() >= run["world_size"]:
        assert run["max_abs_diff_vs_torch"] <= TOL
    else:
        assert run["max_abs_diff_vs_torch"] is None and "GPUs" in run["why_no_torch"]


def test_device_zero_is_the_bottleneck():
    """DP's device 0 sends (n-1) model copies a step; a DDP ring rank sends 2(n-1)/n of the gradients."""
    P = 4 * sum(p.numel() for p in make_mlp(TINY_MLP).parameters())
    sent = {n: PDP.run_dp(n, steps=1)["bytes_sent_per_rank"][0] for n in (2, 4, 8)}
    assert sent[2] < sent[4] < sent[8]
    assert all(sent[n] > (n - 1) * P for n in sent)  # the model copies alone
    assert all((n - 1) * P > 2 * (n - 1) * P / n for n in (4, 8))  # vs a ring rank: n/2 times more


def test_replicas_run_in_their_own_threads():
    model = make_mlp(TINY_MLP)
    dp = DP.ThreadDataParallel(model, 4)
    seen = []
    for replica in dp.replicas:
        replica.register_forward_hook(lambda *_: seen.append(threading.current_thread().name))
    x, y = make_batch(8, TINY_MLP[0], TINY_MLP[-1])
    loss_fn(dp(x), y).backward()
    dp.close()
    assert len(seen) == 4 and all(name.startswith("simlab-dp") for name in seen)
    assert all(p.grad is not None for p in model.parameters())  # reduced into device 0's module
    assert not any(p.is_leaf for r in dp.replicas for p in r.parameters())  # copies inside the graph


