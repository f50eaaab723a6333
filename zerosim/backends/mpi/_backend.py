"""The MPI backend: one process per rank; a ring step is one send and one receive per process.

    mpiexec -n 4 python train.py          # inside: Cluster(4, backend="mpi")

Letters: N ranks = N processes of MPI_COMM_WORLD; this process hosts exactly one rank, `comm.rank`.

The ring algorithms in `zerosim.collectives` run unchanged on top of `exchange`, so every hop adds in
NCCL's order and rounds to the wire dtype exactly as the numpy simulator does: the results are equal
bit for bit. What travels is bytes, never numbers MPI could convert: fp32/fp64 as MPI_FLOAT/DOUBLE,
and every other format (fp16, bf16, fp8) as a view of unsigned integers of the same width, since MPI
has no bf16 or fp8 type and must not touch the bit patterns.

Groups: the ring over a `zerosim.cluster.Groups` needs nothing new — its point-to-point messages name world
ranks, which MPI_COMM_WORLD reaches — but MPI's own collectives do: `group_comm(groups)` splits the world
communicator into one sub-communicator per group (`Comm.Split(color=group, key=position)`, as torch's
`new_group` makes one process group per group), and `native_reduce_scatter(..., group=)` runs on it.

How a receiver knows what arrives: the message tag names the dtype (an index into `_WIRE_DTYPES`)
and a matched probe (`Mprobe`) gives the element count, so `exchange` needs nothing beyond the
protocol. A caller that already knows (count, dtype), as the ring does, may pass `recv_like` and skip
the probe: then each step is one `Sendrecv` into a preallocated buffer.

`native=True` also offers MPI's own reductions (`native_reduce_scatter`, `native_all_reduce`) for
fp32/fp64. NOTE: MPI picks its own algorithm (recursive halving, pairwise exchange, ...), so it may
add in another order than NCCL's ring and differ in the last bits; it is an option for speed, never
the reference.

Failure: a rank that raises while the others wait in a receive would leave them hanging forever;
_failure.py ends the whole job instead (`run_guarded`, or `abort_on_error=True` for an excepthook).
"""

from __future__ import annotations

import os
import time

import ml_dtypes
import numpy as np

from zerosim.backends._base import HostArrays
from zerosim.backends.mpi._failure import SilentRank, install_abort_hook
from zerosim.backends.mpi._launch import import_mpi

# Every dtype a rank may send, by tag: the tag of a message is its dtype's index here.
_WIRE_DTYPES = tuple(
    np.dtype(d)
    for d in (
        np.float64, np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
        np.int64, np.int32, np.int16, np.int8, np.uint64, np.uint32, np.uint16, np.uint8, np.bool_,
    )
)
_TAG_OF = {d: i for i, d in enumerate(_WIRE_DTYPES)}
_META_TAG = 1000  # all_meta's messages, on their own communicator
_PING_TAG, _PONG_TAG = 1001, 1002  # the watchdog's "whom are you waiting on?" and its answer, on the same one
PING_PATIENCE = 2.0  # seconds a pinged rank has to answer before it is named as the silent one
DEFAULT_TIMEOUT = 60.0  # seconds the watchdog waits for a silent peer
# Below this the watchdog would name healthy ranks: a peer that is only slow (a loaded machine, a long local step)
# answers later than that (1e-9 s named a healthy rank). inf waits forever.
MIN_TIMEOUT = 1.0


def watchdog_timeout(timeout: float | None = None) -> float:
    """The watchdog's patience in seconds: `timeout`, else $ZEROSIM_MPI_TIMEOUT, else DEFAULT_TIMEOUT; a clear error
    naming where a bad value came from."""
    where = "MpiBackend(timeout=...)"
    if timeout is None:
        text = os.environ.get("ZEROSIM_MPI_TIMEOUT")
        if text is None:
            return DEFAULT_TIMEOUT
        where = f"ZEROSIM_MPI_TIMEOUT={text!r}"
        try:
            timeout = float(text)
        except ValueError:
            raise ValueError(f"{where}: the MPI watchdog's timeout must be a number of seconds >= {MIN_TIMEOUT:g} "
                             "(or inf), e.g. ZEROSIM_MPI_TIMEOUT=120") from None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= MIN_TIMEOUT:
        raise ValueError(f"{where}: the MPI watchdog's timeout must be a number of seconds >= {MIN_TIMEOUT:g} "
                         "(or inf), "
                         f"got {timeout!r}: a shorter wait names ranks that are only slow as silent")
    return float(timeout)


_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # MPI reduces these as IEEE numbers


def _transport(MPI, dtype: np.dtype):
    """(numpy view dtype, MPI datatype) a dtype travels as: fp32/fp64 as themselves, all else as uint bits."""
    if dtype == np.float32:
        return dtype, MPI.FLOAT
    if dtype == np.float64:
        return dtype, MPI.DOUBLE
    uint = np.dtype(f"uint{8 * dtype.itemsize}")
    return uint, {1: MPI.UINT8_T, 2: MPI.UINT16_T, 4: MPI.UINT32_T, 8: MPI.UINT64_T}[dtype.itemsize]


def _tag(dtype) -> int:
    try:
        return _TAG_OF[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"the mpi backend cannot send dtype {np.dtype(dtype)}; it sends "
                        f"{[str(d) for d in _WIRE_DTYPES]}") from None


class MpiBackend(HostArrays):
    """One rank per process over MPI_COMM_WORLD (or `comm`), implementing `zerosim.backends._base.Backend`.

    Args:
        world_size: N; must equal the number of processes mpiexec started.
        native: allow `native_reduce_scatter` / `native_all_reduce` (MPI's own reductions, fp32/fp64 only).
        abort_on_error: install a `sys.excepthook` that ends the whole job when this rank raises
            (off by default: a library should not change the interpreter's global hooks unasked).
        timeout: the watchdog's patience, in seconds: a peer that sends nothing for this long is named
            in a `SilentRank` error (default: $ZEROSIM_MPI_TIMEOUT, else 60).
        comm: the communicator to run on (default MPI_COMM_WORLD); it is duplicated, so zerosim's
            messages never mix with the program's own.
    """

    name = "mpi"

    def __init__(
        self,
        world_size: int,
        native: bool = False,
        abort_on_error: bool = False,
        comm=None,
        timeout: float | None = None,
    ):
        watchdog_timeout(timeout)  # checked first, before MPI starts
        for name, value in (("native", native), ("abort_on_error", abort_on_error)):
            if not isinstance(value, bool):  # bool("no") is True: refuse a string rather than read it as yes
                raise ValueError(f"{name} must be True or False, got {value!r}")
        MPI = import_mpi()
        comm = MPI.COMM_WORLD if comm is None else comm
        if comm.size != world_size:
            started = f"{comm.size} process" + ("es" if comm.size != 1 else "")
            raise ValueError(
                f"Cluster({world_size}, backend='mpi') but mpiexec started {started}; "
                f"launch with `mpiexec -n {world_size} ...` (one process per rank)"
            )
        self._MPI = MPI
        self.timeout = watchdog_timeout(timeout)
        self.comm = comm.Dup()
        self._meta = comm.Dup()  # all_meta's and the watchdog's own channel: never matched by a ring step's receive
        self._waiting_on, self._pongs = None, []  # whom this rank waits on now (for pings), answers in flight
        self.world_size = world_size
        self.rank = comm.rank
        self.local_ranks = [comm.rank]
        self.native = native
        self._recv_bufs = [np.empty(0, dtype=np.uint8), np.empty(0, dtype=np.uint8)]  # used in turn
        self._group_comms = {}  # Groups' members -> this rank's sub-communicator (group_comm)
        self._turn = 0
        if native:  # the collectives then hand their reduce-scatter to MPI (see reduce_scatter_phase)
            self.reduce_scatter_phase = self._native_reduce_scatter_phase
        if abort_on_error and comm.size > 1:
            install_abort_hook(comm)

    def __repr__(self) -> str:
        return f"MpiBackend(rank {self.rank} of {self.world_size}, native={self.native})"

    # -- the protocol -----------------------------------------------------------------------------
    def empty(self, shape, dtype) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def to_numpy(self, array) -> np.ndarray:
        return np.asarray(array)

    def all_meta(self, items) -> list:
        """Every rank's item, in rank order: rank 0 collects them (naming any rank that stays silent past
        the watchdog's timeout) and sends the list back to everyone."""
        (item,) = self._one("all_meta", items)
        if self.world_size == 1:
            return [item]
        if self.rank == 0:
            everyone = [item] + [self._recv_object(r) for r in range(1, self.world_size)]
            for r in range(1, self.world_size):
                self._wait([self._meta.isend(everyone, dest=r, tag=_META_TAG)], r, "all_meta")
            return everyone
        self._wait([self._meta.isend(item, dest=0, tag=_META_TAG)], 0, "all_meta")
        return self._recv_object(0)

    # -- the watchdog: a peer that stops answering is named, not waited for forever -----------------
    def _wait(self, requests: list, peer: int, what: str, statuses=None) -> None:
        """Complete `requests` (a message to or from `peer`) under the watchdog."""
        MPI = self._MPI
        self._poll(lambda: True if MPI.Request.Testall(requests, statuses) else None, peer, what)

    def _probe(self, source: int, what: str, status=None):
        """A matched probe for the next message from `source`, under the watchdog: a buffer message on the
        ring's channel (with `status`), or else a pickled object on all_meta's."""
        if status is None:
            # its recv() unpickles
            return self._poll(lambda: self._meta.improbe(source=source, tag=_META_TAG), source, what)
        return self._poll(lambda: self.comm.Improbe(source=source, tag=self._MPI.ANY_TAG, status=status), source, what)

    def _poll(self, ready, peer: int, what: str):
        """Call `ready()` until it gives something other than None; meanwhile answer other ranks' pings.

        After `timeout` seconds, find who is really silent — `peer` may itself be waiting on another
        rank — and raise `SilentRank` naming it. NOTE: the sleep between polls grows to 1 ms, so a
        waiting rank does not spin a core as MPI's own blocking waits do.
        """
        deadline, pause = time.monotonic() + self.timeout, 0.0
        self._waiting_on = peer
        try:
            while (value := ready()) is None:
                self._answer_pings()
                if time.monotonic() > deadline:
                    silent, chain = self._find_silent(peer)
                    via = (
                        ""
                        if chain == [silent]
                        else f" (rank {self.rank} waits on "
                        + ", which waits on ".join(f"rank {r}" for r in chain)
                        + ")"
                    )
                    raise SilentRank(f"rank {silent} has not answered for {self.timeout:g} s ({what}){via}: it has "
                                     "stopped, hung "
                                     "or died; raise the watchdog's timeout with MpiBackend(timeout=...) or "
                                     "ZEROSIM_MPI_TIMEOUT")
                time.sleep(pause)
                pause = min(1e-3, 2 * pause + 1e-6)
            return value
        finally:
            self._waiting_on = None

    def _answer_pings(self) -> None:
        """Tell every rank that pinged us whom we are waiting on (None: no one)."""
        status = self._MPI.Status()
        while self._meta.Iprobe(source=self._MPI.ANY_SOURCE, tag=_PING_TAG, status=status):
            asker = status.Get_source()
            self._meta.recv(source=asker, tag=_PING_TAG)
            self._pongs = [r for r in self._pongs if not r.Test()] + [
                self._meta.isend(self._waiting_on, dest=asker, tag=_PONG_TAG)
            ]

    def _find_silent(self, peer: int) -> tuple:
        """Follow the chain of waits from `peer`: the first rank that does not answer a ping within
        PING_PATIENCE seconds (or that waits on no one, or closes a cycle) is the silent one."""
        chain = [peer]
        while True:
            rank = chain[-1]
            self._pongs.append(self._meta.isend(None, dest=rank, tag=_PING_TAG))
            deadline, answer = time.monotonic() + PING_PATIENCE, None
            while (message := self._meta.improbe(source=rank, tag=_PONG_TAG)) is None and time.monotonic() < deadline:
                self._answer_pings()
                time.sleep(1e-3)
            if message is None:
                return rank, chain  # it cannot even answer a ping: stopped, hung, or busy for longer than we wait
            answer = message.recv()
            if answer is None or answer in chain or answer == self.rank:
                return rank, chain  # alive and waiting on no one (still computing?), or a cycle of waits
            chain.append(answer)

    def _recv_object(self, source: int):
        return self._probe(source, "all_meta").recv()

    def exchange(self, sends, send_to, recv_from, recv_like=None) -> list:
        """Send `sends[0]` to rank `send_to[0]` and receive from `recv_from[0]` (either may be None).

        Returns [received] (a flat read-only array, valid until the next exchange but one) or [None].
        `recv_like=[(count, dtype)]` says what will arrive, which saves a probe.
        """
        (send,), (dst,), (src,) = (
            self._one("exchange", sends),
            self._one("exchange", send_to),
            self._one("exchange", recv_from),
        )
        like = None if recv_like is None else self._one("exchange", recv_like)[0]
        MPI = self._MPI
        if (send is None) != (dst is None):
            raise ValueError(f"exchange: rank {self.rank} has {'no array' if send is None else 'an array'} to send but "
                             f"send_to={dst}")
        if send is not None:
            send = np.ascontiguousarray(send).reshape(-1)
            view, mpi_type = _transport(MPI, send.dtype)
            outgoing, send_tag = [send.view(view), mpi_type], _tag(send.dtype)
        else:
            outgoing, dst, send_tag = None, MPI.PROC_NULL, 0
        request = self.comm.Isend(outgoing, dest=dst, tag=send_tag) if outgoing is not None else None
        if src is None:
            if request is not None:
                self._wait([request], dst, "exchange")
            return [None]
        status = MPI.Status()
        if like is not None:  # the caller knows what comes: receive straight into a buffer, no probe
            count, dtype = int(like[0]), np.dtype(like[1])
            view, mpi_type = _transport(MPI, dtype)
            incoming = self._recv_buffer(count * dtype.itemsize).view(view)
            self._wait([self.comm.Irecv([incoming, mpi_type], source=src, tag=MPI.ANY_TAG)], src, "exchange", [status])
            if request is not None:
                self._wait([request], dst, "exchange")
            got_dtype, got_count = _WIRE_DTYPES[status.Get_tag()], status.Get_count(mpi_type)
            if (got_dtype, got_count) != (dtype, count):
                raise RuntimeError(
                    f"rank {self.rank} expected {count} {dtype} elements from rank {src} but got {got_count} "
                    f"{got_dtype}"
                )
        else:  # ask the message itself: the tag names the dtype, the probe counts elements
            message = self._probe(src, "exchange", status)
            dtype = _WIRE_DTYPES[status.Get_tag()]
            view, mpi_type = _transport(MPI, dtype)
            incoming = self._recv_buffer(status.Get_count(MPI.BYTE)).view(view)
            message.Recv([incoming, mpi_type])
            if request is not None:
                self._wait([request], dst, "exchange")
        received = incoming.view(dtype)
        received.flags.writeable = False
        return [received]

    def _one(self, what: str, items) -> list:
        items = list(items)
        if len(items) != 1:
            raise ValueError(f"{what}: the mpi backend hosts one rank per process, so it takes a list of 1, got "
                             f"{len(items)}")
        return items

    def _recv_buffer(self, nbytes: int) -> np.ndarray:
        """Bytes to receive into; two buffers used in turn, so the previous step's array may be sent on.

        NOTE: transport memory, like NCCL's own FIFOs: not a rank buffer, so not in the ledger.
        """
        self._turn ^= 1
        buf = self._recv_bufs[self._turn]
        if buf.nbytes < nbytes:
            buf = self._recv_bufs[self._turn] = np.empty(max(nbytes, 2 * buf.nbytes), dtype=np.uint8)
        return buf[:nbytes]

    # -- groups ------------------------------------------------------------------------------------
    def group_comm(self, groups):
        """This rank's communicator for its group of `groups` (a `zerosim.cluster.Groups`): MPI_COMM_WORLD split by
        group, ranked by position in the group's ring (`Comm.Split(color, key)`); made once per `Groups`, on every
        rank at the same call (Split is collective)."""
        key = groups.members
        comm = self._group_comms.get(key)
        if comm is None:
            comm = self._group_comms[key] = self.comm.Split(groups.index(self.rank), groups.position(self.rank))
        return comm

    # -- MPI's own collectives (native=True) ------------------------------------------------------
    def native_reduce_scatter(self, tensors, op: str = "sum", counts=None, group=None) -> list:
        """MPI_Reduce_scatter(_block) of this rank's flat (L,) array, given as the rank API's list of one:
        returns [chunk `rank`], (counts[rank],). The CuPy backend's `native_reduce_scatter` has this signature too.

        Without `counts` L must be a multiple of N (the ring's padded buffer). `op` is "sum" or "max".
        Over `group` (a `Groups`) it runs on this rank's group's sub-communicator (`group_comm`): N reads the
        group's size and `rank` the position in it.
        NOTE: MPI chooses the order of additions, which may differ from NCCL's ring in the last bits.
        """
        (array,) = self._one("native_reduce_scatter", tensors)
        array, mpi_type, mpi_op = self._native_args("native_reduce_scatter", array, op)
        comm = self.comm if group is None else self.group_comm(group)
        n, length, me = comm.size, array.shape[0], comm.rank
        if counts is None:
            if length % n:
                raise ValueError(f"native_reduce_scatter: length {length} is not a multiple of N={n}; pad it or pass "
                                 "counts")
            counts = [length // n] * n
        counts = [int(c) for c in counts]
        if len(counts) != n or sum(counts) != length or min(counts) < 0:
            raise ValueError(f"native_reduce_scatter: counts {counts} must be {n} non-negative sizes adding up to "
                             f"{length}")
        out = np.empty(counts[me], dtype=array.dtype)  # (counts[p],) this rank's chunk
        if len(set(counts)) == 1:
            comm.Reduce_scatter_block([array, mpi_type], [out, mpi_type], op=mpi_op)
        else:
            comm.Reduce_scatter([array, mpi_type], [out, mpi_type], counts, op=mpi_op)
        return [out]

    def _native_reduce_scatter_phase(self, cluster, staged, op, wire, bounds, call, out=None, group=None) -> tuple:
        """The collectives' reduce-scatter data movement done by MPI's own Reduce_scatter (native=True).

        NOTE: MPI picks the order of additions, not NCCL's ring, so results may differ in the last bits.
        The trace records what a ring would send (step -1): MPI does not say what it sent.
        """
        counts = [stop - start for (start, stop) in bounds]
        for rank in cluster.ranks:
            p = rank.index if group is None else group.position(rank.index)
            cluster.trace.hop(call, -1, rank.index, -1, -1, sum(counts) - counts[p], wire.itemsize, wire.name)
        name = "max" if op.combine is np.maximum else "sum"  # the averaging variants scale before or after
        return self.native_reduce_scatter(staged, op=name, counts=counts, group=group), []

    def native_all_reduce(self, tensors, op: str = "sum") -> list:
        """MPI_Allreduce of this rank's array (any shape), as a list of one. Same NOTE as `native_reduce_scatter`."""
        (array,) = self._one("native_all_reduce", tensors)
        flat, mpi_type, mpi_op = self._native_args("native_all_reduce", array, op)
        out = np.empty_like(flat)
        self.comm.Allreduce([flat, mpi_type], [out, mpi_type], op=mpi_op)
        return [out.reshape(np.shape(array))]

    def _native_args(self, what: str, array, op: str):
        if not self.native:
            raise RuntimeError(f"{what}: MPI's own collectives are off; ask for them: Cluster(..., backend='mpi', "
                               "native=True)")
        array = np.ascontiguousarray(array).reshape(-1)
        if array.dtype not in _NATIVE_DTYPES:
            raise TypeError(
                f"{what}: MPI's own reductions support fp32 and fp64 only, not {array.dtype}: MPI has no bf16 or fp8 "
                "type, "
                "and a reduction on a 16-bit view would add bit patterns, not numbers; use the ring (native=False) for "
                "16-bit formats"
            )
        ops = {"sum": self._MPI.SUM, "max": self._MPI.MAX}
        if op not in ops:
            raise ValueError(f"{what}: op must be one of {list(ops)}, got {op!r} (the averaging variants scale before "
                             "or after)")
        return array, _transport(self._MPI, array.dtype)[1], ops[op]
