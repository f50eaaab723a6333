"""Reduce-scatter of 2**22 fp32 elements per rank: the simulated ring, the MPI ring, MPI's own.

    python benchmarks/backends.py            # one command: launches itself under mpiexec for MPI

Letters: N ranks, L = 2**22 elements per rank (16 MiB of fp32). Times are wall-clock seconds, the median
of --repeats calls; under MPI a call lasts until the slowest rank is done (a barrier on each side). The
simulator and the MPI launches take turns (--rounds rounds of: the simulator, then one mpiexec launch),
and each ratio is the median over rounds of MPI ÷ the simulator in the same round, so a busy spell on the
machine falls on both. Every cluster keeps one trace summary per call (trace="call"). The numpy simulator
runs every rank's share of the ring in this one process, one after another; the MPI processes run theirs
at the same time, so on a machine with fewer cores than N they share the cores (say so when you quote
the numbers). "same bits" says whether every rank's chunk equals the simulator's bit for bit: the MPI
ring must; MPI's own reduce-scatter need not, since it adds in an order of its choosing.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads (the MPI processes inherit it)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from zerosim import Cluster, reduce_scatter  # noqa: E402
from zerosim.backends.mpi import INSTALL_HINT, find_mpiexec

LENGTH = 2**22  # L, elements per rank
WORLD_SIZES = (2, 4)
REPEATS = 9
ROUNDS = 3
MPI_TIMEOUT = 600  # seconds per mpiexec launch; generous for slow or oversubscribed machines


def inputs(n: int) -> list:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(LENGTH, dtype=np.float32) for _ in range(n)]  # N x (L,) fp32


def median_of(fn, repeats: int, sync=lambda: None) -> float:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def simulator_seconds(n: int, repeats: int) -> float:
    cluster, xs = Cluster(n, trace="call", timeline=False), inputs(n)
    reduce_scatter(cluster, xs)  # untimed: first touch
    return median_of(lambda: (reduce_scatter(cluster, xs), cluster.trace.clear()), repeats)


def mpi_worker(repeats: int) -> None:
    """Runs on every rank under mpiexec; rank 0 prints seconds and bitwise agreement with the simulator as JSON."""
    from zerosim.backends.mpi import run_guarded

    def work():
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        n, r = comm.size, comm.rank
        xs = inputs(n)
        x = xs[r]
        ring = Cluster(n, backend="mpi", trace="call", timeline=False)
        native = Cluster(n, backend="mpi", trace="call", timeline=False, native=True).backend
        want = reduce_scatter(Cluster(n, timeline=False), xs)[r]  # this rank's chunk, as the simulator has it
        same = lambda got: bool(comm.allreduce(np.array_equal(got.view(np.uint32), want.view(np.uint32)), op=MPI.LAND))  # noqa: E731
        report = {
            "ring": median_of(lambda: (reduce_scatter(ring, [x]), ring.trace.clear()), repeats, comm.Barrier),
            "native": median_of(lambda: native.native_reduce_scatter([x])[0], repeats, comm.Barrier),
            "ring_same": same(reduce_scatter(ring, [x])[0]),
            "native_same": same(native.native_reduce_scatter([x])[0]),
        }
        if r == 0:
            print(json.dumps(report), flush=True)

    run_guarded(work)


def mpi_seconds(mpiexec: str, n: int, repeats: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    command = [mpiexec, "-n", str(n), sys.executable, __file__, "--worker", "--repeats", str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=MPI_TIMEOUT, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed calls per measurement; the median counts "
                                                                     f"(default {REPEATS})")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"simulator / mpiexec turns per N (default {ROUNDS})"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the MPI side, under mpiexec
    args = parser.parse_args()
    if args.worker:
        return mpi_worker(args.repeats)

    mpiexec, why_not = find_mpiexec(), ""
    try:
        import mpi4py  # noqa: F401  (only to know; the MPI runs import it in their own processes)
    except ImportError:
        why_not = INSTALL_HINT
    if mpiexec is None:
        why_not = why_not or f"no mpiexec next to {sys.executable} or on PATH"

    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    size = f"{LENGTH:,} fp32 elements per rank ({LENGTH * 4 >> 20} MiB)"
    print(f"reduce-scatter, {size}; median of {args.repeats} calls, {args.rounds} rounds in turns (simulator, "
          "mpiexec); "
          f"{os.cpu_count()} CPU cores; BLAS threads {threads}")
    print(f"{'N':>2}  {'backend':<48} {'seconds':>9} {'vs simulator':>13}  {'same bits':>9}")
    for n in WORLD_SIZES:
        sims, mpis = [], []
        for _ in range(args.rounds):  # in turns
            sims.append(simulator_seconds(n, args.repeats))
            if not why_not:
                mpis.append(mpi_seconds(mpiexec, n, args.repeats))
        sim = statistics.median(sims)
        rows = [("numpy simulator ring (1 process)", sim, 1.0, True)]
        for key, name in (("ring", f"mpi ring, point-to-point ({n} processes)"), ("native", "mpi native "
                                                                                            "Reduce_scatter_block "
                                                                                            f"({n} processes)")):
            if mpis:
                ratio = statistics.median(m[key] / s for m, s in zip(mpis, sims))  # within each round
                rows.append((name, statistics.median(m[key] for m in mpis), ratio, all(m[f"{key}_same"] for m in mpis)))
        for name, seconds, ratio, same in rows:
            print(f"{n:>2}  {name:<48} {seconds:>9.4f} {ratio:>12.2f}x  {'yes' if same else 'no':>9}")
    if why_not:
        print(f"mpi rows skipped: {why_not}")


if __name__ == "__main__":
    main()
