"""`zerosim lint`: every rule has a configuration that falls under it and one that does not (the comment says why), and
cites a framework release, file and function and a user thread; its measurement is zerosim diff's; the command line
reads train's flags and DeepSpeed configs."""

import contextlib
import io
import json
import re

import pytest

from zerosim.cli.main import main
from zerosim.frameworks.deepspeed import read_ds_config
from zerosim.lint import RULES, lint
from zerosim.precision import get_precision
from zerosim.train import TrainConfig


def ds(**body):
    return read_ds_config({"train_micro_batch_size_per_gpu": 2, **body}, 4, 64)


def muon(stage: int):
    return ds(zero_optimization={"stage": stage}, bf16={"enabled": True}, optimizer={"type": "Muon"})


BF16 = get_precision("bf16-mixed")
CASES = {  # rule -> ((config, ds) that falls under it, (config, ds) that does not)
    # fp16's preset scales nothing (loss_scale 1.0); a dynamic scaler is the way out
    "fp16-without-loss-scaling": ((TrainConfig(precision="fp16-mixed"), None),
                                  (TrainConfig(precision=get_precision("fp16-mixed").with_(loss_scale="torch")), None)),
    # Adam's m and v kept in bf16 between steps, against the fp32 default
    "optimizer-state-16-bit": ((TrainConfig(precision=BF16.with_(optim_state="bf16")), None), (TrainConfig(), None)),
    # bf16-pure has no master: the optimizer updates the bf16 weights
    "master-weights-16-bit": ((TrainConfig(precision="bf16-pure"), None), (TrainConfig(), None)),
    # three micro-batches accumulate in bf16 (two round once, which fp32 accumulation cast back does too)
    "long-accumulation-in-16-bit": ((TrainConfig(accumulation_steps=3), None),
                                    (TrainConfig(accumulation_steps=2), None)),
    # bf16 on the wire under fp32 masters, against an fp32 wire
    "reduce-dtype-below-params": ((TrainConfig(), None), (TrainConfig(precision=BF16.with_(reduce="fp32")), None)),
    # an fp32 reduction asked beside TP 2 (FSDP2 all-reduces the TP-replicated gradients in bf16), against TP 1
    "tp-gradients-reduced-below-reduce-dtype": (
        (TrainConfig(model="gpt", ranks=2, tp=2, precision=BF16.with_(reduce="fp32")), None),
        (TrainConfig(model="gpt", ranks=2, precision=BF16.with_(reduce="fp32")), None)),
    # a DeepSpeed config's Muon at stage 3 (zero.Init), against stage 2
    "muon-off-under-zero3-init": ((TrainConfig(), muon(3)), (TrainConfig(), muon(2))),
    # a DeepSpeed config's Muon without ZeRO, against stage 1
    "muon-is-sgd-without-zero": ((TrainConfig(), muon(0)), (TrainConfig(), muon(1))),
    # TP 2 under a trainer that counts processes, against TP 1
    "loss-over-counted-under-tp": ((TrainConfig(model="gpt", ranks=2, tp=2), None),
                                   (TrainConfig(model="gpt", ranks=2), None)),
    # any accumulation, against none
    "loss-averaged-twice-under-accumulation": ((TrainConfig(accumulation_steps=2), None), (TrainConfig(), None)),
    # DeepSpeed ZeRO-2's bucket all-reduce, against zerosim's reduce-scatter to the owners
    "bucket-size-changes-the-sum": ((TrainConfig(precision=BF16.with_(reduction="deepspeed-zero12")), None),
                                    (TrainConfig(), None)),
}


def test_every_rule_has_its_two_cases():
    assert set(CASES) == {r.name for r in RULES}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_a_rule_finds_its_trap_and_only_it(rule):
    (trap, trap_ds), (clean, clean_ds) = CASES[rule]
    assert rule in {f.rule for f in lint(trap, trap_ds)}
    assert rule not in {f.rule for f in lint(clean, clean_ds)}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_cites_a_release_file_function_and_a_thread(rule):
    assert re.search(r"\b(torch|DeepSpeed|transformers) (\d+\.\d+\.\d+|before PR #\d+|src/)", rule.source), \
        rule.source  # a release, or the fix that ends the releases it names
    assert re.search(r"[\w/]+\.(py|cpp)", rule.source), rule.source  # a file
    assert re.search(r"\b[\w.]*[a-z_]+\b", rule.source)
    assert rule.thread.startswith("https://github.com/") and re.search(r"/(issues|pull)/\d+", rule.thread)
    assert rule.severity in ("error", "warning", "info")


def test_a_trap_is_measured_by_diff():
    # the long-accumulation trap trained beside fp32 accumulation: they part in the reduced gradient (a rank's three
    # micro-batches summed in bf16 round twice, in fp32 once) and end apart
    finding = next(f for f in lint(TrainConfig(widths=(4, 6, 3), batch=2, accumulation_steps=3, stage=1), measure=2)
                   if f.rule == "long-accumulation-in-16-bit")
    m = finding.measured
    assert m["steps"] == 2 and m["apart"] > 0 and "reduced gradient" in m["first_parting"]


def test_a_way_out_zerosim_does_not_run_is_said():
    # DDP all-reduces in the gradient's own dtype: an fp32 wire beside it is refused, and the finding says so
    finding = next(f for f in lint(TrainConfig(widths=(4, 6, 3), stage=0, precision=BF16.with_(reduction="ddp")),
                                   measure=1) if f.rule == "reduce-dtype-below-params")
    assert "not run" in finding.measured


def test_the_command_reads_trains_flags_and_prints_json():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["lint", "--precision", "fp16-mixed", "--measure", "0", "--json"]) == 0
    findings = json.loads(out.getvalue())
    assert {"rule", "severity", "message", "source", "thread"} <= set(findings[0])
    assert "fp16-without-loss-scaling" in {f["rule"] for f in findings}


def test_a_deepspeed_config_train_does_not_run_is_linted_as_deepspeed_runs_it(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 0},
                                "bf16": {"enabled": True}, "optimizer": {"type": "Muon"}}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["lint", "--ds-config", str(path), "--json"]) == 0
    assert "muon-is-sgd-without-zero" in {f["rule"] for f in json.loads(out.getvalue())}


@pytest.mark.bad_input("command line")
def test_a_negative_measure_is_refused(capsys):
    assert main(["lint", "--measure", "-1"]) == 2
    assert "--measure must be 0 or more" in capsys.readouterr().err


@pytest.mark.parametrize("config, ds_run, said", [
    (TrainConfig(ranks=1), None, None),  # one rank sums nothing: no wire rounds a sum (it said "the ring's 0 hops")
    (TrainConfig(model="gpt", ranks=2, tp=2), None, None),  # N / T = 1 data-parallel rank
    (TrainConfig(ranks=2), None, "the ring's one hop rounds the partial sum to bf16"),
    (TrainConfig(ranks=4), None, "each of the ring's 3 hops rounds the partial sum to bf16"),  # N − 1 hops
    # a DeepSpeed config train does not run (stage 0) on the world it was read for, 4 ranks (it said 0 hops: one rank)
    (None, ds(zero_optimization={"stage": 0}, bf16={"enabled": True}), "each of the ring's 3 hops"),
])
def test_the_reduction_rules_count_the_ranks_a_gradient_is_summed_over(config, ds_run, said):
    found = {f.rule: f.message for f in lint(config, ds_run)}
    if said is None:
        assert "reduce-dtype-below-params" not in found
    else:
        assert said in found["reduce-dtype-below-params"]


def test_a_bucket_all_reduce_on_one_rank_moves_no_sum():
    rules = {f.rule for f in lint(TrainConfig(ranks=1, precision=BF16.with_(reduction="deepspeed-zero12")))}
    assert "bucket-size-changes-the-sum" not in rules


def test_a_16_bit_state_is_a_trap_only_where_the_optimizer_keeps_one():
    # SGD without momentum keeps no state between steps: its trap and its way out trained to the same bits (the
    # warning said "Adam's m and v" of it); with momentum it keeps b, and Lion keeps m
    def said(**config):
        return {f.rule: f.message for f in lint(TrainConfig(precision=BF16.with_(optim_state="fp16"), **config))}

    assert "optimizer-state-16-bit" not in said(optimizer="sgd")
    assert "(sgd's b) is stored in fp16" in said(optimizer="sgd", optimizer_options={"momentum": 0.9})[
        "optimizer-state-16-bit"]
    assert "(lion's m) is stored in fp16" in said(optimizer="lion")["optimizer-state-16-bit"]
    assert "(adan's m, v, n and g_prev) is stored in fp16" in said(optimizer="adan")["optimizer-state-16-bit"]
