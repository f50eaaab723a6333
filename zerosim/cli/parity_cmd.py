"""Check zerosim against real torch on N gloo processes, bit for bit, step by step.

    zerosim parity                              DDP's gradient reduction: 3 ranks, 20 steps of MLP 16-32-8
    zerosim parity --optimizer zero1            DDP + ZeroRedundancyOptimizer(Adam) against zerosim's ZeRO-1
    zerosim parity --fsdp bf16-fp32             FSDP2 fully_shard, bf16 params, fp32 reduce_dtype
    zerosim parity --fsdp fp32 bf16 --ranks 4   several FSDP2 settings in one run
    zerosim parity --optimizer zero1 --grads zerosim   zerosim's own forward/backward: the fractions that differ

torch (the `parity` extra, a CPU build is enough) trains the MLP on N CPU processes joined by gloo. By default each
rank's local gradients are torch's own (an undistributed twin with the same weights), so what is compared is the
reduction and the update: zerosim's recipe on gloo's order (`--reduction ring`: zerosim's own ring instead) and,
with Adam, torch's CPU sqrt substituted (`--sqrt zerosim`: zerosim's correctly rounded one). Each line: the
fraction of elements (gradients for DDP, parameters after the step otherwise) whose bits equal torch's, the
largest difference in fp32 ulps, and the cause of a difference: the first stage of the step that differed.
"""

from __future__ import annotations

HELP = "compare zerosim with real torch (DDP, ZeroRedundancyOptimizer, FSDP2) on N gloo processes (needs torch)"
FSDP_SETTINGS = ("fp32", "bf16-fp32", "bf16")  # zerosim/frameworks/torch/_fsdp.py: CONFIGS (imported only with torch)


def add_arguments(p) -> None:
    p.add_argument("--ranks", type=int, default=3, metavar="N", help="torch processes (default 3)")
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--widths", type=int, nargs="+", default=[16, 32, 8], metavar="W",
                   help="the MLP's layer widths (default 16 32 8)")
    p.add_argument("--seed", type=int, default=0, help="weights and batches (default 0)")
    p.add_argument("--optimizer", choices=("ddp", "zero1"), default="ddp",
                   help="ddp: DDP's reduced gradients (SGD); zero1: DDP + ZeroRedundancyOptimizer(Adam), the "
                        "parameters after each step (default ddp)")
    p.add_argument("--fsdp", nargs="+", choices=FSDP_SETTINGS, metavar="SETTING",
                   help="FSDP2 fully_shard instead of DDP, in these settings: fp32, bf16-fp32 (bf16 params, fp32 "
                        "reduce_dtype), bf16 (both bf16)")
    p.add_argument("--grads", choices=("torch", "zerosim"), default="torch",
                   help="whose local gradients: torch's (default; matmul order out of the comparison) or "
                        "zerosim's own forward/backward")
    p.add_argument("--sqrt", choices=("torch", "zerosim"), default="torch",
                   help="Adam's sqrt: torch's CPU sqrt substituted (default) or zerosim's correctly rounded one")
    p.add_argument("--reduction", choices=("gloo", "ring"), default="gloo",
                   help="DDP's all-reduce in zerosim: gloo's order (default) or zerosim's ring")


def _check(args) -> None:
    if args.ranks < 1 or args.ranks > 16:
        raise ValueError(f"--ranks must be between 1 and 16 (one CPU process each), got {args.ranks}")
    if args.steps < 1:  # before torch is looked for: the flags' names, not the kit's arguments'
        raise ValueError(f"--steps must be at least 1, got {args.steps}")
    if len(args.widths) < 2 or min(args.widths) < 1:
        raise ValueError(f"--widths takes at least two positive layer widths, got {' '.join(map(str, args.widths))}")
    if args.fsdp and args.optimizer != "ddp":
        raise ValueError("--fsdp and --optimizer zero1 are two different runs: pick one")
    if args.fsdp and args.reduction != "gloo":
        raise ValueError("--reduction ring is for DDP's all-reduce; FSDP2's reduce-scatter runs gloo's order")
    plain = args.optimizer == "ddp" and not args.fsdp
    if plain and (args.grads, args.sqrt) != ("torch", "torch"):
        raise ValueError("--grads and --sqrt need --optimizer zero1 or --fsdp (DDP's comparison is of the "
                         "reduced gradients, from torch's own local gradients)")


def run(args) -> int:
    from zerosim.frameworks.torch import TorchMissing

    _check(args)
    try:
        if args.optimizer == "ddp" and not args.fsdp:
            return _ddp(args)
        return _kits(args)
    except TorchMissing as e:
        raise ImportError(str(e)) from None


def _ddp(args) -> int:
    from zerosim.frameworks.torch import compare_ddp, run_torch_ddp

    ranks = run_torch_ddp(args.ranks, args.widths, args.steps, args.seed)
    gloo, ring = compare_ddp(ranks, "gloo"), compare_ddp(ranks, "ring")
    buckets = ranks[0]["layouts"][1]
    order = ", ".join(f"{name}@{off}" for name, _, off, _ in sorted(buckets, key=lambda x: (x[1], x[2])))
    print(f"torch DDP on {args.ranks} gloo processes, MLP {'-'.join(map(str, args.widths))}, fp32, "
          f"{args.steps} steps")
    print(f"DDP's buckets after the rebuild (parameter@offset, gradient-ready order): {order}")
    print(f"{'step':>4}  {'gloo: equal':>11}  {'max ulps':>8}  {'ring: equal':>11}  {'max ulps':>8}")
    for g, r in zip(gloo, ring):
        print(f"{g.step:>4}  {g.equal:>11.2%}  {g.max_ulps:>8}  {r.equal:>11.2%}  {r.max_ulps:>8}")
    every = all(g.equal == 1.0 for g in gloo)
    print(("gloo: every step bit for bit equal to torch's" if every else "gloo: some steps differ from torch's")
          + "; the ring differs where its order is not gloo's (N >= 4, or its shards are not gloo's segments)")
    return 0 if every else 1


def _kits(args) -> int:
    from zerosim.frameworks.torch import compare_fsdp, compare_zero1, ranks_of, run_torch_kits

    zero1 = args.optimizer == "zero1"
    ranks = run_torch_kits(args.ranks, args.widths, args.steps, args.seed, zero1=zero1, fsdp=tuple(args.fsdp or ()))
    runs = {}
    if zero1:
        runs["DDP + ZeroRedundancyOptimizer(Adam) vs zerosim's ZeRO-1 (`ddp` recipe)"] = compare_zero1(
            ranks_of(ranks, "zero1"), args.widths, args.grads, args.sqrt, args.reduction)
    for setting in args.fsdp or ():
        runs[f"FSDP2 fully_shard {setting} + Adam vs zerosim's `fsdp2` recipe"] = compare_fsdp(
            ranks_of(ranks, "fsdp"), args.widths, setting, args.grads, args.sqrt)
    print(f"torch on {args.ranks} gloo processes, MLP {'-'.join(map(str, args.widths))}, {args.steps} steps, "
          f"parameters compared after each step")
    print(f"local gradients: {args.grads}'s; Adam's sqrt: {args.sqrt}'s; DDP's all-reduce in zerosim: "
          f"{args.reduction}'s order" if zero1 else f"local gradients: {args.grads}'s; Adam's sqrt: {args.sqrt}'s")
    causes = {}
    for title, steps in runs.items():
        print(title)
        print(f"{'step':>4}  {'equal':>8}  {'max ulps':>8}  cause")
        for s in steps:
            print(f"{s.step:>4}  {s.equal:>8.2%}  {s.max_ulps:>8}  {s.cause or '-'}")
            if s.cause:
                causes[s.cause] = s.reason
    for key, reason in causes.items():
        print(f"{key}: {reason}")
    exact = all(s.equal == 1.0 for steps in runs.values() for s in steps)
    expected = (args.grads, args.sqrt, args.reduction) == ("torch", "torch", "gloo")
    print("every step bit for bit equal to torch's" if exact else "some steps differ from torch's (causes above)")
    return 1 if expected and not exact else 0
