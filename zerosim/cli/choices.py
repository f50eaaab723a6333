"""The names and numbers a command's parser shows (its choices, the defaults its help quotes) that a library table
defines, written here so that `zerosim <command> --help`, and reading a command's arguments, import no machinery
(NumPy, the engines, the models): the command's run imports those (issue 41: commands that start at once).

Each is a copy of the table named beside it, in its order; tests/test_cli_choices.py keeps every one equal to its
table, so a name added there and not here fails a test, not a user. tests/test_import_graph.py keeps the parsers
this light.
"""

from __future__ import annotations

# zerosim.analysis.costs: sorted(PRESETS) (`memory`, `timeline`, `figures` --model) and the ones with a config
# (`plan` --model); tuple(GPUS); ALLOCATOR_RESERVE; tuple(HOSTS); sorted(LINKS); tuple(MEMORY_PRECISIONS)
MODEL_PRESETS = ("gpt2-large", "gpt2-medium", "gpt2-small", "gpt2-xl", "gpt3-175b", "gpt3-6.7b", "llama-2-13b",
                 "llama-2-70b", "llama-2-7b", "llama-3-70b", "llama-3-8b", "llama-7b", "mistral-7b", "qwen2.5-7b",
                 "zero-paper-7.5b")
CONFIG_PRESETS = tuple(name for name in MODEL_PRESETS if name != "zero-paper-7.5b")  # zero-paper-7.5b: Ψ alone
GPUS = ("rtx3090", "a100-40gb", "a100-80gb", "h100-80gb", "h100-hbm2e", "v100-32gb", "h200")
ALLOCATOR_RESERVE = 0.05
HOSTS = ("dgx-2", "dgx-a100-320gb", "dgx-a100", "dgx-h100", "dgx-h200")
MEMORY_PRECISIONS = ("fp16-mixed", "bf16-mixed", "fp32")
LINKS = ("100gbe", "ib_hdr", "ib_ndr", "nvlink2", "nvlink3", "nvlink4", "nvme", "pcie3", "pcie4", "pcie5")
# zerosim.analysis.timeline: sorted(DEVICES)
DEVICES = ("a100", "a100-40gb", "h100", "h100-hbm2e", "h200", "rtx3090", "v100")
# zerosim.optim: tuple(OPTIMIZERS) (in their table's order), SHARDINGS
OPTIMIZERS = ("adam", "adamw", "sgd", "lion", "adan", "muon", "muon_adamw")
SHARDINGS = ("gather", "owner", "round_robin", "distributed")
# zerosim.models.gpt: tuple(ALL_STRATEGIES); zerosim.models.meta: LOSSES; zerosim.models.data: TASKS
CHECKPOINTING = ("none", "block", "subblock", "selective", "every-k", "flash", "block-flash", "subblock-flash",
                 "every-k-flash", "op-sac")
LOSSES = ("probabilities", "eager", "chunked", "fused-linear")
# zerosim.parallel.tensor: tuple(LAYOUTS)
TP_LAYOUTS = ("megatron", "torchtitan")
SEQUENCE_TASKS = ("copy", "reverse", "sort")
# zerosim.precision: sorted(PRESETS), REDUCTIONS, ALLREDUCES, OPTIM_STATES; zerosim.precision.quantize: FP8_RECIPES
PRECISION_PRESETS = ("bf16-mixed", "bf16-pure", "bf16-pure-sr", "fp16-mixed", "fp16-pure", "fp16-pure-sr", "fp32",
                     "fp64")
REDUCTIONS = ("seeds", "ddp", "deepspeed-zero12", "deepspeed-zero12-reduce", "deepspeed-bf16-optimizer",
              "deepspeed-zero3", "fsdp2")
ALLREDUCES = ("ring", "nccl", "gloo")
OPTIM_STATES = ("fp32", "fp16", "bf16")
FP8_RECIPES = ("torchao", "torchao-amax_to_scale", "delayed", "current", "mxfp8")
# zerosim.parallel.data: STAGES; STRATEGIES in order, with the releases some lack ("mics (DeepSpeed <= 0.19.6)")
STAGES = (0, 1, 2, 3)
MESH_STRATEGIES = ("full_shard", "no_reshard", "reshard_to_group", "hpz", "no_reshard_no_sync", "hsdp", "hsdp_no_sync",
                   "mics (DeepSpeed <= 0.19.6)", "mics_hierarchical (DeepSpeed <= 0.19.6)")
# zerosim.train: MAX_SIMULATED_RANKS; zerosim.replay: MAX_STEPS
MAX_SIMULATED_RANKS = 4096
MAX_REPLAY_STEPS = 1000
SEED_LR = 0.1
# zerosim.teaching.exercises: list(EXERCISES)
EXERCISES = ("ring_chunk", "shard_offset", "stage2_free", "refresh_params", "average_dtype", "unscale_once")
# zerosim.parallel.context: STYLES; SPLITS with the default (zigzag) first; zerosim.replay: the styles whose merge
# `replay --cp` tells (CP_STYLES); zerosim.parallel.pipeline: SCHEDULES, RULES
CP_STYLES = ("ring", "allgather", "torch")
CP_SPLITS = ("zigzag", "contiguous")
REPLAY_CP_STYLES = ("ring", "torch")
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble")
PP_SPLITS = ("torchtitan", "megatron")
