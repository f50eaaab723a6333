"""`--kernels eager`: what PyTorch eager's autograd keeps, by name (models/meta/_eager.py); the loss's real peak
(models/meta/_loss_peak.py); a ZeRO-3 ledger read as FSDP2 holds model states (costs/_fsdp2_view.py). Hand formulas; the
same tables against torch's own tracker are in tests/test_eager_activations.py (parity lane)."""

import json

import numpy as np
import pytest

from zerosim.analysis.costs._fsdp2_view import fsdp2_peak
from zerosim.cli.main import main
from zerosim.cluster import MemoryLedger
from zerosim.models.gpt._block import TransformerBlock
from zerosim.models.llama._attention import LlamaAttention
from zerosim.models.llama._block import LlamaBlock
from zerosim.models.meta._eager import eager_spec
from zerosim.models.meta._loss_peak import fused_linear_rows, loss_spec
from zerosim.precision import get_format

BF16 = get_format("bf16")


def nbytes(spec: dict) -> int:
    return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in spec.values())


def test_an_eager_llama_block_keeps_213_128_bytes_a_token():
    """Llama 3 8B (d 4096, H 32, G 8, d_h 128, F 14,336): 16·d (two norms: fp32 input, bf16 normalized, bf16 output)
    + 8·H·d_h (q rotated, k and v repeated to H heads, SDPA's output) + 8·F (gate, silu(gate), up, h) + 8 (two fp32
    rstd) + 4·H (the logsumexp) bytes a token: 1.73 times the fused block's 123,016."""
    block = LlamaBlock(4096, 32, 8, 128, 14336, "flash")
    eager = nbytes(eager_spec(block)((1, 1, 4096), BF16))
    assert eager == 16 * 4096 + 8 * 32 * 128 + 8 * 14336 + 8 + 4 * 32 == 213_128
    fused = nbytes(block.saved_spec((1, 1, 4096), BF16))
    assert fused == 2 * (2 * 4096 + 2 * 32 * 128 + 2 * 8 * 128 + 3 * 14336) + 8 + 4 * 32 == 123_016
    assert round(eager / fused, 2) == 1.73


def test_multi_head_and_hf_eager_attention():
    mha = LlamaAttention(256, 4, 4, 64, "flash")  # G = H: repeat_kv copies nothing; SDPA keeps k rotated and v
    spec = eager_spec(mha)((2, 8, 256), BF16)
    assert "k rotated" in spec and "v" in spec and "k repeated" not in spec
    hf = LlamaAttention(256, 4, 2, 64, "standard")  # HF's eager attention: fp32 softmax and its bf16 copy, and the
    spec = eager_spec(hf)((2, 8, 256), BF16)  # output copied for o_proj
    assert spec["softmax fp32"] == ((2, 4, 8, 8), np.dtype(np.float32)) and spec["softmax"][0] == (2, 4, 8, 8)
    assert spec["attention output"][0] == (2, 8, 256) and "sdpa out" not in spec


def test_an_eager_gpt_block():
    """LayerNorm (its input, mean and rstd), c_attn's input and output (q, k, v are views), SDPA's output (c_proj's
    input is its view) and logsumexp, then the second LayerNorm, fc's output (GELU's input) and GELU's output:
    2·(d + d + 3d + d + d + d + 4d + 4d) + 4·4 + 4·H bytes a token."""
    block = TransformerBlock(768, 12, "gelu", "flash")
    assert nbytes(eager_spec(block)((1, 1, 768), BF16)) == 2 * 16 * 768 + 16 + 4 * 12


def test_the_losss_peak_by_variant():
    T, V, d = 16384, 128256, 4096
    assert nbytes(loss_spec("probabilities", 2, 8192, V, d)) == 4 * T * V + 8 * T
    assert nbytes(loss_spec("eager", 2, 8192, V, d)) == 12 * T * V + 8 * T  # log_softmax, nll's and its gradients
    assert nbytes(loss_spec("chunked", 2, 8192, V, d)) == 4 * T * V + 8 * (T // 8) * V + 8 * T
    assert fused_linear_rows(T, V, d) == 512  # ceil(V/d) = 32 chunks of T: 512 rows, a power of two already
    assert fused_linear_rows(16000, V, d) == 512  # ceil(16000/32) = 500 -> 512
    assert nbytes(loss_spec("fused-linear", 2, 8192, V, d)) == 8 * 512 * V + 8 * T
    assert round(12 * T * V / 2**30, 1) == 23.5  # the eager loss at 16k tokens: 23.5 GiB, 3x the probabilities'


def test_fsdp2_view_of_a_hand_made_ledger():
    """A 16-bit shard of 10 and a gradient shard of 40 (the ZeRO-3 resting states FSDP2 does not hold), a master of
    40, a unit's gathered params of 100, its gradients of 60 (reduced: FSDP2's gradient shard grows by all 40, it
    being the only unit), activations of 300 freed during backward."""
    ledger = MemoryLedger(0)
    for name, size, kind in (("params", 10, "params"), ("grads", 40, "grads"), ("master", 40, "master")):
        ledger.alloc(name, (size,), np.uint8, kind)
    act = ledger.alloc("block0.x", (300,), np.uint8, "activations")
    gathered = ledger.alloc("layer 1 params (gathered)", (100,), np.uint8, "params")
    act.free()
    grads = ledger.alloc("layer 1 grads", (60,), np.uint8, "grads")
    grads.free()  # reduce-scattered
    gathered.free()
    peak, at = fsdp2_peak(ledger)
    assert ledger.peak() == 10 + 40 + 40 + 300 + 100 == 490
    assert (peak, at) == (440, {"master": 40, "activations": 300, "params": 100})  # without the two resting shards


def test_memory_keeps_eager_activations_by_default(capsys):
    argv = ["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "4096", "--batch", "1", "--checkpoint",
            "flash", "--json"]
    assert main(argv) == 0
    eager = json.loads(capsys.readouterr().out)
    assert main(argv + ["--kernels", "fused"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert eager["activations"]["per_block_total"] == 213_128 * 4096  # the table above, by name
    assert fused["activations"]["per_block_total"] == 123_016 * 4096
    assert "norm1 input fp32" in eager["activations"]["per_block"] and "Q" in fused["activations"]["per_block"]


@pytest.mark.bad_input("command line")
def test_kernels_need_activations(capsys):
    assert main(["memory", "--model", "llama-3-8b", "--kernels", "eager"]) == 2
    assert "--kernels describe activations: add --seq-len" in capsys.readouterr().err
