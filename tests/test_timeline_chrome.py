"""The Chrome / Perfetto trace JSON, parsed back and checked against the Trace Event Format.

Per phase type, the fields the format requires ("X" complete events: name, ph, ts, dur, pid, tid;
"M" metadata: name among process_name / process_sort_index / thread_name / thread_sort_index, pid,
tid and args.name or args.sort_index), one track per (rank, stream), and on every track events in
time order that never overlap, in the integer nanoseconds Perfetto reads them as (llround(µs·1000)).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, ZeroEngine
from zerosim.analysis.timeline import Hardware, simulate, write_chrome_trace
from zerosim.analysis.timeline import _chrome_trace as chrome_trace_module

METADATA = {
    "process_name": "name",
    "thread_name": "name",
    "process_sort_index": "sort_index",
    "thread_sort_index": "sort_index",
}
X_FIELDS = {
    "name": str,
    "cat": str,
    "ph": str,
    "ts": (int, float),
    "dur": (int, float),
    "pid": int,
    "tid": int,
    "args": dict,
}


@pytest.fixture(scope="module")
def result():
    cluster = Cluster(3, trace="call")
    engine = ZeroEngine(MLP([8, 16, 4]), cluster, 3, Adam())
    rng = np.random.default_rng(0)
    engine.step(
        [
            (rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((2, 4)).astype(np.float32))
            for _ in range(3)
        ]
    )
    return simulate(cluster.trace, Hardware("h100", "ib_ndr"))


def ns(us) -> int:
    return round(us * 1000)  # what Perfetto's importer does with a fractional microsecond value


def test_every_event_has_the_fields_its_phase_requires(result, tmp_path):
    path = write_chrome_trace(result, tmp_path / "step.json")
    doc = json.loads(Path(path).read_text())
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    named_threads, named_processes, tracks = set(), set(), {}
    for ev in events:
        assert ev["ph"] in ("X", "M"), ev
        if ev["ph"] == "M":
            assert ev["name"] in METADATA and isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
            value = ev["args"][METADATA[ev["name"]]]
            assert isinstance(value, str if METADATA[ev["name"]] == "name" else int)
            if ev["name"] == "thread_name":
                named_threads.add((ev["pid"], ev["tid"]))
            if ev["name"] == "process_name":
                named_processes.add(ev["pid"])
            continue
        for field, kind in X_FIELDS.items():
            assert isinstance(ev[field], kind), (field, ev)
        assert ev["ts"] >= 0 and ev["dur"] >= 0
        tracks.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    # one track per (rank, stream), each named; one process per rank, named; tid 0 never used
    assert set(tracks) <= named_threads and len(named_threads) == 2 * result.world_size
    assert named_processes == {pid for pid, _ in named_threads} and len(named_processes) == result.world_size
    assert all(tid != 0 for _, tid in named_threads)
    assert len({tid for _, tid in named_threads}) == len(named_threads)  # tids unique across processes
    assert not {tid for _, tid in named_threads} & named_processes  # and never equal to a pid
    n_intervals = sum(len(result.track(r, s)) for r in range(result.world_size) for s in ("compute", "comm"))
    assert sum(len(t) for t in tracks.values()) == n_intervals
    for track in tracks.values():
        for a, b in zip(track, track[1:]):
            assert ns(a["ts"]) + ns(a["dur"]) <= ns(b["ts"]), (a, b)  # ordered, non-overlapping in ns


def test_times_are_the_simulated_ones(result, tmp_path):
    doc = json.loads(Path(write_chrome_trace(result, tmp_path / "t.json")).read_text())
    xs = [ev for ev in doc["traceEvents"] if ev["ph"] == "X"]
    first_comm = result.track(0, "comm")[0]
    ev = next(e for e in xs if e["pid"] == 1 and e["name"] == first_comm.label)
    assert ns(ev["ts"]) == round(first_comm.start * 1e9) and ns(ev["ts"]) + ns(ev["dur"]) == round(first_comm.end * 1e9)
    assert ev["cat"] == "gather params" and ev["args"]["collective"] == "all_gather"


def test_a_subset_of_ranks(result, tmp_path):
    doc = json.loads(Path(write_chrome_trace(result, tmp_path / "one.json", ranks=[2])).read_text())
    assert {ev["pid"] for ev in doc["traceEvents"]} == {3}  # rank 2 is pid 3


def test_write_is_atomic(result, tmp_path, monkeypatch):
    path = tmp_path / "step.json"
    path.write_text("previous contents")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(chrome_trace_module.json, "dump", broken)
    with pytest.raises(OSError, match="disk full"):
        write_chrome_trace(result, path)
    assert path.read_text() == "previous contents"  # the old file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["step.json"]  # and no temporary file is left behind


def test_offloads_tracks_have_their_own_ids_and_names():
    """With offload, each rank's process has five named threads (compute, comm, cpu, pcie, nvme), each tid once."""
    from zerosim import get_optimizer
    from zerosim.analysis.timeline import chrome_trace_events
    from zerosim.models import make_regression
    from zerosim.parallel.offload import Offload

    model = MLP([4, 8, 2])
    engine = ZeroEngine(model, Cluster(3), 2, get_optimizer("adam", formula="deepspeed-cpu"), "bf16-mixed",
                        parallelisms=(Offload("cpu"),))
    engine.step(make_regression(np.random.default_rng(0), 3, 4, [4, 8, 2]))
    result = simulate(engine.cluster.trace, Hardware("h100", "nvlink4", "bf16"))
    assert result.streams == ("compute", "comm", "cpu", "pcie", "nvme")
    events = chrome_trace_events(result)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert len(names) == 3 * 5  # every (rank, stream) its own thread
    assert sorted(names.values()).count("PCIe copies") == 3 and sorted(names.values()).count("host CPU (offloaded "
                                                                                               "optimizer)") == 3
    assert {(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"} <= set(names)  # every interval on a named one
