"""Checkpointing that composes with flash attention: the recompute builds no L×L buffer (issue 36, Must show 3);
torchtitan's op-level selective checkpointing keeps what its policy saves.

Llama 3.1 8B's shape (d = 4096, H = 32 query heads over G = 8 key/value heads of d_h = 128, F = 14,336, 32 blocks),
one sequence of L = 32,768 tokens (torchtitan's Table 2 run), bf16: every number below is a hand formula in B·L.
"""

import pytest

from zerosim.analysis.costs._measured import _activation_ledger, measure_activations
from zerosim.analysis.costs._validation_points import LLAMA_3_1_8B
from zerosim.models.gpt import strategy_options
from zerosim.models.hf._config import read_hf_config
from zerosim.models.llama._meta import MetaLlama

CONFIG = read_hf_config(LLAMA_3_1_8B, name="llama-3.1-8b")
B, L, D, H, G, DH, F, LAYERS = 1, 32768, 4096, 32, 8, 128, 14336, 32


def twin(strategy: str, seq_len: int = L, **kw):
    return MetaLlama.from_config(CONFIG, seq_len, **strategy_options(strategy), **kw)


def fused_flash_block(b: int, length: int) -> int:
    """One block's cache with flash attention (gqa_attention.py, swiglu.py): block input, Q, attention output and
    pre-FFN input (2·BLd each), K and V (2·BL·G·d_h each), three (B, L, F) tensors, two fp32 rstd and the LSE."""
    bl = b * length
    return 4 * 2 * bl * D + 2 * 2 * bl * G * DH + 3 * 2 * bl * F + 2 * 4 * bl + 4 * b * H * length


def test_full_checkpointing_with_flash_at_32k_holds_no_l_by_l_term():
    """At the moment the last block's recompute is complete (its cache rebuilt, nothing freed yet), the ledger holds
    the embedding's checkpoint (the ids, 8·BL), the other 31 blocks' inputs (2·BLd each) and that block's flash cache:
    the hand formula, to the byte, with no B·H·L² term anywhere."""
    ledger = _activation_ledger(twin("block-flash"), B, L, "bf16-mixed", True)
    rebuilt = [e for e in ledger.timeline if e.action == "alloc" and e.name == "block31.h"][-1]  # its recompute's
    expected = 8 * B * L + (LAYERS - 1) * 2 * B * L * D + fused_flash_block(B, L)
    assert rebuilt.kind_total == expected == 12_352_749_568
    # the whole pass holds nothing quadratic: its peak doubles exactly with L (every term is a multiple of B·L)
    half = measure_activations(twin("block-flash", L // 2), B, L // 2, "bf16-mixed").peak
    assert measure_activations(twin("block-flash"), B, L, "bf16-mixed").peak == 2 * half


def test_standard_attention_recompute_would_hold_the_l_by_l_scores():
    """The same strategy with standard attention ("block"): the recompute's cache adds P, B·H·L² 16-bit scores
    (68.7 GB at 32k), which is what block-flash removes. This is the test above failing on purpose."""
    ledger = _activation_ledger(twin("block"), B, L, "bf16-mixed", True)
    rebuilt = [e for e in ledger.timeline if e.action == "alloc" and e.name == "block31.h"][-1]
    flash_cache, p = fused_flash_block(B, L) - 4 * B * H * L, 2 * B * H * L * L  # standard keeps P, not the LSE
    assert rebuilt.kind_total == 8 * B * L + (LAYERS - 1) * 2 * B * L * D + flash_cache + p


def test_op_sac_keeps_every_other_product_and_the_attention_outputs():
    """torchtitan's op policy (models/meta/_sac.py): a Llama block's checkpoint holds its input, the outputs of q_proj,
    v_proj, gate_proj and down_proj (the 1st, 3rd, 5th and 7th products) and SDPA's output and logsumexp."""
    a = measure_activations(twin("op-sac", 4096), 2, 4096, "bf16-mixed")
    ledger = _activation_ledger(twin("op-sac", 4096), 2, 4096, "bf16-mixed", True)
    kept = {e.name[len("block0."):]: e.nbytes for e in ledger.timeline
            if e.action == "alloc" and e.name.startswith("block0.")}
    bl = 2 * 4096
    assert {k: kept[k] for k in ("block input", "q_proj out", "v_proj out", "gate_proj out", "down_proj out",
                                 "sdpa out", "sdpa lse")} == {
        "block input": 2 * bl * D, "q_proj out": 2 * bl * H * DH, "v_proj out": 2 * bl * G * DH,
        "gate_proj out": 2 * bl * F, "down_proj out": 2 * bl * D, "sdpa out": 2 * bl * H * DH,
        "sdpa lse": 4 * 2 * H * 4096}
    assert "k_proj out" not in kept and "up_proj out" not in kept and "o_proj out" not in kept  # recomputed
    assert a.peak > 0


def test_op_sac_is_modelled_on_the_twins_only():
    import numpy as np

    from zerosim.models._run import loss_and_grad
    from zerosim.models.llama import Llama

    model = Llama(vocab=8, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, seq_len=8, checkpoint="op-sac",
                  attention="flash")
    ids = np.zeros((1, 8), np.int64)
    with pytest.raises(ValueError, match="op-level selective checkpointing"):
        loss_and_grad(model, model.init_params(np.random.default_rng(0)), ids, ids, "fp32", checkpoint=True)
