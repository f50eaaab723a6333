"""fp8 beside tensor parallelism (issue 57, must-show 2): `--fp8-gemms` shortens a TP rank's GEMMs by the factor it
gives the same GEMM shapes at TP 1, the blocks' sequence-parallel all-gathers travel in float8 (torchao's Float8 TP
styles and Transformer Engine cast before they gather), and the "time from:" line says what was used.

Independent checks: the TP rank's GEMM shapes are written out by hand from Llama 3 70B's config (d 8192, 64 heads
over 8 key/value heads of 128, FFN 28,672) at TP 8; the same shape is timed through the unsplit (TP 1) path, a unit
holding just that weight; the all-gather's bytes are B·L·d·2·(T−1)/T by hand.
"""

import json
import subprocess
import sys

import pytest

from zerosim.analysis.costs._kernel_work import Work, unit_work
from zerosim.analysis.costs._tensor_work import tp_unit_work
from zerosim.analysis.timeline import Hardware
from zerosim.analysis.timeline._kernel_time import work_seconds
from zerosim.analysis.costs import parse_efficiency
from zerosim.models import Llama, MetaLlama

T, B, L = 8, 1, 8192
D, H, G, DH, FF = 8192, 64, 8, 128, 28672
GEMMS_FORWARD = {  # the TP-8 rank's forward GEMMs (M, N, K) per weight, by hand: column GEMMs' N, row GEMMs' K cut by T
    "attn": [(B * L, H * DH // T, D), (B * L, G * DH // T, D), (B * L, G * DH // T, D),  # q, k, v's rows
             (B * L, D, H * DH // T)],  # o_proj's columns
    "mlp": [(B * L, FF // T, D), (B * L, FF // T, D), (B * L, D, FF // T)],  # gate's and up's rows, down's columns
}


class OneWeight:
    """A unit holding one (out, in) weight and nothing else: the unsplit path's view of one GEMM shape."""

    def __init__(self, out, inp):
        self.param_shapes = {"w": (out, inp)}


def tp_units():
    from zerosim.parallel.tensor import TensorParallel

    full = MetaLlama(Llama(vocab=128256, d_model=D, n_heads=H, n_layers=1, seq_len=L, d_ff=FF, n_kv_heads=G,
                           head_dim=DH, attention="flash"))  # shapes only: no 70B-wide weights drawn
    local = TensorParallel(full, T, sequence_parallel=True).local
    return {u.name.split(".")[-1]: u for u in local.layers if u.name.startswith("block0.")}


@pytest.fixture(scope="module")
def rates():
    return parse_efficiency("compiled").rates("h100"), Hardware("h100", "nvlink4", "bf16").device


def gemm_seconds(work, r, dev) -> float:
    """The seconds of a Work's GEMMs alone (its attention and bytes left out), at fp8's or bf16's achieved peak."""
    only = Work(gemms=work.gemms, fp8=work.fp8)
    return work_seconds(only, r, dev.fp8 if work.fp8 else dev.fp16, dev.fp16, dev.hbm)


@pytest.mark.parametrize("kind", ["forward", "backward"])
@pytest.mark.parametrize("name", ["attn", "mlp"])
def test_fp8_shortens_each_tp_gemm_by_its_shapes_factor_at_tp_1(rates, name, kind):
    r, dev = rates
    unit = tp_units()[name]
    plain = tp_unit_work(unit, B, L, kind, "compiled", False, T, True)
    fp8 = tp_unit_work(unit, B, L, kind, "compiled", True, T, True)
    forward = GEMMS_FORWARD[name]
    want = forward if kind == "forward" else [g for m, n, k in forward for g in ((m, k, n), (n, k, m))]
    assert list(plain.gemms) == list(fp8.gemms) == want and fp8.fp8 and not plain.fp8
    tp_ratio = gemm_seconds(fp8, r, dev) / gemm_seconds(plain, r, dev)
    # the same shapes through the unsplit (TP 1) path: one unit per weight, unit_work with and without fp8
    at_tp_1 = [unit_work(OneWeight(n, k), (B, L, k), kind, "compiled", fp8=f) for m, n, k in forward for f in (0, 1)]
    one = sum(gemm_seconds(w, r, dev) for w in at_tp_1[1::2]) / sum(gemm_seconds(w, r, dev) for w in at_tp_1[::2])
    assert [g for w in at_tp_1[::2] for g in w.gemms] == want  # the TP 1 path makes these very GEMMs
    assert tp_ratio == pytest.approx(one, rel=1e-12)
    # by hand: the two formats' achieved peaks (wave quantisation is the shape's, the same in both), H100 SXM
    # 989.4 / 1978.9 TFLOP/s dense (datasheet), MAMF's bf16 and fp8 fractions (costs/_efficiency.py KERNEL_RATES)
    assert tp_ratio == pytest.approx(989.4e12 * r.gemm / (1978.9e12 * r.gemm_fp8), rel=1e-3)
    # fp8's casts are charged, nothing else moves: attention stays, the bytes grow by the casts
    assert (fp8.attention_fwd, fp8.attention_bwd) == (plain.attention_fwd, plain.attention_bwd)
    assert fp8.memory > plain.memory


def zerosim(*argv) -> dict:
    out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


SEVENTY = ["--model", "llama-3-70b", "--ranks", "16", "--gpus-per-node", "8", "--seq-len", "8192", "--batch", "1",
           "--checkpoint", "block-flash", "--precision", "bf16-mixed", "--comm", "fsdp", "--gpu", "h100-80gb",
           "--efficiency", "compiled", "--tp", "8", "--sp"]


@pytest.mark.slow  # two 70B steps at TP 8: ~4 s
def test_the_time_line_says_fp8_ran_beside_tp_and_the_step_shortened():
    plain, fp8 = (json.loads(zerosim("timeline", *SEVENTY, *x, "--json")) for x in ([], ["--fp8-gemms"]))
    assert fp8["compute_s"] < plain["compute_s"] and fp8["step_s"] < plain["step_s"]
    assert fp8["time_model"].endswith("fp8 GEMMs in the blocks; beside TP 8: the blocks' TP GEMMs in fp8, their "
                                      "sequence-parallel all-gathers in fp8 (torchao's Float8 TP, TE)")
    assert "fp8" not in plain["time_model"]
    # TP's all-gathers in float8: half the 16-bit bytes on NVLink, so less time on the TP stream
    assert fp8["by_purpose"]["tensor parallel"]["seconds"] < plain["by_purpose"]["tensor parallel"]["seconds"]


def test_the_blocks_all_gathers_carry_one_byte_an_element():
    """KernelTimes.call_bytes halves a block's SP all-gather (bf16 on the wire, e4m3 in torchao / TE) and nothing
    else: not the reduce-scatters, not the head's gather, not without fp8."""
    from zerosim.analysis.costs import tensor_parallel
    from zerosim.analysis.timeline import TimeModel
    from zerosim.cluster import Call

    full = MetaLlama(Llama(vocab=128256, d_model=D, n_heads=H, n_layers=1, seq_len=L, d_ff=FF, n_kv_heads=G,
                           head_dim=DH, attention="flash"))
    model, _ = tensor_parallel(full, T, True)
    hw = Hardware("h100", "nvlink4", "bf16")
    sent = B * L * D * 2 * (T - 1) / T  # by hand: a rank sends (T-1)/T of the gathered (B, L, d) bf16 tensor
    calls = {
        "block0.attn f (SP all-gather)": ("all_gather", sent / 2),
        "block0.mlp g (SP reduce-scatter) backward": ("all_gather", sent / 2),
        "block0.attn g (SP reduce-scatter)": ("reduce_scatter", sent),
        "head f (SP all-gather)": ("all_gather", sent),  # the output layer stays 16-bit (torchtitan's filter_fqns)
    }
    fp8 = TimeModel(parse_efficiency("compiled"), fp8_gemms=True).costs(model, (B, L), hw)
    bf16 = TimeModel(parse_efficiency("compiled")).costs(model, (B, L), hw)
    for tag, (collective, want) in calls.items():
        call = Call(0, collective, "", T, B * L * D, "bf16", tag=tag, purpose="tensor parallel", group="tp")
        assert fp8.call_bytes(call, sent) == want, tag
        assert bf16.call_bytes(call, sent) == sent
