"""Context parallelism everywhere a user looks (issue 60, Build 5): `--cp`, `--cp-style` and `--cp-split` in `train`,
`memory`, `timeline` and `plan`, defined once (cli/parallel_args.py) and read into one ParallelSpec; `memory` showing
every activation a CP rank keeps at L / C tokens by name beside the unsplit layer's, at 128k and 1M tokens on the
meta backend; `timeline` timing the K/V ring with the one throughput definition; `plan --cp 1,2,4` ranking CP degrees
as data, leaving out with a line what CP cannot run; `train --cp` training bit for bit as the oracle does; every
combination zerosim or the frameworks refuse refused by its flags' names."""

import json
import subprocess
import sys

import numpy as np
import pytest

from zerosim.analysis.costs import tokens_per_s_per_gpu
from zerosim.parallel import ParallelDims, ParallelSpec


def zerosim(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], capture_output=True, text=True)


def as_json(*argv) -> dict:
    out = zerosim(*argv, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def llama_31_8b(tmp_path, positions: int) -> str:
    """Llama 3.1 8B's config.json (huggingface.co/meta-llama/Llama-3.1-8B: Llama 3 8B's shape) with `positions`
    positions, as a long-context run sets its rotary tables' length (rope scaling is not modelled)."""
    config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": positions, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
              "tie_word_embeddings": False}
    path = tmp_path / "llama-3.1-8b.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.slow  # two meta steps of 8B at 128k tokens, its stage 0 and 3 rows, the unsplit layer beside: ~6 s
def test_memory_holds_every_activation_at_l_over_c_by_name_at_128k_tokens(tmp_path):
    L, C = 131072, 8
    r = as_json("memory", "--config", llama_31_8b(tmp_path, L), "--ranks", "16", "--cp", str(C), "--seq-len",
                str(L), "--batch", "1", "--checkpoint", "block-flash", "--precision", "bf16-mixed")
    a, Lr = r["activations"], L // C
    assert r["context_parallel"] == {"cp": C, "style": "ring", "split": "zigzag", "dp": 2}
    assert a["tokens_per_rank"] == Lr
    # every tensor the unsplit layer keeps, kept by a CP rank at 1/C of its bytes, name by name
    shared = {n: b for n, b in a["unsplit"].items() if b is not None}
    assert len(shared) == 12 and all(a["per_block"][n] * C == b for n, b in shared.items())
    # and by hand at L_r = 16,384 tokens, B = 1, d = 4096, 32 heads and 8 key/value heads of 128, F = 14,336, bf16:
    assert a["per_block"]["attn.qkv.block input"] == Lr * 4096 * 2  # the checkpointed block's input
    assert a["per_block"]["attn.out.K"] == 8 * Lr * 128 * 2  # the ring's last K, G heads
    assert a["per_block"]["attn.out.LSE"] == 32 * Lr * 4  # one fp32 row a head: no L x L buffer
    assert a["per_block"]["ffn.gate"] == Lr * 14336 * 2
    # what CP adds: the positions of a rank's tokens, int64, for rotary's backward
    assert [n for n, b in a["unsplit"].items() if b is None] == ["attn.qkv.positions"]
    assert a["per_block"]["attn.qkv.positions"] == Lr * 8
    # the K/V's bytes on the wire beside ZeRO's: the trace's sum equals the hand's at the stages that gather nothing
    by_stage = {row["stage"]: row for row in r["stages"]}
    for stage in (0, 1, 2):
        assert by_stage[stage]["sent"] == by_stage[stage]["sent_formula"]
    text = zerosim("memory", "--config", llama_31_8b(tmp_path, L), "--ranks", "16", "--cp", str(C), "--seq-len",
                   str(L), "--batch", "1", "--checkpoint", "block-flash").stdout
    assert "N = 16 GPUs = cp 8 x dp 2" in text and "attn.out.LSE" in text and "(CP)" in text


@pytest.mark.parametrize("sp", [pytest.param(False, marks=pytest.mark.slow), True], ids=["tp", "tp+sp"])  # ~3.5 s each
def test_memory_beside_tp_names_every_degree_and_who_keeps_each_tensor(sp):
    """Beside TP the header names all three degrees (tp × cp × dp = N) and, with sequence parallelism, says so; the
    layer's table marks what the unsplit layer does not keep by who keeps it: CP's positions, TP's column-GEMM inputs
    (with SP their sequence shards), at L / (C·T) tokens with SP: by hand, B = 1, L = 256, C = T = 2, d = 4,096,
    bf16."""
    r = as_json("memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "256", "--cp", "2", "--tp", "2",
                *(["--sp"] if sp else []), "--checkpoint", "flash")
    per_block = r["activations"]["per_block"]
    kept = "attn.qkv.attention input" + (" (sequence shard)" if sp else "")
    assert per_block[kept] == (64 if sp else 128) * 4096 * 2  # the shard's L / (C·T) tokens, else L / C
    assert per_block["ln1.block input"] == (64 if sp else 128) * 4096 * 2
    text = zerosim("memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "256", "--cp", "2", "--tp", "2",
                   *(["--sp"] if sp else []), "--checkpoint", "flash").stdout
    assert ("N = 8 GPUs = tp 2 x cp 2 x dp 2" + (" with sequence" if sp else ",")) in text
    rows = {line.split()[0]: line.split()[-1] for line in text.splitlines() if line.startswith("    attn.qkv.")}
    assert rows == {"attn.qkv.attention": "(SP)" if sp else "(TP)", "attn.qkv.positions": "(CP)"}
    assert all(len(line) <= 120 for line in text.splitlines() if "|" not in line)  # the prose (the table is wide)
    if sp:  # the timeline's header names every degree once, dp what they leave (it printed "tp 2 x dp 4 ... = cp 2 x
        # dp 2" for the same 8 GPUs)
        head = " ".join(zerosim("timeline", "--model", "llama-3-8b", "--ranks", "8", "--gpus-per-node", "8",
                                "--seq-len", "256", "--cp", "2", "--tp", "2", "--sp", "--checkpoint", "flash").stdout
                        .split("\n\n")[0].split())
        assert "N = 8 ranks on nodes of 8 = tp 2 x cp 2 x dp 2 (ring, zigzag split), sequence parallel," in head, head


@pytest.mark.slow  # a million tokens on 16 ranks, one stage: ~4 s
def test_memory_accounts_a_million_tokens_on_16_ranks(tmp_path):
    L, C = 1 << 20, 16
    r = as_json("memory", "--config", llama_31_8b(tmp_path, L), "--ranks", "16", "--cp", str(C), "--seq-len",
                str(L), "--batch", "1", "--checkpoint", "block-flash", "--precision", "bf16-mixed")
    a = r["activations"]
    assert a["per_block"]["attn.out.K"] == 8 * (L // C) * 128 * 2  # 65,536 tokens a rank
    assert a["unsplit_per_block_total"] // a["per_block_total"] == C - 1  # 16x fewer, less CP's int64 positions
    assert a["unsplit_per_block_total"] == C * (a["per_block_total"] - a["per_block"]["attn.qkv.positions"])


def test_timeline_times_the_ring_with_the_one_throughput():
    argv = ["timeline", "--model", "llama-3-8b", "--ranks", "8", "--gpus-per-node", "8", "--seq-len", "8192",
            "--batch", "1", "--checkpoint", "block-flash", "--comm", "fsdp"]
    ring = as_json(*argv, "--cp", "4")
    assert ring["context_parallel"] | {} == {"cp": 4, "style": "ring", "split": "zigzag", "dp": 2, "seq_len": 8192,
                                             "tokens_per_rank": 2048, "rank0_position": 0, "balanced": True}
    assert "context parallel" in ring["exposure"] and "AttnFuncWithCPAndKVP2P" in ring["exposure"]["context parallel"]
    # the one definition: the job's tokens (dp = 8 / 4 batch ranks of B·L) / step / GPUs
    assert ring["tokens_per_s_per_gpu"] == tokens_per_s_per_gpu(ParallelDims(8, cp=4), 8192, ring["step_s"])
    assert ring["tokens_per_s_per_gpu"] == 2 * 8192 / 8 / ring["step_s"]
    gathered = as_json(*argv, "--cp", "4", "--cp-style", "allgather")
    by = gathered["by_purpose"]["context parallel"]
    assert by["exposed"] == pytest.approx(by["seconds"], rel=1e-9)  # nothing to hide an all-gather behind
    contiguous = as_json(*argv, "--cp", "4", "--cp-split", "contiguous")
    assert contiguous["context_parallel"]["rank0_position"] == 3 and not contiguous["context_parallel"]["balanced"]
    assert contiguous["compute_s"] > ring["compute_s"]  # the last position's causal attention: 7/4 of the average


@pytest.mark.slow  # CP 1, 2 and 4 at stage 3, two strategies, and the two commands it prints: ~15 s
def test_plan_ranks_cp_degrees_and_its_commands_run_as_printed():
    r = as_json("plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "8192",
                "--global-batch", "8", "--cp", "1,2,4", "--stages", "3", "--strategies", "block,flash",
                "--micro-batches", "1")
    assert {x["cp"] for x in r["fitting"]} == {1, 2, 4}
    assert [x["step_s"] for x in r["fitting"]] == sorted(x["step_s"] for x in r["fitting"])
    # 'block' keeps standard attention, which CP cannot run: left out beside CP 2 and 4, with the reason
    (left,) = r["left_out"]
    assert left["cp"] == [2, 4] and left["strategies"] == ["block"] and "attention='flash'" in left["why"]
    assert {x["strategy"] for x in r["fitting"] + r["did_not_fit"] if x["cp"] > 1} == {"flash"}
    two = as_json("plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "8192",
                  "--global-batch", "8", "--cp", "2", "--stages", "3", "--strategies", "flash", "--micro-batches", "1")
    top = two["fitting"][0]
    memory_cmd, timeline_cmd = two["reproduce"]
    assert "--cp 2" in memory_cmd and "--cp 2" in timeline_cmd
    memory = json.loads(zerosim(*memory_cmd.split()[1:], "--json").stdout)
    assert next(x for x in memory["stages"] if x["stage"] == 3)["peak"] == top["peak"]
    timeline = json.loads(zerosim(*timeline_cmd.split()[1:], "--json").stdout)
    assert timeline["step_s"] == pytest.approx(top["step_s"], rel=1e-9)
    assert timeline["tokens_per_s_per_gpu"] == pytest.approx(top["tokens_per_s_per_gpu"], rel=1e-9)


def test_train_with_cp_cuts_each_data_parallel_ranks_sequences_over_its_cp_group():
    """`train --cp 2` on 4 ranks: its losses are those of the engine beside ContextParallel built here, fed each data-
    parallel rank's micro-batch from the run's pool, cut by `ContextParallel.batches` (the engine equals its oracle,
    ContextReference, bit for bit: tests/test_context_oracle.py)."""
    from zerosim import Cluster, ZeroEngine
    from zerosim.models.data import make_sequence_task
    from zerosim.optim import get_optimizer
    from zerosim.parallel.context import ContextParallel
    from zerosim.train import TrainConfig, build_model, train

    config = TrainConfig(model="gpt", attention="flash", length=4, stage=3, ranks=4, cp=2, steps=3, seed=5,
                         batch=2, eval_every=100)
    result = train(config)
    model = build_model(config)
    cp = ContextParallel(model, cp=2)
    engine = ZeroEngine(cp.model, Cluster(4), 3, get_optimizer("adam", lr=config.lr), config.precision,
                        params=model.init_params(np.random.default_rng(config.seed + 1)), parallelisms=(cp,))
    pool = make_sequence_task(np.random.default_rng(config.seed), 2 * 3, config.batch, config.length, config.vocab,
                              config.task)  # 2 data-parallel ranks x 3 steps of micro-batches
    want = [float(np.mean(np.asarray(engine.step(cp.batches(engine.dims, [[pool[2 * s + d]] for d in range(2)])),
                                     dtype=np.float64))) for s in range(3)]
    assert result.losses == want


@pytest.mark.bad_input("command line", unchanged="nothing runs: refused before the engine is built")
@pytest.mark.parametrize("argv, said", [
    (["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "256", "--cp-style", "allgather"],
     "--cp-style says how the keys and values travel the CP group: give --cp C > 1 with it"),
    (["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "256", "--cp", "3"],
     "--cp 3 does not divide --ranks 8"),
    (["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "260", "--cp", "2", "--tp", "2", "--sp",
      "--checkpoint", "flash"], "a sequence of 260 tokens does not split zigzag over cp = 2 ranks: its length must be "
                                "a multiple of 2 · cp · tp = 8"),
    (["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "256", "--cp", "2", "--checkpoint", "block"],
     "attention='flash', not 'standard'"),
    (["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "254", "--cp", "2", "--checkpoint", "flash"],
     "a sequence of 254 tokens does not split zigzag over cp = 2 ranks"),
    (["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "256", "--cp", "2", "--checkpoint", "flash",
      "--kernels", "eager"], "--kernels eager keeps torch eager's extra tensors, which beside --cp are not modelled"),
    (["memory", "--model", "llama-3-8b", "--ranks", "16", "--gpus-per-node", "8", "--seq-len", "256", "--cp", "2",
      "--checkpoint", "flash", "--strategy", "hsdp"], "--strategy hsdp beside context parallelism (--cp 2) is not "
                                                       "modelled"),
    (["timeline", "--model", "llama-3-8b", "--ranks", "8", "--cp", "2"], "--cp cuts a transformer's sequences"),
    (["plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "256", "--global-batch",
      "8", "--cp-split", "contiguous"], "--cp-split says how a sequence is cut over a CP group: give --cp degrees"),
    (["train", "--model", "gpt", "--ranks", "4", "--cp", "2", "--length", "4"], "add --attention flash"),
    (["train", "--model", "gpt", "--ranks", "4", "--cp", "2", "--length", "3", "--attention", "flash"],
     "--length 3 makes sequences of 6 tokens, and a sequence of 6 tokens does not split zigzag"),
    (["replay", "--cp-style", "torch"], "--cp-style chooses whose merge --cp's one hop tells: add --cp 2"),
    (["replay", "--tp", "2", "--cp-style", "torch"], "--cp-style chooses whose merge --cp's one hop tells"),
    (["replay", "--cp", "2", "--cp-style", "allgather"], "invalid choice: 'allgather'"),
], ids=["style without cp", "cp does not divide", "sp beside cp: L / C over tp", "not flash", "length",
        "eager kernels", "hsdp beside cp", "timeline without shape", "plan split without cp", "train not flash",
        "train length", "replay style without cp", "replay style beside tp", "replay style that merges nothing"])
def test_what_zerosim_or_the_frameworks_refuse_is_refused_by_its_flags(argv, said):
    out = zerosim(*argv)
    assert out.returncode == 2 and said in out.stderr, out.stderr


@pytest.mark.bad_input("engine arguments")
def test_the_spec_checks_each_option_beside_its_degree_in_the_callers_words():
    with pytest.raises(ValueError, match="cp_split says how a sequence is cut over the CP group: give cp > 1 with it"):
        ParallelSpec(cp_split="contiguous").check(8)
    with pytest.raises(ValueError, match=r"tp 2 × cp 3 = 6 GPUs does not divide world_size 8"):
        ParallelSpec(tp=2, cp=3).check(8)
    assert ParallelSpec(tp=2, cp=4, cp_split="contiguous").flags() == "--tp 2 --cp 4 --cp-split contiguous"
    assert ParallelSpec().build("a model") == ("a model", ())  # nothing asked for: the model itself, nothing beside
