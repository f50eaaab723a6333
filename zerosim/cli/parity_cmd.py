"""Check zerosim against real torch: DDP's gradient reduction on N gloo processes, bit for bit, step by step.

    zerosim parity                         3 ranks, 20 steps of MLP 16-32-8 (needs torch: the `parity` extra)
    zerosim parity --ranks 4 --steps 5     another world size, fewer steps
    zerosim parity --widths 64 128 10      another MLP

torch trains the MLP under DistributedDataParallel (its defaults) on N CPU processes joined by gloo; each step
every rank's local gradients (from an undistributed twin with the same weights) go through zerosim's `ddp`
recipe on DDP's own buckets, once with gloo's all-reduce and once with zerosim's ring. Each line: the fraction
of gradient elements whose bits equal DDP's reduced `param.grad`, and the largest difference in fp32 ulps.
What is compared is the reduction only: the local gradients are torch's own (so matmul order is out of it).
"""

from __future__ import annotations

HELP = "compare zerosim's DDP reduction with real torch on N gloo processes, bit for bit (needs torch)"


def add_arguments(p) -> None:
    p.add_argument("--ranks", type=int, default=3, metavar="N", help="torch processes (default 3)")
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--widths", type=int, nargs="+", default=[16, 32, 8], metavar="W",
                   help="the MLP's layer widths (default 16 32 8)")
    p.add_argument("--seed", type=int, default=0, help="weights and batches (default 0)")


def run(args) -> int:
    from zerosim.parity import TorchMissing
    from zerosim.parity.ddp import compare_ddp, run_torch_ddp

    if args.ranks < 1 or args.ranks > 16:
        raise ValueError(f"--ranks must be between 1 and 16 (one CPU process each), got {args.ranks}")
    try:
        ranks = run_torch_ddp(args.ranks, args.widths, args.steps, args.seed)
    except TorchMissing as e:
        raise ImportError(str(e)) from None
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
