"""A learner's torch function on N real processes joined by torch.distributed's gloo backend, every point-to-point
send it makes recorded: the harnesses assignment 4's checks run the learner's functions through
(zerosim/teaching/assignments/_a4_torch.py), each returning plain data that the grader judges against zerosim's ring.

    ring_on_gloo(fn, xs)                   # {"ranks": [(fn(xs[r]) as numpy, [(dst, sent), ...]) per rank]}
    zero1_on_gloo(fn, model, batches, lr)  # {"ranks": [({"steps": [{"params", "sends"}, ...]}, [(dst, sent), ...])]}
                                           # either one: {"failed": one line for the learner} when a rank failed

Where they run. In a notebook, in the grading process itself. Under the grader's sandbox, in its child, beside the
learner's code: the learner's function lives there, and torch tensors cannot cross the sandbox's pipe. The policy
names them (zerosim/teaching/sandbox/_policy.py, `harnesses`) and the child imports this module before it arms the
policy, so it imports nothing of zerosim at its top beyond the sandbox's face; torch (the `parity` extra) it imports at
its top where installed, so that torch is loaded before the learner's code runs (below). What they are given and
return is data: numpy arrays (the grader's model as torch.save's bytes), numbers, strings, lists.

How. Each rank is a child of the calling process made by `fork`, so the learner's function is there without being
pickled or imported by name; each joins one gloo process group through a file store in a temporary folder (under
the sandbox, the case folder), runs one CPU thread (torch's CPU kernels then take the same path on every rank, in
every run, and in the grader), and sends its result back on a pipe of its own — not a multiprocessing Queue, whose
lock is a POSIX semaphore, a file in /dev/shm that the sandbox's confinement does not let the child create.
`torch.distributed.send` and `isend` (which `batch_isend_irecv` calls) are wrapped before the learner's function
runs: every tensor a rank sends is copied with its destination, in the order sent. A rank that raises fails the case
with its error and the line of the learner's file it came from; ranks that have not all finished after `TIMEOUT`
seconds (a deadlock: every rank blocked in a `send` no one receives) are killed and the case fails saying so. Under
the sandbox, what the policy recorded in a rank (a refused call of zerosim's, a process the learner's code started)
comes back with the rank's result and joins the child's own records; the ranks themselves are the harness's
processes, not the learner's.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import tempfile
import time
import traceback
from multiprocessing import connection

import numpy as np

from zerosim.teaching.sandbox import merge, own_processes, records

try:  # torch (the parity extra), loaded with this module: the sandbox's child imports its harnesses before it arms
    # the policy, so a submission's own `import torch` (the starter's first line) finds it loaded. A CUDA build's
    # import runs `/sbin/ldconfig -p` (ctypes.util.find_library("dl"), called at import by cuda-pathfinder's
    # cuda/pathfinder/_dynamic_libs/load_dl_linux.py, `_load_libdl`, installed beside torch 2.14.1's CUDA wheel), a
    # process the policy would note as the learner's: torch 2.12.1 and 2.14.1 from PyPI made the reference read
    # "your code started a process (subprocess.Popen)" (2026-11-29); a CPU build starts none
    import torch as _loaded_now  # noqa: F401
except ImportError:  # each case says how to install it
    pass

TIMEOUT = 30.0  # seconds for every rank of one case: a correct solution takes well under one
GRACE = 5.0  # seconds the other ranks have to report once one has failed (they end at once unless deadlocked)


class RanksFailed(Exception):
    """A rank raised, or the ranks did not finish: the message is one line for the learner."""


def ring_on_gloo(fn, xs: list) -> dict:
    """The harness of the ring's two halves: `fn(x)` on rank r of len(xs) gloo processes, x a tensor of xs[r] (a
    copy); per rank, what it returned (a tensor, as a numpy array) and what it sent."""
    def run(rank, torch, sends):
        out = fn(torch.from_numpy(np.array(xs[rank])))
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"return a torch tensor, not {type(out).__name__}")
        return out.detach().numpy().copy()

    return _reported(run, len(xs), fn)


def zero1_on_gloo(fn, model: np.ndarray, batches: list, lr: float) -> dict:
    """The harness of a training step: on each of len(batches[0]) gloo processes, the grader's torch model (`model`:
    torch.save's bytes as uint8) and, for each step, `fn(model, x, t, state, lr)` with that rank's batch
    batches[step][rank] = (x, t); per rank, {"steps": [{"params": the flat fp32 parameters after the step, "sends":
    (first, end) of the step's sends}]} and what it sent."""
    def run(rank, torch, sends):
        mine = torch.load(io.BytesIO(model.tobytes()), weights_only=False)  # the grader's own bytes
        state, steps = {}, []
        for step in batches:
            x, t = (torch.from_numpy(np.array(a)) for a in step[rank])
            first = len(sends)
            fn(mine, x, t, state, lr)
            params = np.concatenate([p.detach().reshape(-1).numpy() for p in mine.parameters()]).astype(np.float32)
            steps.append({"params": params, "sends": (first, len(sends))})
        return {"steps": steps}

    return _reported(run, len(batches[0]), fn)


def _reported(run, world: int, fn) -> dict:
    try:
        return {"ranks": on_gloo(run, world, fn)}
    except RanksFailed as e:
        return {"failed": str(e)}


def on_gloo(run, world: int, learner, timeout: float | None = None) -> list:
    """[(result, sends)] per rank: `run(rank, torch, sends)` on rank `rank` of `world` gloo processes, its result
    picklable (numpy arrays, numbers); `sends` is the [(dst, numpy copy)] that rank sent, in order (`run` may read it
    as it goes). `learner`: the learner's function, whose file an error is placed in. RanksFailed, one line, when a
    rank raised or they did not all finish within `timeout` seconds (TIMEOUT)."""
    import torch

    torch.set_num_threads(1)  # this process forks the ranks: no thread pool of its own to copy half-started
    timeout = TIMEOUT if timeout is None else timeout
    ctx = multiprocessing.get_context("fork")  # the learner's function travels with the fork: nothing is pickled
    with tempfile.TemporaryDirectory(prefix="zerosim-gloo-") as tmp:
        pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
        procs = [ctx.Process(target=_rank, args=(run, learner, r, world, os.path.join(tmp, "store"), pipes[r][1]),
                             daemon=True) for r in range(world)]
        with own_processes():  # the ranks: what the learner's code does in them comes back with their results
            for p in procs:
                p.start()
        for _, w in pipes:
            w.close()  # each rank holds its own end: one that ends without a word closes it
        waiting, got, deadline = {pipes[r][0]: r for r in range(world)}, {}, time.monotonic() + timeout
        failed = None  # the first rank's failure to arrive: the others' often follow from it (a peer gone)
        try:
            while waiting:
                ready = connection.wait(list(waiting), timeout=max(0.0, deadline - time.monotonic()))
                if not ready:
                    if failed:
                        break
                    stuck = sorted(waiting.values())
                    raise RanksFailed(f"rank(s) {stuck} had not returned after {timeout:g} s: a deadlock? (a "
                                      "blocking dist.send waits for its dist.recv: if every rank sends first, none "
                                      "receives; send with dist.isend, then dist.recv, then wait)")
                for conn in sorted(ready, key=waiting.get):
                    r = waiting.pop(conn)
                    try:
                        ok, value, recorded = conn.recv()
                    except (EOFError, OSError):
                        procs[r].join(timeout=5)
                        ok, recorded = False, ([], [])
                        value = f"rank {r}'s process ended (exit status {procs[r].exitcode}) before it returned"
                    else:
                        value = value if ok else f"on rank {r}: {value}"
                    merge(*recorded)
                    if ok:
                        got[r] = value
                    elif failed is None:
                        # the others' records still count (a call the policy refused there): read what they say
                        # within a moment. A rank that left early can fail a peer still joining the group (torch
                        # 2.14's "Gloo connectFullMesh failed ... Connection closed by peer" on rank 0 while ranks
                        # 1-3 had been refused a call), and rank 0's line alone hid the refusal (2026-11-29)
                        failed, deadline = value, min(deadline, time.monotonic() + GRACE)
            if failed:
                raise RanksFailed(failed)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(timeout=5)
            for r, _ in pipes:
                r.close()
    return [got[r] for r in range(world)]


def _rank(run, learner, rank: int, world: int, store: str, out) -> None:
    at_fork = [len(x) for x in records()]  # what the policy had recorded before this rank began: not this rank's
    try:
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT))
        sends = _recording(dist)
        try:
            value = run(rank, torch, sends)
        finally:
            dist.destroy_process_group()
        result = (True, (value, sends))
    except NotImplementedError:  # the starter's own stub
        result = (False, f"{getattr(learner, '__name__', 'your function')} is not written yet (it raised "
                         "NotImplementedError)")
    except BaseException as e:  # the learner's error, said in one line with its place in their file
        result = (False, f"{type(e).__name__}: {e}{_where(e, learner)}")
    try:
        out.send((*result, [x[n:] for x, n in zip(records(), at_fork)]))
    except BaseException as e:  # a result that does not pickle
        out.send((False, f"rank {rank}'s result could not be sent back: {type(e).__name__}: {e}", ([], [])))
    finally:
        os._exit(0)  # nothing of the calling process's (its atexit, its threads) runs in this copy of it


def _where(error: BaseException, fn) -> str:
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename == filename:
            return f" (line {frame.lineno}: {frame.line})" if frame.line else f" (line {frame.lineno})"
    return ""


def _recording(dist) -> list:
    """Wrap send and isend, on torch.distributed and on the module that defines them (P2POp checks an op against
    the latter, and batch_isend_irecv calls each op's function), so that every tensor sent is copied with its
    destination; returns the list they append to."""
    from torch.distributed import distributed_c10d as c10d

    sends = []

    def wrapped(original):
        def send(tensor, dst=None, *args, **kwargs):
            sends.append((int(dst if dst is not None else kwargs.get("group_dst")),
                          tensor.detach().cpu().numpy().copy()))
            return original(tensor, dst, *args, **kwargs)
        return send

    for name in ("send", "isend"):
        w = wrapped(getattr(c10d, name))
        setattr(c10d, name, w)
        setattr(dist, name, w)
    return sends
