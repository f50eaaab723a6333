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

bf16: CuPy has no bfloat16 dtype, so a bf16 buffer lives on the device as uint16 (the same two bytes)
and NCCL is told NCCL_BFLOAT16, so that its own reductions add numbers, not bit patterns. fp8 travels
as bytes (NCCL_UINT8): NCCL's fp8 types are not exposed by CuPy, so NCCL never reduces fp8 here.

Nothing here imports cupy or mpi4py until a backend is created: `import zerosim` never loads them.
See docs/nccl_mapping.md for every NCCL call this file makes, with its arguments.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from zerosim.backends.base import HostArrays

from zerosim.precision import FORMATS, Format

INSTALL_HINT = "the cupy backend needs CuPy (pip install -e '.[gpu]') and an NVIDIA GPU with CUDA"
NCCL_HINT = (
    "CuPy could not load NCCL (cupy.cuda.nccl.available is False); install it with "
    "`python -m cupyx.tools.install_library --cuda 12.x --library nccl`, or put libnccl.so.2 on LD_LIBRARY_PATH"
)
MPI_LAUNCH_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")  # set by Open MPI's and MPICH/Hydra's mpiexec
NCCL_2_10_3 = 21003  # ncclAvg and ncclBfloat16 arrived in NCCL 2.10.3 (version code 2*10000 + 10*100 + 3)
_NCCL_BYTES = {"NCCL_FLOAT64": 8, "NCCL_FLOAT32": 4, "NCCL_FLOAT16": 2, "NCCL_BFLOAT16": 2, "NCCL_UINT8": 1}
_NCCL_TYPE_OF = {"fp64": "NCCL_FLOAT64", "fp32": "NCCL_FLOAT32", "fp16": "NCCL_FLOAT16", "bf16": "NCCL_BFLOAT16"}
_NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN", "avg_premul": "NCCL_AVG"}
_HEADER_TAG = 4242  # mpi4py tag of the (dtype, count) note that precedes each message under mpiexec


class BackendUnavailable(RuntimeError):
    """The cupy backend cannot start here; the message says what is missing and how to get it."""


def import_cupy():
    """Return (cupy, cupy.cuda.nccl, device_count), or raise `BackendUnavailable` naming what is missing."""
    try:
        import cupy
    except ModuleNotFoundError as e:
        if e.name != "cupy":
            raise BackendUnavailable(f"{INSTALL_HINT}; CuPy is installed but failed to import: {e}") from e
        raise BackendUnavailable(f"{INSTALL_HINT}; CuPy is not installed") from e
    except Exception as e:  # e.g. a CuPy wheel whose CUDA libraries cannot be loaded
        raise BackendUnavailable(f"{INSTALL_HINT}; CuPy is installed but failed to import: {type(e).__name__}: {e}") from e
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # CUDARuntimeError: cudaErrorNoDevice, cudaErrorInsufficientDriver, no libcuda, ...
        raise BackendUnavailable(f"{INSTALL_HINT}; no CUDA device was found: {type(e).__name__}: {e}") from e
    if count < 1:
        raise BackendUnavailable(f"{INSTALL_HINT}; no CUDA device was found: cupy.cuda.runtime.getDeviceCount() returned {count}")
    try:
        from cupy.cuda import nccl
    except Exception as e:
        raise BackendUnavailable(f"{INSTALL_HINT}, and NCCL: {NCCL_HINT} ({type(e).__name__}: {e})") from e
    if not getattr(nccl, "available", False):
        raise BackendUnavailable(f"{INSTALL_HINT}, and NCCL: {NCCL_HINT}")
    return cupy, nccl, count


def launched_by_mpiexec() -> bool:
    """True when an mpiexec started this process as one of several (read from its environment, no MPI import)."""
    return any(os.environ.get(k, "1") not in ("", "1") for k in MPI_LAUNCH_ENV)


def _key(dtype) -> str:
    """A dtype as a short picklable name: the format name for zerosim's formats, else numpy's `str`."""
    dtype = np.dtype(dtype)
    for f in FORMATS.values():
        if f.dtype == dtype:
            return f.name
    return dtype.str


@dataclass(frozen=True)
class Wire:
    """How one dtype travels: the host dtype the ring holds, the dtype CuPy stores, the NCCL datatype."""

    host: np.dtype  # e.g. ml_dtypes.bfloat16
    device: np.dtype  # e.g. uint16 for bf16 (CuPy has no bfloat16): same bytes, a 2-byte view
    nccl_name: str  # "NCCL_BFLOAT16", ...; "NCCL_UINT8" when the elements travel as raw bytes
    nccl_type: int  # the constant itself, from cupy.cuda.nccl
    reducible: bool  # NCCL adds these as numbers (never raw bytes, never fp8)

    def nccl_count(self, elements: int) -> int:
        """NCCL's `count` argument for `elements` host elements (bytes when travelling as NCCL_UINT8)."""
        return elements * self.host.itemsize // _NCCL_BYTES[self.nccl_name]


class CupyBackend(HostArrays):
    """Ranks on NVIDIA GPUs with NCCL point-to-point messages; implements `zerosim.backends.base.Backend`.

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
        self.launch = launch if launch != "auto" else ("mpi" if launched_by_mpiexec() else "single")
        self.nccl_version = int(nccl.get_version())  # 0 for NCCL older than 2.3.4
        self.has_bf16 = hasattr(nccl, "NCCL_BFLOAT16") and self.nccl_version >= NCCL_2_10_3  # else bf16 travels as bytes
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
            raise BackendUnavailable(f"launch='mpi' needs mpi4py: pip install -e '.[mpi]' ({type(e).__name__}: {e})") from e
        world = MPI.COMM_WORLD if comm is None else comm
        if world.size != world_size:
            raise ValueError(f"Cluster({world_size}, backend='cupy') under mpiexec needs {world_size} processes, but mpiexec started {world.size}")
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        node_rank = node.rank  # this process's index on its node: it picks the GPU
        node.Free()
        device = node_rank if devices is None else int(list(devices)[node_rank])
        if not 0 <= device < count:
            raise ValueError(
                f"rank {world.rank} is process {node_rank} on its node and wants GPU {device}, but CuPy sees {count} GPU(s); "
                f"start at most {count} processes per node, or pass devices=[...]"
            )
        self._mpi = world.Dup()  # zerosim's notes never mix with the program's own messages
        self.local_ranks, self.devices = [world.rank], [device]
        uid = self._nccl.get_unique_id() if world.rank == 0 else None
        uid = self._mpi.bcast(uid, root=0)  # rank 0's ncclUniqueId, to every process
        with self._cp.cuda.Device(device):  # ncclCommInitRank binds the communicator to the current device
            self._comms = [self._nccl.NcclCommunicator(world_size, uid, world.rank)]

    def __repr__(self) -> str:
        return f"CupyBackend(world_size={self.world_size}, launch={self.launch!r}, arrays={self.arrays!r}, devices={self.devices}, nccl={self.nccl_version})"

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
        out = [None if a is None or dst is None else self._to_device(i, a) for i, (a, dst) in enumerate(zip(sends, send_to))]
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

    # -- NCCL's own collectives (the optional hook) ---------------------------------------------
    # NOTE: NCCL picks its own algorithm (ring, tree, NVLS, CollNet) and splits buffers over channels,
    # so the order of additions can differ from zerosim's ring for N > 2; for N = 2 each element is a
    # single addition and equals the ring bit for bit. The ring stays the reference.
    def native_reduce_scatter(self, tensors, op: str = "sum", fmt=None) -> list:
        """ncclReduceScatter of one flat (N*s,) array per local rank; rank r gets chunk r, (s,).

        `op`: "sum", "max", "min", "prod", or "avg_premul" (ncclAvg: each input times 1/N rounded to
        the datatype, then summed). The caller pads to a multiple of N, as the ring's staging does.
        """
        nccl_op = self._nccl_op(op)
        n = self.world_size

        def check(length):
            if length % n:
                raise ValueError(f"native_reduce_scatter: length {length} is not a multiple of N={n}; pad it first")

        def call(comm, send, recv, wire, length, stream):
            comm.reduceScatter(send, recv, wire.nccl_count(length // n), wire.nccl_type, nccl_op, stream)

        return self._native("native_reduce_scatter", tensors, fmt, lambda length: length // n, call, reduce=True, check=check)

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

    # -- helpers ----------------------------------------------------------------------------------
    def wire(self, dtype_or_key) -> Wire:
        """How a dtype (or a format, or a format name such as "bf16") travels through NCCL."""
        if isinstance(dtype_or_key, Format):
            dtype = dtype_or_key.dtype
        elif isinstance(dtype_or_key, str) and dtype_or_key in FORMATS:
            dtype = FORMATS[dtype_or_key].dtype
        else:
            dtype = np.dtype(dtype_or_key)
        name = _key(dtype)
        nccl_name = _NCCL_TYPE_OF.get(name, "NCCL_UINT8")
        if name == "bf16" and not self.has_bf16:
            nccl_name = "NCCL_UINT8"  # NCCL < 2.10.3: the bits still travel, but NCCL cannot add them
        device = dtype if dtype.kind in "biuf" else np.dtype(f"uint{8 * dtype.itemsize}")  # bf16 -> uint16, fp8 -> uint8
        return Wire(dtype, device, nccl_name, getattr(self._nccl, nccl_name), nccl_name != "NCCL_UINT8")

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
                raise ValueError(f"rank {self.local_ranks[i]} runs on GPU {self.devices[i]} but passed an array on GPU {array.device.id}")
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
                raise RuntimeError(f"rank {self.local_ranks[j]} waits for a message from rank {src} that was never sent")
            notes.append((_key(out[i][1].host), int(out[i][0].size)))
        return notes

    def _native(self, what: str, tensors, fmt, out_length, call, reduce: bool = False, check=None) -> list:
        """Run `call` for every local rank inside one NCCL group; outputs of `out_length(L)` elements."""
        if len(tensors) != len(self.local_ranks):
            raise ValueError(f"{what}: got {len(tensors)} arrays but this process hosts {len(self.local_ranks)} rank(s)")
        staged = [self._to_device(i, t, fmt) for i, t in enumerate(tensors)]
        meta = self.all_meta([(int(buf.size), _key(wire.host)) for buf, wire in staged])
        if len(set(meta)) != 1:
            raise ValueError(f"{what}: every rank must pass the same length and dtype, got {meta}")
        length, wire = meta[0][0], staged[0][1]
        if reduce and not wire.reducible:
            raise TypeError(f"{what}: NCCL cannot reduce {wire.host} here (it travels as {wire.nccl_name}); use the ring")
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
        if op not in _NCCL_OPS:
            raise ValueError(f"unknown NCCL reduction {op!r}; choose one of {list(_NCCL_OPS)}")
        if op == "avg_premul" and not self.has_avg:
            raise RuntimeError(f"ncclAvg needs NCCL >= 2.10.3 (found version code {self.nccl_version}) and a CuPy that exposes NCCL_AVG")
        return getattr(self._nccl, _NCCL_OPS[op])

    @contextmanager
    def _on(self, i: int):
        """Local rank i's GPU as the current device and its stream as the current stream."""
        with self._cp.cuda.Device(self.devices[i]), self._streams[i]:
            yield self._streams[i]

    def _one(self, what: str, items) -> list:
        items = list(items)
        if len(items) != 1:
            raise ValueError(f"{what}: under mpiexec the cupy backend hosts one rank per process, so it takes a list of 1, got {len(items)}")
        return items


def _check_devices(devices: list, world_size: int, count: int) -> None:
    """One process, one GPU per rank: NCCL refuses two ranks of one communicator on the same GPU."""
    if len(devices) != world_size:
        raise ValueError(f"devices={devices} names {len(devices)} GPU(s) for {world_size} ranks; give one per rank")
    if world_size > count:
        raise ValueError(
            f"Cluster({world_size}, backend='cupy') drives one GPU per rank from this process, but CuPy sees {count} GPU(s); "
            f"use at most {count} ranks, or launch one process per GPU with mpiexec"
        )
    if len(set(devices)) != len(devices) or not all(0 <= d < count for d in devices):
        raise ValueError(f"devices={devices} must be distinct GPU ids in 0..{count - 1} (NCCL puts at most one rank of a communicator on a GPU)")
