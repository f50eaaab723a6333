"""A model's Hugging Face `config.json`, read locally (no hub, no transformers): the shape zerosim builds, and what it
does with every key (modelled, not modelled, no effect). Configs shipped with zerosim lie in configs/ (its README
cites each one's source and published parameter count).

    _config.py   DecoderConfig, read_hf_config, shipped_config(s): Llama, Mistral, Qwen2 and GPT-2 layouts
"""

from zerosim.models.hf._config import (
                                       LLAMA_TYPES,
                                       MAX_DIM,
                                       MAX_PARAMS,
                                       MODEL_TYPES,
                                       REQUIRED,
                                       WHAT_NONE_MEANS,
                                       DecoderConfig,
                                       KeyStatus,
                                       read_hf_config,
                                       read_json_object,
                                       shipped_config,
                                       shipped_configs,
)

__all__ = ["DecoderConfig", "KeyStatus", "LLAMA_TYPES", "MAX_DIM", "MAX_PARAMS", "MODEL_TYPES", "REQUIRED",
           "WHAT_NONE_MEANS", "read_hf_config", "read_json_object", "shipped_config", "shipped_configs"]
