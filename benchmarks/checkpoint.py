"""Saving and loading a sharded checkpoint ÷ writing and reading the same bytes with plain numpy.save / load.

A ZeRO-3 engine on N = 8 ranks with an MLP of ~10M parameters (bf16-mixed Adam: 14 bytes per parameter
across the ranks: 16-bit params, fp32 master, m and v). zerosim's save writes one safetensors file per
rank (temp name + rename), checksums each (XXH3-64), writes the manifest and `latest`; reading checks
every size and checksum and reads every file (`read_state`); `load` also builds a new
engine on a new cluster holding the state (allocating every rank's buffers: page faults included).
The yardstick writes each rank's same arrays with `numpy.save` into .npy files and reads them all back
(holding them all at the end, as `read_state` does).
Two ratios: the checkpoint's own I/O (save + read) and the whole round trip (save + load into a new
engine). Target: <= 3 for the I/O.

Measured in one run, in turns, median of --repeats (the ratios: the median of each round's own ratio), BLAS
on one thread, files in a temporary folder.

    python benchmarks/checkpoint.py [--repeats 5]
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from zerosim import MLP, Adam, Cluster, ZeroEngine  # noqa: E402
from zerosim.checkpoint import load, read_state, save  # noqa: E402
from zerosim.checkpoint._save import rank_tensors  # noqa: E402

WIDTHS = [1024, 4096, 1280, 256]  # 9,770,496 parameters, biases included


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--ranks", type=int, default=8)
    args = p.parse_args()
    model = MLP(WIDTHS)
    engine = ZeroEngine(model, Cluster(args.ranks, trace="call", timeline=False), 3, Adam(), "bf16-mixed")
    tensors = [rank_tensors(r) for r in engine.cluster.ranks]
    nbytes = sum(a.nbytes for t in tensors for a in t.values())
    root = tempfile.mkdtemp()
    try:
        io, full, base = [], [], []
        for i in range(args.repeats):  # in turns
            folder, d = os.path.join(root, f"zerosim{i}"), os.path.join(root, f"numpy{i}")

            def numpy_round_trip():
                os.makedirs(d)
                for r, t in enumerate(tensors):
                    for name, a in t.items():
                        np.save(os.path.join(d, f"{r}.{name}.npy"), a)
                # kept until every file is read, as read_state returns every rank's tensors (memory that must
                # be fresh pages, not the one array's pages reused over and over)
                return [np.load(os.path.join(d, f"{r}.{name}.npy")) for r, t in enumerate(tensors) for name in t]

            if i % 2:  # who goes first alternates: the second writer may meet the first one's dirty pages
                base.append(timed(numpy_round_trip))
            save_time = timed(lambda: save(engine, folder))
            io.append(save_time + timed(lambda: read_state(folder, model)))
            full.append(
                save_time
                + timed(lambda: load(folder, Cluster(args.ranks, trace="call", timeline=False), model))
            )
            if i % 2 == 0:
                base.append(timed(numpy_round_trip))
            shutil.rmtree(folder)  # the same disk state for every round: no pile of dirty pages from earlier rounds
            shutil.rmtree(d)
    finally:
        shutil.rmtree(root)
    threads = {v: os.environ[v] for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    t_io, t_full, t_base = statistics.median(io), statistics.median(full), statistics.median(base)
    r_io = statistics.median(a / b for a, b in zip(io, base))  # each round's own ratio: a busy spell hits both
    r_full = statistics.median(a / b for a, b in zip(full, base))
    print(f"checkpoint round trip, MLP {WIDTHS}: {model.num_params:,} params, ZeRO-3 on {args.ranks} ranks, "
          f"{nbytes / 1e6:.1f} MB; median of {args.repeats} in turns; BLAS threads {threads}")
    print(f"  numpy.save + numpy.load of the same arrays              {t_base * 1e3:8.1f} ms")
    print(f"  zerosim save + read_state (checksums checked)           {t_io * 1e3:8.1f} ms   ratio {r_io:5.2f} (target "
          "<= 3)")
    print(f"  zerosim save + checkpoint.load (a new engine built)    {t_full * 1e3:8.1f} ms   ratio {r_full:5.2f}")


if __name__ == "__main__":
    main()
