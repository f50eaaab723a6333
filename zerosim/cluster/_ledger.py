"""What a rank holds: every buffer is allocated and freed here, with a kind, so memory is a measurement.

Memory figures, tests and the replay read the ledger (current, peak, timeline per kind); nothing
computes an engine's memory from a formula of its own.

Standard kinds (any string is allowed; these are the ones the engines use):

    params       compute-format (fp16/bf16) parameters        grads        compute-format gradients
    master       fp32 master weights                          grad32       fp32 gradient (shard; stage 0 whole)
    optim:<x>    optimizer state x (optim:m, optim:v, ...)    activations  saved forward values
    comm         buffers a collective stages data in
"""

from __future__ import annotations

import math
from dataclasses import field

import numpy as np

from zerosim._dataclass import dataclass


class LedgerError(RuntimeError):
    """Misuse of a ledger: double free, reading a freed buffer, a name already live."""


@dataclass(frozen=True)
class LedgerEvent:
    """One allocation or free, with the rank's totals right after it."""

    seq: int
    action: str  # "alloc" or "free"
    name: str
    kind: str
    nbytes: int
    total: int  # all kinds, after this event
    kind_total: int  # this kind, after this event
    phase: str  # the phase label current when it happened (see MemoryLedger.phase)
    rank: int = -1  # whose ledger


def ledger_event(seq, action, name, kind, nbytes, total, kind_total, phase, rank) -> LedgerEvent:
    """`LedgerEvent(...)` without the frozen dataclass's `__init__`, which sets each field through
    `object.__setattr__`: the same object (equal, the same repr), in a third of the time. A ledger makes one per
    alloc and free, thousands a step (tests/test_records.py keeps the fields in step with the class)."""
    event = _new(LedgerEvent)
    event.__dict__.update(seq=seq, action=action, name=name, kind=kind, nbytes=nbytes, total=total,
                          kind_total=kind_total, phase=phase, rank=rank)
    return event


_new = object.__new__


def _seq_of(entry) -> int:
    """A timeline entry's sequence number: a plain tuple's first field, or a `LedgerEvent`'s `seq`."""
    return entry[0] if type(entry) is tuple else entry.seq


def adopt_ranks(ledgers: list, names: list, arrays: list, kind: str) -> tuple[list, list]:
    """`ledgers[i].adopt(names[i], arrays[i], kind)` for n ranks' ledgers in one call (an op landing on every rank at
    once: models/_stacked.py): each ledger's buffer, totals, peaks and timeline as its own `adopt` leaves them, but its
    event not handed to its sink. Returns (buffers, events): events[i] rank i's event, the tuple `adopt` hands its sink
    (None where its ledger keeps no timeline), for the caller to hand on with the other ranks' in rank order
    (cluster/_trace.py `Trace.record_ranks`), as n calls of `adopt`, rank after rank, would have. `adopt`'s
    bookkeeping (`_noted`, one place for both) for n ledgers: the loop is the batch (tests/test_ledger_ranks.py
    holds the two to the same buffers, totals, peaks and timelines)."""
    buffers, events = [], []
    add_buffer, add_event = buffers.append, events.append
    for ledger, name, array in zip(ledgers, names, arrays):
        live = ledger.live
        if name in live:
            raise LedgerError(f"rank {ledger.rank}: a buffer named {name!r} is already live; free it first or pick "
                              "another name")
        buf = live[name] = _buffer(name, kind, array, ledger, False)
        add_buffer(buf)
        add_event(_noted(ledger, "alloc", name, kind, buf.nbytes))
    return buffers, events


def free_ranks(buffers: list) -> list:
    """`buffers[i].free()` for n ranks' buffers (each in its own ledger) in one call, as `adopt_ranks` adopts them:
    each ledger as its own `free` leaves it, its event returned, not handed to its sink (events[i]: rank i's, None
    where its ledger keeps no timeline), for the caller to hand on in rank order (`Trace.record_ranks`)."""
    events = []
    add_event = events.append
    for buf in buffers:
        ledger, name = buf._ledger, buf.name
        if ledger.live.get(name) is not buf:
            raise LedgerError(f"rank {ledger.rank}: buffer {name!r} is not live (already freed, or never allocated)")
        del ledger.live[name]
        add_event(_noted(ledger, "free", name, buf.kind, buf.nbytes))
        if buf.owned and ledger.recycle is not None:
            ledger.recycle(buf._array)
        buf._array = None
    return events


def _buffer(name: str, kind: str, array, ledger, owned: bool) -> "Buffer":
    """`Buffer(name, kind, array, ledger, owned)`, written out for NumPy's arrays and data-less ones: thousands a
    step. A data-less (meta) array's shape is a tuple of Python ints, its dtype a `np.dtype` and its nbytes their
    product times the item size (precision/cast/_meta_array.py), as `Buffer.__init__` would make them."""
    if type(array) is not np.ndarray and not getattr(array, "is_meta", False):  # CuPy's
        return Buffer(name, kind, array, ledger, owned=owned)
    buf = _new(Buffer)
    buf.name, buf.kind, buf.owned, buf._array, buf._ledger = name, kind, owned, array, ledger
    buf.shape, buf.dtype, buf.nbytes = array.shape, array.dtype, array.nbytes
    return buf


def _noted(ledger, action: str, name: str, kind: str, nbytes: int):
    """The bookkeeping of an alloc ("alloc": `nbytes` more of `kind`, the peaks raised) or a free ("free": fewer) in
    `ledger` (totals, peaks, sequence, timeline), written out: thousands a step (every saved activation, gathered
    unit, ...). Returns its event as the timeline holds it (a plain tuple of `LedgerEvent`'s fields), or None where
    the ledger keeps no timeline; the caller hands it on."""
    current, change = ledger._current, nbytes if action == "alloc" else -nbytes
    kind_total = current[kind] = current.get(kind, 0) + change
    total = ledger._total = ledger._total + change
    if change > 0:
        peak = ledger._peak
        if kind_total > peak.get(kind, 0) or kind not in peak:
            peak[kind] = kind_total  # max(peak so far or 0, kind_total)
        if total > ledger._peak_total:
            ledger._peak_total = total
            ledger._at_peak = dict(current)  # the kinds at the first moment of the peak (`at_peak`)
    elif action == "alloc" and kind not in ledger._peak:  # an empty buffer's kind has a peak, of 0 at least
        ledger._peak[kind] = max(kind_total, 0)
    seq = ledger._seq = ledger._seq + 1
    if not ledger.keep_timeline:
        return None
    event = (seq, action, name, kind, nbytes, total, kind_total, ledger.phase_label, ledger.rank)
    ledger._held.append(event)
    return event


class Buffer:
    """A named array owned by one rank's ledger. Reading `.array` after `free` raises `LedgerError`."""

    __slots__ = ("name", "kind", "shape", "dtype", "nbytes", "_array", "_ledger", "owned")

    def __init__(self, name: str, kind: str, array, ledger: "MemoryLedger", owned: bool = False):
        self.name, self.kind, self.owned = name, kind, owned  # owned: storage came from the ledger's allocator
        self.shape = tuple(array.shape)
        if type(array) is np.ndarray:  # the hot path: NumPy has both at hand
            self.dtype, self.nbytes = array.dtype, array.nbytes
        else:  # CuPy's, a data-less (meta) array's
            self.dtype = np.dtype(array.dtype)
            self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self._array, self._ledger = array, ledger

    @property
    def freed(self) -> bool:
        return self._array is None

    @property
    def array(self):
        if self._array is None:
            raise LedgerError(f"rank {self._ledger.rank}: buffer {self.name!r} ({self.kind}) was freed; it cannot be "
                              "read")
        return self._array

    def free(self) -> None:
        self._ledger.free(self)

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"{self.nbytes} B"
        return f"Buffer({self.name!r}, kind={self.kind!r}, shape={self.shape}, dtype={self.dtype}, {state})"


@dataclass
class MemoryLedger:
    """Allocations of one rank: current and peak bytes per kind and in total, and a timeline.

    `empty` creates the storage; the numpy simulator passes `numpy.empty`, the meta backend a
    function that makes data-less arrays, so the same accounting runs at any scale.
    """

    rank: int
    empty: callable = np.empty
    recycle: object = None  # called with an allocated array once freed, so a backend can reuse its storage
    sink: object = None  # called with every LedgerEvent (the cluster's trace log), when the timeline is kept
    live: dict = field(default_factory=dict)  # name -> Buffer
    # the timeline held (a long run's trace folds the oldest: `fold_timeline`), each entry a LedgerEvent or, until
    # `timeline` is read, the plain tuple of its fields (a step makes thousands; see `timeline`)
    _held: list = field(default_factory=list, repr=False)
    timeline_folded: int = 0  # events let go from the timeline's front, as their steps folded out of the trace
    absolute: bool = field(default=False, repr=False)  # once folded, `timeline` keeps absolute positions (a Tail)
    # what was live just before the first event held, {name: (kind, bytes)}: the phases' questions start from it
    _live_before: dict = field(default_factory=dict, repr=False)
    # or, until they ask (`_before`), the live buffers themselves as the last fold's cut found them ({name: Buffer},
    # `mark`): a fold takes them as they were instead of replaying its events (`fold_timeline`)
    _live_then: dict | None = field(default=None, repr=False, compare=False)
    _complete: bool = field(default=True, repr=False)  # every event since the start held or folded (see `mark`)
    phase_label: str = ""
    keep_timeline: bool = True
    _current: dict = field(default_factory=dict)  # kind -> bytes
    _peak: dict = field(default_factory=dict)  # kind -> bytes
    _total: int = 0
    _peak_total: int = 0
    _at_peak: dict = field(default_factory=dict)  # kind -> bytes live at the first moment the total peaked
    _seq: int = 0

    # -- allocation ------------------------------------------------------------------------------
    def alloc(self, name: str, shape, dtype, kind: str, fill=None) -> Buffer:
        """Allocate a new buffer `name` of `shape` and `dtype`; `fill` sets every element if given."""
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(n) for n in shape)
        array = self.empty(shape, dtype=np.dtype(dtype))
        if fill is not None:
            array[...] = fill
        return self.adopt(name, array, kind, _owned=True)

    def adopt(self, name: str, array, kind: str, _owned: bool = False) -> Buffer:
        """Register an array that was just made (say, a collective's output) as a buffer of this rank."""
        live = self.live
        if name in live:
            raise LedgerError(f"rank {self.rank}: a buffer named {name!r} is already live; free it first or pick "
                              "another name")
        buf = live[name] = _buffer(name, kind, array, self, _owned)
        event = _noted(self, "alloc", name, kind, buf.nbytes)
        if event is not None and self.sink is not None:
            self.sink(event)
        return buf

    def free(self, buf_or_name) -> None:
        """Free a buffer by handle or name. Freeing twice is an error that names the buffer."""
        named = type(buf_or_name) is str
        name = buf_or_name if named else buf_or_name.name
        buf = self.live.get(name)
        if buf is None or (not named and buf is not buf_or_name):
            raise LedgerError(f"rank {self.rank}: buffer {name!r} is not live (already freed, or never allocated)")
        del self.live[name]
        event = _noted(self, "free", name, buf.kind, buf.nbytes)
        if event is not None and self.sink is not None:
            self.sink(event)
        if buf.owned and self.recycle is not None:
            self.recycle(buf._array)
        buf._array = None

    def get(self, name: str) -> Buffer:
        try:
            return self.live[name]
        except KeyError:
            raise LedgerError(f"rank {self.rank}: no live buffer named {name!r}") from None

    def let_go(self) -> None:
        """Forget which buffers are live, once their owner is done with this ledger (a memory run read and thrown
        away: analysis/planner/_plan.py): its totals, peaks and timeline stay as they are; a buffer it held can no
        longer be freed or looked up by name (`free` and `get` refuse it as not live). Each live buffer points back at
        its ledger (`Buffer.free`), so until then the two are a reference cycle, and the ledger's timeline (thousands
        of events a step) waits for Python's cyclic collector instead of going with its last reference."""
        self.live.clear()
        self._complete = False  # `live` no longer what the events leave live

    def mark(self) -> tuple:
        """(the sequence number of the last event, the buffers live now {name: Buffer} or None): where a step ends, for
        a fold to cut there later (`fold_timeline`) and take what was live there as it was instead of replaying the
        events before it. The buffers come only where what the events leave live is `live` itself: every event since
        the ledger began held or folded (none made while it kept no timeline: `keep_timeline`, which sets the
        sequence on all the same) and nothing let go (`let_go`). A dict of a step's few live buffers (a copy: C's) a
        ledger a step, where the replay cost ~8 µs a ledger a fold (64 ranks' ~2,000 events a step)."""
        seq = self._seq
        if self._complete and self.keep_timeline and self.timeline_folded + len(self._held) == seq:
            return seq, dict(self.live)
        return seq, None

    def fold_timeline(self, upto_seq: int, live_then: dict | None = None) -> None:
        """Let go of the timeline's events up to sequence number `upto_seq` (their step folded out of the trace's
        window: cluster/_window.py); the totals and peaks stay, and what was live before the first event held follows
        them. A Cluster's default window folds every rank's timeline once a step, so on 64 ranks this runs ~2,000
        events a step: the cut is found from the first event's number (the events are in sequence order, one apart
        where none was skipped; else by bisection), and what was live there is `live_then` where `mark` gave it, else
        the events replayed, plain tuples, all of them where the oldest is one (`timeline` makes the tuples it reads
        events from the oldest on), read in place."""
        held = self._held
        k = min(max(upto_seq - _seq_of(held[0]) + 1, 0), len(held)) if held else 0
        if k and _seq_of(held[k - 1]) != upto_seq or k < len(held) and _seq_of(held[k]) <= upto_seq:
            from bisect import bisect_right  # here, not at the top: `import zerosim`'s first names load no module more

            k = bisect_right(held, upto_seq, key=_seq_of)
        if live_then is not None:  # every event up to `upto_seq` held (`mark`): what they leave live is live_then
            self._live_then = live_then
        elif k:
            self._replay(held[:k])
        del held[:k]
        self.timeline_folded += k

    def _replay(self, events: list) -> None:
        """What was live before the first event held, moved on past `events` (the oldest held, in order)."""
        live = self._before()
        if type(events[0]) is tuple:  # seq, action, name, kind, nbytes, ... (ledger_event's order)
            forget = live.pop
            for e in events:
                if e[1] == "alloc":
                    live[e[2]] = (e[3], e[4])
                else:
                    forget(e[2], None)
        else:
            for e in events:
                _, action, name, kind, nbytes = e[:5] if type(e) is tuple else (0, e.action, e.name, e.kind,
                                                                                 e.nbytes)
                if action == "alloc":
                    live[name] = (kind, nbytes)
                else:
                    live.pop(name, None)

    def _before(self) -> dict:
        """{name: (kind, bytes)} live just before the first event held (`_live_before`, made from the buffers a fold
        took, `_live_then`, the first time it is asked for)."""
        if self._live_then is not None:
            self._live_before = {name: (buf.kind, buf.nbytes) for name, buf in self._live_then.items()}
            self._live_then = None
        return self._live_before

    def _first_position(self) -> int:
        """The position of the timeline's first event held: counted from the run's first with `absolute`."""
        return self.timeline_folded if self.absolute else 0

    def _kinds_before(self) -> dict:
        """{kind: bytes} live just before the first event held (nothing, unless older steps folded)."""
        out = {}
        for kind, nbytes in self._before().values():
            out[kind] = out.get(kind, 0) + nbytes
        return out

    @property
    def timeline(self) -> list:
        """[LedgerEvent]: every alloc and free held, in order, with the totals right after it.

        An engine's step makes thousands (every saved activation, gathered unit, gradient), so each is recorded as
        the plain tuple of its fields, and made a `LedgerEvent` here, the first time the timeline is read (in place:
        the same list, the same events on every read after). Making them at once was a tenth of a small step, and
        their objects the larger part of its garbage-collector's work."""
        held = self._held
        if held and type(held[-1]) is tuple:  # the ones not read yet are the last ones
            k = len(held)
            while k and type(held[k - 1]) is tuple:
                k -= 1
            held[k:] = [ledger_event(*e) for e in held[k:]]
        if self.absolute and self.timeline_folded:  # a Cluster's default window folded (cluster/_window.py)
            from zerosim.cluster._window import Tail

            return Tail(held, self.timeline_folded, "timeline")
        return held

    # -- questions -------------------------------------------------------------------------------
    def current(self, kind: str | None = None) -> int:
        """Bytes live now, of one kind or (kind=None) in total."""
        return self._total if kind is None else self._current.get(kind, 0)

    def peak(self, kind: str | None = None) -> int:
        """Most bytes ever live at once, of one kind or (kind=None) in total."""
        return self._peak_total if kind is None else self._peak.get(kind, 0)

    def by_kind(self) -> dict:
        """{kind: bytes live now}, kinds with nothing live left out."""
        return {k: v for k, v in self._current.items() if v}

    def peak_by_kind(self) -> dict:
        return dict(self._peak)

    def at_peak(self) -> dict:
        """{kind: bytes live at the first moment the total reached `peak()`}, kinds with nothing live left out: what a
        bar of the peak stacks (each kind's own peak, `peak_by_kind`, comes at its own moment: stacking those
        overstates the peak). Kept as the ledger runs (no timeline needed); it sums to `peak()`."""
        return {k: v for k, v in self._at_peak.items() if v}

    def by_phase(self, since: int = 0) -> list:
        """[(phase, peak total bytes within it, {kind: bytes live at its end})] in timeline order.

        Consecutive events with the same phase label form one phase; only phases from timeline event
        `since` on are reported (what was live before still counts). Needs the timeline.
        """
        live = self._kinds_before()
        phases, before = [], sum(live.values())
        for n, e in enumerate(self.timeline, self._first_position()):
            if n < since:
                live[e.kind], before = e.kind_total, e.total
                continue
            if not phases or phases[-1][0] != e.phase:
                phases.append([e.phase, before, None])  # a phase starts holding what the last one left
            before = e.total
            live[e.kind] = e.kind_total
            phases[-1][1] = max(phases[-1][1], e.total)
            phases[-1][2] = {k: v for k, v in live.items() if v}
        return [tuple(p) for p in phases]

    def peaks_by_phase(self, since: int = 0) -> list:
        """[(phase, {kind: bytes live at the phase's peak moment})]: what made up each phase's peak."""
        out, live = [], self._kinds_before()
        for n, e in enumerate(self.timeline, self._first_position()):
            live[e.kind] = e.kind_total
            if n < since:
                continue
            snapshot = {k: v for k, v in live.items() if v}
            if not out or out[-1][0] != e.phase:
                before = {k: v for k, v in live.items() if v}
                before[e.kind] = e.kind_total - (e.nbytes if e.action == "alloc" else -e.nbytes)
                out.append([e.phase, {k: v for k, v in before.items() if v}])
            if sum(snapshot.values()) > sum(out[-1][1].values()):
                out[-1][1] = snapshot
        return [tuple(p) for p in out]

    def live_at_peaks(self, since: int = 0) -> list:
        """[(phase, [(name, kind, bytes), ...])]: the buffers live at the moment of each phase's peak.

        Phases as in `by_phase` (from timeline event `since` on; what was live before still counts).
        Ties keep the first moment the peak was reached. Needs the timeline.
        """
        live, out = dict(self._before()), []
        for n, e in enumerate(self.timeline, self._first_position()):
            if n >= since and (not out or out[-1][0] != e.phase):
                out.append([e.phase, sum(b for _, b in live.values()), dict(live)])  # a phase starts with what was live
            if e.action == "alloc":
                live[e.name] = (e.kind, e.nbytes)
            else:
                live.pop(e.name, None)
            if n >= since and e.total > out[-1][1]:
                out[-1][1], out[-1][2] = e.total, dict(live)
        return [(phase, [(name, kind, nbytes) for name, (kind, nbytes) in held.items()]) for phase, _, held in out]

    def reset_peaks(self) -> None:
        """Start peak tracking afresh from what is live now (e.g. after initialisation)."""
        self._peak = dict(self._current)
        self._peak_total = self._total
        self._at_peak = dict(self._current)
