"""Analytic costs: per-rank model-state memory, activation memory, communication volume and time.

    memory        model_state_memory(Ψ, N, stage, MemoryConfig) -> ModelStateMemory (parts by kind)
    conventions   the seeds', the ZeRO paper's and DeepSpeed's byte counts side by side
    activations   14·B·L·d + B·H·L² per layer, with block / selective recomputation
    comm          2Ψ or 3Ψ times (N−1)/N per step; α-β time on preset links
    presets       models by layer sizes, read from the shipped config.json files (GPT-2, GPT-3, Llama 1/2/3, Mistral,
                  Qwen2.5) and the ZeRO paper's 7.5B
    gpus          GPU capacities (driver totals beside datasheets)
    overheads     what no ledger sees (CUDA context, NCCL, DeepSpeed's buckets, the allocator), as labelled
                  estimates; the fits / does-not-fit verdict

These are formulas; the engines' ledgers and traces are the measurement they are checked against.
"""

from zerosim.costs.activations import ActivationMemory, ActivationShape, activation_memory, layer_elements
from zerosim.costs.comm import LINKS, Collective, CommTime, Link, comm_time, comm_volume, sent_bytes, stage_collectives
from zerosim.costs.conventions import (
    ConventionRow,
    conventions_table,
    deepspeed_estimators,
    format_table,
    seed000_general,
    seed000_printed_stages,
    seed001_formulas,
    seed001_printed_table,
    seed003_table,
    zero_paper,
    zerosim_parts,
)
from zerosim.costs.memory import (
    GB,
    OPTIMIZER_STATES,
    MemoryConfig,
    ModelStateMemory,
    OptimizerState,
    model_state_memory,
    model_state_memory_by_stage,
)
from zerosim.costs.gpus import GPU, GPUS, get_gpu
from zerosim.costs.overheads import Fit, Overhead, fit, runtime_overheads
from zerosim.costs.presets import PRESETS, ModelPreset, get_preset, preset_from_config

__all__ = [
    "GB",
    "GPU",
    "GPUS",
    "Fit",
    "Overhead",
    "fit",
    "get_gpu",
    "preset_from_config",
    "runtime_overheads",
    "LINKS",
    "OPTIMIZER_STATES",
    "PRESETS",
    "ActivationMemory",
    "ActivationShape",
    "Collective",
    "CommTime",
    "ConventionRow",
    "Link",
    "MemoryConfig",
    "ModelPreset",
    "ModelStateMemory",
    "OptimizerState",
    "activation_memory",
    "comm_time",
    "comm_volume",
    "conventions_table",
    "deepspeed_estimators",
    "format_table",
    "get_preset",
    "layer_elements",
    "model_state_memory",
    "model_state_memory_by_stage",
    "seed000_general",
    "seed000_printed_stages",
    "seed001_formulas",
    "seed001_printed_table",
    "seed003_table",
    "sent_bytes",
    "stage_collectives",
    "zero_paper",
    "zerosim_parts",
]
