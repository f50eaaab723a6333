"""The efficiency model: kernel rates from their sources, the work of a unit by kernel class, what a compute costs,
model FLOPs (MFU) and the allocator's reserve. Every expected value is written from its source or by hand."""

import math

import pytest

from zerosim.analysis.costs._calibration import FRAMEWORK
from zerosim.analysis.costs._efficiency import KERNEL_RATES, PRESETS, parse_efficiency, wave_efficiency
from zerosim.analysis.costs._kernel_work import _unit_work, loss_work, unit_work
from zerosim.analysis.costs._throughput import mfu, model_flops_per_token
from zerosim.analysis.costs._reserve import reserved
from zerosim.models.hf._config import read_hf_config, shipped_config
from zerosim.models.llama._block import LlamaBlock

# (device, field, measured, peak): each rate is measured / peak, rounded to 3 places
SOURCES = [
    ("a100", "gemm", 271.2, 312),  # MAMF table (stas00/ml-engineering@744d01e): A100 SXM
    ("h100", "gemm", 794.5, 989),  # H100 SXM ("H200 is the same")
    ("h200", "gemm", 794.5, 989),
    ("h100", "gemm_fp8", 1402.6, 1979),  # the FP8 table's H100 SXM
    ("h200", "gemm_fp8", 1453.4, 1979),  # ... H200 SXM
    ("a100", "hbm", 1732, 2039),  # gpu-benches@1c36d50 gpu-stream "scale", a100_80, full occupancy
    ("a100-40gb", "hbm", 1381, 1555),  # ... a100_40
    ("h100", "hbm", 1704, 2000),  # ... h100_pcie (no SXM file: its fraction is taken for the SXM)
    ("h200", "hbm", 3165, 4800),  # ... h200
    ("a100", "attention_fwd", 73, 100),  # FlashAttention-2's abstract: "50-73% ... on A100", the forward at the top
    ("a100", "attention_bwd", 50, 100),  # ... the backward at the bottom
    ("h100", "attention_fwd", 35, 100),  # FlashAttention-3's abstract: FA-2 reaches "only 35% utilization on H100"
]


@pytest.mark.parametrize("device, field, measured, peak", SOURCES)
def test_kernel_rates_are_their_sources(device, field, measured, peak):
    assert getattr(KERNEL_RATES[device], field) == round(measured / peak, 3)


def test_wave_quantisation():
    assert wave_efficiency(16384, 4096, 132) == 4096 / (32 * 132)  # 128·32 tiles, 32 waves of 132 SMs
    assert wave_efficiency(1, 1, 132) == 1 / 132  # one tile: one SM of 132 busy
    assert wave_efficiency(128 * 12, 128 * 11, 132) == 1.0  # 132 tiles: one full wave


def test_presets_and_overrides():
    assert parse_efficiency("peak") is None  # the datasheet roofline
    assert parse_efficiency("0.45").flat == 0.45
    e = parse_efficiency("eager:gemm=0.7,hbm=0.8,framework=0.9")
    assert (e.framework, e.rates("h100").gemm, e.rates("h100").hbm, e.rates("h100").attention_fwd) == (0.9, 0.7, 0.8,
                                                                                                       0.35)
    assert PRESETS["eager"].framework == FRAMEWORK["eager"] and PRESETS["compiled"].kernels == "compiled"
    assert "calibrated" in PRESETS["eager"].describe() and "user-set" in parse_efficiency("0.5").describe()


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("text, words", [
    ("fast", "choose a preset"), ("1.5", "must lie in [0.001, 1]"), ("0", "must lie in [0.001, 1]"),
    ("eager:gemm", "is not FIELD=VALUE"), ("eager:speed=0.5", "is not FIELD=VALUE"),
    ("eager:gemm=x", "is not a number"), ("eager:hbm=2", "must lie in [0.001, 1]"),
])
def test_bad_efficiencies_are_named(text, words):
    with pytest.raises(ValueError, match=None) as e:
        parse_efficiency(text)
    assert words in str(e.value)


def llama_3_8b_block():
    return LlamaBlock(4096, 32, 8, 128, 14336, "flash")


def test_a_llama_blocks_work_by_class():
    B, L, T = 2, 8192, 2 * 8192
    fwd = unit_work(llama_3_8b_block(), (B, L, 4096), "forward", "eager")
    # the seven products, (M, N, K) = (T, out, in), in the weights' order
    assert fwd.gemms == ((T, 4096, 4096), (T, 1024, 4096), (T, 1024, 4096), (T, 4096, 4096), (T, 14336, 4096),
                         (T, 14336, 4096), (T, 4096, 14336))
    assert fwd.attention_fwd == 4 * B * 32 * L * L * 128 / 2 and fwd.attention_bwd == 0  # causal: half the tiles
    # eager bytes per token: RMSNorm 36d twice, rotary 20·(H + G)·d_h, repeat_kv's two copies and the output's one
    # counted at 4·H·d_h each, residual adds 6d twice, SwiGLU 10F
    per_token = 2 * 36 * 4096 + 20 * (4096 + 1024) + 3 * 4 * 4096 + 2 * 6 * 4096 + 10 * 14336
    assert fwd.memory == per_token * T == 638_976 * T
    bwd = unit_work(llama_3_8b_block(), (B, L, 4096), "backward", "eager")
    assert len(bwd.gemms) == 14 and bwd.attention_bwd == 2.5 * fwd.attention_fwd and bwd.memory == 2 * fwd.memory
    compiled = unit_work(llama_3_8b_block(), (B, L, 4096), "forward", "compiled")
    assert compiled.memory == (2 * 4 * 4096 + 4 * (4096 + 1024) + 3 * 4 * 4096 + 2 * 6 * 4096 + 6 * 14336) * T
    # op-level selective checkpointing's recompute: no attention, only the products whose outputs were not kept
    again = unit_work(llama_3_8b_block(), (B, L, 4096), "recompute", "eager", recompute_weights={"k_proj"})
    assert again.gemms == ((T, 1024, 4096),) and again.attention_fwd == 0 and again.memory == fwd.memory


def test_the_losses_bytes():
    assert loss_work(100, 1000, "eager").memory == 44 * 100 * 1000  # .float(), log_softmax, its backward, the cast
    assert loss_work(100, 1000, "fused-linear").memory == 8 * 100 * 1000
    with pytest.raises(ValueError, match="unknown loss"):
        loss_work(1, 1, "mystery")


def _block_forward_by_hand(device: str, hbm: float) -> float:
    """Seconds of a Llama-3-8B-shaped block's forward on 8,192 tokens (flash attention), eager, on an H100-class GPU
    (989.4 TFLOP/s bf16, 132 SMs) with HBM at `hbm` B/s: its seven GEMMs, attention and elementwise bytes, each at
    KERNEL_RATES[device]'s rate, by hand from the shapes (not through kernel_work)."""
    r, peak, T = KERNEL_RATES[device], 989.4e12, 8192
    gemm = sum(2 * T * o * i / (peak * r.gemm * wave_efficiency(T, o, 132))
               for o, i in ((4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                            (4096, 14336)))
    attention = 4 * 32 * T * T * 128 / 2 / (peak * r.attention_fwd)
    memory = 638_976 * T / (hbm * r.hbm)
    return (gemm + attention + memory) / FRAMEWORK["eager"]


def test_a_compute_event_costs_its_classes_at_their_rates():
    """A Llama block's forward on an H100, by hand from its shapes and KERNEL_RATES (not through kernel_work)."""
    from zerosim.analysis.timeline import Hardware
    from zerosim.analysis.timeline._kernel_time import KernelTimes
    from zerosim.cluster import Compute
    from zerosim.models.llama import Llama
    from zerosim.models.llama._meta import MetaLlama

    model = MetaLlama(Llama(128256, 4096, 32, 2, 8192, d_ff=14336, n_kv_heads=8, attention="flash"))
    hw = Hardware("h100", "nvlink4", "bf16")
    kt = KernelTimes(model, (1, 8192), PRESETS["eager"], hw)
    ev = Compute(0, 1, 0, 1, "block0", "forward", 0, 0, 0)
    peak = 989.4e12
    assert kt.compute(ev) == pytest.approx(_block_forward_by_hand("h100", 3.35e12), rel=1e-12)
    # a counts-only model: its event's FLOPs, all of them GEMM
    from zerosim.models.meta import MetaModel

    counts = KernelTimes(MetaModel.from_params(10**9, 4), None, PRESETS["compiled"], hw)
    ev = Compute(0, 1, 0, 1, "layer.1", "forward", 10**15, 0, 0)
    assert counts.compute(ev) == pytest.approx(1e15 / (peak * 0.803) / FRAMEWORK["compiled"], rel=1e-12)


def test_a_units_seconds_are_shared_across_plans_configurations_and_kept_apart_by_device():
    """The planner's configurations share each unit's work's seconds (`work_seconds`, remembered across KernelTimes):
    a second KernelTimes of the same model, micro-batch and device finds them, and an H200 (the H100's GEMM peak and
    rates, its own HBM: 4.8 TB/s at 0.659) gets its own, by hand, after the H100's are kept."""
    from zerosim.analysis.timeline import Hardware
    from zerosim.analysis.timeline._kernel_time import KernelTimes, work_seconds
    from zerosim.cluster import Compute
    from zerosim.models.llama import Llama
    from zerosim.models.llama._meta import MetaLlama

    model = MetaLlama(Llama(128256, 4096, 32, 2, 8192, d_ff=14336, n_kv_heads=8, attention="flash"))
    ev = Compute(0, 1, 0, 1, "block0", "forward", 0, 0, 0)
    h100 = KernelTimes(model, (1, 8192), PRESETS["eager"], Hardware("h100", "nvlink4", "bf16")).compute(ev)
    hits = work_seconds.cache_info().hits
    again = KernelTimes(model, (1, 8192), PRESETS["eager"], Hardware("h100", "nvlink4", "bf16")).compute(ev)
    assert again == h100 and work_seconds.cache_info().hits == hits + 1
    h200 = KernelTimes(model, (1, 8192), PRESETS["eager"], Hardware("h200", "nvlink4", "bf16")).compute(ev)
    assert h200 == pytest.approx(_block_forward_by_hand("h200", 4.8e12), rel=1e-12) and h200 != h100


def test_fp8_needs_fp8_units():
    from zerosim.analysis.timeline import Hardware
    from zerosim.analysis.timeline._kernel_time import KernelTimes
    from zerosim.models.meta import MetaModel

    with pytest.raises(ValueError, match="no fp8 tensor cores"):
        KernelTimes(MetaModel.from_params(100, 1), None, PRESETS["eager"], Hardware("a100"), fp8_gemms=True)


def test_model_flops_are_torchtitans():
    """torchtitan's benchmarks/llama3_h100_202412_torchtitan.md: Llama 3.1 8B on 8 H100s "achieves 33% to 39% MFU"
    (eager 5,762 and compiled 6,667 tokens/s per GPU, measured against the SXM's 989 TFLOPS)."""
    config = read_hf_config(shipped_config("llama-3-8b"))
    per_token = model_flops_per_token(config, 8192)
    assert per_token == 6 * (8_030_261_248 - 128256 * 4096) + 12 * 32 * 32 * 128 * 8192 == 57_914_449_920
    assert (math.floor(100 * mfu(5762, config, 8192, 989e12)), math.floor(100 * mfu(6667, config, 8192, 989e12))) == (
        33, 39)


def test_reserved_is_allocated_plus_the_reserve():
    assert reserved(100 * 2**30) == math.floor(105 * 2**30)  # the 5 % default
    assert reserved(1000, 0.0) == 1000
    with pytest.raises(ValueError, match="fraction of the allocated peak"):
        reserved(1, 1.0)


def test_a_units_work_is_remembered_by_all_it_reads():
    # unit_work remembers its answers by the unit's parameters and attention (_kernel_work.py `_WORK`): every answer
    # must be the one computed afresh, alike blocks (by name only: block0, block7) must share one, and units whose
    # parameters have the same shapes but whose attention differs (32 heads of 128 against 64 of 64, flash against
    # standard) must not.
    units = [LlamaBlock(4096, 32, 8, 128, 14336, "standard", name="block0"),
             LlamaBlock(4096, 32, 8, 128, 14336, "standard", name="block7"),
             LlamaBlock(4096, 64, 16, 64, 14336, "standard", name="block0"),
             LlamaBlock(4096, 32, 8, 128, 14336, "flash", name="block0")]
    assert len({tuple(u.param_shapes.items()) for u in units}) == 1
    for B, kind, kernels, again in [(1, "forward", "eager", None), (2, "backward", "compiled", None),
                                    (1, "recompute", "eager", None), (1, "recompute", "eager", {"k_proj"})]:
        works = [unit_work(u, (B, 2048, 4096), kind, kernels, recompute_weights=again) for u in units]
        fresh = [_unit_work(u, (B, 2048, 4096), kind, kernels, False, again) for u in units]
        assert works == fresh
        assert works[0] is works[1]
        assert len({works[0], works[2], works[3]}) == (3 if again is None else 1)  # (a SAC recompute: no attention)
