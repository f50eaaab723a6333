"""What a simulated step looks like: intervals per (rank, stream), step time, exposed communication, busy fractions.

Letters: N ranks, C compute intervals (every rank's computes and optimizer steps), K collective calls.

Storage is columnar (NumPy arrays in log order), because a 175B step on 1024 ranks has ~200k compute
intervals. A collective starts and ends at the same moment on every rank (it starts only when every
rank has issued it and lasts the ring's time), so each call is stored once and stands for N
intervals, one on each rank's communication stream. `Interval` objects are built only on request
(`track`, `intervals`) for figures, Chrome traces and tests.

A pipeline's calls are its stages' own (`Trace.within`: simulate passes each call's ranges of ranks): such a call
stands for an interval on those ranks' streams only, and each rank's busy and exposed communication counts the calls it
takes part in.

With two link tiers a rank has two communication streams whose calls may overlap in time: "communication
busy" is then the time *some* link of the rank is busy (the union of its calls), and exposed communication the
part of that union its compute did not cover. With one stream the calls never overlap and both are plain sums.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import TRANSFERS, Compute, OptimizerStep

STREAMS = ("compute", "comm", "cpu", "pcie", "nvme")  # the last three only with offload: its CPU optimizer, copies


@dataclass(frozen=True)
class Interval:
    """One busy stretch of one stream on one rank."""

    rank: int
    stream: str  # "compute" or "comm"
    start: float  # seconds from the start of the log
    end: float
    label: str  # "backward h.3", "all_gather h.3 params"
    category: str  # what it was for (see `category`): colours in figures, "cat" in Chrome traces
    event: object  # the log's Compute, OptimizerStep or Call


def category(event) -> str:
    """What an event was for: a Compute's kind ("forward", "recompute", "backward", "loss"), "optimizer step",
    or a Call's purpose ("gather params", "reduce grads", "refresh params", "optimizer", "check";
    "collective" for a call made outside an engine)."""
    if isinstance(event, Compute):
        return event.kind
    if isinstance(event, OptimizerStep):
        return "optimizer step" if event.where == "device" else "cpu optimizer step"
    return event.purpose or "collective"


def label(event) -> str:
    """A short human name for an event, as figures and trace viewers show it."""
    if isinstance(event, Compute):
        return f"{event.kind} {event.name}" + (f" (micro {event.micro})" if event.micro else "")
    if isinstance(event, OptimizerStep):
        return f"{event.optimizer} step [{event.start}, {event.stop})"
    half = ""
    if event.collective == "all_reduce":  # the log holds an all-reduce as its two phases
        half = " (all-gather half)" if event.op == "gather" else " (reduce-scatter half)"
    return f"{event.collective} {event.tag}".rstrip() + half


class Timeline:
    """The result of `simulate`: when every recorded event ran, and what that adds up to per rank.

    Attributes:
        world_size: N.
        hardware, overlap: what it was simulated with.
        span: seconds from 0 to the end of the last event.
        step_times: {step: seconds}, each step's last end minus the previous step's (the first from 0).
        compute_busy, comm_busy: (N,) seconds each rank's compute / communication stream was busy.
        exposed_comm: (N,) seconds each rank's communication stream was busy while its compute stream
            was idle: communication not hidden behind compute.
        call_bytes: {call number: bytes the busiest rank sent in it} (what its time was charged for).
    """

    def __init__(self, log, world_size, hardware, overlap, comp, calls, dpu: bool = False):
        self.log, self.world_size, self.hardware, self.overlap = log, world_size, hardware, overlap
        # comp: columns over C compute intervals in log order; calls: columns over K calls in log order (their numbers
        # in "call", and in "ranks" the ranges of ranks each takes part in where some call has them); dpu: whether an
        # offload copy carries the CPU step before the last one ("after previous host", DeepSpeed's DPU)
        lane = np.asarray(comp.get("lane", ["device"] * len(comp["rank"])), dtype=object)  # (C,) "device" or "cpu"
        host = lane == "cpu"  # offload's CPU optimizer steps: a lane of their own, not the device's compute
        self._h_rank = np.asarray(comp["rank"], dtype=np.int64)[host]
        self._h_start = np.asarray(comp["start"], dtype=np.float64)[host]
        self._h_end = np.asarray(comp["end"], dtype=np.float64)[host]
        self._h_at = np.asarray(comp["at"], dtype=np.int64)[host]
        h_step = np.asarray(comp["step"], dtype=np.int64)[host]
        comp = {k: [v for v, h in zip(col, host) if not h] for k, col in comp.items()} if host.any() else comp
        self._c_rank = np.asarray(comp["rank"], dtype=np.int64)  # (C,)
        self._c_start = np.asarray(comp["start"], dtype=np.float64)  # (C,) s
        self._c_end = np.asarray(comp["end"], dtype=np.float64)  # (C,) s
        self._c_at = np.asarray(comp["at"], dtype=np.int64)  # (C,) index into log
        self._k_start = np.asarray(calls["start"], dtype=np.float64)  # (K,) s, the same on every rank
        self._k_end = np.asarray(calls["end"], dtype=np.float64)  # (K,) s
        self._k_at = np.asarray(calls["at"], dtype=np.int64)  # (K,) index into log
        # {call: busiest rank's bytes}
        self.call_bytes = {c: int(b) for c, b in zip(calls["call"], calls["bytes"])}
        self._order = np.argsort(self._c_rank, kind="stable")  # rank-major, log order within a rank
        self._bounds = np.searchsorted(self._c_rank[self._order], np.arange(world_size + 1))  # rank r: [b[r], b[r+1])
        ends = [a.max() for a in (self._c_end, self._k_end, self._h_end) if a.size]
        self.span = float(max(ends)) if ends else 0.0
        # A step ends with its CPU optimizer step (DeepSpeed's step() returns when DeepSpeedCPUAdam has), unless DPU
        # runs (its copies carry the step before's update): then the CPU step belongs to the next step's time
        synchronous = (h_step, self._h_end) if not dpu else (h_step[:0], self._h_end[:0])
        self.step_times = self._step_times(comp["step"], calls["step"], *synchronous)
        self.compute_busy = np.zeros(world_size)  # (N,) s
        self.comm_busy = np.zeros(world_size)  # (N,) s
        self.exposed_comm = np.zeros(world_size)  # (N,) s
        self._u_start, self._u_end = _union(self._k_start, self._k_end)  # (U,) s: when some link of some rank is busy
        self._segments = _segments(calls.get("ranks"), world_size)  # [(lo, hi, the calls those ranks take part in)]
        computing = np.array(sorted(set(self._c_rank.tolist())), dtype=np.int64)  # np.unique's (numpy.ma's import)
        for lo, hi, mine in self._segments:
            # (U,) s: when some link of these ranks is busy (every call: the whole world is one segment)
            us, ue = (self._u_start, self._u_end) if mine is None else _union(self._k_start[mine],
                                                                              self._k_end[mine])
            comm = ue - us  # (U,) s
            # A rank that computed nothing hides nothing: (comm - 0).sum(), the same bits as the loop gives it; the
            # loop runs over the ranks that computed (on the meta backend, the representatives: O(1), not O(N))
            self.comm_busy[lo:hi] = self.exposed_comm[lo:hi] = comm.sum()
            for r in computing[(computing >= lo) & (computing < hi)].tolist():
                cs, ce = self._rank_columns(r)
                self.compute_busy[r] = (ce - cs).sum()
                hidden = _busy_before(cs, ce, ue) - _busy_before(cs, ce, us)  # (U,) compute inside each stretch
                self.exposed_comm[r] = (comm - hidden).sum()

    # -- summaries ---------------------------------------------------------------------------------
    @property
    def step_time(self) -> float:
        """The last step's time (the steady state when the log holds more than one step)."""
        return self.step_times[max(self.step_times)] if self.step_times else 0.0

    def busy_fraction(self) -> dict:
        """{stream: (N,) fraction of the span each rank's stream was busy}."""
        span = self.span or 1.0
        return {"compute": self.compute_busy / span, "comm": self.comm_busy / span}

    def summary(self) -> dict:
        """Plain numbers (JSON-ready): span, step time, and per-rank extremes of busy and exposed time."""
        busy = self.busy_fraction()
        hw = self.hardware
        return {
            "world_size": self.world_size, "device": hw.device.name, "link": hw.link.name,
            "inter_link": None if hw.inter_link is None else hw.inter_link.name, "compute": hw.compute,
            "overlap": self.overlap, "span_s": self.span, "step_time_s": self.step_time,
            "compute_busy_s_max": float(self.compute_busy.max(initial=0.0)),
            "comm_busy_s": float(self.comm_busy.max(initial=0.0)),
            "exposed_comm_s_max": float(self.exposed_comm.max(initial=0.0)),
            "exposed_comm_s_mean": float(self.exposed_comm.mean()) if self.world_size else 0.0,
            "compute_busy_fraction_min": float(busy["compute"].min(initial=1.0)),
            "comm_busy_fraction": float(busy["comm"].max(initial=0.0)),
            "calls": int(self._k_at.size), "compute_intervals": int(self._c_at.size),
        }

    # -- intervals ---------------------------------------------------------------------------------
    def track(self, rank: int, stream: str) -> list:
        """Rank `rank`'s intervals on `stream` ("compute" or "comm"), in time order."""
        if stream not in STREAMS:
            raise ValueError(f"stream must be one of {STREAMS}, got {stream!r}")
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1}, got {rank!r}")
        if stream in ("comm", "pcie", "nvme"):  # every rank's copy of a call; offload's copies by their link
            tier = [getattr(self.log[i], "tier", "") if self.log[i].collective in TRANSFERS else "comm"
                    for i in self._k_at.tolist()]
            mine = self._calls_of(rank)
            cols = [c for c, t, m in zip(zip(self._k_start, self._k_end, self._k_at), tier, mine) if t == stream and m]
        elif stream == "cpu":
            mine = self._h_rank == rank
            cols = zip(self._h_start[mine], self._h_end[mine], self._h_at[mine])
        else:
            rows = self._order[self._bounds[rank]:self._bounds[rank + 1]]
            cols = zip(self._c_start[rows], self._c_end[rows], self._c_at[rows])
        return [Interval(rank, stream, float(s), float(e), label(self.log[i]), category(self.log[i]), self.log[i])
                for s, e, i in cols]

    def exposed_intervals(self, rank: int) -> list:
        """[(start, end), ...] when rank `rank`'s communication stream is busy and its compute stream idle;
        their lengths add up to `exposed_comm[rank]`."""
        cs, ce = self._rank_columns(rank)
        mine = self._calls_of(rank)
        us, ue = _union(self._k_start[mine], self._k_end[mine])
        out, j = [], 0
        for a, b in zip(us.tolist(), ue.tolist()):  # communication, in time order
            while j < cs.size and ce[j] <= a:
                j += 1  # computes that ended before this call began
            t, k = a, j
            while k < cs.size and cs[k] < b:  # computes that overlap [a, b)
                if cs[k] > t:
                    out.append((t, float(cs[k])))
                t = max(t, float(ce[k]))
                k += 1
            if t < b:
                out.append((t, b))
        return out

    def exposed_by_call(self, rank: int):
        """(K,) seconds of each call (log order) during which rank `rank`'s compute stream was idle: the part of that
        call its compute did not hide. With two tiers two calls may run at once, so these may add up to more than
        `exposed_comm[rank]` (which counts such a stretch once)."""
        cs, ce = self._rank_columns(rank)
        hidden = _busy_before(cs, ce, self._k_end) - _busy_before(cs, ce, self._k_start)
        return np.where(self._calls_of(rank), (self._k_end - self._k_start) - hidden, 0.0)  # (K,) 0 where not its

    def comm_by_purpose(self, rank: int, step: int | None = None) -> dict:
        """{purpose: {"seconds", "calls", "exposed"}} of rank `rank`'s communication stream (offload's copies apart),
        by the purpose each call was made for (`category`), sorted; `exposed`: the seconds of those calls its compute
        did not hide (`exposed_by_call`). `step`: that engine step's calls only (None: every call)."""
        exposed, out, mine = self.exposed_by_call(rank), {}, self._calls_of(rank)
        for i, at in enumerate(self._k_at.tolist()):
            ev = self.log[at]
            if ev.collective in TRANSFERS or (step is not None and ev.step != step) or not mine[i]:
                continue
            row = out.setdefault(category(ev), {"seconds": 0.0, "calls": 0, "exposed": 0.0})
            row["seconds"] = row["seconds"] + float(self._k_end[i]) - float(self._k_start[i])  # (a + end) - start
            row["calls"] += 1
            row["exposed"] += float(exposed[i])
        return dict(sorted(out.items()))

    @property
    def streams(self) -> tuple:
        """The streams this step used: compute and comm, and with offload its cpu, pcie and nvme tracks."""
        offload = self._h_at.size or any(self.log[i].collective in TRANSFERS for i in self._k_at.tolist())
        return STREAMS if offload else STREAMS[:2]

    def intervals(self, ranks=None):
        """Every interval of the given ranks (default all), track by track: rank 0 compute, rank 0 comm, ... (and,
        with offload, its cpu, pcie and nvme tracks)."""
        streams = self.streams
        for r in range(self.world_size) if ranks is None else ranks:
            for stream in streams:
                yield from self.track(r, stream)

    # -- helpers -----------------------------------------------------------------------------------
    def _calls_of(self, rank: int):
        """(K,) bool: the calls rank `rank` takes part in (every call, but where a pipeline's stages made their own)."""
        for lo, hi, mine in self._segments:
            if lo <= rank < hi:
                return np.ones(self._k_at.size, dtype=bool) if mine is None else mine
        return np.ones(self._k_at.size, dtype=bool)

    def _rank_columns(self, r: int):
        rows = self._order[self._bounds[r]:self._bounds[r + 1]]
        return self._c_start[rows], self._c_end[rows]  # sorted: a rank's computes run one after another

    def _step_times(self, comp_steps, call_steps, host_steps, host_ends) -> dict:
        steps = np.concatenate([np.asarray(comp_steps, dtype=np.int64), np.asarray(call_steps, dtype=np.int64),
                                host_steps])
        ends = np.concatenate([self._c_end, self._k_end, host_ends])
        out, previous = {}, 0.0
        for s in sorted(set(steps.tolist())):  # np.unique's values, without the numpy.ma it imports
            end = float(ends[steps == s].max())
            out[int(s)] = end - previous
            previous = end
        return out


def _segments(ranks, world_size: int) -> list:
    """[(lo, hi, (K,) bool or None)]: the world cut where the calls' ranges of ranks begin and end (`Trace.within`),
    each piece with the calls its ranks take part in (a call without ranges: every rank's); [(0, N, None)] where no
    call has ranges, every call on every rank."""
    if ranks is None or all(r is None for r in ranks):
        return [(0, world_size, None)]
    # a pipeline's ~10^5 calls run among a few distinct ranges (its stages', pairs of them): each piece asks each
    # distinct one once, and the calls read the answer by index
    distinct = list(dict.fromkeys(ranks))
    index = {scope: i for i, scope in enumerate(distinct)}
    of = np.fromiter((index[scope] for scope in ranks), dtype=np.intp, count=len(ranks))  # (K,) into distinct
    cuts = sorted({0, world_size} | {x for scope in distinct if scope is not None for rng in scope for x in rng})
    out = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        takes = np.array([scope is None or any(a <= lo and hi <= b for a, b in scope) for scope in distinct],
                         dtype=bool)
        out.append((lo, hi, takes[of]))
    return out


def _union(starts, ends) -> tuple:
    """The calls' intervals [start, end) as disjoint stretches in time order: the same arrays when no two overlap
    (one stream: its calls follow each other), else overlapping calls merged (two tiers' streams)."""
    if starts.size < 2 or (np.all(np.diff(starts) >= 0) and np.all(starts[1:] >= ends[:-1])):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)  # (K,) the latest end so far: the stretch's end (a call ends after it starts)
    opens = np.concatenate([[True], s[1:] >= reach[:-1]])  # a call that starts after every call before it has ended
    first = np.flatnonzero(opens)  # (U,) each stretch's first call; its last is the call before the next's first
    return s[first], reach[np.concatenate([first[1:] - 1, [s.size - 1]])]


def _busy_before(cs, ce, t):
    """Compute-busy seconds in [0, t) for each t, given one rank's sorted, disjoint intervals [cs, ce)."""
    if cs.size == 0:
        return np.zeros_like(t)
    done = np.concatenate([[0.0], np.cumsum(ce - cs)])  # (m+1,) busy time of the first j intervals
    j = np.searchsorted(ce, t, side="right")  # intervals that ended by t
    k = np.minimum(j, cs.size - 1)
    inside = np.where(j < cs.size, np.clip(t - cs[k], 0.0, None), 0.0)  # the part of interval j before t
    return done[j] + inside
