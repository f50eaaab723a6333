"""Analytic costs: per-rank model-state memory, activation memory, communication volume and time; and the same
measured by one meta-backend step of the real engine.

    _memory.py       model_state_memory(Ψ, N, stage, MemoryConfig) -> ModelStateMemory (parts by kind)
    _conventions.py  the seeds', the ZeRO paper's and DeepSpeed's byte counts side by side
    _activations.py  14·B·L·d + B·H·L² per layer, with block / selective recomputation
    _retention.py    what a layer keeps, for how long (lifetimes), and what recomputing it costs (seed 001's ρ table)
    _second_order.py Shampoo's / K-FAC's factors against Adam's state, and the matrices ZeRO's shards split
    _comm.py         2Ψ or 3Ψ times (N−1)/N per step; α-β time on preset links
    _presets.py      models by layer sizes, read from the shipped config.json files (GPT-2, GPT-3, Llama 1/2/3,
                     Mistral, Qwen2.5) and the ZeRO paper's 7.5B
    _gpus.py         GPU capacities (driver totals beside datasheets)
    _hosts.py        host DRAM and NVMe per node (machine types: DGX-2, A100, H100, H200), what offload fills
    _overheads.py    what no ledger sees (CUDA context, NCCL, DeepSpeed's buckets, the allocator), as labelled
                     estimates; the fits / does-not-fit verdict
    _measured.py     the same quantities measured: one step of the real engine on the meta backend, its ledgers
    _pipeline.py     the same beside pipeline parallelism: the pipeline's engine, a representative a stage, per stage
    _muon.py         Muon's state beside AdamW's per parameter group (DeepSpeed's), and DeepSpeed's published figure
    _links.py        NCCL's own latencies (tuning.cc at a named release): per protocol, per ring step, per call
    _efficiency.py   the rates kernels achieve per GPU and kernel class (cited), presets eager / compiled, --efficiency
    _kernel_work.py  what each kernel class of a unit reads, writes and computes (GEMMs, attention, elementwise)
    _tensor_work.py  the same for one tensor-parallel rank's unit: its slice's GEMMs (fp8 too), heads, tokens
    _context_work.py the same for one context-parallel rank's attention parts: each hop on its block of the ring
    _calibration.py  the framework factors, fitted on the named calibration set only (docs/validation.md)
    _throughput.py   tokens/s per GPU (the job's tokens ÷ step ÷ GPUs) and MFU: the one definition every report reads
    _reserve.py      reserved beside allocated: the caching allocator's measured ratios
    _fsdp2_view.py   the step peak as FSDP2 keeps it (torch's FSDPMemTracker's view)
    _rates.py        every rate checked where it is born (finite, > 0); the flags' physical bounds
    _validation_points.py  published runs (torchtitan, llm-foundry): conditions, source file and commit, numbers

The formulas are checked against the engines' ledgers and traces, which are the measurement.
"""

from zerosim.analysis.costs._activations import ActivationMemory, ActivationShape, activation_memory, layer_elements
from zerosim.analysis.costs._calibration import FRAMEWORK
from zerosim.analysis.costs._comm import (
                                          LINKS,
                                          Collective,
                                          CommTime,
                                          Link,
                                          comm_time,
                                          comm_volume,
                                          sent_bytes,
                                          stage_collectives,
)
from zerosim.analysis.costs._context_work import cp_unit_work
from zerosim.analysis.costs._conventions import (
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
from zerosim.analysis.costs._efficiency import KERNEL_RATES, Efficiency, KernelRates, parse_efficiency, wave_efficiency
from zerosim.analysis.costs._efficiency import PRESETS as EFFICIENCY_PRESETS
from zerosim.analysis.costs._fsdp2_view import fsdp2_peak
from zerosim.analysis.costs._gpus import GPU, GPUS, get_gpu
from zerosim.analysis.costs._hosts import HOSTS, Host, get_host, host_fit, host_link, host_of
from zerosim.analysis.costs._kernel_work import Work, loss_work, unit_work, weights
from zerosim.analysis.costs._links import NCCL_RELEASE, base_latency, ring_latency, step_latency
from zerosim.analysis.costs._measured import (
                                          measure_activations,
                                          measure_by_stage,
                                          measure_rank_activations,
                                          measure_stage,
                                          measure_tp_activations,
                                          parallel_model,
                                          peak_rank,
                                          positions_of,
                                          strategy_costs,
                                          tensor_parallel,
)
from zerosim.analysis.costs._memory import (
                                          GB,
                                          MEMORY_PRECISIONS,
                                          OPTIMIZER_STATES,
                                          MemoryConfig,
                                          ModelStateMemory,
                                          OptimizerState,
                                          model_state_memory,
                                          model_state_memory_by_stage,
)
from zerosim.analysis.costs._muon import DEEPSPEED_FIGURE, MuonStateBytes, muon_state_bytes
from zerosim.analysis.costs._overheads import (
                                          ALLOCATOR_RESERVE,
                                          CUDA_CONTEXT,
                                          NCCL_BUFFERS,
                                          DeepSpeedBuckets,
                                          Fit,
                                          Overhead,
                                          deepspeed_bucket_bytes,
                                          deepspeed_buckets,
                                          fit,
                                          runtime_overheads,
)
from zerosim.analysis.costs._pipeline import line_points, memory_point, pipeline_run, stage_rows
from zerosim.analysis.costs._presets import PRESETS, ModelPreset, get_preset, preset_from_config
from zerosim.analysis.costs._rates import EFFICIENCY, LATENCY_US, LINK_GB_S, check_flag_range, check_rate
from zerosim.analysis.costs._reserve import reserved
from zerosim.analysis.costs._retention import Retained, lifetimes, recompute_table, seed001_p_multiply_adds
from zerosim.analysis.costs._second_order import SecondOrder, second_order_memory
from zerosim.analysis.costs._tensor_work import tp_unit_work
from zerosim.analysis.costs._throughput import TOKENS, mfu, model_flops_per_token, tokens_per_s_per_gpu, tokens_per_step
from zerosim.analysis.costs._validation_points import LONG_CONTEXT, POINTS, TREND, Point, config_of

__all__ = [
    "DEEPSPEED_FIGURE", "MuonStateBytes", "muon_state_bytes",
    "NCCL_RELEASE", "base_latency", "ring_latency", "step_latency",
    "EFFICIENCY", "LATENCY_US", "LINK_GB_S", "check_flag_range", "check_rate",
    "EFFICIENCY_PRESETS", "KERNEL_RATES", "Efficiency", "KernelRates", "parse_efficiency", "wave_efficiency",
    "Work", "loss_work", "unit_work", "FRAMEWORK", "mfu", "model_flops_per_token", "reserved", "fsdp2_peak",
    "TOKENS", "tokens_per_s_per_gpu", "tokens_per_step",
    "LONG_CONTEXT", "POINTS", "TREND", "Point", "config_of",
    "ALLOCATOR_RESERVE", "CUDA_CONTEXT", "DeepSpeedBuckets", "NCCL_BUFFERS", "deepspeed_bucket_bytes",
    "deepspeed_buckets",
    "measure_activations", "measure_by_stage", "measure_rank_activations", "measure_stage", "measure_tp_activations",
    "line_points", "memory_point", "parallel_model", "peak_rank", "pipeline_run", "positions_of", "stage_rows",
    "strategy_costs", "tensor_parallel",
    "GB",
    "GPU",
    "Retained", "SecondOrder", "lifetimes", "recompute_table", "second_order_memory", "seed001_p_multiply_adds",
    "GPUS",
    "HOSTS",
    "Host",
    "get_host",
    "host_fit",
    "host_link",
    "host_of",
    "Fit",
    "Overhead",
    "fit",
    "get_gpu",
    "preset_from_config",
    "runtime_overheads",
    "LINKS",
    "MEMORY_PRECISIONS",
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
    "cp_unit_work", "tp_unit_work", "weights",
]
