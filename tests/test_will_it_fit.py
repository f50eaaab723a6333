"""Will it fit: GPU capacities, the labelled estimates beside the ledgers, the verdict's arithmetic, and the commands
that say it — `zerosim memory --gpu` on Llama-3-8B, `zerosim timeline --gpu`, the sweep marking what cannot run."""

import io
import json
from contextlib import redirect_stdout

import pytest

from zerosim.analysis.costs import (
    CUDA_CONTEXT,
    GB,
    GPUS,
    NCCL_BUFFERS,
    DeepSpeedBuckets,
    deepspeed_bucket_bytes,
    deepspeed_buckets,
    fit,
    get_gpu,
    runtime_overheads,
)
from zerosim.cli.main import main
from zerosim.models.hf import read_hf_config, shipped_config
from zerosim.parallel.data import CommSchedule

MIB = 2**20

CAPACITIES = [
    # (key, MiB the driver reports (nvidia-smi's total), the datasheet's size)
    ("rtx3090", 24_576, "24 GB GDDR6X"),  # 24 GiB exactly: 12 GDDR6X chips of 2 GiB
    ("a100-40gb", 40_960, "40 GB HBM2"),  # 40 GiB: 5 HBM2 stacks of 8 GiB
    ("a100-80gb", 81_920, "80 GB HBM2e"),  # 80 GiB
    ("h100-80gb", 81_559, "80 GB HBM3"),  # 361 MiB under 80 GiB: what nvidia-smi prints on every H100 80GB HBM3
    ("h200", 143_771, "141 GB HBM3e"),  # the datasheet's 141 GB is decimal-ish; the driver reports 140.4 GiB
    ("v100-32gb", 32_510, "32 GB HBM2"),  # 258 MiB under 32 GiB: nvidia-smi on Tesla V100-SXM2-32GB
]


@pytest.mark.parametrize("key, mib, datasheet", CAPACITIES)
def test_gpu_capacities_are_the_driver_totals(key, mib, datasheet):
    g = get_gpu(key)
    assert g.capacity == mib * MIB and g.datasheet == datasheet
    assert set(GPUS) == {row[0] for row in CAPACITIES} | {"h100-hbm2e"}


def test_torchtitans_grand_teton_h100_is_its_marketed_96_gb():
    """No driver total is published for the 96 GB HBM2e H100 torchtitan's benchmarks ran on: the marketed size, in
    bytes (its runs' largest reading, 84.9 GiB = 91.2e9 bytes, fits under it)."""
    g = get_gpu("h100-hbm2e")
    assert (g.capacity, g.datasheet, g.device) == (96 * 10**9, "96 GB HBM2e", "h100-hbm2e")
    assert 84.9 * 2**30 < g.capacity


def test_the_estimates_are_rows_of_their_own_with_their_basis():
    rows = runtime_overheads(peak=40 * 10**9, ranks=8, stage=2, deepspeed=DeepSpeedBuckets(5 * 10**8, True, True))
    by = {r.name: r.bytes for r in rows}
    assert by == {
        "CUDA context": 287_047_680,  # pytorch/pytorch#86509, lazy loading
        "NCCL buffers": 1_060_000_000,  # NVIDIA/nccl#1685, 8xH100
        "DeepSpeed gradient buckets": 2 * 5 * 10**8 * 2,  # buf_0 and buf_1 (overlap_comm), 16-bit: 2 GB
        "allocator reserve": 2 * 10**9,
    }  # 5 % of the 40 GB peak
    assert all(r.basis for r in rows)
    alone = {r.name for r in runtime_overheads(peak=10, ranks=1, stage=0)}
    assert alone == {"CUDA context", "allocator reserve"}  # one rank: no NCCL; no DeepSpeed config: no buckets


@pytest.mark.parametrize(
    "stage, overlap, contiguous, copies",
    [
        (0, True, True, 0),  # stage 0: DeepSpeed's ZeRO optimizer is not used
        (1, False, True, 1),  # buf_0 (stage_1_and_2.py, setup_buckets)
        (2, True, True, 2),  # buf_0 and buf_1 "to avoid data access conflict when overlap_comm is enabled"
        (2, None, True, 1),  # overlap_comm left to DeepSpeed: off below stage 3 (overlap_comm_valid), buf_0 alone
        (3, None, True, 1),
        (2, True, False, 0),  # contiguous_gradients false: no IPG buffer
        (3, True, True, 1),  # stage3.py: one IPG bucket buffer per dtype, overlap or not
    ],
)
def test_deepspeed_bucket_buffers(stage, overlap, contiguous, copies):
    assert deepspeed_bucket_bytes(stage, DeepSpeedBuckets(10**6, contiguous, overlap)) == copies * 10**6 * 2


SCHEDULE_BUCKETS = [
    # (schedule, precision, the buffers DeepSpeed would allocate: (reduce_bucket_size, overlap_comm, bytes an element))
    (CommSchedule(), "bf16-mixed", None),  # seed 004's: no DeepSpeed optimizer, no buffer
    (CommSchedule(reduce_bucket_size=5 * 10**8), "bf16-mixed", None),  # zerosim's own buckets: no flat buffer either
    (CommSchedule.fsdp(), "bf16-mixed", None),  # FSDP reduce-scatters each unit's own gradient
    (CommSchedule.megatron(), "bf16-mixed", None),  # Megatron's grad buffer is its ledger's (not DeepSpeed's IPG)
    # DeepSpeed's defaults: 5e8 16-bit elements, overlap_comm by stage (None: on at stage 3 only)
    (CommSchedule.deepspeed(), "bf16-mixed", (5 * 10**8, None, 2)),
    (CommSchedule.deepspeed(), "fp16-mixed", (5 * 10**8, None, 2)),
    (CommSchedule.deepspeed(), "fp32", (5 * 10**8, None, 4)),  # the IPG buffer holds the parameters' dtype
    (CommSchedule.deepspeed(overlap_comm=True), "bf16-mixed", (5 * 10**8, True, 2)),  # a config's "overlap_comm": true
    (CommSchedule.deepspeed(10**6, overlap_comm=False), "bf16-mixed", (10**6, False, 2)),  # --reduce-bucket-size 1e6
    (CommSchedule.deepspeed().with_(reduce_bucket_size=7), "bf16-mixed", (7, None, 2)),  # a knob changed: still DS
]


@pytest.mark.parametrize("schedule, precision, expected", SCHEDULE_BUCKETS)
def test_deepspeeds_schedule_holds_its_bucket_buffers(schedule, precision, expected):
    b = deepspeed_buckets(schedule, precision)
    got = None if b is None else (b.reduce_bucket_size, b.overlap_comm, b.element_bytes)
    assert got == expected
    assert b is None or b.contiguous_gradients  # DeepSpeed's default


def test_memory_and_timeline_count_deepspeeds_buckets_under_its_schedule():
    """`--comm deepspeed` (plan's default schedule) holds DeepSpeed's gradient buffers: none at stage 0, buf_0 (5e8
    bf16 elements: 1 GB) at stages 1-2, where DeepSpeed's overlap_comm is off by default (buf_1 comes with it: a
    DeepSpeed config's "overlap_comm": true, tests/test_ds_config.py), one at stage 3; seed 004's schedule holds none.
    memory and timeline read one estimate."""
    base = ("--params", "1e9", "--ranks", "8", "--gpu", "h100-80gb")

    def buckets(command, *flags, stage=None):
        r = run_json(command, *base, *flags, *(() if stage is None else ("--stage", str(stage))))
        verdicts = r["gpu"]["by_stage"] if command == "memory" else [r["fit"]]
        return [sum(o["bytes"] for o in v["overheads"] if o["name"] == "DeepSpeed gradient buckets") for v in verdicts]

    assert buckets("memory", "--comm", "deepspeed") == [0, 10**9, 10**9, 10**9]
    assert buckets("memory", "--comm", "deepspeed", "--no-overlap") == [0, 10**9, 10**9, 10**9]
    assert buckets("memory", "--comm", "deepspeed", "--overlap-comm", "off") == [0, 10**9, 10**9, 10**9]
    assert buckets("memory", "--comm", "deepspeed", "--overlap-comm", "on") == [0, 2 * 10**9, 2 * 10**9, 10**9]
    smaller = buckets("memory", "--comm", "deepspeed", "--reduce-bucket-size", "1e8")
    assert smaller == [0, 2 * 10**8, 2 * 10**8, 2 * 10**8]
    assert buckets("memory") == [0, 0, 0, 0]  # seed 004's schedule
    assert buckets("memory", "--comm", "fsdp") == [0, 0, 0, 0]
    for stage, expected in ((1, 10**9), (3, 10**9)):
        assert buckets("timeline", "--comm", "deepspeed", stage=stage) == [expected]


def test_the_verdict_is_peak_plus_estimates_against_the_capacity():
    h100 = get_gpu("h100-80gb")
    rows = runtime_overheads(peak=80 * 10**9, ranks=8, stage=3)
    f = fit(80 * 10**9, h100, rows)
    assert f.overheads == CUDA_CONTEXT + NCCL_BUFFERS + 4 * 10**9 and f.total == 80 * 10**9 + f.overheads
    assert f.margin == h100.capacity - f.total == 85_520_809_984 - 85_347_047_680  # 81,559 MiB in bytes, minus
    assert f.fits and f.fits_measured_only
    tight = fit(84 * 10**9, h100, runtime_overheads(peak=84 * 10**9, ranks=8, stage=3))
    assert not tight.fits and tight.fits_measured_only  # the estimates decide it


# -- zerosim memory on Llama-3-8B: issue 23's command ----------------------------------------------------


def run_json(*argv):
    out = io.StringIO()
    with redirect_stdout(out):
        assert main([*argv, "--json"]) == 0
    return json.loads(out.getvalue())


def test_memory_says_whether_llama_3_8b_fits_an_h100_at_8192_tokens(capsys):
    config = str(shipped_config("llama-3-8b"))
    # zerosim's fused kernels (the formula below); PyTorch eager keeps more: tests/test_eager_kernels.py
    argv = ("memory", "--config", config, "--ranks", "8", "--seq-len", "8192", "--batch", "1", "--gpu", "h100-80gb",
            "--kernels", "fused")
    r = run_json(*argv)
    P = read_hf_config(config).num_params
    assert r["params"] == P == 8_030_261_248
    stage3 = r["stages"][3]
    assert stage3["ledger_total"] == 16 * P // 8  # (2 + 2 + 4 + 4 + 4)Ψ/N: every state sharded, N divides Ψ
    # one decoder layer: (2d + 2·H·d_h + 2·G·d_h + 3F)·B·L·2 + B·H·L²·2 + 2 fp32 statistics of B·L
    d, H, G, dh, F, L = 4096, 32, 8, 128, 14336, 8192
    layer = (2 * d + 2 * H * dh + 2 * G * dh + 3 * F) * L * 2 + H * L * L * 2 + 2 * L * 4
    assert r["activations"]["per_block_total"] == layer == 5_301_665_792
    # at the loss: 32 layers, the ids, the final norm's input and statistic; the loss adds fp32 (L, V) and labels
    assert stage3["activations"] == 32 * layer + L * 8 + (d * L * 2 + L * 4) + (L * 128256 * 4 + L * 8)
    verdicts = r["gpu"]["by_stage"]
    assert [v["stage"] for v in verdicts] == [0, 1, 2, 3] and not any(v["fits"] for v in verdicts)
    for row in r["stages"]:  # what was live at the peak's moment stacks up to the peak; each kind's own peak does not
        assert sum(row["at_peak"].values()) == row["peak"] < sum(row["peak_by_kind"].values())
    for v, row in zip(verdicts, r["stages"]):
        assert v["measured"] == row["peak"] and v["total"] == row["peak"] + v["overheads_total"]
        assert v["margin"] == get_gpu("h100-80gb").capacity - v["total"]
    assert main(list(argv)) == 0
    text = capsys.readouterr().out
    assert "Will a rank fit on one H100 SXM5 80GB? Capacity 85.52 GB" in text
    assert "does not fit: 115.31 GB short" in text  # stage 3: 189.98 GB measured + 10.85 GB estimated - 85.52 GB
    assert (round(verdicts[3]["measured"] / GB, 2), round(verdicts[3]["overheads_total"] / GB, 2)) == (189.98, 10.85)
    assert "try --checkpoint flash, block or every-k" in text  # activations are most of it: what to try


def test_with_block_checkpointing_it_fits_from_stage_1():
    r = run_json(
        "memory",
        "--model",
        "llama-3-8b",
        "--ranks",
        "8",
        "--seq-len",
        "8192",
        "--gpu",
        "h100-80gb",
        "--checkpoint",
        "block",
        "--precision",
        "bf16-mixed",
    )
    assert [v["fits"] for v in r["gpu"]["by_stage"]] == [False, True, True, True]


# -- zerosim timeline: the verdict, and the sweep that marks what cannot run -------------------------------


def test_timeline_judges_its_step_and_takes_the_gpus_compute_rates():
    r = run_json(
        "timeline",
        "--model",
        "llama-2-7b",
        "--ranks",
        "16",
        "--gpus-per-node",
        "8",
        "--gpu",
        "a100-40gb",
        "--seq-len",
        "1024",
        "--batch",
        "1",
        "--checkpoint",
        "block",
    )
    # 16 ranks on nodes of 8: NVLink inside a node, InfiniBand across; the flat ring leaves each node, so every call
    # runs at its slowest hop, on the inter-node tier
    # the A100's own NVLink 3 within a node (timeline Device.link; NVLink 4 until 2026-11-28, where plan took 3)
    assert r["device"] == "A100 40GB SXM" and r["link"] == "NVLink 3" and r["inter_link"].startswith("InfiniBand")
    assert r["tiers"]["inter-node"]["calls"] == sum(v["calls"] for v in r["by_purpose"].values()) > 0
    assert r["fit"]["measured"] == r["peak"] and r["fit"]["capacity"] == 40_960 * MIB


@pytest.mark.slow
def test_the_sweep_marks_what_does_not_fit():
    r = run_json("timeline", "--model", "gpt3-175b", "--sweep", "--sweep-ranks", "64,1024", "--tokens", "2048")
    rows = {(x["stage"], x["ranks"]): x for x in r["rows"] if x["link"] == "nvlink4"}
    # ZeRO-1 keeps the 16-bit params and grads whole: 4Ψ = 698 GB before anything else; ZeRO-2 the params, 349 GB
    assert not rows[1, 64]["fits"] and rows[1, 64]["needs"] > 4 * 174_604_259_328
    assert not rows[2, 1024]["fits"] and rows[2, 1024]["needs"] > 2 * 174_604_259_328
    assert rows[3, 64]["fits"] and rows[3, 1024]["fits"]  # ZeRO-3: 16Ψ/N = 43.7 GB and 2.7 GB of states
    out = io.StringIO()
    with redirect_stdout(out):
        assert (
            main(["timeline", "--model", "gpt3-175b", "--sweep", "--sweep-ranks", "64,1024", "--tokens", "2048"]) == 0
        )
    words = " ".join(out.getvalue().split())  # the legend wraps at 116 columns
    assert "✗ " in words and "it does not fit, so no such step could run" in words
