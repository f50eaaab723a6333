"""Train an MLP, a small GPT or a small Llama on a synthetic task with any ZeRO stage, rank count, precision
and optimizer.

Each rank gets its own micro-batch every step (drawn from a fixed pool made by a random teacher MLP,
or of random strings a GPT or Llama learns to copy, reverse or sort, so every backend sees the same data).
Prints the mean loss as it goes (a decoder's answer accuracy on held-out strings too), then per-rank peak
memory and bytes communicated. Under MPI: `mpiexec -n 4 zerosim train --backend mpi` (rank 0 prints).

    zerosim train --model gpt --task reverse --stage 3 --ranks 2 --steps 150
    zerosim train --model llama --heads 4 --kv-heads 2 --stage 3 --ranks 2 --steps 60
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import sys

from zerosim.cli.precision_args import (
    add_precision_arguments,
    describe_precision_options,
    precision_from_arguments,
    precision_json,
    precision_summary,
    step_note,
)
from zerosim.cli.parallel_args import add_parallel_arguments, layout_of, spec_of
from zerosim.cli.choices import (MAX_SIMULATED_RANKS, OPTIMIZERS, PRECISION_PRESETS, SEQUENCE_TASKS, SHARDINGS,
                                 STAGES)

MLP_WIDTHS = "16,64,64,4"

HELP = "train an MLP, a GPT or a Llama on a synthetic task (stage, ranks, precision, optimizer, steps)"


def _widths(text: str) -> list:
    try:
        widths = [int(w) for w in text.split(",")]
    except ValueError:
        raise ValueError(f"--widths takes comma-separated layer sizes like 16,64,4; got {text!r}") from None
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"--widths needs at least an input and an output size, all >= 1; got {text!r}")
    return widths


GPT_FLAGS = {  # flag -> what it sets (TrainConfig's field of the same name)
    "--vocab": "V tokens: V - 1 symbols and the separator (default 6)",
    "--length": "string length n; sequences of 2n tokens (default 3)",
    "--d-model": "model width (default 16)",
    "--heads": "attention heads (default 2)",
    "--layers": "transformer blocks (default 1)",
    "--kv-heads": "Llama's key/value heads (grouped-query attention; default one per query head)",
}


def gpt_options(args) -> dict:
    """TrainConfig's GPT fields the command line set ({} for the MLP); refuses flags that do not go together."""
    given = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in (*GPT_FLAGS, "--attention")}
    given = {flag: value for flag, value in given.items() if value is not None}
    if args.model == "mlp":
        if given:
            raise ValueError(f"{', '.join(given)} describe the GPT or the Llama: add --model gpt or --model llama")
        return {}
    if args.widths != MLP_WIDTHS:
        name = "GPT" if args.model == "gpt" else "Llama"
        raise ValueError(f"--widths sizes the MLP; the {name}'s shape is --d-model, --heads, --layers "
                         "(--vocab, --length)")
    if "--kv-heads" in given and args.model != "llama":
        raise ValueError("--kv-heads sets the Llama's grouped-query attention: add --model llama")
    return {"model": args.model, "eval_every": args.print_every,
            **{flag[2:].replace("-", "_"): v for flag, v in given.items()}}


def add_arguments(p) -> None:
    """The flags of `zerosim train`, in --help's order."""
    _add_run_arguments(p)
    _add_output_arguments(p)
    _add_model_arguments(p)
    add_parallel_arguments(p)
    add_precision_arguments(p)
    from zerosim.cli.offload_args import add_offload_arguments

    add_offload_arguments(p, dpu=True, host=False)  # DeepSpeed's CPU Adam on the host, DPU (docs/offload.md)


def _add_run_arguments(p) -> None:
    """What runs: the stage, ranks, backend, precision, optimizer, data and steps (the MLP's widths among them)."""
    p.add_argument("--stage", type=int, choices=STAGES, default=None,
                   help="ZeRO stage (default 2; with --resume the saved stage, and a stage you give reshards)")
    p.add_argument("--ranks", type=int, default=None,
                   help=f"simulated ranks, 1..{MAX_SIMULATED_RANKS} (default 4; with --resume the saved count, and a "
                        "count you give reshards; under MPI the process count)")
    p.add_argument("--backend", choices=("numpy", "mpi", "cupy"), default="numpy", help="where the ranks run (default "
                                                                                        "numpy)")
    p.add_argument("--native", action="store_true",
                   help="with --backend mpi: MPI's own reduce-scatter (faster, but MPI picks the order of additions; "
                        "fp32 only)")
    p.add_argument("--precision", choices=PRECISION_PRESETS, default=None,
                   help="mixed-precision preset (default bf16-mixed; with --resume the saved policy)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default=None,
                   help="optimizer (default adam; with --resume the saved one); muon_adamw: Muon on the hidden "
                        "matrices, AdamW on the rest (the reference's split)")
    p.add_argument("--muon-sharding", choices=SHARDINGS, default=None,
                   help="how stages 1-3 bring Muon's matrices together (docs/muon.md): gather (every rank, the "
                        "default), owner (torchtitan's balanced owners), round_robin (muon.py's), distributed "
                        "(Moonshot's, flat shards)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default 1e-2; with --resume the saved one)")
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--widths", default=MLP_WIDTHS, help=f"MLP layer sizes, input first (default {MLP_WIDTHS})")
    p.add_argument("--task", choices=("regression", "classification", *SEQUENCE_TASKS), default=None,
                   help="synthetic task (default regression; with --model gpt: copy, reverse or sort, default copy)")
    p.add_argument("--batch", type=int, default=None,
                   help="samples per micro-batch (default 16; with --resume the saved one)")
    p.add_argument("--accumulation-steps", type=int, default=None,
                   help="K micro-batches per rank per step, gradients accumulated (default 1; with --resume the "
                        "saved K)")
    p.add_argument("--grad-accum", choices=("compute", "fp32"), default="compute",
                   help="format gradients accumulate in across micro-steps (default: the compute format)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for the data and the initial weights (default 0; with --resume the saved one)")
    p.add_argument("--ds-config", metavar="DS_CONFIG.json", default=None,
                   help="a DeepSpeed config: its stage, precision, loss scaling, micro-batch, accumulation steps, "
                        "clipping, optimizer and buckets, run with the gradient recipe DeepSpeed runs at that stage "
                        "(deepspeed-zero12, deepspeed-bf16-optimizer, deepspeed-zero3); a flag that contradicts it is "
                        "refused, and its \"auto\" values take the flags' (as the HF Trainer fills them)")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing")


def output_flags() -> dict:
    """{dest: flag} of what a run writes and prints (`_add_output_arguments`): the flags a command that takes train's
    flags but runs no run of its own (`zerosim diff`) refuses."""
    import argparse

    p = argparse.ArgumentParser(add_help=False)
    _add_output_arguments(p)
    return {a.dest: a.option_strings[0] for a in p._actions}


def _add_output_arguments(p) -> None:
    """What the run writes and prints: checkpoints (save, resume, overwrite), the trace log, the losses."""
    p.add_argument("--save", metavar="DIR", default=None,
                   help="save a sharded checkpoint into DIR at the end (and every --save-every steps); a step's folder "
                        "that a killed save left unfinished is cleaned and written anew")
    p.add_argument("--save-every", type=int, default=0, metavar="K", help="with --save: also save after every K steps")
    p.add_argument("--trace-log", metavar="FILE", default=None,
                   help="stream the whole trace log into FILE (one event a line, each call's sends below it); the run "
                        "itself keeps only its last steps' events, and every byte total")
    p.add_argument("--overwrite", action="store_true",
                   help="with --save: DIR holds another run's checkpoints; remove them (their tag folders and "
                        "DIR/latest; other files are kept) at this run's first save. Without it such a DIR is refused "
                        "before the first step")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="continue from the checkpoint in DIR (the tag its latest names, or the newest complete one; "
                        "a save that never finished is skipped); --steps counts from the start of the run. What you "
                        "leave out is the saved run's: stage, ranks, precision, optimizer, lr, K, and the data it "
                        "trains on (--seed, --batch, --task); --stage or --ranks reshards; another --precision, "
                        "--optimizer, --seed, --batch or --task is refused")
    p.add_argument("--print-every", type=int, default=10, help="print the loss every N steps (default 10)")
    p.add_argument("--json", action="store_true", help="print the losses and statistics as JSON at the end")


def _add_model_arguments(p) -> None:
    """--model gpt or llama, and their own flags, together in one group."""
    # -- --model gpt / llama: their own flags, together (defaults: zerosim.train.TrainConfig) ------------------
    g = p.add_argument_group("--model gpt or llama", "a small GPT or Llama learns to copy, reverse or sort strings "
                             "(--task); --checkpoint keeps each block's input and recomputes the block")
    g.add_argument("--model", choices=("mlp", "gpt", "llama"), default="mlp", help="the model (default mlp)")
    for flag, what in GPT_FLAGS.items():
        g.add_argument(flag, type=int, default=None, help=f"with --model gpt or llama: {what}")
    g.add_argument("--attention", choices=("standard", "selective", "flash"), default=None,
                   help="with --model gpt or llama: keep P, rebuild it from Q and K, or tile it away "
                        "(default standard)")


def run(args) -> int:
    from zerosim.progress import progress
    from zerosim.train import train

    config, precision = config_from_args(args)
    widths = list(config.widths)
    talk = _is_rank_zero(args.backend)  # only global rank 0 prints
    bar = progress(
        total=args.steps, desc="training", unit="step", enabled=talk and not args.json and sys.stderr.isatty()
    )
    out = _Printer(args, config, precision, widths, bar, talk and not args.json)
    result = train(config, out.on_step, out.on_start, out.on_eval, show_progress=False)  # its own bar, above
    bar.close()
    if talk:
        _print_result(args, config, precision, result)
    return 0


def config_from_args(args) -> tuple:
    """(the TrainConfig the parsed flags describe, its precision policy), every flag checked first: what `zerosim
    train` runs and what `zerosim diff` compares (each of its --a and --b parsed by this command's parser)."""
    if args.ds_config is not None and args.resume is not None:
        raise ValueError("--ds-config describes a new run; a resumed one keeps its checkpoint's settings: drop one")
    widths = _widths(args.widths)
    ranks = _check_run(args)
    return _train_config(args, widths, ranks)


def _check_run(args) -> int | None:
    """The ranks (--ranks, or MPI's world size), every flag that sizes the run checked first: the output paths
    before anything, so that no work runs (nor a resume reads its checkpoint) for a file that cannot be written."""
    from zerosim.outputs import check_file, check_folder, refuse_inside

    if args.save is not None:  # a place that can hold checkpoints (whose run owns it: checked before the first step)
        check_folder(args.save, "--save", checkpoint_ok=True)
    if args.trace_log is not None:  # never into a checkpoint, through a link, or into --save (zerosim/outputs.py)
        check_file(args.trace_log, "--trace-log")
        if args.save is not None:
            refuse_inside(args.trace_log, "--trace-log", args.save, "--save")
    for flag, value in (
        ("--steps", args.steps),
        ("--batch", args.batch),
        ("--accumulation-steps", args.accumulation_steps),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be at least 1, got {value}")
    ranks = args.ranks
    if ranks is not None and not 1 <= ranks <= MAX_SIMULATED_RANKS and args.backend == "numpy":
        raise ValueError(f"--ranks must be 1..{MAX_SIMULATED_RANKS}, got {ranks}: the numpy backend runs every rank in "
                         "this process, and a ring over N ranks moves N·(N-1) chunks per collective (zerosim memory "
                         "and zerosim timeline account more ranks on the meta backend)")
    if args.backend == "mpi" and ranks is None:
        from zerosim.backends.mpi import world_size_from_environment

        ranks = world_size_from_environment()
    for flag, value, ok, want in (("--print-every", args.print_every, args.print_every >= 1, ">= 1"),
                                  ("--save-every", args.save_every, args.save_every >= 0, ">= 0"),
                                  ("--seed", args.seed, args.seed is None or args.seed >= 0, ">= 0"),
                                  ("--lr", args.lr, args.lr is None or (math.isfinite(args.lr) and args.lr >= 0),
                                   "a finite number >= 0")):
        if not ok:
            raise ValueError(f"{flag} must be {want}, got {value}")
    if args.native and args.backend != "mpi":
        raise ValueError("--native chooses MPI's own collectives; it needs --backend mpi")
    # --tp, --sp, --tp-layout, --cp, --cp-style, --cp-split: checked by their names (a resumed run's GPUs, None here,
    # against its saved count where the run reads it)
    spec = spec_of(args, ranks)
    if spec.pp > 1:  # NOTE: PipelineEngine trains on real numbers (zerosim.parallel.pipeline); the trainer does not
        raise ValueError("--pp is not in `zerosim train` yet: the trainer's step, checkpoints, resume, loss scaler "
                         "and evaluation run the data-parallel engine; a pipeline trains on real numbers through the "
                         "Python API (zerosim.parallel.pipeline PipelineEngine, bit for bit against its oracle), and "
                         "`zerosim replay --pp 2` narrates one; `zerosim memory` and `zerosim timeline` take --pp")
    if spec.cp > 1 and args.model in ("gpt", "llama") and (args.attention or "standard") != "flash":
        raise ValueError("--cp runs attention as flash blocks, whose log-sum-exp the ring merges (Transformer "
                         "Engine disables its unfused attention with context parallelism): add --attention flash")
    if spec.cp > 1 and args.model in ("gpt", "llama"):
        from zerosim.parallel.context import check_length
        from zerosim.train import TrainConfig

        n = args.length if args.length is not None else TrainConfig.__dataclass_fields__["length"].default
        try:
            check_length(2 * n, spec.cp_split, spec.cp, spec.tp if spec.sp else 1)
        except ValueError as e:
            raise ValueError(f"--length {n} makes sequences of {2 * n} tokens, and {e}") from None
    return ranks


def _ds_config(args, ranks):
    """(the DeepSpeedRun --ds-config describes, its optimizer's hyperparameters besides lr), or None without one;
    checked against the flags, which then take its values (stage, optimizer, lr, batch, accumulation steps, clipping);
    its policy carries the recipe DeepSpeed runs at its stage."""
    if args.ds_config is None:
        return None
    from zerosim.cli.schedule_args import agree_with_config
    from zerosim.frameworks.deepspeed import TrainerArgs, read_ds_config

    trainer = TrainerArgs(per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.accumulation_steps,
                          max_grad_norm=args.clip_grad,
                          fp16=None if args.precision is None else args.precision == "fp16-mixed",
                          bf16=None if args.precision is None else args.precision == "bf16-mixed")
    ds = read_ds_config(args.ds_config, ranks, hidden_size(args), trainer)
    agree_with_config(args, ds)
    if ds.recipe is None:
        raise ValueError(f"{args.ds_config}: zero_optimization.stage 0 reduces through DeepSpeed's engine "
                         "(allreduce_gradients), which zerosim does not model as a gradient recipe: --ds-config runs "
                         "stages 1, 2 and 3")
    if ds.offload is not None:
        raise ValueError(f"{args.ds_config}: its offload keys are read by `zerosim memory`; zerosim train --ds-config "
                         "runs without offload (drop offload_optimizer / offload_param)")
    args.stage, args.optimizer, args.batch = ds.stage, ds.optimizer, ds.micro_batch
    args.accumulation_steps, args.clip_grad = ds.accumulation_steps, ds.clip_grad
    args.lr, options = _ds_optimizer(args, ds)
    return dataclasses.replace(ds, precision=ds.precision.with_(reduction=ds.recipe)), options


def hidden_size(args) -> int:
    """The model's hidden size, which the HF Trainer's "auto" bucket sizes are made of: the decoder's d_model, the MLP's
    widest layer."""
    from zerosim.train import TrainConfig

    if args.model != "mlp":
        return args.d_model if args.d_model is not None else TrainConfig.__dataclass_fields__["d_model"].default
    return max(_widths(args.widths))


# optimizer.params keys train --ds-config reads (the rest of DeepSpeed's, e.g. torch_adam, are refused by name)
DS_OPTIMIZER_PARAMS = ("lr", "betas", "eps", "weight_decay")


def _ds_optimizer(args, ds) -> tuple:
    """(lr, the other hyperparameters) of the DeepSpeed config's optimizer: its params ("auto": the flag's, as the
    HF Trainer fills them), and DeepSpeed's FusedAdam operation order for Adam and AdamW (optim/_adam.py's
    "deepspeed")."""
    params = {k: v for k, v in ds.optimizer_params if v != "auto"}
    unread = sorted(set(params) - set(DS_OPTIMIZER_PARAMS))
    if unread:
        raise ValueError(f"{args.ds_config}: optimizer.params.{unread[0]} is not read by zerosim train (it reads "
                         f"{', '.join(DS_OPTIMIZER_PARAMS)}): remove it")
    lr = params.pop("lr", None)
    if lr is not None and args.lr is not None and lr != args.lr:
        raise ValueError(f"the flags disagree with the DeepSpeed config: --lr {args.lr:g} vs optimizer.params.lr {lr:g}"
                         ' (set the config\'s value to "auto" to take the flag, as with the HF Trainer)')
    options = {k: tuple(v) if k == "betas" else v for k, v in params.items()}
    if ds.optimizer in ("adam", "adamw"):
        options["formula"] = "deepspeed"
    return (lr if lr is not None else args.lr), options


def _train_config(args, widths: list, ranks) -> tuple:
    """(the TrainConfig the flags describe, its precision policy): a resumed run's saved settings, else defaults."""
    from zerosim.precision import get_precision
    from zerosim.train import TrainConfig, run_defaults

    defaults = run_defaults(args.resume)  # the saved run's settings when resuming (the resume rule), else the defaults
    ds, options = _ds_config(args, ranks if ranks is not None else defaults["ranks"]) or (None, {})  # a DeepSpeed
    precision = ds.precision if ds is not None else get_precision(args.precision or defaults["precision"])  # config
    if args.native and precision.reduce_format.name not in ("fp32", "fp64"):
        raise ValueError("--native uses MPI's Reduce_scatter, which has no 16-bit types: add --precision fp32 or drop "
                         "--native")
    if args.grad_accum == "fp32":
        precision = precision.with_(grad_accum="fp32")
    precision = precision_from_arguments(args, precision)
    from zerosim.cli.offload_args import train_offload

    offload = train_offload(args, args.stage if args.stage is not None else defaults["stage"])
    config = TrainConfig(widths=tuple(widths), task=args.task, stage=args.stage, ranks=ranks, backend=args.backend,
                         backend_options={"native": True} if args.native else {}, precision=precision,
                         optimizer=args.optimizer, muon_sharding=args.muon_sharding, lr=args.lr, steps=args.steps,
                         batch=args.batch, comm=None if ds is None else ds.comm,
                         optimizer_options=options,
                         accumulation_steps=args.accumulation_steps, seed=args.seed, checkpoint=args.checkpoint,
                         save=args.save, save_every=args.save_every, resume=args.resume, clip_grad=args.clip_grad,
                         trace_log=args.trace_log, overwrite=args.overwrite, offload=offload,
                         sp=args.sp, tp_layout=layout_of(args), **gpt_options(args),
                         **{name: value for name in ("tp", "cp", "cp_style", "cp_split")  # unset: TrainConfig's
                            if (value := getattr(args, name)) is not None})
    return config, precision


class _Printer:
    """What a run says as it goes (rank 0, without --json): the header, each printed step, the held-out accuracy."""

    def __init__(self, args, config, precision, widths, bar, talk: bool):
        self.args, self.config, self.precision, self.widths, self.bar, self.talk = (args, config, precision, widths,
                                                                                     bar, talk)
        self.first = 1

    def on_start(self, params, first_step):
        args, config = self.args, self.config
        self.first = first_step
        self.bar.reset(total=args.steps - first_step + 1)
        if self.talk:
            k = config.accumulation_steps
            accum = f", {k} micro-batches per rank per step" if k > 1 else ""
            kv = f", kv_heads={config.kv_heads or config.heads}" if config.model == "llama" else ""
            what = (f"{'GPT' if config.model == 'gpt' else 'Llama'}(vocab={config.vocab}, d_model={config.d_model}, "
                    f"heads={config.heads}{kv}, layers={config.layers})" if config.model != "mlp" else
                    f"MLP {self.widths}")
            dp = config.ranks // (config.tp * config.cp)
            tp = "" if config.tp == 1 and config.cp == 1 else (
                " = " + "".join(f"{n} {d} x " for n, d in (("tp", config.tp), ("cp", config.cp)) if d > 1)
                + f"dp {dp}" + (" (sequence parallel)" if config.sp else "")
                + (f" ({config.cp_style}, {config.cp_split} split)" if config.cp > 1 else ""))
            what += _padded_words(config)
            print(f"zerosim train: {what} ({params:,} params), {config.task}, ZeRO stage {config.stage}, "
                  f"{config.ranks} ranks{tp} on {args.backend}, {_precision_name(config.precision)}, "
                  f"{config.optimizer} lr "
                  f"{config.lr}{accum}"
                  + describe_precision_options(args, self.precision) + _offload_words(config)
                  + (f", resumed from {args.resume} at step {first_step - 1}" if args.resume else ""), flush=True)

    def on_step(self, step, mean, info):
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{mean:.6g}")
        every = self.args.print_every
        if self.talk and (step % every == 0 or step == self.first or step == self.args.steps or info.skipped):
            self.write(f"step {step:>5}  loss {mean:.6g}" + step_note(self.precision, info))  # --json: every bit

    def on_eval(self, step, accuracy):  # --model gpt: on the steps the loss is printed at
        if self.talk:
            self.write(f"step {step:>5}  answer accuracy {accuracy:.3f} on held-out strings "
                       f"(chance {1 / (self.config.vocab - 1):.3f})")

    def write(self, line: str) -> None:
        self.bar.write(line) if not self.bar.disable else print(line, flush=True)


def _print_result(args, config, precision, result) -> None:
    """The losses as JSON, or the loss scale's summary and each rank's peak memory and bytes sent."""
    if args.json:
        gpt = {"accuracy": result.accuracy, "chance": result.chance} if config.model != "mlp" else {}
        print(json.dumps({"first_step": result.first_step, "losses": result.losses, "ranks": result.ranks, **gpt,
                          **precision_json(precision, result), "saved": result.saved}, indent=1))
        return
    summary = precision_summary(precision, result)
    if summary:
        print(summary)
    host = config.offload is not None  # the host's peak beside the device's
    print("rank  peak memory (B)  bytes sent" + ("  host peak (B)" if host else ""))
    for s in result.ranks:
        print(f"{s['rank']:>4}  {s['peak_bytes']:>15,}  {s['bytes_sent']:>10,}"
              + (f"  {s['host_peak_bytes']:>13,}" if host else ""))
    if result.saved:
        print(_saved_words(args.save, result.saved))


def _saved_words(folder: str, saved: list) -> str:
    """Where a run's checkpoints went (`saved`: the folders `checkpoint.save` returned, oldest first; a long run's
    middle left out), and on a line of its own the command that reads them."""
    from zerosim.prose import wrap

    tags = [os.path.basename(os.path.normpath(path)) for path in saved]
    shown = ", ".join(tags if len(tags) <= 3 else [tags[0], tags[1], "...", tags[-1]])
    count = "a checkpoint" if len(tags) == 1 else f"{len(tags):,} checkpoints"
    quoted = shlex.quote(folder)
    words = wrap(f"saved {count} into {quoted}: {shown} (the latest); --resume {quoted} continues the run", "  ")
    return "\n".join([*words, f"  zerosim checkpoint inspect {quoted}"])


def _offload_words(config) -> str:
    """The header's words for an offloaded run ("" without offload)."""
    offload = config.offload
    if offload is None:
        return ""
    return (f", offloaded: {offload.placement.name}"
            + (f" with DPU after {offload.dpu_warmup} steps" if offload.dpu else "")
            + (f" ({config.optimizer} as DeepSpeedCPUAdam)" if offload.placement.framework == "deepspeed"
               and config.optimizer in ("adam", "adamw") else ""))


def _precision_name(precision) -> str:
    """A preset's name when the policy is one (its options are described apart), else its fields."""
    from zerosim.precision import PRESETS, get_precision

    base = get_precision(precision)
    for name, preset in PRESETS.items():
        if preset == base.with_(loss_scale=preset.loss_scale, loss_scale_options=preset.loss_scale_options,
                                reduction=preset.reduction, allreduce=preset.allreduce, grad_accum=preset.grad_accum,
                                optim_state=preset.optim_state):
            return name
    return repr(base)


def _is_rank_zero(backend: str) -> bool:
    if backend != "mpi":
        return True
    from zerosim.backends.mpi import world_rank_from_environment

    return world_rank_from_environment() == 0


def _padded_words(config) -> str:
    """Beside TP, the vocabulary the run trains when Megatron's padding changes it (the header says what runs)."""
    if config.tp == 1 or config.model == "mlp":
        return ""
    from zerosim.parallel.tensor import padded_vocab

    padded = padded_vocab(config.vocab, config.tp) if config.vocab % config.tp else config.vocab
    return "" if padded == config.vocab else (f", its vocabulary of {config.vocab} padded to {padded:,} as Megatron "
                                              f"pads it over tp {config.tp} (rows no data uses)")
