"""The work a command's arguments ask for, counted before any of it runs, and refused when it would run for many
minutes with nothing to show — with what it would have cost.

The budgets are counts of what the simulator does, not clocks, so they mean the same on every machine; the notes
say what each count took on one core of the 2-core machine this was written on (load ~1):

    UNITS        units in one model: building a model's data-less twin and stepping it visits each once per micro-step
                 (a 10,000-block config took ~30 s for `memory --seq-len`, 100,000 blocks 22 s to build alone;
                 the deepest shipped config has 96 blocks)
    UNIT_PASSES  units × micro-steps × meta steps of one command (`timeline --accumulation-steps 1000` on GPT-2
                 small's 15 units: 15,000 passes, ~4 s)
    RANK_STEPS   ranks summed over a sweep's meta steps (every meta step keeps one record per rank per collective;
                 the default sweep, 64 to 4096 ranks, sums 8,128)
    REFRESH_CALLS  all-gathers of the stage 1/2 refresh over a command's meta steps: an `allgather_bucket_size` cuts
                 it into Ψ / size calls a step (GPT-2 small's 124M parameters in buckets of 1,000 elements: 124,439
                 calls, ~18 s)

(`zerosim train` counts its own: TrainConfig refuses a step of more than MAX_STEP_MICRO_BATCHES micro-batches.)
"""

from __future__ import annotations

UNIT_PASSES = 200_000
RANK_STEPS = 1 << 20
REFRESH_CALLS = 100_000


def check_units(units: int, what: str) -> None:
    """Refuse a model of more than UNITS units (cluster.MAX_UNITS: the one count, shared with zerosim train), before
    it is built."""
    from zerosim.cluster import MAX_UNITS as UNITS  # here, not at import: a command's --help loads no NumPy

    if units > UNITS:
        raise ValueError(f"{what} has {units:,} units (blocks and ends); zerosim takes at most {UNITS:,}: each is "
                         "built and stepped one by one (10,000 take about half a minute; the deepest shipped config "
                         "has 96 blocks)")


def check_passes(units: int, micro_steps: int, runs: int, what: str, fix: str) -> None:
    """Refuse more than UNIT_PASSES unit passes (units × micro-steps × meta steps), naming the count."""
    passes = units * micro_steps * runs
    if passes > UNIT_PASSES:
        steps = f"{runs:,} meta steps of " if runs > 1 else ""
        raise ValueError(f"{what} would simulate {steps}{micro_steps:,} micro-step(s) over {units:,} units: "
                         f"{passes:,} unit passes, more than the {UNIT_PASSES:,} zerosim runs in one command "
                         f"(15,000 take a few seconds): {fix}")


def check_sweep(ranks, runs_per_size: int, what: str) -> None:
    """Refuse a sweep whose meta steps would keep more than RANK_STEPS rank records in all."""
    total = sum(ranks) * runs_per_size
    if total > RANK_STEPS:
        raise ValueError(f"{what} would step {runs_per_size * len(ranks):,} meta clusters of {min(ranks):,} to "
                         f"{max(ranks):,} ranks, {total:,} ranks in all; zerosim sweeps at most {RANK_STEPS:,}: "
                         "drop the largest --sweep-ranks")



def check_refresh(params: int, size: int | None, what: str, steps: int = 1) -> None:
    """Refuse a stage 1/2 refresh cut into more than REFRESH_CALLS all-gathers over `steps` meta steps: `size` is the
    allgather bucket (elements; None: one call), `params` the model's Ψ (parallel/data allgather_pieces: Ψ // size
    pieces a step, every rank sending the same piece of its shard)."""
    if size is None:
        return
    calls = max(1, params // size) * steps
    if calls > REFRESH_CALLS:
        least = -(-params * steps // REFRESH_CALLS)
        over = f" over {steps:,} meta steps" if steps > 1 else " a step"
        raise ValueError(f"{what} {size:,} cuts the stage 1/2 refresh of {params:,} parameters into {calls:,} "
                         f"all-gathers{over} (Ψ / size), more than the {REFRESH_CALLS:,} zerosim runs in one command "
                         f"(each a call on every rank): give at least {least:,} elements")
