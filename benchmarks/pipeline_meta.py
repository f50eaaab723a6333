"""How long the meta backend takes to account one pipeline-parallel step of Llama 3.1 405B on 16,384 GPUs.

The run: Llama 3.1 405B (torchtitan's llama3 "405B": dim 16384, 126 layers, 128 heads, 8 KV heads, FFN 53248,
vocabulary 128256; torchtitan/models/llama3/__init__.py `_405b`, b5bcd76) on 16,384 GPUs as the Llama 3 paper ran
it (Dubey et al. 2024, Table 4: TP 8 × PP 16 × DP 128, 8,192-token sequences), every stage's ZeroEngine on the meta
backend with one representative rank a stage (`Cluster(..., backend="meta", hosted=<each stage's first rank>)`): its
ledger is every rank of its stage's (their buffers are the same shapes), the ring's bytes in closed form. Alike
actions are written again from a record instead of run (parallel/pipeline/_repeat.py: micro-batch 1's on its own rank
or on a rank holding a stage of the same make; the same events, peaks and bytes, tests/test_pipeline_repeat.py);
`--run-every-action` runs them all, as before.

    python benchmarks/pipeline_meta.py [--repeats 3] [--micro-batches 16]

Per configuration (schedule × ZeRO stage): the wall and CPU time of building the engines and one step (median of
--repeats), and what the ledgers say: each stage's peak (GB) and its activations' peak, the first stage's and the
last's; first, the yardstick: the same model, TP and micro-batches with no pipeline. Target (issue 59): under a
second per configuration.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from zerosim import Adam, Cluster  # noqa: E402
from zerosim.models import Llama, MetaLlama  # noqa: E402
from zerosim.parallel import ParallelDims  # noqa: E402
from zerosim.parallel.pipeline import PipelineEngine  # noqa: E402
from zerosim.parallel.tensor import TensorParallel  # noqa: E402

N, TP, PP = 16384, 8, 16
SEQ = 8192
CONFIGS = [  # (schedule, virtual stages, ZeRO stage, recipe): Megatron's distributed optimizer, torchtitan's FSDP
    ("1f1b", 1, 1, "seeds"),
    ("interleaved-1f1b", 2, 1, "seeds"),
    ("1f1b", 1, 3, "fsdp2"),
    ("zero-bubble", 2, 1, "seeds"),
]
GB = 1e9


def llama_405b(checkpoint: str = "block") -> Llama:
    """torchtitan's 405B (its llama3_405b trains with FullAC: every block's input kept, the block recomputed)."""
    return Llama(vocab=128256, d_model=16384, n_heads=128, n_layers=126, seq_len=SEQ, d_ff=53248, n_kv_heads=8,
                 rope_theta=500000.0, checkpoint=checkpoint)


def account(schedule: str, virtual: int, stage: int, recipe: str, micro: int, checkpoint: str = "block",
            repeat: bool = True):
    """Build the pipeline on the meta backend and run one step; returns the cluster."""
    dims = ParallelDims(N, pp=PP, tp=TP)
    first = tuple(members[0] for members in dims.groups("pp").members[:1])[0]  # rank 0's pipeline: one rank a stage
    stage_ranks = dims.groups("pp").group_of(first)
    cluster = Cluster(N, backend="meta", hosted=stage_ranks, trace="call", timeline=False)
    tensor = TensorParallel(MetaLlama(llama_405b(checkpoint)), TP)
    engine = PipelineEngine(tensor.model, cluster, stage, Adam(), "bf16-mixed", pp=PP, schedule=schedule,
                            micro_batches=micro, virtual_stages=virtual, tensor=tensor, recipe=recipe, repeat=repeat)
    ids = cluster.backend.empty((1, SEQ), np.int64)  # one 8,192-token sequence a micro-batch
    engine.step([[(ids, ids)] * micro for _ in range(dims.dp)])
    return cluster


def without_pipeline(micro: int, checkpoint: str = "block"):
    """The yardstick: the same model, TP and micro-batches on one stage's worth of ranks (N / PP) with no pipeline:
    ZeroEngine with K = M, one representative rank. What the pipeline adds is the rest."""
    from zerosim import ZeroEngine

    tensor = TensorParallel(MetaLlama(llama_405b(checkpoint)), TP)
    cluster = Cluster(N // PP, backend="meta", trace="call", timeline=False)
    engine = ZeroEngine(tensor.model, cluster, 1, Adam(), "bf16-mixed", accumulation_steps=micro,
                        parallelisms=(tensor,))
    ids = cluster.backend.empty((1, SEQ), np.int64)
    engine.step([[(ids, ids)] * micro])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--micro-batches", type=int, default=16)  # the Llama 3 paper's 16M tokens: 16 sequences a DP rank
    p.add_argument("--checkpoint", choices=("block", "none"), default="block")
    p.add_argument("--run-every-action", action="store_true", help="no action written again from a record")
    args = p.parse_args()
    if args.repeats < 1 or args.micro_batches < 1:
        p.error("--repeats and --micro-batches must be at least 1")
    print(f"Llama 3.1 405B on {N:,} GPUs: TP {TP} × PP {PP} × DP {N // (TP * PP)}, {args.micro_batches} micro-batches "
          f"of one {SEQ}-token sequence, bf16, Adam, activation checkpointing {args.checkpoint!r}")
    w0, c0 = time.perf_counter(), time.process_time()
    without_pipeline(args.micro_batches, args.checkpoint)
    print(f"  yardstick, no pipeline (ZeroEngine, TP {TP}, K = {args.micro_batches}, {N // PP:,} ranks): "
          f"{time.perf_counter() - w0:.2f} s wall, {time.process_time() - c0:.2f} s CPU")
    for schedule, virtual, stage, recipe in CONFIGS:
        walls, cpus = [], []
        for _ in range(args.repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            cluster = account(schedule, virtual, stage, recipe, args.micro_batches, args.checkpoint,
                              not args.run_every_action)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        peaks = [r.ledger.peak() / GB for r in cluster.ranks]
        acts = [r.ledger.peak("activations") / GB for r in cluster.ranks]
        print(f"  {schedule:16s} V={virtual} ZeRO-{stage} ({recipe:5s}): {statistics.median(walls):.2f} s wall, "
              f"{statistics.median(cpus):.2f} s CPU; peak per GPU: first stage {peaks[0]:.1f} GB "
              f"(activations {acts[0]:.1f}), last {peaks[-1]:.1f} GB (activations {acts[-1]:.1f}), "
              f"largest {max(peaks):.1f} GB")


if __name__ == "__main__":
    main()
