"""Real models in, offline: a Hugging Face config.json or a Megatron-LM argument string as a `Transformer`.

Teaches that a model's shape is a handful of numbers, whatever the framework calls them. Hugging Face writes
`hidden_size`, `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads` (grouped-query attention),
`intermediate_size` (the MLP's inner width) and `vocab_size` (GPT-2 says `n_embd`, `n_layer`, `n_head`, `n_inner`);
the architecture says the rest: Llama, Mistral and Qwen2 gate their MLP (SwiGLU: three matrices), rotate positions
(RoPE: no parameters), normalise with RMSNorm and keep no biases nor dropout; GPT-2 learns a table of `n_positions`
positions and keeps LayerNorm, biases and dropout; GPT-NeoX (Pythia) rotates positions but keeps LayerNorm and
biases. Megatron writes the same as flags (--num-layers, --hidden-size, …), and pads the vocabulary to a multiple
of --make-vocab-size-divisible-by × the TP size (`calculate_padded_vocab_size`) unless --padded-vocab-size says it.

Nothing is downloaded: a config is a local file, a folder holding config.json, or a dict. What the `Transformer`
cannot hold is refused in one line naming the field: an unknown architecture, a missing or malformed field, a
mixture of experts (lesson 7). What it holds only nearly (Qwen2's QKV biases, a Megatron norm without the
linear layers' biases) is counted and said in its `source`.

    >>> m = from_hf_config({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
    ...     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    ...     "max_position_embeddings": 8192})
    >>> m.params, m.gated, m.kv_heads
    (8030261248, True, 8)
    >>> from_megatron_args("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
    ...                    "--max-position-embeddings 128 --vocab-size 1000 --tensor-model-parallel-size 2").vocab
    1024
"""
from __future__ import annotations

import json
import math
import re
import shlex
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
MOE_LESSON = "mixture-of-experts models wait for lesson 7"


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


# ---------------------------------------------------------------- Megatron-LM's arguments
INTS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--num-query-groups", "--ffn-hidden-size",
        "--seq-length", "--max-position-embeddings", "--padded-vocab-size", "--vocab-size", "--kv-channels",
        "--make-vocab-size-divisible-by", "--tensor-model-parallel-size")
FRACTIONS = ("--attention-dropout", "--hidden-dropout")
SWITCHES = ("--group-query-attention", "--swiglu", "--quick-geglu", "--squared-relu", "--openai-gelu",
            "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
            "--use-rotary-position-embeddings", "--no-position-embedding")
CHOICES = {"--position-embedding-type": ("learned_absolute", "rope", "yarn", "none"),
           "--normalization": ("LayerNorm", "RMSNorm")}
# flags that shape no parameter or activation of the model: parallelism, batch, optimizer, precision, data, I/O
IGNORED = frozenset("""--pipeline-model-parallel-size --context-parallel-size --expert-model-parallel-size
--sequence-parallel --micro-batch-size --global-batch-size --rampup-batch-size --step-batch-size-schedule --lr
--min-lr --weight-decay --clip-grad --init-method-std --fp16 --bf16 --seed --split --vocab-file --merge-file
--tokenizer-type --tokenizer-model --mock-data --save --load --use-distributed-optimizer --use-flash-attn
--use-mcore-models --transformer-impl --attention-backend --num-workers --num-layers-per-virtual-pipeline-stage
--num-virtual-stages-per-pipeline-rank --attention-softmax-in-fp32 --accumulate-allreduce-grads-in-fp32
--no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion --no-gradient-accumulation-fusion
--norm-epsilon --apply-layernorm-1p --rotary-base --rotary-percent --use-rope-scaling --rope-scaling-factor
--grad-reduce-in-bf16 --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc --empty-unused-memory-level
--use-megatron-fsdp --use-torch-fsdp2 --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
--pipeline-model-parallel-layout --num-distributed-optimizer-instances --distributed-timeout-minutes""".split())
IGNORED_PREFIXES = ("--log-", "--wandb-", "--tensorboard-", "--eval-", "--lr-", "--recompute-", "--adam-", "--save-",
                    "--overlap-", "--tp-comm-", "--ckpt-", "--data-", "--timing-", "--profile", "--exit-", "--train-",
                    "--fp8-", "--decoupled-", "--ddp-", "--distributed-")


def _flags(text: str) -> dict[str, list[str]]:
    """{flag: its values} from an argument string (a script's backslash-continued lines and # comments allowed)."""
    if not isinstance(text, str):
        raise ValueError(f"text={type(text).__name__}: must be Megatron's arguments as a str")
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as err:
        raise ValueError(f"text: not readable as shell arguments ({err})") from None
    flags: dict[str, list[str]] = {}
    current = None
    for word in words:
        if word.startswith("--"):
            current, _, value = word.partition("=")
            if current in flags:
                raise ValueError(f"{current}: given twice")
            flags[current] = [value] if "=" in word else []
        elif current is None:
            raise ValueError(f"{word!r}: not a flag; pass the arguments alone, each starting with --")
        else:
            flags[current].append(word)
    return flags


def _value(flag: str, values: list[str]):
    if flag in SWITCHES:
        if values:
            raise ValueError(f"{flag}: a switch, takes no value (got {values[0]!r})")
        return True
    if len(values) != 1:
        raise ValueError(f"{flag}: needs one value, got {len(values)}")
    text = values[0]
    if flag in INTS:
        if not re.fullmatch(r"\+?\d+", text) or int(text) < 1:
            raise ValueError(f"{flag}={text!r}: must be a positive integer")
        return int(text)
    if flag in FRACTIONS:
        try:
            return check_number(flag, float(text), 0.0, 1.0)
        except ValueError:  # float('x'), nan, 2.0: one line naming the flag
            raise ValueError(f"{flag}={text!r}: must be a number between 0 and 1") from None
    if text not in CHOICES[flag]:
        raise ValueError(f"{flag}={text!r}: must be one of {', '.join(CHOICES[flag])}")
    return text


def read_megatron_args(text: str, name: str = "megatron") -> tuple[Transformer, list[str]]:
    """The `Transformer` that Megatron-LM's `pretrain_gpt.py` builds from `text`, and the flags read past as not
    shaping the model (parallelism, batch, optimizer, data, logging). A flag simlab neither reads nor knows to
    pass over is refused, as is a mixture of experts (--num-experts, --moe-*)."""
    raw, got, ignored = _flags(text), {}, []
    for flag, values in raw.items():
        if flag == "--num-experts" or flag.startswith("--moe-"):
            raise ValueError(f"{flag}: {MOE_LESSON}")
        if flag in INTS or flag in FRACTIONS or flag in SWITCHES or flag in CHOICES:
            got[flag] = _value(flag, values)
        elif flag in IGNORED or flag.startswith(IGNORED_PREFIXES):
            ignored.append(flag)
        else:
            raise ValueError(f"{flag}: unknown to simlab (neither a flag that shapes the model nor one it knows to "
                             "pass over)")
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length",
                 "--max-position-embeddings"):  # validate_args' required_args, and the sequence
        if flag not in got:
            raise ValueError(f"{flag}: missing (Megatron needs it)")
    h, heads, seq, table = (got[f] for f in ("--hidden-size", "--num-attention-heads", "--seq-length",
                                             "--max-position-embeddings"))
    if h % heads:
        raise ValueError(f"--hidden-size={h}: must be divisible by --num-attention-heads={heads}")
    if got.get("--kv-channels", h // heads) != h // heads:
        raise ValueError(f"--kv-channels={got['--kv-channels']}: simlab's heads have --hidden-size / "
                         f"--num-attention-heads = {h // heads} features each")
    if table < seq:
        raise ValueError(f"--max-position-embeddings={table}: must be >= --seq-length={seq} (Megatron asserts it)")
    kv = got.get("--num-query-groups", 1) if got.get("--group-query-attention") else heads  # its default is 1
    if "--num-query-groups" in got and not got.get("--group-query-attention"):
        ignored.append("--num-query-groups")  # Megatron uses it only with --group-query-attention
    if heads % kv:
        raise ValueError(f"--num-query-groups={kv}: must divide --num-attention-heads={heads}")
    position = got.get("--position-embedding-type", "learned_absolute")
    position = "rope" if got.get("--use-rotary-position-embeddings") else position  # validate_args maps the old
    position = "none" if got.get("--no-position-embedding") else position  # switches onto the type
    learned = position == "learned_absolute"
    if learned and table != seq:
        raise ValueError(f"--max-position-embeddings={table}: the learned position table holds that many rows, "
                         f"which simlab sizes by --seq-length={seq}: give them equal")
    gated = bool(got.get("--swiglu") or got.get("--quick-geglu"))
    ffn = got.get("--ffn-hidden-size", int((4 * h * 2 / 3) / 64) * 64 if gated else 4 * h)  # validate_args' rule
    if "--padded-vocab-size" in got:
        vocab = got["--padded-vocab-size"]
        ignored += [f for f in ("--vocab-size", "--make-vocab-size-divisible-by", "--tensor-model-parallel-size")
                    if f in got]
    elif "--vocab-size" in got:
        multiple = got.get("--make-vocab-size-divisible-by", 128) * got.get("--tensor-model-parallel-size", 1)
        vocab = math.ceil(got["--vocab-size"] / multiple) * multiple  # calculate_padded_vocab_size
    else:
        raise ValueError("--vocab-size: missing (or --padded-vocab-size); a tokenizer's files are not read here")
    biases, rms = not got.get("--disable-bias-linear"), got.get("--normalization", "LayerNorm") == "RMSNorm"
    notes = ["Megatron-LM arguments"]
    layers = got["--num-layers"]
    # the Transformer's biases are all or nothing (LayerNorm's and the linear layers'): count what it misses
    norm = (-1 if rms else 1) * (2 * h * layers + h) * (biases == rms)  # RMSNorm with biases, LayerNorm without
    qkv = (h + 2 * kv * h // heads) * layers * bool(got.get("--add-qkv-bias") and not biases)
    if norm + qkv:
        notes.append(f"Megatron builds {norm + qkv:+,} parameters beyond this count (biases of its norms or QKV)")
    dropout = got.get("--attention-dropout", 0.1) > 0 or got.get("--hidden-dropout", 0.1) > 0  # defaults: 0.1
    model = Transformer(name, layers, h, heads, seq=seq, vocab=vocab, ffn=ffn, kv_heads=kv, gated=gated,
                        tied=not got.get("--untie-embeddings-and-output-weights"), learned_positions=learned,
                        biases=biases, dropout=dropout, source="; ".join(notes))
    return model, ignored


def from_megatron_args(text: str, name: str = "megatron") -> Transformer:
    """The `Transformer` of Megatron-LM's arguments (`read_megatron_args` without the list of flags passed over)."""
    return read_megatron_args(text, name)[0]
