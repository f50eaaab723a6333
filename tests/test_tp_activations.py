"""A TP rank's activations in two layouts (issue 57, must-show 4): Megatron's (each column GEMM keeps its input's
sequence shard) equal to Korthikanti et al.'s Table 2, and torch DTensor's as torchtitan runs it (the all-gathered
input kept, eager's extra tensors) within ±10 % of torch 2.13's MemTracker for a Llama-3-8B block at L = 8192 under
torchtitan's TP + SP plan at TP 2, 4 and 8.

The parity lane (torch installed, `pip install -e '.[parity]'`; skipped without it) builds the block as torchtitan
writes it (a33d0e3, torchtitan/models/llama3/model/model.py: nn.RMSNorm, wq/wk/wv, complex rotary, SDPA with
enable_gqa, wo; FeedForward w2(silu(w1 x)·w3 x)), parallelizes it with torchtitan's plan (infra/parallelize.py
`apply_tp`: SequenceParallel norms, PrepareModuleInput all-gathers, ColwiseParallel wq/wk/wv/w1/w3,
RowwiseParallel(Shard(1)) wo/w2) on a fake process group, runs one and two blocks forward in FakeTensorMode on the
CPU and reads torch.distributed._tools.mem_tracker.MemTracker's activation bytes: a block is two blocks minus one.
zerosim: the same block's meta twin (kernels="eager", layout "torchtitan") under ZeRO-3 with TP, the ledger's
activations when the loss starts, two blocks minus one.

The default lane checks zerosim's block against the numbers the parity lane measured with torch 2.13.0 (CPU wheel),
written down below, and the eager table against its formula by hand.
"""

import pytest

D, H, G, FF, V = 4096, 32, 8, 14336, 128256  # Llama 3 8B
DH, L, MIB = D // H, 8192, 1 << 20
TOLERANCE = 0.10  # the issue's ±10 %; measured: equal to the byte (the table names every tensor autograd saves)
# torch 2.13.0's MemTracker, one block (two blocks' activations minus one block's), MiB, as the parity lane measured:
TORCH_MIB = {2: 1857.0625 - 944.53125, 4: 1056.53125 - 536.265625, 8: 656.265625 - 332.1328125}


def zerosim_block(tp: int, layout: str, kernels: str = "eager") -> float:
    """Bytes of one Llama-3-8B block's activations on one TP rank (two blocks' minus one's), B = 1, L = 8192."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.models import Llama, MetaLlama

    def saved(n):
        model = MetaLlama(Llama(V, D, H, n, L, d_ff=FF, n_kv_heads=G, attention="flash"), kernels=kernels)
        _, cluster, _ = measure_stage(model, tp, 3, "adamw", "bf16-mixed", micro_batch=(1, L), tp=tp, sp=True,
                                      gpus_per_node=tp, layout=layout)
        out = 0
        for e in cluster.ranks[0].ledger.timeline:
            if e.action == "alloc" and e.name.startswith("loss"):
                break
            if e.kind == "activations":
                out = e.kind_total
        return out

    return saved(2) - saved(1)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_torchtitans_layout_equals_what_torch_measured(tp):
    got = zerosim_block(tp, "torchtitan") / MIB
    assert got == pytest.approx(TORCH_MIB[tp], rel=TOLERANCE)
    assert got == TORCH_MIB[tp]  # to the byte, in fact
    # and its formula, by hand (parallel/tensor torchtitan_eager_layer_bytes)
    c = tp  # sequence parallelism: the norms on L/T tokens
    norms = 2 * (8 * L * D + 4 * L) / c  # fp32 input and x·rstd, the rstd: per norm
    gathered = 2 * 2 * L * D  # the attention's and the FFN's all-gathered inputs
    attention = 2 * (2 * L * H * DH / tp) + 2 * (2 * L * G * DH / tp) + 4 * H / tp * L  # q, out; k, v; lse
    ffn = 4 * 2 * L * FF / tp  # gate, silu(gate), up, h
    assert got * MIB == norms + gathered + attention + ffn


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_megatrons_layout_keeps_the_shard_and_is_smaller(tp):
    """Megatron's layout (the library's default) keeps each column GEMM's input as its sequence shard: 2·L·d/t where
    torch's keeps 2·L·d, twice a block (Korthikanti et al.'s "QKV input" and "MLP input" under SP)."""
    megatron = zerosim_block(tp, "megatron", kernels="fused")
    titan = zerosim_block(tp, "torchtitan", kernels="fused")
    assert titan - megatron == 2 * (2 * L * D - 2 * L * D / tp)


def test_megatrons_layout_equals_korthikantis_table_2():
    """A GPT TP rank's ledger per layer with SP = sbh(34/t + 5as/(ht)) less dropout's masks and output plus the
    norms' fp32 statistics (zerosim keeps no dropout), at t = 2, 4, 8: Table 2's row written out by hand here."""
    from zerosim.analysis.reports._tensor import tp_activations
    from zerosim.models import GPT, MetaGPT

    s, b, h, a = 256, 2, 64, 8
    for t in (2, 4, 8):
        model = MetaGPT(GPT(vocab=256 * t, d_model=h, n_heads=a, n_layers=2, seq_len=s))
        got = tp_activations(model, (b, s), "none", "bf16-mixed", t, True, "megatron")
        table2 = s * b * h * (34 / t + 5 * a * s / (h * t))  # Korthikanti et al. 2022, Table 2, TP + SP
        # dropout, which zerosim does not model: the softmax's mask (1) and output (2) per score, the attention's and
        # the MLP's masks (1 each) per activation; with SP every term is on L/t tokens
        dropout = (1 + 2) * a * s * s * b / t + (1 + 1) * s * b * h / t
        stats = 4 * 4 * s * b / t  # LN1's and LN2's fp32 mean and rstd, on L/T tokens
        assert got["megatron"] == table2
        assert got["per_block_total"] == table2 - dropout + stats == got["formula_per_layer"]


# torch 2.13.0's profiler (CPU allocations, two gloo processes) over F.cross_entropy(pred.float(), target) and its
# backward on a rank's (T, V/t) = (4096, 1024) bf16 logits, as the parity lane measures: peak bytes above the logits
TORCH_LOSS_PEAK = {"loss_parallel": 67_244_044, "plain": 50_331_656}
T_LOSS, V_LOSS = 4096, 2048  # tokens; the vocabulary, V/t = 1024 at t = 2


def zerosim_loss_peak(tp: int, layout: str) -> int:
    """The bytes the loss holds at its peak on TP rank 0 (its ledger's allocations named loss.* before the first one
    freed) for a one-block Llama with the eager loss, B·L = T_LOSS tokens, under ZeRO-3 with TP + SP at degree tp."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.models import Llama, MetaLlama

    model = MetaLlama(Llama(V_LOSS, 64, 4, 1, T_LOSS, d_ff=128, n_kv_heads=2, attention="flash"), kernels="eager",
                      loss="eager")
    _, cluster, _ = measure_stage(model, tp, 3, "adamw", "bf16-mixed", micro_batch=(1, T_LOSS), tp=tp, sp=True,
                                  gpus_per_node=tp, layout=layout)
    held = 0
    for e in cluster.ranks[0].ledger.timeline:
        if e.name.startswith("loss."):
            if e.action == "free":
                return held
            held += e.nbytes
    raise AssertionError("no loss in the ledger")


def test_the_loss_under_torchs_loss_parallel_holds_what_torch_measured():
    """torchtitan's loss beside TP is torch's `loss_parallel` (torch 2.13.0, torch/distributed/tensor/parallel/
    loss.py), whose backward `_nll_loss_and_log_softmax_backward` ends `(grad_input + torch.exp(x)) * grad_output`:
    one (T, V/t) fp32 tensor more alive than the fused kernels' backward. By hand, what is alive at each statement of
    that backward (x: the saved log_softmax), fp32, in elements of the rank's T·V/t, then the int64 labels:"""
    n, labels = T_LOSS * (V_LOSS // 2), 8 * T_LOSS
    alive = {
        "grad_input = torch.zeros_like(x)": 1 + 1,  # x, grad_input (the targets' -1 scattered into it in place)
        "torch.exp(x)": 1 + 1 + 1,  # x, grad_input, exp(x)
        "grad_input + torch.exp(x)": 1 + 1 + 1 + 1,  # ... and the sum, while exp(x) is still the add's operand
        "(...) * grad_output": 1 + 1 + 1 + 1,  # x, grad_input, the sum, the product (exp(x) freed after the add)
    }
    got = zerosim_loss_peak(2, "torchtitan")
    assert got == 4 * max(alive.values()) * n + labels
    assert got == pytest.approx(TORCH_LOSS_PEAK["loss_parallel"], rel=0.005)  # torch's own: 16.03 bytes an element
    # without loss_parallel, aten's fused kernels: log_softmax's output, nll_loss's and log_softmax's gradients
    plain = TORCH_LOSS_PEAK["plain"]
    assert plain == 12 * n + 8  # the 8: the mean's scalar
    assert TORCH_LOSS_PEAK["loss_parallel"] - plain == pytest.approx(4 * n, rel=0.01)


def test_the_pages_quote_the_loss_bytes_torch_measured():
    """docs/validation.md, docs/tensor-parallelism.md and the loss's module quote torch's bytes an element."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    n = T_LOSS * (V_LOSS // 2)
    parallel, plain = (f"{TORCH_LOSS_PEAK[k] / n:.2f}" for k in ("loss_parallel", "plain"))
    assert (parallel, plain) == ("16.03", "12.00")
    quoted = {  # page: what it says of the two
        "docs/validation.md": f"{parallel} bytes an element against {plain}",
        "docs/tensor-parallelism.md": f"torch's profiler measured {parallel} bytes an element",
        "zerosim/models/meta/_loss_peak.py": f"{parallel} bytes an element at loss_parallel's peak, {plain} for",
    }
    for page, said in quoted.items():
        assert said in " ".join((root / page).read_text().split()), page


# -- the parity lane: torch itself ----------------------------------------------------------------------------------

def torch_block_activations(torch, tp: int, blocks: int) -> float:
    """MemTracker's activation bytes after `blocks` torchtitan Llama-3-8B blocks forward, TP + SP at degree tp."""
    import torch.nn as nn
    import torch.nn.functional as F
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    def apply_rotary_emb(xq, xk, freqs_cis):  # torchtitan's, complex
        xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
        xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
        fc = freqs_cis[: xq.shape[1]].view(1, xq.shape[1], 1, xq_.shape[-1])
        return (torch.view_as_real(xq_ * fc).flatten(3).type_as(xq),
                torch.view_as_real(xk_ * fc).flatten(3).type_as(xk))

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wo = nn.Linear(D, H * DH, bias=False), nn.Linear(H * DH, D, bias=False)
            self.wk, self.wv = nn.Linear(D, G * DH, bias=False), nn.Linear(D, G * DH, bias=False)

        def forward(self, x, freqs_cis):
            bs, seqlen, _ = x.shape
            xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
            xq, xk, xv = (t.view(bs, seqlen, -1, DH) for t in (xq, xk, xv))
            xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
            xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
            out = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True, enable_gqa=True)
            return self.wo(out.transpose(1, 2).contiguous().view(bs, seqlen, -1))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3 = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
            self.w2 = nn.Linear(FF, D, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class TransformerBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.feed_forward = Attention(), FeedForward()
            self.attention_norm, self.ffn_norm = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)

        def forward(self, x, freqs_cis):
            h = x + self.attention(self.attention_norm(x), freqs_cis)
            return h + self.feed_forward(self.ffn_norm(h))

    class Layers(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(TransformerBlock() for _ in range(blocks))

        def forward(self, x, freqs_cis):
            for block in self.layers:
                x = block(x, freqs_cis)
            return x

    mesh = init_device_mesh("cpu", (8 // tp, tp), mesh_dim_names=("dp", "tp"))["tp"]
    with FakeTensorMode():
        torch.set_default_dtype(torch.bfloat16)
        try:
            model = Layers()
        finally:
            torch.set_default_dtype(torch.float32)
        for block in model.layers:  # torchtitan's apply_tp, the transformer block's plan
            parallelize_module(block, mesh, {
                "attention_norm": SequenceParallel(),
                "attention": PrepareModuleInput(input_layouts=(Shard(1), None),
                                                desired_input_layouts=(Replicate(), None)),
                "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
                "ffn_norm": SequenceParallel(),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "feed_forward.w1": ColwiseParallel(), "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
                "feed_forward.w3": ColwiseParallel(),
            })
        freqs_cis = torch.polar(torch.ones(L, DH // 2), torch.ones(L, DH // 2))
        x = torch.randn(1, L // tp, D, dtype=torch.bfloat16, requires_grad=True)  # the rank's sequence shard
        tracker = MemTracker()
        tracker.track_external(model, x, freqs_cis)
        with tracker:
            model(x, freqs_cis)
            snapshot = tracker.get_tracker_snapshot("current")
    (dev,) = snapshot.keys()
    return sum(v for k, v in snapshot[dev].items() if getattr(k, "value", None) == "Activation")


@pytest.fixture(scope="module")
def fake_world():
    torch = pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=8, store=FakeStore())
    yield torch
    dist.destroy_process_group()


@pytest.mark.slow  # six fake forward passes of 8B-wide blocks: ~30 s
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_parity_torch_memtracker_under_torchtitans_plan(fake_world, tp):
    torch = fake_world
    per_block = torch_block_activations(torch, tp, 2) - torch_block_activations(torch, tp, 1)
    assert zerosim_block(tp, "torchtitan") == pytest.approx(per_block, rel=TOLERANCE)
    assert per_block / MIB == TORCH_MIB[tp]  # the numbers the default lane holds zerosim to


def _loss_peaks_on_gloo(rank: int, world: int, queue) -> None:
    """One gloo process of the loss measurement: each rank's (T, V/t) bf16 logits as a DTensor sharded on the
    vocabulary; the profiler's peak CPU allocation over F.cross_entropy(pred.float(), target) and its backward,
    under loss_parallel and on a plain tensor (rank 0 puts both on the queue)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel
    from torch.profiler import ProfilerActivity, profile

    def peak(step) -> int:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
        events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                        key=lambda e: e.start_ns())
        now = most = 0
        for e in events:
            now += e.nbytes()
            most = max(most, now)
        return most

    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    target = torch.randint(V_LOSS, (T_LOSS,))
    local = torch.randn(T_LOSS, V_LOSS // world, dtype=torch.bfloat16, requires_grad=True)
    pred = DTensor.from_local(local, mesh, [Shard(1)], run_check=False)
    plain_leaf = local.detach().clone().requires_grad_()

    def parallel():
        with loss_parallel():
            F.cross_entropy(pred.float(), target).backward()

    def plain():
        F.cross_entropy(plain_leaf.float(), target % (V_LOSS // world)).backward()

    parallel(), plain()  # warm: the first call's one-off allocations
    local.grad = plain_leaf.grad = None
    measured = {"loss_parallel": peak(parallel), "plain": peak(plain)}
    if rank == 0:
        queue.put(measured)
    dist.destroy_process_group()


@pytest.mark.slow  # two processes, a loss each way
def test_parity_torchs_loss_parallel_peak(monkeypatch):
    torch = pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_loss_peaks_on_gloo, args=(2, queue), nprocs=2)
    # the numbers the default lane holds zerosim to, measured with torch 2.13.0 (the parity extra's floor); 2.12.1 and
    # 2.14.1 measure the same
    assert queue.get() == TORCH_LOSS_PEAK, torch.__version__
