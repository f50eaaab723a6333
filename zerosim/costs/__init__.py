"""Analytic costs: per-rank model-state memory, activation memory, communication volume and time.

    memory        model_state_memory(Ψ, N, stage, MemoryConfig) -> ModelStateMemory (parts by kind)
    conventions   the seeds', the ZeRO paper's and DeepSpeed's byte counts side by side
    activations   14·B·L·d + B·H·L² per layer, with block / selective recomputation
    comm          2Ψ or 3Ψ times (N−1)/N per step; α-β time on preset links
    presets       models by layer sizes (GPT-2 small..XL, LLaMA-7B, GPT-3 175B, the ZeRO paper's 7.5B)

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
from zerosim.costs.presets import PRESETS, ModelPreset, get_preset

__all__ = [
    "GB",
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
