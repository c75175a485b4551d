"""A real model in, offline: a Hugging Face config.json as a `Transformer` (Megatron's flags: `export.megatron_args`).

Teaches that a model's shape is a handful of numbers, whatever the framework calls them. Hugging Face writes
`hidden_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads` (grouped-query attention),
`intermediate_size` (the MLP's inner width) and `vocab_size` (GPT-2 says `n_embd`, `n_layer`, `n_head`, `n_inner`);
the architecture says the rest: Llama, Mistral and Qwen2 gate their MLP (SwiGLU: three matrices), rotate positions
(RoPE: no parameters), normalise with RMSNorm and keep no biases nor dropout; GPT-2 learns a table of `n_positions`
positions and keeps LayerNorm, biases and dropout; GPT-NeoX (Pythia) rotates positions but keeps LayerNorm and
biases.

Nothing is downloaded: a config is a local file, a folder holding config.json, or a dict. What the `Transformer`
cannot hold is refused in one line naming the field: an unknown architecture, a missing or malformed field, a
mixture of experts (lesson 7). What it holds only nearly (Qwen2's QKV biases, a Llama's optional biases, a sliding
window) is counted and said in its `source`.

    >>> m = from_hf_config({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    ...     "max_position_embeddings": 8192})
    >>> m.params, m.gated, m.kv_heads
    (8030261248, True, 8)
"""
from __future__ import annotations

import json
from pathlib import Path

from .._checks import check_int, check_number
from ..sim.model import Transformer

ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                 "GPT2LMHeadModel": "gpt2", "GPTNeoXForCausalLM": "neox"}
MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "gpt2": "GPT2LMHeadModel", "gpt_neox": "GPTNeoXForCausalLM"}
MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_experts_per_tok",
              "n_shared_experts", "moe_intermediate_size")
# the config keys of (layers, hidden, heads, ffn, vocab, positions); None: no key (GPT-2's n_inner may be absent)
KEYS = {"gpt2": ("n_layer", "n_embd", "n_head", None, "vocab_size", "n_positions")}
KEYS["llama"] = KEYS["qwen2"] = KEYS["neox"] = ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                "intermediate_size", "vocab_size", "max_position_embeddings")
MOE_LESSON = "mixture-of-experts models wait for lesson 7"  # every reader's refusal (megatron_args too)


def _read(path_or_dict) -> tuple[dict, str]:
    if isinstance(path_or_dict, dict):
        return path_or_dict, "a dict"
    if not isinstance(path_or_dict, (str, Path)):
        raise ValueError(f"path_or_dict={type(path_or_dict).__name__}: must be a path to a config.json (or its "
                         "folder) or a dict")
    path = Path(path_or_dict).expanduser()
    path = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"path={str(path)!r}: cannot be read ({err.strerror or err}); give a local config.json "
                         "or its folder (nothing is downloaded)") from None
    except ValueError as err:
        raise ValueError(f"path={str(path)!r}: not JSON ({err})") from None
    if not isinstance(config, dict):
        raise ValueError(f"path={str(path)!r}: must hold a JSON object, got {type(config).__name__}")
    return config, str(path)


def _architecture(config: dict) -> str:
    allowed = ", ".join(ARCHITECTURES)
    names = config.get("architectures")
    if names is None and "model_type" in config:
        names = [MODEL_TYPES.get(config["model_type"], config["model_type"])]
    if names is None:
        raise ValueError(f"architectures: missing (and no model_type); simlab reads {allowed}")
    if not isinstance(names, list) or len(names) != 1 or names[0] not in ARCHITECTURES:
        raise ValueError(f"architectures={names!r}: simlab reads one of {allowed}")
    return names[0]


def _field(config: dict, key: str, default=None) -> int:
    value = default if config.get(key) is None else config[key]  # null is as absent (HF writes both)
    if value is None:
        raise ValueError(f"{key}: missing from the config")
    return check_int(key, value, 1)  # "hidden_size=4096.0: must be an integer" (NaN, text and bools too)


def _fraction(config: dict, key: str, default: float = 0.0) -> float:
    value = config.get(key, default)
    return check_number(key, default if value is None else value, 0.0, 1.0)


def from_hf_config(path_or_dict, seq: int | None = None, name: str | None = None) -> Transformer:
    """The `Transformer` of a Hugging Face config.json (a path, its folder, or the dict); `seq` the training
    sequence length (default: `max_position_embeddings`, GPT-2's `n_positions`), `name` the model's name."""
    config, where = _read(path_or_dict)
    for key in MOE_FIELDS:
        if config.get(key) not in (None, 0, False):
            raise ValueError(f"{key}={config[key]!r}: {MOE_LESSON}")
    arch = _architecture(config)
    family = ARCHITECTURES[arch]
    k_layers, k_hidden, k_heads, k_ffn, k_vocab, k_positions = KEYS[family]
    layers, hidden, heads = (_field(config, k) for k in (k_layers, k_hidden, k_heads))
    vocab = _field(config, k_vocab)
    ffn = _field(config, k_ffn) if k_ffn else (4 * hidden if config.get("n_inner") is None else
                                               _field(config, "n_inner"))
    positions = _field(config, k_positions) if seq is None or family == "gpt2" else None
    seq = check_int("seq", seq, 1) if seq is not None else positions
    kv = _field(config, "num_key_value_heads", heads) if family in ("llama", "qwen2") else heads
    if hidden % heads:
        raise ValueError(f"{k_hidden}={hidden}: must be divisible by {k_heads}={heads}")
    if heads % kv:
        raise ValueError(f"num_key_value_heads={kv}: must divide {k_heads}={heads}")
    if config.get("head_dim") not in (None, hidden // heads):
        raise ValueError(f"head_dim={config['head_dim']!r}: simlab's heads have {k_hidden} / {k_heads} = "
                         f"{hidden // heads} features each")
    if family == "gpt2" and seq != positions:
        raise ValueError(f"seq={seq}: GPT-2 learns a table of n_positions={positions} positions, which simlab sizes "
                         "by the sequence: give seq equal to it")
    tied = config.get("tie_word_embeddings", family == "gpt2")
    if tied is not True and tied is not False:
        raise ValueError(f"tie_word_embeddings={tied!r}: must be true or false")
    notes = [f"Hugging Face config.json ({arch}): {where}"]
    if family in ("llama", "qwen2"):  # no biases, RMSNorm: what the Transformer holds is exact save for these
        kv_width = kv * hidden // heads
        extra = ((hidden + 2 * kv_width) * (family == "qwen2" or config.get("attention_bias") is True)
                 + hidden * (config.get("attention_bias") is True)
                 + (2 * ffn + hidden) * (config.get("mlp_bias") is True))
        if extra:
            notes.append(f"biases not counted: {extra * layers:,} parameters ({extra:,} per layer)")
        if config.get("sliding_window"):
            notes.append(f"sliding-window attention ({config['sliding_window']}) counted as full attention")
        dropout = _fraction(config, "attention_dropout") > 0
        shape = dict(gated=True, learned_positions=False, biases=False)
    elif family == "gpt2":
        dropout = _fraction(config, "resid_pdrop", 0.1) > 0
        shape = dict(gated=False, learned_positions=True, biases=True)
    else:  # GPT-NeoX: rotary, LayerNorm, biases; residual dropout `hidden_dropout`
        dropout = _fraction(config, "hidden_dropout") > 0
        shape = dict(gated=False, learned_positions=False, biases=True)
    name = name or config.get("_name_or_path") or (Path(where).parent.name if where != "a dict" else arch)
    return Transformer(str(name), layers, hidden, heads, seq=seq, vocab=vocab, ffn=ffn, kv_heads=kv, tied=tied,
                       dropout=dropout, source="; ".join(notes), **shape)
