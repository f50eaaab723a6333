"""A model's Hugging Face `config.json`, read locally: the shape zerosim builds, and what it does with every key.

    config = read_hf_config("path/to/config.json")        # or a dict; or shipped_config("llama-3-8b")
    config.num_params, config.layers                       # 8,030,261,248; (("embed_tokens", 525336576), ...)
    [k for k in config.keys if k.status == "not modelled"] # what the numbers leave out, by key

Model types built: "llama", "mistral", "qwen2" (zerosim's Llama: RMSNorm, grouped-query attention with rotary
embeddings, SwiGLU; Qwen2 adds q/k/v biases) and "gpt2" (zerosim's GPT). Key names and defaults are
transformers' (models/llama/configuration_llama.py `LlamaConfig`, mistral/configuration_mistral.py
`MistralConfig`, qwen2/configuration_qwen2.py `Qwen2Config`, gpt2/configuration_gpt2.py `GPT2Config`): a key left
out takes the class default, as `from_pretrained` does, and is named in `defaults` — except the keys that size a
weight (`REQUIRED`), which are refused when missing. Every key of the file is reported with a status:

    modelled      it sets the shape or the numerics zerosim runs (hidden_size, num_key_value_heads, rms_norm_eps, ...)
    no effect     it changes nothing in a training step's memory or FLOPs (token ids, use_cache, torch_dtype, ...)
    not modelled  it would change memory or FLOPs and zerosim leaves it out (a sliding window, dropout, unknown keys)

A model zerosim cannot build (a mixture of experts, a multimodal model, another architecture) is refused with
what is missing; a wrong type is refused naming the key. No network and no `transformers`: the file is JSON.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from dataclasses import replace
from importlib import resources

from zerosim._dataclass import dataclass
from zerosim.outputs import open_input

LLAMA_TYPES = ("llama", "mistral", "qwen2")
MAX_PARAMS = 1e15  # a quadrillion: 1,000x GPT-3's 175B, beyond any model trained so far (the CLI's --params too)
# A width, a vocabulary or a position count is a GEMM dimension or a table's rows: cuBLAS takes them as 32-bit ints
# (cublasGemmEx's m, n, k), so no model has one past 2^31 - 1; past it numpy's shapes overflow too.
MAX_DIM = 2**31 - 1
MODEL_TYPES = (*LLAMA_TYPES, "gpt2")

# Defaults of the transformers config classes, for keys a file leaves out.
DEFAULTS = {
    "llama": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=None,
        head_dim=None,
        hidden_act="silu",
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
    ),
    "mistral": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=None,
        hidden_act="silu",
        max_position_embeddings=4096 * 32,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        sliding_window=4096,
        attention_dropout=0.0,
    ),
    "qwen2": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=22016,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_theta=10000.0,
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=28,
        attention_dropout=0.0,
    ),
    "gpt2": dict(
        vocab_size=50257,
        n_positions=1024,
        n_embd=768,
        n_layer=12,
        n_head=12,
        n_inner=None,
        activation_function="gelu_new",
        resid_pdrop=0.1,
        embd_pdrop=0.1,
        attn_pdrop=0.1,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
    ),
}

# Keys that set the size of a weight, per model type: refused when missing. Every config.json transformers saves
# holds them (configuration_utils.py `PreTrainedConfig.to_diff_dict`, which `save_pretrained` writes through
# `to_json_file(use_diff=True)`, keeps every key the base PreTrainedConfig lacks), so a file without one was cut
# short or written by hand; `from_pretrained` would silently build the class default (a Llama of hidden_size 4096
# and 32 layers from a file that names neither) — a model of another size, which no number here should stand on.
# The other keys the reader uses take the class default and are named in the output (`DecoderConfig.defaults`):
# old releases' files leave some out on purpose (Llama 1 has no num_key_value_heads, GPT-2 no tie_word_embeddings).
REQUIRED = {
    **{mt: ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
       for mt in LLAMA_TYPES},
    "gpt2": ("vocab_size", "n_embd", "n_layer", "n_head", "n_positions"),  # n_positions: the position table's rows
}
CONFIG_CLASSES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "gpt2": "GPT2Config"}
WHAT_NONE_MEANS = {  # a default of None, as the config class reads it
    "num_key_value_heads": "num_attention_heads: multi-head attention",
    "head_dim": "hidden_size // num_attention_heads",
    "n_inner": "4·n_embd",
}

# Keys that change nothing in a training step's memory or FLOPs (ids, inference-only settings, bookkeeping).
NO_EFFECT = {
    "architectures",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "initializer_range",
    "transformers_version",
    "_name_or_path",
    "torch_dtype",
    "dtype",
    "use_cache",
    "pretraining_tp",
    "rope_scaling",
    "max_sequence_length",
    "n_ctx",
    "summary_activation",
    "summary_first_dropout",
    "summary_proj_to_labels",
    "summary_type",
    "summary_use_proj",
    "task_specific_params",
    "scale_attn_weights",
    "use_mrope",
    "max_window_layers",
    "layer_types",
    "rope_parameters",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
}
WHY_NO_EFFECT = {
    "torch_dtype": "the checkpoint's storage type; training formats come from --precision or the DeepSpeed config",
    "dtype": "the checkpoint's storage type; training formats come from --precision or the DeepSpeed config",
    "use_cache": "the inference KV cache (training keeps no cache)",
    "pretraining_tp": "Meta's tensor-parallel slicing of the same products: numerics only",
    "rope_scaling": "rescales rotary angles: numerics only",
    "rope_parameters": "rotary angles (its rope_theta is read): numerics only",
    "n_ctx": "GPT-2's old name for n_positions",
}
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size", "num_experts_per_tok")
MULTIMODAL_KEYS = ("vision_config", "text_config", "audio_config", "vision_tower")
OTHER_ARCHITECTURES = {
    "mixtral": "a mixture of experts (num_local_experts): its expert FFNs and router are not built",
    "qwen2_moe": "a mixture of experts: its expert FFNs and router are not built",
    "deepseek_v2": "a mixture of experts with multi-head latent attention: neither is built",
    "deepseek_v3": "a mixture of experts with multi-head latent attention: neither is built",
    "llava": "multimodal (a vision tower beside the language model): not built",
    "mllama": "multimodal (a vision tower and cross-attention layers): not built",
    "qwen2_vl": "multimodal (a vision tower, M-RoPE): not built",
    "gemma": "Gemma's blocks (GeGLU, scaled embeddings, RMSNorm with 1 + w): not built",
    "gemma2": "Gemma 2's blocks (soft-capping, alternating local attention): not built",
    "phi3": "Phi-3's fused qkv and gate_up projections and its rope scaling: not built",
}


@dataclass(frozen=True)
class KeyStatus:
    """What zerosim did with one key of the config."""

    key: str
    value: object
    status: str  # "modelled", "no effect" or "not modelled"
    note: str = ""


@dataclass(frozen=True)
class DecoderConfig:
    """The decoder shape a config.json describes (d width, H heads, G key/value heads, F FFN width, V vocab)."""

    name: str
    model_type: str  # "llama", "mistral", "qwen2" or "gpt2"
    vocab: int  # V
    d_model: int  # d
    n_layers: int  # decoder layers
    n_heads: int  # H
    n_kv_heads: int  # G (= H: multi-head)
    head_dim: int  # d_h
    d_ff: int  # F (GPT-2: 4d)
    max_positions: int  # the longest sequence (GPT-2's position table; a Llama's trained context)
    tied: bool  # the LM head reuses the token embedding
    qkv_bias: bool = False  # Qwen2; Llama's attention_bias
    o_bias: bool = False  # Llama's attention_bias
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6  # GPT-2: layer_norm_epsilon
    keys: tuple = ()  # (KeyStatus, ...), one per key of the file
    defaults: tuple = ()  # (KeyStatus "default", ...), one per key the reader used that the file leaves out

    @property
    def layout(self) -> str:
        """ "llama" (zerosim's Llama) or "gpt2" (zerosim's GPT)."""
        return "gpt2" if self.model_type == "gpt2" else "llama"

    @property
    def layers(self) -> tuple:
        """((module name, parameters), ...) in forward order, one per module as DeepSpeed counts them
        (`parameters(recurse=False)`: weight and bias together); a tied head is not listed (counted once)."""
        front, back = self._ends()
        return (*front, *(module for i in range(self.n_layers) for module in self._block(i)), *back)

    @property
    def num_params(self) -> int:
        """Ψ: every parameter, a tied head once (as `sum(p.numel() for p in model.parameters())`): the ends', and
        n_layers times one block's (every block the same modules; a config of 10**6 layers is counted at once, not
        module by module, before the commands refuse it: cli/work_budget.py)."""
        front, back = self._ends()
        return sum(n for _, n in (*front, *back)) + self.n_layers * sum(n for _, n in self._block(0))

    def _ends(self) -> tuple:
        """(the modules before the first block, those after the last): ((name, parameters), ...) each."""
        d, V = self.d_model, self.vocab
        head = () if self.tied else (("lm_head", V * d),)
        if self.layout == "gpt2":
            return (("wte", V * d), ("wpe", self.max_positions * d)), (("ln_f", 2 * d), *head)
        return (("embed_tokens", V * d),), (("norm", d), *head)

    def _block(self, i: int) -> tuple:
        """Block i's modules, ((name, parameters), ...) in forward order."""
        d, F = self.d_model, self.d_ff
        if self.layout == "gpt2":
            return (
                (f"h.{i}.ln_1", 2 * d),
                (f"h.{i}.attn.c_attn", d * 3 * d + 3 * d),
                (f"h.{i}.attn.c_proj", d * d + d),
                (f"h.{i}.ln_2", 2 * d),
                (f"h.{i}.mlp.c_fc", d * F + F),
                (f"h.{i}.mlp.c_proj", F * d + d),
            )
        q, kv, a = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, f"layers.{i}.self_attn"
        return (
            (f"layers.{i}.input_layernorm", d),
            (f"{a}.q_proj", q * d + q * self.qkv_bias),
            (f"{a}.k_proj", kv * d + kv * self.qkv_bias),
            (f"{a}.v_proj", kv * d + kv * self.qkv_bias),
            (f"{a}.o_proj", q * d + d * self.o_bias),
            (f"layers.{i}.post_attention_layernorm", d),
            (f"layers.{i}.mlp.gate_proj", d * F),
            (f"layers.{i}.mlp.up_proj", d * F),
            (f"layers.{i}.mlp.down_proj", F * d),
        )

    def with_(self, **changes) -> "DecoderConfig":
        return replace(self, **changes)

    def status(self, status: str) -> list:
        """The keys with this status ("modelled", "no effect", "not modelled")."""
        return [k for k in self.keys if k.status == status]


def shipped_configs() -> tuple:
    """Names of the configs shipped with zerosim (zerosim/models/hf/configs/*.json)."""
    folder = resources.files("zerosim.models.hf") / "configs"
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")))


def shipped_config(name: str):
    """The path of a shipped config.json by name (see shipped_configs(); sources in hf/configs/README.md)."""
    if name not in shipped_configs():
        raise ValueError(f"no shipped config {name!r}; shipped: {', '.join(shipped_configs())}")
    return resources.files("zerosim.models.hf") / "configs" / f"{name}.json"


def read_json_object(source, what: str, one_object: str) -> tuple:
    """(the dict, where it came from) from a JSON file's path (or a resource) or an already-parsed value; a clear
    ValueError naming the file when it cannot be read, is not JSON, or is not one object (`one_object` says so)."""
    where = what if isinstance(source, (dict, list)) else str(source)
    if isinstance(source, (dict, list)):
        raw = dict(source) if isinstance(source, dict) else source
    else:
        try:
            if hasattr(source, "read_text"):
                text = source.read_text()
            else:
                with open_input(source) as f:  # a FIFO or a device would block the read for ever: refused
                    text = f.read()
            raw = json.loads(text)
        except OSError as e:
            raise ValueError(f"cannot read {where}: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{where} is not JSON: {e.msg} at line {e.lineno}") from None
        except UnicodeDecodeError as e:  # a binary file: JSON is UTF-8 text (RFC 8259 section 8.1)
            raise ValueError(f"{where} is not JSON: not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                             f"{e.start}); is it a binary file?") from None
        except RecursionError:  # thousands of nested brackets
            raise ValueError(f"{where} is not JSON zerosim reads: nested too deeply") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: {one_object}, got {type(raw).__name__}")
    return raw, where


def read_hf_config(source, name: str | None = None) -> DecoderConfig:
    """A `DecoderConfig` from a config.json path or an already-parsed dict (see the module docstring).

    Raises ValueError naming the file and the key for an unreadable file, a wrong type or a model not built."""
    raw, where = read_json_object(source, "the config", "a config.json holds one JSON object")
    name = name or (os.path.basename(where)[:-5] if where.endswith(".json") else "config")
    if "model_type" not in raw:
        raise ValueError(f"{where} has no model_type: is it a Hugging Face config.json?")
    mt = raw["model_type"]
    if not isinstance(mt, str):  # a list or an object would not be a name (and cannot be looked up)
        raise ValueError(f"{where}: model_type must be a string such as 'llama', got {mt!r}")
    if mt not in MODEL_TYPES:
        why = OTHER_ARCHITECTURES.get(mt, "its blocks may differ from Llama's and GPT-2's")
        raise ValueError(f"{where}: model_type {mt!r} is not one zerosim builds ({', '.join(MODEL_TYPES)}): {why}")
    for keys, what in ((MOE_KEYS, "a mixture of experts"), (MULTIMODAL_KEYS, "a multimodal model")):
        found = [k for k in keys if raw.get(k) not in (None, 0, 1) or (k in MULTIMODAL_KEYS and k in raw)]
        if found:
            raise ValueError(f"{where}: {', '.join(found)} make this {what}, which zerosim does not build")
    missing = [k for k in REQUIRED[mt] if k not in raw]
    if missing:
        taken, it = ", ".join(f"{k}={DEFAULTS[mt][k]}" for k in missing), "them" if len(missing) > 1 else "it"
        raise ValueError(f"{where}: {', '.join(missing)} missing: {'they set' if len(missing) > 1 else 'it sets'} the "
                         f"model's size, and every config.json transformers saves holds them; transformers' "
                         f"{CONFIG_CLASSES[mt]} would quietly take {taken} (a model of another size). Give {it} as "
                         f"the model has {it}")
    values = {**DEFAULTS[mt], **raw}
    reader = _read_gpt2 if mt == "gpt2" else _read_llama
    config = replace(reader(values, raw, name, where), defaults=_defaults(mt, raw))
    if config.num_params > MAX_PARAMS:  # each size fits a GEMM, but together past any model trained
        sizes = ", ".join(f"{k} {raw[k]:,}" for k in REQUIRED[mt] if isinstance(raw.get(k), int))
        raise ValueError(f"{where}: {config.num_params:.3g} parameters ({sizes}), more than {MAX_PARAMS:g}, beyond any "
                         "model trained so far: check its sizes")
    return config


def _defaults(mt: str, raw: dict) -> tuple:
    """A KeyStatus "default" for each key of the class defaults the file leaves out: what zerosim took instead."""
    out = []
    for key, value in DEFAULTS[mt].items():
        if key not in raw:
            means = f" (= {WHAT_NONE_MEANS[key]})" if value is None and key in WHAT_NONE_MEANS else ""
            out.append(KeyStatus(key, value, "default", f"not in the file: transformers' {CONFIG_CLASSES[mt]} "
                                                         f"default{means}"))
    return tuple(out)


def _int(values, key, where, minimum=1, maximum=MAX_DIM):
    v = values[key]
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise ValueError(f"{where}: {key} must be an integer >= {minimum}, got {v!r}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{where}: {key} {v:,} is more than {maximum:,}: a width, vocabulary or position count is a "
                         "GEMM dimension or a table's rows, which cuBLAS takes as 32-bit ints")
    return int(v)


def _bool(values, key, where):
    v = values[key]
    if not isinstance(v, bool):
        raise ValueError(f"{where}: {key} must be true or false, got {v!r}")
    return v


def _float(values, key, where):
    v = values[key]
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{where}: {key} must be a positive number, got {v!r}")
    return float(v)


def _statuses(raw, modelled: dict, not_modelled: dict) -> tuple:
    """A KeyStatus per key of the file: modelled (with how), not modelled (with why), no effect, or unknown."""
    out = []
    for key, value in raw.items():
        if key in modelled:
            out.append(KeyStatus(key, value, "modelled", modelled[key]))
        elif key in not_modelled:
            out.append(KeyStatus(key, value, "not modelled", not_modelled[key]))
        elif key in NO_EFFECT:
            out.append(KeyStatus(key, value, "no effect", WHY_NO_EFFECT.get(key, "")))
        else:
            out.append(
                KeyStatus(
                    key,
                    value,
                    "not modelled",
                    "unknown to zerosim: if it changes memory or FLOPs, the numbers here do not show it",
                )
            )
    return tuple(out)


def _read_llama(values, raw, name, where) -> DecoderConfig:
    """A Llama-family config (llama, mistral, qwen2) checked and read, with what of it zerosim models."""
    mt = raw["model_type"]
    d, H = _int(values, "hidden_size", where), _int(values, "num_attention_heads", where)
    G = H if values.get("num_key_value_heads") is None else _int(values, "num_key_value_heads", where)
    head_dim = d // H if values.get("head_dim") is None else _int(values, "head_dim", where)
    if values.get("head_dim") is None and d % H:
        raise ValueError(f"{where}: hidden_size {d} does not split into num_attention_heads {H}; give head_dim")
    if H % G:
        raise ValueError(f"{where}: num_attention_heads {H} must be a multiple of num_key_value_heads {G}")
    if values["hidden_act"] != "silu":
        raise ValueError(f"{where}: hidden_act {values['hidden_act']!r}: zerosim's SwiGLU uses SiLU ('silu')")
    if mt == "llama" and _bool(values, "mlp_bias", where):
        raise ValueError(f"{where}: mlp_bias true gives the SwiGLU projections biases, which zerosim's Llama has not")
    rope = values.get("rope_parameters") if isinstance(values.get("rope_parameters"), dict) else {}
    theta = rope.get("rope_theta", values.get("rope_theta", 10000.0))
    bias = _bool(values, "attention_bias", where) if mt == "llama" else False
    qkv_bias = bias or mt == "qwen2"  # Qwen2Attention: q/k/v bias=True, o_proj bias=False (modular_qwen2.py)
    modelled, not_modelled = _llama_statuses(values, mt)
    return DecoderConfig(
        name,
        mt,
        _int(values, "vocab_size", where),
        d,
        _int(values, "num_hidden_layers", where, maximum=None),
        H,
        G,
        head_dim,
        _int(values, "intermediate_size", where),
        _int(values, "max_position_embeddings", where),
        _bool(values, "tie_word_embeddings", where),
        qkv_bias,
        bias,
        _float({"rope_theta": theta}, "rope_theta", where),
        _float(values, "rms_norm_eps", where),
        _statuses(raw, modelled, not_modelled),
    )



def _llama_statuses(values, mt: str) -> tuple:
    """Which of a Llama-family config's keys zerosim models ({key: note}) and which it does not (dropout, a sliding
    window): (modelled, not_modelled)."""
    modelled = {
        k: ""
        for k in (
            "model_type",
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "hidden_act",
            "tie_word_embeddings",
            "attention_bias",
            "mlp_bias",
        )
    }
    modelled |= {
        "max_position_embeddings": "the longest --seq-len accepted",
        "rms_norm_eps": "the RMSNorms' eps",
        "rope_theta": "the rotary base θ",
    }
    not_modelled = {}
    if float(values.get("attention_dropout") or 0.0) > 0:
        not_modelled["attention_dropout"] = "dropout on P keeps a mask for backward: not counted"
    else:
        modelled["attention_dropout"] = "0: no dropout, nothing to keep"
    window = values.get("sliding_window")
    if mt == "mistral" and window is not None:
        not_modelled["sliding_window"] = (
            f"attention here is full causal; past {window} tokens the real model attends "
            "to a window only (fewer FLOPs with flash attention)"
        )
    elif mt == "qwen2" and values.get("use_sliding_window"):
        not_modelled["use_sliding_window"] = "sliding-window layers are not modelled: attention here is full causal"
        not_modelled["sliding_window"] = "see use_sliding_window"
    else:
        modelled |= {"sliding_window": "unused (use_sliding_window is false)", "use_sliding_window": ""}
    return modelled, not_modelled

def _read_gpt2(values, raw, name, where) -> DecoderConfig:
    d, H = _int(values, "n_embd", where), _int(values, "n_head", where)
    if d % H:
        raise ValueError(f"{where}: n_embd {d} does not split into n_head {H}")
    F = 4 * d if values.get("n_inner") is None else _int(values, "n_inner", where)
    if F != 4 * d:
        raise ValueError(f"{where}: n_inner {F}: zerosim's GPT has GPT-2's FFN of 4·n_embd = {4 * d}")
    act = values["activation_function"]
    if act not in ("gelu_new", "gelu_pytorch_tanh", "relu", "gelu"):
        raise ValueError(f"{where}: activation_function {act!r}: zerosim's GPT has GELU (tanh form) or ReLU")
    modelled = {
        k: "" for k in ("model_type", "vocab_size", "n_embd", "n_head", "n_layer", "n_inner", "tie_word_embeddings")
    }
    modelled |= {
        "n_positions": "the position table (the longest --seq-len)",
        "layer_norm_epsilon": "",
        "activation_function": "GELU, tanh form" if act != "relu" else "ReLU",
    }
    not_modelled = {
        k: "dropout keeps a mask for backward: not counted"
        for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")
        if float(values.get(k) or 0.0) > 0
    }
    if act == "gelu":
        not_modelled["activation_function"] = "erf GELU: zerosim computes the tanh form (same memory and FLOPs)"
    for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if k not in not_modelled:
            modelled[k] = "0: no dropout"
    return DecoderConfig(
        name,
        "gpt2",
        _int(values, "vocab_size", where),
        d,
        _int(values, "n_layer", where, maximum=None),
        H,
        H,
        d // H,
        F,
        _int(values, "n_positions", where),
        _bool(values, "tie_word_embeddings", where),
        qkv_bias=True,
        o_bias=True,
        rms_eps=_float(values, "layer_norm_epsilon", where),
        keys=_statuses(raw, modelled, not_modelled),
    )
