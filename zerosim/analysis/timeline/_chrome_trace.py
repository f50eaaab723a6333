"""A simulated step as Chrome / Perfetto trace-event JSON: one process per rank, one thread per stream.

The Trace Event Format (the JSON Object Format: {"traceEvents": [...]}) as chrome://tracing and
ui.perfetto.dev read it:

    "X" complete event   name, cat, ph, ts, dur, pid, tid, args   (ts and dur in microseconds)
    "M" metadata event   name ("process_name", "thread_name", "process_sort_index",
                         "thread_sort_index"), ph, pid, tid, args ({"name": ...} or {"sort_index": ...})

One process per rank, pid = rank + 1, and one thread per stream, tid = N + 1 + 2·rank (compute) or
N + 2 + 2·rank (communication): never 0 and never equal to a pid, because Perfetto's JSON importer
(src/trace_processor/importers/json/json_trace_tokenizer.cc) takes tid 0 as "no tid" and replaces it
with the pid, and keys threads by tid across processes. Times are written as whole
nanoseconds divided by 1000: Perfetto turns a fractional µs value back into integer ns with
llround(ts * 1000) (src/trace_processor/importers/json/json_trace_tokenizer.cc, `CoerceToTs`), so
every event lands on the nanosecond it was written at and events that touch on a track (one ends
as the next starts) stay touching, never overlapping. No "displayTimeUnit": Perfetto would read
"ns" there as the unit of ts itself.

Open the file at ui.perfetto.dev ("Open trace file") or chrome://tracing ("Load").
"""

from __future__ import annotations

import json

from zerosim.analysis.timeline._result import STREAMS
from zerosim.cluster import Compute, OptimizerStep
from zerosim.outputs import check_file, write_atomic

THREAD_NAMES = {"compute": "compute stream", "comm": "communication stream", "cpu": "host CPU (offloaded optimizer)",
                "pcie": "PCIe copies", "nvme": "NVMe reads and writes"}


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _args(iv, call_bytes) -> dict:
    ev = iv.event
    args = {"step": ev.step}
    if isinstance(ev, Compute):
        args.update(micro=ev.micro, layer=ev.layer, flops=ev.flops, bytes=ev.bytes_read + ev.bytes_written)
    elif isinstance(ev, OptimizerStep):
        args.update(elements=ev.stop - ev.start, optimizer=ev.optimizer)
    else:
        args.update(micro=ev.micro, call=ev.call, collective=ev.collective, world_size=ev.world_size,
                    busiest_rank_bytes=int(call_bytes.get(ev.call, 0)), dtype=ev.dtype)
    return args


def track_ids(world_size: int, rank: int, stream: str) -> tuple:
    """(pid, tid) of one rank's stream in the trace (see the module docstring); a tid names a thread within its
    rank's process, so offload's cpu, pcie and nvme tracks follow the rank's compute and comm ones."""
    return rank + 1, world_size + 1 + 2 * rank + STREAMS.index(stream)


def chrome_trace_events(result, ranks=None) -> list:
    """The trace events of `result` (a `Timeline`) for `ranks` (default all): metadata first, then
    every interval as an "X" event, track by track in time order."""
    n = result.world_size
    ranks = list(range(n)) if ranks is None else [int(r) for r in ranks]
    out = []
    for r in ranks:
        pid = r + 1
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": track_ids(n, r, "compute")[1],
                    "args": {"name": f"rank {r}"}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": track_ids(n, r, "compute")[1],
                    "args": {"sort_index": r}})
        for i, stream in enumerate(result.streams):
            tid = track_ids(n, r, stream)[1]
            out.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": THREAD_NAMES[stream]}}
            )
            out.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": i}})
    for iv in result.intervals(ranks):
        start, end = _ns(iv.start), _ns(iv.end)
        pid, tid = track_ids(n, iv.rank, iv.stream)
        out.append({"name": iv.label, "cat": iv.category, "ph": "X", "ts": start / 1000, "dur": (end - start) / 1000,
                    "pid": pid, "tid": tid, "args": _args(iv, result.call_bytes)})
    return out


def write_chrome_trace(result, path, ranks=None) -> str:
    """Write `result` as {"traceEvents": [...]} to `path` atomically (a temporary file in the same
    directory, then a rename: a reader never sees half a file). Returns the path. The path is checked first as
    every output is (zerosim/outputs.py: not a folder, a link, a read-only file, nor inside a checkpoint).

    At 1024 ranks a step holds ~500k intervals (~100 MB of JSON): pass `ranks` to keep a few."""
    path = check_file(path)
    doc = {
        "traceEvents": chrome_trace_events(result, ranks),
        "otherData": {k: str(v) for k, v in result.summary().items()},
    }

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(doc, f, separators=(",", ":"))

    write_atomic(path, write)
    return path
