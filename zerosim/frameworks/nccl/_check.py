"""NCCL's own collectives against zerosim's ring, byte for byte: the library side of `zerosim verify-nccl`.

zerosim's ring is NCCL's ring *for one ring in rank order* (docs/explanation/design.md). This file sets NCCL up to run
exactly that, runs ncclReduceScatter / ncclAllGather / ncclAllReduce on N GPUs (the cupy backend's
`native_*` calls, one process driving every GPU), and compares every byte with the numpy simulator's
ring and, for all-reduce, with NCCL's own chunk map (`nccl_all_reduce`, zerosim's `allreduce="nccl"`).

What makes NCCL run one ring in rank order, with the Simple protocol (NCCL 2.30, src/):

    NCCL_ALGO=Ring            graph/tuning.cc ncclTopoTuneModel: parseList enables only the ring for every
                              function (no tree, PAT, NVLS, CollNet: each sums in another order)
    NCCL_PROTO=Simple         the same parseList: LL and LL128 cut the buffer into other chunk sizes, which moves
                              all-reduce's chunk boundaries (device/all_reduce.h runRing, ncclCollCbdPart)
    NCCL_MIN_NCHANNELS=1      graph/connect.cc ncclMinNchannels / ncclMaxNchannels: one channel, so one ring holds
    NCCL_MAX_NCHANNELS=1        the whole buffer (each channel has its own ring and a contiguous part)
    NCCL_MIN_CTAS=1           init.cc (NCCL_MIN_CTAS / NCCL_MAX_CTAS override the communicator's minCTAs /
    NCCL_MAX_CTAS=1             maxCTAs, the newer names that also bound the channels a collective uses)
    NCCL_NVLS_ENABLE=0        transport/nvls.cc: no NVLink SHARP (in-switch sums) on NVSwitch machines
    NCCL_COLLNET_ENABLE=0     init.cc: no in-network reduction
    NCCL_GRAPH_FILE=ring.xml  graph/search.cc ncclTopoCompute loads the ring from this XML instead of searching
                              the topology; ncclTopoGetChannelFromXml reads each <gpu rank="r"/> in order, so the
                              ring is 0 -> 1 -> ... -> N-1 -> 0 (the search may pick another order, e.g. on PCIe)

In that ring (device/reduce_scatter.h runRing: step 0 sends the chunk of ringRanks[nranks-1], the previous
rank; recvReduceSend adds its own copy; recvReduceCopy leaves chunk r at rank r) chunk c is summed as
((x[c+1] + x[c+2]) + ...) + x[c], each add rounded to the datatype: zerosim's ring. All-gather forwards copies
(device/all_gather.h runRing). All-reduce walks the same ring over its own chunk map (device/all_reduce.h,
collectives/chunk_maps/_nccl.py), which zerosim's `all_reduce` (equal contiguous chunks) need not share.
"""

from __future__ import annotations

import os

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.collectives import all_gather, all_reduce, reduce_scatter
from zerosim.collectives.chunk_maps import nccl_all_reduce
from zerosim.precision import cast, get_format

DTYPES = ("fp16", "bf16", "fp32")
RING_ENV = {  # see the module docstring for what each does and where NCCL reads it
    "NCCL_ALGO": "Ring",
    "NCCL_PROTO": "Simple",
    "NCCL_MIN_NCHANNELS": "1",
    "NCCL_MAX_NCHANNELS": "1",
    "NCCL_MIN_CTAS": "1",
    "NCCL_MAX_CTAS": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_COLLNET_ENABLE": "0",
}


def ring_graph_xml(n: int) -> str:
    """An NCCL graph file (NCCL_GRAPH_FILE) with one ring channel through ranks 0..n-1 in order.

    Graph id 0 is the ring graph (init.cc: ringGraph->id = 0); pattern 4 is NCCL_TOPO_PATTERN_RING
    (include/graph.h); each <gpu> names its rank, which ncclTopoGetChannelFromXml takes as it is."""
    gpus = "\n".join(f'      <gpu dev="{r:x}" rank="{r}"/>' for r in range(n))
    return ('<graphs version="1">\n'
            '  <graph id="0" pattern="4" crossnic="0" nchannels="1" speedintra="20" speedinter="20" latencyinter="0" '
            'typeintra="SYS" typeinter="SYS" samechannels="1">\n'
            f"    <channel>\n{gpus}\n    </channel>\n  </graph>\n</graphs>\n")


def ring_environment(n: int, directory: str) -> dict:
    """The environment NCCL must see at communicator creation to run one ring in rank order; writes the graph
    file into `directory`. Returns {variable: value} (the caller sets them before NCCL initialises)."""
    from zerosim.outputs import check_file, check_folder, write_atomic

    path = check_file(os.path.join(check_folder(directory, "directory"), f"zerosim_ring_{n}.xml"))  # zerosim/outputs.py

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(ring_graph_xml(n))

    write_atomic(path, write)
    return dict(RING_ENV, NCCL_GRAPH_FILE=path)


@dataclass(frozen=True)
class Agreement:
    """One collective in one dtype: how many result bytes NCCL and zerosim's yardstick share."""

    collective: str  # "reduce-scatter", "all-gather", "all-reduce"
    dtype: str
    against: str  # "ring" (zerosim's ring) or "nccl chunk map" (allreduce="nccl")
    elements: int  # result elements compared, over all ranks
    mismatched: int  # elements whose bytes differ
    first: int | None  # (rank, index) of the first difference, as "r:i", or None
    required: bool  # a mismatch here is a failure (False: shown for information)

    @property
    def agrees(self) -> bool:
        return self.mismatched == 0


def random_inputs(n: int, length: int, fmt, seed: int) -> list:
    """(length,) per rank in `fmt`: normal values of spread magnitudes, so sums round at every hop."""
    rng = np.random.default_rng(seed)
    f = get_format(fmt)
    scale = np.exp2(rng.integers(-6, 7, size=(n, length)))
    return [cast(rng.standard_normal(length) * s, f) for s in scale]


def _compare(name, dtype, against, ours, theirs, required) -> Agreement:
    mismatched, first, total = 0, None, 0
    for r, (a, b) in enumerate(zip(ours, theirs)):
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        width = f"uint{8 * a.dtype.itemsize}"
        diff = np.flatnonzero(a.view(width) != b.view(a.dtype).view(width)) if a.shape == b.shape else np.arange(1)
        total += a.size
        mismatched += diff.size
        if diff.size and first is None:
            first = f"{r}:{int(diff[0])}"
    return Agreement(name, dtype, against, total, mismatched, first, required)


def verify(nccl_cluster, length: int, dtypes=DTYPES, seed: int = 0, simulator=None) -> list:
    """Run NCCL's three collectives on `nccl_cluster` (backend "cupy", one process driving N GPUs) and
    zerosim's on the numpy `simulator` (a `Cluster(N)`) over the same random data; one `Agreement` per
    collective, dtype and yardstick. `length`: elements per rank (reduce-scatter uses the largest multiple of N)."""
    backend, n = nccl_cluster.backend, nccl_cluster.world_size
    if simulator is None or simulator.world_size != n:
        raise ValueError(f"verify needs a numpy Cluster({n}) to compare with")
    rows = []
    for k, name in enumerate(dtypes):
        fmt = get_format(name)
        xs = random_inputs(n, length, fmt, seed + k)
        even = [x[: length - length % n] for x in xs]  # ncclReduceScatter takes N equal chunks
        ours = reduce_scatter(simulator, even)
        rows.append(_compare("reduce-scatter", name, "ring", ours, backend.native_reduce_scatter(even, fmt=fmt), True))
        shards = [x[: length // n] for x in xs]
        ours = all_gather(simulator, shards)
        rows.append(_compare("all-gather", name, "ring", ours, backend.native_all_gather(shards, fmt=fmt), True))
        theirs = backend.native_all_reduce(xs, fmt=fmt)
        rows.append(_compare("all-reduce", name, "nccl chunk map", nccl_all_reduce(simulator, xs), theirs, True))
        rows.append(_compare("all-reduce", name, "ring", all_reduce(simulator, xs), theirs, False))
    return rows
