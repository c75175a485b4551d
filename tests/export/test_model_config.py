"""`simlab.export.model_config`: published models read from configs the tests write themselves, their parameters
counted tensor by tensor as each architecture builds them (and held to the published totals), Megatron's own example
scripts read back to our presets, and every refusal one line naming what."""
import json
import math

import pytest

from simlab.export.megatron_args import from_megatron_args, read_megatron_args
from simlab.export.model_config import from_hf_config
from simlab.sim.model import PRESETS

# public config.json numbers (the fields the models' hub pages publish; extra fields kept to show they are read past)
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
             "vocab_size": 128256, "max_position_embeddings": 8192, "hidden_act": "silu", "rms_norm_eps": 1e-5,
             "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_dropout": 0.0, "torch_dtype": "bfloat16"}
MISTRAL_7B = {"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
              "max_position_embeddings": 32768, "sliding_window": 4096, "hidden_act": "silu"}
QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
            "max_position_embeddings": 131072, "tie_word_embeddings": False}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
        "n_ctx": 1024, "n_inner": None, "vocab_size": 50257, "activation_function": "gelu_new", "resid_pdrop": 0.1}
PYTHIA_160M = {"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 768, "num_hidden_layers": 12,
               "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 50304,
               "max_position_embeddings": 2048, "rotary_pct": 0.25, "use_parallel_residual": True,
               "tie_word_embeddings": False}


def tensors(config: dict) -> int:
    """Parameters as each architecture's modeling file creates them, weight by weight (not simlab's formula)."""
    c, arch = config, config["architectures"][0]
    if arch == "GPT2LMHeadModel":
        h, L, V, n = c["n_embd"], c["n_layer"], c["vocab_size"], c["n_positions"]
        layer = [(h, 3 * h), (3 * h,), (h, h), (h,), (h, 4 * h), (4 * h,), (4 * h, h), (h,), (h,), (h,), (h,), (h,)]
        return sum(map(math.prod, [(V, h), (n, h)] + layer * L + [(h,), (h,)]))  # c_attn, c_proj, mlp, ln_1/2; ln_f
    h, L, V, f = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    if arch == "GPTNeoXForCausalLM":
        layer = [(3 * h, h), (3 * h,), (h, h), (h,), (f, h), (f,), (h, f), (h,), (h,), (h,), (h,), (h,)]
        return sum(map(math.prod, [(V, h)] + layer * L + [(h,), (h,), (V, h)]))  # embed_in, final LN, embed_out
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    qkv_bias = [(h,), (kv,), (kv,)] if arch == "Qwen2ForCausalLM" else []
    layer = [(h, h), (kv, h), (kv, h), (h, h), (f, h), (f, h), (h, f), (h,), (h,)] + qkv_bias
    return sum(map(math.prod, [(V, h)] + layer * L + [(h,), (V, h)]))  # q k v o, gate up down, 2 norms; norm, head


def shape(m):
    return (m.layers, m.hidden, m.heads, m.kv_heads or m.heads, m.ffn_width, m.vocab, m.seq, m.gated, m.tied,
            m.learned_positions, m.biases, m.dropout)


@pytest.mark.parametrize("config, published", [(LLAMA3_8B, 8.03e9), (MISTRAL_7B, 7.24e9), (GPT2, 124e6),
                                               (PYTHIA_160M, 162e6)], ids=["llama3-8b", "mistral-7b", "gpt2", "pythia"])
def test_published_models_have_their_parameters(tmp_path, config, published):
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for source in (tmp_path, tmp_path / "config.json", config):  # a folder, its file, the dict
        m = from_hf_config(source)
        assert m.params == tensors(config)
        assert abs(m.params - published) / published < 0.005
    assert from_hf_config(tmp_path).name == tmp_path.name and from_hf_config(config, name="x").name == "x"


def test_llama3_8b_is_our_preset():
    m = from_hf_config(LLAMA3_8B)
    assert shape(m) == shape(PRESETS["llama3-8b"]) and m.params == PRESETS["llama3-8b"].params
    assert from_hf_config(LLAMA3_8B, seq=4096).seq == 4096


def test_qwen2s_qkv_biases_are_counted_in_the_source():
    m = from_hf_config(QWEN2_7B)
    missed = int(m.source.split("biases not counted: ")[1].split(" ")[0].replace(",", ""))
    assert m.params + missed == tensors(QWEN2_7B) == 7_615_616_512  # Qwen2-7B: 7.6B
    assert "sliding-window attention (4096)" in from_hf_config(MISTRAL_7B).source


def test_the_model_type_names_the_architecture_when_architectures_is_absent():
    config = {k: v for k, v in LLAMA3_8B.items() if k != "architectures"}
    assert from_hf_config(config).params == PRESETS["llama3-8b"].params


def broken(**changes):
    config = dict(LLAMA3_8B)
    for key, value in changes.items():
        if value is KeyError:
            del config[key]
        else:
            config[key] = value
    return config


HF_REFUSED = [
    (broken(architectures=["BertForMaskedLM"]), "architectures=['BertForMaskedLM']: simlab reads one of "
                                                "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM"),
    (broken(architectures=KeyError, model_type=KeyError), "architectures: missing"),
    (broken(num_hidden_layers=KeyError), "num_hidden_layers: missing from the config"),
    (broken(num_local_experts=8, architectures=["MixtralForCausalLM"]),
     "num_local_experts=8: mixture-of-experts models wait for lesson 7"),
    (broken(n_routed_experts=64), "n_routed_experts=64: mixture-of-experts models wait for lesson 7"),
    (broken(hidden_size=4096.5), "hidden_size=4096.5: must be an integer"),
    (broken(hidden_size=float("nan")), "hidden_size=nan: must be an integer"),
    (broken(num_attention_heads=True), "num_attention_heads=True: must be an integer"),
    (broken(vocab_size=-1), "vocab_size=-1: must be >= 1"),
    (broken(attention_dropout=float("nan")), "attention_dropout=nan: must be a finite number"),
    (broken(head_dim=64), "head_dim=64: simlab's heads have hidden_size / num_attention_heads = 128"),
    (broken(hidden_size=4100), "hidden_size=4100: must be divisible by num_attention_heads=32"),
    (broken(num_key_value_heads=5), "num_key_value_heads=5: must divide num_attention_heads=32"),
    (broken(tie_word_embeddings="yes"), "tie_word_embeddings='yes': must be true or false"),
    ([LLAMA3_8B], "path_or_dict=list: must be a path"),
]


@pytest.mark.parametrize("config, message", HF_REFUSED, ids=[m.split(":")[0].split("=")[0] for _, m in HF_REFUSED])
def test_hf_configs_are_refused_in_one_line(config, message):
    with pytest.raises(ValueError) as err:
        from_hf_config(config)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_files_are_refused_in_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "list.json").write_text("[1]", encoding="utf-8")
    for path, message in ((tmp_path / "none.json", "cannot be read"), (tmp_path / "bad.json", "not JSON"),
                          (tmp_path / "list.json", "must hold a JSON object, got list")):
        with pytest.raises(ValueError, match=message) as err:
            from_hf_config(path)
        assert str(err.value).startswith(f"path={str(path)!r}: ") and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^seq=2048: GPT-2 learns a table of n_positions=1024"):
        from_hf_config(GPT2, seq=2048)


# NVIDIA/Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh (its arrays, as the script passes them); the vocab
# file cannot be read here, so its 50,257 entries are given as --vocab-size
GPT3_SCRIPT = r"""
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 \
    --attention-backend auto # Can use (flash/fused/unfused/local)
    --micro-batch-size 1 --global-batch-size 1536 --step-batch-size-schedule "0:16 2.4B:320 4.8B:624 12B:1536" \
    --train-iters 500000 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 \
    --clip-grad 1.0 --fp16 --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001 \
    --lr-decay-iters 430000 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \
    --data-path $DATA_PATH --vocab-file $VOCAB_FILE --merge-file $MERGE_FILE --split 949,50,1 \
    --log-interval 100 --save-interval 10000 --eval-interval 1000 --save $CHECKPOINT_PATH --load $CHECKPOINT_PATH \
    --eval-iters 10 --tensorboard-dir $TENSORBOARD_LOGS_PATH --vocab-size 50257
"""
# NVIDIA/Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh: MODEL_ARGS and the mock-data tokenizer's vocabulary
LLAMA3_SCRIPT = """--use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
    --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128 --seq-length 8192
    --max-position-embeddings 8192 --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0
    --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu --normalization RMSNorm --init-method-std 0.0134
    --attention-backend fused --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear
    --tensor-model-parallel-size 1 --sequence-parallel --mock-data --tokenizer-type NullTokenizer --vocab-size 128256"""


def test_megatrons_gpt3_script_is_our_gpt3():
    m, ignored = read_megatron_args(GPT3_SCRIPT, name="gpt3")
    preset = PRESETS["gpt3-175b"]
    assert shape(m) == shape(preset) and m.params == preset.params  # 50,257 padded to 128 × 8: 51,200
    assert {"--pipeline-model-parallel-size", "--lr", "--fp16", "--vocab-file", "--micro-batch-size"} <= set(ignored)
    assert "--tensor-model-parallel-size" not in ignored  # it pads the vocabulary


def test_megatrons_llama3_script_is_our_llama3_8b():
    m = from_megatron_args(LLAMA3_SCRIPT)
    assert shape(m) == shape(PRESETS["llama3-8b"]) and m.params == PRESETS["llama3-8b"].params


def test_megatrons_defaults_and_padding():
    base = "--num-layers 2 --hidden-size 4096 --num-attention-heads 32 --seq-length 64 --max-position-embeddings 64"
    m = from_megatron_args(base + " --swiglu --vocab-size 50257")
    assert m.ffn == int((4 * 4096 * 2 / 3) / 64) * 64 == 10880  # validate_args' SwiGLU width
    assert m.vocab == 50304 and m.kv_heads == 32 and m.dropout and m.tied and m.learned_positions and m.biases
    assert from_megatron_args(base + " --vocab-size 50257 --tensor-model-parallel-size 4").vocab == 50688
    assert from_megatron_args(base + " --padded-vocab-size 50257 --tensor-model-parallel-size 4").vocab == 50257
    assert from_megatron_args(base + " --group-query-attention --vocab-size 64").kv_heads == 1  # its default
    m, ignored = read_megatron_args(base + " --num-query-groups 8 --vocab-size 64")
    assert m.kv_heads == 32 and ignored == ["--num-query-groups"]  # without --group-query-attention: unused
    rms = from_megatron_args(base + " --normalization RMSNorm --vocab-size 64")  # RMSNorm, linear biases kept
    assert f"Megatron builds {-(2 * 4096 * 2 + 4096):+,} parameters" in rms.source


MEGATRON_REFUSED = [
    ("--foo-bar 3", "--foo-bar: unknown to simlab"),
    ("--num-layers x", "--num-layers='x': must be a positive integer"),
    ("--num-layers 0", "--num-layers='0': must be a positive integer"),
    ("--num-layers 2 --num-layers 3", "--num-layers: given twice"),
    ("--swiglu 1", "--swiglu: a switch, takes no value"),
    ("--num-experts 8", "--num-experts: mixture-of-experts models wait for lesson 7"),
    ("--moe-router-topk 2", "--moe-router-topk: mixture-of-experts models wait for lesson 7"),
    ("pretrain_gpt.py --num-layers 2", "'pretrain_gpt.py': not a flag"),
    ("--data-path 'x", "text: not readable as shell arguments"),
    ("--position-embedding-type relative", "--position-embedding-type='relative': must be one of"),
    ("--attention-dropout nan", "--attention-dropout='nan': must be a number between 0 and 1"),
    ("--hidden-size 64", "--num-layers: missing"),
]
FULL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 64 "
MEGATRON_REFUSED += [
    (FULL, "--max-position-embeddings: missing"),
    (FULL + "--max-position-embeddings 256", "--max-position-embeddings=256: the learned position table"),
    (FULL + "--max-position-embeddings 64 --position-embedding-type rope", "--max-position-embeddings=64: must be >="),
    (FULL + "--max-position-embeddings 128 --kv-channels 32", "--kv-channels=32: simlab's heads have"),
    (FULL + "--max-position-embeddings 128 --group-query-attention --num-query-groups 3",
     "--num-query-groups=3: must divide --num-attention-heads=4"),
    (FULL.replace("--vocab-size 64 ", "") + "--max-position-embeddings 128", "--vocab-size: missing"),
]


@pytest.mark.parametrize("text, message", MEGATRON_REFUSED, ids=[m.split(":")[0] for _, m in MEGATRON_REFUSED])
def test_megatron_arguments_are_refused_in_one_line(text, message):
    with pytest.raises(ValueError) as err:
        from_megatron_args(text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
