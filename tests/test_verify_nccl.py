"""`zerosim verify-nccl` without a GPU: it refuses in one clear line; its comparison finds a difference and
reports agreement (against a stand-in for NCCL's collectives); the ring graph file NCCL reads is well formed.

The run on GPUs themselves is tests/gpu/test_verify_nccl_gpu.py (skipped without CuPy and two GPUs).
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from helpers import bits

from zerosim import Cluster
from zerosim.collectives import all_gather, nccl_all_reduce, reduce_scatter
from zerosim.frameworks.nccl import RING_ENV, random_inputs, ring_environment, ring_graph_xml, verify
from zerosim.precision import cast, get_format


@pytest.mark.bad_input("command line")
def test_without_cupy_it_refuses_in_one_line():
    code = "import sys; sys.modules['cupy'] = None; from zerosim.cli.main import main; sys.exit(main(['verify-nccl']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("zerosim verify-nccl: error: needs CuPy with NCCL and NVIDIA GPUs, and cannot run here")
    assert "CuPy is not installed" in lines[0]


@pytest.mark.bad_input("command line")
def test_fp8_is_refused_before_looking_for_gpus(capsys):
    from zerosim.cli.main import main

    assert main(["verify-nccl", "--dtypes", "fp8_e4m3"]) == 2
    assert capsys.readouterr().err == "zerosim verify-nccl: error: --dtypes: NCCL reduces fp16, bf16 and fp32 here, " \
                                      "not fp8_e4m3\n"


def test_ring_graph_file_names_every_rank_in_order():
    root = ET.fromstring(ring_graph_xml(5))
    (graph,) = root.findall("graph")
    assert graph.get("id") == "0" and graph.get("pattern") == "4" and graph.get("nchannels") == "1"
    (channel,) = graph.findall("channel")
    assert [int(g.get("rank")) for g in channel.findall("gpu")] == [0, 1, 2, 3, 4]
    for attr in ("crossnic", "speedintra", "speedinter", "typeintra", "typeinter", "samechannels"):
        assert graph.get(attr) is not None  # ncclTopoGetGraphFromXmlSub reads each of them


def test_ring_environment_writes_the_graph_and_sets_one_ring(tmp_path):
    env = ring_environment(3, str(tmp_path))
    assert env["NCCL_ALGO"] == "Ring" and env["NCCL_PROTO"] == "Simple"
    assert env["NCCL_MAX_NCHANNELS"] == env["NCCL_MIN_NCHANNELS"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"
    assert open(env["NCCL_GRAPH_FILE"]).read() == ring_graph_xml(3)
    assert set(RING_ENV) < set(env)


class StandInNccl:
    """NCCL's three collectives as a GPU would give them in one ring in rank order (zerosim's own ring and chunk
    map), or, with `exact=True`, each sum computed in float64 and rounded once — which is not what any ring does."""

    def __init__(self, n, exact=False):
        self.sim, self.exact, self.n = Cluster(n, trace="call"), exact, n

    def native_reduce_scatter(self, xs, fmt=None):
        if not self.exact:
            return reduce_scatter(self.sim, xs)
        total = cast(np.sum([x.astype(np.float64) for x in xs], axis=0), get_format(xs[0].dtype))
        return np.split(total, self.n)

    def native_all_gather(self, shards, fmt=None):
        return all_gather(self.sim, shards)

    def native_all_reduce(self, xs, fmt=None):
        return nccl_all_reduce(self.sim, xs)


def _rows(n, exact, length=1001):
    cluster = Cluster(n)
    cluster.backend = StandInNccl(n, exact)
    return {(r.collective, r.dtype, r.against): r for r in verify(cluster, length, seed=1, simulator=Cluster(n))}


def test_verify_agrees_with_a_faithful_ring():
    rows = _rows(4, exact=False)
    assert all(r.agrees for r in rows.values() if r.required)
    assert len(rows) == 12 and all(r.elements > 0 for r in rows.values())


def test_verify_finds_sums_in_another_order():
    rows = _rows(4, exact=True)
    # one rounding of the exact sum differs from the ring's three roundings somewhere in 1000 fp16/bf16 sums
    assert not rows[("reduce-scatter", "fp16", "ring")].agrees and not rows[("reduce-scatter", "bf16", "ring")].agrees
    assert rows[("reduce-scatter", "fp16", "ring")].first is not None
    assert rows[("all-gather", "fp16", "ring")].agrees


def test_random_inputs_round_at_every_hop():
    xs = random_inputs(4, 1000, "fp16", seed=0)
    ring = reduce_scatter(Cluster(4), xs)
    exact = cast(np.sum([x.astype(np.float64) for x in xs], axis=0), "fp16")
    assert not np.array_equal(bits(np.concatenate(ring)), bits(exact))  # the data tells the orders apart
