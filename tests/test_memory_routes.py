"""Two routes to per-rank memory that must agree: the formulas (zerosim.analysis.costs) and the meta backend's
ledgers (the same engines, run on data-less arrays).

Resting model states per rank = the ledger kinds params, grads, master and optim:*, after a step
(everything transient is freed by then). The engines pad every flat buffer, replicated ones too, to
N·ceil(Ψ/N), so the ledgers equal costs' padding="all" mode exactly, in bytes; when N divides Ψ
(both published cases) that is also the unpadded formula.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import MLP, Adam, Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.costs import (
    GB,
    MemoryConfig,
    get_preset,
    model_state_memory,
    seed001_formulas,
    seed001_printed_table,
    zero_paper,
)
from zerosim.models import make_regression
from zerosim.models.meta import MetaModel

MODEL_STATES = ("params", "grads", "master")  # plus every optim:* kind


def resting(ledger) -> dict:
    return {k: v for k, v in ledger.by_kind().items() if k in MODEL_STATES or k.startswith("optim:")}


def ledger_route(model, ranks, stage, step=True, **cluster):
    """Per-rank resting bytes by kind, from the meta backend's ledgers (one dict per rank)."""
    engine = ZeroEngine(model, Cluster(ranks, backend="meta", trace="call", timeline=False, **cluster), stage, Adam())
    if step:
        engine.step(model.batches(engine.cluster))
    return [resting(r.ledger) for r in engine.cluster.ranks]


def formula_route(params, ranks, stage, padding="all") -> dict:
    return {
        k: v for k, v in model_state_memory(params, ranks, stage, MemoryConfig(padding=padding)).by_kind.items() if v
    }


PUBLISHED = [
    # ZeRO paper, Figure 1: Ψ = 7.5B, N = 64, K = 12 (Adam: fp32 master + m + v). Printed to 1 decimal.
    ("zero-paper-7.5b", 7.5e9, 64, (120, 31.40625, 16.640625, 1.875), ((120.0, 31.4, 16.6, 1.9), 1)),
    # Seed 001's formulas (16P, 4P + 12P/N, 2P + 14P/N, 16P/N) for 7B on 8 GPUs, to 2 decimals. NOT its printed table.
    ("7B in 32 layers", 7e9, 8, (112, 38.5, 26.25, 14), ((112.0, 38.5, 26.25, 14.0), 2)),
]


def model_for(name, params):
    return (
        MetaModel.from_preset(get_preset(name))
        if name.startswith("zero-paper")
        else MetaModel.from_params(params, layers=32)
    )


@pytest.mark.parametrize("name, psi, n, exact_gb, printed_gb", PUBLISHED)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_published_numbers_by_both_routes(name, psi, n, exact_gb, printed_gb, stage):
    want = Fraction(exact_gb[stage]) * GB  # exact bytes: N divides Ψ, so padding adds nothing
    formula = formula_route(psi, n, stage)
    ledgers = ledger_route(model_for(name, psi), n, stage)
    assert sum(formula.values()) == want
    assert model_state_memory(psi, n, stage, MemoryConfig(padding="none")).total == want  # the papers' Ψ/N
    assert all(per_rank == formula for per_rank in ledgers)  # every rank, every kind, to the byte
    shown, digits = printed_gb
    assert round(sum(ledgers[0].values()) / GB, digits) == shown[stage]


@pytest.mark.parametrize("name, psi, n, exact_gb, printed_gb", PUBLISHED)
def test_the_papers_own_rows_agree(name, psi, n, exact_gb, printed_gb):
    assert zero_paper(psi, n).bytes == tuple(g * GB for g in exact_gb)
    if n == 8:
        assert seed001_formulas(psi, n).bytes == tuple(g * GB for g in exact_gb)


def test_seed001_printed_table_is_an_erratum_not_a_target():
    row = seed001_printed_table()
    assert row.gb() == (112.0, 21.5, 15.75, 14.0)  # as printed
    assert row.erratum == (1, 2)  # ZeRO-1 and ZeRO-2 disagree with its own formulas (38.5, 26.25)
    measured = [sum(ledger_route(MetaModel.from_params(7e9, 32), 8, s, step=False)[0].values()) / GB for s in (1, 2)]
    assert measured == [38.5, 26.25]


UNEVEN = [  # N does not divide Ψ: the ledgers hold padded buffers, and "all" is the mode that says so
    ("gpt2-small", 7),
    ("gpt2-xl", 96),
    ("llama-7b", 1000),
    ("gpt3-175b", 1000),
    ("zero-paper-7.5b", 1024),
]


@pytest.mark.parametrize("name, n", UNEVEN)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_padding_all_is_what_the_engines_hold(name, n, stage):
    preset = get_preset(name)
    assert preset.total % n, "pick a world size that does not divide Ψ"
    # init fills resting state
    ledgers = ledger_route(MetaModel.from_preset(preset, unit="block"), n, stage, step=False)
    formula = formula_route(preset.total, n, stage)
    assert ledgers[0] == formula and ledgers[-1] == formula  # the last rank holds padding, and counts it
    if stage > 0:  # padding is real bytes: the unpadded formula is a little lower
        assert sum(formula.values()) > model_state_memory(preset.total, n, stage, MemoryConfig(padding="none")).total


def test_a_step_leaves_the_resting_state_as_it_was():
    model = MetaModel.from_preset(get_preset("gpt2-medium"), unit="block")
    for stage in range(4):
        assert ledger_route(model, 48, stage, step=False) == ledger_route(model, 48, stage, step=True)


# ---------------------------------------------------------------- real data (numpy backend) vs the formula

def formula_as_ledger(params, ranks, stage, optimizer) -> dict:
    """costs' parts by kind, named as the ledger names them (every optimizer, Adan included, kind for kind)."""
    by_kind = model_state_memory(params, ranks, stage, MemoryConfig(optimizer=optimizer, padding="all")).by_kind
    return {kind: nbytes for kind, nbytes in by_kind.items() if nbytes}


@given(
    widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
    n=st.integers(1, 8),
    stage=st.integers(0, 3),
    precision=st.sampled_from(["fp16-mixed", "bf16-mixed"]),
    optimizer=st.sampled_from(["adam", "adamw", "sgd", "lion", "adan"]),
)
def test_numpy_ledgers_equal_the_formula(widths, n, stage, precision, optimizer):
    model = MLP(widths)
    engine = ZeroEngine(model, Cluster(n, trace="call"), stage, get_optimizer(optimizer, lr=1e-3), precision)
    engine.step(make_regression(np.random.default_rng(0), n, 2, widths))
    want = formula_as_ledger(model.num_params, n, stage, optimizer)
    assert [resting(r.ledger) for r in engine.cluster.ranks] == [want] * n
