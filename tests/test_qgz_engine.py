"""qgZ inside ZeroEngine (issue 26): `Wire(zero_quantized_gradients=True, loco=...)` with the deepspeed-zero3 recipe
equals QgzReference bit for bit; LoCo's error buffers are ledger rows of hand-derived sizes; the trace's bytes per
link tier are the hand formulas; what qgZ cannot run is refused before anything changes."""

import json

import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.cli.main import main
from zerosim.collectives.quantized import LocoState, check_qgz, qgz_applies
from zerosim.parallel.data.zeropp import LocoParams, Wire
from zerosim.precision import get_precision
from zerosim.reference import QgzReference

FP16 = get_precision("fp16-mixed").with_(loss_scale=2.0**8)


def _pair(model, n: int, d: int, loco, seed: int = 0):
    init = model.init_params(np.random.default_rng(seed))
    wire = Wire(zero_quantized_gradients=True, loco=loco)
    engine = ZeroEngine(model, Cluster(n, gpus_per_node=d), 3, get_optimizer("adam", lr=1e-2), FP16, params=init,
                        recipe="deepspeed-zero3", wire=wire)
    ref = QgzReference(model, get_optimizer("adam", lr=1e-2), FP16, n, init, gpus_per_node=d,
                       recipe="deepspeed-zero3",
                       loco=None if loco is None else LocoState(err_beta=loco.err_beta, reset_T=loco.reset_T))
    return engine, ref


def _batches(rng, model, n: int):
    return [(rng.standard_normal((2, model.widths[0])), rng.standard_normal((2, model.widths[-1]))) for _ in range(n)]


@pytest.mark.slow
@given(widths=st.lists(st.sampled_from([2, 4, 6, 8, 12, 16]), min_size=2, max_size=4),
       nodes=st.integers(2, 3), d=st.integers(1, 2), steps=st.integers(1, 3),
       loco=st.sampled_from([None, LocoParams(0.8, 1024), LocoParams(0.5, 0), LocoParams(0.9, 2)]))
def test_the_engine_with_qgz_is_the_qgz_oracle_bit_for_bit(widths, nodes, d, steps, loco):
    """Small MLPs on n nodes × d GPUs: every weight qgZ admits (M % 2W == 0 and the kernel's group split) travels
    in int4, the biases and the rest through the plain reduce-scatter; losses, the fp32 master and the LoCo
    buffers equal the oracle's after each step (reset_T 0 and 2 reset the errors mid-step)."""
    model, n = MLP(widths), nodes * d
    for s in model.specs:
        if qgz_applies(s.shape, n, nodes):
            try:
                check_qgz(s.shape, n, nodes)
            except ValueError:
                assume(False)  # refused up front (test_refusals); here only shapes DeepSpeed's kernels run
    engine, ref = _pair(model, n, d, loco)
    event(f"{len(ref.quantized)} of {len(model.specs)} parameters through qgZ")
    rng = np.random.default_rng(1)
    for _ in range(steps):
        batches = _batches(rng, model, n)
        assert engine.step(batches) == ref.step(batches)
        assert engine.full_master().tobytes() == ref.master()[: model.num_params].tobytes()
    if loco is not None:
        e, r = engine.ctx.wire.loco, ref.loco
        assert e.idx == r.idx and set(e.buffers) == set(r.buffers)
        for key, per_rank in r.buffers.items():
            for rank, (intra, inter) in per_rank.items():
                got = e.buffers[key][rank]
                assert got[0].payload.tobytes() == intra.payload.tobytes()
                assert got[1].scales.tobytes() == inter.scales.tobytes()


def test_a_quantized_run_differs_from_the_plain_one():
    """The check above can fail: the plain deepspeed-zero3 engine (no qgZ) reaches another master."""
    model = MLP([8, 16, 8])
    engine, ref = _pair(model, 4, 2, None)
    plain = ZeroEngine(model, Cluster(4, gpus_per_node=2), 3, get_optimizer("adam", lr=1e-2), FP16,
                       params=model.init_params(np.random.default_rng(0)), recipe="deepspeed-zero3")
    batches = _batches(np.random.default_rng(1), model, 4)
    engine.step(batches), ref.step(batches), plain.step(batches)
    assert engine.full_master().tobytes() == ref.master()[: model.num_params].tobytes()
    assert engine.full_master().tobytes() != plain.full_master().tobytes()


def test_qgz_and_qwz_together_are_the_oracle_with_both():
    """DeepSpeed takes zero_quantized_weights and zero_quantized_gradients together: the int8 gathers (groups of 4
    here) and the int4 reduction side by side, still the oracle's bits (QgzReference takes the same wire)."""
    model = MLP([8, 16, 8])
    init = model.init_params(np.random.default_rng(0))
    wire = Wire(zero_quantized_weights=True, weight_groups=4, zero_quantized_gradients=True)
    engine = ZeroEngine(model, Cluster(4, gpus_per_node=2), 3, get_optimizer("adam", lr=1e-2), FP16, params=init,
                        recipe="deepspeed-zero3", wire=wire)
    ref = QgzReference(model, get_optimizer("adam", lr=1e-2), FP16, 4, init, gpus_per_node=2,
                       recipe="deepspeed-zero3", wire=wire)
    rng = np.random.default_rng(1)
    for _ in range(3):
        batches = _batches(rng, model, 4)
        assert engine.step(batches) == ref.step(batches)
        assert engine.full_master().tobytes() == ref.master()[: model.num_params].tobytes()
    assert {c.collective for c in engine.cluster.trace.calls} >= {"all_to_all", "all_gather"}


def test_locos_one_counter_resets_the_parameter_the_backward_order_reaches():
    """LoCo's `loco_idx` is one counter for every parameter: which one starts from zero errors after reset_T calls
    depends on the order the reductions run, backward's (last layer first). MLP([8, 16, 16, 8]) on 2 nodes of 2:
    three admitted weights; reset_T = 2: step 1 makes every buffer (each new one sets idx to 0; idx 1 after), steps
    2 and 3 reset the third weight reduced (idx 3 > 2): the first layer's, not the last's as a forward order would
    (an oracle in forward order fails this test)."""
    model = MLP([8, 16, 16, 8])
    engine, ref = _pair(model, 4, 2, LocoParams(0.8, 2))
    assert len(ref.quantized) == 3
    rng = np.random.default_rng(1)
    for _ in range(3):
        batches = _batches(rng, model, 4)
        assert engine.step(batches) == ref.step(batches)
        assert engine.full_master().tobytes() == ref.master()[: model.num_params].tobytes()


def test_locos_error_buffers_are_ledger_rows_of_the_whole_parameter_on_every_rank():
    """MLP([8, 16, 8, 32]) on W = 4 ranks in n = 2 nodes of d = 2 (every weight's groups hold a multiple of 8
    elements, as DeepSpeed's kernels load them: test_qgz_group_sizes.py). By hand, per admitted weight, on every
    rank: intra int8 M B + G fp32 scales, inter int8 M/d B + G/d scales, G = max(rows, cols, W):
      w (16, 8):  M = 128, G = 16: 128 + 64 + 64 + 32 = 288 B
      w (8, 16):  M = 128, G = 16: 128 + 64 + 64 + 32 = 288 B
      w (32, 8):  M = 256, G = 32: 256 + 128 + 128 + 64 = 576 B
      biases (16,), (8,), (32,): 1-D, reduce-scattered, no LoCo buffer
    1,152 B of kind "comm", still live after the step (DeepSpeed keeps them on the parameter)."""
    model = MLP([8, 16, 8, 32])
    engine, _ = _pair(model, 4, 2, LocoParams(0.8, 1024))
    for _ in range(2):
        engine.step(_batches(np.random.default_rng(1), model, 4))
    for rank in engine.cluster.ranks:
        rows = {b.name: b.nbytes for b in rank.ledger.live.values() if b.name.startswith("LoCo error")}
        assert sorted(rows.values()) == sorted([128, 64, 64, 32] * 2 + [256, 128, 128, 64])
        assert rank.ledger.by_kind().get("comm") == 1152
        assert all(rank.ledger.live[name].kind == "comm" for name in rows)


def test_the_quantized_all_to_alls_bytes_per_tier_are_the_hand_formulas():
    """Per admitted parameter and per rank, in-node (d - 1)/d of M/2 int4 bytes and 4G scale bytes on NVLink,
    across nodes (n - 1)/n of M/2d and 4G/d on InfiniBand. MLP([8, 16, 8, 32]) on 2 nodes of 2 (W = 4):
      (16, 8):  M = 128, G = 16: in node 1/2·(64 + 64) = 64 B, across 1/2·(32 + 32) = 32 B
      (8, 16):  M = 128, G = 16: in node 1/2·(64 + 64) = 64 B, across 1/2·(32 + 32) = 32 B
      (32, 8):  M = 256, G = 32: in node 1/2·(128 + 128) = 128 B, across 1/2·(64 + 64) = 64 B
    times 4 ranks: 1,024 B on NVLink, 512 B on InfiniBand, for one step."""
    model = MLP([8, 16, 8, 32])
    engine, _ = _pair(model, 4, 2, None)
    engine.step(_batches(np.random.default_rng(1), model, 4))
    trace = engine.cluster.trace
    calls = [c for c in trace.calls if c.collective == "all_to_all"]
    assert len(calls) == 12 and all(c.purpose == "reduce grads" for c in calls)
    total = {"intra-node": 0, "inter-node": 0}
    for c in calls:
        for tier, b in trace.bytes_by_tier(call=c.call).items():
            total[tier] += b
    assert total == {"intra-node": 4 * (64 + 64 + 128), "inter-node": 4 * (32 + 32 + 64)}


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("stage, recipe, precision, d, message", [
    (2, "deepspeed-zero12", FP16, 2, "not ZeRO-2"),  # qgZ replaces stage 3's reduce-scatter
    ("mics", "deepspeed-zero3", FP16, 2, "not mics"),  # reduces within shard groups
    ("hpz", "deepspeed-zero3", FP16, 2, "hpZ with qgZ"),  # stage3.py does not exclude it; not modelled here
    (3, "seeds", FP16, 2, "recipe='deepspeed-zero3'"),  # DeepSpeed's, with its recipe
    (3, "deepspeed-zero3", FP16, 4, "across nodes"),  # one node: DeepSpeed falls back to reduce_scatter_coalesced
    (3, "deepspeed-zero3", FP16, None, "across nodes"),  # a cluster not placed on nodes
    (3, "deepspeed-zero3", "bf16-mixed", 2, "read fp16"),  # the kernels read a __half*
])
def test_refusals_come_before_anything_changes(stage, recipe, precision, d, message):
    model, cluster = MLP([8, 16, 8]), Cluster(4, gpus_per_node=d)
    with pytest.raises(ValueError, match=message):
        ZeroEngine(model, cluster, stage, get_optimizer("adam"), precision, recipe=recipe,
                   wire=Wire(zero_quantized_gradients=True), shard_group=None if isinstance(stage, int) else 2)
    assert all(not r.ledger.live for r in cluster.ranks) and not cluster.trace.calls


@pytest.mark.bad_input("engine arguments", unchanged=True)
@pytest.mark.parametrize("widths, backend, loco, message", [
    ([8, 3], "numpy", None, "16 bytes at a time"),  # (3, 8): M = 24, G = 8, groups of 3, not the kernels' 8
    ([8, 16, 8], "meta", LocoParams(), "needs values"),  # LoCo's errors are values
])
def test_shapes_the_kernel_cannot_split_and_loco_without_values_are_refused(widths, backend, loco, message):
    model, cluster = MLP(widths), Cluster(4, gpus_per_node=2, backend=backend)
    with pytest.raises(ValueError, match=message):
        ZeroEngine(model, cluster, 3, get_optimizer("adam"), FP16, recipe="deepspeed-zero3",
                   wire=Wire(zero_quantized_gradients=True, loco=loco))
    assert all(not r.ledger.live for r in cluster.ranks) and not cluster.trace.calls


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_loco_without_qgz_and_bad_loco_params_are_refused():
    with pytest.raises(ValueError, match="needs zero_quantized_gradients=True"):
        Wire(loco=LocoParams())
    with pytest.raises(ValueError, match="err_beta must be"):
        LocoParams(err_beta=1.5)
    with pytest.raises(ValueError, match="reset_T must be"):
        LocoParams(reset_T=-1)


def _cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_timeline_takes_zero_quantized_gradients_by_deepspeeds_name(capsys):
    """`zerosim timeline --zero-quantized-gradients` on llama-7b, 16 ranks in 2 nodes of 8. By hand: 32 blocks of 7
    matrices, the embedding and the LM head (32000 × 4096: G = 32000, M/G = 4096) are 226 parameters qgZ admits, 4
    all-to-alls each (int4 and scales, in the node and across); the 65 RMSNorm weights (1-D) are reduce-scattered:
    969 "reduce grads" calls; 452 in-node calls (the 2 of each qgZ parameter), 585 across (226·2 + 65 + 68 gathers)."""
    code, out, _ = _cli(capsys, "timeline", "--model", "llama-7b", "--ranks", "16", "--gpus-per-node", "8",
                        "--stage", "3", "--seq-len", "64", "--batch", "1", "--zero-quantized-gradients", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["by_purpose"]["reduce grads"]["calls"] == 4 * 226 + 65
    assert got["tiers"]["intra-node"]["calls"] == 2 * 226
    assert got["tiers"]["inter-node"]["calls"] == 2 * 226 + 65 + 68


@pytest.mark.bad_input("command line", unchanged=True)
def test_the_timeline_refuses_qgz_on_one_node_in_one_line(capsys):
    code, _, err = _cli(capsys, "timeline", "--model", "llama-7b", "--ranks", "8", "--gpus-per-node", "8",
                        "--stage", "3", "--seq-len", "64", "--batch", "1", "--zero-quantized-gradients")
    assert code != 0 and "qgZ runs across nodes" in err and len(err.strip().splitlines()) == 1


def test_memory_takes_zero_quantized_gradients_at_stage_3_only(capsys):
    """`zerosim memory --zero-quantized-gradients` runs DeepSpeed's stage 3 alone (qgZ is its reduction) and says so;
    what one rank sends shrinks against the same run in fp16 (4 bytes of int4 a 16-bit pair, plus scales)."""
    argv = ("memory", "--model", "llama-7b", "--ranks", "16", "--gpus-per-node", "8", "--seq-len", "64", "--batch",
            "1", "--json")
    code, out, _ = _cli(capsys, *argv, "--zero-quantized-gradients")
    assert code == 0
    rows = json.loads(out)["stages"]
    _, plain, _ = _cli(capsys, *argv[:5], *argv[7:])  # the stages' table takes no --gpus-per-node
    fp16 = next(r for r in json.loads(plain)["stages"] if r["stage"] == 3)
    assert [r["stage"] for r in rows] == [3] and rows[0]["sent"] < fp16["sent"]
    code, out, _ = _cli(capsys, *argv[:-1], "--zero-quantized-gradients")
    assert "Stage 3 reduces its gradients int4 through two all-to-alls (DeepSpeed ZeRO++ qgZ)" in out


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("command", ["memory", "timeline"])
def test_the_commands_refuse_qgz_on_the_layer_sized_model_in_one_line(capsys, command):
    """Without --seq-len the model twin holds one flat (1-D) tensor a layer, which qgZ sends the plain way: a run
    that would show no qgZ at all is refused, naming the flags that give it matrices."""
    code, _, err = _cli(capsys, command, "--model", "llama-7b", "--ranks", "16", "--gpus-per-node", "8",
                        "--zero-quantized-gradients")
    assert code != 0 and "add --seq-len and --batch" in err and len(err.strip().splitlines()) == 1
