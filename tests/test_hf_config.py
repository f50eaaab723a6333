"""A model's config.json as input: every shipped config's parameter count equals the published one; key names and
defaults are transformers'; every key gets a status; models zerosim cannot build and wrong types are refused."""

import json

import pytest

from zerosim.analysis.costs import PRESETS, get_preset
from zerosim.models.gpt import MetaGPT
from zerosim.models.hf import read_hf_config, shipped_config, shipped_configs
from zerosim.models.llama import MetaLlama

PUBLISHED = [
    # (shipped config, published parameter count, where it is published)
    ("llama-2-7b", 6_738_415_616, "issue 23; the Hub's safetensors metadata for meta-llama/Llama-2-7b-hf"),
    ("llama-2-13b", 13_015_864_320, "the Hub's safetensors metadata for meta-llama/Llama-2-13b-hf"),
    ("llama-2-70b", 68_976_648_192, "issue 23; the Hub's safetensors metadata for meta-llama/Llama-2-70b-hf"),
    ("llama-3-8b", 8_030_261_248, "issue 23; the Hub's safetensors metadata for meta-llama/Meta-Llama-3-8B"),
    ("llama-3-70b", 70_553_706_496, "the Hub's safetensors metadata for meta-llama/Meta-Llama-3-70B"),
    ("mistral-7b", 7_241_732_096, "issue 23; the Hub's safetensors metadata for mistralai/Mistral-7B-v0.1"),
    ("qwen2.5-7b", 7_615_616_512, "the Hub's safetensors metadata for Qwen/Qwen2.5-7B (model card: 7.61B)"),
    ("llama-7b", 6_738_415_616, "the Hub's safetensors metadata for huggyllama/llama-7b (LLaMA 1: 6.7B)"),
    ("gpt2-small", 124_439_808, "karpathy/llm.c README prints num_parameters: 124439808 (GPT-2 paper: 117M)"),
    ("gpt2-medium", 354_823_168, "GPT2LMHeadModel's parameters, head tied (GPT-2 paper: 345M)"),
    ("gpt2-large", 774_030_080, "GPT2LMHeadModel's parameters, head tied (GPT-2 paper: 762M)"),
    ("gpt2-xl", 1_557_611_200, "GPT2LMHeadModel's parameters, head tied (GPT-2 paper: 1542M)"),
]


@pytest.mark.parametrize("name, published, source", PUBLISHED, ids=[r[0] for r in PUBLISHED])
def test_shipped_configs_count_the_published_parameters(name, published, source):
    config = read_hf_config(shipped_config(name))
    assert config.num_params == published
    assert sum(n for _, n in config.layers) == published  # module by module (DeepSpeed's listing) as in closed form
    assert get_preset(name).total == published  # the preset is that config, not a hand-typed shape
    twin = (MetaLlama if config.layout == "llama" else MetaGPT).from_config(config, seq_len=128)
    assert twin.num_params == published  # and the data-less model's flat layout holds exactly as many


@pytest.mark.parametrize(
    "name, printed",
    [
        # Brown et al. 2020, Table 2.1 prints parameters to one decimal of a billion. GPT-2's layout counts
        # 174,604,259,328 and 6,658,404,352: the paper's 175.0B is its rounding of 174.6B (its text says "175 billion"),
        # so the check is at the precision the paper's own count has: the nearest billion, and 6.7B to a tenth.
        ("gpt3-175b", 175),
        ("gpt3-6.7b", 6.7),
    ],
)
def test_gpt3_shapes_round_to_the_paper_s_counts(name, printed):
    total = read_hf_config(shipped_config(name)).num_params
    assert round(total / 1e9, 0 if name == "gpt3-175b" else 1) == printed
    assert total == {"gpt3-175b": 174_604_259_328, "gpt3-6.7b": 6_658_404_352}[name]


def test_every_shipped_config_is_a_preset_and_cites_its_source():
    readme = (shipped_config("llama-3-8b").parent / "README.md").read_text()
    for name in shipped_configs():
        assert name in PRESETS and f"`{name}.json`" in readme, name


LLAMA3_8B = json.loads(shipped_config("llama-3-8b").read_text())


def test_llama_3_8b_reads_as_its_config_says():
    c = read_hf_config(LLAMA3_8B, name="llama-3-8b")
    assert (c.vocab, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff) == (
        128256,
        4096,
        32,
        32,
        8,
        128,
        14336,
    )
    assert (c.max_positions, c.tied, c.qkv_bias, c.rope_theta, c.rms_eps) == (8192, False, False, 500000.0, 1e-5)
    statuses = {k.key: k.status for k in c.keys}
    assert set(statuses) == set(LLAMA3_8B)  # every key of the file reported, none invented
    assert statuses["num_key_value_heads"] == "modelled" and statuses["bos_token_id"] == "no effect"
    assert not c.status("not modelled")


# The keys that size a weight (hf_config.REQUIRED): a config.json without one is refused, so the small configs here
# give them; every other key left out takes transformers' class default.
LLAMA = {"model_type": "llama", "vocab_size": 10, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
         "num_attention_heads": 4}
GPT2 = {"model_type": "gpt2", "vocab_size": 10, "n_embd": 64, "n_layer": 1, "n_head": 4, "n_positions": 16}


def test_keys_left_out_take_transformers_defaults_and_are_named():
    # LlamaConfig: num_key_value_heads None -> num_attention_heads; head_dim None -> hidden_size // heads;
    # tie_word_embeddings False. MistralConfig: num_key_value_heads 8. GPT2Config: n_inner None -> 4·n_embd, tied.
    llama = read_hf_config(LLAMA)
    assert (llama.n_kv_heads, llama.head_dim, llama.tied, llama.d_ff, llama.vocab) == (4, 16, False, 96, 10)
    assert read_hf_config({**LLAMA, "model_type": "mistral", "num_attention_heads": 16}).n_kv_heads == 8
    gpt2 = read_hf_config(GPT2)
    assert (gpt2.d_ff, gpt2.tied, gpt2.max_positions) == (256, True, 16)
    # each default taken is named, with the class it comes from, and none of the file's keys is among them
    named = {k.key: k for k in llama.defaults}
    assert named["num_key_value_heads"].value is None and "LlamaConfig default" in named["num_key_value_heads"].note
    assert "= num_attention_heads" in named["num_key_value_heads"].note and named["rope_theta"].value == 10000.0
    assert not set(named) & set(LLAMA) and {k.status for k in llama.defaults} == {"default"}
    assert {k.key for k in gpt2.defaults} >= {"n_inner", "tie_word_embeddings", "layer_norm_epsilon"}
    assert not read_hf_config(LLAMA3_8B).defaults or "rope_theta" not in {k.key for k in read_hf_config(
        LLAMA3_8B).defaults}


@pytest.mark.bad_input("model configs")
@pytest.mark.parametrize("family, key", [
    *(("llama", k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                             "num_attention_heads")),
    ("mistral", "hidden_size"), ("qwen2", "num_hidden_layers"),
    *(("gpt2", k) for k in ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions")),
])
def test_a_key_that_sizes_a_weight_is_refused_when_missing(family, key):
    """Issue 35, item 5: without hidden_size a "Llama" became transformers' default 4096-wide model, silently."""
    base = GPT2 if family == "gpt2" else {**LLAMA, "model_type": family}
    config = {k: v for k, v in base.items() if k != key}
    with pytest.raises(ValueError, match=rf"^the config: {key} missing: it sets the model's size, .* transformers' "
                                         rf"\w+Config would quietly take {key}="):
        read_hf_config(config)


def test_the_memory_command_names_the_defaults_it_took(tmp_path, capsys):
    from zerosim.cli.main import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "num_hidden_layers": 2}))
    assert main(["memory", "--config", str(path), "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    assert "defaults (not in the file): num_key_value_heads=None (= num_attention_heads)," in out
    assert main(["memory", "--config", str(path), "--ranks", "2", "--json"]) == 0
    keys = json.loads(capsys.readouterr().out)["config"]
    assert {k["key"] for k in keys["default"]} >= {"rope_theta", "rms_norm_eps", "tie_word_embeddings"}


def test_qwen2_has_qkv_biases_and_a_llama_attention_bias_gives_o_proj_one():
    # Qwen2Attention (transformers, models/qwen2/modular_qwen2.py): q/k/v bias=True, o_proj bias=False.
    q = read_hf_config(
        {
            "model_type": "qwen2",
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 96,
            "num_hidden_layers": 1,
            "vocab_size": 10,
        }
    )
    assert q.qkv_bias and not q.o_bias
    assert dict(q.layers)["layers.0.self_attn.k_proj"] == 64 * 32 + 32  # K: 2 heads of 16, and their bias
    b = read_hf_config({**LLAMA, "attention_bias": True})
    assert b.qkv_bias and b.o_bias and dict(b.layers)["layers.0.self_attn.o_proj"] == 64 * 64 + 64


def test_what_is_not_modelled_is_listed_with_why():
    mistral = read_hf_config(shipped_config("mistral-7b"))
    (window,) = mistral.status("not modelled")
    assert window.key == "sliding_window" and "4096" in window.note
    odd = read_hf_config({**LLAMA3_8B, "attention_dropout": 0.1, "my_new_knob": 3})
    assert {k.key for k in odd.status("not modelled")} == {"attention_dropout", "my_new_knob"}
    assert "unknown to zerosim" in next(k.note for k in odd.keys if k.key == "my_new_knob")


@pytest.mark.bad_input("model configs")
@pytest.mark.parametrize(
    "config, match",
    [
        ({"model_type": "mixtral", "num_local_experts": 8}, "'mixtral' is not one zerosim builds.*mixture of experts"),
        ({"model_type": "llama", "num_local_experts": 8}, "num_local_experts make this a mixture of experts"),
        ({"model_type": "llama", "vision_config": {}}, "vision_config make this a multimodal model"),
        ({"model_type": "bert"}, "'bert' is not one zerosim builds"),
        ({"hidden_size": 64}, "no model_type"),
        ({**LLAMA, "hidden_size": "4096"}, "hidden_size must be an integer >= 1, got '4096'"),
        ({**LLAMA, "num_hidden_layers": True}, "num_hidden_layers must be an integer"),
        ({**LLAMA, "tie_word_embeddings": "no"}, "tie_word_embeddings must be true or false"),
        (
            {**LLAMA, "num_attention_heads": 32, "num_key_value_heads": 5},
            "multiple of num_key_value_heads 5",
        ),
        ({**LLAMA, "hidden_act": "gelu"}, "SwiGLU uses SiLU"),
        ({**LLAMA, "mlp_bias": True}, "mlp_bias true"),
        ({**LLAMA, "rms_norm_eps": -1}, "rms_norm_eps must be a positive number"),
        ({**GPT2, "n_inner": 100}, "FFN of 4·n_embd"),
    ],
)
def test_models_zerosim_cannot_build_and_wrong_types_are_refused(config, match):
    with pytest.raises(ValueError, match=match):
        read_hf_config(config)


@pytest.mark.bad_input("model configs")
def test_unreadable_files_are_refused_naming_them(tmp_path):
    with pytest.raises(ValueError, match="cannot read .*missing.json"):
        read_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(ValueError, match="bad.json is not JSON"):
        read_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="one JSON object"):
        read_hf_config(bad)
