"""What the memory explorer's sliders set, as one frozen value, and the data-less model it describes.

`Settings` holds what a slider or a drop-down can move: the model (a shipped preset's name, or the path of a
model's `config.json`), N, the ZeRO stage, the precision and optimizer, the sequence length and micro-batch,
the checkpointing strategy, the GPU and the offload placement. `model_for(settings)` builds the same data-less twin
`zerosim memory` / `zerosim timeline` build from the same flags (cli/model_args.py `decoder_from_args`): a MetaGPT or
a MetaLlama at the model's shape, so its activations and its checkpointing's recompute are in the step.
"""

from __future__ import annotations

from dataclasses import replace

from zerosim._dataclass import dataclass
from zerosim.optim import OPTIMIZERS as _ALL

OPTIMIZERS = tuple(n for n, cls in _ALL.items() if cls.elementwise)  # what every stage can shard (as cli/model_args)


@dataclass(frozen=True)
class Settings:
    """One position of every slider. Defaults: Llama-2-7B on 8 H100s, ZeRO-3, bf16, one 4k sequence per rank."""

    model: str = "llama-2-7b"  # a preset (zerosim.analysis.costs.PRESETS) or a config.json's path
    ranks: int = 8  # N, data-parallel ranks
    stage: int = 3  # ZeRO stage 0-3
    precision: str = "bf16-mixed"
    optimizer: str = "adam"
    seq_len: int = 4096  # L, tokens per sequence
    micro_batch: int = 1  # B, sequences per rank per micro-step
    checkpoint: str = "block"  # a key of zerosim.models.gpt.STRATEGIES
    gpu: str = "h100-80gb"  # a key of zerosim.analysis.costs._gpus.GPUS: the capacity line and the compute rates
    offload: str = "none"  # a placement (zerosim.parallel.offload.PLACEMENTS): what leaves the device, to host / NVMe

    def with_(self, **changes) -> "Settings":
        """A copy with `changes` (what one slider moved), checked."""
        return check(replace(self, **changes))


def check(s: Settings) -> Settings:
    """`s`, or a ValueError naming the first setting that is out of range."""
    from zerosim.analysis.costs import GPUS, MEMORY_PRECISIONS
    from zerosim.models.gpt import STRATEGIES
    from zerosim.parallel.data import check_stage

    for name in ("ranks", "seq_len", "micro_batch"):
        v = getattr(s, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {v!r}")
    check_stage(s.stage)
    for name, allowed in (("precision", tuple(MEMORY_PRECISIONS)), ("checkpoint", tuple(STRATEGIES)),
                          ("gpu", tuple(GPUS))):
        if getattr(s, name) not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(s, name)!r}")
    if s.optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {s.optimizer!r}")
    from zerosim.parallel.offload import PLACEMENTS

    if s.offload not in PLACEMENTS:
        raise ValueError(f"offload must be one of {', '.join(PLACEMENTS)}; got {s.offload!r}")
    if s.stage not in PLACEMENTS[s.offload].stages:
        raise ValueError(f"offload {s.offload!r} runs at stage {', '.join(map(str, PLACEMENTS[s.offload].stages))}, "
                         f"not {s.stage}")
    return s


def config_for(model: str):
    """The DecoderConfig of a preset's name or of a config.json's path."""
    from zerosim.analysis.costs import PRESETS, get_preset
    from zerosim.models.hf import read_hf_config

    if model in PRESETS:
        config = get_preset(model).config
        if config is None:
            raise ValueError(f"{model!r} is known by its parameter count only: the explorer needs a shape")
        return config
    if model.endswith(".json"):
        return read_hf_config(model)
    raise ValueError(f"model must be a preset ({', '.join(sorted(PRESETS))}) or a config.json's path; got {model!r}")


def model_for(s: Settings):
    """The data-less GPT or Llama of `s` (its activations and recompute in the step), as `zerosim memory --seq-len`
    builds it with `--kernels fused` (cli/model_args.py decoder_from_args; the command's default is eager's)."""
    from zerosim.models.gpt import MetaGPT, strategy_options
    from zerosim.models.llama import MetaLlama

    check(s)
    config = config_for(s.model)
    if s.seq_len > config.max_positions:
        raise ValueError(f"seq_len {s.seq_len} is longer than {config.name}'s {config.max_positions} positions")
    twin = MetaLlama if config.layout == "llama" else MetaGPT
    return twin.from_config(config, s.seq_len, **strategy_options(s.checkpoint))
