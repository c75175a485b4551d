"""A transformer, described once: its shape, and what follows from it — parameters per layer, embeddings,
FLOPs per token. Lesson 6's memory and time models and the advisor all read it.

Teaches: a GPT-style layer holds 12h² + 13h parameters (attention 4h² + 4h, MLP 8h² + 5h, two layer
norms 4h); the whole model P = 12Lh²(1 + 13/(12h) + (V + s)/(12Lh)) (Narayanan et al. 2021, Eq. 2) with
learned positions and tied embeddings. A training step costs ≈ 6 FLOPs per parameter per token, plus
attention's s² term: 72·B·L·s·h²(1 + s/(6h) + V/(12Lh)) per iteration (Korthikanti et al. 2022, Eq. 7) counting
the whole s × s square; a causal model needs half of it, 1 + s/(12h) (Megatron-LM's and FlashAttention's count),
and that is what MFU counts here: no causal kernel does less, so the count never exceeds the work a GPU did.
Llama-style models differ in ways the spec also knows: a gated MLP (three matrices), grouped-query
attention (fewer K/V heads), untied input/output embeddings, RMSNorm without biases, no dropout. A mixture of
experts (lesson 7; Mixtral) replaces each layer's MLP with E expert MLPs and a router (h × E): the model holds
all of them (`params`), a token meets top_k (`active_params`, and the FLOPs MFU counts).

    >>> m = PRESETS["gpt3-175b"]
    >>> round(m.params / 1e9, 1), m.layer_params == 12 * 12288**2 + 13 * 12288
    (174.6, True)
    >>> round(PRESETS["llama2-70b"].params / 1e9, 2)
    68.98
    >>> mix = PRESETS["mixtral-8x7b"]  # Mistral AI: 46.7B parameters, 12.9B active per token
    >>> round(mix.params / 1e9, 1), round(mix.active_params / 1e9, 1)
    (46.7, 12.9)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .._checks import MAX_COUNT, check_choice, check_divisible, check_int

MEGATRON = "Narayanan et al. 2021 (arXiv 2104.04473) Table 1; Korthikanti et al. 2022 (arXiv 2205.05198) Table 3"


@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer: L layers of attention (a heads, `kv_heads` of them for K and V) and an MLP
    (hidden h → ffn → h; `gated`: SwiGLU's three matrices), sequence s, vocabulary V."""

    name: str
    layers: int  # L
    hidden: int  # h
    heads: int  # a
    seq: int  # s
    vocab: int  # V
    ffn: int = 0  # 0: 4h
    kv_heads: int = 0  # 0: a (no grouped-query attention)
    gated: bool = False  # SwiGLU: gate, up and down projections
    tied: bool = True  # the output layer reuses the input embedding
    learned_positions: bool = True  # an (s, h) position table (Llama: rotary, no parameters)
    biases: bool = True  # Llama: no biases, RMSNorm (one vector per norm)
    embedding_norm: bool = False  # BLOOM: a layer norm right after the token embedding
    dropout: bool = True  # GPT-3/Megatron: dropout after attention and the MLP (its masks are stored); Llama: none
    # a mixture of experts (lesson 7): each layer's MLP is `experts` MLPs of width `expert_ffn` (0: ffn), a router
    # sends each token to `top_k` of them; experts = 0: a dense MLP
    experts: int = 0
    top_k: int = 1
    expert_ffn: int = 0
    source: str = ""

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "vocab"):
            check_int(name, getattr(self, name), 1)
        check_int("seq", self.seq, 1, MAX_COUNT)  # beyond any context, and s² stays within float arithmetic
        check_int("ffn", self.ffn, 0)
        check_int("kv_heads", self.kv_heads, 0)
        check_int("experts", self.experts, 0)
        check_int("top_k", self.top_k, 1, max(1, self.experts))
        check_int("expert_ffn", self.expert_ffn, 0)
        check_divisible("hidden", self.hidden, "heads", self.heads)
        check_divisible("heads", self.heads, "kv_heads", self.kv_heads or self.heads)

    @property
    def ffn_width(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv_width(self) -> int:
        """Features of K (and of V): kv_heads · h/a."""
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    @property
    def expert_width(self) -> int:
        """The MLP width of one expert (`expert_ffn`, else `ffn`)."""
        return self.expert_ffn or self.ffn_width

    def _mlp_matrices(self, width: int) -> int:
        return (3 if self.gated else 2) * self.hidden * width

    @property
    def matmul_params(self) -> int:
        """Weights of one layer's matrix multiplies: Q, K, V, O and the MLP's 2 (3 if gated) matrices; a mixture of
        experts has E such MLPs and the router's h × E matrix instead of one MLP."""
        h = self.hidden
        attention = 2 * h * h + 2 * h * self.kv_width
        if self.experts:
            return attention + self.experts * self._mlp_matrices(self.expert_width) + h * self.experts
        return attention + self._mlp_matrices(self.ffn_width)

    @property
    def active_matmul_params(self) -> int:
        """The weights one token meets in a layer: attention, the router and its top_k experts (dense: all)."""
        if not self.experts:
            return self.matmul_params
        return self.matmul_params - (self.experts - self.top_k) * self._mlp_matrices(self.expert_width)

    @property
    def expert_params(self) -> int:
        """One layer's experts, all E of them (matrices and biases); 0 for a dense model. No shared experts and no
        dense layers between MoE layers: every layer is a mixture (Mixtral's shape)."""
        if not self.experts:
            return 0
        w = self.expert_width
        biases = ((2 if self.gated else 1) * w + self.hidden) if self.biases else 0
        return self.experts * (self._mlp_matrices(w) + biases)

    @property
    def largest_matrix(self) -> int:
        """Parameters of a layer's largest weight tensor: the fused QKV projection (Megatron's, h × (h + 2·kv))
        or one MLP matrix (h × ffn). Frameworks gather a parameter whole, so this bounds ZeRO-3's unit below."""
        mlp = self.expert_width if self.experts else self.ffn_width
        return max(self.hidden * (self.hidden + 2 * self.kv_width), self.hidden * mlp)

    @property
    def layer_params(self) -> int:
        """One layer: the matrices, their biases and the two norms (weight + bias, or RMSNorm's weight)."""
        h = self.hidden
        norms = 2 * (2 * h if self.biases else h)
        if self.experts:  # attention's biases; the experts' are in expert_params
            return self.matmul_params - self.experts * self._mlp_matrices(self.expert_width) + self.expert_params + (
                2 * h + 2 * self.kv_width if self.biases else 0) + norms
        biases = 2 * h + 2 * self.kv_width + self.ffn_width + h if self.biases else 0
        return self.matmul_params + biases + norms

    @property
    def embedding_params(self) -> int:
        """Token embedding (+ positions); the untied output layer is counted in `output_params`."""
        return (self.vocab * self.hidden + (self.seq * self.hidden if self.learned_positions else 0)
                + (2 * self.hidden if self.embedding_norm else 0))

    @property
    def output_params(self) -> int:
        """The output projection's own weights (0 when tied) and the final norm."""
        return (0 if self.tied else self.vocab * self.hidden) + (2 if self.biases else 1) * self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params + self.output_params

    @property
    def active_params(self) -> int:
        """Parameters one token meets: all but the experts it is not routed to (dense: `params`)."""
        idle = (self.experts - self.top_k) * self.expert_params // self.experts if self.experts else 0
        return self.params - self.layers * idle

    # ---- what one tensor-parallel rank of t holds (Megatron's split): the matrices and the biases of
    # column-parallel layers are cut in t, the row-parallel layers' biases and the norms are replicated;
    # the token table and an untied output layer are split by vocabulary, positions replicated
    def layer_params_per_rank(self, t: int, ep: int = 1) -> float:
        """A mixture of experts: attention split over t, the router (h × E) replicated, the experts over ep and
        each expert's matrices over t too (`expert_params_per_rank`): Megatron's expert_tensor_parallel_size defaults
        to the TP size (megatron/training/arguments.py @ d98e8a6)."""
        h = self.hidden
        if self.experts:
            attention = 2 * h * h + 2 * h * self.kv_width + (h + 2 * self.kv_width if self.biases else 0)
            replicated = (h if self.biases else 0) + 2 * (2 * h if self.biases else h) + h * self.experts
            return attention / t + replicated + self.expert_params_per_rank(t, ep)
        split_biases = h + 2 * self.kv_width + (2 if self.gated else 1) * self.ffn_width if self.biases else 0
        replicated = (2 * h if self.biases else 0) + 2 * (2 * h if self.biases else h)  # O and down biases, norms
        return (self.matmul_params + split_biases) / t + replicated  # t = 1: layer_params (t may be an array)

    def expert_params_per_rank(self, t: int, ep: int = 1) -> float:
        """One layer's experts on one rank: E/ep experts, each cut over t (t, ep may be arrays)."""
        return self.expert_params / (np.asarray(t) * np.asarray(ep)) if self.experts else 0

    def embedding_params_per_rank(self, t: int) -> float:
        return self.embedding_params - self.vocab * self.hidden * (1 - 1 / t)

    def output_params_per_rank(self, t: int, pp: int = 1) -> float:
        """Untied: the vocab-split output layer. Tied: nothing more without pipelining; with it the last
        stage keeps its own copy of the (vocab-split) embedding, as Megatron does."""
        copy = 1 if not self.tied else np.asarray(pp) > 1  # pp may be an array (the advisor's plans)
        return copy * self.vocab * self.hidden / t + (2 if self.biases else 1) * self.hidden

    def attention_flops(self, tokens: int, causal: bool = True) -> int:
        """Forward FLOPs of one layer's attention core on `tokens` = b·s tokens: QKᵀ and AV, 2·b·s²·h each over the
        whole s × s square (`causal=False`: what eager attention computes, the masked half included, and the
        papers' Eq. 7 count), half of that under the causal mask (each query meets only the keys up to it: what
        the model needs and FlashAttention computes)."""
        return (2 if causal else 4) * tokens * self.seq * self.hidden

    def layer_flops(self, tokens: int, causal: bool = True) -> int:
        """Forward FLOPs of one layer on `tokens` = b·s tokens: 2 per weight a token meets (a mixture of experts:
        its top_k experts and the router, what MoE papers count), and attention's QKᵀ and AV (`attention_flops`:
        causal, or the whole square with `causal=False`)."""
        return 2 * tokens * self.active_matmul_params + self.attention_flops(tokens, causal)

    def logits_flops(self, tokens: int) -> int:
        """Forward FLOPs of the output projection to the vocabulary."""
        return 2 * tokens * self.hidden * self.vocab

    def model_flops(self, samples: int, causal: bool = True) -> int:
        """FLOPs of one training step on `samples` sequences, no recomputation (forward + 2× backward): what MFU
        counts, causal attention counted as causal. For GPT shapes, 72·B·L·s·h²(1 + s/12h + V/12Lh);
        `causal=False` gives Korthikanti's Eq. 7, 72·B·L·s·h²(1 + s/6h + V/12Lh), the whole s × s square."""
        tokens = samples * self.seq
        return 3 * (self.layers * self.layer_flops(tokens, causal) + self.logits_flops(tokens))

    def with_(self, **changes) -> "Transformer":
        return replace(self, **changes)


def megatron(name: str, layers: int, hidden: int, heads: int, source: str = MEGATRON) -> Transformer:
    """The GPT shape of Megatron's papers: s = 2048, V = 51,200 (GPT-2's 50,257 padded), tied, learned positions."""
    return Transformer(name, layers, hidden, heads, seq=2048, vocab=51200, source=source)


# Narayanan et al. 2021 Table 1: (billions of parameters, heads, hidden, layers)
NARAYANAN_SHAPES = [("1.7b", 24, 2304, 24), ("3.6b", 32, 3072, 30), ("7.5b", 32, 4096, 36), ("18.4b", 48, 6144, 40),
                    ("39.1b", 64, 8192, 48), ("76.1b", 80, 10240, 60), ("145.6b", 96, 12288, 80),
                    ("310.1b", 128, 16384, 96), ("529.6b", 128, 20480, 105), ("1008b", 160, 25600, 128)]

def llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, seq: int,
          source: str) -> Transformer:
    """A Llama-style shape: SwiGLU, grouped-query attention, untied, rotary positions, RMSNorm, no biases or dropout."""
    return Transformer(name, layers, hidden, heads, seq=seq, vocab=vocab, ffn=ffn, kv_heads=kv_heads, gated=True,
                       tied=False, learned_positions=False, biases=False, dropout=False, source=source)


def mpt(name: str, layers: int, hidden: int, heads: int) -> Transformer:
    """MosaicML's MPT (llm-foundry yamls): GeLU MLP 4h, vocabulary 50,368, tied, learned positions, no biases or dropout."""
    return Transformer(name, layers, hidden, heads, seq=2048, vocab=50368, biases=False, dropout=False,
                       source="mosaicml/llm-foundry scripts/train/yamls/pretrain/mpt-*.yaml @ b2a43a1")


MIXTRAL = "Jiang et al. 2024 (arXiv 2401.04088) Table 1; "
LLAMA3 = "meta-llama/llama-models models/llama3_1/MODEL_CARD.md; Dubey et al. 2024 (arXiv 2407.21783) Table 3"
PRESETS = {
    "gpt3-175b": megatron("gpt3-175b", 96, 12288, 96, "Brown et al. 2020 Table 2.1 (96 layers, 12288, 96 heads, "
                          "ctx 2048); vocabulary 50,257 padded to 51,200 as Megatron does at TP 8"),
    "megatron-22b": megatron("megatron-22b", 48, 6144, 64),
    "megatron-530b": megatron("megatron-530b", 105, 20480, 128, MEGATRON + " (MT-NLG)"),
    "megatron-1t": megatron("megatron-1t", 128, 25600, 160),
    "llama2-7b": llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096,
                       "meta-llama/llama MODEL_CARD.md and model.py; HF config (meta-llama/Llama-2-7b-hf)"),
    "llama2-70b": llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096,
                        "meta-llama/llama MODEL_CARD.md (GQA) and HF config (meta-llama/Llama-2-70b-hf)"),
    "llama3-8b": llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, LLAMA3),
    "llama3-70b": llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, LLAMA3),
    "llama3-405b": llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, LLAMA3),
    "bloom-176b": Transformer("bloom-176b", 70, 14336, 112, seq=2048, vocab=250880, learned_positions=False,
                              embedding_norm=True,
                              source="bigscience-workshop/bigscience train/tr11-176B-ml (ALiBi: no position table; "
                                     "embedding layer norm; vocabulary padded to 250,880; tied)"),
    "glm-130b": Transformer("glm-130b", 70, 12288, 96, seq=2048, vocab=150528, ffn=32768, gated=True, tied=False,
                            learned_positions=False,
                            source="THUDM/GLM-130B configs/model_glm_130b.sh and logs/main-log-en.md (GeGLU, rotary; "
                                   "untied assumed)"),
    "bloomberggpt-50b": Transformer("bloomberggpt-50b", 70, 7680, 40, seq=2048, vocab=131072, learned_positions=False,
                                    embedding_norm=True,
                                    source="Wu et al. 2023 (arXiv 2303.17564) Table 4, §3.1 (ALiBi, tied, embedding "
                                           "LayerNorm; MLP 4h assumed)"),
    "nemotron4-340b": Transformer("nemotron4-340b", 96, 18432, 96, seq=4096, vocab=256000, ffn=73728, kv_heads=8,
                                  tied=False, learned_positions=False, biases=False, dropout=False,
                                  source="NVIDIA/dgxc-benchmarking nemotron/nemotron4-340b yaml (squared ReLU, GQA 8)"),
    # Mixtral: every layer's MLP is 8 SwiGLU experts of Mistral 7B's width, top-2, no shared expert; seq: the
    # sequence of Megatron-LM's published Mixtral mappings (the models' context is 32K / 64K)
    "mixtral-8x7b": llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, MIXTRAL + "mistralai/Mixtral-8x7B-v0.1 "
                          "config.json (rope θ 1e6, untied)").with_(experts=8, top_k=2),
    "mixtral-8x22b": llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 4096, MIXTRAL + "mistralai/Mixtral-8x22B-v0.1 "
                           "config.json (rope θ 1e6, untied)").with_(experts=8, top_k=2),
    "mpt-7b": mpt("mpt-7b", 32, 4096, 32),
    "mpt-70b": mpt("mpt-70b", 80, 8192, 64),
} | {f"megatron-{size}-2021": megatron(f"megatron-{size}-2021", layers, hidden, heads, MEGATRON.split(";")[0])
     for size, heads, hidden, layers in NARAYANAN_SHAPES}


def preset(name: str) -> Transformer:
    return PRESETS[check_choice("model", name, tuple(PRESETS))]
