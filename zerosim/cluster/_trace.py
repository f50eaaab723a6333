"""What happened, recorded as data: every hop of every collective, and one ordered log of typed events.

Narration, figures, communication-volume checks, the timeline and notebooks all read these events.
At large world sizes one event per hop is too many (a ring over 1024 ranks has 1023 steps), so
granularity is a choice: ``"hop"`` records every send, ``"call"`` one summary event per collective
and rank. `log` holds, in order, every `Call`, the engines' `Compute` / `OptimizerStep` /
`StepBoundary` events (_events.py) and, when the cluster keeps ledger timelines, every alloc and free.

On a mesh (`Cluster(..., gpus_per_node=G)`) every call records the group it ran over (`Call.group`, the
`zerosim.cluster.Groups`' name; the groups themselves in `call_groups`) and the link tier its rings need
(`Call.tier`: "inter-node" if any hop leaves a node), and every send the tier it crossed (`Event.tier`), so
`bytes_by_tier` splits the traffic between NVLink and InfiniBand. A flat cluster is one node: every tier is
"intra-node" and every group the world.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import chain
from contextlib import contextmanager
from dataclasses import field, replace

from zerosim._dataclass import dataclass
from zerosim.cluster import _closed as closed
from zerosim.cluster._hops import RingHops
from zerosim.cluster._ledger import LedgerEvent, ledger_event
from zerosim.cluster._mesh import INTRA, TIERS, Groups, hop_tier
from zerosim.cluster._events import Compute, ComputeFields, StepBoundary
from zerosim.cluster._runs import RunCounts
from zerosim.cluster._window import LogFile, Summary, Tail, fold, fold_to_budget, write_log

GRANULARITIES = ("hop", "call")
# what the collectives record their calls as (collectives/_ring.py, collectives/chunk_maps/_nccl.py): the names a
# question may use
COLLECTIVES = ("reduce_scatter", "all_gather", "all_reduce", "broadcast", "nccl_all_reduce", "send_recv")
# copies between one rank's memory tiers (parallel/offload): {name: the link it crosses}. Each is recorded as a call
# over every local rank at once, one event per rank (its own copy on its own link), so handles and the timeline
# treat it as a collective's phase; `bytes_sent` and `sent_totals` count only the collectives' links
TRANSFERS = {"d2h": "pcie", "h2d": "pcie", "nvme_read": "nvme", "nvme_write": "nvme"}


class Handle(tuple):
    """What a collective returns besides its results: the numbers of the calls it recorded in the trace, in order
    (an all-reduce records two, its reduce-scatter and all-gather phases). Work that must wait for the collective
    names its handle (`Compute.needs`, `OptimizerStep.needs`: handles joined with +), and the timeline starts that
    work when those calls have ended — as FSDP2 waits on the work handle its all-gather returned. A handle is a
    tuple of call numbers, so the events that name it stay plain data; `generation` says which trace it belongs
    to (`Trace.clear` starts a new one, and `Trace.live` forgets handles of an older one)."""

    def __new__(cls, calls=(), generation: int = 0):
        handle = super().__new__(cls, calls)
        handle.generation = generation
        return handle

    def __add__(self, other) -> "Handle":
        if type(other) is Handle:  # an empty side adds nothing: the other, where its generation is the later
            if not other and other.generation <= self.generation:  # (a step joins ~120,000 handles, most to one
                return self                                         # side empty: `sum(handles, Handle())`)
            if not self and self.generation <= other.generation:
                return other
        return Handle(tuple(self) + tuple(other), max(self.generation, getattr(other, "generation", 0)))

    @classmethod
    def joined(cls, handles) -> "Handle":
        """`handles` joined with + in one go: the calls in order, the latest generation (a loop of `+=` over many
        buckets copies the growing tuple each time)."""
        calls, generation = [], 0
        for h in handles:
            calls.extend(h)
            generation = max(generation, getattr(h, "generation", 0))
        return cls(tuple(calls), generation)

    def __getnewargs__(self):
        return (tuple(self), self.generation)


@dataclass(frozen=True)
class Event:
    """One send from `src` to `dst` (or, at "call" granularity, everything `src` sent in one call)."""

    call: int  # sequence number of the collective call this send belongs to
    collective: str  # "reduce_scatter", "all_gather", "all_reduce", "broadcast"
    step: int  # ring step, 0-based (-1 for a call summary)
    src: int
    dst: int  # -1 for a call summary (sent to the ring neighbour over several steps)
    chunk: int  # index of the chunk/shard that travelled (-1 for whole buffers and summaries)
    elements: int
    bytes: int
    dtype: str  # format name on the wire
    tag: str = ""  # caller's label, e.g. "layer 2 grads"
    values: object = field(default=None, compare=False)  # a copy of what travelled, when the trace keeps values
    tier: str = INTRA  # the link it crossed: "intra-node" (NVLink) or "inter-node" (InfiniBand)


@dataclass(frozen=True)
class Call:
    """One collective call as a whole."""

    call: int
    collective: str
    op: str
    world_size: int
    elements: int  # per-rank input length (padded buffer length for reduce-scatter / all-reduce)
    dtype: str
    tag: str = ""
    purpose: str = ""  # what an engine called it for (events.PURPOSES): "gather params", "reduce grads", ...
    layers: tuple = ()  # the model layers (ZeRO units) it serves; several when bucketed
    step: int = 0  # the iteration (engine.step call, 1-based) it belongs to (0: outside an engine step)
    micro: int = 0  # the micro-step within that step
    group: str = "world"  # the groups it ran over (their name); world_size is then each group's ring length
    tier: str = INTRA  # the slowest link its rings cross: "inter-node" if any hop leaves a node
    chunk_map: tuple = ()  # ((start, stop), ...): the element range of each ring chunk, where it is not the N equal
    #                        shards (NCCL's and gloo's all-reduce chunk maps: collectives/chunk_maps/_nccl.py, _gloo.py)


@dataclass
class Trace:
    """Every hop of every collective (or one summary per call and rank), in order, with byte counts."""

    granularity: str = "hop"
    keep_values: bool = False  # copy every sent chunk into its event (small teaching runs only)
    gpus_per_node: int | None = None  # the topology that decides each hop's link tier (None: one node)
    world_size: int | None = None  # N, the ranks every call spans (each in its group), when known (a Cluster's
    #                                trace): questions about rank N or above are refused; None: read from the calls
    keep_steps: int | None = None  # hold the events of the last k engine steps, fold older ones into `folded`
    #                                (_window.py); None: hold everything
    log_to: object = None  # a path: stream the whole log there (each entry's repr, its call's sends below it)
    absolute: bool = False  # once steps fold, `log`, `calls` and `events` keep absolute positions (a Tail: _window.py)
    # with keep_steps: a function giving the bytes the events held may cost (a Cluster's default window: a share of what
    # its ranks' ledgers peaked at, _window.py SHARE); older steps fold while they would cost more. None: no such bound
    budget: object = field(default=None, repr=False)
    # a function giving {rank: its ledger's `mark`} now (a Cluster's ledgers: the last seq, and the buffers live then):
    # taken at each step's end, it tells the ledgers what a fold lets go of, and what stays live, without reading the
    # folded entries again (_window.py `fold`)
    ledger_seqs: object = field(default=None, repr=False)
    _calls: list = field(default_factory=list, repr=False)  # [Call] held: call number folded.calls + i is _calls[i]
    # the ordered log held (`log`): Call | Compute | OptimizerStep | StepBoundary | ..., each ledger's allocs and
    # frees as the plain tuples of their fields and an engine's Compute events as their `ComputeFields` until the log
    # is read (cluster/_ledger.py `timeline` says why)
    _log: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"unknown trace granularity {self.granularity!r}; choose one of {GRANULARITIES}")
        k = self.keep_steps
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"keep_steps must be a positive integer (steps whose events the trace holds) or None "
                             f"(every step; a Cluster also takes \"auto\", its default window), got {k!r}")
        self.folded = Summary()  # what the steps before the window sent, added up (_window.py)
        # [(absolute log position, call number, {rank: ledger mark} or None) just after each step held ended]
        self._step_ends = []
        self._log_file = LogFile(self.log_to) if self.log_to is not None else None
        self._written = 0  # absolute log position up to which the log file has it
        # called with {rank: (last ledger seq folded, its buffers live then or None)} when steps fold (the Cluster's
        # ledgers: `MemoryLedger.mark`, `fold_timeline`)
        self.on_fold = None
        self._checked = 0  # log entries read already: those before it are events, never raw tuples
        # [Event | RingHops]: the sends in order (or, at "call" granularity, each rank's summary of a call), a ring
        # phase recorded whole (_hops.py) until `events` is read
        self._events = []
        self._records = 0  # RingHops records in _events
        self._folded = 0  # events they stand for, beyond one entry each
        self._summed = 0  # of those, the summaries of "call" granularity's records (`_entries_held` says why)
        self._pending = defaultdict(lambda: [0, 0, INTRA])  # src -> [elements, bytes, tier], for "call" granularity
        self._alike = []  # the call's sends alike recorded whole (`hops_alike`), for `end` to place
        self._about = {}  # what the calls being made now are for (see `about`)
        # call -> (chunk sizes, itemsize, lag): a ring phase recorded in closed form (see ring_summary)
        self.ring_calls = {}
        self.call_groups = {}  # call -> the Groups it ran over, for calls not over the world
        # call -> ((lo, hi), ...): the ranks that take part in it, for a call made inside `within` (a pipeline stage's
        # calls are its own ranks', a send between two stages both stages'); a call not listed: every rank's
        self.call_ranks = {}
        self._within = None
        self.generation = 0  # how many times the trace was cleared: handles of an earlier generation name nothing

    @property
    def events(self) -> list:
        """[Event]: every send (or, at "call" granularity, every rank's summary of a call), in order (the steps held:
        `keep_steps`; a `Tail` at absolute positions once steps fold with `absolute`). A ring phase recorded whole
        (`ring_hops`) becomes its sends here, the first time they are read."""
        return self._at_absolute(self._held_events(), self.folded.events, "events")

    @property
    def log(self) -> list:
        """[Call | Compute | OptimizerStep | StepBoundary | LedgerEvent | ...]: every typed event, in order (the steps
        held: `keep_steps`; a `Tail` at absolute positions once steps fold with `absolute`). A ledger's alloc or free
        recorded as a plain tuple becomes its `LedgerEvent` here, the first time it is read."""
        return self._at_absolute(self._held_log(), self.folded.log, "log")

    @property
    def calls(self) -> list:
        """[Call]: every collective call held, in order; call number c is `calls[c]` while nothing is folded, and
        always with `absolute` (a `Tail`); `call(c)` finds it in either case."""
        return self._at_absolute(self._calls, self.folded.calls, "calls")

    def _at_absolute(self, held: list, start: int, what: str):
        return Tail(held, start, what) if start and self.absolute else held

    def _held_events(self) -> list:
        if self._records:
            self._events = [x for e in self._events for x in (self._unfold(e) if type(e) is RingHops else (e,))]
            self._folded = self._records = self._summed = 0
        return self._events

    def _entries_held(self) -> int:
        """What `_events` holds as the window's budget counts it (_window.py `fold_to_budget`): a ring phase recorded
        whole at "hop" granularity as one entry, as the budget has always counted it (until `events` is read), and
        a "call" granularity record as its summaries, the Events `end` appended for it one rank at a time before."""
        return len(self._events) + self._summed

    def _held_log(self) -> list:
        log = self._log
        if self._checked < len(log):
            for i in range(self._checked, len(log)):
                kind = type(log[i])
                if kind is tuple:
                    log[i] = ledger_event(*log[i])
                elif kind is ComputeFields:
                    log[i] = log[i].event()
            self._checked = len(log)
        return log

    def call(self, number: int) -> Call:
        """The `Call` numbered `number` (numbers stay absolute when older steps fold out of the window)."""
        if number < self.folded.calls:
            raise ValueError(f"call {number} belongs to a step folded out of the trace's window (keep_steps="
                             f"{self.keep_steps}): its bytes are in the summary, its events gone (pass keep_steps=None "
                             "to the Cluster to hold every step, or log_to= to stream the log to a file)")
        return self._calls[number - self.folded.calls]

    @property
    def logged(self) -> int:
        """Log entries recorded so far, the folded ones included: the absolute position of the next one."""
        return self.folded.log + len(self._log)

    def _unfold(self, hops: RingHops) -> list:
        """The `Event`s a ring phase recorded whole stands for: its sends, or ("call" granularity: `whole`) each
        rank's summary of it, as `end` writes them (the call's dtype, the tier of its send to its ring's next rank)."""
        c = self.call(hops.call)
        if hops.whole:
            return [Event(hops.call, c.collective, -1, src, -1, -1, n, n * hops.itemsize, c.dtype, c.tag, None,
                          self._tier(hops.call, src, dst)) for src, dst, n in hops.sums()]
        return [Event(hops.call, c.collective, k, src, dst, chunk, n, n * hops.itemsize, hops.dtype, c.tag, None,
                      self._tier(hops.call, src, dst)) for k, src, dst, chunk, n in hops.hops()]

    # -- recording (used by the engines) ---------------------------------------------------------
    def about(self, **fields) -> "_About":
        """Label every collective call begun inside the block: purpose, layers, step, micro (see `Call`)."""
        return _About(self, fields)

    @contextmanager
    def within(self, *ranges):
        """Every call begun inside the block takes part on the ranks of `ranges` ((lo, hi), ...: ranks lo..hi-1)
        alone (`call_ranks`): a pipeline stage's collectives run among its own ranks, at its own times (the timeline
        issues them when those ranks reach them and counts them on those ranks' streams). Outside any block a call
        takes part on every rank."""
        previous, self._within = self._within, tuple((int(lo), int(hi)) for lo, hi in ranges)
        try:
            yield
        finally:
            self._within = previous

    @property
    def scope(self):
        """The ranges of the `within` block being recorded now, or None (every rank)."""
        return self._within

    scope_ranks = staticmethod(closed.scope_ranks)  # the ranks of a `scope`, in order; None: every rank

    def labels(self) -> dict:
        """What `about` labels the calls begun now with (step, micro, purpose, ...): a copy, for events made by hand."""
        return dict(self._about)

    def record(self, event) -> None:
        """Append a typed event (_events.py, or a ledger's alloc/free) to the ordered log; at a step's end, fold the
        steps before the window (`keep_steps`)."""
        self._log.append(event)
        if type(event) is StepBoundary and event.what == "end" and self.keep_steps is not None:
            self._step_ends.append((self.logged, self.folded.calls + len(self._calls),
                                    None if self.ledger_seqs is None else self.ledger_seqs()))
            if len(self._step_ends) > self.keep_steps:
                upto = self._step_ends[-self.keep_steps - 1]
                del self._step_ends[: len(self._step_ends) - self.keep_steps]
                fold(self, *upto)
            if self.budget is not None:  # a Cluster's default window: no more than a share of what the ranks hold
                fold_to_budget(self, self.budget())

    def record_ranks(self, columns: list, sinks: list) -> None:
        """What n ranks recording one after another append: rank 0's entry of every column in column order, then rank
        1's, ... (`columns`: lists of n entries, rank i's at [i]; None: nothing of that rank). A ledger's event (the
        plain tuple `adopt_ranks` / `free_ranks` return, cluster/_ledger.py) goes to rank i's ledger's sink,
        `sinks[i]`, as its own `adopt` or `free` hands it; any other entry (an engine's `ComputeFields`) to the log,
        as `record` appends it (none here is a `StepBoundary`, the one entry `record` does more for). Where every
        sink is this log's own (a Cluster's ledgers) and no entry is None, the ranks' rows are one `extend`."""
        log = self._log
        append = log.append
        if all(s == append for s in sinks) and not any(None in column for column in columns):
            log.extend(chain.from_iterable(zip(*columns)))
            return
        for i, row in enumerate(zip(*columns)):
            for entry in row:
                if entry is None:
                    continue
                if type(entry) is tuple:  # a ledger's event: its own sink's (none where no trace takes it)
                    if sinks[i] is not None:
                        sinks[i](entry)
                else:
                    self.record(entry)

    # -- recording (used by the collectives) -----------------------------------------------------
    def begin(self, collective: str, op: str, world_size: int, elements: int, dtype: str, tag: str = "",
              group: Groups | None = None, chunk_map: tuple = (), tier: str | None = None) -> int:
        """Open a collective call over `group` (None: the world of `world_size` ranks); returns its number, which
        `hop` and `end` take. `world_size` is the ring's length: the group's size. `tier`: the slowest link of a call
        that runs over no group (a point-to-point call's sends: collectives/_p2p.py)."""
        fields = {}  # what differs from a Call's defaults, set at once (dataclasses.replace is slow, and per call)
        number = self.folded.calls + len(self._calls)
        if group is not None and not group.is_world:
            fields.update(group=group.name, tier=group.tier(self.gpus_per_node))
            self.call_groups[number] = group
        elif group is not None and self.gpus_per_node is not None:
            fields["tier"] = group.tier(self.gpus_per_node)
        if tier is not None:
            fields["tier"] = tier
        fields.update(self._about)
        if self._within is not None:
            self.call_ranks[number] = self._within
        call = Call(number, collective, op, world_size, elements, dtype, tag, chunk_map=tuple(chunk_map), **fields)
        self._calls.append(call)
        self._log.append(call)
        return call.call

    def transfer(self, kind: str, elements: list, dtype: str, itemsize: int, ranks: list, tag: str = "",
                 after_host: str | None = None) -> Handle:
        """Record one copy between memory tiers on every local rank (`kind` one of TRANSFERS: "d2h", "h2d" over
        PCIe, "nvme_read", "nvme_write"): `elements[i]` of `dtype` on rank `ranks[i]`. `after_host`: "after host"
        (the host issues it once the optimizer step just recorded is done) or "after previous host" (DPU: once the
        step before it is); None: "copy", issued by the device's program. Its `Call.op` says which. Returns its
        handle."""
        if kind not in TRANSFERS:
            raise ValueError(f"unknown transfer {kind!r}; one of {tuple(TRANSFERS)}")
        link = TRANSFERS[kind]
        call = Call(self.folded.calls + len(self._calls), kind, after_host or "copy", 1, max(elements, default=0),
                    dtype, tag, tier=link)
        if self._about:
            call = replace(call, **{k: v for k, v in self._about.items() if k != "tier"})
        self._calls.append(call)
        self._log.append(call)
        for r, n in zip(ranks, elements):
            self._events.append(Event(call.call, kind, -1, r, -1, -1, n, n * itemsize, dtype, tag, None, link))
        return self.handle(call.call)

    def handle(self, *calls: int) -> Handle:
        """A `Handle` naming `calls` (numbers `begin` returned) of this trace."""
        return Handle(calls, self.generation)

    def live(self, handle) -> Handle:
        """`handle` if it names calls still in this trace, else an empty handle (the trace was cleared since, or the
        calls' step folded out of the window)."""
        first, end = self.folded.calls, self.folded.calls + len(self._calls)
        if getattr(handle, "generation", self.generation) != self.generation or any(
            c >= end or c < first for c in handle
        ):
            return Handle((), self.generation)
        return handle

    def hop(
        self, call: int, step: int, src: int, dst: int, chunk: int, elements: int, itemsize: int, dtype: str, data=None
    ) -> None:
        """Record one send (at "call" granularity: add it to the sender's summary)."""
        c = self.call(call)
        tier = self._tier(call, src, dst)
        if self.granularity == "hop":
            values = data.copy() if (self.keep_values and data is not None) else None
            self._events.append(Event(call, c.collective, step, src, dst, chunk, elements, elements * itemsize, dtype,
                                     c.tag, values, tier))
        else:
            acc = self._pending[src]
            acc[0] += elements
            acc[1] += elements * itemsize
            acc[2] = tier

    def hops_alike(self, call: int, ranks: tuple, sends_to: tuple, elements: int, itemsize: int, dtype: str) -> None:
        """Record a send of `elements` from each rank of `ranks` (in increasing order) to its rank of `sends_to`, as
        `hop` records each (no values kept); at "call" granularity as one record until `events` is read (`end` places
        it): the sends of the ranks a meta backend's representative stands for (collectives/_p2p.py), ~64 a call in
        thousands of calls of a planner's pipeline step. A point-to-point send is the one step of a ring of two (its
        call's world_size 2) whose sender, at position 0, sends its whole chunk: the record is that ring phase's
        (_hops.py `RingHops`, chunk sizes (elements, 0), lag 0), each rank's summary `elements` to its peer."""
        if self.granularity == "hop":
            for src, dst in zip(ranks, sends_to):
                self.hop(call, 0, src, dst, -1, elements, itemsize, dtype)
            return
        self._alike.append(RingHops(call, (elements, 0), itemsize, dtype, 0, ranks, (0,) * len(ranks), sends_to,
                                    True))

    def ring_hops(self, call: int, sizes: tuple, itemsize: int, dtype: str, lag: int, ranks, positions,
                  sends_to) -> None:
        """Record a whole ring phase of `call` (every rank in this process; no values kept): at step k the
        rank ranks[i] (in rank order), at position positions[i] of its ring, sent chunk (positions[i] - lag - k)
        mod n of `sizes` to sends_to[i] (lag 1: reduce-scatter, 0: all-gather). One record now; `events` shows its
        n−1 steps of sends as `hop` would have recorded them one by one, or at "call" granularity each rank's
        summary as `hop` and `end` would have made it (_hops.py). Call `end` as after `hop`."""
        if len(sizes) < 2 or not ranks:
            return  # a ring of one sends nothing
        whole = self.granularity == "call"
        hops = RingHops(call, tuple(sizes), itemsize, dtype, lag, tuple(ranks), tuple(positions), tuple(sends_to),
                        whole)
        self._events.append(hops)
        self._records += 1
        self._folded += hops.count - 1
        if whole:
            self._summed += hops.count - 1

    def _tier(self, call: int, src: int, dst: int) -> str:
        """The tier of a send: from its two ends, or (a summary, dst -1) from src's next rank on its ring."""
        if self.gpus_per_node is None:
            return INTRA
        if dst < 0:  # a whole phase of one rank: every send of a ring phase goes to the same neighbour
            group = self.call_groups.get(call)
            dst = group.next(src) if group is not None else (src + 1) % self.call(call).world_size
        return hop_tier(src, dst, self.gpus_per_node)

    def ring_summary(self, call: int, sizes: tuple, itemsize: int, lag: int) -> None:
        """Record a whole ring phase in closed form, for every rank of every group at once (the meta backend's
        representative ranks): over the n−1 steps the rank at position p of its group's ring sends every chunk
        but (p − lag + 1) mod n (lag 1: reduce-scatter, 0: all-gather). O(1) to record; `bytes_sent`,
        `sent_by_rank` and `bytes_by_tier` answer from it."""
        if self.granularity != "call":
            raise ValueError('a closed-form ring summary needs trace granularity "call"')
        if len(sizes) > 1:  # run-length encoded sizes (a flat range's counts) stay so: O(1) however many ranks
            self.ring_calls[call] = (sizes if isinstance(sizes, RunCounts) else tuple(sizes), itemsize, lag)

    def _ring_size(self, call: int) -> int:
        """N, the ranks a closed-form call's rings span together."""
        group = self.call_groups.get(call)
        return group.world_size if group is not None else len(self.ring_calls[call][0])

    def _closed_form(self, call: int):
        """(N,) int64 bytes every rank sent in closed-form call `call` (numpy; _closed.py)."""
        sizes, itemsize, lag = self.ring_calls[call]
        return closed.sent_by_every_rank(sizes, itemsize, lag, self.call_groups.get(call), self._ring_size(call),
                                         self.call_ranks.get(call))

    def _volume(self, call: int) -> int:
        """Bytes all ranks sent in closed-form call `call` (its own ranks', inside `within`)."""
        return closed.volume(*self.ring_calls[call], self.call_groups.get(call), self._ring_size(call),
                             self.call_ranks.get(call))

    def sent_by_rank(self, call: int) -> dict:
        """{rank: bytes it sent} in one call, from its events or its closed-form summary."""
        self.call(call)  # a folded call: a clear error (its events are gone)
        if call in self.ring_calls:
            return dict(enumerate(self._closed_form(call).tolist()))
        out = defaultdict(int)
        for e in self.select(call=call):
            out[e.src] += e.bytes
        return dict(out)

    def sent_totals(self, world_size: int) -> list:
        """Bytes each rank 0..N−1 sent over the whole trace (events and closed-form summaries): O(events + calls) in
        Python, and in NumPy O(N) once plus, per closed-form call, O(ranks that skipped a non-empty chunk)."""
        import numpy as np

        totals = np.zeros(world_size, dtype=np.int64)
        for e in self.events:
            if e.collective not in TRANSFERS:  # a copy to host or NVMe crosses no link between ranks
                totals[e.src] += e.bytes
        for (rank, collective, _), b in self.folded.sent_items():  # the steps folded out of the window
            if collective not in TRANSFERS:
                totals[rank] += b
        base = 0  # every rank of a closed-form call sends its base but for the skipped chunk: added once, at the end
        held = [(form, self.call_groups.get(c), self._ring_size(c), 1, self.call_ranks.get(c))
                for c, form in self.ring_calls.items()]
        folded = [(form, group, n, count, scope) for _, _, form, group, n, count, scope in self.folded.closed.values()]
        scoped = _Alike()  # a stage's calls: one (N,) vector for each kind (every micro-batch's are alike)
        for (sizes, itemsize, lag), group, n, count, scope in held + folded:  # count: calls alike
            if scope is not None:  # a stage's call: its own ranks' bytes alone
                scoped.add((sizes, itemsize, lag), group, n, scope, count)
                continue
            base += closed.base_bytes(sizes, itemsize) * count
            for ranks, less in closed.shortfalls(sizes, itemsize, lag, group, n):
                totals[ranks] -= less * count
        for (sizes, itemsize, lag), group, n, scope, count in scoped.kinds():
            totals[:n] += closed.sent_by_every_rank(sizes, itemsize, lag, group, n, scope) * count
        return (totals + base).tolist()

    def sent_in_calls(self) -> tuple:
        """What the timeline reads of each call's sends (its busiest rank, its senders) over the sends held (`events`:
        the window's), copies between memory tiers included: ({(call, rank): bytes it sent in that call}, [(call, the
        ranks that sent, the most one of them sent)]). A ring phase or sends alike recorded whole whose ranks send
        nothing else in its call is the second kind, read from its record (`RingHops.most`) without making its events;
        else each rank's bytes are added to the rest it sent (`RingHops.sums`)."""
        sent, records = defaultdict(int), []
        for e in self._events:
            if type(e) is RingHops:
                records.append(e)
            else:
                sent[e.call, e.src] += e.bytes
        if not records:
            return sent, []
        seen, crowded = set(), set()  # calls of more than one record
        for hops in records:
            if hops.call in seen:
                crowded.add(hops.call)
            seen.add(hops.call)
        others = defaultdict(set)  # a record's call -> the ranks its events name
        for call, src in sent:
            if call in seen:
                others[call].add(src)
        whole = []
        for hops in records:
            call = hops.call
            if call in crowded or not others[call].isdisjoint(hops.ranks):
                for src, _, n in hops.sums():
                    sent[hops.call, src] += n * hops.itemsize
            else:
                whole.append((hops.call, hops.ranks, hops.most()))
        return sent, whole

    def bytes_by_tier(self, call: int | None = None) -> dict:
        """{tier: bytes all ranks sent over links of that tier} ("intra-node", "inter-node"), over the whole trace
        or one call: every event by its own tier, and a closed-form call by each rank's send to its ring neighbour."""
        out = dict.fromkeys(TIERS, 0)
        if call is None:
            for tier, b in self.folded.by_tier.items():  # the steps folded out of the window
                out[tier] = out.get(tier, 0) + b
        else:
            self.call(call)  # a folded call: a clear error
        for e in self.events if call is None else self.select(call=call):
            out[e.tier] = out.get(e.tier, 0) + e.bytes  # offload's copies add "pcie" and "nvme"
        scoped = _Alike()  # a stage's calls: an (N,) vector for each kind (every micro-batch's are alike)
        for c in self.ring_calls if call is None else [c for c in self.ring_calls if c == call]:
            group, n, scope = self.call_groups.get(c), self._ring_size(c), self.call_ranks.get(c)
            if scope is not None:
                scoped.add(self.ring_calls[c], group, n, scope, 1)
                continue
            intra, inter = closed.bytes_by_tier(*self.ring_calls[c], group, n, self.gpus_per_node)
            out[TIERS[0]] += intra
            out[TIERS[1]] += inter
        for form, group, n, scope, count in scoped.kinds():
            intra, inter = closed.bytes_by_tier(*form, group, n, self.gpus_per_node, scope)
            out[TIERS[0]] += intra * count
            out[TIERS[1]] += inter * count
        return out

    def end(self, call: int) -> None:
        """Close a call (at "call" granularity: write one summary event per sender)."""
        if self.granularity == "call":
            c = self.call(call)
            alike = self._placed_alike(call) if self._alike else ()
            for src, (elements, nbytes, tier) in sorted(self._pending.items()):
                self._events.append(Event(call, c.collective, -1, src, -1, -1, elements, nbytes, c.dtype, c.tag,
                                         None, tier))
            self._pending.clear()
            for hops in alike:  # each rank's summary in rank order, as the Events above: after them, when read
                self.place_whole(hops)

    def place_whole(self, hops: RingHops) -> None:
        """Append a record of whole sends (each rank's summary at "call" granularity: `hops_alike`), counted as the
        summaries it stands for: where `end` places one, and where a recorded action is written again
        (cluster/_recording.py)."""
        self._events.append(hops)
        self._records += 1
        self._folded += hops.count - 1
        self._summed += hops.count - 1

    def _placed_alike(self, call: int) -> list:
        """The call's sends alike (`hops_alike`) to append after its summaries, where their ranks follow those ranks
        in order (a pipeline's: its stage's representative first, then the ranks it stands for); else none, their
        sends added to the summaries one by one instead (the same summaries, in rank order)."""
        alike, self._alike = self._alike, []
        last = max(self._pending, default=-1)
        for hops in alike:  # each record's ranks in increasing order (`hops_alike`): its first after those before it
            if hops.ranks[0] <= last:
                break
            last = hops.ranks[-1]
        else:
            return alike
        for hops in alike:
            for src, dst, n in hops.sums():
                acc = self._pending[src]
                acc[0] += n
                acc[1] += n * hops.itemsize
                acc[2] = self._tier(call, src, dst)
        return []

    # -- questions -------------------------------------------------------------------------------
    def select(self, collective: str | None = None, call: int | None = None, tag: str | None = None) -> list:
        """The events of one collective kind, one call and/or one tag (None: any)."""
        # a typo ("allgather") selected nothing: 0 B
        if collective is not None and collective not in COLLECTIVES and collective not in TRANSFERS:
            raise ValueError(f"no collective {collective!r}; the trace records {', '.join(COLLECTIVES)}")
        return [
            e
            for e in self.events
            if (collective is None or e.collective == collective)
            and (call is None or e.call == call)
            and (tag is None or e.tag == tag)
        ]

    def bytes_sent(
        self, rank: int, collective: str | None = None, call: int | None = None, tag: str | None = None
    ) -> int:
        """Bytes `rank` put on the wire (over all calls, or those selected), closed-form summaries included."""
        self._check_rank(rank)
        if call is not None:
            self.call(call)  # a folded call: a clear error
        from_events = sum(e.bytes for e in self.select(collective, call, tag)
                          if e.src == rank and (collective is not None or e.collective not in TRANSFERS))
        held = sum(closed.sent_by_one_rank(*self.ring_calls[c], self.call_groups.get(c), rank, self.call_ranks.get(c))
                   for c in self._closed(collective, call, tag))
        if call is not None:
            return from_events + held
        folded = sum(b for (r, coll, t), b in self.folded.sent_items() if r == rank
                     and (coll == collective if collective is not None else coll not in TRANSFERS)
                     and (tag is None or t == tag))
        folded += sum(closed.sent_by_one_rank(*form, group, rank, scope) * count
                      for coll, t, form, group, _, count, scope in self.folded.closed.values()
                      if (collective is None or coll == collective) and (tag is None or t == tag))
        return from_events + held + folded

    def _check_rank(self, rank) -> None:
        """A rank that does not exist sent nothing, but answering 0 would hide the mistake."""
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0 \
                or (self.world_size is not None and rank >= self.world_size):
            limit = f" 0..{self.world_size - 1}" if self.world_size is not None else " >= 0"
            raise ValueError(f"no rank {rank!r}: the cluster's ranks are{limit}")

    def _closed(self, collective, call, tag) -> list:
        return [
            c
            for c in self.ring_calls
            if (call is None or c == call)
            and (collective is None or self.call(c).collective == collective)
            and (tag is None or self.call(c).tag == tag)
        ]

    def bytes_received(
        self, rank: int, collective: str | None = None, call: int | None = None, tag: str | None = None
    ) -> int:
        """Bytes that arrived at `rank` (needs "hop" granularity: summaries do not say who received)."""
        self._check_rank(rank)
        if self.granularity != "hop":
            raise ValueError('bytes_received needs trace granularity "hop"; "call" summaries record senders only')
        if call is not None:
            self.call(call)  # a folded call: a clear error
        folded = 0 if call is not None else sum(
            b for (r, coll, t), b in self.folded.received_items()
            if r == rank and (collective is None or coll == collective) and (tag is None or t == tag))
        return folded + sum(e.bytes for e in self.select(collective, call, tag) if e.dst == rank)

    def volume_by_collective(self) -> dict:
        """{collective: total bytes sent by all ranks}."""
        out = defaultdict(int, self.folded.by_collective)  # the steps folded out of the window, then the rest
        for e in self.events:
            out[e.collective] += e.bytes
        for c in self.ring_calls:
            out[self.call(c).collective] += self._volume(c)
        return dict(out)

    def summary(self) -> dict:
        """What the whole run sent, folded steps and window together: {"by_collective": {collective: bytes},
        "by_tier": {tier: bytes}, "by_step": {step: bytes between ranks}, "calls": n, "folded_calls": n}."""
        by_step = defaultdict(int, self.folded.steps())
        for e in self.events:
            if e.collective not in TRANSFERS:
                by_step[self.call(e.call).step] += e.bytes
        for c in self.ring_calls:
            by_step[self.call(c).step] += self._volume(c)
        return {"by_collective": self.volume_by_collective(), "by_tier": self.bytes_by_tier(),
                "by_step": dict(sorted(by_step.items())), "calls": self.folded.calls + len(self._calls),
                "folded_calls": self.folded.calls}

    def flush_log(self) -> None:
        """Write what the log file (`log_to`) does not have yet: the entries still held, with their calls' sends."""
        if self._log_file is not None:
            write_log(self, self._held_log()[max(self._written - self.folded.log, 0):], self._held_events())
            self._written = self.logged

    def of_type(self, kind, since: int = 0) -> list:
        """The log's events of one type (e.g. `Compute`), from log position `since` on (absolute: counting the entries
        folded out of the window, as `logged` does; the same as a list position while nothing is folded). Entries
        still held as their fields become events only where they are of that type (`zerosim train` asks every step
        for `GradClip`, which leaves the step's thousands of allocs, frees and Compute events as they are)."""
        log, found = self._log, []
        for i in range(max(since - self.folded.log, 0), len(log)):
            e = log[i]
            if type(e) is tuple:  # a ledger's alloc or free
                if not issubclass(LedgerEvent, kind):
                    continue
                e = log[i] = ledger_event(*e)
            elif type(e) is ComputeFields:
                if not issubclass(Compute, kind):
                    continue
                e = log[i] = e.event()
            if isinstance(e, kind):
                found.append(e)
        return found

    def clear(self) -> None:
        self.generation += 1
        self._events.clear()
        self._folded = self._records = self._summed = 0
        self._calls.clear()
        self._log.clear()
        self._checked = 0
        self.ring_calls.clear()
        self.call_groups.clear()
        self.call_ranks.clear()
        self._pending.clear()
        self._alike.clear()
        self.folded = Summary()
        self._step_ends.clear()
        self._written = 0

    def __len__(self) -> int:
        return len(self._events) + self._folded


class _About:
    """`Trace.about`'s block: the labels put on at entry, what was there before put back at exit, an exception too. A
    class rather than a generator (`contextlib.contextmanager`): an engine opens ~500 of these a micro-step (every
    gather and reduction of a 70B twin's), at 1.3 µs each as a generator's."""

    __slots__ = ("trace", "fields", "previous")

    def __init__(self, trace, fields: dict):
        self.trace, self.fields = trace, fields

    def __enter__(self) -> None:
        trace = self.trace
        self.previous, trace._about = trace._about, {**trace._about, **self.fields}

    def __exit__(self, *exc) -> bool:
        self.trace._about = self.previous
        return False


class _Alike:
    """Closed-form calls counted by kind: the same (sizes, itemsize, lag) form on the same ring group, world and scope
    answer alike, so a question over a trace's calls is asked once a kind (a pipeline's stages repeat each unit's
    calls every micro-batch). `kinds()`: (form, group, n, scope, count) in the order each kind was first added."""

    def __init__(self):
        self._counts = {}

    def add(self, form, group, n: int, scope, count: int) -> None:
        key = (form, id(group), n, scope)  # the group by identity: a trace's calls share its Groups objects
        entry = self._counts.get(key)
        if entry is None:
            self._counts[key] = [form, group, n, scope, count]
        else:
            entry[4] += count

    def kinds(self):
        return (tuple(entry) for entry in self._counts.values())

