"""The model half of a torchtitan config: which llama3 flavor a `Transformer` is, or the flavor written for it.

Teaches how torchtitan 0.3.0 names a model. Its dense model is llama3 (SwiGLU, rotary positions, RMSNorm, no
biases or dropout; any other architecture is refused, `check_llama3`), and a config names its shape by a flavor:
`model_registry(flavor)` looks the name up in `llama3_configs`, a dict of functions each returning a
`Llama3Model.Config`. The built-in flavors are Meta's Llama 3 shapes (`FLAVORS`: 1B and 3B, which tie the embedding
and the output layer, and 8B, 70B, 405B), each building RoPE for `ROPE_MAX` positions. A model of exactly one of
those shapes, trained on no longer sequences, is that flavor, and its tokenizer is where torchtitan's recipes
download it (`hf_assets`). Any other shape gets a function of its own in the emitted file (`custom_flavor`), built
from torchtitan's own pieces (its layer builder and initialisers) and registered in `llama3_configs` under the
model's name when the file is imported, before torchtitan asks for it: the file is self-contained, nothing of
torchtitan is edited.

    >>> from simlab.sim.model import PRESETS
    >>> flavor(PRESETS["llama3-70b"]), flavor(PRESETS["llama3-70b"].with_(layers=40))
    ('70B', None)
    >>> flavor(PRESETS["llama3-8b"].with_(seq=2 * ROPE_MAX)), hf_assets(PRESETS["llama3-8b"])
    (None, './assets/hf/Llama-3.1-8B')
"""
from __future__ import annotations

from ..i18n import _
from .common import refuse

ROPE_MAX = 131072
# torchtitan 0.3.0's llama3 flavors (models/llama3/__init__.py): layers, dim, heads, K/V heads, FFN width (what its
# compute_ffn_hidden_dim gives), vocabulary, tied; each builds RoPE for ROPE_MAX positions
FLAVORS = {"1B": (16, 2048, 32, 8, 8192, 128256, True), "3B": (28, 3072, 24, 8, 8192, 128256, True),
           "8B": (32, 4096, 32, 8, 14336, 128256, False), "70B": (80, 8192, 64, 8, 28672, 128256, False),
           "405B": (126, 16384, 128, 8, 53248, 128256, False)}
FLAVOR = """from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.llama3 import (
    _EMBEDDING_INIT, _EMBEDDING_SKIP_INIT, _NORM_INIT, Llama3Model, _build_llama3_layers, _output_linear_init,
    llama3_configs)\n\n
def _{name}(attn_backend: str, tp_gemm_backend: str = "default") -> Llama3Model.Config:
    # {rope}
    return Llama3Model.Config(
        dim={h}, vocab_size={vocab}, enable_weight_tying={tied},
        tok_embeddings=Embedding.Config(num_embeddings={vocab}, embedding_dim={h}, param_init={init}),
        norm=RMSNorm.Config(normalized_shape={h}, param_init=_NORM_INIT),
        lm_head=Linear.Config(in_features={h}, out_features={vocab}, param_init=_output_linear_init({h})),
        layers=_build_llama3_layers(
            n_layers={layers}, dim={h}, n_heads={heads}, n_kv_heads={kv}, hidden_dim={ffn}, fuse_qkv=True,
            rope=ComplexRoPE.Config(dim={head_dim}, max_seq_len={seq}, theta=10000.0),
            attn_backend=attn_backend, tp_gemm_backend=tp_gemm_backend))\n\n
llama3_configs[{key!r}] = _{name}  # {registered}\n\n
"""


def check_llama3(model) -> None:
    """A one-line ValueError unless `model` has torchtitan's llama3 architecture (its shape may be any)."""
    unlike = [what for what, differs in (("no gate in its MLP", not model.gated), ("biases", model.biases),
                                         ("learned positions", model.learned_positions), ("dropout", model.dropout),
                                         ("a norm after the embedding", model.embedding_norm)) if differs]
    if unlike:
        refuse(f"model={model.name!r}", "torchtitan's llama3 has a SwiGLU MLP, rotary positions and RMSNorm, "
               f"without biases or dropout; this model has {', '.join(unlike)}")


def flavor(model) -> str | None:
    """The torchtitan llama3 flavor of exactly `model`'s shape, or None (a flavor of its own is written)."""
    shape = (model.layers, model.hidden, model.heads, model.kv_heads or model.heads, model.ffn_width, model.vocab)
    return next((name for name, dims in FLAVORS.items() if dims == (*shape, model.tied) and model.seq <= ROPE_MAX),
                None)


def custom_flavor(model, name: str) -> str:
    """The Python that defines `model`'s own llama3 flavor as function `_name` and registers it under the model's
    name (what `model_registry(model.name)` then finds): for a model `flavor` finds no built-in one for."""
    return FLAVOR.format(
        name=name, h=model.hidden, vocab=model.vocab, tied=model.tied, layers=model.layers, heads=model.heads,
        kv=model.kv_heads or model.heads, ffn=model.ffn_width, head_dim=model.hidden // model.heads, seq=model.seq,
        init="_EMBEDDING_SKIP_INIT" if model.tied else "_EMBEDDING_INIT", key=model.name,
        rope=_("RoPE's theta is no part of simlab's model (it changes no memory or time): set your model's "
                "own value"),
        registered=_("registered beside torchtitan's own flavors"))


def hf_assets(model) -> str:
    """Where the tokenizer is read from: a built-in flavor's folder as torchtitan's recipes download it (1B and 3B
    are Llama 3.2's, the rest 3.1's), else a folder named after the model."""
    tuned = flavor(model)
    return "./assets/hf/" + (f"Llama-3.{1 + (tuned in ('1B', '3B'))}-{tuned}" if tuned else model.name)
