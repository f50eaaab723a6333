"""What the notebooks teach, checked where it is computed: each entry runs in the notebook's own kernel right after
the one code cell whose source holds its anchor (tests/test_notebooks.py inserts it there, in memory; the notebooks
on disk carry none of it). The notebooks tell the story and ask for predictions; these guard its numbers, so that a
cell that computes a different number fails the run, with no `assert` in the learner's way."""

CHECKS = {  # notebook -> [(anchor: text of one code cell, code run right after it)]
    '01_worked_example.ipynb': [
        ('batches = TinyNet.seed_batches()', '''\
assert losses == [10.125, 15.125]  # 0.5 * (0.5 - 5)^2 and 0.5 * (1.5 - 7)^2
'''),
        ('calls = cluster.trace.of_type(Call)', '''\
assert local.tolist() == [[0, 0, 0, -4.5], [-11, -5.5, -5.5, -5.5]]
assert [o.tolist() for o in owned] == [[-11, -5.5], [-5.5, -10]]
'''),
        ('ar = Cluster(2, keep_values=True)', '''\
assert same and (rs_bytes, ar_bytes) == (4, 8) and set(ds_calls) == {"all_reduce"}
assert np.array_equal(ds.full_master(), engine.full_master())
'''),
        ('ref64 = Reference.float64(TinyNet(), Adam(lr=0.1), world_size=2)   # the same step, float64 end to e', '''\
assert run["new w"][0] == 2.0999999046325684       # fp32's nearest number to the seed's 2.1 ...
assert by_hand["new w"][0] == 2.099999999818182    # ... and float64's, where eps = 1e-8 still counts
assert np.allclose(by_hand["new w"], ref64.master(), rtol=1e-15, atol=0)  # the float64 run agrees with the hand
'''),
        ('master = engine.full_master()', '''\
assert fp16.astype(float).tolist() == [2.099609375, -2.900390625, 1.099609375, 0.60009765625]  # the fp16 truth
'''),
        ('ag_call = [c.call for c in calls if c.purpose == "refresh params"][0]', '''\
assert before[0].astype(float).tolist() == [2.099609375, -2.900390625, 1.0, 0.5]  # seed 004's inconsistent model
'''),
        ('stage_peaks_figure({"ZeRO-1": cluster}, title="Seed 004 at stage 1: GPU 0 at each phase\'s peak")', '''\
assert max(peak for _, peak, _ in cluster.ranks[0].ledger.by_phase()) == 48 and cluster.ranks[0].ledger.current() == 40
'''),
        ('engine2, numbers2 = replay_live(stage=2)', '''\
assert np.array_equal(engine2.full_master(), engine.full_master()) and peaks == {1: 48, 2: 46}
'''),
        ('engine3, numbers3 = replay_live(stage=3)', '''\
assert peak_of == {1: 48, 2: 46, 3: 46} and rest_of == {1: 40, 2: 36, 3: 32}
assert at_peak3 == {"params": 8, "grads": 8, "master": 8, "optim:m": 8, "optim:v": 8, "activations": 6}
assert len({h["call"] for h in numbers3["steps"][0]["stage3_gathers"]}) == 5
'''),
        ('trace3 = engine3.cluster.trace', '''\
assert sent3 == [16, 12] and sum(sent3) / 2 == 3 * psi / 2 + 4 / 2
'''),
        ('def all_gathers(stage, checkpoint):', '''\
assert L == 2 and [all_gathers(3, c) - all_gathers(2, c) for c in (False, True)] == [2 * L - 1, 2 * L]
'''),
    ],
    '02_ring_and_rounding.ipynb': [
        ('import numpy as np', '''\
assert [float(s[0]) for s in shards] == [2052, 2052, 2048, 2048]
'''),
        ('print("naive twin, ring order:", [float(s[0]) for s in naive_reduce_scatter(x)])', '''\
assert [float(s[0]) for s in naive_reduce_scatter(x, order="float64")] == [2051] * 4
'''),
        ('for fmt in ("fp16", "bf16", "fp32"):', '''\
assert [bool(zerosim.lost_update(1.0, 1e-5, f)) for f in ("fp16", "bf16", "fp32")] == [True, True, False]
'''),
        ('for precision in ("fp16-mixed", "fp16-pure", "fp16-pure-sr"):', '''\
assert set(paths["fp16-pure"][0]) == {1.0}                                          # nearest rounding never moves
# the master took ~200 steps of ~1e-4
assert 1 + 150e-4 < master[-1] < 1 + 250e-4
# the copy is the master, rounded
assert np.array_equal(copy, zerosim.cast(master, "fp16").astype(float))
# stochastic rounding moved it, ulp by ulp
assert paths["fp16-pure-sr"][0][-1] > 1 + 10 * 2**-10
'''),
        ('ring.controls["fmt"].value = "bf16"   # what a click on bf16 does', '''\
assert ring.hops["result"] == [2048.0] * 4  # bf16's spacing at 2048 is 16: every + 1 is lost
'''),
    ],
    '03_memory_by_stage.ipynb': [
        ('import matplotlib.pyplot as plt', '''\
assert [ledger.peak() for _, ledger in runs] == [2_841_760, 1_136_704, 938_668, 857_120]
'''),
        ('stages = measure_by_stage(MetaModel.from_params(7_500_000_000, layers=64), ranks=64)', '''\
assert [sum(s["resting"].values()) / 1e9 for s in stages] == [120.0, 31.40625, 16.640625, 1.875]
'''),
        ('from zerosim.analysis.costs import measure_stage', '''\
# seed 001 §7: "896 GB of aggregate VRAM stores the same values eight times over"
assert round(8 * one / 1e9) == 896
'''),
        ('from zerosim.explore import model_for', '''\
assert [peaks[s] for s in range(4)] == [row["peak"] for row in measured]
assert peaks[0] > peaks[1] > peaks[2] > peaks[3]
'''),
        ('from zerosim.analysis.costs import get_preset, second_order_memory', '''\
assert r.factors > r.adam and second_order_memory(llama, 1024).split > second_order_memory(llama, 8).split
'''),
        ('import matplotlib.pyplot as plt', '''\
for label, ledger in runs:
    assert sum(at_peak(ledger)[1].values()) == ledger.peak()  # the bar is what was live at the peak moment
'''),
    ],
    '04_transformer_activations.ipynb': [
        ('jacobian = (np.diag(p) - np.outer(p, p)) @ dp', '''\
assert np.allclose(dS[0, 0, 0].astype(np.float64), jacobian, rtol=0, atol=2e-7)  # fp32: a few ulps of 0.1
'''),
        ('import numpy as np', '''\
assert block == 14 * B * L * d * 2 + B * H * L * L * 2 + 4 * B * L * 4 == 8448
'''),
        ('from zerosim import Adam, Cluster, ZeroEngine', '''\
assert (linear, P, sum(layer.values())) == (939_524_096, 1_073_741_824, 2_013_396_992)
assert sum(saved_by_name(ledger, "block").values()) == 32 * 2_013_396_992
assert states == 16 * model.num_params and ledger.peak() == 175_970_942_976
'''),
        ('outside = {n: b for n, b in saved_by_name(ledger).items() if not n.startswith("block")}', '''\
assert ledger.peak("activations") == 32 * 2_013_396_992 + sum(outside.values()) == 66_142_830_592
'''),
        ('import matplotlib.pyplot as plt', '''\
assert by_L[4096]["P"] == 4 * by_L[2048]["P"]  # "quadruples"
assert by_L[8192]["P"] == 17_179_869_184 and 32 * by_L[8192]["P"] == 549_755_813_888  # "≈ 17.2 GB", "≈ 550 GB"
assert 32 * sum(by_L[8192].values()) > 550e9  # "the activation cost alone exceeds 550 GB"
'''),
        ('rest = lambda per_block: sum(per_block.values()) - per_block["P"]', '''\
assert grown == 133_148_180_480
'''),
        ('from zerosim.analysis.costs import strategy_costs', '''\
# 31 block inputs, and block 31 rebuilt (its own input among its tensors)
assert peak["block"] == IDS + 31 * BLD2 + LAYER
assert peak["every-k"] == IDS + 4 * BLD2 + 6 * LAYER  # 4 earlier groups' inputs, and a group of 6 blocks rebuilt
# seed 001's "approximately 1/3 extra compute", by hand: the blocks' forward once more, over a forward and a backward
# of twice its FLOPs; the embedding and the head are not run again (the frameworks checkpoint the blocks only)
blocks, head = LAYERS * (24 * B * L * d * d + 4 * B * L * L * d), 2 * B * L * d * V
assert abs(extra["block"] - blocks / (3 * (blocks + head))) < 0.001 and extra["block"] < 1 / 3 - 0.005
'''),
        ('from zerosim.analysis.costs import recompute_table, seed001_p_multiply_adds', '''\
assert 2 * seed001_p_multiply_adds() < p.flops < 2.2 * seed001_p_multiply_adds()
assert max(table[1:], key=lambda r: r.rho) is table[1] and table[-1].rho > 10 * table[2].rho
'''),
        ('from zerosim.analysis.costs import lifetimes', '''\
assert max(spans, key=spans.get) == "embed.input" and spans["block0.block input"] > spans["block2.block input"]
'''),
        ('import numpy as np', '''\
for name, (shape, dtype) in declared.items():
    # the ledger holds what the unit declares
    assert measured[f"block0.{name}"] == np.prod(shape) * np.dtype(dtype).itemsize
'''),
        ('rest = lambda per_block: sum(per_block.values()) - per_block["P"]', '''\
for n in (1792, 1793):
    pb = measure_activations(MetaGPT(GPT(V, d, H, LAYERS, n)), B, n).per_block
    assert (pb["P"] > rest(pb)) == (n == 1793)  # P overtakes the rest of the layer at L = 1793
'''),
    ],
    '05_time_and_overlap.ipynb': [
        ('import matplotlib.pyplot as plt', '''\
assert abs(result.step_time - (compute + exposed)) < 1e-12   # the step = compute + what it waited for
'''),
        ('grad = 7e9 * 2', '''\
assert round(nv * 1e3, 1) == 54.5 and round(ib * 1e3) == 588   # α = 14 µs: NCCL's network step, 29 ms in all
'''),
        ('from zerosim.analysis.costs import LINKS', '''\
assert ring_tree_crossover(1024, LINKS["ib_ndr"]) > 100e6 > ring_tree_crossover(8, LINKS["nvlink4"])
'''),
        ('from zerosim.models.meta import MetaModel', '''\
assert fsdp_res.exposed_comm[0] < 0.5 * seed_res.exposed_comm[0]
assert fsdp_eng.cluster.ranks[0].ledger.peak("params") > seed_eng.cluster.ranks[0].ledger.peak("params")
'''),
        ('modules = MetaModel.from_preset(get_preset("llama-7b"), unit="module")   # 291 units, from 4,096 to ', '''\
assert steps[0, best] < steps[0, 1e10] and steps[0, best] < steps[0, 1e6]
'''),
        ('from zerosim.analysis.planner import latency_bound_ranks, sweep', '''\
assert not any(f for r, f in zip(rows, fits) if r.stage in (1, 2))
assert all(f for r, f in zip(rows, fits) if r.stage == 3)
assert round(n_star) == 182 and z3[512] > 3 * z3[128] and abs(z3[128] - z3[64]) < 0.1 * z3[64]
'''),
        ('from zerosim.analysis.costs import get_preset, measure_stage', '''\
assert 10 < ratio < 312 / 19.5
'''),
    ],
    '06_precision_lab.ipynb': [
        ('tiny = [(x * np.float32(2.0**-10), t * np.float32(2.0**-10)) for x, t in make_regression(np.random.d', '''\
assert np.float16(2.0**-25) == 0 and np.float16(np.nextafter(2.0**-25, 1.0)) == 2.0**-24  # the tie, and past it
assert lost > 0.3 and kept < 0.001 and flushed_share(weights, "fp16") > 0.6 and flushed_share(passed, "fp16") < 0.01
assert flushed_share(values, "bf16") == 0
'''),
        ('g32 = one_step_gradient(widths, tiny, get_precision("fp32"))', '''\
assert flushed[1.0] > 0.5 and flushed[2.0**16] == 0.0
'''),
        ('batches = make_regression(np.random.default_rng(0), 4 * 60, 16, widths)', '''\
assert static.t == 0
'''),
        ("for s in (25, 45):  # rank 1's micro-batch of step s: a target far beyond fp16", '''\
assert [e.step for e in runs["torch's GradScaler, growth_interval 10"] if e.skipped] == [1, 2, 25, 45]
assert [e.step for e in runs["DeepSpeed's DynamicLossScaler, scale_window 10"] if e.skipped] == [1, 2, 3, 25, 45]
'''),
        ('ds = engines["deepspeed"]', '''\
assert decision.skipped and decision.scale_after == decision.scale_before and flag[0].op == "max"
'''),
        ('clips = engines["torch"].cluster.trace.of_type(GradClip)', '''\
assert clips[0].coef < 1 and abs(clips[0].norm * clips[0].coef - 1.0) < 1e-5
'''),
        ('data = make_regression(np.random.default_rng(5), 8, 16, widths)', '''\
assert gap <= norm_error_bound(8)
'''),
        ('fp16 = MixedPrecision("fp16")', '''\
assert (a, b, c, d) == (0.5 + 2.0**-12, 0.5, 3.0, 4.0)
'''),
        ('policies = {', '''\
assert 5 < rms["seeds fp16", 192] / rms["seeds fp16", 3] < 11 and 4 < rms["seeds bf16", 192] / rms["seeds bf16", 3] < 11
assert rms["seeds fp16, fp32 wire", 192] < 1e-7
'''),
        ('for n in ns:', '''\
assert max(ratio.values()) < 1.25 and max(abs(r - 1) for r in late) < 0.03
'''),
        ('from zerosim.analysis.numerics import adam_snr', '''\
assert all(abs(r - lim) < 4 * s / 32 + 0.01 for r, lim, s in zip(reading.ratio, reading.limit, reading.spread))
assert reading.ratio.max() < 1.01 and reading.spread[0] > 10 * reading.snr[0]
'''),
        ('for n in ns:', '''\
for n in ns:
    grads = rank_gradients(n, 2048, "fp16")
    ddp, ds = (recipe_average(grads, policies[k]) for k in ("ddp fp16", "deepspeed-zero12 fp16"))
    assert np.array_equal(ddp, ds) and rms["ddp fp16", n] == rms["deepspeed-zero12 fp16", n]
'''),
    ],
    '07_exercises.ipynb': [
        ('return (rank - step) % world_size          # a first guess', '''\
assert not result.passed and "rank 0 ends holding the sum of chunk 1" in result.counterexample
'''),
        ('return (rank - 1 - step) % world_size', '''\
assert result.passed
'''),
        ('from pathlib import Path', '''\
for name, ex in exercises.EXERCISES.items():
    reference = ex.solution or (A2.read_text() if A2.exists() else None)
    if reference is not None:
        assert exercises.check(name, reference).passed
    for bug in ex.planted:
        source = planted_source(name, bug)
        if source is not None:
            assert not exercises.check(name, source).passed
'''),
    ],
    '08_many_nodes.ipynb': [
        ('runs = {run["strategy"]: run for run in measure_mesh_ownership()}', '''\
assert runs["full_shard"]["ranks"][5]["params"] == (1 / 8, 5 / 8)
assert runs["hsdp"]["ranks"][5]["params"] == runs["mics"]["ranks"][5]["params"] == (1 / 4, 1 / 4)
assert runs["hpz"]["ranks"][5]["secondary"] == (1 / 4, 1 / 4)
assert [runs[s]["bytes"][5] for s in ("full_shard", "hsdp", "mics", "hpz")] == [560, 1260, 1120, 560]
'''),
        ('result = mesh_replay("hsdp")', '''\
assert (first["src"], first["dst"], first["tier"], first["values"]) == (1, 0, "intra-node", [-2.75, -2.75])
assert result["grad32"][0] == {"w1": -5.5, "w2": -2.75, "w3": -2.75, "w4": -5.0}
assert np.allclose(list(result["master"][2].values()), [2.1, -2.9, 1.1, 0.6], atol=1e-6)
assert result["reduction_bytes"] == {"intra-node": 32, "inter-node": 32}
'''),
        ('from zerosim.cli.figures_cmd import MANY_NODES', '''\
assert abs(full.inter - 3 * 2 * psi * 1023 / 1024 / 8) / full.inter < 0.01  # padding of the units: under 1 %
assert abs(hpz.inter / full.inter - 2 / 3) < 0.01
'''),
    ],
    '09_will_it_fit.ipynb': [
        ('config = read_hf_config(shipped_config("llama-3-8b"))', '''\
assert c.num_params == 8_030_261_248  # the published count (the Hub's safetensors metadata)
assert layers["layers.0.self_attn.k_proj"] * 4 == layers["layers.0.self_attn.q_proj"]
'''),
        ('states = measure_by_stage(MetaModel.from_preset(get_preset("llama-3-8b"), unit="block"), N, "adam", ', '''\
assert sum(states[0]["resting"].values()) == 16 * P  # plain data parallel: everything on every rank
assert sum(states[3]["resting"].values()) == 16 * P // N  # ZeRO-3: everything sharded (N divides Ψ here)
'''),
        ('twin = MetaLlama.from_config(config, L)', '''\
assert act.per_block["K"] * 4 == act.per_block["Q"]  # grouped-query attention
assert act.per_block["P"] == 1 * 32 * L * L * 2  # B·H·L², bf16
'''),
        ('for strategy in ("none", "flash", "block"):', '''\
assert [s for s in range(4) if verdicts["block", s][0]["fits"]] == [3]
assert not any(verdicts[st, s][0]["fits"] for st in ("none", "flash") for s in range(4))
assert all(verdicts[st, 1][2]["fits"] for st in runs)
'''),
        ('a100 = verdicts["none", 2][1]', '''\
assert a100["fits_measured_only"] and not a100["fits"]
'''),
        ('plans = {g.key: plan(config, N, 8, g.key, L, 64) for g in GPUS}', '''\
# the only way in: ZeRO-3 and checkpointing
assert (top["rtx3090"].stage, top["rtx3090"].strategy) == (3, "block")
# H100-class compute beats A100 beats GA102
assert top["h200"].step_s < top["a100-80gb"].step_s < top["rtx3090"].step_s
# the H200 fits ZeRO-1 too, but DeepSpeed's overlap_comm is off below ZeRO-3: ZeRO-3 comes first (the text says so)
assert top["h200"].stage == 3 and any(r.stage == 1 for r in plans["h200"].fitting)
'''),
    ],
    '10_fewer_bits.ipynb': [
        ('x = np.float16([1.0, -0.5, 0.25, 0.3])', '''\
assert q.payload.tolist() == [127, -64, 32, 38] and q.scales[0] == 1 / 128
assert dequantize(q).tolist() == [0.9921875, -0.5, 0.25, 0.296875]
'''),
        ('master = gpt.init_params(np.random.default_rng(1)).astype(np.float32)   # (3600,) fp32', '''\
assert weights["unquantized"][0] < 2.0**-8                    # bf16: half an ulp of 2**-7 at most, relative
assert weights["fp8 torchao"][0] > 4 * weights["unquantized"][0] and weights["qwZ int8"][0] > weights["unquantized"][0]
assert weights["qwZ int8"][2] < 1 and abs(weights["fp8 torchao"][2] - 1) < 1e-3
'''),
        ('fp16 = get_precision("fp16-mixed").with_(loss_scale=2.0**8)', '''\
assert 0.05 < g[:, 0].mean() < 0.2 and g[:, 3].max() < 1e-3        # int4: ~10% an element; fp16's ring: ~4e-4
assert (g[:, 2] < 1).all()                                          # biased toward zero at every step
assert abs(g[:, 4].mean() - d * g[:, 2].mean()) < 1e-9               # Σ/n = d·Σ/W
'''),
        ('grads = [run.gradient(*data[3 * n + r])[1][w1.offset : w1.offset + w1.size] for r in range(n)]', '''\
assert plain[0] == loco[0] and max(plain) == min(plain)   # the first call has no error to feed back; plain repeats
assert loco[-1] < plain[-1] / 5 and loco[-1] < loco[15] < loco[3] < loco[0]   # LoCo's average keeps falling
assert loco[-1] * 64 < 2 * loco[15] * 16      # its summed error grows far slower than t (about as sqrt(t) here)
'''),
        ('init = gpt.init_params(np.random.default_rng(1))', '''\
assert grad_runs["qgZ int4"][0] == grad_runs["unquantized"][0]       # gradients first travel after step 1's loss
'''),
        ('c = Cluster(4)', '''\
assert sent == hand
assert qgz_sent == qgz_hand and ring_sent == (n - 1) * 2 * M // n
'''),
        ('gpt3 = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")', '''\
assert {k: round(v["gather params"], 2) for k, v in scale.items()} == {
    "unquantized": 16.81, "qwZ int8": 12.67, "fp8 torchao": 9.85, "mxfp8": 12.88}
assert all(round(v["reduce grads"], 2) == 8.40 for v in scale.values())
# + the amaxes
assert gathered["fp8 torchao"] == gathered["unquantized"] // 2 + 2 * 1023 * math.ceil(99 / 1024) * 4
'''),
        ('from zerosim.analysis.timeline import phase_time', '''\
assert sent["qgZ in node"] == hand_in and sent["qgZ across nodes"] == hand_across
assert sent["fp16 reduce-scatter"] == 1023 * 2 * block // 1024
assert 31 < ib_ratio < 33   # 2M against M/16: 32x, less the scales
'''),
        ('init = gpt.init_params(np.random.default_rng(1))', '''\
for runs in (weight_runs, grad_runs):
    for name, losses in runs.items():
        assert np.mean(losses[-10:]) < 0.75 * math.log(6)             # every run learns (chance: log 6)
        if name not in ("float64", "unquantized"):
            assert losses != runs["unquantized"]                      # and each wire changed the run
'''),
    ],
    '11_fp16_vs_bf16.ipynb': [
        ('print(f"{\'\':6s} {\'exp bits\':>8s} {\'fraction bits\':>13s} {\'spacing at 1\':>13s} {\'smallest su', '''\
assert (fp16.exponent_bits, fp16.mantissa_bits, bf16.exponent_bits, bf16.mantissa_bits) == (5, 10, 8, 7)
assert (fp16.eps, bf16.eps) == (2.0**-10, 2.0**-7)                          # bf16 rounds 8 times coarser
assert (fp16.smallest_subnormal, fp16.smallest_normal) == (2.0**-24, 2.0**-14)   # seed 001's "6e-5" is 2**-14
assert bf16.smallest_normal == fp32.smallest_normal == 2.0**-126 and bf16.smallest_subnormal == 2.0**-133
assert fp16.max == 65504 and bf16.max > 3e38                                  # bf16 has fp32's range
'''),
        ('gpt = GPT(6, 16, 2, 1, 6)', '''\
assert max(flushed[50][("fp16", 2**16)], flushed[150][("fp16", 2**16)]) < 0.001   # under 0.1 % at S = 2**16
assert smallest > bf16.smallest_subnormal / 2                       # so bf16 flushes none of them, at any S >= 1:
assert all(row[("bf16", s)] == 0 for row in flushed.values() for s in scales)
assert 0.02 < min(subnormal.values()) and max(subnormal.values()) > 0.2    # 2 % to over a fifth are subnormal
'''),
        ('g = (np.float32(1.3) * np.float32(2.0) ** -np.arange(4, 13, dtype=np.float32)).astype(np.float32)', '''\
assert np.array_equal(stored["fp16"] == 0, g <= threshold) and (g <= threshold).sum() == 5
assert np.all(stored["bf16"] != 0) and np.all(stored["fp32"] != 0)
'''),
        ('from zerosim.optim import scalar', '''\
assert scalar(1e-8, np.float16) == 0
assert w[0] == -np.inf and np.isnan(w[1]) and w[2] == np.float16(0.999)   # m/0 = inf, 0/0 = NaN, and one sane step
'''),
        ('T, gc = 1000, np.full(4, 1e-3, np.float32)', '''\
assert ratio[0] == 1                                    # step 1 reads the fp32 moments: the same update
assert np.all(np.abs(ratio / predicted - 1) < tolerance)   # the predicted growth
assert ratio[-1] > 25                                   # 25 times too large after 1,000 steps
'''),
        ('g = np.full(1, math.sqrt(1.5), np.float32)', '''\
assert abs(final["fp32"] - exact) < 1000 * 3 * 1.5 * 2.0**-24
assert final["bf16"] == 1.0                                         # never moved
# stalled where the change < half a spacing
assert final["fp16"] < 1.02 and 0.001 * (1.5 - final["fp16"]) <= 2.0**-11
'''),
        ('mixed = get_precision("fp16-mixed")', '''\
assert max(h.v_zero) > 0.2 and max(a.v_zero[1:]) < 0.01                  # a fifth of fp16's v is 0
assert max(h.losses[:10]) > 100 * h.losses[0] and h.losses[-1] > 100 * a.losses[-1]
assert np.mean(b.v_unchanged[100:]) > 0.5 and max(a.v_unchanged[100:]) < 0.01   # bf16 average stalls...
assert abs(b.losses[-1] - a.losses[-1]) < 0.02 * a.losses[-1]                  # ...yet trains as fp32 state here
'''),
        ('def run_until_it_fails(p):', '''\
assert static is None and static_done + 1 == 7  # step 7 on every machine: the portable kernels give the same bits
assert len(scaled.skipped) > 130 and dict(scaled.accuracy)[150] < 0.25
assert max(evals.values()) < 0.5 and (wide is None or dict(wide.accuracy)[150] < 0.5)   # fp16 state: far behind...
assert dict(kept.accuracy)[100] == dict(kept.accuracy)[150] == 1.0            # ...bf16 state, which learned
'''),
        ('print(f"{\'stage\':>5s} {\'fp32 m, v\':>10s} {\'16-bit m, v\':>12s}   GB per GPU")', '''\
assert model_state_memory(psi, 64, 0).total == 16 * psi                           # 2 + 2 + 4 + 8
assert model_state_memory(psi, 64, 0, MemoryConfig(state_bytes=2)).total == 12 * psi   # 2 + 2 + 4 + 4
assert saved[0] == 4 * psi and saved[1] == saved[2] == saved[3] == 4 * math.ceil(psi / 64)   # 4Ψ, or 4Ψ/N a GPU
assert abs(saved[3] / model_state_memory(psi, 64, 3).total - 0.25) < 1e-9   # a quarter of ZeRO-3's 1.875 GB
'''),
        ('gpt = GPT(6, 16, 2, 1, 6)', '''\
for step, row in flushed.items():
    assert row[("fp16", 1)] > 0                                     # fp16 loses some without scaling
    assert row[("fp16", 2**16)] < row[("fp16", 1)]                  # and fewer once S shifts them up
    assert row[("fp16", 1)] < 0.01                                  # a fraction of a percent, on this model
'''),
        ('"fp32": "fp32",', '''\
for name, r in conv.items():
    assert dict(r.accuracy)[100] == dict(r.accuracy)[150] == 1.0       # every format learns to copy by step 100
    assert abs(r.losses[-1] - ref[-1]) < 0.02 * ref[-1]                  # and ends within 2 % of fp32's loss
'''),
    ],
    '13_tensor_parallel.ipynb': [
        ('replayed = tensor_replay("fp16-mixed")', '''\
assert [*replayed["dw"], replayed["dw3"], replayed["db4"]] == [-5.5, -2.75, -2.75, -5.0]  # seed 004's average
'''),
        ('gpt = GPT(vocab=32, d_model=16, n_heads=4, n_layers=2, seq_len=8)', '''\
assert same
'''),
        ('for t in (1, 2, 4, 8):', '''\
assert max(peaks) / min(peaks) < 1.01  # the peak per GPU does not move with the TP degree
'''),
        ('s, b, h, a, t = 2048, 1, 4096, 32, 8', '''\
for sp in (False, True):
    measured = measure_tp_activations(layer, b, s, "bf16-mixed", t, sp).per_block_total
    dropout = sum(term_bytes(x, s, b, h, a, t, sp) for x in MEGATRON_TERMS if x.zerosim is None)
    assert measured == megatron_formula(s, b, h, a, t, sp) - dropout + 16 * s * b / (t if sp else 1)
'''),
    ],
    '14_offload.ipynb': [
        ('model = MetaModel.from_params(13_000_000_000, layers=40)', '''\
assert rows["ZeRO-Offload"][0] <= v100.capacity < rows["on the device"][0]
assert rows["ZeRO-Offload"][1]["fits"]
'''),
        ('widths, N, steps = [16, 64, 64, 4], 4, 120', '''\
assert same and device == offloaded and delayed[:10] == device[:10] and delayed != device
assert device[-1] < device[0] / 5 and delayed[-1] < delayed[0] / 5  # both train
'''),
        ('hw = Hardware("v100", compute="fp16", pcie=dgx2.pcie, host_bandwidth=dgx2.cpu_bandwidth(1))', '''\
assert plain.uncovered["cpu"] == plain.busy["cpu"]  # exposed: the device waits for the whole CPU step
assert plain.duration - dpu.duration >= 0.99 * plain.busy["cpu"]  # DPU hides it
assert dpu.idle < plain.idle and dpu.uncovered["pcie"] > 0  # what remains is PCIe
'''),
        ('tokens = [1024, 2048, 4096, 8192, 16384, 32768, 65536]', '''\
assert all(h[0] < p[0] for p, h in zip(plain, hidden))  # DPU never slows a step here
assert gpu_share == sorted(gpu_share)  # the more tokens a step, the smaller offload's share of it
assert all(s[0] >= 0.99 * s[2] for s in slow)  # a slow CPU sets the pace: the step is at least the CPU step
'''),
        ('from zerosim.analysis.costs import LINKS, Link, get_preset', '''\
assert share.busy["nvme"] > share.busy["compute"]  # the drives set the pace
assert faster.duration < share.duration and faster.busy["nvme"] < share.busy["nvme"]
'''),
        ('model = MetaModel.from_params(13_000_000_000, layers=40)', '''\
for name, parallelisms in (("on the device", ()), ("ZeRO-Offload", (Offload("cpu"),))):
    row, cluster, engine = measure_stage(model, 1, 2, "adam", "fp16-mixed", parallelisms=parallelisms)
    tiers = {t: cluster.ranks[0].ledger_of(t).by_kind() for t in ("device", "host", "nvme")}
    placement = PLACEMENTS["optimizer-cpu" if parallelisms else "none"]
    hand = offload_memory(model.num_params, 1, 2, engine.plan and placement)
    assert all(tiers[t] == hand.tiers[t] for t in tiers), name  # the ledgers are the formula, kind by kind
'''),
    ],
    '15_torch_parity_lab.ipynb': [
        ('from zerosim.frameworks.torch import compare_ddp, run_torch_ddp', '''\
if TORCH:
    assert all(r.equal == 1.0 and r.max_ulps == 0 for r in gloo)  # the same adds in the same order: every bit
'''),
        ('four = run_torch_ddp(4, (16, 32, 8), 2, 0)', '''\
if TORCH:
    assert all(r.equal == 1.0 for r in compare_ddp(four, "gloo"))
'''),
        ('from zerosim.frameworks.torch import compare_zero1, ranks_of, run_torch_kits', '''\
if TORCH:
    # the same inputs and sqrt: every bit
    assert all(r.equal == 1.0 for r in runs["torch's gradients, torch's sqrt"])
    for name in ("torch's gradients, zerosim's sqrt", "zerosim's own gradients"):
        first = next((r for r in runs[name] if r.equal < 1.0), None)
        # a difference, where there is one, starts where that run changed something
        assert first is None or first.cause == ("update" if "sqrt" in name else "local")
'''),
    ],
    '16_context_parallel.ipynb': [
        ('C, L = 4, 8', '''\
assert [work["contiguous", p] / work["contiguous", 0] for p in range(C)] == [1, 3, 5, 7]  # p + 1/2 chunks, by hand
assert len({work["zigzag", p] for p in range(C)}) == 1  # chunks p and 2C - 1 - p: 2 chunks' worth on every GPU
'''),
        ('shape = {"model_type": "llama"', '''\
assert steps["zigzag"] < steps["contiguous"]
'''),
        ('replayed = cp_replay("bf16-mixed")', '''\
assert replayed["output"] == [1.015625] and replayed["single_pass"] == [1.0078125]  # the question's hand merge
'''),
        ('rng = np.random.default_rng(0)', '''\
assert means == sorted(means)  # each further hop adds a rounding of the running output
# torch's fp32 running output: closer to the exact attention than TE's bf16 one at every C, and the gap widens
assert all(t < r for t, r in zip(torch_means, means[1:]))
assert means[-1] - torch_means[-1] > means[1] - torch_means[0]
'''),
    ],
    '17_pipeline_parallel.ipynb': [
        ('P, M = 4, 8', '''\
from zerosim.teaching import QUESTIONS

# every rank idles (P - 1)/(M + P - 1) = 3/11 of the step, GPipe and 1F1B alike: P - 1 = 3 stage-times beside M = 8
assert [runs[name]["bubbles"] for name in ("gpipe", "1f1b")] == [[Fraction(3, 11)] * 4] * 2
assert runs["1f1b"]["span"] == (8 + 4 - 1) * (1 + 2)  # M + P - 1 stage-times of a forward (1) and a backward (2)
assert QUESTIONS["pp-bubble-1f1b"].value() == 3 / 11
assert [str(a) for a in table.of_rank(0)][:6] == ["0F0", "0F1", "0F2", "0F3", "0B0", "0F4"]  # P warmup forwards
'''),
        ('inter = measure_schedule("interleaved-1f1b", P, M, 2)', '''\
assert inter["bubbles"] == [Fraction(3, 19)] * 4  # (P - 1)/(V·M + P - 1) = 3/(16 + 3)
assert inter["span"] == Fraction(19 * 3, 2)  # V·M + P - 1 chunk-times of half a stage's 1 + 2 units
assert QUESTIONS["pp-bubble-interleaved"].value() == 3 / 19
'''),
        ('def sends(schedule, V):', '''\
assert sent == {"1f1b": 2 * 8 * (4 - 1), "interleaved-1f1b": 2 * 8 * (4 * 2 - 1)}  # each way, each boundary, each M
'''),
        ('sweep = {(V, m)', '''\
assert all(bubble == Fraction(4 - 1, V * m + 4 - 1) for (V, m), bubble in sweep.items())  # by hand, each dot
'''),
        ('def activation_peaks(schedule, m):', '''\
assert one == 4 * 3 * 8 * 4  # fc, ReLU, fc, ReLU each save their (3, 8) fp32 input
assert held == {("gpipe", 8): 8, ("1f1b", 8): 4, ("1f1b", 16): 4}  # GPipe: M; 1F1B: P - 0, whatever M
assert QUESTIONS["pp-1f1b-in-flight"].value() == 4
assert chunks == 2 * (4 - 1 - 0) + (2 - 1) * 4 + 1  # Megatron's warmup 2(P - 1 - r) + (V - 1)·m, then one more
'''),
        ('def stage0_calls(stage):', '''\
L, Mb = 2, 4  # Linear layers a stage, micro-batches a step
assert calls[0] == {"all_reduce": L, "reduce_scatter": 0, "all_gather": 0}  # each layer's gradient once a step
assert calls[1] == {"all_reduce": 0, "reduce_scatter": 1, "all_gather": 1}  # the flat gradient once, the update once
assert calls[2] == {"all_reduce": 0, "reduce_scatter": L * Mb, "all_gather": 1}  # every micro-batch's gradient
assert calls[3] == {"all_reduce": 0, "reduce_scatter": L * Mb, "all_gather": 2 * L * Mb}  # and a gather each pass
assert QUESTIONS["pp-zero3-gathers"].value() == 2 * L * Mb
'''),
    ],
}
