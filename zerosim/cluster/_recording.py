"""A span of a run recorded, to be written again: the calls, compute events, optimizer steps and ledger changes a
block of work made on some local ranks, written into the trace and the ledgers again as if the same work ran again
later, on the same ranks or on others of the same make, another micro-batch. The meta backend's pipeline uses it for
actions that repeat, and for a whole step read for its time (parallel/pipeline/_repeat.py says when that holds).

    with Recording(trace, ranks, names, waited) as rec:    the work, waiting for the handle `waited`
        ...
    rec.replay(micro, waited_now, ranks_now, names_now)     the same calls and compute events, renumbered and
                                                            relabelled; the ledgers moved as the work moved them

What `replay` writes anew: each call number moves by (the first free call number now) - (the recorded first call); a
number of the handle the work waited for becomes the number at its place in `waited_now`; every call and compute event
takes `micro` (an optimizer step has none: its rank and the handle it waited for move); the ranks and the units' names
(`names`, by position; a call's tag starts with its unit's name, then a space or a colon: "block2.attn g",
"block2.attn.hop0: K, V to the next rank") those given now, and a send's ends the ranks at their places in the
`Trace.within` block it is written in (the ranks a meta backend's representative stands for send too, their sends one
record: collectives/_send_recv.py, `Trace.hops_alike`). The ledgers keep only what their questions read: per kind the
bytes the work ended with and the most it held above where it started (MemoryLedger's peaks are maxima of running sums:
the same allocations and frees from another start give that start plus the same maxima), and the count of events; a
buffer it made is never in `live`. So it writes again only what ran on a backend without values, with a trace of calls
and ledgers without a timeline (whose events carry names), and refuses (`usable` False) a record that holds other events
or names a call made before it other than those it waited for.
"""

from __future__ import annotations

import re

from zerosim._dataclass import dataclass
from zerosim.cluster._events import ComputeFields, OptimizerStep, optimizer_step_event
from zerosim.cluster._hops import RingHops
from zerosim.cluster._trace import Call, Event, Handle

_new = object.__new__
_UNIT_END = re.compile("[ :]")  # where the unit's name a call's tag starts with ends
# a log entry, as `_relabelled` marks it
_CALL, _OWN, _COMPUTE, _STEP = "call", "compute waiting for its own calls", "compute", "optimizer step"


@dataclass
class _LedgerDelta:
    """What one action did to one ledger, apart from where it started."""

    peaks: dict  # {kind: most bytes of the kind at an allocation, minus the kind's bytes at the start}
    total_peak: int | None  # the most bytes in all at an allocation, minus the start's; None: nothing allocated
    at_peak: dict  # {kind: bytes at the first moment of total_peak minus at the start} (MemoryLedger.at_peak)
    current: dict  # {kind: bytes at the end minus at the start} for every kind it touched
    total: int
    events: int  # allocations and frees: the ledger's sequence numbers it used


class _LedgerWatch:
    """Around a recorded action: the ledgers' peaks measured from its start, then put back together."""

    def __init__(self, ranks):
        self.ledgers = [r.ledger for r in ranks]

    def __enter__(self):
        self.start = []
        for led in self.ledgers:
            self.start.append((led._peak, led._peak_total, dict(led._current), led._total, led._seq, led._at_peak))
            led._peak, led._peak_total = {}, -1  # each alloc now writes its own running sum: the maxima from here
        return self

    def __exit__(self, *exc):
        self.deltas = []
        for led, (peak, peak_total, current, total, seq, at_peak) in zip(self.ledgers, self.start):
            mine, mine_total = led._peak, led._peak_total
            touched = set(mine) | {k for k, v in led._current.items() if current.get(k) != v}
            self.deltas.append(_LedgerDelta({k: v - current.get(k, 0) for k, v in mine.items()},
                                            None if mine_total < 0 else mine_total - total,
                                            {} if mine_total < 0 else _less(led._at_peak, current),
                                            {k: led._current.get(k, 0) - current.get(k, 0) for k in touched},
                                            led._total - total, led._seq - seq))
            for k, v in mine.items():  # MemoryLedger.adopt: peak = max(peak so far, running sum) at each alloc
                peak[k] = max(peak.get(k, 0), v)
            if mine_total <= peak_total:  # the peak's first moment came before the action: its kinds then
                led._at_peak = at_peak
            led._peak, led._peak_total = peak, max(peak_total, mine_total)
        return False


class Recording:
    """What happened on `ranks` (local ranks) and in `trace` inside the block: its calls, compute events and ledger
    changes, and what the caller notes it handed on (`sent`, `losses`, `returned`); `replay` writes it again (see the
    module docstring)."""

    def __init__(self, trace, ranks, names: tuple, waited: Handle):
        self.trace, self.ranks, self.names, self.waited = trace, ranks, names, tuple(waited)
        self.usable = True
        self.sent = self.losses = self.made = None  # what the action handed on, its losses, its returned handle
        self._places = {}  # (ranks, names) -> the log relabelled for them (`_relabelled`)
        self._moved = {}  # Trace.within's ranges now -> {rank then: rank now} (`_ends`)

    def __enter__(self):
        t = self.trace
        self.first_call, self.first_log, self.first_event = t.folded.calls + len(t._calls), len(t._log), len(t._events)
        self.scope = t.scope  # the ranks its calls take part on (Trace.within): their sends' ends, written again moved
        self.watch = _LedgerWatch(self.ranks).__enter__()
        return self

    def __exit__(self, *exc):
        self.watch.__exit__(*exc)
        if exc[0] is not None:
            self.usable = False
            return False
        t = self.trace
        self.end_call = t.folded.calls + len(t._calls)
        self.log = t._log[self.first_log:]
        self.events = t._events[self.first_event:]
        self.forms = {c: t.ring_calls[c] for c in range(self.first_call, self.end_call) if c in t.ring_calls}
        self.groups = {c: t.call_groups[c] for c in range(self.first_call, self.end_call) if c in t.call_groups}
        self.ledgers = self.watch.deltas
        # `replay` moves the ends of each Event, and of each record of sends alike at "call" granularity (a context
        # ring's stood-for ranks: collectives/_send_recv.py); a ring phase recorded whole in steps is not written again
        self.usable = all(type(e) in (Call, ComputeFields, OptimizerStep) for e in self.log) and all(
            self._refers(e[9]) for e in self.log if type(e) is ComputeFields) and all(
            self._refers(e.needs) for e in self.log if type(e) is OptimizerStep) and all(
            type(e) is Event or type(e) is RingHops and e.whole for e in self.events)
        return False

    def _refers(self, needs) -> bool:
        """Whether every call `needs` names is this action's own or one of the handle it waited for."""
        return all(self.first_call <= c < self.end_call or c in self.waited for c in needs)

    def returned(self, handle) -> None:
        """The handle the action returned (its last gradient reduction), to return again."""
        self.made = handle
        self.usable = self.usable and self._refers(handle)

    # -- writing it again ---------------------------------------------------------------------------------
    def replay(self, micro: int, waited: Handle, ranks, names: tuple, trace=None) -> Handle:
        """Write the record again as micro-batch `micro`'s action on `ranks` (local ranks, in place of the recorded
        ones by position) holding units `names` (likewise), having waited for `waited` (the handle received now, in
        place of the recorded one), into `trace` (default the one it was recorded in; another run's of the same
        shapes: its calls numbered from there). Returns the action's handle, as the run returned it."""
        t = self.trace if trace is None else trace
        shift = t.folded.calls + len(t._calls) - self.first_call
        waited = tuple(waited)
        if len(waited) != len(self.waited):
            raise RuntimeError(f"micro-batch {micro} waited for {len(waited)} calls where the recorded action waited "
                               f"for {len(self.waited)}: it is not the same action")
        outside = dict(zip(self.waited, waited))
        rank = {a.index: b.index for a, b in zip(self.ranks, ranks)}
        ends = {**self._ends(t.scope), **rank}  # a send's ends: the ranks it stood for too
        generation = t.generation

        lo, hi, nothing = self.first_call, self.end_call, Handle((), generation)

        def moved(needs) -> Handle:
            if not needs:
                return nothing
            return Handle(tuple(c + shift if lo <= c < hi else outside[c] for c in needs), generation)

        log, calls, scope = t._log, t._calls, t.scope
        for what, e, head, body, fields in self._relabelled(rank, names):
            if what is _STEP:  # a step's end written again (parallel/pipeline/_repeat.py): its rank and needs moved
                log.append(optimizer_step_event(rank.get(e.rank, e.rank), e.step, e.start, e.stop, e.optimizer,
                                                moved(e.needs), None, e.where))
                continue
            if what is not _CALL:  # (rank, op, micro, kind, unit, ...fields, needs, ...rest): micro, needs anew
                needs = (Handle(tuple(c + shift for c in e[9]), generation) if what is _OWN  # its own calls only
                         else moved(e[9]))
                log.append(ComputeFields((*head, micro, *body, needs, *fields)))  # one tuple, not four joined
                continue
            call = _new(Call)
            made = call.__dict__
            made.update(head)  # the recorded call's fields, its tag relabelled (`_relabelled`): then its number, micro
            made["call"], made["micro"] = e.call + shift, micro
            if scope is not None:  # the ranks taking part: those of the block it is written in (Trace.within)
                t.call_ranks[made["call"]] = scope
            calls.append(call)
            log.append(call)
        for c, form in self.forms.items():
            t.ring_calls[c + shift] = form
        for c, group in self.groups.items():
            t.call_groups[c + shift] = group
        now = {}  # a record's ranks (or peers) -> the ranks at their places now: the same few tuples, call after call
        for e in self.events:
            if type(e) is RingHops:  # each rank's summary, as `Trace.end` placed the record (its ranks in order)
                hops = _new(RingHops)  # `replace` without the frozen dataclass's checks: thousands an action
                hops.__dict__.update(e.__dict__, call=e.call + shift, ranks=_moved(e.ranks, ends, now),
                                     sends_to=_moved(e.sends_to, ends, now))
                t.place_whole(hops)
                continue
            event = _new(Event)
            event.__dict__.update(e.__dict__, call=e.call + shift, src=ends.get(e.src, e.src),
                                  dst=ends.get(e.dst, e.dst))
            t._events.append(event)
        for r, d in zip(ranks, self.ledgers):
            _apply(r.ledger, d)
        return moved(self.made) if self.made is not None else Handle()

    def _relabelled(self, rank: dict, names: tuple) -> list:
        """The log's entries relabelled for ranks `rank` (recorded index -> now) holding units `names`, what is the
        same each time the record is written again there (made once per place: the middle micro-batches repeat it):
        (_OWN or _COMPUTE, e, (rank, op), (kind, unit, ...fields), rest) for a compute event, (_CALL, e, its fields
        with its tag relabelled, None, None) for a call (a dict `replay` copies into each new Call at once)."""
        key = (tuple(rank.items()), names)
        made = self._places.get(key)
        if made is not None:
            return made
        unit = {a: b for a, b in zip(self.names, names) if a != b}

        def tag(text: str) -> str:  # "block2.attn g" -> "block9.attn g", "block2.attn.hop0: K, V ..." -> "block9.
            # attn.hop0: K, V ...": a call's tag starts with its unit's name, then a space or a colon
            first = _UNIT_END.split(text, 1)[0]
            return unit[first] + text[len(first):] if first in unit else text

        lo, hi = self.first_call, self.end_call

        def what(needs) -> str:  # a compute event whose every awaited call is the action's own: moved by the shift
            return _OWN if needs and all(lo <= c < hi for c in needs) else _COMPUTE

        made = self._places[key] = [
            (what(e[9]), e, (rank[e[0]], e[1]), (e[3], unit.get(e[4], e[4])) + e[5:9], e[10:])
            if type(e) is ComputeFields else (_STEP, e, None, None, None) if type(e) is OptimizerStep
            else (_CALL, e, _fields(e, tag=tag(e.tag) if unit else e.tag), None, None)
            for e in self.log]
        return made

    def _ends(self, scope) -> dict:
        """{rank: rank} from the ranks of the `within` block the record was made in to those at the same places of
        `scope`, the block it is written again in ({} where they are one, or either is every rank): a pipeline stage's
        action written again on another stage of its make sends from that stage's ranks where the recorded one sent
        from its own, the ranks the process hosts and those they stand for (the meta backend's) alike."""
        if scope == self.scope or scope is None or self.scope is None:
            return {}
        made = self._moved.get(scope)
        if made is None:
            made = self._moved[scope] = dict(zip(*map(self.trace.scope_ranks, (self.scope, scope))))
        return made

    def handed_on(self, ranks) -> dict:
        """What the action sent on ({local rank: activation or gradient}), for `ranks` in place of the recorded."""
        return {b.index: self.sent[a.index] for a, b in zip(self.ranks, ranks)}


def _moved(ranks: tuple, ends: dict, now: dict) -> tuple:
    """`ranks` at their places now (`ends`: rank then -> rank now; one not in it stays), each tuple moved once a
    replay (`now`)."""
    moved = now.get(ranks)
    if moved is None:
        moved = now[ranks] = tuple(ends.get(r, r) for r in ranks)
    return moved


def _fields(e, **changed) -> dict:
    """`e`'s fields with `changed`, as a dict of the size a record's own is: a dict literal is made with room to grow,
    and each dict copied from it would keep that room (a pipeline writes tens of thousands of calls again)."""
    like = _new(type(e))
    like.__dict__.update(e.__dict__, **changed)
    return like.__dict__


def _apply(led, d: _LedgerDelta) -> None:
    """The recorded action's allocations and frees, from where `led` stands now (see _LedgerWatch)."""
    current, peak = led._current, led._peak
    for k, v in d.peaks.items():
        peak[k] = max(peak.get(k, 0), current.get(k, 0) + v)
    if d.total_peak is not None and led._total + d.total_peak > led._peak_total:  # a new peak: its first moment's
        led._peak_total = led._total + d.total_peak
        led._at_peak = {k: current.get(k, 0) + d.at_peak.get(k, 0) for k in _in_order(current, d.at_peak)}
    for k, v in d.current.items():
        current[k] = current.get(k, 0) + v
    led._total += d.total
    led._seq += d.events


def _less(kinds: dict, start: dict) -> dict:
    """{kind: bytes in `kinds` minus at the `start`}: a moment's kinds apart from where the action started."""
    return {k: kinds.get(k, 0) - start.get(k, 0) for k in _in_order(kinds, start)}


def _in_order(first: dict, then: dict) -> list:
    """The keys of `first`, then those of `then` it lacks, each in its dict's order (a set's order would follow the
    strings' hashes, which change from process to process: the kinds' order is printed)."""
    return [*first, *(k for k in then if k not in first)]

