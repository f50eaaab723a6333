"""The flags `zerosim memory`, `timeline` and `plan` share: the model (a preset, a config.json, a parameter count or
a GPT shape), its micro-batch and checkpointing, and the GPU; the communication knobs and a DeepSpeed config are
cli/schedule_args.py's.

`setup(args)` reads them once into a `Workload` (zerosim.analysis.reports): the data-less model, the micro-batch, the
schedule, the precision and optimizer, the DeepSpeed config's settings where one is given (its values win over
defaults; a flag that contradicts it is an error, as the HF Trainer refuses a mismatch), and the GPU to judge the
memory against.
"""

from __future__ import annotations

import math

from zerosim.cli import choices
from zerosim.cli.schedule_args import comm_from_args, ds_config_from_args
from zerosim.cli.work_budget import check_refresh, check_units

ELEMENTWISE = choices.OPTIMIZERS  # every stage shards them all (Muon's matrices by its plans: parallel/data/muon)


def add_model_arguments(p, default_ranks: int = 64) -> None:
    """--params/--model/--config, --layers, --ranks, --optimizer, --precision, --unit (also `zerosim figures`)."""
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--params", type=float, default=None, help="Ψ, parameters, e.g. 7.5e9 (default: 7.5e9, the ZeRO paper's)"
    )
    which.add_argument(
        "--model",
        choices=choices.MODEL_PRESETS,
        default=None,
        help="a preset: a config shipped with zerosim (zerosim/models/hf/configs)",
    )
    which.add_argument(
        "--config",
        default=None,
        metavar="CONFIG.json",
        help="a model's Hugging Face config.json (llama, mistral, qwen2 or gpt2), read locally",
    )
    p.add_argument(
        "--layers",
        type=int,
        default=None,
        help="with --params: equal layers to split Ψ into (default 64); with --d-model: transformer blocks",
    )
    p.add_argument("--ranks", type=int, default=default_ranks, help=f"data-parallel ranks N (default {default_ranks})")
    p.add_argument("--optimizer", choices=ELEMENTWISE, default=None,
                   help="optimizer (default adam, K = 8 + 4 master; muon K = 4; muon_adamw: the reference's split)")
    p.add_argument("--precision", choices=choices.MEMORY_PRECISIONS, default=None,
                   help="mixed-precision preset (default fp16-mixed)")
    p.add_argument(
        "--unit",
        choices=("module", "block"),
        default=None,
        help="with --model/--config: gather/reduce unit, one module or one transformer block (default block)",
    )


def add_activation_arguments(p) -> None:
    """--seq-len, --batch, --checkpoint, --kernels, --loss and a GPT shape by hand (--d-model, --heads, --vocab)."""
    from zerosim.cli.efficiency_args import add_kernel_arguments

    act = p.add_argument_group(
        "activations (seed 001 §5-6)",
        "measured on zerosim's GPT or Llama at the model's "
        "shape: a --model or --config, or --d-model with --heads and --layers",
    )
    act.add_argument(
        "--seq-len", type=int, default=None, metavar="L", help="tokens per sequence: count activations too"
    )
    act.add_argument(
        "--batch",
        type=int,
        default=None,
        metavar="B",
        help="with --seq-len: sequences per micro-batch on each rank (default 1)",
    )
    act.add_argument(
        "--checkpoint",
        choices=choices.CHECKPOINTING,
        default=None,
        help="with --seq-len: the checkpointing strategy (default none); block-flash, subblock-flash and "
        "every-k-flash recompute with flash attention, op-sac is torchtitan's op-level selective checkpointing",
    )
    add_kernel_arguments(act)
    act.add_argument(
        "--d-model", type=int, default=None, metavar="D", help="with --seq-len: a GPT of this width (untied head)"
    )
    act.add_argument("--heads", type=int, default=None, metavar="H", help="with --d-model: attention heads")
    act.add_argument(
        "--vocab", type=int, default=None, metavar="V", help="with --d-model: vocabulary (default 50257, GPT-2's)"
    )


def add_gpu_arguments(p) -> None:
    """--gpu and --reserve: judge each rank's memory against a GPU (labelled estimates added)."""
    p.add_argument(
        "--gpu",
        choices=choices.GPUS,
        default=None,
        help="say whether a rank fits on this GPU and by how much (its driver-reported capacity)",
    )
    p.add_argument(
        "--reserve",
        type=float,
        default=None,  # None: ALLOCATOR_RESERVE; given without a --gpu verdict (nothing reads it) it is refused
        metavar="FRACTION",
        help=f"with --gpu: allocator reserve estimated as this fraction of the measured peak (default "
             f"{choices.ALLOCATOR_RESERVE})",
    )


def micro_batch_from_args(args) -> tuple | None:
    """(B, L) each rank's micro-batch when --seq-len asks for activations, else None (and no activation flag)."""
    L = getattr(args, "seq_len", None)
    if L is None:
        stray = [
            flag
            for flag, name in (
                ("--batch", "batch"),
                ("--checkpoint", "checkpoint"),
                ("--kernels", "kernels"),
                ("--loss", "loss"),
                ("--d-model", "d_model"),
                ("--heads", "heads"),
                ("--vocab", "vocab"),
            )
            if getattr(args, name, None) is not None
        ]
        if stray:
            raise ValueError(f"{', '.join(stray)} describe activations: add --seq-len L (tokens per sequence)")
        return None
    B = 1 if args.batch is None else args.batch
    if L < 1 or B < 1:
        raise ValueError(f"--seq-len and --batch must be at least 1, got {L} and {B}")
    if getattr(args, "no_step", False):
        raise ValueError("activations live during the step: --no-step skips it (drop --no-step or --seq-len)")
    return B, L


def config_from_args(args):
    """The DecoderConfig of --config or of a --model preset (None for --params and the ZeRO paper's 7.5B)."""
    from zerosim.analysis.costs import get_preset
    from zerosim.models.hf import read_hf_config

    if getattr(args, "config", None) is not None:
        return read_hf_config(args.config)
    return get_preset(args.model).config if args.model is not None else None


def decoder_from_args(args, config, seq_len: int):
    """The data-less GPT or Llama that the config (or --d-model/--heads/--layers/--vocab), --checkpoint, --kernels and
    --loss describe."""
    from zerosim.cli.efficiency_args import kernels_of, loss_of
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT, strategy_options
    from zerosim.models.llama import MetaLlama

    options = strategy_options(args.checkpoint or "none")
    if args.unit == "module":
        raise ValueError("activations are measured per transformer block: drop --unit module")
    if args.unit == "block" and options.get("unit") == "sublayer":
        raise ValueError(
            "--checkpoint subblock keeps the attention and FFN inputs apart, so its units are the two "
            "sub-blocks: drop --unit block"
        )
    if args.d_model is not None:
        if args.params is not None or args.model is not None or args.config is not None:
            raise ValueError("--d-model describes the model itself: drop --params / --model / --config")
        if args.heads is None or args.layers is None:
            raise ValueError("--d-model needs --heads (attention heads) and --layers (transformer blocks)")
        gpt = GPT(
            50257 if args.vocab is None else args.vocab, args.d_model, args.heads, args.layers, seq_len, **options
        )
        return MetaGPT(gpt, name=f"GPT d={args.d_model} H={args.heads} layers={args.layers} V={gpt.vocab}",
                       kernels=kernels_of(args), loss=loss_of(args))
    if args.heads is not None or args.vocab is not None:
        raise ValueError("--heads and --vocab go with --d-model (a --model or --config has its own)")
    if config is None:
        raise ValueError(
            "--seq-len needs a transformer shape: a --model preset, a --config, or --d-model/--heads/--layers; "
            "--params gives a parameter count only"
        )
    if seq_len > config.max_positions:
        what = "position table (n_positions)" if config.layout == "gpt2" else "max_position_embeddings"
        raise ValueError(
            f"--seq-len {seq_len} is longer than {config.name}'s {what} of {config.max_positions} tokens"
            + (" (rope scaling is not modelled)" if config.layout == "llama" else "")
        )
    twin = MetaLlama if config.layout == "llama" else MetaGPT
    return twin.from_config(config, seq_len, kernels=kernels_of(args), loss=loss_of(args), **options)


def _units(args, config) -> int:
    """The units the model will have, from its description alone: blocks plus the ends (embeddings, head)."""
    if getattr(args, "d_model", None) is not None:
        return (args.layers or 0) + 2  # (no --layers: refused with the shape's other flags)
    if config is None:  # --params: equal layers
        return 64 if args.layers is None else args.layers
    return config.n_layers + 3


def _model_words(args, config) -> str:
    if config is not None and getattr(args, "d_model", None) is None:
        return f"{config.name} ({config.n_layers:,} layers)"
    return f"--layers {args.layers}"


def model_from_args(args, config=None):
    """The data-less model the flags describe: MetaModel (--params, or a preset without --seq-len), or a MetaGPT /
    MetaLlama when --seq-len asks for activations. Fills the --optimizer/--precision defaults left unset."""
    from zerosim.analysis.costs import get_preset, preset_from_config
    from zerosim.cluster import check_world_size
    from zerosim.models.meta import MetaModel
    from zerosim.optim import OPTIMIZERS

    args.optimizer = args.optimizer or "adam"
    args.precision = args.precision or "fp16-mixed"
    for flag, value in (("--ranks", args.ranks), ("--layers", args.layers)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    if args.ranks is not None:
        check_world_size(args.ranks, "meta", "--ranks")  # the ranks the meta backend hosts in this process
    config = config_from_args(args) if config is None else config
    if args.layers is not None and getattr(args, "d_model", None) is None and (config is not None or args.model):
        raise ValueError(f"--layers sizes a --params model (or --d-model's blocks); {_model_words(args, config)} has "
                         "its own: drop --layers")
    check_units(_units(args, config), _model_words(args, config))  # before the twin is built: it takes its time
    micro = micro_batch_from_args(args)
    if micro is not None:
        return decoder_from_args(args, config, micro[1])
    matrix_optimizers = [name for name, cls in OPTIMIZERS.items() if not cls.elementwise]
    if args.optimizer in matrix_optimizers:  # a MetaModel knows parameter counts, not the matrices Muon needs
        raise ValueError(f"--optimizer {args.optimizer} orthogonalises each weight matrix, so it needs the model's "
                         "shapes: give --seq-len (and --model or --config) for the decoder's own units")
    if config is not None or args.model is not None:
        preset = preset_from_config(config) if config is not None else get_preset(args.model)
        return MetaModel.from_preset(preset, unit=args.unit or "block")
    if args.unit is not None:
        raise ValueError(
            "--unit chooses how a --model preset is cut into units; with --params the model is --layers equal layers"
        )
    params = 7.5e9 if args.params is None else args.params
    if not math.isfinite(params) or params != int(params) or params < 1:
        raise ValueError(f"--params must be a whole number of parameters >= 1, got {params!r}")
    from zerosim.models.hf import MAX_PARAMS  # here, not at import: a command's --help loads no NumPy

    if params > MAX_PARAMS:
        raise ValueError(f"--params {params:g} is more than {MAX_PARAMS:g} parameters, beyond any model trained so far")
    return MetaModel.from_params(int(params), layers=64 if args.layers is None else args.layers)


def setup(args):
    """Read every shared flag once into a Workload (see the module docstring)."""
    from zerosim.analysis.costs import ALLOCATOR_RESERVE, get_gpu
    from zerosim.analysis.reports import Workload
    from zerosim.cli.parallel_args import micro_batches_of

    config = config_from_args(args)
    ds = ds_config_from_args(args, config)  # its values win over defaults; a flag that contradicts it is an error
    model = model_from_args(args, config)
    reserve = getattr(args, "reserve", None)
    if reserve is not None and not 0 <= reserve < 1:
        raise ValueError(f"--reserve is a fraction of the measured peak in [0, 1), got {reserve!r}")
    if reserve is not None and getattr(args, "gpu", None) is None and not getattr(args, "sweep", False):
        raise ValueError("--reserve estimates the allocator's reserve in the verdict against a GPU, and without --gpu "
                         "there is none: add --gpu (e.g. h100-80gb), or drop --reserve")  # (a sweep judges its GPU)
    micro = micro_batch_from_args(args)
    comm = ds.comm if ds else comm_from_args(args)
    check_refresh(model.num_params, comm.allgather_bucket_size, "--allgather-bucket-size")  # (a DeepSpeed config's
    # allgather_bucket_size is ignored, as DeepSpeed ignores it: frameworks/deepspeed/_keys.py)
    return Workload(
        model,
        micro,
        comm,
        ds.precision if ds else args.precision,
        args.precision,
        args.optimizer,
        ds.accumulation_steps if ds else micro_batches_of(args),  # M: --accumulation-steps, beside --pp P
        ds.clip_grad if ds else None,
        config,
        ds,
        get_gpu(args.gpu) if getattr(args, "gpu", None) else None,
        reserve if reserve is not None else ALLOCATOR_RESERVE,
        (getattr(args, "checkpoint", None) or "none") if micro else None,
    )
