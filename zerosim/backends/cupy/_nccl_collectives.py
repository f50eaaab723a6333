"""NCCL's own collectives on the CuPy backend (ncclReduceScatter, ncclAllReduce, ncclAllGather, ncclBroadcast).

A mixin of `CupyBackend`: each call runs one NCCL group over every local rank's GPU. They take the
rank API's list (one array per local rank), as MPI's `native_*` do.
NOTE: NCCL picks its own algorithm (ring, tree, NVLS, CollNet) and splits buffers over channels, so
the order of additions can differ from zerosim's ring for N > 2; for N = 2 each element is a single
addition and equals the ring bit for bit. The ring stays the reference.

Groups: with `group=` (a `zerosim.cluster.Groups`) each call runs on one NCCL communicator per group, made of
that group's GPUs in the group's ring order (`group_comms`: `NcclCommunicator.initAll(devices)` when this
process drives every GPU of the group; under mpiexec MPI's `Comm.Split` per group, the ncclUniqueId of
position 0 broadcast within it, then `NcclCommunicator(n, uid, position)`) — the communicators torch's
`new_group` makes with the NCCL backend. NOTE: written against cupy.cuda.nccl's API and never run here (no
GPU was at hand); tests/gpu/test_cupy_groups.py checks it where one is.
"""

from __future__ import annotations

from zerosim.backends.cupy._nccl_types import NCCL_OPS, _key


class NcclCollectives:
    """The `native_*` collectives of `CupyBackend` (which supplies `_comms`, `_streams`, `_to_device`, ...)."""

    def group_comms(self, groups) -> list:
        """One NCCL communicator per local rank: its group's (of `groups`), ranked by position in the ring. Made
        once per `Groups` (every process must ask at the same point: communicator creation is collective)."""
        cache = self.__dict__.setdefault("_group_comm_cache", {})
        comms = cache.get(groups.members)
        if comms is not None:
            return comms
        nccl = self._nccl
        if self._mpi is None:  # this process drives every GPU: ncclCommInitAll over each group's devices
            comms = [None] * len(self.local_ranks)
            for members in groups.members:
                made = nccl.NcclCommunicator.initAll([self.devices[self._index[r]] for r in members])
                for r, comm in zip(members, made):  # initAll's comms[i] is rank i of the group, on devices[i]
                    comms[self._index[r]] = comm
        else:  # one rank per process: split MPI by group, position 0's unique id to its group, then init
            (me,) = self.local_ranks
            sub = self._mpi.Split(groups.index(me), groups.position(me))
            uid = nccl.get_unique_id() if sub.rank == 0 else None
            uid = sub.bcast(uid, root=0)
            with self._cp.cuda.Device(self.devices[0]):
                comms = [nccl.NcclCommunicator(sub.size, uid, sub.rank)]
            sub.Free()
        cache[groups.members] = comms
        return comms

    def _ring_size(self, group) -> int:
        return self.world_size if group is None else group.size

    def native_reduce_scatter(self, tensors, op: str = "sum", counts=None, fmt=None, group=None) -> list:
        """ncclReduceScatter of one flat (N*s,) array per local rank; rank r gets chunk r, (s,).

        `op`: "sum", "max", "min", "prod", or "avg_premul" (ncclAvg: each input times 1/N rounded to
        the datatype, then summed). The caller pads to a multiple of N, as the ring's staging does.
        `counts` may only be N equal sizes: NCCL has no reduce-scatter-v (MPI's `native_reduce_scatter` does).
        Over `group` each group reduces on its own communicator (N reads the group's size).
        """
        nccl_op = self._nccl_op(op)
        n = self._ring_size(group)
        if counts is not None and len(set(int(c) for c in counts)) > 1:
            raise ValueError(f"native_reduce_scatter: NCCL's ReduceScatter needs equal counts, got {list(counts)}; use "
                             "the ring for uneven ones")

        def check(length):
            if length % n:
                raise ValueError(f"native_reduce_scatter: length {length} is not a multiple of N={n}; pad it first")

        def call(comm, send, recv, wire, length, stream):
            comm.reduceScatter(send, recv, wire.nccl_count(length // n), wire.nccl_type, nccl_op, stream)

        return self._native(
            "native_reduce_scatter", tensors, fmt, lambda length: length // n, call, reduce=True, check=check,
            group=group
        )

    def native_all_reduce(self, tensors, op: str = "sum", fmt=None, group=None) -> list:
        """ncclAllReduce of one flat (L,) array per local rank; `op` as in `native_reduce_scatter`."""
        nccl_op = self._nccl_op(op)

        def call(comm, send, recv, wire, length, stream):
            comm.allReduce(send, recv, wire.nccl_count(length), wire.nccl_type, nccl_op, stream)

        return self._native("native_all_reduce", tensors, fmt, lambda length: length, call, reduce=True, group=group)

    def native_all_gather(self, tensors, fmt=None, group=None) -> list:
        """ncclAllGather of one equal-size (s,) shard per local rank; every rank gets (N*s,) in rank order (over
        `group`: its group's shards, in ring order)."""
        n = self._ring_size(group)

        def call(comm, send, recv, wire, length, stream):
            comm.allGather(send, recv, wire.nccl_count(length), wire.nccl_type, stream)

        return self._native("native_all_gather", tensors, fmt, lambda length: length * n, call, group=group)

    def native_broadcast(self, tensors, root: int, fmt=None, group=None) -> list:
        """ncclBroadcast of rank `root`'s flat array (over `group`: of the member at position `root` of each
        group); the others' arrays give only length and dtype."""

        def call(comm, send, recv, wire, length, stream):
            comm.broadcast(send, recv, wire.nccl_count(length), wire.nccl_type, int(root), stream)

        return self._native("native_broadcast", tensors, fmt, lambda length: length, call, group=group)

    def _native(self, what: str, tensors, fmt, out_length, call, reduce: bool = False, check=None,
                group=None) -> list:
        """Run `call` for every local rank inside one NCCL group; outputs of `out_length(L)` elements."""
        if len(tensors) != len(self.local_ranks):
            raise ValueError(
                f"{what}: got {len(tensors)} arrays but this process hosts {len(self.local_ranks)} rank(s)"
            )
        staged = [self._to_device(i, t, fmt) for i, t in enumerate(tensors)]
        meta = self.all_meta([(int(buf.size), _key(wire.host)) for buf, wire in staged])
        if len(set(meta)) != 1:
            raise ValueError(f"{what}: every rank must pass the same length and dtype, got {meta}")
        length, wire = meta[0][0], staged[0][1]
        if reduce and not wire.reducible:
            raise TypeError(f"{what}: NCCL cannot reduce {wire.host} here (it travels as {wire.nccl_name}); use the "
                            "ring")
        if check is not None:
            check(length)  # before the group: a half-issued group would leave the other GPUs waiting
        outs = []
        for i in range(len(staged)):
            with self._on(i):
                outs.append(self._cp.empty(out_length(length), dtype=wire.device))
        comms = self._comms if group is None else self.group_comms(group)
        self._nccl.groupStart()  # one process driving several GPUs must group its per-GPU calls
        try:
            for i, comm in enumerate(comms):
                if length:
                    call(comm, staged[i][0].data.ptr, outs[i].data.ptr, wire, length, self._streams[i].ptr)
        finally:
            self._nccl.groupEnd()
        for s in self._streams:
            s.synchronize()
        if self.arrays == "device":
            return outs
        results = []
        for i, o in enumerate(outs):
            with self._on(i) as stream:
                results.append(o.get(stream=stream).view(wire.host))
        return results

    def _nccl_op(self, op: str) -> int:
        if op not in NCCL_OPS:
            raise ValueError(f"unknown NCCL reduction {op!r}; choose one of {list(NCCL_OPS)}")
        if op == "avg_premul" and not self.has_avg:
            raise RuntimeError(f"ncclAvg needs NCCL >= 2.10.3 (found version code {self.nccl_version}) and a CuPy that "
                               "exposes NCCL_AVG")
        return getattr(self._nccl, NCCL_OPS[op])
