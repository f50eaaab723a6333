"""A ZeRO-3 step in plain NumPy with the machine's own fp32 GEMMs, written to be as fast as NumPy allows: the
yardstick the engine's default step is held against (benchmarks/yardstick.py, issue 63 Must show 2).

The same arithmetic as `ZeroEngine(model, Cluster(N), 3, Adam(lr), bf16-mixed with arithmetic="native")` for an MLP
of Linear/ReLU pairs and half-MSE, so it ends on that engine's fp32 masters bit for bit (the yardstick checks it
after every round): each rank's products are the machine's sgemm on its own (B, D) rows, as the native engine's.

How it was made as fast as NumPy allows. Everything that treats ranks alike runs once for all of them, on arrays with
a leading rank axis (N, ...): each op's N products are one batched `np.matmul` (NumPy calls the BLAS once per rank
inside it, so each rank's bits are its own product's: checked against a loop over ranks, under OpenBLAS's Haswell,
SkylakeX and Prescott kernels); the ReLU masks, casts, the loss and db are single calls over the (N, B, D) stack. A
gathered layer is widened to fp32 once, not once per rank and product. Each rank's packed gradient is written into
its row of one (N, N·s) bf16 buffer as it is made (no per-layer packing), and reduce-scattered once for the whole
buffer after backward, in N − 1 vectorised ring steps (every element's adds in the ring's order, so the same bits as
per layer: the adds are elementwise and the layers' windows disjoint); each bf16 add is made in float32 and rounded
once (the same bits as ml_dtypes' own add, which works an element at a time: collectives/_ops.py `add_bf16`).
Adam steps every rank's shard as one (N·s,) array in cache-sized blocks.

How that was checked: `python benchmarks/hand_zero3.py` runs it in turns (CPU time, seeded order each round) against
the obvious step (`HandZero3` in benchmarks/yardstick.py, its layer loop per rank) and against variants of itself,
each undoing one of the choices above (its products in a loop over ranks, ml_dtypes' own bf16 adds on the ring,
Adam in one pass), checks that all end on the same masters, and prints the share of its time spent inside its GEMM
calls: each variant is slower, and what is left beside the GEMMs is the widening and rounding between bf16 and
fp32, the ring's adds and Adam, each one NumPy pass (docs/speed.md, issue 63).

    python benchmarks/hand_zero3.py [--repeats 9] [--case large|small|both]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

BF16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
BLOCK = 2**17  # Adam's blocks (elementwise: the same bits as one pass)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each rank's product, (N, M, K) @ (K, N') or (N, M, K) @ (N, K, N'): NumPy's batched matmul calls the BLAS once
    per rank (the same bits as a loop over ranks)."""
    return np.matmul(a, b)


def add_bf16(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """bf16 a + b into `out`, by way of float32 rounded once: ml_dtypes' bits (float32 holds the sum of any two bf16
    values to within a rounding the one to bf16 cannot tell apart); b + a keeps ml_dtypes' sign of NaN + NaN."""
    np.copyto(out, np.add(b.astype(F32), a.astype(F32)), casting="unsafe")


class FastHandZero3:
    """ZeRO-3 on N ranks for an MLP [D_0, ..., D_K] with ReLU, half-MSE, bf16-mixed (native fp32 GEMMs), Adam (seed
    formula): every array with a leading rank axis."""

    matmul = staticmethod(matmul)
    add = staticmethod(add_bf16)
    block = BLOCK

    def __init__(self, widths, n: int, params: np.ndarray, lr: float = 1e-3):
        self.n, self.widths = n, widths
        self.layers, offset = [], 0  # (W window, b window, (D_out, D_in)) in the flat vector
        for d_in, d_out in zip(widths[:-1], widths[1:]):
            self.layers.append((slice(offset, offset + d_out * d_in),
                                slice(offset + d_out * d_in, offset + d_out * d_in + d_out), (d_out, d_in)))
            offset += d_out * d_in + d_out
        self.p = offset
        self.s = -(-offset // n)  # shard size: N·s = Ψ padded
        padded = np.zeros(n * self.s, np.float64)
        padded[:offset] = params
        self.master = padded.astype(F32)  # (N·s,) rank r's shard at [r·s, (r+1)·s)
        self.params = self.master.astype(BF16)  # (N·s,) every rank's bf16 shard, side by side: a gather is a view
        self.grads = np.zeros((n, n * self.s), BF16)  # (N, N·s) each rank's packed bf16 gradients
        self.reduced = np.zeros(n * self.s, BF16)  # (N·s,) rank r's reduced shard at [r·s, (r+1)·s)
        self.m, self.v = np.zeros(n * self.s, F32), np.zeros(n * self.s, F32)
        self.t, self.lr = 0, lr
        self.ring = [(np.arange(n) + k) % n for k in range(n + 1)]  # the rank adding its piece to chunk c at hop k

    def gathered(self, layer: int) -> tuple:
        """The layer's weights as every rank holds them after the all-gather: (W (D_out, D_in), b) in fp32, widened
        once (each rank's own fp32 copy would hold the same values)."""
        w, b, shape = self.layers[layer]
        return self.params[w].astype(F32).reshape(shape), self.params[b].astype(F32)

    def reduce_scatter(self) -> None:
        """The ring's sum over ranks of every rank's packed gradients, chunk c (rank c's shard) summed from rank c+1
        on: ((g[c+1] + g[c+2]) + ...) + g[c], one bf16 rounding per add, all chunks at once per hop."""
        n, s = self.n, self.s
        chunks = self.grads.reshape(n, n, s)  # (rank, chunk, s)
        acc = self.reduced.reshape(n, s)  # (chunk, s): chunk c lands on rank c
        owners = np.arange(n)
        if n == 1:
            acc[...] = chunks[0]
            return
        self.add(chunks[self.ring[1], owners], chunks[self.ring[2], owners], acc)
        for k in range(3, n + 1):
            self.add(acc, chunks[self.ring[k], owners], acc)

    def step(self, batches) -> list:
        n, layers = self.n, len(self.layers)
        x = np.stack([xb for xb, _ in batches]).astype(BF16)  # (N, B, D_0) each rank's micro-batch
        saved = []
        for i in range(layers):  # forward
            w, b = self.gathered(i)
            y = (self.matmul(x.astype(F32), w.T) + b).astype(BF16)  # (N, B, D_out): each rank's own sgemm
            saved.append((x, y if i < layers - 1 else None))
            if i < layers - 1:
                y[y.astype(F32) <= 0] = 0  # ReLU in place: the saved pre-activation's mask (<= 0) is unchanged
            x = y
        t = np.stack([tb for _, tb in batches])  # (N, B, D_K)
        d = x.astype(F32) - t
        losses = (0.5 * np.sum(d * d, axis=(1, 2), dtype=F32) / x.shape[1]).tolist()  # each rank's own sum
        dy = ((d / F32.type(x.shape[1])) * F32.type(1.0)).astype(BF16)  # (N, B, D_K)
        for i in reversed(range(layers)):  # backward
            w_win, b_win, _ = self.layers[i]
            w, _ = self.gathered(i)
            x_in, pre = saved[i]
            if pre is not None:
                dy[pre.astype(F32) <= 0] = 0  # the ReLU after this Linear
            dy32 = dy.astype(F32)
            np.copyto(self.grads[:, w_win].reshape((n,) + w.shape),
                      self.matmul(dy32.transpose(0, 2, 1), x_in.astype(F32)), casting="unsafe")  # dW, each rank's
            np.copyto(self.grads[:, b_win], dy32.sum(axis=1, dtype=F32), casting="unsafe")  # db, row by row
            dy = self.matmul(dy32, w).astype(BF16)  # dx (the first layer's too, as the engine makes it)
        self.reduce_scatter()
        if not np.isfinite(self.reduced.astype(F32)).all():  # a static loss scale of 1 raises on inf/NaN
            raise FloatingPointError("overflow")
        self.t += 1
        b1, b2 = 0.9, 0.999
        bc1, bc2 = F32.type(1.0 - b1**self.t), F32.type(1.0 - b2**self.t)
        c = dict(b1=F32.type(b1), nb1=F32.type(1.0 - b1), b2=F32.type(b2), nb2=F32.type(1.0 - b2), lr=F32.type(self.lr),
                 eps=F32.type(1e-8))
        g32 = self.reduced.astype(F32) / F32.type(n)
        for a in range(0, len(g32), self.block):
            part = slice(a, a + self.block)
            g, m, v = g32[part], self.m[part], self.v[part]
            m *= c["b1"]
            m += c["nb1"] * g
            v *= c["b2"]
            v += c["nb2"] * (g * g)
            self.master[part] -= c["lr"] * (m / bc1) / (np.sqrt(v / bc2) + c["eps"])
        self.params[...] = self.master
        return losses

    def full_master(self) -> np.ndarray:
        return self.master[: self.p]


# -- the check: variants that each undo one choice, in turns ---------------------------------------------------------
class PerRankProducts(FastHandZero3):
    """Each rank's products in a Python loop (the obvious way)."""

    @staticmethod
    def matmul(a, b):
        return np.stack([x @ (b if b.ndim == 2 else y) for x, y in zip(a, b if b.ndim == 3 else a)])


class MlDtypesAdds(FastHandZero3):
    """The ring's bf16 adds by ml_dtypes itself, an element at a time."""

    @staticmethod
    def add(a, b, out):
        np.add(a, b, out=out)


class AdamInOnePass(FastHandZero3):
    """Adam over the whole (N·s,) array at once: each temporary the size of every shard."""

    block = 1 << 40


class Timed(FastHandZero3):
    """The fast step with its GEMM calls' CPU time added up."""

    gemm = 0.0

    def matmul(self, a, b):
        c = time.process_time()
        out = np.matmul(a, b)
        self.gemm += time.process_time() - c
        return out


CASES = {"large": ([256, 1024, 512, 256], 8, 32), "small": ([32, 96, 64, 16], 64, 8)}  # yardstick.py's


def main():
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from yardstick import HandZero3

    from zerosim import MLP
    from zerosim.models import make_regression

    p = argparse.ArgumentParser(description="the fast hand step against variants of itself, in turns")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--case", choices=("large", "small", "both"), default="both")
    args = p.parse_args()
    print(f"CPU ms per step, median of {args.repeats} in turns; load average {os.getloadavg()[0]:.2f}")
    for name in (("large", "small") if args.case == "both" else (args.case,)):
        widths, n, batch = CASES[name]
        params = MLP(widths).init_params()
        batches = make_regression(np.random.default_rng(0), n, batch, widths)
        runs = {"fast (this file)": FastHandZero3(widths, n, params), "products per rank": PerRankProducts(
            widths, n, params), "ml_dtypes' adds": MlDtypesAdds(widths, n, params), "Adam in one pass": AdamInOnePass(
            widths, n, params), "the obvious step (yardstick.py)": HandZero3(widths, n, params)}
        timed = Timed(widths, n, params)
        cpu, order = {k: [] for k in runs}, random.Random(0)
        for round_ in range(args.repeats + 1):
            names = list(runs)
            order.shuffle(names)
            for k in names:
                c = time.process_time()
                runs[k].step(batches)
                if round_:
                    cpu[k].append(time.process_time() - c)
            masters = [r.full_master() for r in runs.values()]
            if not all(np.array_equal(masters[0], m) for m in masters[1:]):
                raise AssertionError(f"round {round_}: the variants end on different masters")
        c = time.process_time()
        for _ in range(args.repeats):
            timed.step(batches)
        share = timed.gemm / (time.process_time() - c)
        fast = statistics.median(cpu["fast (this file)"])
        print(f"{name} (MLP {widths}, N = {n}): GEMM calls {share:.0%} of the fast step")
        for k, v in cpu.items():
            print(f"  {k:<34} {statistics.median(v) * 1e3:8.2f} ms   ÷ fast {statistics.median(v) / fast:5.2f}")


if __name__ == "__main__":
    main()
