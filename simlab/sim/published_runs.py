"""Published training runs nobody fitted: the plan each states, its throughput, and every assumption about a
knob it does not state — fixed here before the model's prediction for it was looked at.

Rule for a run to qualify: a primary source (paper, or the framework's own repository or documentation) gives
the model's shape, the GPUs, TP/PP/DP with the ZeRO/FSDP sharding, the micro-batch and global batch, and a
measured throughput; dense models only; no context parallelism (CP > 1 is lesson 7's). From a sweep we take,
by rule: llm-foundry's MPT tables — per GPU table, the largest model and the 7B at sequence 2048, each with the
most GPUs; NVIDIA's recipes — the smallest cluster of each model (the plan the recipe is written for); the
torch.compile row where torchtitan gives eager and compiled (fused kernels, as Megatron's).

Throughput is compared as tokens per second per GPU. Where a source prints seconds per step we divide
global batch × sequence by it; where it prints TFLOP/s we divide by the FLOPs per token of the formula the
source states (DeepSpeed's blog), or, where it states none, of Megatron-LM's `num_floating_point_operations`
(`megatron_flops_per_token`), which NVIDIA's tables use.

Common assumptions, per framework, where the source is silent (each run lists its own on top):
- Megatron-LM 2021–22, Megatron-DeepSpeed and DeepSpeed's pipeline engine: eager attention with a fused
  softmax, no DP/param overlap (`overlap="none"`), fp32 gradients (mixed-fp32-grads), DGX-A100 nodes
  (8 × 200 Gb/s InfiniBand) unless the source names the cluster;
- NeMo / Megatron-Core 2024–25 on DGX-H100: cuDNN fused attention (modelled as flash), distributed optimizer
  (ZeRO-1) with --overlap-grad-reduce --overlap-param-gather and TP comm overlap ("dp,params,tp"), no
  recomputation when none is named, 8 × 400 Gb/s per node;
- FSDP (llm-foundry, fms-fsdp, torchtitan): ZeRO-3 with forward and backward prefetch ("dp,params"); llm-foundry's
  MPT benchmarks with FlashAttention's Triton kernel (`MPT`: a correction after their first predictions);
  FSDP under PP (torchtitan, Llama 3) does not reshard after forward and syncs gradients once per step:
  ZeRO-1's communication and memory for parameters and gradients.
"""
from __future__ import annotations

from .gpus import H100_96GB_PEAKS
from .hybrid import Plan
from .model import PRESETS
from .published_figures import Run, ds_azure, megatron_flops_per_token, per_gpu_from_step

__all__ = ["LONG_AND_MOE_RUNS", "RUNS", "Run", "megatron_flops_per_token"]


M, P = PRESETS, Plan
MEGATRON_OLD = dict(attention="eager", overlap="none", precision="mixed-fp32-grads")
NEMO = dict(attention="flash", overlap="dp,params,tp", zero=1, sequence_parallel=True, schedule="interleaved")
FSDP = dict(attention="flash", overlap="dp,params", zero=3)
# llm-foundry's benchmarks attend with FlashAttention's Triton kernel (submit_benchmarks.py's --attn_impl default
# 'triton', at b2a43a1 and 5e85bd6), which these runs' first predictions priced as FlashAttention-2 (their swing now)
MPT, MPT_FIRST = dict(FSDP, attention="flash-triton", precision="mixed"), ({"attention": "flash"},)
MPT_FIX = ("FlashAttention's Triton kernel: corrected after the first prediction, which priced it as FlashAttention-2 "
           "and came out {first} (the held-out MPT rows showed the error growing with the sequence)")
TITAN = dict(attention="flash", overlap="dp,params", precision="mixed-fp32-grads")  # Meta's Llama 3 runs and torchtitan's
# torchtitan's own runs also compute the loss as plain PyTorch does, on fp32 logits (train.py loss_fn @ 9dec370):
# added after the first predictions, when the model learnt `Plan.loss`
TT = dict(TITAN, loss="fp32")
# torchtitan's H100s run at a peak "between SXM and NVL" (its footnote 2): the preset takes the midpoint; the swing
# prices both ends. Added after the first predictions, which took SXM's peak (an upper bound), as each run records
TT_PEAKS = tuple({"gpu": fields} for fields in H100_96GB_PEAKS.values())
TT_PEAK = ("the GPU's peak: the midpoint of SXM's and NVL's (torchtitan's footnote 2: 'between SXM and NVL'); "
           "corrected after the first prediction, which took SXM's peak and came out {first}")
# DeepSpeed's ZeRO-3 gathers 5e7 parameters at a time and reduces 5e8 (its defaults, stage3_prefetch_bucket_size
# and reduce_bucket_size): added after the first predictions, when the model learnt `Plan.bucket`
DS_AZURE = dict(attention="eager", overlap="dp,params", zero=3, recompute="full", bucket=(50_000_000, 500_000_000))
GPT3_DS = M["gpt3-175b"].with_(vocab=50304)
MT_NLG_DS = M["megatron-530b"].with_(vocab=50304, seq=1024)
L3 = M["llama3-405b"]

RUNS = (
    # ---- A100
    Run("bloom-176b", "bigscience-workshop/bigscience train/tr11-176B-ml README (104.70 s/it, GBS 2048)",
        "Megatron-DeepSpeed", M["bloom-176b"], "a100-80gb", 384, 400,
        P(tp=4, pp=12, dp=8, microbatch=2, zero=1, recompute="full", stage_layers=(5,) + (6,) * 10 + (5,),
          **MEGATRON_OLD), 2048, per_gpu_from_step(104.70, 2048, 2048, 384), "104.70 s/iteration",
        assumptions=("4 Omni-Path links per node at 100 Gb/s each",), swing="the network (speed not stated)",
        alternatives=({"inter_node_gbps": 200}, {"inter_node_gbps": 800})),
    Run("megatron-gpt3-175b", "NVIDIA/Megatron-LM README GPT-3 example @ 152aab3 (~32 s/it, 138 TFLOP/s)",
        "Megatron-LM 2021", M["gpt3-175b"], "a100-80gb", 1024, 1600,
        P(tp=8, pp=16, dp=8, recompute="full", **MEGATRON_OLD), 1536, per_gpu_from_step(32, 1536, 2048, 1024),
        "~32 s/iteration", assumptions=("A100 80GB on DGX-A100 nodes (Selene)",), swing="'around 32 seconds'"),
    Run("megatron-530b-dp8", "Korthikanti et al. 2022 (arXiv 2205.05198) §6.3 (2240 GPUs, 39.15 s/it)",
        "Megatron-LM 2022", M["megatron-530b"], "a100-80gb", 2240, 1600,
        P(tp=8, pp=35, dp=8, schedule="interleaved", chunks=3, sequence_parallel=True, recompute="selective",
          **MEGATRON_OLD), 2240, per_gpu_from_step(39.15, 2240, 2048, 2240), "39.15 s/iteration",
        assumptions=("global batch 2240 = 8 × Table 3's 280",)),
    Run("glm-130b", "THUDM/GLM-130B logs/main-log-en.md (96 nodes, BSZ 4224, 88.5 s/iter); paper §2.3",
        "DeepSpeed pipeline", M["glm-130b"], "a100-40gb", 768, 1600,
        P(tp=4, pp=8, dp=24, zero=1, recompute="full", attention="eager", overlap="none", precision="mixed"),
        4224, per_gpu_from_step(88.5, 4224, 2048, 768), "88.5 s/iteration",
        assumptions=("ZeRO-1 (a secondary summary)", "full recomputation ('re-materialization')",
                     "DGX-A100 network, 8 × 200 Gb/s"), swing="ZeRO stage and recompute granularity",
        alternatives=({"zero": 0}, {"recompute": "selective"})),
    Run("bloomberggpt-50b", "Wu et al. 2023 (arXiv 2303.17564) §3.4, Table 4 (32.5 s/step)",
        "SageMaker model parallel (ZeRO-3 + MiCS)", M["bloomberggpt-50b"], "a100-40gb", 512, 400,
        P(dp=512, zero=3, shard=128, microbatch=4, recompute="full", attention="eager", overlap="dp,params"),
        2048, per_gpu_from_step(32.5, 2048, 2048, 512), "32.5 s/step",
        assumptions=("micro-batch 4: the whole per-GPU batch at once", "the 32.5 s is the batch-2048 phase"),
        swing="micro-batch (with ZeRO-3 every micro-batch gathers the parameters again)",
        alternatives=({"microbatch": 1}, {"microbatch": 2})),
    Run("ds-zero3-175b", "DeepSpeed blog 2022 'ZeRO-3 on Azure NDm A100 v4' (204.49 TFLOPs/GPU, 256 GPUs)",
        "Megatron-DeepSpeed ZeRO-3", GPT3_DS.with_(seq=512), "a100-80gb", 256, 1600,
        P(dp=256, microbatch=32, **DS_AZURE), 32 * 256, ds_azure(GPT3_DS.with_(seq=512), 32 * 256, 256, 204.49),
        "204.49 TFLOPs/GPU (the blog's formula)",
        assumptions=("vocabulary 50,304 (GPT-2's padded at TP 1)", "no gradient accumulation (the recipe's GA 1)")),
    Run("ds-zero3-530b", "DeepSpeed blog 2022 (171.37 TFLOPs/GPU, 1024 GPUs, micro-batch 8, seq 1024)",
        "Megatron-DeepSpeed ZeRO-3", MT_NLG_DS, "a100-80gb", 1024, 1600, P(dp=1024, microbatch=8, **DS_AZURE),
        8 * 1024, ds_azure(MT_NLG_DS, 8 * 1024, 1024, 171.37), "171.37 TFLOPs/GPU (the blog's formula)",
        assumptions=("vocabulary 50,304", "no CPU offload for 530B (the recipes offload only 1T)")),
    Run("mpt-70b-a100-80", "mosaicml/llm-foundry scripts/train/benchmarking/README.md @ b2a43a1 (A100 80GB)",
        "Composer FSDP", M["mpt-70b"], "a100-80gb", 64, 1600,
        P(dp=64, microbatch=8, recompute="full", **MPT), 2048, 410, "410 tokens/s/GPU", alternatives=MPT_FIRST,
        assumptions=(MPT_FIX.format(first="+6.0 %"),)),
    Run("mpt-7b-a100-80", "llm-foundry benchmarking README @ b2a43a1 (A100 80GB)", "Composer FSDP",
        M["mpt-7b"], "a100-80gb", 8, 1600, P(dp=8, microbatch=6, **MPT), 96, 4641,
        "4641 tokens/s/GPU", alternatives=MPT_FIRST, assumptions=(MPT_FIX.format(first="+10.2 %"),)),
    Run("mpt-70b-a100-40", "llm-foundry benchmarking README @ b2a43a1 (A100 40GB)", "Composer FSDP",
        M["mpt-70b"], "a100-40gb", 128, 1600, P(dp=128, microbatch=4, recompute="full", **MPT),
        512, 376, "376 tokens/s/GPU", alternatives=MPT_FIRST, assumptions=(MPT_FIX.format(first="+11.2 %"),)),
    Run("mpt-7b-a100-40", "llm-foundry benchmarking README @ b2a43a1 (A100 40GB)", "Composer FSDP",
        M["mpt-7b"], "a100-40gb", 128, 1600, P(dp=128, microbatch=18, recompute="full", **MPT),
        2304, 3623, "3623 tokens/s/GPU", alternatives=MPT_FIRST, assumptions=(MPT_FIX.format(first="+4.7 %"),)),
    Run("fms-7b-hsdp", "foundation-model-stack/fms-fsdp README @ 4ffb9bd (A100 80G, 128 GPUs, 400Gbps)",
        "PyTorch FSDP", M["llama2-7b"], "a100-80gb", 128, 400,
        P(dp=128, shard=8, microbatch=2, precision="mixed", **FSDP), 256, 3700, "3700 tokens/s/GPU",
        assumptions=("400 Gb/s per node", "sequence 4096 (the config's default)", "no gradient accumulation"),
        swing="the network (per node or per GPU)", alternatives=({"inter_node_gbps": 3200},)),
    Run("fms-70b", "fms-fsdp README @ 4ffb9bd (A100 80G, 128 GPUs)", "PyTorch FSDP", M["llama2-70b"], "a100-80gb",
        128, 400, P(dp=128, microbatch=2, recompute="full", precision="mixed", **FSDP), 256, 370,
        "370 tokens/s/GPU", assumptions=("400 Gb/s per node", "sequence 4096", "no gradient accumulation"),
        swing="the network (per node or per GPU)", alternatives=({"inter_node_gbps": 3200},)),
    # ---- H100
    Run("llama3-405b-8k", "Dubey et al. 2024 (arXiv 2407.21783) Table 4 (8,192 GPUs, 430 TFLOPs/GPU)",
        "Meta (FSDP + TP + PP)", L3, "h100-80gb", 8192, 3200,
        P(tp=8, pp=16, dp=64, schedule="interleaved", chunks=8, zero=1, sequence_parallel=True,
          stage_layers=(7,) + (8,) * 14 + (7,), **TITAN), 2048, 430e12 / megatron_flops_per_token(L3),
        "430 TFLOPs/GPU (BF16 MFU 43 %)",
        assumptions=("micro-batch 1", "v = 8: 'the first model chunk on the first stage has only the embedding' "
                     "with one layer fewer on the end stages means one layer per chunk",
                     "sequence parallel with TP", "Megatron's FLOP count", "FlashAttention"),
        swing="micro-batch and v (not stated); gradients sharded (Meta: FSDP 'shards optimizer states and "
              "gradients') would reduce-scatter every micro-batch, ZeRO-2's rhythm",
        alternatives=({"microbatch": 2}, {"chunks": 4}, {"zero": 2})),
    Run("llama3-405b-16k", "Dubey et al. 2024 Table 4 (16,384 GPUs, DP 128, 400 TFLOPs/GPU)",
        "Meta (FSDP + TP + PP)", L3, "h100-80gb", 16384, 3200,
        P(tp=8, pp=16, dp=128, schedule="interleaved", chunks=8, zero=1, sequence_parallel=True,
          stage_layers=(7,) + (8,) * 14 + (7,), **TITAN), 2048, 400e12 / megatron_flops_per_token(L3),
        "400 TFLOPs/GPU (BF16 MFU 41 %)", assumptions=("as llama3-405b-8k",),
        swing="micro-batch and v; gradients sharded (ZeRO-2's rhythm)", alternatives=({"chunks": 4}, {"zero": 2})),
    Run("torchtitan-8b-8", "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md @ 820504e, Table 1",
        "torchtitan FSDP2 + compile", M["llama3-8b"], "h100-96gb-hbm2e", 8, 3200,
        P(dp=8, microbatch=2, zero=3, recompute="op-sac", **TT), 16, 6667, "6,667 TPS/GPU", memory_gib=77.0,
        assumptions=("sequence 8192 (the toml's)", "the toml's selective_ac_option = 'op' as op-sac: the policy of "
                     "parallelize_llama.py @ 820504e read op by op (q, v, w1, w2 and the attention's output kept; "
                     "k, o, w3 and the element-wise work recomputed)", TT_PEAK.format(first="+22.3 %")),
        swing="the recomputation: Korthikanti's selective (nothing recomputed under flash) or full; the GPU's peak "
              "(SXM's, NVL's)", alternatives=({"recompute": "selective"}, {"recompute": "full"}) + TT_PEAKS),
    Run("torchtitan-8b-128", "torchtitan benchmarks @ 820504e, Table 3", "torchtitan FSDP2 + compile",
        M["llama3-8b"], "h100-96gb-hbm2e", 128, 3200,
        P(dp=128, microbatch=2, zero=3, recompute="op-sac", **TT), 256, 6514, "6,514 TPS/GPU",
        memory_gib=62.0, assumptions=("as torchtitan-8b-8", TT_PEAK.format(first="+25.3 %")),
        swing="as torchtitan-8b-8", alternatives=({"recompute": "selective"}, {"recompute": "full"}) + TT_PEAKS),
    Run("torchtitan-70b-256", "torchtitan benchmarks @ 820504e, Table 4 (2D, Float8, compile)",
        "torchtitan FSDP2 + TP", M["llama3-70b"], "h100-96gb-hbm2e", 256, 3200,
        P(tp=8, dp=32, microbatch=16, zero=3, sequence_parallel=True, recompute="full",
          **(TT | dict(precision="fp8"))), 512, 829, "829 TPS/GPU", memory_gib=71.9,
        assumptions=("sequence 8192", "the local batch of 16 is one micro-batch", TT_PEAK.format(first="+8.6 %")),
        swing="the GPU's peak (SXM's, NVL's)", alternatives=TT_PEAKS),
    Run("torchtitan-405b-512", "torchtitan benchmarks @ 820504e, Table 5 (3D, 1F1B, Float8, AsyncTP)",
        "torchtitan FSDP2 + TP + PP", L3, "h100-96gb-hbm2e", 512, 3200,
        P(tp=8, pp=8, dp=8, microbatch=4, zero=1, sequence_parallel=True, recompute="full",
          **(TT | dict(precision="fp8", overlap="dp,params,tp"))), 256, 100, "100 TPS/GPU", memory_gib=82.5,
        assumptions=("the local batch of 32 in 8 micro-batches of 4: torchtitan's pipeline_parallel_microbatches "
                     "defaults to the PP degree (config_manager.py, pipeline_llama.py @ 9dec370), as the CP runs "
                     "below assume; corrected after the first prediction, which took micro-batch 1 (32 per "
                     "pipeline) and came out +90 %", "sequence 8192", "an even split, 16 layers on the fullest stage",
                     TT_PEAK.format(first="+29.2 %")),
        swing="whether FSDP reduce-scatters every micro-batch under PP (ZeRO-2's rhythm); the GPU's peak (SXM's, "
              "NVL's)", alternatives=({"zero": 2},) + TT_PEAKS),
    Run("dgxc-gpt3-175b-bf16", "NVIDIA/dgxc-benchmarking 25.01.1 nemo_megatron/README_175b.md (8.91 s/step)",
        "NeMo 24.09", M["gpt3-175b"], "h100-80gb", 128, 3200,
        P(tp=4, pp=8, dp=4, chunks=12, precision="mixed-fp32-grads", **NEMO), 256,
        per_gpu_from_step(8.91, 256, 2048, 128), "8.91 s/step"),
    Run("dgxc-gpt3-175b-fp8", "dgxc-benchmarking 25.01.1 README_175b.md (5.92 s/step)", "NeMo 24.09",
        M["gpt3-175b"], "h100-80gb", 128, 3200, P(tp=4, pp=8, dp=4, chunks=12, precision="fp8", **NEMO), 256,
        per_gpu_from_step(5.92, 256, 2048, 128), "5.92 s/step"),
    Run("dgxc-nemotron4-340b", "dgxc-benchmarking 25.01.1 nemotron/README_340b.md (4.61 s/step, BF16)",
        "NeMo 24.09", M["nemotron4-340b"], "h100-80gb", 128, 3200,
        P(tp=8, pp=8, dp=2, chunks=12, recompute="selective", precision="bf16-optimizer", **NEMO), 32,
        per_gpu_from_step(4.61, 32, 4096, 128), "4.61 s/step",
        assumptions=("the yaml's selective recomputation (nothing to recompute under fused attention)",
                     "the yaml's optimizer, distributed_fused_adam with dtype bf16 and grad_sync_dtype bf16: every "
                     "state 16-bit (bf16-optimizer, 2 + 2 + 6 bytes); corrected after the first prediction, which "
                     "took NeMo's common fp32 gradients and optimizer (2 + 4 + 12) and said the plan did not fit"),
        swing="the optimizer's state bytes (fp32 gradients and states: 'does not fit')",
        alternatives=({"precision": "mixed-fp32-grads"},)),
    Run("nemo-llama2-70b-fp8", "NVIDIA/NeMo docs/source/performance/performance_summary.md @ 8e3d65d (24.07)",
        "NeMo 24.07", M["llama2-70b"], "h100-80gb", 64, 3200,
        P(tp=4, pp=4, dp=4, chunks=20, precision="fp8", **NEMO), 128, 1728, "1728 tokens/s/GPU",
        assumptions=("no recomputation",)),
    Run("mbridge-llama3-70b-fp8", "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md @ 97ad8cc (25.11)",
        "Megatron-Bridge 25.11", M["llama3-70b"], "h100-80gb", 64, 3200,
        P(tp=4, pp=8, dp=2, chunks=5, precision="fp8", **NEMO), 128, 1602, "1602 tokens/s/GPU",
        assumptions=("no recomputation", "current-scaling FP8 priced as any FP8 recipe")),
    Run("mpt-70b-h100", "llm-foundry benchmarking README @ 5e85bd6 (H100, large scale)", "Composer FSDP",
        M["mpt-70b"], "h100-80gb", 512, 3200, P(dp=512, microbatch=8, recompute="full", **MPT),
        4096, 1007, "1007 tokens/s/GPU", swing="the network (not stated)", alternatives=MPT_FIRST,
        assumptions=("8 × 400 Gb/s per node", MPT_FIX.format(first="+16.5 %"))),
    Run("mpt-7b-h100", "llm-foundry benchmarking README @ 5e85bd6 (H100, large scale)", "Composer FSDP",
        M["mpt-7b"], "h100-80gb", 512, 3200, P(dp=512, microbatch=6, **MPT), 3072, 9670,
        "9670 tokens/s/GPU", swing="the network (not stated)", alternatives=MPT_FIRST,
        assumptions=("8 × 400 Gb/s per node", MPT_FIX.format(first="+31.3 %"))),
)


# ---- lesson 7: long sequences (context parallelism) and a mixture of experts. Kept apart from RUNS, whose median
# error is lesson 6's MODEL_ERROR. Every assumption below was written down before the model's prediction was run.
TITAN_CP = dict(TT, precision="fp8", recompute="full", cp_comm="all-gather-kv")
TT_SRC = "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md @ 820504e, Table "
TT_ASSUME = ("K,V exchanged by all-gather: torchtitan's context_parallel_rotate_method defaults to 'allgather' "
             "(torchtitan/config_manager.py @ 9dec370)", "the zig-zag (head-tail) load balancing torch's CP applies",
             "Float8 GEMMs priced as the model's FP8")
MIX = M["mixtral-8x7b"]
MIX_SRC = ("NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md @ 4015ff1 (468 TFLOPS, MCore v0.9; 'Reference "
           "Best Parallel Mapping', MCore v0.8: 64 H100, TP1 EP8 PP4 VP8, MBS 1, GBS 256, seq 4096, dropless)")
LONG_AND_MOE_RUNS = tuple(
    Run(f"torchtitan-8b-cp{cp}", TT_SRC + f"2 (FSDP {8 // cp}, CP {cp}, seq {seq})", "torchtitan FSDP2 + CP",
        M["llama3-8b"].with_(seq=seq), "h100-96gb-hbm2e", 8, 3200, P(dp=8 // cp, cp=cp, zero=3, **TITAN_CP), 8 // cp,
        tps, f"{tps:,} TPS/GPU", memory_gib=gib, assumptions=TT_ASSUME + (
            "local batch 1 per FSDP rank, one micro-batch (global batch = FSDP degree)",
            "FSDP shards over dp·cp and reshards after forward (no PP): ZeRO-3", TT_PEAK.format(first=first)),
        swing="the K,V exchange (ring instead of all-gather); the GPU's peak (SXM's, NVL's)",
        alternatives=(({"cp_comm": "ring"},) if cp > 1 else ()) + TT_PEAKS)
    for cp, seq, tps, gib, first in ((1, 32768, 3890, 83.9, "+27.6 %"), (2, 65536, 2540, 84.2, "+22.9 %"),
                                     (4, 131072, 1071, 84.0, "+67.3 %"), (8, 262144, 548, 84.5, "+76.5 %"))
) + tuple(
    Run(f"torchtitan-405b-cp{cp}", TT_SRC + f"6 (TP 8, PP 8, FSDP {8 // cp}, CP {cp}, seq {seq})",
        "torchtitan FSDP2 + TP + PP + CP", L3.with_(seq=seq), "h100-96gb-hbm2e", 512, 3200,
        P(tp=8, pp=8, dp=8 // cp, cp=cp, zero=1, sequence_parallel=True, **(TITAN_CP | dict(overlap="dp,params,tp"))),
        8 * (8 // cp), tps, f"{tps} TPS/GPU", memory_gib=gib, assumptions=TT_ASSUME + (
            "local batch 8 in 8 micro-batches of 1 (torchtitan's default: as many micro-batches as stages)",
            "FSDP under PP does not reshard after forward: ZeRO-1's traffic and memory",
            "an even split, 16 layers on the fullest stage", "AsyncTP: TP's forward collectives under its GEMMs",
            TT_PEAK.format(first=first)),
        swing="micro-batch; the K,V exchange; the GPU's peak (SXM's, NVL's)",
        alternatives=(({"cp_comm": "ring"},) if cp > 1 else ()) + TT_PEAKS)
    for cp, seq, tps, gib, first in ((1, 32768, 76, 75.3, "+27.6 %"), (2, 65536, 47, 75.9, "+53.2 %"),
                                     (4, 131072, 31, 77.1, "+53.4 %"), (8, 262144, 16, 84.9, "+77.0 %"))
) + (
    Run("llama3-405b-128k", "Dubey et al. 2024 (arXiv 2407.21783) Table 4 (16,384 GPUs, TP 8, CP 16, PP 16, DP 8, "
        "seq 131,072, 380 TFLOPs/GPU)", "Meta (FSDP + TP + PP + CP)", L3.with_(seq=131072), "h100-80gb", 16384, 3200,
        P(tp=8, cp=16, pp=16, dp=8, schedule="interleaved", chunks=8, zero=1, sequence_parallel=True,
          stage_layers=(7,) + (8,) * 14 + (7,), cp_comm="all-gather-kv", **TITAN), 128,
        380e12 / megatron_flops_per_token(L3.with_(seq=131072)), "380 TFLOPs/GPU (BF16 MFU 38 %)",
        assumptions=("as llama3-405b-8k (micro-batch 1, v = 8, sequence parallel, FlashAttention, ZeRO-1's rhythm)",
                     "batch 16 sequences per DP group: global batch 128", "K,V all-gathered (Dubey §3.3.2)",
                     "no recomputation: each rank holds 131,072/16 = 8,192 tokens, the 8K stage's, which ran without",
                     "Megatron's FLOP count with causal attention, at seq 131,072"),
        swing="the FLOP count: at 128K attention is much of it, and counted in full (not causal) it would lower the "
              "published tokens/s by over a quarter; recomputation",
        alternatives=({"recompute": "full"}, {"cp_comm": "ring"})),
    Run("megatron-mixtral-8x7b", MIX_SRC, "Megatron-Core MoE", MIX, "h100-80gb", 64, 3200,
        P(pp=4, dp=16, ep=8, schedule="interleaved", chunks=8, zero=1, attention="flash", overlap="dp,params",
          precision="mixed-fp32-grads"), 256, 468e12 / megatron_flops_per_token(MIX, causal=False), "468 TFLOPS",
        assumptions=("the 468 TFLOPS were measured on the reference mapping (the README puts them together; it is "
                     "MCore v0.9, the mapping v0.8)", "TFLOPS by Megatron's count of the time (@ 8b72751: full "
                     "attention, top-2 experts, no router)", "distributed optimizer with --overlap-grad-reduce "
                     "and --overlap-param-gather", "no recomputation", "TE fused attention (flash)",
                     "dropless, balanced routing (factor 1.0)", "8 × 400 Gb/s InfiniBand per node (the README's)"),
        swing="recomputation; routing imbalance", alternatives=({"recompute": "selective"}, {"capacity": 1.25})),
)
