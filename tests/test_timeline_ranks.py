"""A Timeline's per-rank sums over the ranks that computed only (the meta backend's representative), against every
rank summed one by one as the Timeline did before: the same bits for every rank."""

from __future__ import annotations

import numpy as np

from zerosim import Adam, Cluster, ZeroEngine
from zerosim.analysis.timeline import Hardware, simulate
from zerosim.analysis.timeline._result import _busy_before
from zerosim.models.meta import MetaModel


def test_ranks_that_computed_nothing_expose_all_their_communication():
    model = MetaModel.from_params(10**8, layers=6)
    cluster = Cluster(4096, backend="meta", trace="call", timeline=False)
    engine = ZeroEngine(model, cluster, 3, Adam(), "bf16-mixed")
    engine.step(model.batches(cluster))
    t = simulate(cluster.trace, Hardware("h100", "nvlink4", "bf16", inter_link="ib_ndr"))
    comm = t._u_end - t._u_start
    want = np.empty(t.world_size)
    for r in range(t.world_size):  # the loop over every rank, as written before
        cs, ce = t._rank_columns(r)
        want[r] = (comm - (_busy_before(cs, ce, t._u_end) - _busy_before(cs, ce, t._u_start))).sum()
    assert np.array_equal(t.exposed_comm, want)
    assert set(np.unique(t._c_rank).tolist()) == {0}  # only the representative computed
    assert t.exposed_comm[1] == comm.sum()
