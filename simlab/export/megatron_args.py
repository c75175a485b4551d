"""Megatron-LM's arguments in, offline: the `Transformer` that its `pretrain_gpt.py` builds from a flag string.

Teaches that Megatron writes a model's shape as flags, the same handful of numbers a Hugging Face config.json holds
(`export.model_config`): --num-layers, --hidden-size, --num-attention-heads, --num-query-groups with
--group-query-attention (grouped-query attention; its default is one group), --ffn-hidden-size (default 4h, or
8h/3 rounded down to a multiple of 64 for a gated MLP, --swiglu or --quick-geglu), --seq-length and the learned
table's --max-position-embeddings. It pads the vocabulary to a multiple of --make-vocab-size-divisible-by (128) × the TP
size (`calculate_padded_vocab_size`) unless --padded-vocab-size says it, so a TP change can change the model.

A real launch script mixes these with flags that shape no parameter or activation (parallelism, batch, optimizer,
precision, data, logging): those are read past and listed, so a learner sees what was not used. A flag simlab
neither reads nor knows to pass over is refused in one line naming it, never guessed at; so is a mixture of
experts (lesson 7). What the `Transformer` holds only nearly (a norm's biases without the linear layers', or the
reverse; QKV biases alone) is counted and said in its `source`.

    >>> m = from_megatron_args("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
    ...                        "--max-position-embeddings 128 --vocab-size 1000 --tensor-model-parallel-size 2")
    >>> m.vocab  # 1000 padded to a multiple of 128 × 2
    1024
"""
from __future__ import annotations

import math
import re
import shlex

from .._checks import check_number
from ..sim.model import Transformer
from .model_config import MOE_LESSON

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
