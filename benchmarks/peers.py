"""zerosim's N ranks in one process against torch's N gloo processes on the same machine, step for step.

    zerosim ZeRO-1 (fp32, Adam)        ÷ torch DDP + ZeroRedundancyOptimizer(Adam), fp32
    zerosim ZeRO-3 (fp32 / bf16-mixed) ÷ torch FSDP2 (fully_shard per Linear and the root; MixedPrecisionPolicy
                                         param_dtype=bfloat16 for the bf16 row)

The same MLP (Linear + ReLU, MSE loss), the same batch per rank, Adam(lr=1e-3). zerosim runs
`Cluster(N, workers="auto", trace="call", timeline=False)`: its ranks' compute and updates on a thread per
core (cluster/_pool.py); torch runs N processes (`torch.set_num_threads(1)` each, gloo over loopback), as
`torchrun --nproc-per-node N` would. Per-step wall time, median of --repeats after one warm-up step (at least
3: a row stops repeating once it has used --budget seconds), the two sides in turns: the torch processes wait
on a queue while zerosim steps, and zerosim waits while they step (rank 0 times its step between two
barriers). BLAS pinned to one thread (set before numpy and torch load). Beside it, in the same turns, zerosim
as it comes, `Cluster(N)`: one worker, every rank's op run once for all where the bits allow (models/_stacked.py,
which the pool's threads do not do), every event and every ledger's timeline; issue 63 holds these defaults
against torch (its Must show 3), in CPU seconds. The load average is printed: the machine may be shared. On a
loaded machine the scheduler gives each runnable thread a share, so torch's N processes get N shares and zerosim at
most one per worker: the CPU seconds per step (zerosim's process, all threads, ÷ the sum over torch's N processes,
each between its two barriers) compare the work done. (Until 2026-11-26 the one-worker engine ran with
`trace="call", timeline=False`, and issue 63's notes quoted the pooled engine's CPU seconds for its defaults.)

It ends with the table for benchmarks/README.md (Markdown, the machine and the load in its first
line). Needs torch (the parity extra, CPU build): without it the script says so and exits 0.

What the ratios depend on is printed beside them (benchmarks/machine.py): the CPU's bf16 instructions (torch's bf16
matmul is native with AVX512_BF16 or AMX, emulated without: the bf16 goal is per class of CPU, `BF16_CLASSES`) and
the BLAS kernels of both sides (NumPy's OpenBLAS kernel, torch's BLAS and CPU capability). zerosim runs the arithmetic
--arithmetic names (zerosim/precision/arithmetic/): "portable", its default (each product's exact dot products
rounded once: the same bits on every machine; issue 63 holds the default against torch), or "native" (the machine's
sgemm, as torch runs its own BLAS; issue 28's table), or "floor": the portable engine with every product what an exact
product costs at the least, a float64 GEMM rounded once with no proof (`floor_step`; bits not the portable ones, so
only its time counts), which says whether a ratio the portable arithmetic misses is within reach of its design; or
"two": the floor plus the least proof NumPy can decide (benchmarks/proof_bound.py `two_matmul`: the operands' norms, c
and c + 2E rounded, compared, the suspects located, none settled), which says whether it is within reach of any proof.
--rows picks the comparisons.

    python benchmarks/peers.py [--repeats 5] [--budget 40] [--cases 919k:4,919k:8,10M:4,10M:8]
                               [--arithmetic portable|native|floor|two] [--rows zero1,zero3-fp32,zero3-bf16]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/machine.py, however this file is run
from machine import (Bf16Class, bf16_class, cpu_flags, cpu_name, describe, numpy_blas,  # noqa: E402
                     numpy_kernels, torch_blas, torch_kernels)

MODELS = {  # name: MLP widths
    "919k": [256, 1024, 512, 256],  # 919,296 params (benchmarks/engine.py's)
    "10M": [1024, 2048, 2560, 1024],  # 9,967,104 params
}
BATCH = 32  # rows per rank per step
ROWS = {  # --rows name: (label, zerosim stage, zerosim precision, torch mode, target ratio: issue 28; None: by the
    #        CPU's bf16 class)
    "zero1": ("ZeRO-1 ÷ DDP+ZeroRedundancyOptimizer, fp32", 1, "fp32", "ddp-zero1", 1.0),
    "zero3-fp32": ("ZeRO-3 ÷ FSDP2, fp32 params", 3, "fp32", "fsdp2-fp32", 1.0),
    "zero3-bf16": ("ZeRO-3 ÷ FSDP2, bf16 params", 3, "bf16-mixed", "fsdp2-bf16", None),
}
MIN_REPEATS = 3  # a row stops repeating after this many once it has used its --budget


def measured_tree() -> str:
    """The source tree of the zerosim this process imports, for a benchmark's first line: a script's own folder comes
    first on sys.path, not the working directory, so from another checkout it still imports the installed (editable)
    one unless PYTHONPATH names that checkout."""
    import zerosim

    return os.path.dirname(os.path.dirname(os.path.abspath(zerosim.__file__)))


def forget_kept_operands(buffers: bool = False) -> None:
    """Empty the portable kernels' memo of operands (precision/arithmetic/_operand_cache.py), where this zerosim
    keeps one: contenders that multiply the very same operands (the engine and the oracle; the portable and native
    engines of one model) would otherwise find what another kept and measure less than a run does.

    The products' float64 scratch buffers (_scratch.py) stay, unless `buffers` (--drop-buffers): memory, not
    measurements, which a run keeps from step to step. Let go every round, as they were until 2026-11-26, every
    zerosim contender took them again as fresh pages, a cost no run pays: at 10k / N = 64 ~710-1,050 page faults a
    step against ~120, 1.5-3 ms of system time (getrusage, the engine's step alone; the load 2-3.5)."""
    try:
        from zerosim.precision.arithmetic import clear_kept_operands
    except ImportError:  # a zerosim from before the name: its memo, where it has one (issue 41's fourth stop on)
        try:
            from zerosim.precision.arithmetic._operand_cache import clear as clear_kept_operands
        except ImportError:
            return
    try:
        clear_kept_operands(buffers=buffers)
    except TypeError:  # a zerosim from before the choice: its memos alone where the buffers stay, as here
        if buffers:
            clear_kept_operands()
            return
        from zerosim.precision.arithmetic import _operand_cache

        _operand_cache.clear()
        try:
            from zerosim.precision.arithmetic import _rank_products
        except ImportError:
            return
        _rank_products.clear()


def floor_matmul(a, b, out=None, test=None):
    """What an exact product costs at the least (benchmarks/portable_step.py's docstring): a and b widened to float64
    as the exact kernel widens them (_exact_matmul.py `_widen_both`: into reused buffers, a transposed b, the
    forward's W.T, kept with its columns contiguous rather than copied into rows), one float64 GEMM, rounded once into
    `out` (the ranks' packed gradients, as the exact kernel writes them) or a fresh fp32 array; no proof, so its bits
    are not the portable ones. A 2-D product with a short K (a rank's dW over its micro-batch) is GEMM'd and rounded
    by blocks of rows whose float64 sums stay in cache, as the exact kernel makes it (_norm_bound.py `SHORT_K`,
    `_BLOCK`): rounding a whole float64 c read back from memory would make the floor dearer than the kernel it bounds
    (a 10M MLP's dW are 10 million elements a rank). Until 2026-11-26 this floor copied a transposed b into rows,
    ~30 ms a step dearer at 10M / N = 4 than the kernel's own widening (benchmarks/proof_bound.py).

    `test(block, low, e)`, where given, rounds each block of rows the exact kernel tests at a time (`_BLOCK`
    elements) into `low` in place of the floor's rounding, and tests it as a proof would, `e` the product's widest
    error bound from the operands' norms (read only then): benchmarks/proof_bound.py's engines, the least any proof
    costs and the least one NumPy can decide (`--arithmetic two`)."""
    from zerosim.precision.arithmetic import _exact_matmul
    from zerosim.precision.arithmetic._scratch import scratch
    from zerosim.precision.cast import NUMPY

    _norm_bound = _exact_matmul._norms()  # as the kernel imports it: by one of the pool's threads, the others waiting
    if a.ndim < 2 or b.ndim < 2:
        c = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
        return c if out is None else np.copyto(out, c) or out
    a64, b64 = _exact_matmul._widen_both(a, b, NUMPY)
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    out = np.empty(shape, np.float32) if out is None else out
    m, n, k = shape[-2], shape[-1], a.shape[-1]
    step = max(1, _norm_bound._BLOCK // max(n * math.prod(shape[:-2]), 1))  # rows the kernel tests at a time
    rows = step if len(shape) == 2 and k <= _norm_bound.SHORT_K else m  # and GEMMs at a time
    e = None
    if test is not None:  # the error bound's inputs, as the kernel reads them (one for the whole product: a floor)
        by_rows, by_columns = _norm_bound.line_norms(a64, b64)
        e = float(by_rows.max(initial=0.0) * by_columns.max(initial=0.0)) * 2.0**-48
    c = scratch(shape[:-2] + (min(rows, m), n), 2)
    for start in range(0, m, rows):
        part = c[..., :min(rows, m - start), :]
        np.matmul(a64[..., start:start + rows, :], b64, out=part)
        if test is None:
            np.copyto(out[..., start:start + rows, :], part, casting="unsafe")
            continue
        for first in range(0, part.shape[-2], step):
            block = part[..., first:first + step, :]
            test(block, out[..., start + first:start + first + block.shape[-2], :], e)
    return out


def _two_matmul():
    """benchmarks/proof_bound.py's `two_matmul`: the floor plus the least test NumPy can decide (read when asked for:
    that script imports this one)."""
    from proof_bound import two_matmul

    return two_matmul


# --arithmetic values that step the portable engine with every product another kernel (`floor_step`): each's maker
STEPPED = {"floor": lambda: floor_matmul, "two": _two_matmul}


def floor_step(engine, batches, matmul=floor_matmul) -> list:
    """engine.step(batches) with every portable product `matmul` while it steps (by default `floor_matmul`: the floor
    of the portable design; an engine on the portable arithmetic; its pool's threads each take their own scratch
    buffers)."""
    import dataclasses

    from zerosim.precision.arithmetic import _kernels

    portable = _kernels.ARITHMETICS["portable"]
    _kernels.ARITHMETICS["portable"] = dataclasses.replace(portable, matmul=matmul)
    try:
        return engine.step(batches)
    finally:
        _kernels.ARITHMETICS["portable"] = portable


def batches(widths, n, seed=0):
    """One (x (B, D_in), t (B, D_out)) fp32 pair per rank, the same on both sides."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, widths[0])).astype(np.float32),
             rng.standard_normal((BATCH, widths[-1])).astype(np.float32)) for _ in range(n)]


# -- torch's side: N processes -------------------------------------------------------------------------------------
def _torch_worker(rank, n, port, widths, commands, results):
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=n)
    x, t = (torch.from_numpy(a) for a in batches(widths, n)[rank])
    step = None
    while True:
        cmd = commands.get()
        if cmd == "stop":
            break
        if cmd != "step":  # a new mode: build the model and its wrapper
            step = _torch_step(cmd, widths, x, t, torch, nn, dist)
            continue
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        dist.barrier()
        results.put((rank, time.perf_counter() - t0, time.process_time() - c0))
    dist.destroy_process_group()


def _torch_step(mode, widths, x, t, torch, nn, dist):
    torch.manual_seed(0)
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    if mode == "ddp-zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16) if mode == "fsdp2-bf16" else MixedPrecisionPolicy()
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mp_policy=mp_policy)
        fully_shard(model, mp_policy=mp_policy)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x).float(), t)
        loss.backward()
        opt.step()

    return step


class TorchPeers:
    """N torch processes that step when told; `step()` returns rank 0's seconds between two barriers and the
    CPU seconds all N processes spent in them."""

    def __init__(self, n, widths, port):
        ctx = mp.get_context("spawn")
        self.commands = [ctx.Queue() for _ in range(n)]
        self.results = ctx.Queue()
        self.procs = [ctx.Process(target=_torch_worker, args=(r, n, port, widths, self.commands[r], self.results))
                      for r in range(n)]
        for p in self.procs:
            p.start()

    def mode(self, name):
        for q in self.commands:
            q.put(name)

    def step(self) -> tuple:
        for q in self.commands:
            q.put("step")
        got = [self.results.get(timeout=600) for _ in self.commands]
        return next(wall for rank, wall, _ in got if rank == 0), sum(cpu for _, _, cpu in got)

    def close(self):
        for q in self.commands:
            q.put("stop")
        for p in self.procs:
            p.join(timeout=60)


# -- zerosim's side ------------------------------------------------------------------------------------------------
def zerosim_engine(widths, n, stage, precision, workers, arithmetic):
    """ZeroEngine on `Cluster(n, trace="call", timeline=False, workers=workers)`, or (`workers` None) on `Cluster(n)`
    as it comes: one worker, its ranks stacked, every event and every ledger's timeline (issue 63's "defaults")."""
    from zerosim import MLP, Adam, Cluster, ZeroEngine
    from zerosim.precision import get_precision

    model = MLP(widths, activation="relu")
    cluster = Cluster(n) if workers is None else Cluster(n, trace="call", timeline=False, workers=workers)
    # native: the machine's sgemm, as torch's BLAS; floor: the portable engine, stepped by `floor_step`
    policy = get_precision(precision).with_(arithmetic="portable" if arithmetic in STEPPED else arithmetic)
    return ZeroEngine(model, cluster, stage, Adam(lr=1e-3), policy, params=model.init_params())


def timed(fn) -> tuple:
    """(wall seconds, CPU seconds of every thread of this process) of fn()."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def run_case(name, n, repeats, budget, port, arithmetic, chosen):
    widths = MODELS[name]
    data = batches(widths, n)
    peers = TorchPeers(n, widths, port)
    rows = []
    try:
        for label, stage, precision, mode, target in chosen:
            peers.mode(mode)
            pooled = zerosim_engine(widths, n, stage, precision, "auto", arithmetic)
            single = zerosim_engine(widths, n, stage, precision, None, arithmetic)  # Cluster(n) as it comes
            kernel = STEPPED[arithmetic]() if arithmetic in STEPPED else None  # every product, while it steps
            step = (lambda e: floor_step(e, data, kernel)) if kernel else (lambda e: e.step(data))
            peers.step(), step(pooled), step(single)  # warm up: first touches, BLAS, gloo's buffers
            times = {"torch": [], "pool": [], "one": []}
            start = time.perf_counter()
            for k in range(repeats):  # in turns: each side idle while the other steps
                if k >= MIN_REPEATS and time.perf_counter() - start > budget:
                    break
                times["torch"].append(peers.step())
                times["pool"].append(timed(lambda: step(pooled)))
                times["one"].append(timed(lambda: step(single)))  # its trace kept as a run keeps it (its window folds)
            med = {key: statistics.median(w for w, _ in v) for key, v in times.items()}
            med.update({f"{key} cpu": statistics.median(c for _, c in v) for key, v in times.items()})
            med["repeats"] = len(times["torch"])
            rows.append((label, med, pooled.model.num_params, pooled.cluster.pool.workers, target))
    finally:
        peers.close()
    return rows


def machine() -> str:
    """The CPU's name and how many cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu_name()}, {cores} cores"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def target_of(target, bf16: Bf16Class):
    """A row's target ratio: its own, or (None) the goal of the CPU's bf16 class."""
    return bf16.goal if target is None else target


def depends_on(precision: str, bf16: Bf16Class, numpy_blas: str, torch_blas: str) -> str:
    """What a row's ratio depends on, to print beside it: the bf16 class for a bf16 row, both BLAS kernels else."""
    if "bf16" in precision:
        return f"bf16: {bf16.name}; torch's bf16 GEMMs {bf16.how}"
    return f"fp32 GEMMs: zerosim on {numpy_blas}, torch on {torch_blas}"


def verdict(ratio: float, target, bf16: Bf16Class) -> str:
    """"met"/"MISSED (≤ goal)", saying for a bf16 row which CPU class the goal is for."""
    goal = target_of(target, bf16)
    where = f" for CPUs with {bf16.name}" if target is None else ""
    if goal is None:
        return f"no goal{where} ({bf16.why})"
    return f"{'met' if ratio <= goal else 'MISSED'} (≤ {goal}{where})"


def readme_table(results, header: str, bf16: Bf16Class, chosen: list | None = None) -> list:
    """The table of benchmarks/README.md: a row per (model, N), a cell per comparison, "**ratio** (zerosim / torch
    ms; CPU s ratio; `Cluster(N)` as it comes: its ratio, its CPU s ratio)", then the targets met or missed (the bf16
    goal: `bf16`'s, the class of the CPU it ran on)."""
    labels = [label for label, *_ in (list(ROWS.values()) if chosen is None else chosen)]
    lines = [header, "", "| model, N | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    verdicts = []
    for (name, n), rows in results:
        cells = []
        for label, med, params, _, target in rows:
            ratio = med["pool"] / med["torch"]
            cells.append(f"**{ratio:.2f}** ({med['pool'] * 1e3:.0f} / {med['torch'] * 1e3:.0f} ms; CPU s "
                         f"{med['pool cpu'] / med['torch cpu']:.2f}; `Cluster(N)` as it comes "
                         f"{med['one'] / med['torch']:.2f}, CPU s {med['one cpu'] / med['torch cpu']:.2f})")
            verdicts.append(f"{label.split(',')[0].split(' ÷')[0]} {label.split(', ')[-1]} {name}, N = {n}: "
                            f"{ratio:.2f} {verdict(ratio, target, bf16)}")
        lines.append(f"| {rows[0][2]:,} params, N = {n} | " + " | ".join(cells) + " |")
    return lines + ["", "Targets (issue 28): " + "; ".join(verdicts) + "."]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=float, default=40.0, help="seconds a row may take before it stops repeating "
                   f"(after {MIN_REPEATS} steps)")
    p.add_argument("--cases", default="919k:4,919k:8,10M:4,10M:8", help="MODEL:N,... (MODEL: 919k or 10M)")
    p.add_argument("--port", type=int, default=29517)
    p.add_argument("--arithmetic", choices=("portable", "native", *STEPPED), default="portable",
                   help="zerosim's products: its default, portable (the same bits everywhere), the machine's own, or "
                   "the portable design's floor (each a float64 GEMM rounded once, no proof: `floor_step`)")
    p.add_argument("--rows", default=",".join(ROWS), help=f"comparisons, of {', '.join(ROWS)}")
    args = p.parse_args()
    chosen = [ROWS[r] for r in args.rows.split(",")]
    try:
        import torch
    except ImportError:
        print("benchmarks/peers.py needs torch (the CPU build: pip install torch==2.13.0); it is not installed here, "
              "so nothing was measured")
        return 0
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",")]
    started, load_start = time.perf_counter(), load()
    bf16, numpy_blas_used, torch_blas_used = bf16_class(cpu_flags()), numpy_blas(), torch_blas(torch)
    print(f"depends on: {describe(torch)}")
    print(f"zerosim from {measured_tree()}")
    print(f"torch {torch.__version__}, {machine()}, load average at start {load_start}; BLAS threads "
          f"{ {v: os.environ[v] for v in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS')} }; batch {BATCH} per rank; "
          f"median of {MIN_REPEATS}-{args.repeats} steps in turns (--budget {args.budget:g} s a row)")
    print(f"{'model':<6} {'N':>2}  {'comparison':<44} {'torch ms':>9} {'zerosim ms':>10} {'ratio':>6}  "
          f"{'1 worker ms':>11} {'ratio':>6} {'pool speedup':>12}  {'CPU s ratio':>11} {'1 worker':>8} {'steps':>5}  "
          "depends on")
    results = []
    for k, (name, n) in enumerate(cases):
        rows = run_case(name, n, args.repeats, args.budget, args.port + k, args.arithmetic, chosen)
        results.append(((name, n), rows))
        for (label, med, params, workers, _), (_, _, precision, _, _) in zip(rows, chosen):
            print(f"{name:<6} {n:>2}  {label:<44} {med['torch'] * 1e3:>9.1f} {med['pool'] * 1e3:>10.1f} "
                  f"{med['pool'] / med['torch']:>6.2f}  {med['one'] * 1e3:>11.1f} {med['one'] / med['torch']:>6.2f} "
                  f"{med['one'] / med['pool']:>12.2f}  {med['pool cpu'] / med['torch cpu']:>11.2f} "
                  f"{med['one cpu'] / med['torch cpu']:>8.2f} {med['repeats']:>5}  "
                  f"{depends_on(precision, bf16, numpy_blas_used, torch_blas_used)}")
        sys.stdout.flush()
    workers = results[0][1][0][3] if results else 1
    header = (f"Measured on {machine()} ({platform.system()}; bf16: {bf16.name}, torch's bf16 GEMMs {bf16.how}); "
              f"{numpy_kernels()}; {torch_kernels(torch)}; zerosim with {workers} worker threads, its "
              f"{args.arithmetic} arithmetic; load average {load_start} at the start, {load()} at the end; "
              f"{(time.perf_counter() - started) / 60:.1f} min. Each cell: zerosim ÷ torch, per-step wall time, median "
              f"of {MIN_REPEATS}-{args.repeats} steps in turns.")
    print("\n" + "\n".join(readme_table(results, header, bf16, chosen)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
