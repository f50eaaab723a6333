"""A small runner for checks under mpiexec: the MPI backend against the numpy simulator, bit for bit.

Every process builds the same inputs for all N ranks from a fixed seed, runs a computation twice --
on `Cluster(N, backend="mpi")` with its own rank's input, and on the in-process simulator
`Cluster(N)` with everybody's -- and compares its rank's result, trace events and ledger. A mismatch
is recorded, never raised, so the processes stay in step through every later collective; `finish()`
gathers the failures on rank 0, prints them, and returns the exit status (1 on every rank if any
rank failed). An exception is different: `main` runs the body under `run_guarded`, so it ends the
job at once instead of leaving the other ranks waiting.

    h = Harness()
    h.compare("reduce-scatter fp16 L=7", lambda c, xs: reduce_scatter(c, xs), inputs)
    sys.exit(h.finish())

Later checks (training steps of ZeRO stages) plug in the same way: `fn(cluster, local_inputs)`
returns one result per local rank; a result may be an array or a dict/list/tuple of arrays.
"""

from __future__ import annotations

import sys

import numpy as np

from zerosim import Cluster, cast
from zerosim.backends.mpi import import_mpi, run_guarded
from zerosim.cluster._report import local_reports


def make_inputs(seed: int, world_size: int, length: int, fmt, spread: int = 6) -> list:
    """N flat arrays in `fmt`, the same on every process: normal values times 2**k, k in [-spread, spread].

    The spread of exponents makes the order of additions show in the rounded sums, so a ring that
    added in another order than NCCL's would fail the bitwise comparison.
    """
    rng = np.random.default_rng([seed, world_size, length])
    raw = rng.standard_normal((world_size, length)) * 2.0 ** rng.integers(-spread, spread + 1, (world_size, length))
    return [cast(row, fmt) for row in raw]


def bits(a) -> np.ndarray:
    """The bit patterns of an array, so that NaNs and -0.0 compare as what they are."""
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"uint{8 * a.dtype.itemsize}"))


class Harness:
    def __init__(self, title: str):
        self.MPI = import_mpi()
        self.comm = self.MPI.COMM_WORLD
        self.rank, self.world_size = self.comm.rank, self.comm.size
        self.title = title
        self.checks = 0
        self.failures = []
        self._pairs = {}

    # -- clusters ----------------------------------------------------------------------------------
    def clusters(self, **options):
        """(MPI cluster, simulator cluster), one pair per set of options, kept for the whole run.

        Kept rather than made per check: each MPI backend duplicates a communicator, and ledgers that
        live through many calls are a stronger comparison than fresh ones.
        """
        key = tuple(sorted(options.items()))
        if key not in self._pairs:
            sim_options = {k: v for k, v in options.items() if k not in ("native",)}
            self._pairs[key] = (
                Cluster(self.world_size, backend="mpi", **options),
                Cluster(self.world_size, **sim_options),
            )
        return self._pairs[key]

    # -- checks --------------------------------------------------------------------------------------
    def check(self, name: str, got, want) -> bool:
        """Exact equality: arrays by dtype, shape and bits; dicts, lists and tuples item by item."""
        self.checks += 1
        problem = _difference(got, want)
        if problem:
            self.failures.append(f"rank {self.rank}: {name}: {problem}")
        return not problem

    def check_close(self, name: str, got, exact, bound) -> bool:
        """|got - exact| <= bound elementwise (float64), for results whose order of rounding is not ours."""
        self.checks += 1
        err = np.abs(np.asarray(got, dtype=np.float64) - np.asarray(exact, dtype=np.float64))
        bad = np.flatnonzero(err > np.asarray(bound) + 0.0)
        if bad.size:
            i = bad[0]
            limit = np.broadcast_to(bound, err.shape).flat[i]
            self.failures.append(f"rank {self.rank}: {name}: {bad.size} elements off, first [{i}]: error "
                                 f"{err.flat[i]:.3g} > bound {limit:.3g}")
        return not bad.size

    def expect_error(self, name: str, error: type, fn, match: str = "") -> bool:
        """fn() must raise `error` with `match` in its message (on this rank)."""
        self.checks += 1
        try:
            fn()
        except error as e:
            if match in str(e):
                return True
            self.failures.append(f"rank {self.rank}: {name}: {type(e).__name__} says {str(e)!r}, expected it to "
                                 f"mention {match!r}")
            return False
        except Exception as e:  # noqa: BLE001 -- a wrong error is a failed check, not a crash
            self.failures.append(f"rank {self.rank}: {name}: expected {error.__name__}, got {type(e).__name__}: {e}")
            return False
        self.failures.append(f"rank {self.rank}: {name}: expected {error.__name__}, nothing was raised")
        return False

    def compare(self, name: str, fn, inputs, **options):
        """Run fn(cluster, local_inputs) on both clusters; compare this rank's result, trace and ledger."""
        mpi, sim = self.clusters(**options)
        mpi.trace.clear()
        sim.trace.clear()
        got = fn(mpi, [inputs[self.rank]])
        want = fn(sim, list(inputs))
        self.check(f"{name}: result", got[0], want[self.rank])
        self.check_same_rank_state(name, mpi, sim)
        return got[0]

    def check_same_rank_state(self, name: str, mpi, sim) -> None:
        """This rank's trace events (what it sent), ledger timeline and report agree with the simulator's."""
        r = self.rank
        self.check(f"{name}: trace calls", mpi.trace.calls, sim.trace.calls)
        self.check(
            f"{name}: trace events sent",
            [e for e in mpi.trace.events if e.src == r],
            [e for e in sim.trace.events if e.src == r],
        )
        self.check(f"{name}: ledger timeline", mpi.ranks[0].ledger.timeline, sim.ranks[r].ledger.timeline)
        self.check(f"{name}: rank report", local_reports(mpi)[0], local_reports(sim)[r])

    # -- the end -------------------------------------------------------------------------------------
    def finish(self) -> int:
        """Gather failures to rank 0, print a summary there; the exit status for every rank."""
        every = self.comm.gather((self.checks, self.failures), root=0)
        failed = self.comm.allreduce(len(self.failures))
        if self.rank == 0:
            for _, failures in every:
                for f in failures[:20]:
                    print(f"FAIL {f}", file=sys.stderr)
                if len(failures) > 20:
                    print(f"FAIL ... and {len(failures) - 20} more on that rank", file=sys.stderr)
            counts = sorted({c for c, _ in every})
            summary = f"{self.title}: N={self.world_size}: {'/'.join(map(str, counts))} checks on each rank"
            print(f"{summary}, {failed} failed" if failed else f"{summary}, all passed", flush=True)
        return 1 if failed else 0


def main(body, title: str) -> None:
    """Run body(harness) with the job-ending guard; exit with the harness's status."""
    harness = Harness(title)
    run_guarded(body, harness)
    sys.exit(harness.finish())


def _difference(got, want, where: str = "") -> str:
    """'' if got and want are exactly equal, else what differs first."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            return f"{where or 'value'}: keys {keys} != {sorted(want)}"
        return next((d for k in want if (d := _difference(got[k], want[k], f"{where}[{k!r}]"))), "")
    if isinstance(want, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(want):
            length = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
            return f"{where or 'value'}: length {length} != {len(want)}"
        return next((d for i, (g, w) in enumerate(zip(got, want)) if (d := _difference(g, w, f"{where}[{i}]"))), "")
    if isinstance(want, np.ndarray) or isinstance(got, np.ndarray):
        got, want = np.asarray(got), np.asarray(want)
        if got.dtype != want.dtype or got.shape != want.shape:
            return f"{where or 'array'}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
        diff = np.flatnonzero(bits(got).reshape(-1) != bits(want).reshape(-1))
        if diff.size:
            i = diff[0]
            first = f"{got.reshape(-1)[i]!r} != {want.reshape(-1)[i]!r}"
            return f"{where or 'array'}: {diff.size} of {want.size} elements differ in their bits, first [{i}]: {first}"
        return ""
    if got != want:
        return f"{where or 'value'}: {got!r} != {want!r}"
    return ""
