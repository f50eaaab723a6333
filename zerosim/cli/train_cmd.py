"""Train an MLP on a small synthetic task with any ZeRO stage, rank count, precision and optimizer.

Each rank gets its own micro-batch every step (drawn from a fixed pool made by a random teacher MLP,
so every backend sees the same data). Prints the mean loss as it goes, then per-rank peak memory and
bytes communicated. Under MPI: `mpiexec -n 4 zerosim train --backend mpi` (rank 0 prints).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from zerosim.precision import PRESETS, get_precision

HELP = "train an MLP on a synthetic task (stage, ranks, precision, optimizer, steps)"
OPTIMIZERS = ("adam", "adamw", "sgd", "lion", "adan", "muon")


def _widths(text: str) -> list:
    try:
        widths = [int(w) for w in text.split(",")]
    except ValueError:
        raise ValueError(f"--widths takes comma-separated layer sizes like 16,64,4; got {text!r}") from None
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"--widths needs at least an input and an output size, all >= 1; got {text!r}")
    return widths


def add_arguments(p) -> None:
    p.add_argument("--stage", type=int, choices=(0, 1, 2, 3), default=2, help="ZeRO stage (default 2)")
    p.add_argument("--ranks", type=int, default=None, help="simulated ranks (default 4; under MPI the process count)")
    p.add_argument("--backend", choices=("numpy", "mpi", "cupy"), default="numpy", help="where the ranks run (default numpy)")
    p.add_argument("--native", action="store_true",
                   help="with --backend mpi: MPI's own reduce-scatter (faster, but MPI picks the order of additions; fp32 only)")
    p.add_argument("--precision", choices=sorted(PRESETS), default="bf16-mixed", help="mixed-precision preset (default bf16-mixed)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="optimizer (default adam)")
    p.add_argument("--lr", type=float, default=1e-2, help="learning rate (default 1e-2)")
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--widths", default="16,64,64,4", help="MLP layer sizes, input first (default 16,64,64,4)")
    p.add_argument("--task", choices=("regression", "classification"), default="regression", help="synthetic task (default regression)")
    p.add_argument("--batch", type=int, default=16, help="samples per micro-batch, one micro-batch per rank (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed for the data and the initial weights (default 0)")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing")
    p.add_argument("--print-every", type=int, default=10, help="print the loss every N steps (default 10)")
    p.add_argument("--json", action="store_true", help="print the losses and statistics as JSON at the end")


def run(args) -> int:
    from tqdm import tqdm

    from zerosim.cluster import Cluster
    from zerosim.models import MLP
    from zerosim.models.data import make_classification, make_regression
    from zerosim.optim import get_optimizer
    from zerosim.zero import ZeroEngine

    widths = _widths(args.widths)
    if args.steps < 1 or args.batch < 1:
        raise ValueError("--steps and --batch must be positive")
    ranks = args.ranks
    if args.backend == "mpi" and ranks is None:
        from zerosim.backends.mpi import world_size_from_environment

        ranks = world_size_from_environment()
    ranks = 4 if ranks is None else ranks
    if args.print_every < 1 or args.seed < 0 or args.lr < 0:
        raise ValueError("--print-every must be >= 1, --seed >= 0 and --lr >= 0")
    if args.native and args.backend != "mpi":
        raise ValueError("--native chooses MPI's own collectives; it needs --backend mpi")
    if args.native and get_precision(args.precision).reduce_format.name not in ("fp32", "fp64"):
        raise ValueError("--native uses MPI's Reduce_scatter, which has no 16-bit types: add --precision fp32 or drop --native")
    options = {"native": True} if args.native else {}
    cluster = Cluster(ranks, backend=args.backend, trace="call", timeline=False, **options)
    talk = cluster.ranks[0].index == 0  # only global rank 0 prints

    rng = np.random.default_rng(args.seed)
    classify = args.task == "classification"
    model = MLP(widths, loss="xent" if classify else "mse")
    params = model.init_params(np.random.default_rng(args.seed + 1))
    pool_size = ranks * min(args.steps, 32)  # a fixed pool of micro-batches, cycled
    make = make_classification if classify else make_regression
    pool = make(rng, pool_size, args.batch, widths)
    engine = ZeroEngine(model, cluster, args.stage, get_optimizer(args.optimizer, lr=args.lr), args.precision,
                        checkpoint=args.checkpoint, params=params)
    if talk:
        print(f"zerosim train: MLP {widths} ({model.num_params} params), {args.task}, ZeRO stage {args.stage}, "
              f"{ranks} ranks on {args.backend}, {args.precision}, {args.optimizer} lr {args.lr}", flush=True)
    history = []
    bar = tqdm(range(1, args.steps + 1), disable=not talk or not sys.stderr.isatty(), desc="training", unit="step")
    for step in bar:
        base = ((step - 1) * ranks) % pool_size
        batches = [pool[base + r.index] for r in cluster.ranks]
        local = engine.step(batches)
        losses = [l for part in cluster.backend.all_meta([local]) for l in part] if cluster.local_size == 1 else local
        mean = float(np.mean(np.asarray(losses, dtype=np.float64)))
        history.append(mean)
        bar.set_postfix(loss=f"{mean:.6g}")
        if talk and not args.json and (step % args.print_every == 0 or step == 1 or step == args.steps):
            bar.write(f"step {step:>5}  loss {mean!r}") if not bar.disable else print(f"step {step:>5}  loss {mean!r}", flush=True)
    stats = cluster.backend.all_meta([
        {"rank": r.index, "peak_bytes": r.ledger.peak(), "peak_by_kind": r.ledger.peak_by_kind(), "bytes_sent": cluster.trace.bytes_sent(r.index)}
        for r in cluster.ranks
    ])
    if talk:
        if args.json:
            print(json.dumps({"losses": history, "ranks": stats}, indent=1))
        else:
            print("rank  peak memory (B)  bytes sent")
            for s in stats:
                print(f"{s['rank']:>4}  {s['peak_bytes']:>15}  {s['bytes_sent']:>10}")
    return 0
