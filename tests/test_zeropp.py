"""Fewer bits on the wire: every quantized collective against its naive twin, every wire of the engine against the
oracle, bit for bit, over Hypothesis-chosen shapes, ranks and precisions — uneven and empty pieces included
(issue 26, Must show 2); the bytes in the trace against hand formulas."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from zerosim import Cluster
from zerosim.collectives import all_to_all, naive_all_to_all
from zerosim.collectives.quantized import (
    LocoState,
    all_to_all_quant_reduce,
    fp8_all_gather,
    fp8_amax_all_reduce,
    mxfp8_all_gather,
    naive_all_to_all_quant_reduce,
    naive_fp8_all_gather,
    naive_mxfp8_all_gather,
    naive_qwz_all_gather,
    qwz_all_gather,
)
from zerosim.collectives.quantized._qgz import _div_cuda
from zerosim.models import MLP
from zerosim.optim import Adam
from zerosim.parallel.data import ZeroEngine
from zerosim.parallel.data.recipes import torch_scalar_div
from zerosim.parallel.data.zeropp import Wire
from zerosim.precision.quantize import torchao_scale
from zerosim.reference import Reference


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


sizes = st.lists(st.integers(0, 40), min_size=1, max_size=5)


@given(sizes=sizes, seed=st.integers(0, 2**16), groups=st.sampled_from([1, 3, 8, 64]),
       out=st.sampled_from(["fp16", "bf16"]))
def test_qwz_all_gather_equals_its_naive_twin(sizes, seed, groups, out):
    rng = np.random.default_rng(seed)
    pieces = [rng.standard_normal(m).astype(ml_dtypes.bfloat16) for m in sizes]  # uneven, maybe empty
    got = qwz_all_gather(Cluster(len(sizes)), pieces, groups=groups, out_format=out)
    assert all(same_bits(a, b) for a, b in zip(got, naive_qwz_all_gather(pieces, groups, out)))


@given(sizes=sizes, seed=st.integers(0, 2**16), out=st.sampled_from(["fp16", "bf16", "fp32"]))
def test_fp8_and_mxfp8_all_gathers_equal_their_naive_twins(sizes, seed, out):
    rng = np.random.default_rng(seed)
    pieces = [(rng.standard_normal(m) * rng.uniform(0.01, 100)).astype(np.float32) for m in sizes]
    c = Cluster(len(sizes))
    amax = fp8_amax_all_reduce(c, [[p] for p in pieces])  # empty pieces count 0.0 (ao PR #3983)
    got = fp8_all_gather(c, pieces, torchao_scale(amax[0][0]), out_format=out)
    assert all(same_bits(a, b) for a, b in zip(got, naive_fp8_all_gather(pieces, out)))
    got = mxfp8_all_gather(c, pieces, out_format=out)
    assert all(same_bits(a, b) for a, b in zip(got, naive_mxfp8_all_gather(pieces, out)))


@given(n=st.integers(1, 6), per=st.integers(0, 5), g=st.sampled_from([1, 2, 3]), seed=st.integers(0, 99))
def test_all_to_all_equals_its_naive_twin(n, per, g, seed):
    n = n * g  # groups of g covering n*g ranks
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(per * g).astype(np.float16) for _ in range(n)]
    groups = [list(range(i, i + g)) for i in range(0, n, g)]
    c = Cluster(n)
    got = all_to_all(c, xs, groups=groups)
    assert all(same_bits(a, b) for a, b in zip(got, naive_all_to_all(xs, groups)))
    assert all(c.trace.bytes_sent(r) == (g - 1) * per * 2 for r in range(n))  # (g-1)/g of the buffer, fp16


@pytest.mark.parametrize("second", [np.zeros(4, np.float32), np.zeros(2, np.float16)],
                         ids=["another dtype", "another length"])
def test_all_to_all_refuses_ranks_that_pass_another_length_or_dtype(second):
    # rank 0 passes 4 fp16; rank 1 the same length in fp32, or 2 fp16: each refused before anything is sent
    c = Cluster(2)
    with pytest.raises(ValueError, match="every rank must pass the same length and dtype"):
        all_to_all(c, [np.zeros(4, np.float16), second])
    assert not c.trace.calls


@pytest.mark.slow  # Hypothesis over many shapes: over a second
@given(nodes=st.integers(2, 3), d=st.sampled_from([1, 2, 4]), rows=st.sampled_from([4, 8, 16]),
       seed=st.integers(0, 999))
def test_qgz_equals_its_naive_twin(nodes, d, rows, seed):
    w = nodes * d
    shape = (rows * w, 8)  # M = 8·rows·W, a multiple of 2W; G = rows·W >= 8 groups of 8 (the kernels' 16-byte loads)
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(int(np.prod(shape))).astype(np.float16) for _ in range(w)]
    got = all_to_all_quant_reduce(Cluster(w), grads, shape, d)
    assert all(same_bits(a, b) for a, b in zip(got, naive_all_to_all_quant_reduce(grads, shape, d)))


def test_qgz_runs_over_the_meshs_node_and_across_node_groups_on_their_links():
    """On a cluster placed on nodes (8 ranks, 4 a node) qgZ's four all-to-alls run over the mesh's groups, each
    recorded with its ring length and link tier. By hand, M = 128 elements, G = max(16, 8, 8) = 16 groups:
    in the node, int4 bytes M/2 = 64 and scales 16·4 = 64 B, each rank sending 3/4 of both: 96 B on NVLink;
    across the 2 nodes, M/2d = 16 B and G/d·4 = 16 B, each rank sending 1/2 of both: 16 B on InfiniBand."""
    c = Cluster(8, gpus_per_node=4)
    all_to_all_quant_reduce(c, [np.ones(128, np.float16) for _ in range(8)], (16, 8), 4)
    assert [(x.group, x.world_size, x.tier, x.elements) for x in c.trace.calls] == [
        ("node", 4, "intra-node", 64), ("node", 4, "intra-node", 16),
        ("across nodes", 2, "inter-node", 16), ("across nodes", 2, "inter-node", 4)]
    assert c.trace.bytes_by_tier() == {"intra-node": 8 * 96, "inter-node": 8 * 16}
    with pytest.raises(ValueError, match="qgZ's nodes of 2 GPUs are not the cluster's: it places 4"):
        all_to_all_quant_reduce(Cluster(8, gpus_per_node=4), [np.ones(128, np.float16)] * 8, (16, 8), 2)


def test_qgz_sums_over_nodes_not_ranks_and_loco_feeds_the_error_back():
    """Σ/n, as `sum(chunks) / num_nodes` says (not Σ/W). W = 8 ranks in 2 nodes of 4, every gradient all ones:
    int4 of 1 (absmax 1, s = 16/2 = 8): 8 clamps to 7, received 7/8 = 0.875; a node's sum 4 * 0.875 = 3.5,
    requantized (s = 16/7): 8 clamps to 7, received 7 * 3.5/8 = 3.0625; two nodes 6.125, / n = 2: 3.0625 — where
    the unquantized mean is 1 and Σ/W would give 0.765625."""
    w, d, shape = 8, 4, (16, 8)
    ones = [np.ones(128, np.float16) for _ in range(w)]
    out = all_to_all_quant_reduce(Cluster(w), ones, shape, d)
    assert np.concatenate(out).tolist() == [3.0625] * 128
    assert same_bits(_div_cuda(np.array([3.0, 1e-4], np.float16), 3), torch_scalar_div(np.array([3.0, 1e-4],
                                                                                                np.float16), 3))
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(128).astype(np.float16) for _ in range(w)]
    exact = np.sum([g.astype(np.float64) for g in grads], axis=0) / 2
    loco, drift = LocoState(err_beta=0.8, reset_T=1024), []
    c = Cluster(w)
    plain = np.concatenate(all_to_all_quant_reduce(c, grads, shape, d)).astype(np.float64)
    total = np.zeros(128)
    for step in range(8):
        got = np.concatenate(all_to_all_quant_reduce(c, grads, shape, d, loco=loco, key="w")).astype(np.float64)
        total += got - exact
        drift.append(np.abs(total).mean() / (step + 1))
    # with the same gradient every step, plain qgZ's error repeats (the mean error stays); LoCo's averages out
    assert drift[-1] < 0.5 * np.abs(plain - exact).mean()
    assert loco.idx == 8 and set(loco.buffers["w"]) == set(range(w))


WIRES = [Wire(zero_quantized_weights=True, weight_groups=4), Wire(zero_quantized_weights=True, weight_groups=64),
         Wire(fp8_all_gather="torchao"), Wire(fp8_all_gather="torchao-amax_to_scale"),
         Wire(fp8_all_gather="current"), Wire(fp8_all_gather="delayed"),
         Wire(fp8_all_gather="mxfp8")]


@pytest.mark.slow  # Hypothesis over many shapes: over a second
@given(n=st.integers(1, 5), widths=st.lists(st.integers(1, 9), min_size=2, max_size=4),
       precision=st.sampled_from(["bf16-mixed", "fp16-mixed", "fp32", "bf16-pure", "fp16-pure"]),
       wire=st.sampled_from(WIRES),
       recipe=st.sampled_from(["seeds", "deepspeed-zero3"]), seed=st.integers(0, 999))
def test_every_wire_equals_the_oracle(n, widths, precision, wire, recipe, seed):
    """Stage 3 with each quantized gather against the oracle quantizing the same pieces in the same order; small
    layers on many ranks give uneven and empty pieces."""
    model = MLP(widths)
    opt = Adam(lr=1e-2)
    engine = ZeroEngine(model, Cluster(n), 3, opt, precision, recipe=recipe, wire=wire)
    ref = Reference(model, Adam(lr=1e-2), precision, world_size=n, recipe=recipe, wire=wire)
    rng = np.random.default_rng(seed)
    for _ in range(2):
        batches = [(rng.standard_normal((2, widths[0])), rng.standard_normal((2, widths[-1]))) for _ in range(n)]
        assert engine.step(batches) == ref.step(batches)
    assert same_bits(engine.full_master(), ref.master())
    assert same_bits(engine.full_params(), ref.compute_params())


def test_the_wire_changes_the_weights_a_unit_computes_with():
    """The oracle test above cannot pass by quantizing nothing: the loss of a quantized run is not the plain one."""
    model, n = MLP([6, 10, 3]), 2
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((4, 6)), rng.standard_normal((4, 3))) for _ in range(n)]
    plain = ZeroEngine(model, Cluster(n), 3, Adam(), "bf16-mixed").step(batches)
    for wire in WIRES:
        assert ZeroEngine(model, Cluster(n), 3, Adam(), "bf16-mixed", wire=wire).step(batches) != plain


def test_qwz_bytes_per_rank_in_the_trace():
    """qwZ of a Ψ-element model on N ranks, one step at stage 3: each gather sends (N-1)·m int8 bytes and
    (N-1)·G fp32 scales per rank, against (N-1)·m·2 bytes unquantized — by hand for MLP([64, 64, 8])."""
    model, n = MLP([64, 64, 8]), 4  # fc0: 64*64 + 64 = 4160, fc1: 64*8 + 8 = 520; Ψ = 4680, s = 1170
    c = Cluster(n)
    ZeroEngine(model, c, 3, Adam(), "fp16-mixed", wire=Wire(zero_quantized_weights=True, weight_groups=64)).step(
        [(np.ones((2, 64)), np.ones((2, 8)))] * n)
    gathers = [x for x in c.trace.calls if x.purpose == "gather params"]
    int8 = sum(c.trace.bytes_sent(1, call=x.call) for x in gathers if x.dtype == "int8")
    scales = sum(c.trace.bytes_sent(1, call=x.call) for x in gathers if x.dtype == "fp32")
    # rank 1 forwards the 3 other ranks' pieces. fc0's 4160 elements: pieces 1170, 1170, 1170, 650 -> padded to
    # whole 64-groups 1216, 1216, 1216, 704 (19, 19, 19, 11 groups); fc1's 520: 0, 0, 0, 520 -> 576 (9 groups).
    # Forward gathers fc0, fc1; backward fc1, fc0. The ring: rank 1 sends every piece but rank 2's.
    fc0_int8, fc0_groups = 1216 + 1216 + 704, 19 + 19 + 11
    fc1_int8, fc1_groups = 0 + 0 + 576, 9
    assert int8 == 2 * (fc0_int8 + fc1_int8)
    assert scales == 2 * 4 * (fc0_groups + fc1_groups)


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_wire_refused_before_anything_runs():
    with pytest.raises(ValueError, match="not both"):
        Wire(zero_quantized_weights=True, fp8_all_gather="torchao")
    with pytest.raises(ValueError, match="fp8_all_gather must be one of"):
        Wire(fp8_all_gather="e4m3")
    with pytest.raises(ValueError, match="stage 3"):
        ZeroEngine(MLP([4, 4]), Cluster(2), 2, Adam(), wire=Wire(fp8_all_gather="torchao"))
    with pytest.raises(ValueError, match="CUDAQuantizer"):  # 4*4+4 = 20 elements: 10 a rank, not a multiple of 8
        ZeroEngine(MLP([4, 4]), Cluster(2), 3, Adam(), wire=Wire(zero_quantized_weights=True))
    with pytest.raises(ValueError, match="hsdp gathers within groups"):  # qwZ/fp8 over a mesh's groups: not modelled
        cluster = Cluster(4, gpus_per_node=2)
        ZeroEngine(MLP([4, 4]), cluster, "hsdp", Adam(), wire=Wire(fp8_all_gather="torchao"))
    assert all(not r.ledger.live for r in cluster.ranks) and cluster.trace.log == []
    with pytest.raises(TypeError, match="fp16"):
        all_to_all_quant_reduce(Cluster(4), [np.ones(64, ml_dtypes.bfloat16)] * 4, (8, 8), 2)
    with pytest.raises(ValueError, match="falls back"):
        all_to_all_quant_reduce(Cluster(4), [np.ones(12, np.float16)] * 4, (3, 4), 2)


@pytest.mark.slow
def test_the_readmes_1024_gpu_wire_times(capsys):
    """The numbers of docs/explanation/fewer-bits.md: GPT-3 175B, ZeRO-3, 1,024 H100s over IB NDR, the seconds
    of `gather params` by wire and the unchanged `reduce grads`. Why they are what they are: fp8 sends half the bytes of
    the fp16 gather (plus 8,184 bytes of amaxes); qwZ the same bytes plus its scales, in two calls a gather, so 198 more
    ring all-gathers, each NCCL's 8.4 µs a call and 1,023 steps of 14 µs: 198 · (8.4e-6 + 1023 · 14e-6) = 2.837 s more
    than fp8 (their bytes differ by 0.2 %)."""
    import json

    from zerosim.cli.main import main

    base = ["timeline", "--model", "gpt3-175b", "--ranks", "1024", "--link", "ib_ndr", "--json"]
    got = {}
    for name, flags in [("unquantized", []), ("qwZ", ["--zero-quantized-weights", "--weight-groups", "2048"]),
                        ("fp8", ["--fp8-all-gather"])]:
        assert main(base + flags) == 0
        got[name] = json.loads(capsys.readouterr().out)["by_purpose"]
    assert {k: round(v["gather params"]["seconds"], 2) for k, v in got.items()} == {
        "unquantized": 16.81, "qwZ": 12.67, "fp8": 9.85}
    assert {round(v["reduce grads"]["seconds"], 2) for v in got.values()} == {8.40}
    assert [v["gather params"]["calls"] for v in got.values()] == [198, 396, 200]
    extra = got["qwZ"]["gather params"]["seconds"] - got["fp8"]["gather params"]["seconds"]
    assert abs(extra - 198 * (8.4e-6 + 1023 * 14e-6)) < 0.01 * extra  # the rest: qwZ's 0.2 % more bytes, fp8's amaxes


def test_what_lands_before_dequantizing_is_in_the_ledger():
    """MLP([64, 64, 8]) on 4 ranks (fc0: 4160 elements in pieces 1170, 1170, 1170, 650): while fc0 lands each rank
    holds, beside the dequantized window, kind "comm":
      qwZ, groups of 64: int8 1216 · 3 + 704 (whole groups) and 4 B for each of 19 · 3 + 11 groups = 4352 + 272
      MXFP8:             4160 e4m3 bytes and one E8M0 byte a block of 32: 37 · 3 + 21 = 132
    and nothing of it after the step."""
    for wire, landed in ((Wire(zero_quantized_weights=True, weight_groups=64), 4352 + 272),
                         (Wire(fp8_all_gather="mxfp8"), 4160 + 132)):
        c = Cluster(4)
        ZeroEngine(MLP([64, 64, 8]), c, 3, Adam(), "fp16-mixed", wire=wire).step(
            [(np.ones((2, 64)), np.ones((2, 8)))] * 4
        )
        for rank in c.ranks:
            assert rank.ledger.peak_by_kind()["comm"] == landed
            assert not any(name.endswith("(received, quantized)") for name in rank.ledger.live)


@pytest.mark.slow  # Hypothesis over many shapes: over a second
@given(nodes=st.integers(2, 3), d=st.sampled_from([1, 2, 4]), rows=st.sampled_from([4, 8]),
       reset_t=st.integers(0, 3), beta=st.sampled_from([0.0, 0.8, 1.0]), seed=st.integers(0, 999))
def test_qgz_with_loco_equals_its_naive_twin_over_steps(nodes, d, rows, reset_t, beta, seed):
    """Five calls with fresh gradients: the errors fed back (kept as int8 in the swizzled order by the collective,
    per rank and partition by the twin) and the resets after reset_T calls agree bit for bit."""
    w = nodes * d
    shape = (rows * w, 8)  # G = rows·W groups of 8 elements, as DeepSpeed's kernels load them
    rng = np.random.default_rng(seed)
    ours, twin = LocoState(err_beta=beta, reset_T=reset_t), LocoState(err_beta=beta, reset_T=reset_t)
    c = Cluster(w)
    for _ in range(5):
        grads = [rng.standard_normal(int(np.prod(shape))).astype(np.float16) for _ in range(w)]
        got = all_to_all_quant_reduce(c, grads, shape, d, loco=ours, key="w")
        want = naive_all_to_all_quant_reduce(grads, shape, d, loco=twin, key="w")
        assert all(same_bits(a, b) for a, b in zip(got, want))
        assert ours.idx == twin.idx


@pytest.mark.bad_input("collectives", unchanged=True)
def test_qgz_on_the_meta_backend_sends_what_it_sends_with_values():
    """The same four calls and bytes with and without values (the meta path builds its payloads by size); LoCo,
    which keeps values between calls, is refused there."""
    w, d, shape = 8, 4, (16, 8)
    grads = [np.random.default_rng(r).standard_normal(128).astype(np.float16) for r in range(w)]
    values, meta = Cluster(w), Cluster(w, backend="meta")
    all_to_all_quant_reduce(values, grads, shape, d)
    out = all_to_all_quant_reduce(meta, [meta.backend.empty((128,), np.float16) for _ in meta.ranks], shape, d)
    assert [(x.elements, x.dtype, x.group) for x in meta.trace.calls] == [
        (x.elements, x.dtype, x.group) for x in values.trace.calls]
    assert meta.trace.bytes_sent(0) == values.trace.bytes_sent(0) == 112  # the meta backend hosts rank 0 only
    # rank 0: 3/4 of 64 int4 bytes and of 16 scales in the node (48 + 48), 1/2 of 16 bytes and 4 scales across (8 + 8)
    assert [o.shape for o in out] == [(16,)] * len(meta.ranks)
    with pytest.raises(ValueError, match="LoCo's error feedback needs values"):
        all_to_all_quant_reduce(meta, [meta.backend.empty((128,), np.float16) for _ in meta.ranks], shape, d,
                                loco=LocoState())
