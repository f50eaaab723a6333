"""The optimizer's state stored in fp16 or bf16 (MixedPrecision(optim_state=...)): what it stores, what it costs,
that every ZeRO stage still equals the oracle bit for bit, and that it fails as seeds 000, 001 and 002 say.

Yardsticks: NumPy's own float32 -> float16 conversion (one correct rounding, no zerosim code) for the stored
values; hand formulas for the ledger's bytes; the oracle for the stages; the fp32-state run for the failure.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from helpers import bits
from hypothesis import given
from hypothesis import strategies as st
from test_engine_oracle import ELEMENTWISE, run_pair  # the stage tests' pair of runs and hyperparameters

from zerosim import MLP, Cluster, Reference, ZeroEngine, get_optimizer
from zerosim.analysis.costs import MemoryConfig, model_state_memory
from zerosim.analysis.numerics import run_side_by_side
from zerosim.models import make_regression
from zerosim.optim import Adam, Muon, widened
from zerosim.precision import MixedPrecision, get_precision

B1, B2 = 0.9, 0.999


def policy(preset: str, fmt) -> MixedPrecision:
    return get_precision(preset).with_(optim_state=fmt)


# -- engine = oracle, bit for bit, at every stage -----------------------------------------------------------------
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_every_stage_equals_the_oracle_with_16_bit_state(stage, fmt):
    # 3*5+5 + 5*2+2 = 32 params on 3 ranks: uneven shards; lr 1e-2 so the states move every step
    engine, ref, *_ = run_pair([3, 5, 2], 3, stage, policy("fp16-mixed", fmt), "adam", 3, False, 11)
    state = engine.full_optimizer_state()
    assert {k: v.dtype for k, v in state.items()} == {"m": np.dtype(fmt.replace("fp", "float")) if fmt == "fp16"
                                                      else ml_dtypes.bfloat16, "v": state["m"].dtype}
    for name, got in state.items():
        assert np.array_equal(bits(got), bits(ref.optimizer_state()[name])), name
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))


@pytest.mark.slow
@given(
    widths=st.lists(st.integers(1, 6), min_size=2, max_size=4),
    n=st.integers(1, 6),
    stage=st.integers(0, 3),
    preset=st.sampled_from(["fp32", "fp16-mixed", "bf16-mixed", "fp16-pure", "bf16-pure-sr"]),
    fmt=st.sampled_from(["fp16", "bf16", "fp32"]),
    opt=st.sampled_from(sorted(ELEMENTWISE)),
    steps=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_the_oracle_equals_every_stage_for_every_state_format(widths, n, stage, preset, fmt, opt, steps, seed):
    model = MLP(widths)
    params = model.init_params(np.random.default_rng(seed + 1))
    data = make_regression(np.random.default_rng(seed), n * steps, 3, widths)
    p = policy(preset, fmt)
    engine = ZeroEngine(model, Cluster(n), stage, get_optimizer(opt, **ELEMENTWISE[opt]), p, params=params)
    ref = Reference(model, get_optimizer(opt, **ELEMENTWISE[opt]), p, world_size=n, params=params,
                    reduce_every_micro_step=stage >= 2)
    for s in range(steps):
        batches = data[s * n : (s + 1) * n]
        try:
            got = engine.step(batches)
        except FloatingPointError:  # fp16 state's huge updates overflowed a 16-bit gradient: the oracle sees it too
            with pytest.raises(FloatingPointError):
                ref.step(batches)
            break
        assert got == ref.step(batches)
    assert np.array_equal(bits(engine.full_master()), bits(ref.master()))
    want = ref.optimizer_state()
    for name, got in engine.full_optimizer_state().items():
        assert got.dtype == np.dtype(get_precision(policy(preset, fmt)).state_format.dtype)
        assert np.array_equal(bits(got), bits(want[name])), name


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_16_bit_state_on_the_cupy_standin_equals_the_oracle(stage):
    # the device path (backend cupy-sim on the NumPy stand-in of CuPy's arrays, tests/test_array_namespace.py):
    # the state widened, stepped and stored on the device gives the host oracle's bits
    from test_array_namespace import dev

    n, model, p = 2, MLP([8, 16, 4]), policy("fp16-mixed", "fp16")
    rng = np.random.default_rng(stage)
    data = [[(rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32))
             for _ in range(n)] for _ in range(2)]
    params = model.init_params(np.random.default_rng(7))
    cluster = Cluster(n, backend="cupy-sim", xp="numpy-standin")
    engine = ZeroEngine(model, cluster, stage, Adam(lr=1e-2), p, params=params)
    oracle = Reference(model, Adam(lr=1e-2), p, n, params=params, device=cluster.backend.xp,
                       reduce_every_micro_step=stage >= 2)
    for batch in data:
        on_device = [(dev(x), dev(t)) for x, t in batch]
        assert engine.step(on_device) == oracle.step(on_device)
    for name, want in oracle.optimizer_state().items():
        shards = [cluster.backend.to_numpy(s[name]) for s in engine.optimizer_shards()]
        got = engine.layout.unarrange(np.concatenate(shards)) if stage else shards[0]  # stage 0: each rank has all
        assert got.dtype == np.float16 and np.array_equal(bits(got[: model.num_params]), bits(want)), name


# -- what is stored: the fp32 step's state, rounded once -------------------------------------------------------
def test_one_step_stores_the_fp32_moments_rounded_once_and_updates_with_the_unrounded_ones():
    g = np.float32(2.0) ** -np.arange(0, 30, dtype=np.float32)  # 1 down to 2**-29: across fp16's subnormals
    g = (g * np.float32(1.3)).astype(np.float32)
    w16, w32 = np.ones_like(g), np.ones_like(g)
    state16 = {k: np.zeros(g.shape, np.float16) for k in ("m", "v")}
    state32 = {k: np.zeros(g.shape, np.float32) for k in ("m", "v")}
    opt = Adam(lr=1e-3)
    with widened(state16, np.float32) as work:
        opt.step(w16, g, work, 1)
    opt.step(w32, g, state32, 1)
    # yardstick: NumPy's float32 -> float16 cast (a single correct rounding), of the fp32 run's moments
    assert np.array_equal(bits(state16["m"]), bits(state32["m"].astype(np.float16)))
    assert np.array_equal(bits(state16["v"]), bits(state32["v"].astype(np.float16)))
    # the step read the fp32 moments (a fused kernel's registers): the weights are the fp32-state run's, bit for bit
    assert np.array_equal(bits(w16), bits(w32))
    # v = fl32(1 - b2)·g² is 0 in fp16 at or below half of 2**-24: |g| <= sqrt(2**-25 / 0.001) = 5.46e-3
    lost = state16["v"] == 0
    assert np.array_equal(lost, state32["v"] <= 2.0**-25)
    assert lost.sum() == 22 and g[lost].max() < math.sqrt(2.0**-25 / 0.001) < g[~lost].min()


def test_with_16_bit_arithmetic_too_eps_rounds_to_zero_and_a_lost_v_divides_by_it():
    # torch's default Adam on fp16 parameters (torch/optim/adam.py `_multi_tensor_adam`) keeps m, v in fp16 and adds
    # eps into an fp16 tensor (`_foreach_add_(exp_avg_sq_sqrt, eps)`); zerosim's Adam on fp16 arrays rounds each op
    # to fp16 the same way (in its own order): 1e-8 is under half of fp16's smallest subnormal 2**-24, so it is 0
    from zerosim.optim import scalar

    assert scalar(1e-8, np.float16) == 0 and 1e-8 < 2.0**-25
    w, g = np.ones(3, np.float16), np.float16([1e-3, 0.0, 0.1])
    state = {k: np.zeros(3, np.float16) for k in ("m", "v")}
    with np.errstate(divide="ignore", invalid="ignore"):
        Adam(lr=1e-3).step(w, g, state, 1)
    # g = 1e-3: v = fl16(0.001)·1e-6 ≈ 1e-9 -> 0, so m_hat / (sqrt(0) + 0) = inf; g = 0: 0 / 0 = NaN; g = 0.1 is fine
    assert state["v"][0] == 0 and w[0] == -np.inf and np.isnan(w[1]) and w[2] == np.float16(1 - 1e-3)


def test_a_failed_step_leaves_the_stored_state_as_it_was():
    state = {"m": np.full(3, 0.5, np.float16)}
    with pytest.raises(RuntimeError), widened(state, np.float32) as work:
        work["m"][...] = 7
        raise RuntimeError("the step failed")
    assert np.array_equal(state["m"], np.full(3, 0.5, np.float16))


# -- what it costs: 2 bytes an element in the ledger, the hand formula, the meta backend --------------------------
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("fmt, nbytes", [(None, 4), ("fp32", 4), ("fp16", 2), ("bf16", 2)])
def test_the_ledger_counts_the_states_bytes_in_their_format(stage, fmt, nbytes):
    model = MLP([16, 64, 64, 4])  # P = 16*64+64 + 64*64+64 + 64*4+4 = 5508
    assert model.num_params == 5508
    engine = ZeroEngine(model, Cluster(4), stage, Adam(lr=1e-3), policy("bf16-mixed", fmt))
    elements = 5508 if stage == 0 else 1377  # stage 0 keeps all P on every rank; from stage 1 ceil(5508 / 4)
    for rank in engine.cluster.ranks:
        assert rank.ledger.current("optim:m") == rank.ledger.current("optim:v") == nbytes * elements
    formula = model_state_memory(5508, 4, stage, MemoryConfig(state_bytes=nbytes)).by_kind
    assert formula["optim:m"] == formula["optim:v"] == nbytes * elements


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_meta_backend_counts_16_bit_state_at_7_5b_on_64_ranks(stage):
    from zerosim.analysis.costs import get_preset
    from zerosim.models.meta import MetaModel

    model = MetaModel.from_preset(get_preset("zero-paper-7.5b"))
    cluster = Cluster(64, backend="meta", hosted="all", trace="call", timeline=False)
    ZeroEngine(model, cluster, stage, Adam(), policy("fp16-mixed", "fp16"))  # allocates every state in its ledger
    P = model.num_params
    elements = P if stage == 0 else -(-P // 64)  # whole, or ceil(P / 64) a rank
    led = cluster.ranks[63].ledger
    assert led.current("optim:m") == led.current("optim:v") == 2 * elements
    formula = model_state_memory(P, 64, stage, MemoryConfig(state_bytes=2))
    assert formula.optimizer_total == led.current("optim:m") + led.current("optim:v")
    # the paper's K = 12 (master + m + v) becomes 4 + 2 + 2 = 8: stage 0 holds 2 + 2 + 8 = 12 bytes a parameter
    assert model_state_memory(P, 64, 0, MemoryConfig(state_bytes=2)).total == 12 * P


def test_a_meta_step_with_16_bit_state_keeps_its_bytes():
    from zerosim.models.meta import MetaModel

    model = MetaModel([("l0", 1000), ("l1", 24)])  # P = 1024 on 8 ranks: 128 a rank
    cluster = Cluster(8, backend="meta", hosted="all", trace="call", timeline=False)
    engine = ZeroEngine(model, cluster, 2, Adam(), policy("fp16-mixed", "bf16"))
    engine.step(model.batches(cluster))  # the step runs on data-less arrays, widening and storing the state
    assert engine.t == 1 and all(r.ledger.current("optim:v") == 2 * 128 for r in cluster.ranks)


# -- a checkpoint keeps the state in its format: resuming is the same run, resharding too ---------------------------
@pytest.mark.parametrize("stage, new_stage, n, m", [(1, 1, 2, 2), (2, 3, 2, 3), (3, 0, 3, 2)])
def test_a_checkpoint_of_16_bit_state_resumes_the_same_run(tmp_path, stage, new_stage, n, m):
    from zerosim import checkpoint as ckpt

    model, p = MLP([3, 5, 2]), policy("bf16-mixed", "fp16")
    params = model.init_params(np.random.default_rng(3))
    data = make_regression(np.random.default_rng(4), 4 * max(n, m), 3, [3, 5, 2])
    saved = ZeroEngine(model, Cluster(n), stage, Adam(lr=1e-2), p, params=params)
    for s in range(2):
        saved.step(data[s * n : (s + 1) * n])
    ckpt.save(saved, str(tmp_path))
    loaded = ckpt.load(str(tmp_path), Cluster(m), model, stage=new_stage)  # the policy, optim_state too, from the file
    assert loaded.precision.optim_state == "fp16"
    for name, got in loaded.full_optimizer_state().items():  # 2-byte arrays, the saved bits
        assert got.dtype == np.float16 and np.array_equal(bits(got), bits(saved.full_optimizer_state()[name]))
    state = ckpt.read_state(str(tmp_path))
    ref = Reference(model, Adam(lr=1e-2), p, world_size=m, reduce_every_micro_step=new_stage >= 2)
    ref.set_state(state.params, state.master, state.optimizer, state.t)
    for s in range(2, 4):
        batch = data[s * m : (s + 1) * m]
        assert loaded.step(batch) == ref.step(batch)
    assert np.array_equal(bits(loaded.full_master()), bits(ref.master()))
    want = ref.optimizer_state()
    assert all(np.array_equal(bits(v), bits(want[k])) for k, v in loaded.full_optimizer_state().items())


# -- bad input: refused with the name, before anything is allocated ---------------------------------------------
@pytest.mark.bad_input("precision policies")
@pytest.mark.parametrize("fmt", ["fp8", "int8", "fp64", "float16"])
def test_an_unknown_state_format_is_refused_by_name(fmt):
    with pytest.raises(ValueError, match=f"unknown optim_state '{fmt}'.*fp32, fp16, bf16"):
        MixedPrecision(optim_state=fmt)


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_muon_with_16_bit_state_is_refused_before_anything_is_allocated():
    cluster = Cluster(2)
    with pytest.raises(ValueError, match="muon keeps whole-matrix state; optimizer state in fp16 is modelled for the "
                                         "elementwise optimizers only"):
        ZeroEngine(MLP([3, 4, 2]), cluster, 1, Muon(), policy("fp16-mixed", "fp16"))
    assert all(rank.ledger.current() == 0 for rank in cluster.ranks)
    with pytest.raises(ValueError, match="muon keeps whole-matrix state"):
        Reference(MLP([3, 4, 2]), Muon(), policy("fp16-mixed", "bf16"), world_size=2)


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
def test_the_cli_refuses_an_unknown_state_format(capsys):
    from zerosim.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--optim-state", "fp8", "--steps", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --optim-state: invalid choice: 'fp8' (choose from 'fp32', 'fp16', 'bf16')" in err


def test_the_cli_trains_with_16_bit_state_and_says_so(capsys):
    from zerosim.cli.main import main

    assert main(["train", "--precision", "fp16-mixed", "--optim-state", "fp16", "--steps", "2", "--ranks", "2",
                 "--lr", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert "fp16-mixed, adam lr 0.001, optimizer state stored in fp16" in out.splitlines()[0]


# -- showing it fail, against the fp32-state run -------------------------------------------------------------------
def test_fp16_state_fails_where_fp32_and_bf16_state_train():
    runs = run_side_by_side({"fp32": "fp16-mixed", "fp16": policy("fp16-mixed", "fp16"),
                             "bf16": policy("fp16-mixed", "bf16")}, steps=30)
    fp32, fp16, bf16 = runs["fp32"], runs["fp16"], runs["bf16"]
    assert fp32.losses[0] == fp16.losses[0] == bf16.losses[0]  # the same first step: its update read fp32 moments
    # seed 001: v's tiny values "round to zero" in fp16 — a fifth of v is exactly 0 in the first steps (never in fp32)
    assert max(fp16.v_zero) > 0.2 and max(fp32.v_zero) < 0.02
    # ... and the updates grow (a one-step v under a many-step bias correction): the loss climbs 100-fold
    assert max(fp16.losses[:10]) > 100 * fp16.losses[0] and fp16.losses[-1] > 50 * fp32.losses[-1]
    # fp32 state descends: its last loss under a quarter of the first
    assert fp32.losses[-1] < 0.25 * fp32.losses[0]
    # bf16 (seed 000's "quantize the update loop"): its EMA stalls more as v settles — over the last 10 steps each step
    # left over 40 % of v bit for bit unchanged (5 % at step 2), where fp32's v moved everywhere
    assert np.mean(bf16.v_unchanged[-10:]) > 0.4 and bf16.v_unchanged[1] < 0.1 and max(fp32.v_unchanged[-10:]) == 0
    # ... yet here it trains as fp32 state does, within 1 % (seed 002: "Adam handles the rounding gracefully")
    assert abs(bf16.losses[-1] - fp32.losses[-1]) < 0.01 * fp32.losses[-1]


def test_loss_scaling_does_not_rescue_fp16_state():
    # the optimizer reads the *unscaled* gradient: v's underflow comes after the unscale, where S cannot reach it
    # (a dynamic scale from 2**10, so the blown-up steps that overflow fp16 are skipped rather than raised)
    scaled = policy("fp16-mixed", "fp16").with_(loss_scale="torch", loss_scale_options={"init_scale": 1024.0})
    runs = run_side_by_side({"S = 1": policy("fp16-mixed", "fp16"), "S = 1024": scaled}, steps=3)
    for run in runs.values():
        assert run.v_zero[0] > 0.2 and run.losses[2] > 100 * run.losses[0]
    assert runs["S = 1"].v_zero[0] == runs["S = 1024"].v_zero[0]  # the same v entries lost: S changed nothing


@pytest.mark.pinned
def test_fp16_state_stops_the_copy_gpt_at_step_7_where_fp32_state_trains_on():
    # zerosim train --model gpt --task copy (3,600 params, 2 ranks, fp16-mixed, Adam lr 1e-2): with m, v in fp16 the
    # blown-up updates overflow the fp16 forward and step 7's gradient holds inf (notebook 11, section 4e). Step 7 on
    # every machine, in the portable arithmetic; with the machine's own kernels (zerosim before issue 33) the run
    # stopped at step 9 under OpenBLAS's AVX2 kernels and at step 14 under its AVX-512 and generic ones
    from zerosim.train import TrainConfig, train

    seen = []
    config = dict(model="gpt", task="copy", steps=7, ranks=2, eval_every=50)
    with pytest.raises(FloatingPointError, match="reduced gradient element\\(s\\) are NaN or inf"):
        train(TrainConfig(precision=policy("fp16-mixed", "fp16"), **config), on_step=lambda *a: seen.append(a[0]))
    assert seen == list(range(1, 7))
    assert len(train(TrainConfig(precision="fp16-mixed", **config)).losses) == 7


# -- the replay's heading for pure 16-bit training (issue 24) ---------------------------------------------------
def test_the_pure_replays_update_heading_says_no_fp32_master_is_kept():
    from zerosim.replay import narrate, replay

    text = narrate(replay(stage=1, precision="fp16-pure", lr=0.1, steps=1))
    heading = " ".join(("3. " + text.split("\n3. ", 1)[1].split("\n  GPU", 1)[0]).split())  # (wrapped at 116)
    assert heading == ("3. Each GPU updates only its own weights with Adam: its fp16 weights widened to fp32, "
                       "m and v in fp32, the result rounded straight back to fp16 (no fp32 master is kept)")
    mixed = narrate(replay(stage=1, precision="fp16-mixed", lr=0.1, steps=1))
    assert "3. Each GPU updates only its own weights with Adam, in fp32" in mixed.splitlines()
