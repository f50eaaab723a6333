"""One step of a simulated log, apart from the steps around it: each stream's busy time inside the step, and how much
of it the device's compute did not cover.

A Timeline's busy totals run over its whole log. DPU's steady state needs two steps (the second's copy carries the
first's CPU update, made while the second ran), so a report or a figure of "one offloaded step" reads the window
[the previous step's end, this step's end) instead: `step_window`. Per stream ("compute", "comm", "cpu", "pcie",
"nvme": _result.py STREAMS) it gives the seconds busy inside the window and, for the others, the seconds busy while
the compute stream idled — what the device waited for (or would have, had it needed it: a copy or a CPU step that
runs while the device idles for another reason counts too; the device's own idle time is `idle`).
"""

from __future__ import annotations

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class StepWindow:
    """Rank `rank`'s view of step `step`: [start, end) in seconds from the log's start, busy and uncovered time."""

    step: int
    rank: int
    start: float
    end: float
    busy: dict  # {stream: seconds busy inside the window} (a stream's intervals merged: a link's copies never overlap)
    uncovered: dict  # {stream: seconds busy inside the window while the compute stream was idle}; compute: 0

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def idle(self) -> float:
        """Seconds inside the window the device's compute stream did nothing."""
        return self.duration - self.busy.get("compute", 0.0)


def step_window(result, step: int | None = None, rank: int = 0) -> StepWindow:
    """The window of `step` (default the last) in `result` (a Timeline), rank `rank`'s streams clipped to it."""
    ends, total = {}, 0.0
    for s in sorted(result.step_times):
        total += result.step_times[s]
        ends[s] = total
    if not ends:
        raise ValueError("the timeline holds no step")
    step = max(ends) if step is None else step
    if step not in ends:
        raise ValueError(f"no step {step!r} in the timeline; its steps are {sorted(ends)}")
    before = [e for s, e in ends.items() if s < step]
    start, end = (max(before) if before else 0.0), ends[step]
    spans = {stream: _clip(_merge([(iv.start, iv.end) for iv in result.track(rank, stream)]), start, end)
             for stream in result.streams}
    compute = spans.get("compute", [])
    busy = {stream: _length(s) for stream, s in spans.items()}
    uncovered = {stream: 0.0 if stream == "compute" else _length(s) - _length(_intersect(s, compute))
                 for stream, s in spans.items()}
    return StepWindow(step, rank, start, end, busy, uncovered)


def _merge(spans: list) -> list:
    """Sorted, disjoint [(start, end)] covering the same time as `spans`."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        elif b > a:
            out.append((a, b))
    return out


def _clip(spans: list, start: float, end: float) -> list:
    return [(max(a, start), min(b, end)) for a, b in spans if b > start and a < end]


def _intersect(x: list, y: list) -> list:
    """The time both sorted, disjoint lists cover."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def _length(spans: list) -> float:
    return float(sum(b - a for a, b in spans))
