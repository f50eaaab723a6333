"""N torch processes on gloo, each running one function: the parity kit's launcher.

torch is an optional extra (`pip install "zerosim[parity]"`, or torch first and then `pip install -e .`): nothing
here imports it until a run starts, and a missing torch is one clear error (`TorchMissing`). Each rank is a
fresh process (`multiprocessing`'s "spawn", as torch.multiprocessing.spawn does), joined through a file store,
with one CPU thread so that torch's CPU kernels run the same code path on every rank and every run.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import tempfile
import traceback


def torch_floor() -> tuple:
    """The oldest torch the parity kit runs on, as (major, minor, ...): the floor of the `parity` extra, read from
    zerosim's installed metadata, so that pyproject.toml is the one place it is written (and says why); () where
    zerosim runs uninstalled and has no metadata."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        wanted = requires("zerosim") or []
    except PackageNotFoundError:
        return ()
    for requirement in wanted:
        found = re.fullmatch(r'torch\s*>=\s*([0-9.]+)\s*;\s*extra\s*==\s*"parity"', requirement)
        if found:
            return tuple(int(part) for part in found.group(1).split("."))
    return ()


class TorchMissing(RuntimeError):
    """torch (the parity extra) is not installed, or is too old."""


def require_torch():
    """The torch module, or `TorchMissing` saying how to install it."""
    try:
        import torch
    except ImportError:
        raise TorchMissing("the parity kit needs torch (the 'parity' extra); a CPU build is enough, gloo runs "
                           "on the CPU: pip install torch --index-url https://download.pytorch.org/whl/cpu, "
                           "then pip install -e '.[parity]'") from None
    floor = torch_floor()
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__.split("+")[0])[:len(floor)])
    if version < floor:
        raise TorchMissing(f"the parity kit needs torch >= {'.'.join(map(str, floor))} (the 'parity' extra), found "
                           f"{torch.__version__}: a CPU build is enough, pip install --upgrade torch --index-url "
                           "https://download.pytorch.org/whl/cpu")
    return torch


def run_on_gloo(fn, world_size: int, *args, timeout: float = 600.0) -> list:
    """fn(rank, world_size, *args) on `world_size` torch processes joined in one gloo process group; returns each
    rank's result in rank order. `fn` must be a module-level function (spawn imports it by name), its arguments and
    result picklable. A rank that raises fails the whole run with its traceback."""
    require_torch()
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="zerosim-gloo-") as tmp:
        store = os.path.join(tmp, "store")
        queue = ctx.Queue()
        procs = [ctx.Process(target=_rank_main, args=(fn, r, world_size, store, queue, args), daemon=True)
                 for r in range(world_size)]
        for p in procs:
            p.start()
        results, failures = {}, []
        try:
            _collect(procs, queue, results, failures, timeout)
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.terminate()
    if failures:
        rank, tb = sorted(failures)[0]
        raise RuntimeError(f"torch rank {rank} of {world_size} failed:\n{tb}")
    return [results[r] for r in range(world_size)]


def _collect(procs, queue, results: dict, failures: list, timeout: float) -> None:
    """Each rank's (rank, ok, value) from `queue`; a rank that died without a word (killed, or spawn could not
    import the caller's __main__) fails the run at once rather than after `timeout`."""
    import queue as queues
    import time

    deadline = time.monotonic() + timeout
    while len(results) + len(failures) < len(procs):
        try:
            rank, ok, value = queue.get(timeout=1.0)
        except queues.Empty:
            reported = set(results) | {r for r, _ in failures}
            dead = [r for r, p in enumerate(procs) if r not in reported and p.exitcode is not None]
            if dead:
                failures.append((dead[0], f"the process exited with status {procs[dead[0]].exitcode} before "
                                          f"reporting (a script that starts the kit needs `if __name__ == "
                                          f"'__main__':`)"))
            elif time.monotonic() > deadline:
                raise TimeoutError(f"torch ranks did not finish within {timeout:g} s") from None
            continue
        (results.__setitem__(rank, value) if ok else failures.append((rank, value)))


def _rank_main(fn, rank: int, world_size: int, store: str, queue, args) -> None:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
        try:
            value = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        queue.put((rank, True, value))
    except BaseException:  # report it: the parent would otherwise wait for a rank that is gone
        queue.put((rank, False, traceback.format_exc()))
