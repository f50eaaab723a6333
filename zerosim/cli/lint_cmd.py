"""Name the silent numerics traps in a training configuration: each finding with the framework release, file and
function that makes it, a user thread that hit it, and what to expect — measured on the simulator where zerosim can
train the trap beside its way out.

    zerosim lint --precision fp16-mixed --accumulation-steps 8
    zerosim lint --ds-config ds_config.json --ranks 8 --json
    zerosim lint --optim-state bf16 --measure 20

The flags are `zerosim train`'s (read by its own parser); a DeepSpeed config (--ds-config) is linted as DeepSpeed runs
it, its stage and optimizer included. --measure S trains each trap zerosim can run beside its way out for S steps
(default 5; 0: none) with `zerosim diff`.
"""

from __future__ import annotations

import json

from zerosim.cli.given import given

HELP = "name the silent numerics traps in a training configuration, each with its framework source and a user thread"

MEASURE = 5  # steps each measured trap trains beside its way out
UNREAD = ("steps", "print_every", "save", "save_every", "trace_log", "overwrite")  # train's run flags, not read here


def add_arguments(p) -> None:
    from zerosim.cli import train_cmd

    train_cmd.add_arguments(p)  # train's flags, --json and --ds-config among them, mean what they mean there
    # the run's own flags lint does not read (a measured trap trains its own steps and writes nothing): None here, so
    # that one given is seen and refused; train's defaults kept for the configuration it lints
    p.set_defaults(train_defaults={f: p.get_default(f) for f in UNREAD},
                   **{f: None for f in UNREAD})
    p.add_argument("--measure", type=int, default=MEASURE, metavar="STEPS",
                   help=f"train each trap beside its way out for STEPS steps and say how far apart they end (default "
                        f"{MEASURE}; 0: do not train)")


def run(args) -> int:
    from zerosim.lint import lint

    if args.measure < 0:
        raise ValueError(f"--measure must be 0 or more steps, got {args.measure}")
    unread = [f"--{f.replace('_', '-')}" for f in UNREAD if given(getattr(args, f))]
    if unread:  # was: accepted and dropped, a --save or --trace-log never written (a walk over lint's flags)
        raise ValueError(f"{', '.join(unread)}: lint trains no run of its own to save, log or print; each measured "
                         "trap trains --measure S steps beside its way out and writes nothing: drop "
                         f"{'it' if len(unread) == 1 else 'them'} (or run zerosim train)")
    for f, v in args.train_defaults.items():  # the configuration linted is train's with its defaults
        setattr(args, f, v)
    config, ds = _configuration(args)
    findings = lint(config, ds, measure=args.measure if config is not None else 0)
    if args.json:
        print(json.dumps([f.as_json() for f in findings], indent=1))
        return 0
    if not findings:
        print("zerosim lint: no known trap in this configuration")
    from zerosim.prose import wrap

    for f in findings:  # each finding's words wrapped at the page's width, the lines under its first indented
        lines = wrap(f"{f.severity}: {f.rule}: {f.message}", "  ") + wrap(f"  made by: {f.source}", "    ")
        lines += wrap(f"  seen in: {f.thread}", "    ")
        lines += [] if f.measured is None else wrap("  measured: " + _measured(f.measured), "    ")
        print("\n".join(lines))
    return 0


def _configuration(args) -> tuple:
    """(the TrainConfig the flags describe, or None where train cannot run them; the DeepSpeedRun of --ds-config, or
    None): a DeepSpeed config is linted as DeepSpeed runs it even where zerosim train refuses to run it (stage 0)."""
    from zerosim.cli import train_cmd

    ds = None
    if args.ds_config is not None:
        from zerosim.frameworks.deepspeed import TrainerArgs, read_ds_config
        from zerosim.train import run_defaults

        ranks = args.ranks if args.ranks is not None else run_defaults(args.resume)["ranks"]  # as train reads it
        ds = read_ds_config(args.ds_config, ranks, train_cmd.hidden_size(args),
                            TrainerArgs(per_device_train_batch_size=args.batch,
                                        gradient_accumulation_steps=args.accumulation_steps,
                                        max_grad_norm=args.clip_grad))
    try:
        config = train_cmd.config_from_args(args)[0]
    except ValueError:
        if ds is None:
            raise
        config = None  # train does not run this DeepSpeed config; its traps are read from the config alone
    if config is not None:
        config = _steps(config)
    return config, ds


def _steps(config):
    import dataclasses

    # measured runs set their own steps, and write nothing
    return dataclasses.replace(config, steps=1, save=None, save_every=0, overwrite=False, trace_log=None)


def _measured(m: dict) -> str:
    if "not run" in m:
        return f"not run ({m['not run']})"
    where = f"; they part at {m['first_parting']}" if m["first_parting"] else "; no bit parts"
    return (f"after {m['steps']} steps the trap and its way out are {m['apart']:.2e} apart (relative L2 of the weights)"
            f", {m['trap_to_float64']:.2e} and {m['fixed_to_float64']:.2e} from float64{where}")
