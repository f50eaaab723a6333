"""Check zerosim's ring against NCCL's own bytes on your GPUs (needs CuPy with NCCL and N NVIDIA GPUs).

    zerosim verify-nccl                       every GPU this process sees, fp16, bf16 and fp32
    zerosim verify-nccl --ranks 4 --elements 100000 --dtypes bf16

NCCL is set up to run one ring in rank order with its Simple protocol (NCCL_ALGO=Ring, NCCL_PROTO=Simple,
one channel, no NVLS or CollNet, the ring's order from an NCCL_GRAPH_FILE; zerosim/frameworks/nccl/_check.py
says why each). Then ncclReduceScatter, ncclAllGather and ncclAllReduce run on random data and every byte
is compared with zerosim's ring and, for all-reduce, with NCCL's chunk map (`--allreduce nccl`). Exit status 1
if any required comparison differs, 2 if it cannot run here.
"""

from __future__ import annotations

import os
import tempfile

HELP = "compare zerosim's ring with NCCL's own collectives, byte for byte, on your GPUs"


def add_arguments(p) -> None:
    p.add_argument("--ranks", type=int, default=None, help="N GPUs, one rank each (default: every GPU CuPy sees)")
    p.add_argument("--elements", type=int, default=3 * 2**20 + 1000,
                   help="elements per rank (default 3·2**20 + 1000: all-reduce's 2 MiB chunks loop more than once)")
    p.add_argument("--dtypes", default="fp16,bf16,fp32", help="comma-separated formats (default fp16,bf16,fp32)")
    p.add_argument("--seed", type=int, default=0)


def run(args) -> int:
    from zerosim.backends.cupy import BackendUnavailable, import_cupy
    from zerosim.cluster import Cluster
    from zerosim.frameworks.nccl import ring_environment, verify
    from zerosim.precision import get_format

    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if get_format(d).bits == 8 or get_format(d).bits == 64:
            raise ValueError(f"--dtypes: NCCL reduces fp16, bf16 and fp32 here, not {d}")
    if args.elements < 1:
        raise ValueError(f"--elements must be >= 1, got {args.elements}")
    try:
        _, _, count = import_cupy()
    except BackendUnavailable as e:
        raise BackendUnavailable(f"needs CuPy with NCCL and NVIDIA GPUs, and cannot run here: {e}") from None
    n = count if args.ranks is None else args.ranks
    if not 1 <= n <= count:
        raise ValueError(f"--ranks {n}: CuPy sees {count} GPU(s); one rank per GPU")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(ring_environment(n, tmp))  # before the communicators exist: NCCL reads them at init
        nccl = Cluster(n, backend="cupy", launch="single", arrays="host")
        rows = verify(nccl, args.elements, dtypes, args.seed, simulator=Cluster(n, trace="call"))
        nccl.backend.close()
    print(f"NCCL {nccl.backend.nccl_version} on {n} GPU(s), {args.elements:,} elements per rank, one ring in rank "
          "order (Ring, Simple, 1 channel)")
    if n == 1:
        print("NOTE: with one rank every collective is a copy: this checks the plumbing, not the ring's order")
    for row in rows:
        verdict = "agrees" if row.agrees else f"DIFFERS in {row.mismatched:,} elements (first: rank:index {row.first})"
        note = "" if row.required else "  (for information: zerosim's all_reduce cuts other chunks)"
        what = f"{row.collective:<15}{row.dtype:<6} vs {row.against:<15}"
        print(f"  {what} {row.elements:>12,} elements  {verdict}{note}")
    failed = [r for r in rows if r.required and not r.agrees]
    print("all required comparisons agree" if not failed else f"{len(failed)} required comparison(s) differ")
    return 1 if failed else 0
