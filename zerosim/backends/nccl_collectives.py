"""NCCL's own collectives on the CuPy backend (ncclReduceScatter, ncclAllReduce, ncclAllGather, ncclBroadcast).

A mixin of `CupyBackend`: each call runs one NCCL group over every local rank's GPU. They take the
rank API's list (one array per local rank), as MPI's `native_*` do.
NOTE: NCCL picks its own algorithm (ring, tree, NVLS, CollNet) and splits buffers over channels, so
the order of additions can differ from zerosim's ring for N > 2; for N = 2 each element is a single
addition and equals the ring bit for bit. The ring stays the reference.
"""

from __future__ import annotations

from zerosim.backends.nccl_types import NCCL_OPS, _key


class NcclCollectives:
    """The `native_*` collectives of `CupyBackend` (which supplies `_comms`, `_streams`, `_to_device`, ...)."""

    def native_reduce_scatter(self, tensors, op: str = "sum", counts=None, fmt=None) -> list:
        """ncclReduceScatter of one flat (N*s,) array per local rank; rank r gets chunk r, (s,).

        `op`: "sum", "max", "min", "prod", or "avg_premul" (ncclAvg: each input times 1/N rounded to
        the datatype, then summed). The caller pads to a multiple of N, as the ring's staging does.
        `counts` may only be N equal sizes: NCCL has no reduce-scatter-v (MPI's `native_reduce_scatter` does).
        """
        nccl_op = self._nccl_op(op)
        n = self.world_size
        if counts is not None and len(set(int(c) for c in counts)) > 1:
            raise ValueError(f"native_reduce_scatter: NCCL's ReduceScatter needs equal counts, got {list(counts)}; use "
                             "the ring for uneven ones")

        def check(length):
            if length % n:
                raise ValueError(f"native_reduce_scatter: length {length} is not a multiple of N={n}; pad it first")

        def call(comm, send, recv, wire, length, stream):
            comm.reduceScatter(send, recv, wire.nccl_count(length // n), wire.nccl_type, nccl_op, stream)

        return self._native(
            "native_reduce_scatter", tensors, fmt, lambda length: length // n, call, reduce=True, check=check
        )

    def native_all_reduce(self, tensors, op: str = "sum", fmt=None) -> list:
        """ncclAllReduce of one flat (L,) array per local rank; `op` as in `native_reduce_scatter`."""
        nccl_op = self._nccl_op(op)

        def call(comm, send, recv, wire, length, stream):
            comm.allReduce(send, recv, wire.nccl_count(length), wire.nccl_type, nccl_op, stream)

        return self._native("native_all_reduce", tensors, fmt, lambda length: length, call, reduce=True)

    def native_all_gather(self, tensors, fmt=None) -> list:
        """ncclAllGather of one equal-size (s,) shard per local rank; every rank gets (N*s,) in rank order."""

        def call(comm, send, recv, wire, length, stream):
            comm.allGather(send, recv, wire.nccl_count(length), wire.nccl_type, stream)

        return self._native("native_all_gather", tensors, fmt, lambda length: length * self.world_size, call)

    def native_broadcast(self, tensors, root: int, fmt=None) -> list:
        """ncclBroadcast of rank `root`'s flat array; the others' arrays give only length and dtype."""

        def call(comm, send, recv, wire, length, stream):
            comm.broadcast(send, recv, wire.nccl_count(length), wire.nccl_type, int(root), stream)

        return self._native("native_broadcast", tensors, fmt, lambda length: length, call)

    def _native(self, what: str, tensors, fmt, out_length, call, reduce: bool = False, check=None) -> list:
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
        self._nccl.groupStart()  # one process driving several GPUs must group its per-GPU calls
        try:
            for i, comm in enumerate(self._comms):
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
