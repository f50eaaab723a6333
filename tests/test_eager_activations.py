"""Eager activations against torch's own accounting (the parity lane: needs torch, skipped without it).

The same step runs twice. torch: a Llama-3-8B-shaped decoder (d 4096, 32 heads over 8 key/value heads, SwiGLU of
14,336, vocabulary 128,256; 2 or 4 blocks) written op by op as HF Transformers' modeling_llama.py writes it
(LlamaRMSNorm with its fp32 upcast, rotate_half rotary, repeat_kv, scaled_dot_product_attention, LlamaMLP), under
FSDP2 (fully_shard on the embedding, each block and the head; MixedPrecisionPolicy bf16 params, fp32 reduce) on a
fake process group of 8 ranks, in FakeTensorMode on the CPU, with AdamW and torchtitan's loss
(cross_entropy(logits.float()), the logits deleted before backward); torch.distributed._tools' FSDPMemTracker
counts every tensor. zerosim: the same shapes as a MetaLlama with kernels="eager" and loss="eager" (models/
eager_saved.py, models/meta/_loss_peak.py), ZeRO-3 over 8 meta ranks with FSDP's schedule.

Checked, at L = 2048 and 4096, without checkpointing and with full block checkpointing (torch.utils.checkpoint,
non-reentrant; zerosim's "block-flash"):
  * each block's saved activations: the tracker's activation bytes after forward, 4 blocks minus 2, over 2, equal
    zerosim's ledger the same way (to 0.1 %: the tables list every saved tensor);
  * the step's peak: the tracker's peak total against zerosim's ledger read as FSDP2 holds model states
    (analysis/costs/_fsdp2_view.py), within PEAK_REL.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")

V, D, H, G, FF = 128256, 4096, 32, 8, 14336  # Llama 3 8B's shape
DH = D // H
GIB = 1 << 30
BLOCK_REL = 1e-3  # the tables name every saved tensor: what is left is the tracker's few bytes of rng state
PEAK_REL = 0.10  # the issue's target; measured: within 4 % (the docs' table)
STATES_REL = 0.01  # both 16Ψ/N; the shards' padding differs (zerosim pads the flat buffer, FSDP2 each parameter)
CASES = [(2048, False), (2048, True), (4096, False), (4096, True)]


def _torch_model(n_layers: int, checkpointing: bool):
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    class RMSNorm(nn.Module):  # HF LlamaRMSNorm
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

        def forward(self, x):
            dtype, h = x.dtype, x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(dtype)

    def rotate_half(x):
        return torch.cat((-x[..., DH // 2:], x[..., : DH // 2]), dim=-1)

    def repeat_kv(x, n):  # HF's: expand, then reshape (a copy)
        b, g, length, d = x.shape
        return x[:, :, None].expand(b, g, n, length, d).reshape(b, g * n, length, d)

    class Block(nn.Module):  # HF LlamaDecoderLayer with its attention (SDPA) and LlamaMLP
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(D), RMSNorm(D)
            self.q_proj, self.o_proj = nn.Linear(D, H * DH, bias=False), nn.Linear(H * DH, D, bias=False)
            self.k_proj, self.v_proj = nn.Linear(D, G * DH, bias=False), nn.Linear(D, G * DH, bias=False)
            self.gate_proj, self.up_proj = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
            self.down_proj = nn.Linear(FF, D, bias=False)

        def body(self, x, cos, sin):
            B, L, _ = x.shape
            y = self.input_layernorm(x)
            q = self.q_proj(y).view(B, L, H, DH).transpose(1, 2)
            k = self.k_proj(y).view(B, L, G, DH).transpose(1, 2)
            v = self.v_proj(y).view(B, L, G, DH).transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            o = F.scaled_dot_product_attention(q, repeat_kv(k, H // G), repeat_kv(v, H // G), is_causal=True)
            h = x + self.o_proj(o.transpose(1, 2).reshape(B, L, H * DH))
            z = self.post_attention_layernorm(h)
            return h + self.down_proj(F.silu(self.gate_proj(z)) * self.up_proj(z))

        def forward(self, x, cos, sin):
            return checkpoint(self.body, x, cos, sin, use_reentrant=False) if checkpointing else self.body(x, cos, sin)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.lm_head = RMSNorm(D), nn.Linear(D, V, bias=False)

        def forward(self, x):
            return self.lm_head(self.norm(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens, self.layers, self.head = nn.Embedding(V, D), nn.ModuleList(Block() for _ in range(
                n_layers)), Head()

        def forward(self, ids, cos, sin):
            x = self.embed_tokens(ids)
            for block in self.layers:
                x = block(x, cos, sin)
            return self.head(x)

    return Model()


def tracker_step(n_layers: int, seq_len: int, checkpointing: bool) -> tuple:
    """(activation bytes after forward, peak total bytes, model-state bytes after the optimizer's step) of one
    FSDP2 step that FSDPMemTracker counted."""
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import _RefType  # noqa: F401 (the categories' base)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cpu", (8,))
    with FakeTensorMode():
        model = _torch_model(n_layers, checkpointing)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for unit in (model.embed_tokens, *model.layers, model.head):
            fully_shard(unit, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        ids, labels = torch.randint(0, V, (1, seq_len)), torch.randint(0, V, (1, seq_len))
        inv = 1.0 / (500000.0 ** (torch.arange(0, DH, 2).float() / DH))
        angles = torch.outer(torch.arange(seq_len).float(), inv)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)

        def step(tracker=None):
            pred = model(ids, cos, sin)
            snap = tracker.get_tracker_snapshot("current") if tracker is not None else None
            loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten())
            del pred  # torchtitan's train step frees the logits before backward
            loss.backward()
            opt.step()
            states = tracker.get_tracker_snapshot("current") if tracker is not None else None
            opt.zero_grad()
            return snap, states

        step()  # the optimizer's state exists from here on, as in every step but the first
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((ids, labels))
        with tracker:
            after, states = step(tracker)
        peak = tracker.get_tracker_snapshot("peak")
    (dev,) = after.keys()
    activations = sum(v for k, v in after[dev].items() if getattr(k, "value", None) == "Activation")
    logits = seq_len * V * 2  # the bf16 logits the model returned: alive after forward, not saved by any op
    model_states = sum(v for k, v in states[dev].items()
                       if getattr(k, "value", None) in ("Sharded Param", "Sharded Grad", "OptState"))
    return activations - logits, peak[dev]["Total"], model_states


def zerosim_step(n_layers: int, seq_len: int, checkpointing: bool) -> tuple:
    """(activation bytes saved when the loss starts, ZeRO-3 peak, the peak as FSDP2 holds model states, the resting
    model states FSDP2 holds: fp32 master, fp32 gradient shard, Adam's m and v)."""
    from zerosim.analysis.costs._fsdp2_view import fsdp2_peak
    from zerosim.analysis.costs._measured import measure_stage
    from zerosim.models.gpt import strategy_options
    from zerosim.models.llama import Llama
    from zerosim.models.llama._meta import MetaLlama
    from zerosim.parallel.data._comm_schedule import get_comm_schedule
    from zerosim.precision import MixedPrecision

    strategy = strategy_options("block-flash" if checkpointing else "flash")
    model = MetaLlama(Llama(V, D, H, n_layers, seq_len, d_ff=FF, n_kv_heads=G, **strategy), kernels="eager",
                      loss="eager")
    precision = MixedPrecision(compute="bf16", master="fp32", reduce="fp32")
    row, cluster, _ = measure_stage(model, 8, 3, "adamw", precision, micro_batch=(1, seq_len),
                                    comm=get_comm_schedule("fsdp"))
    ledger, saved = cluster.ranks[0].ledger, 0
    for e in ledger.timeline:
        if e.action == "alloc" and e.name.startswith("loss."):
            break
        if e.kind == "activations":
            saved = e.kind_total
    fsdp2_states = sum(v for k, v in row["resting"].items() if k != "params")  # no 16-bit shard (fsdp2_view.py)
    return saved, row["peak"], fsdp2_peak(ledger)[0], fsdp2_states


@pytest.fixture(scope="module")
def fake_world():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=8, store=FakeStore())
    yield
    dist.destroy_process_group()


@pytest.mark.slow  # eight fake FSDP2 steps of 8B-wide blocks and their meta twins: ~40 s
@pytest.mark.parametrize("seq_len, checkpointing", CASES)
def test_eager_block_activations_and_peak_match_fsdp_mem_tracker(fake_world, seq_len, checkpointing):
    t2, _, _ = tracker_step(2, seq_len, checkpointing)
    t4, tracker_peak, tracker_states = tracker_step(4, seq_len, checkpointing)
    z2, _, _, _ = zerosim_step(2, seq_len, checkpointing)
    z4, zero3_peak, fsdp2, fsdp2_states = zerosim_step(4, seq_len, checkpointing)
    per_block_tracker, per_block_zerosim = (t4 - t2) / 2, (z4 - z2) / 2
    assert per_block_zerosim == pytest.approx(per_block_tracker, rel=BLOCK_REL)
    assert fsdp2 == pytest.approx(tracker_peak, rel=PEAK_REL)
    # model states after the step: FSDP2's fp32 sharded params and grads and AdamW's state, 16Ψ/N (padding aside)
    assert fsdp2_states == pytest.approx(tracker_states, rel=STATES_REL)
    # zerosim's own ZeRO-3 (DeepSpeed's states: a 16-bit shard and a resting gradient shard) holds more, never less
    assert zero3_peak >= fsdp2
