"""A ring phase's hops as one record: what every send of the phase was (or what each rank sent in it), derived on
demand in the ring's order.

Letters: N ranks, n ranks on each ring (a group's size; N for the world's ring).

At ring step k the rank at position p of its ring sends chunk (p - lag - k) mod n to the next rank of its ring:
lag 1 for a reduce-scatter (the partial sum of chunk p-1-k), 0 for an all-gather (shard p-k; collectives/_ring.py).
So a phase's n-1 steps of N sends follow from the chunk sizes, the ring and the lag alone. When every rank lives in
this process the collectives move the data chunk by chunk without a Python step per hop (collectives/_fast.py) and
record the phase as one `RingHops`; the trace turns it into the `Event`s the ring would have appended, one per
send, in the ring's order (step by step, rank by rank), only when someone reads them (`Trace.events`).
The naive twin is the ring itself, which appends each hop as it sends it; tests/test_trace_hops.py checks that the
two give the same events, field for field.

At "call" granularity the trace shows a phase as one summary per rank, what it sent over the n-1 steps: every chunk
but (p - lag + 1) mod n, the one step n-1 would send, all to its ring's next rank. The same record, made `whole`,
stands for those summaries (`sums`): the trace shows them as the `Event`s `Trace.hop` and `Trace.end` make for them
one rank at a time (the ring's own way, and the meta backend's); tests/test_trace_sums.py checks that too. A
point-to-point send is the one step of a ring of two whose sender sends its whole chunk: the sends of the ranks a meta
backend's representative stands for are recorded so (`Trace.hops_alike`: chunk sizes (elements, 0), every sender at
position 0), tests/test_pipeline_representative.py holding them to the events of a run that hosts every rank.
"""

from __future__ import annotations

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class RingHops:
    """Every send of one ring phase of call `call`, in closed form."""

    call: int
    sizes: tuple  # elements of chunk c, c = 0..n-1 (by position on the ring)
    itemsize: int  # bytes per element on the wire
    dtype: str  # the wire format's name
    lag: int  # 1: reduce-scatter, 0: all-gather
    ranks: tuple  # the ranks that send, in the order the ring records them (rank order)
    positions: tuple  # each one's position on its ring
    sends_to: tuple  # each one's next rank on its ring
    whole: bool = False  # recorded at "call" granularity: shown as each rank's summary of the phase (`sums`)

    @property
    def count(self) -> int:
        """How many events it stands for: n - 1 steps of every rank's sends, or one summary a rank (`whole`)."""
        return len(self.ranks) if self.whole else (len(self.sizes) - 1) * len(self.ranks)

    def sums(self) -> list:
        """[(src, dst, elements)]: what each rank sent over the phase, in `ranks`' order: every chunk but
        (p - lag + 1) mod n, all of it to its ring's next rank."""
        n, sizes, lag, total = len(self.sizes), self.sizes, self.lag, sum(self.sizes)
        return [(src, dst, total - sizes[(p - lag + 1) % n]) for src, p, dst in zip(self.ranks, self.positions,
                                                                                     self.sends_to)]

    def most(self) -> int:
        """The most bytes one rank sent over the phase: the largest of `sums`, times the itemsize."""
        n, sizes, lag = len(self.sizes), self.sizes, self.lag
        return (sum(sizes) - min(sizes[(p - lag + 1) % n] for p in set(self.positions))) * self.itemsize

    def hops(self) -> list:
        """[(step k, src, dst, chunk c, elements)] of every send, in the ring's order: step by step, rank by rank."""
        n, sizes, lag = len(self.sizes), self.sizes, self.lag
        return [(k, src, dst, (p - lag - k) % n, sizes[(p - lag - k) % n])
                for k in range(n - 1) for src, p, dst in zip(self.ranks, self.positions, self.sends_to)]
