"""Analytic costs against the numbers printed in the ZeRO paper, the seeds and DeepSpeed's source.

Expected values are written out by hand (bytes, or GB = 1e9 bytes); the code is not asked to check itself.
"""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim.analysis.costs import (
    LINKS,
    OPTIMIZER_STATES,
    PRESETS,
    ActivationShape,
    MemoryConfig,
    activation_memory,
    comm_time,
    comm_volume,
    conventions_table,
    deepspeed_estimators,
    format_table,
    get_preset,
    model_state_memory,
    model_state_memory_by_stage,
    seed000_general,
    seed001_formulas,
    seed001_printed_table,
    seed003_table,
    zero_paper,
)

GB = 10**9

# ---------------------------------------------------------------- memory: known values, a table

KNOWN = [
    # ZeRO paper Fig. 1: Ψ = 7.5B, N = 64, K = 12 -> 120 / 31.4 / 16.6 / 1.9 GB, exactly these before rounding
    (7.5e9, 64, (120, 31.40625, 16.640625, 1.875)),
    # seed 001 by its own formulas: 7B on 8 GPUs -> 112 / 38.5 / 26.25 / 14 GB
    (7e9, 8, (112, 38.5, 26.25, 14)),
]


@pytest.mark.parametrize("psi, n, want_gb", KNOWN)
def test_named_parts_give_the_published_numbers(psi, n, want_gb):
    got = tuple(m.total for m in model_state_memory_by_stage(psi, n))
    assert got == tuple(Fraction(g) * GB for g in want_gb)  # exact: N divides Ψ, so padding adds nothing


@pytest.mark.parametrize("psi, n, want_gb", KNOWN)
def test_paper_seed001_and_seed003_formulas_agree_on_the_published_numbers(psi, n, want_gb):
    for row in (zero_paper(psi, n), seed001_formulas(psi, n), seed003_table(psi, n)):
        assert row.bytes == tuple(g * GB for g in want_gb), row.name


def test_zero_paper_figure1_to_the_papers_rounding():
    assert tuple(round(m.gb(), 1) for m in model_state_memory_by_stage(7.5e9, 64)) == (120.0, 31.4, 16.6, 1.9)


def test_parts_by_kind_at_stage_1_for_figure1():
    m = model_state_memory(7.5e9, 64, 1)
    assert m.by_kind == {"params": 15 * GB, "grads": 15 * GB, "master": 30 * GB / 64,
                         "optim:m": 30 * GB / 64, "optim:v": 30 * GB / 64}


def test_seed001_printed_table_is_reported_as_an_erratum():
    row = seed001_printed_table()
    assert row.gb() == (112, 21.5, 15.75, 14)  # what the seed prints
    assert (21.5, 15.75) != (38.5, 26.25)  # what its formulas 4P + 12P/N, 2P + 14P/N give
    assert row.erratum == (1, 2)
    assert "ERRATUM" in row.note and "38.5" in row.note and "26.25" in row.note
    names = [r.name for r in conventions_table(7e9, 8)]
    assert row.name in names and row.name not in [r.name for r in conventions_table(7.5e9, 64)]


def test_deepspeed_estimators_from_its_source():
    # 2P + int(18P/N) and 4L + int(18P/N); 7B on 8 GPUs, L = LLaMA-7B's embedding 32000 x 4096
    row = deepspeed_estimators(7e9, 8, largest_layer=131_072_000)
    assert row.bytes == (None, None, 14_000_000_000 + 15_750_000_000, 524_288_000 + 15_750_000_000)
    assert deepspeed_estimators(7e9, 8).bytes[3] is None  # ZeRO-3 needs L


def test_seed000_counts_14_bytes_and_no_gradients():
    row = seed000_general(1000, 4)
    assert row.bytes[0] == 14 * 1000  # 2 + 4 + 8
    assert row.bytes[1] == row.bytes[2]  # no gradient term: sharding grads changes nothing
    assert row.bytes[3] == 14 * 1000 / 4


def test_seed003_with_fp32_accumulation_counts_4_byte_grads():
    assert seed003_table(1000, 4, fp32_grad_accum=True).bytes[0] == 18 * 1000


BYTES_PER_PARAM_STAGE0 = [
    ("adam", 16),  # 2 + 2 + 4 + 8: seed 001's table
    ("adamw", 16),  # same state as Adam
    ("sgd", 8),  # 2 + 2 + 4, no state
    ("sgd_momentum", 12),  # + one fp32 momentum
    ("lion", 12),  # seed 001: "a total of 12 bytes/param"
    ("adan", 24),  # 2 + 2 + 4 + m, v, n, g_prev in fp32 (seed 001 counts g_prev at 2: 22, its own row below)
]


@pytest.mark.parametrize("opt, per_param", BYTES_PER_PARAM_STAGE0)
def test_bytes_per_parameter_by_optimizer(opt, per_param):
    assert model_state_memory(1000, 8, 0, MemoryConfig(optimizer=opt)).total == per_param * 1000


def test_adan_stage3_is_24P_over_N_and_seed001s_row_says_22():
    assert model_state_memory(8000, 8, 3, MemoryConfig(optimizer="adan")).total == 24 * 8000 / 8
    from zerosim.analysis.costs import conventions_table
    from zerosim.analysis.costs._conventions import seed001_adan

    # seed 001: 22 B/param
    assert seed001_adan(8000, 8).bytes == (22 * 8000, 4 * 8000 + 18 * 1000, 2 * 8000 + 20 * 1000, 22 * 1000)
    assert any(r.name.startswith("seed 001 Adan") for r in conventions_table(8000, 8, optimizer="adan"))
    assert not any(r.name.startswith("seed 001 Adan") for r in conventions_table(8000, 8))


def test_fp32_gradient_accumulation_doubles_the_gradient_part():
    m = model_state_memory(1000, 4, 0, MemoryConfig(fp32_grad_accum=True))
    assert m.by_kind["grads"] == 4000 and m.total == 18 * 1000  # the engines keep fp32-accumulated grads as "grads"


@pytest.mark.bad_input("cost formulas")
def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="optimizer"):
        MemoryConfig(optimizer="adagrad")
    with pytest.raises(ValueError, match="stage"):
        model_state_memory(10, 2, 4)
    with pytest.raises(ValueError, match="whole"):
        model_state_memory(10.5, 2, 0)


# ---------------------------------------------------------------- memory: properties

psis = st.integers(min_value=0, max_value=10**12)
worlds = st.integers(min_value=1, max_value=4096)
configs = st.builds(MemoryConfig, optimizer=st.sampled_from(sorted(OPTIMIZER_STATES)), fp32_grad_accum=st.booleans(),
                    padding=st.sampled_from(["none", "shards"]))


@given(psis, worlds, configs)
def test_totals_do_not_grow_with_stage(psi, n, config):
    totals = [m.total for m in model_state_memory_by_stage(psi, n, config)]
    assert totals == sorted(totals, reverse=True)


@given(psis, worlds, worlds, configs, st.sampled_from([0, 1, 2, 3]))
def test_totals_do_not_grow_with_ranks(psi, n1, n2, config, stage):
    small, large = sorted((n1, n2))
    assert model_state_memory(psi, large, stage, config).total <= model_state_memory(psi, small, stage, config).total


@given(psis, worlds, worlds, configs)
def test_stage0_does_not_depend_on_ranks(psi, n1, n2, config):
    assert model_state_memory(psi, n1, 0, config).total == model_state_memory(psi, n2, 0, config).total


@given(psis, worlds, st.sampled_from(sorted(OPTIMIZER_STATES)), st.booleans())
def test_parts_by_kind_sum_to_the_total(psi, n, opt, fp32_grads):
    config = MemoryConfig(optimizer=opt, fp32_grad_accum=fp32_grads, padding="shards")  # whole bytes: sums are exact
    for m in model_state_memory_by_stage(psi, n, config):
        assert sum(m.by_kind.values()) == m.total


@given(psis, worlds, st.sampled_from([1, 2, 3]))
def test_padding_makes_each_sharded_part_a_multiple_of_n_elements(psi, n, stage):
    m = model_state_memory(psi, n, stage, MemoryConfig(optimizer="adan", padding="shards"))
    sharded = [("master", m.master, 4)] + [(k, b, 4) for k, b in m.optimizer]
    if stage >= 2:
        sharded.append(("grads", m.grads, 2))
    if stage == 3:
        sharded.append(("params", m.params, 2))
    for kind, nbytes, width in sharded:
        assert nbytes % width == 0, kind
        assert nbytes // width == -(-psi // n), kind  # ceil(Ψ/N) elements per rank
        whole = (nbytes // width) * n  # elements across all N shards: the padded flat buffer
        assert psi <= whole < psi + n, kind  # Ψ rounded up to the next multiple of N


# ---------------------------------------------------------------- communication

wire = st.sampled_from([1, 2, 4])


@given(psis, worlds, st.sampled_from([0, 1, 2]), wire)
def test_comm_volume_is_2psi_times_n_minus_1_over_n(psi, n, stage, b):
    want = Fraction(2 * (n - 1), n) * psi * b
    assert comm_volume(psi, n, stage, grad_wire_bytes=b, param_wire_bytes=b) == float(want)


@given(psis, worlds, wire)
def test_stage3_comm_volume_is_3psi_times_n_minus_1_over_n(psi, n, b):
    want = Fraction(3 * (n - 1), n) * psi * b
    assert comm_volume(psi, n, 3, grad_wire_bytes=b, param_wire_bytes=b) == float(want)


@given(st.integers(0, 10**9), worlds, st.sampled_from([0, 1, 2, 3]))
def test_padded_volume_is_what_a_ring_moves(psi, n, stage):
    phases = 3 if stage == 3 else 2
    got = comm_volume(psi, n, stage, padded=True)
    assert got == phases * (n - 1) * -(-psi // n) * 2  # N−1 chunks of ceil(Ψ/N) per phase, 2 bytes each
    if psi % n == 0:
        assert got == phases * (n - 1) * psi // n * 2


def test_fp32_gradients_on_the_wire_double_only_the_gradient_collectives():
    assert comm_volume(8000, 8, 1, grad_wire_bytes=4) == (4 + 2) * 7 * 1000
    assert comm_volume(8000, 8, 3, grad_wire_bytes=4) == (2 + 2 + 4) * 7 * 1000


def test_alpha_beta_time_for_seed001s_7b_all_reduce():
    psi = 7_000_000_000  # 14 GB of fp16 gradients
    nv = comm_time(psi, 8, 0, "nvlink4")
    assert nv.transfer == pytest.approx(2 * 14e9 * 7 / 8 / 450e9, rel=1e-12)  # 54.4 ms at 450 GB/s each way
    assert nv.latency == pytest.approx(8.4e-6 + 2 * 7 * 3.4e-6, rel=1e-12)  # NCCL's base + 2(N−1) ring steps
    ib = comm_time(psi, 8, 0, LINKS["ib_ndr"])
    assert ib.total == pytest.approx(2 * 14e9 * 7 / 8 / 50e9 + 8.4e-6 + 14 * 14e-6, rel=1e-12)


def test_buckets_repeat_latency_not_bytes():
    one, many = comm_time(10**9, 64, 3, "100gbe"), comm_time(10**9, 64, 3, "100gbe", buckets=48)
    assert many.transfer == one.transfer and many.latency == pytest.approx(48 * one.latency, rel=1e-12)


# ---------------------------------------------------------------- activations (seed 001, 7B: B=4, L=2048, d=4096, H=32)

SEED001_7B = ActivationShape(batch=4, seq_len=2048, d_model=4096, n_heads=32, n_layers=32)


def test_activation_memory_per_layer_as_seed001_computes_it():
    linear, attn = 14 * 4 * 2048 * 4096 * 2, 4 * 32 * 2048**2 * 2
    assert (linear, attn) == (939_524_096, 1_073_741_824)  # "≈ 940 MB", "≈ 1.07 GB"
    full = activation_memory(SEED001_7B, "none")
    assert full.stored_per_layer == linear + attn and round(full.total / GB) == 64  # "≈ 64 GB"


def test_selective_recompute_drops_the_attention_matrix():
    assert activation_memory(SEED001_7B, "selective").total == 32 * 14 * 4 * 2048 * 4096 * 2


def test_block_checkpointing_keeps_inputs_plus_one_layer():
    bld = 4 * 2048 * 4096
    got = activation_memory(SEED001_7B, "block").total
    assert got == (32 * bld + 14 * bld + 4 * 32 * 2048**2) * 2


# ---------------------------------------------------------------- presets

PRESET_TOTALS = [
    ("gpt2-small", 124_439_808),  # tied wte/lm_head counted once
    ("gpt2-medium", 354_823_168),
    ("gpt2-large", 774_030_080),
    ("gpt2-xl", 1_557_611_200),
    ("llama-7b", 6_738_415_616),  # untied lm_head
    ("zero-paper-7.5b", 7_500_000_000),  # the paper's Ψ
]


@pytest.mark.parametrize("name, total", PRESET_TOTALS)
def test_preset_totals_are_the_cited_counts(name, total):
    assert get_preset(name).total == total


def test_gpt3_is_the_175b_model():
    d, n = 12288, 96
    p = get_preset("gpt3-175b")
    assert p.total == 12 * n * d * d + 13 * n * d + (50257 + 2048) * d + 2 * d  # blocks + embeddings + ln_f
    assert round(p.total / 1e9) == 175


def test_largest_layer_is_the_biggest_module():
    assert get_preset("gpt2-small").largest_layer == 50257 * 768  # the token embedding
    assert get_preset("llama-7b").largest_layer == 32000 * 4096


def test_preset_through_the_formulas_gives_figure1():
    p = get_preset("zero-paper-7.5b")
    assert tuple(round(m.gb(), 1) for m in model_state_memory_by_stage(p.total, 64)) == (120.0, 31.4, 16.6, 1.9)


def test_every_preset_has_named_positive_layers():
    for p in PRESETS.values():
        assert p.layers and all(isinstance(name, str) and count > 0 for name, count in p.layers)
        assert len({name for name, _ in p.layers}) == len(p.layers)
    with pytest.raises(ValueError, match="unknown model"):
        get_preset("gpt5")


def test_conventions_table_prints_every_row():
    text = format_table(conventions_table(7.5e9, 64, largest_layer=117_187_500))
    assert "31.406" in text and "16.641" in text and "1.875" in text and "DeepSpeed" in text


def test_every_shardable_optimizer_has_its_state_counted_under_the_ledgers_names():
    from zerosim.optim import OPTIMIZERS

    for name, cls in OPTIMIZERS.items():
        if cls.elementwise:  # each with its defaults (SGD: no momentum, so no state)
            assert {kind for kind, _ in OPTIMIZER_STATES[name].states} == {f"optim:{s}" for s in cls().state_names}, (
                name
            )
