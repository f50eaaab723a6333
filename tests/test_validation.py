"""Predicted against measured on published runs (issue 36, Must show 1 and 4): the points are well formed, the
framework factors are what the calibration set alone gives, and the held-out errors meet the targets.

The predictions are deterministic float arithmetic on the meta backend (no BLAS, no random draws): the same on every
machine. The held-out statistics asserted here were computed once, after the factors were frozen
(docs/validation.md records the order), and are not fitted to.
"""

import json
import re
from pathlib import Path

import pytest

from zerosim.analysis.costs._calibration import FRAMEWORK
from zerosim.analysis.costs._comm import LINKS
from zerosim.analysis.costs._efficiency import PRESETS
from zerosim.analysis.costs._gpus import GPUS
from zerosim.analysis.costs._validation_points import POINTS, ROLES, TREND
from zerosim.cli.main import main
from zerosim.models.gpt import ALL_STRATEGIES

CALIBRATION = {"tt-h100-8-eager", "tt-h100-8-compile", "tt-h100-8-compile-fp8", "tt-a100-64-8b-op"}
HELD_OUT_MEDIAN, HELD_OUT_EVERY, TREND_POINTS = 0.15, 0.35, 0.10  # the targets


def test_every_point_names_its_source_and_conditions():
    assert len({p.key for p in POINTS}) == len(POINTS)
    assert {p.key for p in POINTS if p.role == "calibration"} == CALIBRATION
    for p in POINTS:
        assert p.role in ROLES and p.preset in PRESETS and p.strategy in ALL_STRATEGIES and p.gpu in GPUS
        # a file at a commit, or a vendor's page by its address and release, and its table and row
        assert ("@" in p.source and ".md" in p.source) or (p.source.startswith("https://") and "NeMo 25.02" in p.source)
        assert p.links[0] in LINKS and (p.links[1] in LINKS if p.gpus > p.gpus_per_node else p.links[1] is None)
        assert p.tokens_per_s > 0 and p.micro_batch >= 1 and p.accumulation >= 1
    assert set(TREND) <= {p.key for p in POINTS}


@pytest.mark.slow  # the fit reruns the calibration points ~25 times: ~15 s
def test_the_shipped_factors_are_what_the_calibration_points_alone_give():
    from zerosim.analysis.planner._validate import fit

    fitted = fit()
    assert fitted == pytest.approx(FRAMEWORK, abs=5e-4)  # the constants are the fit rounded to 3 places


@pytest.mark.slow  # every point once: ~5 s
def test_held_out_errors_meet_the_targets():
    """Held out (25 runs): median |predicted / measured − 1| 7.6 %, the largest 30.0 % (llm-foundry's MPT-13B on
    8 H100s); torchtitan's 8 -> 128 GPU trend measured −2.7 %, predicted −0.1 %. Reserved memory, 13 runs that
    published it: median |error| 8.4 %, the largest 33.8 % (torchtitan's 405B FSDP x TP x PP 1F1B row, under; it was
    +111.5 % on the interleaved row before sequence parallelism beside a pipeline was modelled; the 9 FSDP runs
    within 12.1 %). The two TP rows joined the
    held-out set after the factors were frozen (docs/validation.md); issue 57 predicted them with their Float8 GEMMs
    and torchtitan's DTensor layout (time +3.9 % / +16.6 %, memory −29 % / −25 %, where they had been −16.4 % / −14.0 %
    and −52 % / −49 %; −18 % / −13 % since torch's loss_parallel is counted as torch runs it, docs/validation.md item
    6; −15 % / −10 % since the head is left out of checkpointing, item 7; their time −10.4 % / −2.0 % since a TP rank
    is charged its attention, item 9, which took the held-out median from 8.4 % to 7.6 %). The three pipeline rows
    joined it the same way (issue 59): before them the held-out median was 7.7 % over 22 runs and the memory statistic
    8.1 % / 29.4 % over 11 (15.0 % the largest now, the 2D row's), every earlier row unchanged."""
    from zerosim.analysis.planner._validate import summary, validate

    rows = validate()
    stats = summary(rows)
    held = stats["held-out"]
    assert held["points"] == 25
    assert held["median_abs_error"] <= HELD_OUT_MEDIAN and held["max_abs_error"] <= HELD_OUT_EVERY
    assert held["within_35"] == 25
    assert abs(stats["trend"]["predicted"] - stats["trend"]["measured"]) <= TREND_POINTS
    assert (round(held["median_abs_error"], 3), round(held["max_abs_error"], 3)) == (0.076, 0.300)
    assert (round(stats["memory"]["median_abs_error"], 3), round(stats["memory"]["max_abs_error"], 3)) == (0.084, 0.338)
    before = summary([r for r in rows if r.point.pp == 1])  # the 22 runs of the table before the pipeline rows
    assert (before["held-out"]["points"], round(before["held-out"]["median_abs_error"], 3)) == (22, 0.077)
    # the largest of the 11 was the 2D row's 29.4 % until loss_parallel's fourth fp32 tensor was counted (17.9 %) and
    # the head's saved tensors were kept through the loss, as torchtitan keeps them: 15.0 %
    assert (round(before["memory"]["median_abs_error"], 3), round(before["memory"]["max_abs_error"], 3)) == (0.081,
                                                                                                             0.150)
    fsdp_only = [abs(r.memory_error) for r in rows if r.memory_error is not None and r.point.tp == 1]
    assert (len(fsdp_only), round(max(fsdp_only), 3)) == (9, 0.121)


def test_validate_prints_each_point_beside_its_measurement(capsys):
    assert main(["validate", "--only", "tt-h100-8-eager", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    (row,) = r["rows"]
    assert row["key"] == "tt-h100-8-eager" and row["measured_tokens_per_s"] == 5762 and row["role"] == "calibration"
    assert abs(row["error"]) < 0.1 and "torchtitan" in row["source"]
    assert main(["validate", "--only", "tt-h100-8-eager"]) == 0
    text = capsys.readouterr().out
    assert "calib tt-h100-8-eager" in text and "framework factors (calibrated)" in text


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the fit")
@pytest.mark.parametrize("flags, said", [
    (["--only", "tt-h100-8-eager"], "--only: --fit refits the framework factors on every calibration point"),
    (["--jobs", "2"], "--jobs: --fit refits"),
])
def test_fit_refuses_the_flags_it_does_not_read(flags, said, capsys):
    # --fit refits on the calibration points alone, in this process: --only and --jobs were taken, and the same factors
    # printed (a walk adding each flag alone)
    assert main(["validate", "--fit", *flags]) == 2
    err = capsys.readouterr()
    assert said in err.err and err.out == ""


def test_a_point_of_many_micro_steps_writes_its_second_step_as_running_it_does(monkeypatch):
    """Where a point's micro-step repeats, predict writes its K = 2 step from the K = 1 run's log (sweep.py
    `written_second`, planner/_repeat.py `twice`) instead of running it: every number of the prediction is, to the bit,
    what running the K = 2 step gives (written_second answering None: step_time runs it). A point of 2 micro-steps and
    one of 21 (the line through K = 1 and 2)."""
    from zerosim.analysis.planner import _validate

    written = []
    real = _validate.written_second
    monkeypatch.setattr(_validate, "written_second", lambda *a, **k: written.append(real(*a, **k)) or written[-1])
    points = [p for p in POINTS if p.key in ("foundry-a100-7b-8", "foundry-a100-30b-8")]
    assert [p.accumulation for p in points] == [2, 21]
    fast = [_validate.predict(p, FRAMEWORK[p.preset]) for p in points]
    assert len(written) == 2 and None not in written  # the written step was used, not a run
    monkeypatch.setattr(_validate, "written_second", lambda *a, **k: None)
    assert fast == [_validate.predict(p, FRAMEWORK[p.preset]) for p in points]


def test_predict_leaves_none_of_its_runs_ledgers_to_the_collector_and_the_collector_as_it_was(monkeypatch):
    """predict lets each run go once its peak is read (Cluster.let_go), so reference counting frees it: with the
    collector off, none of its ledgers is left in a cycle; it raises the youngest threshold while it runs (the
    planner's `fewer_collections`) and leaves every threshold as it was."""
    import gc

    from zerosim.analysis.planner import _validate
    from zerosim._collector import YOUNG_COLLECTIONS
    from zerosim.cluster import MemoryLedger

    point, seen = next(p for p in POINTS if p.key == "tt-h100-8-eager"), []
    real = _validate.step_time
    monkeypatch.setattr(_validate, "step_time", lambda *a, **k: seen.append(gc.get_threshold()) or real(*a, **k))
    before, enabled = gc.get_threshold(), gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        gc.set_threshold(700, 10, 10)
        _validate.predict(point, FRAMEWORK[point.preset])
        assert seen == [(YOUNG_COLLECTIONS, 10, 10)] and gc.get_threshold() == (700, 10, 10)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        assert [o for o in gc.garbage if isinstance(o, MemoryLedger)] == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.set_threshold(*before)
        if enabled:
            gc.enable()


@pytest.mark.bad_input("command line")
def test_validate_names_an_unknown_point(capsys):
    assert main(["validate", "--only", "nope"]) == 2
    assert "--only: unknown point 'nope'" in capsys.readouterr().err


def test_plans_default_mfu_for_torchtitans_8_gpu_run(capsys):
    """Must show 4: `zerosim plan` says what efficiency it assumed, and with the default (eager: torchtitan's run
    did not compile) its MFU for Table 1's FSDP row (Llama 3.1 8B, 8 GPUs, 2 × 8192, op-level SAC) is within ±15 %
    of the measured run's, both counted as torchtitan counts MFU (analysis/costs/_throughput.py) on the same peak."""
    from zerosim.analysis.costs._throughput import mfu
    from zerosim.analysis.costs._validation_points import LLAMA_3_1_8B
    from zerosim.analysis.timeline import DEVICES
    from zerosim.models.hf._config import read_hf_config

    argv = ["plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-hbm2e", "--seq-len", "8192",
            "--global-batch", "16", "--stages", "3", "--strategies", "op-sac", "--micro-batches", "2",
            "--optimizer", "adamw", "--comm", "fsdp"]
    assert main(argv + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    (row,) = r["fitting"]
    measured = mfu(5762, read_hf_config(LLAMA_3_1_8B), 8192, DEVICES["h100-hbm2e"].fp16)
    assert row["mfu"] == pytest.approx(measured, rel=0.15)
    assert "efficiency preset 'eager'" in r["settings"]["time_model"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    words = " ".join(text.split())  # the settings wrap at the page's width (zerosim/prose.py)
    assert "time from: efficiency preset 'eager'" in words and "framework factor 0.840 (calibrated)" in words


PAGE = " ".join((Path(__file__).resolve().parents[1] / "docs" / "validation.md").read_text().split())
PIPELINE = ("tt-h100-512-405b-3d-1f1b", "tt-h100-512-405b-3d-interleaved", "nemo-h100-512-gpt3-175b")


@pytest.mark.slow  # three pipeline steps at 405B and 175B on 512 GPUs, each on the timeline: ~8 s
def test_the_pipeline_rows_are_typed_in_held_out_and_quoted():
    """Issue 59, Must show 5: torchtitan's Llama 3.1 405B FSDP 8 x TP 8 x PP 8 (both schedules of its Table 5) and
    NeMo's GPT-3 175B TP 4 x PP 8 x VP 6, predicted with the frozen factors (held out, nothing fitted), beside their
    published numbers with the error, each within ±30 % in time; the page quotes every number."""
    from fractions import Fraction

    from zerosim.analysis.costs import model_flops_per_token
    from zerosim.analysis.costs._validation_points import config_of
    from zerosim.analysis.planner._validate import validate
    from zerosim.models.hf._config import read_hf_config
    from zerosim.parallel.pipeline import bubble_fraction

    points = [p for p in POINTS if p.key in PIPELINE]
    assert [p.key for p in points] == list(PIPELINE) and all(p.role == "held-out" for p in points)
    # the published numbers as the sources print them (torchtitan's Table 5, NeMo's summary row)
    assert [(p.tokens_per_s, p.memory_gib) for p in points] == [(100, 82.5), (128, 72.7), (866, None)]
    assert [(p.gpus, p.tp, p.pp, p.virtual_stages, p.micro_batch, p.accumulation) for p in points] == [
        (512, 8, 8, None, 4, 8), (512, 8, 8, 2, 4, 8), (512, 4, 8, 6, 2, 64)]  # GBS 256 = 8 x 32; 2048 = 16 x 2 x 64
    rows = {r.point.key: r for r in validate(points)}
    one, inter, nemo = (rows[k] for k in PIPELINE)
    # each stage timed by its own units (docs/validation.md item 8): 9.8, 11.6 and -18.7 before; a TP rank charged its
    # attention (item 9): 9.5, 10.3 and -19.1 before
    assert [round(100 * rows[k].error, 1) for k in PIPELINE] == [-2.3, -1.0, -22.5]
    assert all(abs(rows[k].error) <= 0.30 for k in PIPELINE)
    # tokens per GPU: a data-parallel rank's B·L·M tokens over its TP x PP GPUs, by hand
    assert one.tokens_per_s == pytest.approx(4 * 8192 * 8 / one.step_s / 64, rel=1e-12)
    assert nemo.tokens_per_s == pytest.approx(2 * 2048 * 64 / nemo.step_s / 32, rel=1e-12)
    assert round(100 * (inter.tokens_per_s / one.tokens_per_s - 1)) == 30  # interleaving's gain; measured +28 %
    assert [round(r.mfu, 3) for r in (one, inter)] == [0.281, 0.364]
    assert [round(r.measured_mfu, 3) for r in (one, inter)] == [0.288, 0.368]
    assert (round(one.step_s, 1), round(one.exposed_s, 1)) == (41.9, 0.8)
    assert [round(100 * r.memory_error) for r in (one, inter)] == [-34, -22]
    # NeMo's 932 model TFLOP/s per GPU is the one FLOPs count at its 866 tokens/s (GPT-3's tied table counted once)
    config = read_hf_config(config_of(nemo.point), name=nemo.point.model)
    assert f"{model_flops_per_token(config, 2048) * 866 / 1e12:.1f}" == "932.3"
    assert (round(nemo.step_s, 1), round(nemo.compute_s, 1), round(nemo.measured_mfu, 2)) == (12.2, 11.0, 0.94)
    assert bubble_fraction("interleaved-1f1b", 8, 64, 6, 1, 2) == Fraction(7, 391)
    sign = lambda x: ("+" if x >= 0 else "−") + f"{abs(x):.1f}"  # noqa: E731
    for key in PIPELINE:
        r = rows[key]
        signed = ("+" if (r.memory_error or 0) >= 0 else "−") + f"{abs(100 * (r.memory_error or 0)):.0f}"
        memory = (rf"[\d.]+ \| {r.reserved / 2**30:.1f} \| {re.escape(signed)} % \|" if r.memory_error
                  else r"\| \| \|")
        error = re.escape(sign(100 * r.error))
        row = (rf"\| held-out \| `{key}` \|[^|]*\| [\d,]+ \| {r.tokens_per_s:,.0f} \| {error} % \| "
               + memory)
        assert re.search(row, PAGE), row
    for quoted in ("**98 (−2.3 %)**", "**127 (−1.0 %)**", "+30 % against the measured +28 %", "28.8 % and 36.8 %",
                   "28.1 % and 36.4 %", "of zerosim's 41.9 s step, 0.8 s", "**−34 % and −22 %**", "18.6 GiB",
                   "932.3 TFLOP/s", "**672 (−22.5 %)**", "7/391 = 1.8 %", "11.0 s of 12.2 s", "94 % of the dense"):
        assert quoted in PAGE, quoted


@pytest.mark.slow  # the 405B pipeline's first stage on the meta backend: ~2 s
def test_the_405b_rows_keep_a_tp_ranks_sequence_shard_and_the_stage_gathered():
    """Sequence parallelism beside the pipeline (torchtitan runs SequenceParallel beside TP): each TP rank keeps its
    1/8 of every checkpointed block input, 4 x 8,192 x 16,384 bf16 / 8 = 128 MiB a block, for 1F1B's 8 micro-batches
    in flight on the first stage's 15 blocks; and FSDP2 beside PP (torchtitan's reshard_after_forward=False) holds
    the stage's parameters and gradients whole over the step."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.analysis.planner._validate import _model, spec_of
    from zerosim.parallel.data import get_comm_schedule
    from zerosim.precision import MixedPrecision

    point = next(p for p in POINTS if p.key == PIPELINE[0])
    _, model = _model(point)
    row, _, _ = measure_stage(model, 512, 3, "adamw", MixedPrecision(compute="bf16", master="fp32", reduce="fp32"),
                              micro_batch=(4, 8192), comm=get_comm_schedule("fsdp"), gpus_per_node=8,
                              spec=spec_of(point), micro_batches=8)
    first = row["pipeline"][0]
    assert (first["units"], first["in_flight"]) == (["embed", "block14.out"], 8)  # the embedding and 15 blocks
    shards = 8 * 15 * 4 * 8192 * 16384 * 2 // 8  # the block inputs' sequence shards: 15.0 GiB
    assert shards <= first["activations"] < 8 * 15 * 4 * 8192 * 16384 * 2  # a shard each, not the whole input
    assert f"{first['activations'] / 2**30:.1f}" == "18.6" and "18.6 GiB of activations" in PAGE
    assert row["resting"]["grads"] == 2 * first["params"]  # the stage's bf16 gradient whole (no_reshard_no_sync)


@pytest.mark.slow  # NeMo's 175B pipeline step of 64 micro-batches whole (~1.5 s), beside its prediction (~1.3 s)
def test_a_pipeline_point_on_its_line_is_its_whole_step(monkeypatch):
    # docs/validation.md: NeMo's step of 64 micro-batches on 8 stages is predicted on the line through the whole
    # steps of 16 and 24 micro-batches, as the planner times a pipeline's row; the step of 64 simulated whole (the
    # run taken at all 64: memory_point made M itself) gives the same time, compute and memory
    from zerosim.analysis.costs import line_points
    from zerosim.analysis.planner import _validate
    from zerosim.analysis.planner._validate import predict, spec_of

    point = next(p for p in POINTS if p.key == "nemo-h100-512-gpt3-175b")
    assert line_points(spec_of(point), point.accumulation) == (16, 24)
    line = predict(point)
    monkeypatch.setattr(_validate, "memory_point", lambda spec, M: M)
    whole = predict(point)
    assert line.step_s == pytest.approx(whole.step_s, rel=1e-12)
    assert line.compute_s == pytest.approx(whole.compute_s, rel=1e-12)
    assert line.exposed_s == pytest.approx(whole.exposed_s, rel=1e-9)
    assert line.allocated == whole.allocated

