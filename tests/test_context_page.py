"""The numbers docs/context-parallelism.md quotes are the package's: each read from the page and recomputed here (the
commands the page runs are checked by tests/test_readme_commands.py)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = " ".join((ROOT / "docs" / "context-parallelism.md").read_text().split())


def quoted(pattern: str) -> tuple:
    match = re.search(pattern, PAGE)
    assert match, pattern
    return match.groups()


def zerosim(*argv) -> str:
    out = subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_merge_and_the_split_are_the_runs():
    from zerosim.parallel.context import block_shapes, block_work
    from zerosim.replay import cp_replay

    ring, one = quoted(r"gives \*\*([\d.]+)\*\* through the ring in bf16, where one pass of flash attention gives "
                       r"\*\*([\d.]+)\*\*")
    r = cp_replay("bf16-mixed")
    assert (r["output"][0], r["single_pass"][0], r["nearest"][0]) == (float(ring), float(one), float(one))
    running, rounded = quoted(r"its fp32 running output\s+\*\*([\d.]+)\*\* is rounded once, to \*\*([\d.]+)\*\*")
    torch = cp_replay("bf16-mixed", "torch")
    assert (f"{torch['running']:.9g}", torch["output"][0]) == (running, float(rounded))
    (times,) = quoted(r"the last GPU computes \*\*(\d+)\*\* times the first's query-key pairs")
    pairs = [sum(block_work(block_shapes("ring", "contiguous", True, 4, p, j, 8)) for j in range(4)) for p in (0, 3)]
    assert pairs[1] / pairs[0] == int(times)


@pytest.mark.slow  # the memory, timeline and plan commands of "Try it": ~13 s
def test_try_it_quotes_what_the_commands_print():
    memory = json.loads(zerosim("memory", "--model", "llama-3-8b", "--ranks", "8", "--cp", "4", "--seq-len", "8192",
                                "--batch", "1", "--checkpoint", "block-flash", "--precision", "bf16-mixed", "--gpu",
                                "h100-80gb", "--json"))
    layer, unsplit, sent = quoted(r"each GPU's layer keeps \*\*([\d.]+) MB\*\* by name against the unsplit layer's "
                                  r"\*\*([\d,.]+) MB\*\*.* by hand, \*\*([\d.]+) GB\*\*")
    a = memory["activations"]
    assert f"{a['per_block_total'] / 1e6:.3f}" == layer and f"{a['unsplit_per_block_total'] / 1e6:,.3f}" == unsplit
    stage0 = next(x for x in memory["stages"] if x["stage"] == 0)
    assert stage0["sent"] == stage0["sent_formula"] and f"{stage0['sent'] / 1e9:.3f}" == sent
    beside = json.loads(zerosim("memory", "--model", "llama-3-8b", "--ranks", "8", "--cp", "2", "--tp", "2", "--sp",
                                "--seq-len", "8192", "--batch", "1", "--checkpoint", "block-flash", "--precision",
                                "bf16-mixed", "--gpu", "h100-80gb", "--json"))
    layer, shard = quoted(r"the layer keeps \*\*([\d.]+) MB\*\*, the norms' inputs and the two column GEMMs' kept "
                          r"inputs at \*\*([\d,]+)\*\* tokens")
    b = beside["activations"]
    assert f"{b['per_block_total'] / 1e6:.3f}" == layer
    tokens = int(shard.replace(",", ""))  # 8,192 / (C·T): every tensor the SP shard keeps, d = 4,096 wide in bf16
    for name in ("ln1.block input", "attn.qkv.attention input (sequence shard)", "ln2.pre-FFN input",
                 "mlp.FFN input (sequence shard)"):
        assert b["per_block"][name] == tokens * 4096 * 2 == 8192 // 4 * 4096 * 2
    argv = ["timeline", "--model", "llama-3-8b", "--ranks", "8", "--gpus-per-node", "8", "--seq-len", "8192",
            "--batch", "1", "--cp", "4", "--checkpoint", "block-flash", "--precision", "bf16-mixed", "--comm", "fsdp",
            "--json"]
    contiguous = json.loads(zerosim(*argv, "--cp-split", "contiguous"))
    zigzag = json.loads(zerosim(*argv))
    step, sends = quoted(r"Cut contiguously, the step takes \*\*([\d.]+) ms\*\* with the CP ring's \*\*([\d.]+) ms\*\* "
                         r"of sends all hidden")
    by = contiguous["by_purpose"]["context parallel"]
    assert f"{contiguous['step_s'] * 1e3:.2f}" == step and f"{by['seconds'] * 1e3:.2f}" == sends
    assert by["exposed"] == 0 and zigzag["step_s"] < contiguous["step_s"]
    plan = json.loads(zerosim("plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "8192",
                              "--global-batch", "8", "--cp", "1,2,4", "--stages", "3", "--strategies", "block,flash",
                              "--micro-batches", "1", "--json"))
    assert "the planner still ranks CP 1 first" in PAGE and plan["fitting"][0]["cp"] == 1
    assert plan["left_out"][0]["strategies"] == ["block"] and plan["left_out"][0]["cp"] == [2, 4]


@pytest.mark.slow  # four timelines of 8B at 32k-262k tokens: ~15 s
def test_the_published_rows_are_the_predictions(tmp_path):
    config = json.loads((ROOT / "zerosim" / "models" / "hf" / "configs" / "llama-3-8b.json").read_text())
    config["max_position_embeddings"] = 262144  # what the page's sed writes
    path = tmp_path / "llama-3.1-8b-256k.json"
    path.write_text(json.dumps(config))
    rows = re.findall(r"\| FSDP (\d), CP (\d) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([+−]\d+) % \|", PAGE)
    assert len(rows) == 4
    reserved = set()
    for fsdp, cp, seq, published, predicted, error in rows:
        assert int(fsdp) * int(cp) == 8 and int(seq.replace(",", "")) == 32768 * int(cp)
        style = ("--cp-style", "torch") if cp != "1" else ()  # torchtitan's CP is torch's own, as the page types
        r = json.loads(zerosim("timeline", "--config", str(path), "--ranks", "8", "--gpus-per-node", "8", "--cp", cp,
                               *style, "--seq-len", seq.replace(",", ""), "--batch", "1", "--checkpoint",
                               "block-flash", "--comm", "fsdp", "--gpu", "h100-hbm2e", "--precision", "bf16-mixed",
                               "--kernels", "fused", "--fp8-gemms", "--json"))
        assert f"{r['tokens_per_s_per_gpu']:,.0f}" == predicted
        published = int(published.replace(",", ""))  # torchtitan's Table 2, as the page copies it
        assert f"{100 * (r['tokens_per_s_per_gpu'] / published - 1):+.0f}".replace("-", "−") == error
        reserved.add(r["fit"]["reserved"])
    # before torch's style, the ring's: the page quotes them
    ring = [json.loads(zerosim("timeline", "--config", str(path), "--ranks", "8", "--gpus-per-node", "8", "--cp",
                               cp, "--seq-len", seq.replace(",", ""), "--batch", "1", "--checkpoint", "block-flash",
                               "--comm", "fsdp", "--gpu", "h100-hbm2e", "--precision", "bf16-mixed", "--kernels",
                               "fused", "--fp8-gemms", "--json"))["tokens_per_s_per_gpu"]
            for _, cp, seq, *_ in rows[1:]]
    published = [int(p.replace(",", "")) for *_, p, _, _ in rows[1:]]
    was = ", ".join(f"{t:,.0f}" for t in ring[:-1]) + f" and {ring[-1]:,.0f} tokens/s, " + ", ".join(
        f"{100 * (t / p - 1):+.0f}".replace("-", "−") for t, p in zip(ring[:-1], published)) + \
        f" and {100 * (ring[-1] / published[-1] - 1):+.0f} %".replace("-", "−")
    assert f"the rows ran Transformer Engine's ring: {was}" in " ".join(PAGE.split()), was
    (gib,) = quoted(r"zerosim's ledger \*\*([\d.]+) GiB\*\* with the allocator's reserve")
    assert {f"{x / 2**30:.1f}" for x in reserved} == {gib}  # the same at every CP degree: 32,768 tokens a GPU
