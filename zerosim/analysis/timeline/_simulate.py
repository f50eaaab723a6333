"""The discrete-event simulation: every recorded event placed in time on its rank's compute or communication stream.

Letters: N ranks. Each rank has two streams, as a GPU running NCCL on a side stream does: compute
and communication. The log (`Trace.log`) is every rank's program in the order it issues work; the
rules, one pass over it (O(events) plus O(N) per collective):

    Compute / OptimizerStep on rank r   starts when r's previous compute has ended and every call
                                        its `needs` names (the handles the collectives returned) has
                                        ended; lasts the roofline (_cost.py)
    Call (one phase of a collective)    is issued on rank r when r's program reaches it, i.e. when
                                        r's compute before it in the log has ended; starts when
                                        every rank has issued it and the communication stream is
                                        free (calls run one at a time, in log order); lasts
                                        (n−1)·α + busiest rank's bytes / β on every rank, n the
                                        ring's length (the group's size: every group's ring runs
                                        at once, each rank in one)
    Call made inside `Trace.within`     the same among its own ranks alone (`call_ranks`: a pipeline stage's
                                        collectives): issued when those ranks reach it, on a stream of
                                        theirs, and counted on their communication streams only
    Call of send_pairs (point to point) starts when its senders' compute before it has ended and
                                        their last send is done (a pipeline stage sends as soon as it
                                        made the activation, while the receiver has posted its
                                        receive long before: torch's irecv), one hop: α + bytes / β on
                                        the link its sends cross; whoever received waits for it. So a
                                        pipeline's bubble appears by itself: a stage's first forward
                                        waits for the activation the stage before made

Two link tiers (`Hardware(inter_link=...)`, a trace of a `Cluster(gpus_per_node=G)`): a call whose rings
stay inside nodes runs over `link` (NVLink), one whose rings leave a node over `inter_link` (InfiniBand: a
ring is as fast as its slowest hop), and each tier has its own communication stream, so an all-reduce
across nodes can run while the next reduce-scatter inside a node does (FSDP2's all-reduce stream beside its
reduce-scatter stream). Without an inter link every call runs over `link` on one stream, as before.

Prefetching is therefore nothing special: a gather that appears earlier in the log is issued
earlier and overlaps the computes between it and the compute that needs it.
`overlap=False` is DeepSpeed's `overlap_comm=False`: a rank does one thing at a time, so a call
is issued only after everything before it on that rank, and the next compute waits for the call
to end whether it needs it or not.

Context parallelism's calls (purpose "context parallel": the K/V's sends and gathers) run on a stream of their own
on their tier (OWN_STREAM): another NCCL communicator's, beside data parallelism's. A send/receive is one hop of a
ring, not N−1 steps (ONE_STEP).

What is left out: kernel launch overheads, contention between a
collective and compute for HBM and SMs (and between the two tiers' streams for NVLink and SMs), separate
streams for gathers and reductions on one tier (DeepSpeed ZeRO-3 and FSDP use more than one), NCCL's
hierarchical algorithms (tree, NVLS, CollNet: a ring is assumed), and CPU-side issue delays.

Identical ranks. At 1024 ranks the per-rank work (one Compute per rank per layer) dominates; all
ranks of a data-parallel step usually do identical work, so one row could stand for every rank with
the same sequence of compute durations (group ranks by that sequence, simulate one per group,
take the max over groups where a call waits for every rank). Not done here: the log itself already
holds one event per rank, and one pass over it is fast enough (GPT-3 175B, 1024 ranks, stage 3 with
block units: ~205k events in ~0.5 s; the engine's own step that writes them takes longer).
"""

from __future__ import annotations

from collections import defaultdict
from itertools import repeat

from zerosim.analysis.timeline._cost import (
    compute_time,
    equal_chunk_bytes,
    host_optimizer_time,
    optimizer_time,
    phase_time,
)
from zerosim.analysis.timeline._devices import Hardware
from zerosim.analysis.timeline._result import Timeline
from zerosim.cluster import INTER, TRANSFERS, Call, Compute, OptimizerStep, busiest_bytes
from zerosim.optim import get_optimizer
from zerosim.precision import get_format


def simulate(trace, hardware: Hardware | None = None, overlap: bool = True, costs=None) -> Timeline:
    """Place every event of `trace` in time on `hardware`; returns a `Timeline`.

    Args:
        trace: a `zerosim.Trace` (its `log`, and each rank's bytes per call: `Trace.sent_in_calls`), or a
            list of log events (Call, Compute, OptimizerStep; others are skipped), in which case each
            call's bytes are those of N equal chunks of its `elements`.
        hardware: device, link and compute format (default `Hardware()`: H100 SXM, NVLink 4, fp16).
        overlap: communication on its own stream (True), or serialised with compute on each rank
            (False, DeepSpeed's overlap_comm=False).
        costs: what a compute and an optimizer step take (a `kernel_time.KernelTimes`: each kernel class at its
            achieved rate); None: the datasheet roofline (_cost.py).
    """
    hw = Hardware() if hardware is None else hardware
    if not isinstance(hw, Hardware):
        raise TypeError(f"hardware must be a zerosim.analysis.timeline.Hardware, got {hardware!r}")
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    log, per_rank, whole = _log_and_sent(trace)
    folded = getattr(getattr(trace, "folded", None), "calls", 0)  # calls of steps folded out of a long run's window
    n = getattr(trace, "world_size", None) or _world_size(log)
    busiest = _busiest_bytes(per_rank, whole, getattr(trace, "ring_calls", {}))
    rate, hbm = hw.device.rate(hw.compute), hw.device.hbm
    param_bytes = get_format(hw.compute).bits // 8
    states = {}  # optimizer name -> number of fp32 state buffers
    senders = _senders(per_rank, whole, log)  # point-to-point call -> the ranks that sent in it
    sending = {}  # rank -> when its last point-to-point send is done
    scopes = getattr(trace, "call_ranks", {})  # call -> the ranges of ranks taking part (a pipeline stage's own)
    within = _Within(scopes.values())  # the latest end of a compute in each such range
    spans = _Spans(trace)  # each call's nodes, once per group the calls ran over

    ready = [0.0] * n  # when rank r's program reaches its next event: the end of its last compute
    latest = 0.0  # max(ready), kept as it grows (ready only grows): a call waits for the last rank to issue it
    comm_free = {}  # stream -> when it is free (one time for every rank: every call spans all ranks at once)
    call_end, call_dtype = {}, {}
    phases = {}  # what call_time reads of a call -> its seconds on hw
    host = [0.0] * n  # when rank r's CPU is free (offload: its optimizer step runs there, beside the device's work)
    done_before = [0.0] * n  # when rank r's CPU step before its last one ended (DPU's copy carries that one's params)
    comp_rows, call_rows = [], []  # a tuple per compute and per call, made columns at the end (_columns)
    dpu = False  # whether a copy carries the CPU step before the last one (DPU): Timeline's step times need it
    for at, ev in enumerate(log):
        kind = type(ev)
        if kind is Compute or kind is OptimizerStep:
            r = ev.rank
            if not 0 <= r < n:
                raise ValueError(f"log[{at}]: rank {r} is outside the world of {n} ranks the calls span")
            on_host = kind is OptimizerStep and ev.where != "device"  # offload: the CPU optimizer, on its own lane
            start = host[r] if on_host else ready[r]
            for c in ev.needs:
                end = call_end.get(c)
                if end is None and c < folded:  # it ran before the window: long done
                    continue
                if end is None:
                    raise ValueError(f"log[{at}] ({type(ev).__name__} on rank {r}) needs call {c}, which is not "
                                     "earlier in the log")
                if end > start:
                    start = end
            if on_host:  # the device goes on with its program meanwhile
                if ev.optimizer not in states:
                    states[ev.optimizer] = len(get_optimizer(ev.optimizer).state_names)
                took = host_optimizer_time(ev.stop - ev.start, states[ev.optimizer], hw.host_bandwidth)
                done_before[r], host[r] = host[r], start + took
                comp_rows.append((r, start, start + took, at, ev.step, "cpu"))
                continue
            if kind is Compute:
                took = (compute_time(ev.flops, ev.bytes_read + ev.bytes_written, rate, hbm) if costs is None
                        else costs.compute(ev))
            else:
                if ev.optimizer not in states:
                    states[ev.optimizer] = len(get_optimizer(ev.optimizer).state_names)
                # the reduced gradient's format
                grad = _float_bytes(call_dtype[ev.needs[-1]], param_bytes) if ev.needs else param_bytes
                took = (optimizer_time(ev.stop - ev.start, states[ev.optimizer], grad, param_bytes, hbm)
                        if costs is None else costs.optimizer(ev.stop - ev.start, states[ev.optimizer], grad,
                                                              param_bytes))
            ready[r] = end = start + took
            if end > latest:  # max(latest, end), as builtin max keeps the first of equals
                latest = end
            if within.ranges:
                within.reached(r, end)
            comp_rows.append((r, start, end, at, ev.step, "device"))
        elif kind is Call and ev.collective in TRANSFERS:  # offload: a copy over PCIe or NVMe, on its own stream
            # what it carries is made by the GPU, by the CPU step just recorded, or (DPU) by the one before it
            issued = {"after host": max(host), "after previous host": max(done_before)}.get(ev.op, latest)
            issued = max(issued, latest)
            start = max(issued, comm_free.get(ev.tier, 0.0))
            sent = busiest.get(ev.call, 0)
            link = hw.transfer_link(ev.tier)
            end = start + (link.alpha + sent / link.bandwidth if sent else 0.0)
            comm_free[ev.tier] = call_end[ev.call] = end
            call_dtype[ev.call] = ev.dtype
            if ev.op == "after host":  # DeepSpeed's step() is synchronous: the device's program waits for the copy
                ready, latest = [max(x, end) for x in ready], max(latest, end)
            call_rows.append((start, end, at, ev.step, sent, ev.call, scopes.get(ev.call)))
            if ev.op == "after previous host":
                dpu = True
        elif kind is Call and ev.op == "pairs":  # point to point (send_pairs): when its senders made what they send
            who = senders.get(ev.call) or range(n)
            start = max(max(map(ready.__getitem__, who)), max(map(sending.get, who, repeat(0.0))))
            sent = busiest.get(ev.call, 0)
            end = start + p2p_time(ev, sent, hw)
            call_end[ev.call], call_dtype[ev.call] = end, ev.dtype
            sending.update(dict.fromkeys(who, end))
            if not overlap:
                for r in who:
                    ready[r] = end
            latest = max(latest, end) if not overlap else latest
            call_rows.append((start, end, at, ev.step, sent, ev.call, scopes.get(ev.call)))
        elif kind is Call:
            if ev.call in call_end:
                raise ValueError(f"log[{at}]: call number {ev.call} appears twice in the log")
            stream, scope = hw.stream_of(ev.tier), scopes.get(ev.call)
            if ev.purpose in OWN_STREAM:  # another communicator's: a stream of its own beside data parallelism's
                stream = f"{stream}: {ev.purpose}"
            if scope is not None:  # its own ranks have issued it, and their stream is free
                stream = (stream, scope)
            issued = latest if scope is None else within.latest(scope)
            start = max(issued, comm_free.get(stream, 0.0))  # every rank has issued it, and its stream is free
            sent = busiest.get(ev.call)
            sent = equal_chunk_bytes(ev) if sent is None else sent
            sent = sent if costs is None else costs.call_bytes(ev, sent)  # fp8 beside TP: its all-gathers in fp8
            nodes = spans.of(ev) if ev.tier == INTER else 1
            # every field call_time reads, and the bytes: a step's units make the same few calls again and again
            key = (ev.collective, ev.op, ev.tier, ev.world_size, sent, nodes)
            took = phases.get(key)
            if took is None:
                took = phases[key] = call_time(ev, sent, hw, nodes)  # over groups: world_size is g
            end = start + took
            comm_free[stream] = call_end[ev.call] = end
            call_dtype[ev.call] = ev.dtype
            if not overlap and scope is None:
                ready, latest = [end] * n, end  # one stream per rank: nothing else runs until the call is done
            elif not overlap:
                for lo, hi in scope:
                    ready[lo:hi] = [end] * (hi - lo)
                    within.reached(lo, end)
                latest = max(latest, end)
            call_rows.append((start, end, at, ev.step, sent, ev.call, scope))
    comp = _columns(comp_rows, ("rank", "start", "end", "at", "step", "lane"))
    calls = _columns(call_rows, ("start", "end", "at", "step", "bytes", "call", "ranks"))
    if not scopes:  # which ranks each call counts on: its own, or (no column) every rank
        del calls["ranks"]
    return Timeline(log, n, hw, overlap, comp, calls, dpu)


def _columns(rows: list, names: tuple) -> dict:
    """{name: [its value in each row, in order]}: the rows' tuples as the Timeline's columns."""
    if not rows:
        return {name: [] for name in names}
    return dict(zip(names, map(list, zip(*rows))))


class _Within:
    """The latest end of a compute in each range of ranks some call runs among (`Trace.within`'s ranges: a pipeline
    stage's block of ranks), kept as computes end: a call made inside a range is issued when its last rank reaches
    it, not the world's (O(ranges a rank is in) per compute, not O(N) per call)."""

    def __init__(self, scopes):
        self.ranges = sorted({rng for scope in scopes for rng in scope})
        self.ends = dict.fromkeys(self.ranges, 0.0)
        self._of = {}  # rank -> the ranges it is in

    def reached(self, r: int, t: float) -> None:
        mine = self._of.get(r)
        if mine is None:
            mine = self._of[r] = [rng for rng in self.ranges if rng[0] <= r < rng[1]]
        for rng in mine:
            if t > self.ends[rng]:
                self.ends[rng] = t

    def latest(self, scope) -> float:
        if len(scope) == 1:  # a stage's own call (a send between two stages: two ranges)
            return self.ends[scope[0]]
        return max(self.ends[rng] for rng in scope)


class _Spans:
    """`nodes_spanned` of each call, worked out once per Groups the calls ran over (or per world size for a call over
    the world): a step's thousands of calls run over a few groups, each asking for the node of every member."""

    def __init__(self, trace):
        self.trace, self.groups, self._nodes = trace, getattr(trace, "call_groups", {}), {}

    def of(self, call) -> int:
        group = self.groups.get(call.call)
        key = ("world", call.world_size) if group is None else id(group)  # the trace holds its groups: ids stay
        nodes = self._nodes.get(key)
        if nodes is None:
            nodes = self._nodes[key] = nodes_spanned(self.trace, call)
        return nodes


# purposes whose calls run on a communicator of their own, so on a stream of their own beside data parallelism's (on
# each tier): context parallelism's sends and gathers go over the CP group's NCCL communicator (Transformer Engine's
# flash_attn_p2p_communicate and gather_along_first_dim on cp_group), not FSDP's or DeepSpeed's. Their contention for
# the link's bandwidth is not modelled
OWN_STREAM = ("context parallel",)

# calls that are not a ring's N−1 steps: {collective: steps}. A send/receive (context parallelism's K/V, one hop of
# its ring) is one step: every rank's message crosses one link at once, over its own NIC between nodes
ONE_STEP = {"send_recv": 1}


def call_time(call, sent: float, hw: Hardware, nodes: int) -> float:
    """One phase of `call` on `hw`: over `hw.link` on one tier; a call whose rings leave a node and span `nodes`
    nodes crosses between them nodes − 1 times at the inter link's α, its other steps at the link's α (NCCL's ring
    latency, costs/_links.py), its bytes over the NICs of the ring's ranks in a node (cost.phase_time). The
    per-call base latency is charged once: not again for an all-reduce's second (gather) phase. A send/receive is
    one step (ONE_STEP): α (the inter link's where a message leaves a node) + the busiest rank's bytes / β."""
    first = not (call.collective.endswith("all_reduce") and call.op == "gather")
    steps = ONE_STEP.get(call.collective)
    if call.tier == INTER and hw.inter_link is not None:
        nics = 1 if steps else max(call.world_size // max(nodes, 1), 1)  # the ring's ranks in one node, one NIC each
        return phase_time(call.world_size, sent, hw.link, inter=hw.inter_link, nodes=nodes, nics=nics, base=first,
                          steps=steps)
    return phase_time(call.world_size, sent, hw.link_of(call.tier), base=first, steps=steps)


def p2p_time(call, sent: float, hw: Hardware) -> float:
    """A point-to-point call: one hop, its link's per-call and per-step latency and its busiest sender's bytes over
    the link its sends cross (the inter link's, across nodes)."""
    if call.tier == INTER and hw.inter_link is not None:
        return phase_time(2, sent, hw.link, inter=hw.inter_link, nodes=2, nics=1)
    return phase_time(2, sent, hw.link_of(call.tier))


def nodes_spanned(trace, call) -> int:
    """The most nodes one of `call`'s rings spans: its groups' members by node (the trace's gpus_per_node), or
    ceil(n / G) for a call over the world; 1 without a topology."""
    per_node = getattr(trace, "gpus_per_node", None)
    if not per_node:
        return 1
    group = getattr(trace, "call_groups", {}).get(call.call)
    if group is None:
        return -(-call.world_size // per_node)
    return max(len({m // per_node for m in ranks}) for ranks in group.members)


def _float_bytes(dtype: str, default: int) -> int:
    """Bytes of a float format by name; `default` for an integer payload (a quantized call's int8 / int4x2)."""
    try:
        return get_format(dtype).bits // 8
    except ValueError:
        return default


def _log_and_sent(trace) -> tuple:
    """(the log, {(call, rank): bytes it sent in that call}, [(call, ranks, the most one of them sent)]) of what
    `simulate` takes: a long run's past its window, the entries held (a cluster's Tail counts absolutely; the timeline
    counts what it has); a Trace's sends recorded whole read from their records, none of their events made
    (`Trace.sent_in_calls`)."""
    if hasattr(trace, "sent_in_calls"):  # (asked first: `hasattr(trace, "events")` would make them)
        log = trace.log
        return (getattr(log, "held", log), *trace.sent_in_calls())
    if hasattr(trace, "log") and hasattr(trace, "events"):
        log, events = trace.log, trace.events
        return getattr(log, "held", log), _sent_in_calls(getattr(events, "held", events)), []
    if isinstance(trace, (list, tuple)):
        return list(trace), {}, []
    raise TypeError("simulate needs a zerosim.Trace (cluster.trace) or a list of log events, got "
                    f"{type(trace).__name__}")


def _world_size(log) -> int:
    """N: the world size every call over the world spans (they must agree), else one more than the largest rank."""
    sizes = {ev.world_size for ev in log if type(ev) is Call and ev.group == "world"}
    if len(sizes) > 1:
        raise ValueError(f"the log's calls span different world sizes {sorted(sizes)}; simulate one world at a time")
    if sizes:
        return sizes.pop()
    ranks = [ev.rank for ev in log if type(ev) in (Compute, OptimizerStep)]
    return max(ranks) + 1 if ranks else 0


def _sent_in_calls(events) -> dict:
    """{(call, rank): bytes it sent in that call}, from `events` (`Trace.sent_in_calls` answers a trace's from its
    records)."""
    sent = defaultdict(int)
    for e in events:
        sent[(e.call, e.src)] += e.bytes
    return sent


def _senders(sent: dict, whole: list, log) -> dict:
    """{point-to-point call: the ranks that sent in it}, from {(call, rank): bytes} (`_sent_in_calls`) and
    [(call, ranks, bytes)] (`Trace.sent_in_calls`)."""
    pairs = {ev.call for ev in log if type(ev) is Call and ev.op == "pairs"}
    out = defaultdict(set)
    if pairs:
        for call, src in sent:
            if call in pairs:
                out[call].add(src)
        for call, ranks, _ in whole:
            if call in pairs:
                out[call].update(ranks)
    return out


def _busiest_bytes(sent: dict, whole: list, ring_calls: dict) -> dict:
    """{call: the most bytes any one rank sent in it} from {(call, rank): bytes} (`_sent_in_calls`: the trace's
    per-rank summaries or hops) and [(call, ranks, the most one sent)], or from its closed-form ring summaries (the
    meta backend's representative rank): the rank that skips the smallest chunk sends the most."""
    busiest, of_form = {}, {}  # of_form: a closed form's id -> its bytes (the trace holds its forms: ids stay)
    for call, form in ring_calls.items():  # a pipeline's actions written again (_repeat.py) share their calls' forms
        most = of_form.get(id(form))
        if most is None:
            sizes, itemsize, _ = form
            most = of_form[id(form)] = busiest_bytes(sizes, itemsize)
        busiest[call] = most
    for (call, _), b in sent.items():
        if b > busiest.get(call, -1):
            busiest[call] = b
    for call, _, b in whole:
        if b > busiest.get(call, -1):
            busiest[call] = b
    return busiest
