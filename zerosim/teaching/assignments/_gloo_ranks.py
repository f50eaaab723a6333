"""A learner's torch function on N real processes joined by torch.distributed's gloo backend, every point-to-point
send it makes recorded: what assignment 4 grades (_a4_torch.py), hop by hop, against zerosim's ring.

    got = on_gloo(lambda rank, torch, sends: fn(x[rank]).numpy(), 4, fn)   # per rank: (what it returned, sends)

Each rank is a child of the grading process made by `fork`, so the learner's function (loaded from their file in the
grading process, teaching/exercises/_sandbox.py) is there without being pickled or imported by name; each joins one
gloo process group through a file store, runs one CPU thread (torch's CPU kernels then take the same path on every
rank and run), and reports on a queue. `torch.distributed.send` and `isend` (which `batch_isend_irecv` calls) are
wrapped before the learner's function runs: every tensor a rank sends is copied with its destination, in the order
sent. A rank that
raises fails the case with its error and the line of the learner's file it came from; ranks that have not all
finished after `timeout` seconds (a deadlock: every rank blocked in a `send` no one receives) are killed and the case
fails saying so. torch is imported only here, when a case runs (it is the `parity` extra).
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queues
import tempfile
import time
import traceback

TIMEOUT = 30.0  # seconds for every rank of one case: a correct solution takes well under one


class RanksFailed(Exception):
    """A rank raised, or the ranks did not finish: the message is one line for the learner."""


def on_gloo(run, world: int, learner, timeout: float = TIMEOUT) -> list:
    """[(result, sends)] per rank: `run(rank, torch, sends)` on rank `rank` of `world` gloo processes, its result
    picklable (numpy arrays, numbers); `sends` is the [(dst, numpy copy)] that rank sent, in order (`run` may read it
    as it goes). `learner`: the learner's function, whose file an error is placed in."""
    ctx = multiprocessing.get_context("fork")  # the learner's function travels with the fork: nothing is pickled
    with tempfile.TemporaryDirectory(prefix="zerosim-a4-") as tmp:
        q = ctx.Queue()
        procs = [ctx.Process(target=_rank, args=(run, learner, r, world, os.path.join(tmp, "store"), q), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        got, deadline = {}, time.monotonic() + timeout
        try:
            while len(got) < world:
                try:
                    rank, ok, value = q.get(timeout=0.2)
                except queues.Empty:
                    dead = [r for r, p in enumerate(procs) if r not in got and p.exitcode not in (None, 0)]
                    if dead:
                        raise RanksFailed(f"rank {dead[0]}'s process ended (exit status {procs[dead[0]].exitcode}) "
                                          "before it returned") from None
                    if time.monotonic() > deadline:
                        stuck = sorted(set(range(world)) - set(got))
                        raise RanksFailed(f"rank(s) {stuck} had not returned after {timeout:g} s: a deadlock? (a "
                                          "blocking dist.send waits for its dist.recv: if every rank sends first, "
                                          "none receives; send with dist.isend, then dist.recv, then wait)") from None
                    continue
                if not ok:
                    raise RanksFailed(f"on rank {rank}: {value}")
                got[rank] = value
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(timeout=5)
    return [got[r] for r in range(world)]


def _rank(run, learner, rank: int, world: int, store: str, q) -> None:
    try:
        import datetime

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=TIMEOUT))
        sends = _recording(dist)
        try:
            out = run(rank, torch, sends)
        finally:
            dist.destroy_process_group()
        q.put((rank, True, (out, sends)))
    except NotImplementedError:  # the starter's own stub
        q.put((rank, False, f"{getattr(learner, '__name__', 'your function')} is not written yet (it raised "
                            "NotImplementedError)"))
    except BaseException as e:  # the learner's error, said in one line with its place in their file
        q.put((rank, False, f"{type(e).__name__}: {e}{_where(e, learner)}"))
    finally:
        q.close()
        q.join_thread()  # the result is in the pipe before this copy of the grading process ends
        os._exit(0)  # nothing of the grading process's (its atexit, its threads) runs in this copy of it


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
