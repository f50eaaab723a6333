"""Ring collectives on the MPI backend equal the numpy simulator bit for bit, at any N and length.

    mpiexec -n 2 python tests/mpi/collectives_check.py
    mpiexec -n 4 python tests/mpi/collectives_check.py

Letters: N ranks (= processes), L elements per rank's flat buffer. Covers reduce-scatter (every
averaging variant, a wider wire, all-reduce's counts), all-gather (reduce-scatter's uneven layout,
equal shards, counts), all-reduce, broadcast from every root; fp32, fp16, bf16 and fp8; L = 0,
L < N, L not a multiple of N. Also: the backend's exchange with and without `recv_like`, bad input
caught on every rank, MPI's native reductions within their rounding bound, `gather_reports`, and ZeRO++ qgZ.
Exits non-zero if any check fails on any rank.
"""

from __future__ import annotations

import numpy as np
from harness import main, make_inputs

from zerosim import Cluster, Groups, ShardLayout, all_gather, all_reduce, broadcast, get_format, reduce_scatter
from zerosim.cluster._report import gather_reports, local_reports
from zerosim.collectives.quantized import LocoState, all_to_all_quant_reduce

FORMATS = ("fp32", "fp16", "bf16", "fp8_e4m3")
OPS = ("sum", "max", "avg", "avg_predivide", "avg_premul")


def lengths(n: int) -> list:
    """Zero, shorter than N, not a multiple of N, a multiple of N, and a few thousand."""
    return sorted({0, 1, n - 1, n + 1, 2 * n, 7 * n + 3, 1000, 4099})


def uneven_counts(seed: int, n: int, length: int) -> list:
    """N chunk sizes adding up to L, some of them zero (the same on every process)."""
    cuts = np.sort(np.random.default_rng([seed, n, length]).integers(0, length + 1, n - 1))
    return np.diff(np.concatenate([[0], cuts, [length]])).astype(int).tolist()


def reduce_scatter_cases(h) -> None:
    n = h.world_size
    for fmt in FORMATS:
        spread = 3 if fmt.startswith("fp8") else 6  # keep fp8 sums mostly finite (E4M3's max is 448)
        for length in lengths(n):
            xs = make_inputs(1, n, length, fmt, spread)
            for op in OPS:
                h.compare(f"reduce-scatter {fmt} {op} L={length}", lambda c, t: reduce_scatter(c, t, op=op), xs)
            if fmt != "fp32":
                h.compare(
                    f"reduce-scatter {fmt} on an fp32 wire L={length}",
                    lambda c, t: reduce_scatter(c, t, wire="fp32"),
                    xs,
                )
            counts = uneven_counts(2, n, length)
            h.compare(f"reduce-scatter {fmt} counts={counts}", lambda c, t: reduce_scatter(c, t, counts=counts), xs)


def all_gather_cases(h) -> None:
    n = h.world_size
    for fmt in FORMATS:
        for length in lengths(n):
            layout = ShardLayout(length, n)
            full = make_inputs(3, 1, length, fmt)[0]
            shards = [full[slice(*layout.real_bounds(r))] for r in range(n)]  # the last ones short or empty
            h.compare(f"all-gather {fmt} uneven shards of L={length}", lambda c, t: all_gather(c, t), shards)
            equal = make_inputs(4, n, layout.shard_size, fmt)
            h.compare(f"all-gather {fmt} equal shards of {layout.shard_size}", lambda c, t: all_gather(c, t), equal)
            counts = uneven_counts(5, n, length)
            starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
            pieces = [full[starts[r] : starts[r + 1]] for r in range(n)]
            h.compare(f"all-gather {fmt} counts={counts}", lambda c, t: all_gather(c, t, counts=counts), pieces)
        if fmt != "fp32":
            xs = make_inputs(6, n, 5, "fp32")
            h.compare(f"all-gather fp32 shards on a {fmt} wire", lambda c, t: all_gather(c, t, wire=fmt), xs)


def all_reduce_cases(h) -> None:
    n = h.world_size
    for fmt in FORMATS:
        for length in lengths(n):
            xs = make_inputs(7, n, length, fmt, 3 if fmt.startswith("fp8") else 6)
            for op in ("sum", "avg", "max"):
                h.compare(f"all-reduce {fmt} {op} L={length}", lambda c, t: all_reduce(c, t, op=op), xs)
        grid = [x.reshape(3, 5) for x in make_inputs(8, n, 15, fmt)]
        h.compare(f"all-reduce {fmt} of a (3, 5) array", lambda c, t: all_reduce(c, t), grid)


def broadcast_cases(h) -> None:
    n = h.world_size
    for fmt in FORMATS:
        for length in lengths(n):
            xs = make_inputs(9, n, length, fmt)
            for root in range(n):
                h.compare(f"broadcast {fmt} L={length} from {root}", lambda c, t: broadcast(c, t, root=root), xs)
        grid = [x.reshape(2, 3) for x in make_inputs(10, n, 6, fmt)]
        h.compare(f"broadcast {fmt} of a (2, 3) array", lambda c, t: broadcast(c, t, root=n - 1), grid)


def call_granularity_cases(h) -> None:
    """The "call" trace (one summary per rank and collective) agrees too."""
    n = h.world_size
    xs = make_inputs(11, n, 4099, "bf16")
    h.compare("all-reduce bf16, call-level trace", lambda c, t: all_reduce(c, t), xs, trace="call")
    h.compare("broadcast bf16, call-level trace", lambda c, t: broadcast(c, t, root=0), xs, trace="call")


def exchange_cases(h) -> None:
    """The backend alone: a ring shift, with the probe and with `recv_like`; one-sided steps; a wrong recv_like."""
    mpi, _ = h.clusters()
    backend, n, r = mpi.backend, h.world_size, h.rank
    right, left = (r + 1) % n, (r - 1) % n
    for fmt in ("fp64", *FORMATS, "fp8_e5m2"):
        dtype = get_format(fmt).dtype
        for size in (0, 1, 33):
            xs = make_inputs(12, n, size, fmt)
            (probed,) = backend.exchange([xs[r]], [right], [left])
            h.check(f"exchange {fmt} x{size}, probed", np.array(probed), xs[left])
            (told,) = backend.exchange([xs[r]], [right], [left], recv_like=[(size, dtype)])
            h.check(f"exchange {fmt} x{size}, recv_like", np.array(told), xs[left])
    xs = make_inputs(13, n, 9, "bf16")
    for like in (None, [(9, xs[0].dtype)]):  # a chain step 0 -> 1: rank 0 only sends, rank 1 only receives
        sends, send_to, recv_from = [xs[r] if r == 0 else None], [1 if r == 0 else None], [0 if r == 1 else None]
        got = backend.exchange(sends, send_to, recv_from, recv_like=like if r == 1 else None)
        h.check(
            f"one-sided exchange, recv_like={like is not None}",
            np.array(got[0]) if r == 1 else got[0],
            xs[0] if r == 1 else None,
        )
    h.expect_error(
        "exchange with a recv_like that promises too many elements",
        RuntimeError,
        lambda: backend.exchange([xs[r]], [right], [left], recv_like=[(10, xs[0].dtype)]),
        f"rank {r} expected 10 bfloat16 elements from rank {left} but got 9",
    )


def bad_input_cases(h) -> None:
    """Input that differs on one rank is caught on every rank, before any data moves (so nobody hangs)."""
    mpi, sim = h.clusters()
    n, r = h.world_size, h.rank
    xs = [np.zeros(8 if q != n - 1 else 9, dtype=np.float32) for q in range(n)]
    for name, cluster, local in (("mpi", mpi, [xs[r]]), ("simulator", sim, xs)):
        h.expect_error(
            f"reduce-scatter with one longer buffer ({name})",
            ValueError,
            lambda: reduce_scatter(cluster, local),
            f"rank {n - 1} has length 9",
        )
    ys = [np.zeros(8, dtype=np.float32 if q != n - 1 else np.float16) for q in range(n)]
    h.expect_error(
        "all-reduce with one fp16 buffer (mpi)",
        ValueError,
        lambda: all_reduce(mpi, [ys[r]]),
        f"rank {n - 1} has dtype fp16",
    )
    h.expect_error(
        "two arrays for one local rank",
        ValueError,
        lambda: all_reduce(mpi, [xs[0], xs[0]]),
        "this process hosts 1 rank(s)",
    )
    h.expect_error(
        "Cluster(N + 1) under mpiexec -n N", ValueError, lambda: Cluster(n + 1, backend="mpi"),
        f"Cluster({n + 1}, backend='mpi') but mpiexec started {n} processes",
    )


def native_cases(h) -> None:
    """MPI's own reductions: within (N-1) roundings of the exact sum; exactly the ring's when N = 2."""
    native, sim = h.clusters(native=True)
    backend, n, r = native.backend, h.world_size, h.rank
    for fmt in ("fp32", "fp64"):
        f = get_format(fmt)
        xs = make_inputs(14, n, 16 * n, fmt)
        exact = np.sum([x.astype(np.float64) for x in xs], axis=0)
        magnitude = np.sum([np.abs(x.astype(np.float64)) for x in xs], axis=0)
        gamma = (n - 1) * f.unit_roundoff / (1 - (n - 1) * f.unit_roundoff)  # Higham's bound for n-1 additions
        chunk = slice(r * 16, (r + 1) * 16)
        (got,) = backend.native_reduce_scatter([xs[r]])
        h.check_close(f"native reduce-scatter {fmt}", got, exact[chunk], gamma * magnitude[chunk])
        h.check_close(f"native all-reduce {fmt}", backend.native_all_reduce([xs[r]])[0], exact, gamma * magnitude)
        counts = uneven_counts(15, n, 16 * n)
        start = sum(counts[:r])
        (got_v,) = backend.native_reduce_scatter([xs[r]], counts=counts)
        mine = slice(start, start + counts[r])
        h.check_close(f"native reduce-scatter {fmt} counts={counts}", got_v, exact[mine], gamma * magnitude[mine])
        if n == 2:  # one addition: a + b == b + a, so any order gives the ring's bits
            h.check(f"native reduce-scatter {fmt} at N=2 equals the ring", got, reduce_scatter(sim, xs)[r])
    for fmt in ("fp16", "bf16"):
        x = make_inputs(16, n, 2 * n, fmt)[r]
        refuse = lambda: backend.native_reduce_scatter([x])  # noqa: E731
        h.expect_error(f"native reduce-scatter {fmt} is refused", TypeError, refuse, "fp32 and fp64 only")
    mpi, _ = h.clusters()
    h.expect_error(
        "native off by default",
        RuntimeError,
        lambda: mpi.backend.native_all_reduce([np.zeros(2, np.float32)]),
        "native=True",
    )


def group_cases(h) -> None:
    """Collectives over groups (a 2-wide mesh: blocks of 2 and the strided groups across them): each group's ring
    runs over point-to-point messages between world ranks and equals the simulator, trace tiers included; MPI's
    own reduce-scatter over each group's sub-communicator (Comm.Split) is within its rounding bound, and exactly
    the ring's for groups of 2 (one addition per element)."""
    n, r = h.world_size, h.rank
    if n % 2:
        return
    for name, group in (("blocks of 2", Groups.blocks(n, 2)), ("strided", Groups.strided(n, 2))):
        for fmt in ("fp32", "fp16", "bf16"):
            for length in (0, 3, 1001):
                xs = make_inputs(18, n, length, fmt)
                for what, fn in (("reduce-scatter", reduce_scatter), ("all-reduce", all_reduce)):
                    h.compare(f"{what} over {name} {fmt} L={length}", lambda c, t, f=fn: f(c, t, group=group), xs,
                              gpus_per_node=2)
                shards = [x[: length // 2] for x in xs]
                h.compare(f"all-gather over {name} {fmt} L={length}", lambda c, t: all_gather(c, t, group=group),
                          shards, gpus_per_node=2)
                last = group.size - 1  # each group's last position (with N = 2 the strided groups hold one rank)
                h.compare(f"broadcast over {name} {fmt} L={length} from position {last}",
                          lambda c, t: broadcast(c, t, last, group=group), xs, gpus_per_node=2, trace="call")
        native, sim = h.clusters(native=True)
        xs = make_inputs(19, n, 2 * 16, "fp32")
        (got,) = native.backend.native_reduce_scatter([xs[r]], group=group)
        h.check(f"native reduce-scatter over {name} (groups of 2) equals the ring", got,
                reduce_scatter(sim, xs, group=group)[r])


def report_cases(h) -> None:
    """gather_reports on rank 0 equals the simulator's reports for all ranks; None elsewhere."""
    for options in ({}, {"trace": "call"}):
        mpi, sim = h.clusters(**options)
        mpi.trace.clear()
        sim.trace.clear()
        xs = make_inputs(17, h.world_size, 1001, "fp16")
        all_reduce(mpi, [xs[h.rank]])
        all_reduce(sim, xs)
        gathered = gather_reports(mpi)
        want = local_reports(sim) if h.rank == 0 else None
        h.check(f"gather_reports {options}", gathered, want)


def qgz_cases(h) -> None:
    """ZeRO++ qgZ over two nodes (the collective quantizes every local rank's gradient at once: one here, all N in
    the simulator), alone and with LoCo's errors fed back into a second call."""
    n = h.world_size
    d, shape = max(1, n // 2), (8 * n, 8)  # G = 8N groups of 8, M = 64N
    xs = make_inputs(11, n, 64 * n, "fp16", 3)

    def with_loco(c, t):
        state = LocoState(err_beta=0.8, reset_T=1024)
        all_to_all_quant_reduce(c, t, shape, d, loco=state, key="w")
        return all_to_all_quant_reduce(c, t, shape, d, loco=state, key="w")

    h.compare(f"qgZ over {n // d} nodes of {d}", lambda c, t: all_to_all_quant_reduce(c, t, shape, d), xs)
    h.compare(f"qgZ with LoCo over {n // d} nodes of {d}, second call", with_loco, xs)


def body(h) -> None:
    for cases in (reduce_scatter_cases, all_gather_cases, all_reduce_cases, broadcast_cases, call_granularity_cases,
                  exchange_cases, bad_input_cases, native_cases, group_cases, report_cases, qgz_cases):
        cases(h)


if __name__ == "__main__":
    main(body, "collectives_check")
