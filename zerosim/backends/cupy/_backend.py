"""The CuPy + NCCL backend: ranks on GPUs, every ring message a grouped ncclSend/ncclRecv.

    Cluster(4, backend="cupy")             # one process drives GPUs 0..3 (NcclCommunicator.initAll)
    mpiexec -n 4 python train.py           # inside: Cluster(4, backend="cupy"), one GPU per process

Letters: N ranks; this process hosts L of them (L = N when one process drives N GPUs, L = 1 under
mpiexec); local rank i runs on GPU `devices[i]` with its own CUDA stream `streams[i]`.

Where a rank's arrays live (`arrays=`):

- ``"host"`` (default): `empty` gives numpy arrays, the ring in `zerosim.collectives` adds with numpy
  exactly as in the simulator, and `exchange` carries every message GPU to GPU: copy to the sender's
  device, ncclSend/ncclRecv, copy back. NOTE: this is the mode `Cluster` can use today, because the
  ring allocates its outputs with `np.empty` and adds with numpy ufuncs, which cannot mix with CuPy
  arrays. Results equal the simulator bit for bit by construction; what the GPU run proves is that
  NCCL moves every bit pattern (fp16, bf16, fp8, uneven chunks) faithfully and in NCCL's ring order.
- ``"device"``: `empty` gives CuPy arrays on the rank's GPU; `exchange` and the `native_*`
  collectives take and return CuPy arrays without touching the host. For device-side code and for
  NCCL's own collectives; the ring module cannot run on these until it takes its array namespace
  (numpy or cupy) from the backend.

How each format travels (bf16 as uint16 on the device, fp8 as bytes): _nccl_types.py. NCCL's own
collectives: _nccl_collectives.py. Whether CuPy and NCCL are here at all: _probe.py.

Nothing here imports cupy or mpi4py until a backend is created: `import zerosim` never loads them.
See docs/nccl_mapping.md for every NCCL call this file makes, with its arguments.
"""

from __future__ import annotations

from contextlib import contextmanager

import ml_dtypes
import numpy as np

from zerosim.backends._base import HostArrays
from zerosim.backends.cupy._nccl_collectives import NcclCollectives
from zerosim.backends.cupy._nccl_types import NCCL_2_10_3, Wire, _key, wire_for
from zerosim.backends.cupy._probe import BackendUnavailable, import_cupy
from zerosim.backends.mpi import launched_by_mpiexec
from zerosim.precision.cast import NUMPY, device_namespace

_HEADER_TAG = 4242  # mpi4py tag of the (dtype, count) note that precedes each message under mpiexec


class CupyBackend(HostArrays, NcclCollectives):
    """Ranks on NVIDIA GPUs with NCCL point-to-point messages; implements `zerosim.backends._base.Backend`.

    Args:
        world_size: N.
        devices: GPU ids. One process: one per rank (default 0..N-1). Under mpiexec: indexed by the
            process's rank on its node (default: that rank itself).
        launch: ``"single"`` (this process drives all N GPUs), ``"mpi"`` (one process per GPU, started
            by mpiexec) or ``"auto"`` (``"mpi"`` when mpiexec's environment variables are set).
        arrays: ``"host"`` (numpy arrays, messages through the GPUs; what `Cluster` needs) or
            ``"device"`` (CuPy arrays on each rank's GPU). See the module docstring.
        comm: under mpiexec, the mpi4py communicator to use (default COMM_WORLD; it is duplicated).
    """

    name = "cupy"

    def __init__(self, world_size: int, devices=None, launch: str = "auto", arrays: str = "host", comm=None):
        if launch not in ("auto", "single", "mpi"):
            raise ValueError(f"launch must be 'auto', 'single' or 'mpi', got {launch!r}")
        if arrays not in ("host", "device"):
            raise ValueError(f"arrays must be 'host' or 'device', got {arrays!r}")
        cp, nccl, count = import_cupy()
        self._cp, self._nccl = cp, nccl
        self.world_size, self.arrays = world_size, arrays
        # where the ring's arithmetic runs: numpy on the host, or CuPy (bf16 as uint16) on the device
        self.xp = NUMPY if arrays == "host" else device_namespace(cp, "cupy")
        self.launch = launch if launch != "auto" else ("mpi" if launched_by_mpiexec() else "single")
        self.nccl_version = int(nccl.get_version())  # 0 for NCCL older than 2.3.4
        # else bf16 travels as bytes
        self.has_bf16 = hasattr(nccl, "NCCL_BFLOAT16") and self.nccl_version >= NCCL_2_10_3
        self.has_avg = hasattr(nccl, "NCCL_AVG") and self.nccl_version >= NCCL_2_10_3
        self._mpi = None
        if self.launch == "single":
            self.devices = list(range(world_size)) if devices is None else [int(d) for d in devices]
            _check_devices(self.devices, world_size, count)
            self.local_ranks = list(range(world_size))
            # ncclCommInitAll: comms[r] is rank r of one N-rank communicator, on GPU devices[r]
            self._comms = nccl.NcclCommunicator.initAll(list(self.devices))
        else:
            self._init_mpi(world_size, devices, count, comm)
        self._index = {r: i for i, r in enumerate(self.local_ranks)}
        self._streams = []
        for d in self.devices:  # NCCL work is queued on these streams, never on the null stream
            with cp.cuda.Device(d):
                self._streams.append(cp.cuda.Stream(non_blocking=True))

    def _init_mpi(self, world_size, devices, count, comm) -> None:
        try:
            from mpi4py import MPI
        except (ImportError, RuntimeError, OSError) as e:
            raise BackendUnavailable(
                f"launch='mpi' needs mpi4py: pip install -e '.[mpi]' ({type(e).__name__}: {e})"
            ) from e
        world = MPI.COMM_WORLD if comm is None else comm
        if world.size != world_size:
            raise ValueError(f"Cluster({world_size}, backend='cupy') under mpiexec needs {world_size} processes, but "
                             f"mpiexec started {world.size}")
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        node_rank = node.rank  # this process's index on its node: it picks the GPU
        node.Free()
        device = node_rank if devices is None else int(list(devices)[node_rank])
        if not 0 <= device < count:
            raise ValueError(
                f"rank {world.rank} is process {node_rank} on its node and wants GPU {device}, but CuPy sees {count} "
                "GPU(s); "
                f"start at most {count} processes per node, or pass devices=[...]"
            )
        self._mpi = world.Dup()  # zerosim's notes never mix with the program's own messages
        self.local_ranks, self.devices = [world.rank], [device]
        uid = self._nccl.get_unique_id() if world.rank == 0 else None
        uid = self._mpi.bcast(uid, root=0)  # rank 0's ncclUniqueId, to every process
        with self._cp.cuda.Device(device):  # ncclCommInitRank binds the communicator to the current device
            self._comms = [self._nccl.NcclCommunicator(world_size, uid, world.rank)]

    def __repr__(self) -> str:
        return (f"CupyBackend(world_size={self.world_size}, launch={self.launch!r}, arrays={self.arrays!r}, "
                f"devices={self.devices}, nccl={self.nccl_version})")

    def close(self) -> None:
        """Destroy the NCCL communicators (also done when they are garbage collected)."""
        for c in self._comms:
            c.destroy()

    # -- the protocol -----------------------------------------------------------------------------
    def empty(self, shape, dtype):
        """Storage for one rank: numpy (arrays="host"), or CuPy on this process's GPU (bf16 as uint16)."""
        if self.arrays == "host":
            return np.empty(shape, dtype=dtype)
        if len(self.local_ranks) == 1:
            return self.allocator(self.local_ranks[0])(shape, dtype)
        # NOTE: the protocol's `empty` does not say which rank asks; with several local GPUs this
        # allocates on the current device. `allocator(rank)` gives a per-rank allocator.
        return self._cp.empty(shape, dtype=self.wire(dtype).device)

    def allocator(self, rank: int):
        """`empty` for one local rank: allocates on that rank's GPU (arrays="device") or on the host."""
        i = self._index[rank]

        def empty(shape, dtype):
            if self.arrays == "host":
                return np.empty(shape, dtype=dtype)
            with self._on(i):
                return self._cp.empty(shape, dtype=self.wire(dtype).device)

        return empty

    def to_numpy(self, array, dtype=None) -> np.ndarray:
        """A host copy. Device bf16 comes back as uint16 bits: pass dtype=ml_dtypes.bfloat16 to view them."""
        host = array.get() if isinstance(array, self._cp.ndarray) else np.asarray(array)
        return host if dtype is None else host.view(dtype)

    def all_meta(self, items) -> list:
        if self._mpi is None:
            return list(items)
        (item,) = self._one("all_meta", items)
        return self._mpi.allgather(item)

    def exchange(self, sends, send_to, recv_from, recv_like=None) -> list:
        """One ring step for every local rank: grouped ncclSend/ncclRecv, each on its device's stream.

        `sends[i]` goes to rank `send_to[i]`; local rank i receives from `recv_from[i]` (None: no
        message). Under mpiexec each message is preceded by a small (dtype, count) note over MPI,
        since NCCL has no probe; `recv_like=[(count, dtype), ...]` says what will arrive and skips it.
        Returns read-only numpy arrays (arrays="host") or CuPy arrays (arrays="device").
        """
        n = len(self.local_ranks)
        for what, xs in (("sends", sends), ("send_to", send_to), ("recv_from", recv_from)):
            if len(xs) != n:
                raise ValueError(f"exchange: {what} has {len(xs)} entries but this process hosts {n} rank(s)")
        out = [
            None if a is None or dst is None else self._to_device(i, a)
            for i, (a, dst) in enumerate(zip(sends, send_to))
        ]
        incoming = self._incoming(out, send_to, recv_from, recv_like)  # [(dtype key, count) or None]
        inbox = []
        for i, note in enumerate(incoming):
            if note is None:
                inbox.append(None)
                continue
            with self._on(i):
                inbox.append(self._cp.empty(note[1], dtype=self.wire(note[0]).device))
        self._nccl.groupStart()  # one group: no rank's send waits for a receive posted later
        try:
            for i, comm in enumerate(self._comms):
                stream = self._streams[i].ptr
                if out[i] is not None and out[i][0].size:
                    buf, wire = out[i]
                    comm.send(buf.data.ptr, wire.nccl_count(buf.size), wire.nccl_type, send_to[i], stream)
                if inbox[i] is not None and inbox[i].size:
                    wire = self.wire(incoming[i][0])
                    comm.recv(inbox[i].data.ptr, wire.nccl_count(inbox[i].size), wire.nccl_type, recv_from[i], stream)
        finally:
            self._nccl.groupEnd()
        for s in self._streams:  # sends must finish before their buffers go; receives before anyone reads
            s.synchronize()
        if self.arrays == "device":
            return inbox
        received = []
        for i, buf in enumerate(inbox):
            if buf is None:
                received.append(None)
                continue
            with self._on(i) as stream:
                host = buf.get(stream=stream).view(self.wire(incoming[i][0]).host)  # uint16 bits -> bfloat16, etc.
            host.flags.writeable = False
            received.append(host)
        return received

    # -- helpers ----------------------------------------------------------------------------------
    def wire(self, dtype_or_key) -> Wire:
        """How a dtype (or a format, or a format name such as "bf16") travels through NCCL."""
        return wire_for(self._nccl, dtype_or_key, self.has_bf16)

    def _logical(self, array, fmt=None) -> np.dtype:
        """The dtype an array stands for: `fmt` if given; uint16 on the device means bf16 (see top)."""
        if fmt is not None:
            return self.wire(fmt).host
        if isinstance(array, self._cp.ndarray) and array.dtype == np.uint16:
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(array.dtype)

    def _to_device(self, i: int, array, fmt=None):
        """(1-D CuPy array on local rank i's GPU in the storage dtype, its Wire); host data is copied over."""
        wire = self.wire(self._logical(array, fmt))
        if isinstance(array, self._cp.ndarray):
            if array.device.id != self.devices[i]:
                raise ValueError(f"rank {self.local_ranks[i]} runs on GPU {self.devices[i]} but passed an array on GPU "
                                 f"{array.device.id}")
            with self._cp.cuda.Device(self.devices[i]):
                written = self._cp.cuda.get_current_stream().record()  # the caller's stream: kernels that wrote it
            with self._on(i) as stream:
                stream.wait_event(written)
                return self._cp.ascontiguousarray(array.reshape(-1).view(wire.device)), wire
        host = np.ascontiguousarray(array).reshape(-1).view(wire.device)
        with self._on(i):
            return self._cp.asarray(host), wire

    def _incoming(self, out, send_to, recv_from, recv_like) -> list:
        """What each local rank receives, as (dtype key, count) or None; checks every receive has a sender."""
        if recv_like is not None:
            return [None if src is None else (_key(like[1]), int(like[0])) for src, like in zip(recv_from, recv_like)]
        if self._mpi is not None:  # the sender may be another process: it tells us first
            (msg,), (dst,), (src,) = out, send_to, recv_from
            request = None
            if msg is not None:
                request = self._mpi.isend((_key(msg[1].host), int(msg[0].size)), dest=dst, tag=_HEADER_TAG)
            note = self._mpi.recv(source=src, tag=_HEADER_TAG) if src is not None else None
            if request is not None:
                request.wait()
            return [note]
        notes = []
        for j, src in enumerate(recv_from):
            if src is None:
                notes.append(None)
                continue
            i = self._index.get(src)
            if i is None or out[i] is None or send_to[i] != self.local_ranks[j]:
                raise RuntimeError(
                    f"rank {self.local_ranks[j]} waits for a message from rank {src} that was never sent"
                )
            notes.append((_key(out[i][1].host), int(out[i][0].size)))
        return notes

    @contextmanager
    def _on(self, i: int):
        """Local rank i's GPU as the current device and its stream as the current stream."""
        with self._cp.cuda.Device(self.devices[i]), self._streams[i]:
            yield self._streams[i]

    def _one(self, what: str, items) -> list:
        items = list(items)
        if len(items) != 1:
            raise ValueError(f"{what}: under mpiexec the cupy backend hosts one rank per process, so it takes a list "
                             f"of 1, got {len(items)}")
        return items


def _check_devices(devices: list, world_size: int, count: int) -> None:
    """One process, one GPU per rank: NCCL refuses two ranks of one communicator on the same GPU."""
    if len(devices) != world_size:
        raise ValueError(f"devices={devices} names {len(devices)} GPU(s) for {world_size} ranks; give one per rank")
    if world_size > count:
        raise ValueError(
            f"Cluster({world_size}, backend='cupy') drives one GPU per rank from this process, but CuPy sees {count} "
            "GPU(s); "
            f"use at most {count} ranks, or launch one process per GPU with mpiexec"
        )
    if len(set(devices)) != len(devices) or not all(0 <= d < count for d in devices):
        raise ValueError(f"devices={devices} must be distinct GPU ids in 0..{count - 1} (NCCL puts at most one rank of "
                         "a communicator on a GPU)")
