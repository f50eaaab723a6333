"""Beside a pipeline each rank's computes are timed by its own stage's units.

A rank's events name the layers of its stage model (its chunks' units, numbered from 0); the time model holds the
whole model. Until this was mended every stage after the first was timed as if it held the first stage's units at
the same positions: stage 1's first block as the embedding, the last stage's head as a transformer block's first
unit (a 405B row's head GEMM, ~29 ms a micro-batch, charged 0.16 ms). A unit costs the same wherever it runs, so each
stage's events must cost what the same unit's events cost in the whole model's step, without a pipeline.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from zerosim.analysis.costs import EFFICIENCY_PRESETS
from zerosim.analysis.planner import meta_step
from zerosim.analysis.timeline import Hardware, TimeModel
from zerosim.models import MetaLlama, read_hf_config, shipped_config
from zerosim.parallel import ParallelSpec


def seconds_by_label(result) -> dict:
    """{(layer name, pass): the seconds of such a compute} over every rank's compute track (micro-batches alike; a
    unit's passes only: the optimizer's step covers each stage's own parameters)."""
    out = defaultdict(set)
    for r in range(result.world_size):
        for iv in result.track(r, "compute"):
            kind, _, rest = iv.label.partition(" ")
            if kind in ("forward", "recompute", "backward"):
                out[(rest.split(" (micro")[0], kind)].add(round(iv.end - iv.start, 15))
    return out


@pytest.mark.parametrize("pp", [2, 4])
def test_each_stage_is_timed_by_its_own_units(pp):
    model = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), 1024, checkpoint="block",
                                  attention="flash")
    hw = Hardware("h100", "nvlink4", "bf16")
    time_model = TimeModel(EFFICIENCY_PRESETS["compiled"])
    whole, _ = meta_step(model, 2, 1, hw, precision="bf16-mixed", micro_batch=(1, 1024), time_model=time_model)
    cut, _ = meta_step(model, 2 * pp, 1, hw, precision="bf16-mixed", micro_batch=(1, 1024), time_model=time_model,
                       accumulation_steps=pp, spec=ParallelSpec(pp=pp))
    alone, staged = seconds_by_label(whole), seconds_by_label(cut)
    # the ends and every stage's first block are where a stage's numbering and the whole model's part
    for key in [("head", "forward"), ("head", "backward"), ("embed", "forward"), ("block16", "forward"),
                ("block16", "recompute"), ("block31", "backward")]:
        assert key in staged and len(staged[key]) == 1, key
        assert staged[key] == alone[key], key
    assert set(staged) == set(alone)
    for key, seconds in alone.items():  # every unit and pass, on whichever stage holds it
        assert staged[key] == seconds, key
