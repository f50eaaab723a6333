"""`zerosim timeline`: one step's time at real scale, the knobs, the trace and figure files, and the sweep
that measures seed 003's claim. Expected numbers are derived by hand in the comments."""

import json

import pytest

from zerosim.analysis.costs import get_preset
from zerosim.analysis.planner import crossover, latency_bound_ranks, sweep
from zerosim.analysis.timeline import Hardware
from zerosim.cli.main import main
from zerosim.models.meta import MetaModel
from zerosim.parallel.data import CommSchedule


def run_json(capsys, *argv):
    assert main(["timeline", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_step_is_compute_plus_exposed_and_overlap_hides_the_rest(capsys):
    # One representative rank: its compute stream idles only while it waits for communication, so the step
    # is compute + exposed, and communication = hidden + exposed (the overlapped part comes off the step).
    r = run_json(
        capsys, "--model", "gpt2-small", "--ranks", "16", "--comm", "fsdp", "--forward-prefetch", "--tokens", "8192"
    )
    assert r["step_s"] == pytest.approx(r["compute_s"] + r["exposed_comm_s"], rel=1e-12)
    assert r["step_s"] == pytest.approx(r["compute_s"] + r["comm_s"] - r["overlapped_s"], rel=1e-12)
    assert r["overlapped_s"] > 0.5 * r["comm_s"]  # prefetch and reduce-scatters behind backward hide most of it
    off = run_json(
        capsys,
        "--model",
        "gpt2-small",
        "--ranks",
        "16",
        "--comm",
        "fsdp",
        "--forward-prefetch",
        "--tokens",
        "8192",
        "--no-overlap",
    )
    assert off["exposed_comm_s"] == pytest.approx(off["comm_s"], rel=1e-12)  # one stream: nothing hidden
    assert off["step_s"] == pytest.approx(off["compute_s"] + off["comm_s"], rel=1e-12)
    assert off["compute_s"] == pytest.approx(r["compute_s"], rel=1e-12)  # the same work, only serialised


def test_seed004_schedule_gathers_each_unit_twice_and_reduces_it_once(capsys):
    # gpt2-small in block units: 15 units (wte, wpe, 12 blocks, ln_f; the head is tied); ZeRO-3 without prefetch
    # gathers each in forward and again in backward (2·15 = 30) and reduce-scatters each once (15).
    r = run_json(capsys, "--model", "gpt2-small", "--ranks", "8")
    assert r["units"] == 15
    assert r["by_purpose"]["gather params"]["calls"] == 30
    assert r["by_purpose"]["reduce grads"]["calls"] == 15


def test_prefetch_raises_the_params_peak(capsys):
    # ZeRO-3, N = 8, gpt2-small in blocks: units in use order are the token embedding (50257·768 = 38,597,376),
    # the position embedding (1024·768 = 786,432), 12 blocks (7,087,872 each), the final LayerNorm (the head is
    # tied to the token embedding). Seed 004's schedule holds
    # one gathered unit at a time: its peak has the token embedding. FSDP (one ahead, forward and backward)
    # holds two: the largest pair in use order is the token embedding with the position embedding, so the
    # peak grows by exactly 786,432 fp16 elements.
    seed = run_json(capsys, "--model", "gpt2-small", "--ranks", "8")
    fsdp = run_json(capsys, "--model", "gpt2-small", "--ranks", "8", "--comm", "fsdp", "--forward-prefetch")
    assert round((fsdp["params_peak_gb"] - seed["params_peak_gb"]) * 1e9) == 786_432 * 2


def test_trace_and_figure_files(tmp_path, capsys):
    trace, figure = tmp_path / "step.json", tmp_path / "step.png"
    assert (
        main(["timeline", "--model", "gpt2-small", "--ranks", "8", "--trace", str(trace), "--figure", str(figure)]) == 0
    )
    out = capsys.readouterr().out
    assert "ui.perfetto.dev" in out and str(figure) in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["ph"] for e in events} >= {"X", "M"}
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_sweep_finds_seed003s_crossover_where_the_formula_puts_it():
    # GPT-3 175B in blocks (Φ = 12·12288² + 13·12288 = 1,812,099,072), H100 (R = 989.4e12 FLOP/s fp16 dense),
    # InfiniBand NDR (β = 50e9 B/s, α = 14 µs: NCCL's network step, Simple), T = 20,480 tokens: T/R − 1/β =
    # 2.06994e-11 − 2e-11 = 6.994e-13 s, so N* = 1 + 2Φ·6.994e-13/α = 1 + 2.5347e-3/14e-6 ≈ 182: the gathers hide
    # below it and stop hiding above (at the datasheet peak: the roofline the formula assumes).
    model = MetaModel.from_preset(get_preset("gpt3-175b"), unit="block")
    hw = Hardware("h100", "ib_ndr", "fp16")
    assert latency_bound_ranks(model.largest_layer, 20480, hw) == pytest.approx(182.06, abs=0.01)
    assert latency_bound_ranks(model.largest_layer, 2048, hw) is None  # T < R/β = 19,788: bandwidth exposes it at any N
    rows = {r.ranks: r for r in sweep(model, (64, 128, 512, 1024), stages=(3,), links=("ib_ndr",),
                                      comm=CommSchedule.fsdp(forward_prefetch=True), tokens=20480)}
    assert rows[128].exposed == pytest.approx(rows[64].exposed, rel=0.1)  # below N*: flat
    assert rows[512].exposed > 3 * rows[128].exposed  # above N*: the ring's latency shows
    # Past N* the communication stream is the bottleneck, so every call's extra latency lands on the step:
    # 99 units × 3 calls (a gather in forward, a gather and a reduce-scatter in backward), each (N−1)·α, grow
    # by 512·α from N = 512 to 1024: 297 · 512 · 14 µs = 2.13 s. A few calls at the step's ends still
    # overlap compute, hence the 5 %.
    grow = rows[1024].exposed - rows[512].exposed
    assert grow == pytest.approx(297 * 512 * 14e-6, rel=0.05)
    assert crossover(list(rows.values()), 3, "ib_ndr") is None  # never more than the compute within 1024


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv, words", [
    (["--tokens", "0"], "--tokens must be a positive integer"),
    (["--reduce-bucket-size", "1.5"], "--reduce-bucket-size must be a whole number"),
    (["--trace", "out.txt"], "expected a .json file name"),
    (["--figure", "out.jpg"], "expected a .png file name"),
    (["--sweep", "--sweep-ranks", "8,x"], "--sweep-ranks must be comma-separated integers"),
    (["--sweep", "--sweep-ranks", "0"], "rank counts >= 1"),
    (["--sweep", "--trace", "t.json"], "run without --sweep"),
])
def test_bad_arguments_are_named(argv, words, capsys):
    assert main(["timeline", "--model", "gpt2-small", *argv]) == 2
    assert words in capsys.readouterr().err


def test_the_purposes_that_ran_on_two_streams_at_once_say_why_they_add_to_more(capsys):
    # hpZ on nodes of 4: its gathers run on InfiniBand, its reduce-scatters on NVLink, each tier its own stream, so
    # the purposes' seconds add to more than the time some stream was busy (the headline: the union of the calls).
    # The text said "the communication stream" and left the rows' sum unexplained (a random walk over timeline's
    # flags found the sums apart).
    argv = ["--model", "llama-2-7b", "--ranks", "32", "--seq-len", "1024", "--gpus-per-node", "4", "--strategy", "hpz"]
    r = run_json(capsys, *argv)
    rows = sum(v["seconds"] for v in r["by_purpose"].values())
    tiers = sum(v["seconds"] for v in r["tiers"].values())
    assert rows == pytest.approx(tiers, rel=1e-12)  # every call on one tier and of one purpose
    assert max(v["seconds"] for v in r["tiers"].values()) < r["comm_s"] < rows  # overlapping streams, counted once
    assert main(["timeline", *argv]) == 0
    text = capsys.readouterr().out
    assert "(the time some stream was busy, streams at once counted once, the same on every rank)" in text
    overlaid = f"{(rows - r['comm_s']) * 1e3:.2f} ms of calls on different streams ran at once"
    assert f"(the rows add to {rows * 1e3:.2f} ms: {overlaid}" in " ".join(text.split())
    # one stream (no nodes): the rows add to the headline, and the text stays as it was
    assert main(["timeline", "--model", "llama-2-7b", "--ranks", "32", "--seq-len", "1024"]) == 0
    text = capsys.readouterr().out
    assert "(the communication stream, the same on every rank)" in text and "the rows add to" not in text


def test_the_help_says_the_tokens_the_library_takes():
    # --tokens' default is the library's (analysis/costs TOKENS: every planner and report signature takes it); the
    # help types it, as it must (a command's --help loads no NumPy)
    import argparse
    import re

    from zerosim.analysis.costs import TOKENS
    from zerosim.cli import timeline_cmd

    parser = argparse.ArgumentParser()
    timeline_cmd.add_arguments(parser)
    action = next(a for a in parser._actions if a.dest == "tokens")
    assert int(re.search(r"\(default (\d+)\)", action.help).group(1)) == TOKENS and action.default is None


@pytest.mark.parametrize("more, said", [
    ([], "1 × 4,096 tokens × 1 micro-step per rank"),  # one: the singular
    (["--accumulation-steps", "4"], "1 × 4,096 tokens × 4 micro-steps per rank"),
    # a pipeline's M micro-batches go through every stage of a data-parallel rank's pipeline
    (["--pp", "2", "--pp-schedule", "gpipe", "--accumulation-steps", "1"],
     "1 × 4,096 tokens × 1 micro-batch per data-parallel rank"),
    (["--pp", "2", "--accumulation-steps", "4"], "1 × 4,096 tokens × 4 micro-batches per data-parallel rank"),
])
def test_the_header_counts_the_micro_steps_in_words(more, said, capsys):
    assert main(["timeline", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "4096", "--batch", "1",
                 "--stage", "1", *more]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"  {said}, checkpoint 'none'"
