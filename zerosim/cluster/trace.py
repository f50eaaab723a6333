"""What crossed a link: one event per hop of every collective, recorded as data.

Narration, figures, communication-volume checks and notebooks all read these events. At large
world sizes one event per hop is too many (a ring over 1024 ranks has 1023 steps), so granularity
is a choice: ``"hop"`` records every send, ``"call"`` one summary event per collective and rank.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

GRANULARITIES = ("hop", "call")


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


@dataclass
class Trace:
    """Every hop of every collective (or one summary per call and rank), in order, with byte counts."""

    granularity: str = "hop"
    keep_values: bool = False  # copy every sent chunk into its event (small teaching runs only)
    events: list = field(default_factory=list)  # [Event]
    calls: list = field(default_factory=list)  # [Call]

    def __post_init__(self):
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"unknown trace granularity {self.granularity!r}; choose one of {GRANULARITIES}")
        self._pending = defaultdict(lambda: [0, 0])  # src -> [elements, bytes], for "call" granularity

    # -- recording (used by the collectives) -----------------------------------------------------
    def begin(self, collective: str, op: str, world_size: int, elements: int, dtype: str, tag: str = "") -> int:
        """Open a collective call; returns its number, which `hop` and `end` take."""
        call = Call(len(self.calls), collective, op, world_size, elements, dtype, tag)
        self.calls.append(call)
        return call.call

    def hop(self, call: int, step: int, src: int, dst: int, chunk: int, elements: int, itemsize: int, dtype: str, data=None) -> None:
        """Record one send (at "call" granularity: add it to the sender's summary)."""
        c = self.calls[call]
        if self.granularity == "hop":
            values = data.copy() if (self.keep_values and data is not None) else None
            self.events.append(Event(call, c.collective, step, src, dst, chunk, elements, elements * itemsize, dtype, c.tag, values))
        else:
            acc = self._pending[src]
            acc[0] += elements
            acc[1] += elements * itemsize

    def end(self, call: int) -> None:
        """Close a call (at "call" granularity: write one summary event per sender)."""
        if self.granularity == "call":
            c = self.calls[call]
            for src, (elements, nbytes) in sorted(self._pending.items()):
                self.events.append(Event(call, c.collective, -1, src, -1, -1, elements, nbytes, c.dtype, c.tag))
            self._pending.clear()

    # -- questions -------------------------------------------------------------------------------
    def select(self, collective: str | None = None, call: int | None = None, tag: str | None = None) -> list:
        """The events of one collective kind, one call and/or one tag (None: any)."""
        return [
            e for e in self.events
            if (collective is None or e.collective == collective) and (call is None or e.call == call) and (tag is None or e.tag == tag)
        ]

    def bytes_sent(self, rank: int, collective: str | None = None, call: int | None = None, tag: str | None = None) -> int:
        """Bytes `rank` put on the wire (over all calls, or those selected)."""
        return sum(e.bytes for e in self.select(collective, call, tag) if e.src == rank)

    def bytes_received(self, rank: int, collective: str | None = None, call: int | None = None, tag: str | None = None) -> int:
        """Bytes that arrived at `rank` (needs "hop" granularity: summaries do not say who received)."""
        if self.granularity != "hop":
            raise ValueError('bytes_received needs trace granularity "hop"; "call" summaries record senders only')
        return sum(e.bytes for e in self.select(collective, call, tag) if e.dst == rank)

    def volume_by_collective(self) -> dict:
        """{collective: total bytes sent by all ranks}."""
        out = defaultdict(int)
        for e in self.events:
            out[e.collective] += e.bytes
        return dict(out)

    def clear(self) -> None:
        self.events.clear()
        self.calls.clear()
        self._pending.clear()

    def __len__(self) -> int:
        return len(self.events)
