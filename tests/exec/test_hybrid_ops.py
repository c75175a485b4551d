"""The time model's fixed costs count operations of the course's own GPT: hold the counts to the code.

`sim/hybrid_layer.py` and `sim/hybrid_time.py` cannot import torch, so their constants (OPS_LAYER, OPS_OUTSIDE, TENSORS_*) are numbers;
these tests count the aten calls of `simlab.exec.models`' block and GPT with a TorchDispatchMode and fail as
soon as a change to the model's code changes them."""
import torch

from simlab.exec.hybrid_calibrate import CountOps
from simlab.exec.models import gpt_loss, make_gpt, make_tokens
from simlab.sim import hybrid_layer as hl
from simlab.sim import hybrid_time as ht


def counted(fn):
    with CountOps() as c:
        out = fn()
    return c.calls, out


def test_a_layer_forward_and_backward_make_the_counted_aten_calls():
    gpt = make_gpt(2, 16, 2, 8, 16)
    x = torch.randn(2, 8, 16, requires_grad=True)
    forward, y = counted(lambda: gpt.blocks[0](x))
    backward, _ = counted(lambda: y.sum().backward())
    sum_op = 1  # y.sum() is the test's, not the layer's; its backward expands one gradient
    assert (forward, backward - sum_op) == (hl.OPS_LAYER["forward"], hl.OPS_LAYER["backward"])


def test_embedding_head_and_loss_make_the_rest():
    gpt = make_gpt(2, 16, 2, 8, 16)
    x, y = make_tokens(4, 8, 16)
    forward, loss = counted(lambda: gpt_loss(gpt(x), y))
    backward, _ = counted(loss.backward)
    layers = len(gpt.blocks)
    assert forward - layers * hl.OPS_LAYER["forward"] == hl.OPS_OUTSIDE["forward"]
    assert backward - layers * hl.OPS_LAYER["backward"] == hl.OPS_OUTSIDE["backward"]


def test_parameter_tensors_per_layer_and_outside():
    gpt = make_gpt(3, 16, 2, 8, 16)
    per_layer = len(list(gpt.blocks[0].parameters()))
    assert per_layer == ht.TENSORS_PER_LAYER
    assert len(list(gpt.parameters())) - 3 * per_layer == ht.TENSORS_OUTSIDE


def _optimizer_calls(rank, world_size, layers_list):
    import torch.distributed as dist

    from simlab.exec.hybrid import DataParallelAdam
    out = []
    for layers in layers_list:
        params = list(make_gpt(layers, 16, 2, 8, 16).parameters())
        for p in params:
            p.grad = torch.ones_like(p)
        opt = DataParallelAdam(params, 0, dist.group.WORLD, lr=1e-2)
        opt.step()  # the first step allocates; count a later one
        out.append(counted(opt.step)[0])
    return out


def test_the_optimizer_step_makes_ops_per_tensor_times_tensors_plus_adams_own():
    from simlab.exec.launch import launch
    (one, three), = launch(_optimizer_calls, 1, (1, 3), backend="gloo")
    per_tensor = (three - one) / (2 * ht.TENSORS_PER_LAYER)
    assert per_tensor == ht.OPS_PER_TENSOR
    assert one - per_tensor * (ht.TENSORS_PER_LAYER + ht.TENSORS_OUTSIDE) == ht.OPS_ADAM


def _saved_bytes(gpt, x, y) -> int:
    """Bytes of the tensors autograd keeps for the backward of one forward, the parameters excepted."""
    params = {p.untyped_storage().data_ptr() for p in gpt.parameters()}
    saved = {}

    def keep(t):
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        gpt_loss(gpt(x), y)
    return sum(saved.values())


def test_the_hybrid_run_memory_bound_holds_the_activations_autograd_really_keeps():
    """`HybridRun.process_bytes`: 16 B per parameter and lesson 6's activation model; what the course's GPT
    really saves for the backward is at most the model's activations and not far below (0.7-0.95 of it)."""
    from simlab.exec.hybrid import gpt_for
    from simlab.sim.hybrid_run import HybridRun
    for knobs in ({}, {"hidden": 64, "heads": 4, "seq": 32, "layers": 4, "microbatches": 4},
                  {"tp": 1, "hidden": 256, "heads": 4, "seq": 128}, {"tp": 1, "hidden": 100, "heads": 2}):
        spec = HybridRun.build(**{"tp": 2, "dp": 2, "pp": 1} | knobs)
        m = spec.model
        x, y = make_tokens(spec.global_batch, m.seq, m.vocab)
        modelled = spec.process_bytes() - 16 * m.params
        assert 0.7 * modelled <= _saved_bytes(gpt_for(m), x, y) <= modelled, knobs
