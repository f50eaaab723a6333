"""A long run's trace: the events of its last steps, and a summary of the ones before, so memory stays flat.

A step's log holds every call, every compute and (with ledger timelines) every alloc and free: tens of kilobytes a
step, which a 10,000-step run kept whole (0.5 to 1.8 GB). With `keep_steps = k` the trace folds a step into its
`Summary` once k newer steps have ended: the step's calls, sends and log entries leave the lists, and what the byte
questions need of them stays, added up:

    bytes per collective, per link tier, per step          (`Trace.summary()` reads them with the window's)
    bytes each rank sent and received, per collective and tag (`bytes_sent`, `bytes_received`, `sent_totals`)
    how many calls, sends and log entries were folded        (call numbers and log positions stay absolute)

and all of it in memory that does not grow with the steps folded while the steps send alike: the bytes per step as
runs of consecutive steps that sent the same bytes (`StepRuns`: a steady run's every step is one run, however long),
the closed-form calls (the meta backend's) counted by their form (`ClosedCalls`: a step's calls recur every step).

Nothing a user reads of the steps still held changes: the same events, the same call numbers, the same byte totals
over the whole run. A folded step's events are gone unless the trace streams them (`log_to`: one line per log entry,
its repr, each call's sends indented below it), so the whole log can still be read, from the file.

Positions. With `keep_steps = k` the lists lose their front as steps fold, so a list position taken as
`len(trace.log)` moves (`trace.logged` and `of_type(kind, since)` count absolutely); `zerosim train` (train/_trainer.py)
holds two steps, reads nothing older, and streams the whole log on request. A Cluster made without `keep_steps` holds
`WINDOW` steps (far more than any notebook, test or page runs) and keeps positions absolute once it folds: `log`,
`calls`, `events` and each ledger's `timeline` are then a `Tail`, whose length and positions count every entry the run
made, so `since = len(cluster.trace.log)` before a step and `cluster.trace.log[since:]` after it, or
`trace.calls[e.call]`, keep meaning what they meant; reading a folded position is an error naming the window. Until a
run passes `WINDOW` steps the lists are plain lists, as they always were.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import field

from zerosim._dataclass import dataclass
from zerosim.cluster._events import ComputeFields
from zerosim.cluster._ledger import LedgerEvent, ledger_event

WINDOW = 1024  # steps a Cluster made without keep_steps holds at most (the longest run in a notebook is 200 steps)
# ... and no more of them than their entries' share of what the ranks hold: a small model's step logs as many entries
# as a large one's (an alloc, a free, a Compute per rank and layer), so 1024 steps of a 10k-parameter MLP on 8 ranks
# held ~110 MB of events beside 0.38 MB of ledgers (benchmarks/memory.py --hand-built). The window folds its oldest
# steps while the entries held would cost more than `budget(ledgers)`: SHARE times the ranks' ledger peaks (summed),
# or FLOOR_BYTES where that is more (what any run may hold: the notebooks read whole runs of small models, the largest
# 06's 60 steps on 4 ranks, 10,908 entries, ~3 MB), and at least HELD_AT_LEAST steps. ENTRY_BYTES: what one held
# entry costs, measured: the RSS a 10k MLP on 8 ranks grew per step past its first ÷ the entries it logged (0.10 MB ÷
# 363; tracemalloc: a ledger event's tuple and its three fresh ints, 208-240 B; a Compute record, 136 B and its ints).
SHARE = 1
FLOOR_BYTES = 8 << 20
HELD_AT_LEAST = 4
ENTRY_BYTES = 280
RINGS_WAITING = 256  # distinct ring phases a summary keeps counted before it adds them to its sums (`Summary.rings`)


def budget(ledgers_peak: int) -> int:
    """The bytes of entries a Cluster's default window may hold, its ranks' ledgers having peaked at `ledgers_peak`
    (summed over ranks and tiers)."""
    return max(FLOOR_BYTES, SHARE * ledgers_peak)


class Tail(Sequence):
    """The entries a list of a long run's trace still holds, at their absolute positions: `len` counts every entry the
    run made, `tail[i]` and `tail[i:j]` take absolute positions (negative ones count from the end, as a list's do),
    iterating gives the entries held, in order. Asking for a folded position raises IndexError naming the window."""

    __slots__ = ("held", "start", "what")

    def __init__(self, held: list, start: int, what: str):
        self.held, self.start, self.what = held, start, what  # the list itself (not a copy), its first position

    def __len__(self) -> int:
        return self.start + len(self.held)

    def __iter__(self):
        return iter(self.held)

    def __reversed__(self):
        return reversed(self.held)

    def __getitem__(self, at):
        if isinstance(at, slice):
            span = range(*at.indices(len(self)))
            if not span:
                return []
            if min(span[0], span[-1]) < self.start:
                raise IndexError(self._gone(min(span[0], span[-1])))
            stop = span.stop - self.start  # below 0 only for a reversed slice that runs to the front held
            return self.held[span.start - self.start:stop if stop >= 0 else None:span.step]
        position = at + len(self) if at < 0 else at
        if position < 0 or position >= len(self):
            raise IndexError(f"{self.what} position {at} out of range")
        if position < self.start:
            raise IndexError(self._gone(position))
        return self.held[position - self.start]

    def index(self, value, start: int = 0, stop: int | None = None) -> int:
        """The absolute position of `value` among the entries held (from absolute `start` on)."""
        for i, x in enumerate(self.held[max(start - self.start, 0):], max(start, self.start)):
            if stop is not None and i >= stop:
                break
            if x is value or x == value:
                return i
        raise ValueError(f"{value!r} is not in the {self.what} held")

    def _gone(self, position: int) -> str:
        return (f"{self.what} position {position} belongs to a step folded out of the trace's window (a Cluster "
                f"made without keep_steps holds its last steps, at most {WINDOW}, in entries costing no more than "
                f"{FLOOR_BYTES >> 20} MB or {'' if SHARE == 1 else f'{SHARE} times '}what its ranks' ledgers peaked "
                f"at, whichever is more; the first held is "
                f"at position {self.start}): its bytes are in the summary; pass keep_steps=None to the Cluster to "
                "hold every step, or log_to= to stream the log to a file")

    def __repr__(self) -> str:
        return f"Tail({self.what}: {len(self.held)} held from position {self.start})"


class StepRuns:
    """{step: bytes} kept as runs of consecutive steps that hold the same bytes, in step order: what each folded step
    sent over links between ranks. A long run's steps send alike, so its every step is one run, and the map costs
    O(changes) however many steps fold (a dict kept ~100 B a step: 0.3 MB at 3,000 steps of a 10k MLP on 8 ranks,
    whose ledgers peak at 0.38 MB). `items` reads every step back, as the dict had it; a step added twice adds up,
    in whatever order steps come (a call outside any step is step 0)."""

    __slots__ = ("firsts", "lasts", "values")

    def __init__(self):
        self.firsts, self.lasts, self.values = [], [], []  # run i: steps firsts[i]..lasts[i], each values[i] bytes

    def add(self, step: int, nbytes: int) -> None:
        """The map's `[step] += nbytes` (a step not there yet comes in with `nbytes`)."""
        from bisect import bisect_right  # a folding window's: not a cost of importing the engine

        firsts, lasts, values = self.firsts, self.lasts, self.values
        i = bisect_right(firsts, step) - 1
        if i >= 0 and step <= lasts[i]:  # inside run i: split it around `step`
            if not nbytes:
                return
            first, last, value = firsts[i], lasts[i], values[i]
            runs = [(first, step - 1, value)] if first < step else []
            at = i + len(runs)
            runs.append((step, step, value + nbytes))
            if step < last:
                runs.append((step + 1, last, value))
            self._put(i, i + 1, runs)
        else:
            at = i + 1
            self._put(at, at, [(step, step, nbytes)])
        self._join(at)  # with the run after it, then with the one before
        self._join(at - 1)

    def _put(self, i: int, j: int, runs: list) -> None:
        self.firsts[i:j] = [r[0] for r in runs]
        self.lasts[i:j] = [r[1] for r in runs]
        self.values[i:j] = [r[2] for r in runs]

    def _join(self, i: int) -> None:
        """Run i and run i + 1 made one where the second goes on from the first with the same bytes."""
        if 0 <= i < len(self.firsts) - 1 and self.lasts[i] + 1 == self.firsts[i + 1] \
                and self.values[i] == self.values[i + 1]:
            self.lasts[i] = self.lasts[i + 1]
            del self.firsts[i + 1], self.lasts[i + 1], self.values[i + 1]

    def items(self):
        """(step, bytes) of every step, in step order."""
        for first, last, value in zip(self.firsts, self.lasts, self.values):
            for step in range(first, last + 1):
                yield step, value

    def __len__(self) -> int:
        return sum(last - first + 1 for first, last in zip(self.firsts, self.lasts))

    def __repr__(self) -> str:
        return f"StepRuns({list(zip(self.firsts, self.lasts, self.values))})"


class ClosedCalls(dict):
    """The closed-form calls folded (the meta backend's), counted by what their bytes depend on: {(collective, tag,
    form, group, scope): [collective, tag, (sizes, itemsize, lag), group, n, count, scope]} (scope: the ranks a
    pipeline stage's call ran on, `Trace.call_ranks`; None: every rank). A step's calls recur every step with
    the same forms, so the folded calls cost O(one step's), not O(steps); a question multiplies by the count. A form's
    run-length sizes key by their runs (a RunCounts hashes as its whole tuple: O(N)); a group by its identity (the
    entry holds it, so the identity stays its own)."""

    def add(self, call, form: tuple, group, n: int, scope=None) -> None:
        sizes = form[0]
        key = (call.collective, call.tag, getattr(sizes, "runs", sizes), form[1], form[2], id(group), n, scope)
        entry = self.get(key)
        if entry is None:
            self[key] = [call.collective, call.tag, form, group, n, 1, scope]
        else:
            entry[5] += 1


@dataclass
class Summary:
    """What the folded steps sent, added up (see the module docstring)."""

    calls: int = 0  # calls folded (the first call still held is number `calls`)
    events: int = 0  # sends (or per-rank summaries) folded
    log: int = 0  # log entries folded (the first entry still held is at absolute position `log`)
    by_collective: dict = field(default_factory=lambda: defaultdict(int))  # {collective: bytes}
    by_tier: dict = field(default_factory=lambda: defaultdict(int))  # {tier: bytes}
    by_step: StepRuns = field(default_factory=StepRuns)  # {step: bytes sent over links between ranks}, as runs
    # the steps of the fold under way, {step: bytes} (one add per send), moved into `by_step` as the fold ends
    folding: dict = field(default_factory=lambda: defaultdict(int))
    sent: dict = field(default_factory=lambda: defaultdict(int))  # {(rank, collective, tag): bytes it sent}
    received: dict = field(default_factory=lambda: defaultdict(int))  # {(rank, collective, tag): bytes} (hops only)
    closed: ClosedCalls = field(default_factory=ClosedCalls)  # closed-form calls folded, counted by form
    # the ring phases recorded whole, folded but not yet in `sent` and `received`: {what sets each rank's bytes:
    # [times folded, each rank's bytes, their sum]} (`add_ring`; `sent_items`, `received_items` add them in)
    rings: dict = field(default_factory=dict, repr=False)

    def steps(self) -> dict:
        """{step: bytes sent over links between ranks} of every step folded, in step order."""
        out = dict(self.by_step.items())
        for step, nbytes in self.folding.items():
            out[step] = out.get(step, 0) + nbytes
        return out

    def settle(self) -> None:
        """The fold's steps into `by_step` (at a fold's end)."""
        for step in sorted(self.folding):
            self.by_step.add(step, self.folding[step])
        self.folding.clear()

    def add(self, event, step: int, transfer: bool) -> None:
        """Count one folded send (an `Event`) of a call that belonged to iteration `step`."""
        self.events += 1
        self.by_collective[event.collective] += event.bytes
        self.by_tier[event.tier] += event.bytes
        self.sent[event.src, event.collective, event.tag] += event.bytes
        if event.dst >= 0:
            self.received[event.dst, event.collective, event.tag] += event.bytes
        if not transfer:  # a copy to host or NVMe crosses no link between ranks
            self.folding[step] += event.bytes

    def add_ring(self, hops, collective: str, tag, tier, step: int, transfer: bool) -> None:
        """Count one folded ring phase recorded whole (a `RingHops` of call `collective`, `tag`; `tier(src, dst)`, or
        the one tier every send crosses) as `add` counts its events one by one, without making them: over its n - 1
        steps the rank at ring position p sends every chunk but (p - lag + 1) mod n, the one step n - 1 would send
        (`RingHops.sums`, the one summary a rank of a `whole` record), all to one neighbour, so each rank's bytes are
        one sum and every key is met in the order its sends meet it. A summary names no receiver (dst -1): nothing
        is received. What each rank sent and received waits in `rings`, counted by what sets it (a step's phases
        recur every step: a window folding a step of 64 ranks made ~1,300 additions to `sent` and `received` for its
        ~10 phases), for `sent_items` and `received_items` to add in; the bytes by collective, tier and step are
        added now."""
        if len(hops.sizes) < 2:
            return  # no send
        self.events += hops.count
        if not hops.ranks:
            return
        key = (collective, tag, hops.sizes, hops.itemsize, hops.lag, hops.ranks, hops.positions, hops.sends_to,
               hops.whole)
        held = self.rings.get(key)
        if held is None:
            if len(self.rings) >= RINGS_WAITING:  # phases that do not recur: added in now, so the wait stays small
                self._add_rings()
            amounts = [n * hops.itemsize for _, _, n in hops.sums()]  # each rank's bytes, in order
            held = self.rings[key] = [0, amounts, sum(amounts)]  # (bytes are integers: any order gives the same)
        held[0] += 1
        amounts, whole = held[1], held[2]
        self.by_collective[collective] += whole
        tiers = [tier] if type(tier) is str else list(map(tier, hops.ranks, hops.sends_to))
        if tiers.count(tiers[0]) == len(tiers):  # one tier, as within a node: one add (a step folds ~10 phases of
            self.by_tier[tiers[0]] += whole     # 64 ranks on a hand-built Cluster(64))
        else:
            for t, sent in zip(tiers, amounts):
                self.by_tier[t] += sent
        if not transfer:
            self.folding[step] += whole

    def sent_items(self):
        """`sent.items()`, the ring phases waiting in `rings` added in first."""
        self._add_rings()
        return self.sent.items()

    def received_items(self):
        """`received.items()`, the ring phases waiting in `rings` added in first."""
        self._add_rings()
        return self.received.items()

    def _add_rings(self) -> None:
        """The ring phases folded since the last read into `sent` and `received`: each rank's bytes times the phases
        alike, as `add_ring` once added them phase by phase (integers: the same sums)."""
        by_rank, received = self.sent, self.received
        for (collective, tag, _, _, _, ranks, _, sends_to, whole), (times, amounts, _) in self.rings.items():
            for src, dst, sent in zip(ranks, sends_to, amounts):
                by_rank[src, collective, tag] += sent * times
                if not whole:
                    received[dst, collective, tag] += sent * times
        self.rings.clear()


class LogFile:
    """Where a trace streams its log when asked (`log_to`): one line per log entry (its repr), each call's sends
    (its events) below it, indented by two spaces; written as steps fold, and the rest by `Trace.flush_log`. The path
    is checked here; the file is made (emptied, and the folders on its way made, as `write_atomic` makes them) at
    the first write, so that a run refused after its Cluster was built (a checkpoint of another run in its --save
    folder, a resume at its last step) leaves an earlier log as it was."""

    def __init__(self, path, flag: str = "log_to"):
        from zerosim.outputs import check_file

        self.path, self.flag = check_file(path, flag), flag  # never into a checkpoint, nor through a link
        self._fresh = True  # the first write empties the file: a rerun does not append to the last run's log

    def write(self, lines) -> None:
        from zerosim.outputs import open_output

        if self._fresh:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open_output(self.path, "w" if self._fresh else "a", self.flag) as f:
            self._fresh = False
            for line in lines:
                f.write(line + "\n")


def fold_to_budget(trace, budget: int) -> None:
    """Fold the oldest steps `trace` holds while what it holds would cost more than `budget` bytes (ENTRY_BYTES an
    entry: its log's and its sends'), at least HELD_AT_LEAST steps kept."""
    ends, logged, start = trace._step_ends, trace.logged, trace.folded.log
    per_entry = ENTRY_BYTES * (1 + trace._entries_held() / max(len(trace._log), 1))  # a log entry and its sends
    k = 0
    while len(ends) - k > HELD_AT_LEAST and per_entry * (logged - (ends[k - 1][0] if k else start)) > budget:
        k += 1
    if k:
        upto = ends[k - 1]
        del ends[:k]
        fold(trace, *upto)


def fold(trace, upto_log: int, upto_call: int, ledger_seqs: dict | None = None) -> None:
    """Fold what `trace` holds before absolute log position `upto_log` and call number `upto_call` (the end of a
    step) into `trace.folded`: the sends counted, the calls, sends and log entries let go (streamed first when the
    trace writes its log to a file). `ledger_seqs`: {rank: its ledger's `mark`} at that point (its last seq, and the
    buffers live then), taken when the step ended (`Trace.ledger_seqs`), else read from the entries folded."""
    summary = trace.folded
    calls = trace._calls[: upto_call - summary.calls]
    step_of = {c.call: c.step for c in calls}
    held, j = trace._events, 0
    while j < len(held) and held[j].call < upto_call:  # sends come in call order: the folded ones are a prefix
        j += 1
    gone = _fold_sends(trace, held[:j], step_of)
    _fold_closed(trace, calls)
    entries = trace._log[: upto_log - summary.log]  # a ledger's allocs and frees may still be plain tuples
    if trace.on_fold is not None:  # the ledgers' timelines let go of the allocs and frees folded here
        trace.on_fold(_last_folded(entries) if ledger_seqs is None else ledger_seqs)
    if trace._log_file is not None:
        write_log(trace, entries[max(trace._written - summary.log, 0):], gone)
        trace._written = max(trace._written, upto_log)
    del trace._log[: len(entries)]
    trace._checked = max(trace._checked - len(entries), 0)
    del trace._calls[: len(calls)]
    del trace._events[:j]
    summary.log += len(entries)
    summary.calls += len(calls)
    summary.settle()


def _fold_sends(trace, folded: list, step_of: dict) -> list:
    """The sends `folded` counted into the summary (a ring phase recorded whole: counted from its record, or made
    send by send when the log is written); returns the sends one by one for the log file (none when not written)."""
    from zerosim.cluster._mesh import INTRA
    from zerosim.cluster._trace import TRANSFERS, RingHops

    summary = trace.folded
    writes = trace._log_file is not None
    gone = []  # the sends folded, one by one, for the log file
    for e in folded:
        step = step_of.get(e.call, 0)
        if type(e) is not RingHops:
            summary.add(e, step, e.collective in TRANSFERS)
            if writes:
                gone.append(e)
            continue
        trace._records -= 1  # a ring phase recorded whole
        trace._folded -= e.count - 1
        if e.whole:
            trace._summed -= e.count - 1
        if writes:  # its sends made, to write and count one by one
            sends = trace._unfold(e)
            gone += sends
            for send in sends:
                summary.add(send, step, send.collective in TRANSFERS)
        else:  # counted from the record: a hand-made Cluster past its window pays no Event per send
            c = trace.call(e.call)
            tier = INTRA if trace.gpus_per_node is None else (  # no nodes: every send within one (`Trace._tier`)
                lambda src, dst, call=e.call: trace._tier(call, src, dst))
            summary.add_ring(e, c.collective, c.tag, tier, step, c.collective in TRANSFERS)
    return gone


def _fold_closed(trace, calls: list) -> None:
    """The closed-form calls among `calls` (the meta backend's representative) kept small and counted."""
    from zerosim.cluster import _closed as closed

    summary = trace.folded
    for c in calls:  # closed-form calls (the meta backend's representative): kept small, counted
        form = trace.ring_calls.pop(c.call, None)
        group = trace.call_groups.pop(c.call, None)
        scope = trace.call_ranks.pop(c.call, None)
        if form is not None:
            n = group.world_size if group is not None else len(form[0])
            summary.closed.add(c, form, group, n, scope)
            moved = closed.volume(*form, group, n, scope)
            summary.by_collective[c.collective] += moved
            summary.folding[c.step] += moved
            intra, inter = closed.bytes_by_tier(*form, group, n, trace.gpus_per_node, scope)
            summary.by_tier["intra-node"] += intra
            summary.by_tier["inter-node"] += inter


def _last_folded(entries: list) -> dict:
    """{rank: (the seq of its last ledger event among the log `entries` folded, None)}: a ledger's `mark` without the
    buffers live then (its events replayed: `MemoryLedger.fold_timeline`)."""
    last = {}
    for e in entries:
        if type(e) is tuple:
            last[e[8]] = (e[0], None)  # rank, seq (ledger_event's order)
        elif type(e) is LedgerEvent:
            last[e.rank] = (e.seq, None)
    return last


def write_log(trace, entries, events) -> None:
    """Append `entries` (log entries, in order) to the trace's log file, each call's sends (from `events`) below it."""
    from zerosim.cluster._trace import Call

    of_call = {}
    for e in events:
        of_call.setdefault(e.call, []).append(e)
    lines = []
    for entry in entries:
        if type(entry) is tuple:
            entry = ledger_event(*entry)
        elif type(entry) is ComputeFields:
            entry = entry.event()
        lines.append(repr(entry))
        if type(entry) is Call:
            lines += ["  " + repr(e) for e in of_call.get(entry.call, ())]
    trace._log_file.write(lines)
