"""Pipeline parallelism everywhere a user looks (issue 59, Build 6): `--pp`, `--pp-schedule` and `--virtual-stages` in
`memory`, `timeline`, `train` and `plan`, defined once (cli/parallel_args.py) and read into one ParallelSpec whose
degrees multiply to --ranks with the others; `--accumulation-steps` the micro-batches a step on each data-parallel
rank (Megatron's num_microbatches); `memory` and `timeline` running the pipeline's engine on the meta backend, one
representative rank a stage, each pipeline rank's peak and idle time shown, tokens per second through the one
throughput function; every combination zerosim or the frameworks refuse refused by its flags' names before anything
runs.

The hand numbers: GPT-2 small (the shipped gpt2-small config: V = 50,257, 1,024 positions, d = 768, 12 blocks, a
tied head) cut in 2 stages as torchtitan cuts it (the embedding and the head each counted as a layer: 14 over 2, 7 a
stage), its parameters counted below from the shapes."""

import json
from fractions import Fraction

import pytest
from helpers import run_cli

from zerosim.analysis.costs import tokens_per_s_per_gpu
from zerosim.parallel import ParallelDims, ParallelSpec

GPT2 = ["--model", "gpt2-small", "--seq-len", "256", "--batch", "2", "--precision", "bf16-mixed"]
WTE, WPE = 50257 * 768, 1024 * 768  # GPT-2's token and position tables
BLOCK = 12 * 768 * 768 + 13 * 768  # qkv (768·2304 + 2304), proj (768² + 768), MLP (2·768·3072 + 3072 + 768), 2 norms


def as_json(*argv) -> dict:
    code, out, err = run_cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def text_of(*argv) -> str:
    code, out, err = run_cli(*argv)
    assert code == 0, err
    return out


def test_memory_shows_each_pipeline_ranks_layers_and_peaks_the_first_holding_the_most():
    r = as_json("memory", *GPT2, "--ranks", "8", "--pp", "2")
    assert r["pipeline_parallel"] == {"pp": 2, "schedule": "1f1b", "virtual_stages": 1, "micro_batches": 2, "dp": 4,
                                      "split": "torchtitan"}  # M defaults to P, torchtitan's default
    for row in r["stages"]:
        first, last = row["pipeline"]
        assert (first["gpus"], last["gpus"]) == ([0, 4], [4, 8])  # pp outermost: a block of N / P ranks a stage
        assert (first["units"], last["units"]) == (["embed", "block5"], ["block6", "head"])  # 7 + 7 layers
        assert first["params"] == WTE + WPE + 6 * BLOCK and last["params"] == 6 * BLOCK + 2 * 768  # + ln_f; tied head
        assert (first["in_flight"], last["in_flight"]) == (2, 1)  # 1F1B: min(P − r, M)
        assert row["peak"] == max(first["peak"], last["peak"]) and first["peak"] >= last["peak"]
        # the bytes each rank sent, by hand: ZeRO's rings over dp = 4 ((dp − 1)/dp of Ψ_r in bf16, 1.5·Ψ_r bytes a
        # phase: stage 0's all-reduce 2 phases, stage 1's reduce-scatter and refresh 1 each, stage 2's reduce-scatter
        # each of the M = 2 micro-steps + its refresh, stage 3's 2 gathers and a reduce-scatter each micro-step), and
        # each micro-batch's hidden states (B·L·d bf16) on from the first rank, their gradient back from the last
        phases = {0: 2, 1: 2, 2: 3, 3: 6}[row["stage"]]
        hidden = 2 * 2 * 256 * 768 * 2
        want = [phases * 3 * psi_r // 2 + hidden for psi_r in (first["params"], last["params"])]
        assert [first["sent"], last["sent"]] == [first["sent_formula"], last["sent_formula"]] == want
        assert row["sent"] == row["sent_formula"] == max(want)
    # ZeRO-1 on the first rank by hand: bf16 params and grads whole (2 + 2 bytes), fp32 master and Adam's m, v over
    # its dp = 4 ranks (Ψ_0 divides by 4: no padding)
    psi = WTE + WPE + 6 * BLOCK
    one = next(row for row in r["stages"] if row["stage"] == 1)
    assert one["ledger_total"] == one["formula_total"] == 2 * psi + 2 * psi + 12 * psi // 4
    gpipe = as_json("memory", *GPT2, "--ranks", "8", "--pp", "2", "--pp-schedule", "gpipe",
                    "--accumulation-steps", "3")
    assert [x["in_flight"] for x in gpipe["stages"][0]["pipeline"]] == [3, 3]  # GPipe: every micro-batch, M
    text = text_of("memory", *GPT2, "--ranks", "8", "--pp", "2")
    assert "N = 8 GPUs = pp 2 x dp 4" in text and "Per pipeline rank" in text and "embed .. block5" in text


@pytest.mark.slow  # three timelines of a 4-stage pipeline of Llama 3 8B beside TP 2: ~1 s
def test_timeline_shows_the_bubble_and_the_one_throughput():
    argv = ["timeline", "--model", "llama-3-8b", "--ranks", "64", "--gpus-per-node", "8", "--tp", "2", "--pp", "4",
            "--seq-len", "4096", "--batch", "1", "--checkpoint", "block", "--precision", "bf16-mixed", "--stage", "1",
            "--comm", "fsdp"]
    r = as_json(*argv, "--accumulation-steps", "8")
    pp = r["pipeline_parallel"]
    assert (pp["pp"], pp["micro_batches"], pp["dp"], r["tensor_parallel"]["dp"]) == (4, 8, 8, 8)
    assert Fraction(pp["bubble_closed_form"]).limit_denominator(100) == Fraction(3, 11)  # (P − 1)/(M + P − 1)
    step = r["step_s"]
    for x in pp["ranks"]:  # each rank idles for its bubble (and what it waits for), never less than nothing
        assert x["idle"] == pytest.approx(1 - x["compute_s"] / step) and 0 < x["idle"] < 1
    # the one definition: a data-parallel rank's B·L·M tokens (its TP and pipeline groups share them), N GPUs
    assert r["tokens_per_s_per_gpu"] == tokens_per_s_per_gpu(ParallelDims(64, tp=2, pp=4), 4096 * 8, step)
    assert r["tokens_per_s_per_gpu"] == pytest.approx(8 * 4096 * 8 / 64 / step, rel=1e-12)  # dp 8, by hand
    # interleaving shrinks the bubble: (P − 1)/(V·M + P − 1) = 3/19, and the step with it
    interleaved = as_json(*argv, "--accumulation-steps", "8", "--pp-schedule", "interleaved-1f1b")
    assert Fraction(interleaved["pipeline_parallel"]["bubble_closed_form"]).limit_denominator(100) == Fraction(3, 19)
    assert interleaved["step_s"] < step
    text = text_of(*argv, "--accumulation-steps", "8")
    assert "= pp 4 x tp 2 x dp 8" in text and "Pipeline: 4 ranks, 1f1b, M = 8" in text and "27.3 %" in text


def test_timeline_counts_each_tiers_bytes_beside_a_pipeline_by_hand():
    """pp 2 × dp 4 on nodes of 4: ZeRO-1's rings stay in a stage's node, the hidden states cross between the nodes.
    By hand, the ranks' average: each first-stage rank sends M = 2 micro-batches' hidden states (B·L·d bf16) on, each
    last-stage rank their gradients back; ZeRO-1's reduce-scatter and refresh each send 3/4 of Ψ_r in bf16, 3·Ψ_r
    bytes in all. Until 2026-11-27 both read "not measured beside a pipeline"."""
    r = as_json("timeline", *GPT2, "--ranks", "8", "--gpus-per-node", "4", "--pp", "2", "--stage", "1")
    psi = (WTE + WPE + 6 * BLOCK, 6 * BLOCK + 2 * 768)
    assert r["tiers"]["inter-node"]["bytes_per_rank"] == 2 * (2 * 256 * 768 * 2)
    assert r["tiers"]["intra-node"]["bytes_per_rank"] == (3 * psi[0] + 3 * psi[1]) / 2


@pytest.mark.slow  # four ZeRO stages of a 4-stage pipeline of Llama 3 8B beside TP 2, and the same built by hand: ~3 s
def test_memory_says_why_zero_3s_trace_exceeds_the_formula_only_where_it_does():
    """With block checkpointing under seed 004's schedule (a gather for every use), stage 3 gathers each recomputed
    unit again: the trace exceeds the formula on both pipeline ranks, and the note says why; without checkpointing
    the two are equal and no note is printed."""
    with_ckpt = as_json("memory", *GPT2, "--ranks", "8", "--pp", "2", "--checkpoint", "block")["stages"][3]
    assert all(x["sent"] > x["sent_formula"] for x in with_ckpt["pipeline"])
    assert "At ZeRO-3 the trace counts more" in text_of("memory", *GPT2, "--ranks", "8", "--pp", "2", "--checkpoint",
                                                         "block")
    plain = as_json("memory", *GPT2, "--ranks", "8", "--pp", "2")["stages"][3]
    assert all(x["sent"] == x["sent_formula"] for x in plain["pipeline"])
    assert "At ZeRO-3 the trace" not in text_of("memory", *GPT2, "--ranks", "8", "--pp", "2")


def test_memory_is_the_pipeline_engine_built_as_the_python_api_builds_it():
    """`memory --pp` reads the ledgers of the same PipelineEngine a user builds by hand (docs/pipeline-parallelism.md's
    405B example, at Llama 3 8B's size): every pipeline rank's peak, byte for byte."""
    import numpy as np

    from zerosim import Adam, Cluster
    from zerosim.models import MetaLlama, read_hf_config, shipped_config
    from zerosim.parallel.pipeline import PipelineEngine
    from zerosim.parallel.tensor import TensorParallel

    r = as_json("memory", "--model", "llama-3-8b", "--ranks", "64", "--gpus-per-node", "8", "--tp", "2", "--pp", "4",
                "--seq-len", "4096", "--batch", "1", "--checkpoint", "block", "--kernels", "fused", "--precision",
                "bf16-mixed", "--optimizer", "adam", "--accumulation-steps", "8")
    dims = ParallelDims(64, pp=4, tp=2)
    for row in r["stages"]:
        cluster = Cluster(64, backend="meta", hosted=dims.groups("pp").group_of(0), trace="call", timeline=False,
                          gpus_per_node=8)
        model = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), seq_len=4096, checkpoint="block",
                                      kernels="fused")
        tp = TensorParallel(model, 2, layout="megatron")
        pipe = PipelineEngine(tp.model, cluster, row["stage"], Adam(), "bf16-mixed", pp=4, micro_batches=8, tensor=tp,
                              checkpoint=tp.model.checkpointing)
        ids = cluster.backend.empty((1, 4096), np.int64)
        pipe.step([[(ids, ids)] * 8 for _ in range(dims.dp)])
        assert [x["peak"] for x in row["pipeline"]] == [rank.ledger.peak() for rank in cluster.ranks], row["stage"]


def test_timelines_trace_shows_each_stage_and_not_only_the_first(tmp_path):
    """A pipeline's Chrome trace holds each stage's representative GPU (the first of its block of N / P), where a
    data-parallel step's holds ranks 0-3, which beside a pipeline are all the first stage's."""
    trace = tmp_path / "pipeline.json"
    as_json("timeline", *GPT2, "--ranks", "8", "--pp", "4", "--stage", "1", "--trace", str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert names == {"rank 0", "rank 2", "rank 4", "rank 6"}  # pp outermost: stage p holds ranks 2p, 2p + 1


def test_a_zero_bubble_backward_costs_on_the_time_model_what_a_fused_backward_costs():
    """Zero bubble splits each backward into backward-input and backward-weight (models/_run.py `_split`: the FLOPs
    half each); the time model charges the halves the fused backward's seconds, kernel class by kernel class, so a
    rank's compute is the same whichever schedule runs it (before, the halves were charged as GEMM FLOPs alone)."""
    argv = ["timeline", "--model", "llama-3-8b", "--ranks", "16", "--gpus-per-node", "8", "--pp", "2", "--seq-len",
            "2048", "--batch", "1", "--checkpoint", "block", "--precision", "bf16-mixed", "--stage", "1",
            "--accumulation-steps", "4"]
    one = as_json(*argv)
    zb = as_json(*argv, "--pp-schedule", "zero-bubble", "--virtual-stages", "1")  # the same layers on each rank
    for a, b in zip(one["pipeline_parallel"]["ranks"], zb["pipeline_parallel"]["ranks"]):
        assert b["compute_s"] == pytest.approx(a["compute_s"], rel=1e-9)


def test_memory_and_timeline_read_the_peak_of_the_pipeline_rank_that_peaks_highest():
    # Llama 2 7B in 2 stages as torchtitan cuts it (34 layers with the embedding and the head, 17 a stage): the first
    # holds the embedding and 16 blocks, the last 16 blocks, the final norm (d = 4,096) and the head, so at ZeRO-1
    # with block checkpointing (little activation memory) the last rank peaks highest. Until 2026-11-28 `timeline`
    # read rank 0's ledger (and judged the fit on it) where `memory` and `plan` read the highest: the commands `plan`
    # printed to reproduce its row said two peaks 32,768 bytes apart.
    argv = ["--model", "llama-2-7b", "--ranks", "8", "--seq-len", "2048", "--batch", "1", "--checkpoint", "block",
            "--gpu", "a100-80gb", "--precision", "bf16-mixed", "--pp", "2", "--accumulation-steps", "4"]
    memory = as_json("memory", *argv)
    row = next(x for x in memory["stages"] if x["stage"] == 1)
    first, last = row["pipeline"]
    assert last["params"] - first["params"] == 4096  # the final norm's weight
    # its bytes at ZeRO-1 on dp = 4, by hand: bf16 param and grad whole (2 + 2), fp32 master, Adam's m, v and the
    # fp32 gradient a quarter each (16 / 4): docs/pipeline-parallelism.md's 32,768 bytes
    assert last["peak"] - first["peak"] == 4096 * (2 + 2) + 4096 * 16 // 4 == 32768
    timeline = as_json("timeline", *argv, "--stage", "1")
    assert timeline["pipeline_parallel"]["peak_rank"] == 1
    assert timeline["peak"] == row["peak"] == last["peak"] == timeline["fit"]["measured"]
    assert "memory: the highest peak, pipeline rank 1's (GPU 4): 26.95 GB" in text_of("timeline", *argv, "--stage", "1")


PLAN = ["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "256", "--global-batch",
        "16", "--strategies", "block"]


def test_plan_ranks_pipeline_degrees_and_schedules_in_one_table_and_its_commands_run_as_printed():
    r = as_json(*PLAN, "--pp", "1,2", "--pp-schedule", "1f1b,gpipe", "--stages", "1")
    assert {(x["pp"], x["pp_schedule"]) for x in r["fitting"]} == {(1, None), (2, "1f1b"), (2, "gpipe")}
    assert [x["step_s"] for x in r["fitting"]] == sorted(x["step_s"] for x in r["fitting"])
    for x in r["fitting"]:  # 16 sequences over dp = 8 / PP ranks: B × K = 16 / dp, the one throughput
        dp = 8 // x["pp"]
        assert x["micro_batch"] * x["accumulation"] == 16 // dp
        assert x["tokens_per_s_per_gpu"] == pytest.approx(dp * x["micro_batch"] * x["accumulation"] * 256 / 8
                                                          / x["step_s"], rel=1e-12)
    # 1F1B refuses K < P: B = 4 leaves K = 1 micro-batch for 2 stages (GPipe runs it)
    (left,) = r["left_out"]
    assert (left["pp"], left["pp_schedule"], left["strategies"]) == ([2], ["1f1b"], [])
    assert "micro-batch 4" in left["why"] and "Number of microbatches (1) must be greater than or equal" in left["why"]
    assert (2, "gpipe", 4) in {(x["pp"], x["pp_schedule"], x["micro_batch"]) for x in r["fitting"]}
    two = as_json(*PLAN, "--pp", "2", "--stages", "1,3")
    top = two["fitting"][0]
    memory_cmd, timeline_cmd = two["reproduce"]
    assert f"--pp 2 --gpus-per-node 8 --accumulation-steps {top['accumulation']}" in memory_cmd
    memory = as_json(*memory_cmd.split()[1:])
    assert next(x for x in memory["stages"] if x["stage"] == top["stage"])["peak"] == top["peak"]
    timeline = as_json(*timeline_cmd.split()[1:])
    assert timeline["step_s"] == pytest.approx(top["step_s"], rel=1e-9) and timeline["peak"] == top["peak"]
    assert timeline["tokens_per_s_per_gpu"] == pytest.approx(top["tokens_per_s_per_gpu"], rel=1e-9)
    text = text_of(*PLAN, "--pp", "1,2", "--stages", "1")
    assert "Left out: PP 2 (1f1b) (micro-batch 4" in text and "PP: the pipeline's degree and schedule" in text
    # the words around the table wrap at the page's width (the left-out reason and the legend were single long lines)
    table = ("  zerosim ", "  time from", "  links", " #", "  kernels")  # commands, settings, the table's head
    words = [x for x in text.splitlines() if not x.startswith(table) and not x[:3].strip().isdigit()]
    assert max(map(len, words)) <= 120, max(words, key=len)


@pytest.mark.parametrize("schedule, V, stage, Ms", [
    ("1f1b", None, 1, (17, 20)), ("1f1b", None, 3, (18,)), ("gpipe", None, 1, (19,)),
    ("interleaved-1f1b", 2, 1, (16, 20)), ("zero-bubble", 2, 3, (16,))])
def test_a_long_pipeline_step_lies_on_the_line_its_repeating_schedule_draws(schedule, V, stage, Ms):
    """The planner times a step of M micro-batches past twice the warm-up by the line through M1 and M1 + P
    (analysis/costs line_points, planner step_time): equal to simulating all M, step, compute and exposed
    communication, to float rounding; and a pipeline's memory at M1 is its memory at M (the micro-batches in flight
    saturate) but for GPipe's, which holds all M (the planner runs GPipe whole)."""
    from zerosim.analysis.costs import line_points, measure_stage
    from zerosim.analysis.planner import meta_step, step_time
    from zerosim.analysis.timeline import Hardware, TimeModel
    from zerosim.models import MetaGPT, read_hf_config, shipped_config

    model = MetaGPT.from_config(read_hf_config(shipped_config("gpt2-small")), seq_len=256, checkpoint="block",
                                attention="flash")
    spec = ParallelSpec(pp=4, pp_schedule=schedule, virtual_stages=V)
    hw, tm = Hardware("h100", "nvlink4", "bf16", inter_link="ib_ndr"), TimeModel()
    for M in Ms:
        m1, m2 = line_points(spec, M)
        assert (m1 - 8) % 4 == (M - 8) % 4 and 8 <= m1 < m2 == m1 + 4 < M  # M1 >= 2P, M1 = M mod P
        line = step_time(model, 16, stage, hw, None, "bf16-mixed", "adam", (2, 256), M, time_model=tm,
                         gpus_per_node=8, spec=spec)
        whole, engine = meta_step(model, 16, stage, hw, None, "bf16-mixed", micro_batch=(2, 256), accumulation_steps=M,
                                  gpus_per_node=8, time_model=tm, spec=spec)
        assert line.simulated == (m1, m2)
        assert line.step == pytest.approx(whole.step_time, rel=1e-12)
        assert line.compute == pytest.approx(float(whole.compute_busy[0]), rel=1e-12)
        assert line.exposed == pytest.approx(float(whole.exposed_comm[0]), rel=1e-9, abs=1e-15)
        if schedule != "gpipe":
            row = measure_stage(model, 16, stage, "adam", "bf16-mixed", micro_batch=(2, 256), gpus_per_node=8,
                                spec=spec, micro_batches=m1)[0]
            assert [x["peak"] for x in row["pipeline"]] == [r.ledger.peak() for r in engine.cluster.ranks]
    assert line_points(ParallelSpec(pp=4, pp_schedule="interleaved-1f1b"), 18) is None  # 4 does not divide 18
    assert line_points(spec, 12 if V is None else 8) is None  # not past M1 + P: run whole


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
def test_deepspeeds_refusal_of_zero_2_beside_a_pipeline_is_quoted(tmp_path):
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                                  "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}))
    code, _, err = run_cli("memory", *GPT2, "--ranks", "8", "--pp", "2", "--ds-config", str(config))
    assert code == 2
    assert ("--stage 2 beside --pp 2 with DeepSpeed's recipe 'deepspeed-zero12': DeepSpeed refuses it: 'ZeRO-2 and "
            "ZeRO-3 are incompatible with pipeline parallelism' (DeepSpeed 0.19.8 runtime/pipe/engine.py") in err

@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
def test_deepspeeds_schedule_runs_zero_0_and_1_beside_a_pipeline_as_its_engine_does():
    """DeepSpeed's pipeline engine asserts the ZeRO stage is below gradients (0.19.8 runtime/pipe/engine.py,
    PipelineEngine.__init__), whatever its recipe: under DeepSpeed's schedule (--comm deepspeed, plan's default) ZeRO-2
    and ZeRO-3 beside --pp are what DeepSpeed refuses. `timeline` asked for one refuses it; `memory` and `plan` leave
    them out saying why; seed 004's schedule and FSDP's (torchtitan's ZeRO-3 beside a pipeline) still run them."""
    code, _, err = run_cli("timeline", *GPT2, "--ranks", "8", "--pp", "2", "--stage", "3", "--comm", "deepspeed")
    assert code == 2 and ("--stage 3 beside --pp 2 with DeepSpeed's schedule: DeepSpeed refuses it: 'ZeRO-2 and "
                          "ZeRO-3 are incompatible with pipeline parallelism'") in err, err
    r = as_json("memory", *GPT2, "--ranks", "8", "--pp", "2", "--comm", "deepspeed")
    assert [x["stage"] for x in r["stages"]] == [0, 1]
    assert r["pipeline_parallel"]["left_out"]["stages"] == [2, 3]
    assert "ZeRO-2, ZeRO-3 left out: DeepSpeed's schedule beside a pipeline" in text_of(
        "memory", *GPT2, "--ranks", "8", "--pp", "2", "--comm", "deepspeed")
    for comm in ("seed", "fsdp"):  # zerosim's own ZeRO-3, torchtitan's FSDP beside a pipeline: all four stages
        r = as_json("memory", *GPT2, "--ranks", "8", "--pp", "2", "--comm", comm)
        assert [x["stage"] for x in r["stages"]] == [0, 1, 2, 3] and "left_out" not in r["pipeline_parallel"]
    plan = as_json(*PLAN, "--pp", "2", "--stages", "1,2,3")
    assert {x["stage"] for x in plan["fitting"]} == {1}
    assert any(x["pp"] == [2] and "ZeRO-2: ZeRO stage 2 beside PP 2 with DeepSpeed's schedule" in x["why"]
               for x in plan["left_out"]), plan["left_out"]
    assert {x["stage"] for x in as_json(*PLAN, "--pp", "2", "--stages", "1,2,3", "--comm", "fsdp")["fitting"]} == \
        {1, 2, 3}


MEM = ["memory", *GPT2]


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
@pytest.mark.parametrize("argv, said", [
    ([*MEM, "--ranks", "8", "--pp", "3"], "--pp 3 does not divide --ranks 8"),
    ([*MEM, "--ranks", "8", "--tp", "2", "--pp", "3"], "--tp 2 × --pp 3 = 6 GPUs does not divide --ranks 8"),
    ([*MEM, "--ranks", "8", "--pp-schedule", "gpipe"],
     "--pp-schedule says in which order the pipeline runs its micro-batches: give --pp P > 1 with it"),
    ([*MEM, "--ranks", "8", "--virtual-stages", "2"],
     "--virtual-stages says how many stages each pipeline rank holds: give --pp P > 1 with it"),
    ([*MEM, "--ranks", "8", "--pp", "2", "--virtual-stages", "2"],
     "--pp-schedule 1f1b runs one stage a rank (torch's PipelineScheduleSingle"),
    ([*MEM, "--ranks", "8", "--pp-split", "megatron"],
     "--pp-split says where the layers are cut into stages: give --pp P > 1 with it"),
    ([*MEM, "--ranks", "8", "--pp", "8", "--pp-split", "megatron"],
     "num_layers=12 should be divisible by config.pipeline_model_parallel_size=8 (Megatron-Core core_v0.19.0"),
    ([*MEM, "--ranks", "8", "--pp", "4", "--accumulation-steps", "2"],
     "--accumulation-steps 2 beside --pp 4 --pp-schedule 1f1b: Number of microbatches (2) must be greater than or "
     "equal to the number of stages (4) (torch 2.13 Schedule1F1B)"),
    ([*MEM, "--ranks", "8", "--accumulation-steps", "4"], "--accumulation-steps counts a pipeline's micro-batches "
                                                          "(with --pp)"),
    ([*MEM, "--ranks", "16", "--gpus-per-node", "4", "--pp", "2", "--strategy", "hsdp"],
     "--strategy beside --pp is not modelled"),
    (["timeline", "--model", "gpt2-small", "--ranks", "8", "--pp", "2", "--sweep"], "--pp times one step of a "
                                                                                     "pipeline"),
    (["train", "--ranks", "4", "--pp", "2"], "--pp is not in `zerosim train` yet"),
    (["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "256", "--global-batch",
      "8", "--pp-schedule", "gpipe"], "--pp-schedule says in which order a pipeline runs its micro-batches: give "
                                      "--pp degrees above 1 with it"),
    (["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "256", "--global-batch",
      "8", "--pp", "1,2", "--virtual-stages", "2"], "--virtual-stages 2 counts the stages a rank of interleaved-1f1b "
                                                    "or zero-bubble holds"),
    (["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "256", "--global-batch",
      "8", "--pp", "2", "--pp-schedule", "1f1b,chimera"], "--pp-schedule takes comma-separated schedules of gpipe, "
                                                          "1f1b, interleaved-1f1b, zero-bubble; got 'chimera'"),
], ids=["pp does not divide", "tp x pp does not divide", "schedule without pp", "virtual without pp",
        "virtual stages of a single-stage schedule", "split without pp", "megatron split does not divide",
        "1f1b with fewer micro-batches", "accumulation without pp", "hsdp beside pp",
        "timeline sweep", "train", "plan schedule without pp",
        "plan virtual of single-stage schedules", "plan unknown schedule"])
def test_what_zerosim_or_the_frameworks_refuse_is_refused_by_its_flags(argv, said):
    code, _, err = run_cli(*argv)
    assert code == 2 and said in err, err


@pytest.mark.bad_input("engine arguments")
def test_the_spec_checks_the_pipelines_options_beside_its_degree_in_the_callers_words():
    with pytest.raises(ValueError, match="pp_schedule says in which order the pipeline runs its micro-batches: give "
                                         "pp > 1 with it"):
        ParallelSpec(pp_schedule="gpipe").check(8)
    with pytest.raises(ValueError, match="pp_schedule must be one of gpipe, 1f1b, interleaved-1f1b, zero-bubble"):
        ParallelSpec(pp=2, pp_schedule="chimera").check(8)
    with pytest.raises(ValueError, match=r"tp 2 × pp 4 = 8 GPUs does not divide world_size 12"):
        ParallelSpec(tp=2, pp=4).check(12)
    with pytest.raises(ValueError, match=r"micro_batches 4 beside pp 8 pp_schedule 1f1b: Number of microbatches"):
        ParallelSpec(pp=8).pipeline_check(4)
    with pytest.raises(ValueError, match="a loss scaler that skips steps beside pipeline parallelism"):
        from zerosim.precision import get_precision

        ParallelSpec(pp=2).pipeline_check(2, 1, get_precision("fp16-mixed").with_(loss_scale="dynamic"))


def test_the_spec_is_the_degrees_as_data():
    spec = ParallelSpec(tp=2, pp=4, pp_schedule="interleaved-1f1b", virtual_stages=2).check(64)
    assert spec.dims(64) == ParallelDims(64, tp=2, pp=4) and spec.dims(64).dp == 8
    assert spec.flags() == "--tp 2 --pp 4 --pp-schedule interleaved-1f1b --virtual-stages 2"
    assert spec.describe() == "TP 2 × PP 4 (interleaved-1f1b, 2 virtual stages)"
    assert ParallelSpec(pp=2).build("a model") == ("a model", ())  # the pipeline is an engine, not a parallelism
