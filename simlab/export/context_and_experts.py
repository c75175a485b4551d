"""Lesson 7's knobs as each framework takes them: context parallelism (cp, and how it exchanges K,V) and a mixture
of experts (its shape, ep, the capacity factor) — or the one-line refusal where a framework cannot say them.

- Megatron-LM (core_v0.16.1) has all of it: --context-parallel-size with --cp-comm-type p2p (the ring), all_gather
  (Llama 3's) or a2a (Ulysses' all-to-all); --num-experts, --moe-router-topk, --moe-ffn-hidden-size,
  --expert-model-parallel-size (carved out of the data-parallel group, as the plan carves it), the all-to-all token
  dispatcher, and --moe-expert-capacity-factor (no flag: dropless). TransformerConfig refuses biases in the experts
  unless the experts' TP is 1, which the plan does not assume.
- torchtitan 0.3.0: `context_parallel_degree` runs torch's context parallelism, whose K,V exchange is "allgather"
  unless the training process calls `set_rotate_method("alltoall")` (the K,V shards passed on, rank to rank: the
  ring), which the emitted file does; torch has no Ulysses. ParallelDims always shards the weights with FSDP over
  the CP ranks (its `fsdp` mesh is dp_shard·cp), so a plan with cp > 1 and no ZeRO is refused. Its llama3 model has
  no experts (torchtitan's MoE models — deepseek_v3, qwen3, llama4 — have shapes of their own): a mixture of experts
  is refused.
- DeepSpeed: the ds_config holds neither. Ulysses is the model code's (`deepspeed.sequence.layer.DistributedAttention`,
  Megatron-DeepSpeed's --ds-sequence-parallel-size); the ring and the all-gather are not DeepSpeed's. A mixture of
  experts is `deepspeed.moe.layer.MoE(num_experts, ep_size, k, capacity_factor, drop_tokens)` in the model code,
  which DeepSpeed's engine refuses under ZeRO-3 ("MoE not supported with Stage 3").
"""
from __future__ import annotations

from ..i18n import _
from .common import Setting, refuse

MEGATRON_CP = {"ring": "p2p", "all-gather-kv": "all_gather", "ulysses": "a2a"}  # TransformerConfig.cp_comm_type
ROTATE = "from torch.distributed.tensor.experimental._attention import set_rotate_method"


def _cp_meaning(plan) -> str:
    return {"ring": _("K,V blocks passed around the ring of the CP group, under attention's compute"),
            "all-gather-kv": _("K and V all-gathered once per layer, attention run locally (Llama 3's choice)"),
            "ulysses": _("an all-to-all trades tokens for heads: each GPU attends over the whole sequence with a "
                         "share of the heads (DeepSpeed-Ulysses)")}[plan.cp_comm]


def _split(plan) -> str:
    return _("split each sequence over {cp} GPUs: 2·cp chunks, rank r holds chunks r and 2·cp − 1 − r, so causal "
             "attention's work is even").format(cp=plan.cp)


def megatron(model, plan) -> list[Setting]:
    """Megatron-LM's flags for context parallelism and the experts (none for a dense plan without CP)."""
    if model.experts and model.biases and plan.tp > 1:
        refuse(f"model={model.name!r}", "Megatron keeps biases in the experts only when the experts are not split "
                                        "over TP (TransformerConfig: \"Bias in Moe is only supported when ETP==1\"): "
                                        "use tp=1 or a model without biases")
    s = []
    if plan.cp > 1:
        s += [Setting("--context-parallel-size", plan.cp, _split(plan), 7),
              Setting("--cp-comm-type", MEGATRON_CP[plan.cp_comm], _cp_meaning(plan), 7)]
    if model.experts:
        s += [Setting("--num-experts", model.experts, _("experts in each layer's MLP (E)")),
              Setting("--moe-router-topk", model.top_k, _("experts each token is routed to (k)")),
              Setting("--moe-ffn-hidden-size", model.expert_ffn or model.ffn_width, _("each expert's MLP inner "
                                                                                     "width")),
              Setting("--moe-token-dispatcher-type", "alltoall", _("tokens travel to their experts' GPUs and back by "
                                                                  "all-to-all"), 7)]
        if plan.ep > 1:
            s.append(Setting("--expert-model-parallel-size", plan.ep, _("the experts spread over {ep} GPUs of the DP "
                             "group, E/ep = {each} on each").format(ep=plan.ep, each=model.experts // plan.ep), 7))
        if plan.capacity:
            s.append(Setting("--moe-expert-capacity-factor", plan.capacity, _("each expert takes at most "
                             "capacity·k·tokens/E tokens; the rest skip it"), 7))
    return s


def torchtitan(model, plan) -> list[Setting]:
    """torchtitan's fields for context parallelism; a one-line refusal for what it cannot run."""
    if model.experts:
        refuse(f"model={model.name!r}", "torchtitan's llama3 has no experts (its MoE models — deepseek_v3, qwen3, "
                                        "llama4 — have shapes of their own): use --emit megatron")
    if plan.cp == 1:
        return []
    if plan.cp_comm == "ulysses":
        refuse("cp_comm='ulysses'", "torch's context parallelism passes K,V shards around the ring or all-gathers "
                                    "them; it has no all-to-all over heads: use cp_comm='ring' or 'all-gather-kv'")
    if plan.zero == 0:
        refuse(f"cp={plan.cp}", "torchtitan shards the weights with FSDP over the CP ranks whenever cp > 1 "
                                "(ParallelDims: fsdp = dp_shard·cp), which the plan without ZeRO does not count: use "
                                "zero 1, 2 or 3")
    s = [Setting("parallelism.context_parallel_degree", plan.cp, _split(plan), 7)]
    if plan.cp_comm == "ring":
        s.append(Setting("set_rotate_method", "alltoall", _cp_meaning(plan) + " " + _(
            "(torch's default, allgather, is the all-gather)"), 7, "model"))
    return s


def deepspeed(model, plan) -> list[Setting]:
    """What the model code must do for context parallelism and the experts under DeepSpeed; refusals."""
    s = []
    if plan.cp > 1:
        if plan.cp_comm != "ulysses":
            refuse(f"cp_comm={plan.cp_comm!r}", "DeepSpeed's sequence parallelism is Ulysses (an all-to-all over "
                                                "heads); it has no ring or all-gather of K,V: use cp_comm='ulysses'")
        s.append(Setting("deepspeed.sequence.layer.DistributedAttention", f"sequence_process_group of {plan.cp} GPUs "
                         f"(Megatron-DeepSpeed: --ds-sequence-parallel-size {plan.cp})", _cp_meaning(plan), 7,
                         "model"))
    if model.experts:
        if plan.zero == 3:
            refuse("zero=3", "DeepSpeed's engine refuses experts under ZeRO-3 (\"MoE not supported with Stage 3\"): "
                             "use zero 0, 1 or 2")
        drop = bool(plan.capacity)
        s.append(Setting("deepspeed.moe.layer.MoE", f"num_experts={model.experts}, ep_size={plan.ep}, "
                         f"k={model.top_k}, capacity_factor={plan.capacity if drop else 1.0}, drop_tokens={drop}",
                         _("each MLP becomes {e} experts over {ep} GPUs of the DP group; tokens beyond an expert's "
                           "capacity are dropped").format(e=model.experts, ep=plan.ep) if drop else
                         _("each MLP becomes {e} experts over {ep} GPUs of the DP group; no token is dropped").format(
                             e=model.experts, ep=plan.ep), 7, "model"))
    return s
