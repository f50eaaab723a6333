"""Will it fit? Refuse a run whose buffers cannot fit in this machine's memory before allocating any.

A simulated cluster holds every rank in one process, so "4 ranks of a 10-billion-parameter model"
asks this machine for 4 × 160 GB. Callers estimate the bytes first (shapes and dtypes only) and ask
`check_fits`, which raises `OutOfMemory` saying what was asked, what the machine has, and what to do
instead (the meta backend accounts any size without allocating).
"""

from __future__ import annotations

from zerosim.backends import available_bytes  # noqa: F401 (the host's free memory, for callers before a backend exists)

GB = 1e9  # the ZeRO paper's and the seeds' GB: 10**9 bytes (DeepSpeed's estimators print GiB, 2**30)
# Units (blocks and ends) in one model: building it and stepping it visit each once per micro-step, one by one in
# Python (10,000 blocks take about half a minute to step; 100,000 did not finish building in a minute); the deepest
# shipped config has 96. `zerosim memory`/`timeline` (cli/work_budget.py) and `zerosim train` refuse more.
MAX_UNITS = 20_000
MAX_IN_PROCESS_RANKS = 2**20  # 1,048,576: more than any data-parallel job; each rank costs ~10 µs and ~750 B here


class OutOfMemory(MemoryError):
    """A run would not fit in memory; raised before anything was allocated."""


def check_fits(need: int, what: str, hint: str, have: int | None) -> None:
    """Raise `OutOfMemory` if `need` bytes exceed `have` (what the backend says a new buffer can get;
    None: no limit, as on the meta backend, or unknown)."""
    if have is not None and need > have:
        tip = f"; {hint}" if hint else ""
        raise OutOfMemory(f"{what} needs about {gb(need)}, but this machine has {gb(have)} available{tip}")


def gb(nbytes: float) -> str:
    """Bytes as GB (1e9) for people: '2,016 GB', '24.8 GB', '0.0021 GB'."""
    x = nbytes / GB
    return f"{x:,.0f} GB" if x >= 100 else f"{x:.3g} GB"


def check_world_size(world_size: int, backend: str, flag: str | None = None) -> None:
    """Refuse more in-process ranks than this process can sensibly host (before creating any), naming the caller's
    `flag` ("--ranks") where one asked for them, else the Cluster."""
    if world_size > MAX_IN_PROCESS_RANKS:
        asked = f"{flag} {world_size:,}:" if flag else f"Cluster({world_size:,}, backend={backend!r})"
        raise ValueError(
            f"{asked} {'the ' + backend + ' backend ' if flag else ''}would host {world_size:,} ranks in this process "
            f"(~{world_size * 750 / GB:.2g} GB and ~{world_size * 1e-5:.0f} s to set up); at most "
            f"{MAX_IN_PROCESS_RANKS:,} are allowed — no data-parallel job is larger"
        )
