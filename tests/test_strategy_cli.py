"""`zerosim memory` and `zerosim timeline` with --strategy / --gpus-per-node: the strategies for many nodes at real
scale (meta backend), their numbers against formulas worked out by hand, and the flags' bad combinations.

Ψ(gpt3-175b) = 174,604,259,328, a multiple of 4096, so every shard below is an exact division."""

import json

import pytest

from zerosim.cli.main import main

PSI = 174_604_259_328


def run_json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow  # four meta steps at 4096 ranks: ~1 to 3 s
def test_memory_by_strategy_at_175b_on_4096_ranks_equals_hand_formulas(capsys):
    r = run_json(capsys, "memory", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8",
                 "--strategy", "full_shard,hsdp,mics,hpz", "--shard-group", "64")
    rows = {x["strategy"]: x for x in r["strategies"]}
    # bytes a parameter at rest: 2 (fp16 params) + g (grads) + 4 (fp32 master) + 8 (Adam's m, v), over the shards
    states = {
        "full_shard": 18 * PSI // 4096,  # FSDP2's recipe keeps fp32 gradients (g = 4), sharded over the world
        "hsdp": 18 * PSI // 64,  # FSDP2's, sharded over S = 64 and replicated R = 64 times
        "mics": 16 * PSI // 64,  # DeepSpeed's keeps fp16 gradients (g = 2), sharded over S = 64
        "hpz": 16 * PSI // 4096,  # DeepSpeed's, primary partition over the world ...
    }
    assert {k: v["resting_total"] for k, v in rows.items()} == states
    assert {k: v["replicas"] for k, v in rows.items()} == {"full_shard": 1, "hsdp": 64, "mics": 64, "hpz": 1}
    # ... plus hpZ's secondary copy: 2Ψ/S' fp16 bytes, S' = a node of 8 (zero_hpz_partition_size)
    assert rows["hpz"]["secondary_peak"] == 2 * PSI // 8
    assert all(rows[k]["secondary_peak"] == 0 for k in ("full_shard", "hsdp", "mics"))
    # hpZ's backward gathers stay in the node: across nodes it sends only forward's gather and the reduce-scatter,
    # one fewer world gather than FULL_SHARD, whose three world rings (2 gathers, 1 reduce-scatter; 16-bit) send
    # 1 hop in 8 across nodes: 3 · 2Ψ · (N−1)/N · 1/8 per rank on average
    assert rows["full_shard"]["tiers"]["inter-node"] == pytest.approx(3 * 2 * PSI * 4095 / 4096 / 8, rel=1e-12)
    assert rows["hpz"]["tiers"]["inter-node"] == pytest.approx(2 * 2 * PSI * 4095 / 4096 / 8, rel=1e-12)
    # HSDP and MiCS: rings of S = 64 over 8 nodes (1 hop in 8 leaves a node), and the replicas' all-reduce of each
    # 16-bit 2Ψ/S piece over R = 64 nodes, every hop across: 2 phases × 63/64 of it
    for name in ("hsdp", "mics"):
        assert rows[name]["tiers"]["inter-node"] == pytest.approx(
            3 * 2 * PSI * 63 / 64 / 8 + 2 * 63 / 64 * 2 * PSI / 64, rel=1e-12)
    # docs/explanation/many-nodes.md's table quotes these, in GB
    gb = {k: round(v["resting_total"] / 1e9, 2) for k, v in rows.items()}
    assert gb == {"full_shard": 0.77, "hsdp": 49.11, "mics": 43.65, "hpz": 0.68}
    assert round(rows["hpz"]["secondary_peak"] / 1e9, 2) == 43.65
    assert {k: round(v["tiers"]["inter-node"] / 1e9, 1) for k, v in rows.items()} == {
        "full_shard": 130.9, "hsdp": 139.6, "mics": 139.6, "hpz": 87.3}


def test_memory_prints_the_strategies_table(capsys):
    assert main(["memory", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy", "hpz"]) == 0
    out = capsys.readouterr().out
    assert "N = 4,096 ranks on nodes of 8" in out
    hpz = next(line for line in out.splitlines() if line.startswith("hpz"))
    assert "43.65" in hpz  # 2Ψ/8 = 43.65 GB, measured and by formula


def test_timeline_hsdp_sends_only_its_replicas_all_reduce_across_nodes(capsys):
    r = run_json(capsys, "timeline", "--model", "gpt3-175b", "--ranks", "64", "--gpus-per-node", "8",
                 "--strategy", "hsdp")
    assert r["shard_group"] == 8 and r["inter_link"] == "InfiniBand NDR"
    inter, intra = r["tiers"]["inter-node"], r["tiers"]["intra-node"]
    # across nodes: the all-reduce of each 16-bit piece over R = 8 replicas, two ring phases of 7 sends of 1/8 each:
    # summed over the S groups the pieces make Ψ, so all ranks send 2 · 7 · 2Ψ bytes; per rank ÷ 64
    assert inter["bytes_per_rank"] == 2 * 7 * 2 * PSI / 64
    # per unit (99 blocks): forward gather, backward gather, reduce-scatter within the node; 2 phases across
    assert (intra["calls"], inter["calls"]) == (3 * 99, 2 * 99)


def test_timeline_one_step_of_a_flat_ring_over_two_nodes_runs_on_infiniband(capsys):
    flat = run_json(capsys, "timeline", "--model", "gpt2-small", "--ranks", "16", "--gpus-per-node", "8")
    one_node = run_json(capsys, "timeline", "--model", "gpt2-small", "--ranks", "8", "--gpus-per-node", "8")
    assert flat["tiers"]["intra-node"]["calls"] == 0 < flat["tiers"]["inter-node"]["calls"]  # each ring leaves a node
    assert one_node["inter_link"] is None and one_node["link"] == "NVLink 4"


def test_the_strategy_sweep_rows_are_the_single_steps(capsys):
    common = ("--model", "gpt2-small", "--gpus-per-node", "4", "--tokens", "1024")
    r = run_json(capsys, "timeline", "--sweep", "--sweep-ranks", "4,16", "--strategy", "full_shard,hsdp,hpz", *common,
                 "--shard-group", "4")
    rows = {(x["strategy"], x["ranks"]): x for x in r["rows"]}
    assert len(rows) == 6 and r["shard_group"] == 4 and r["hpz_group"] == 4
    for name in ("full_shard", "hsdp", "hpz"):  # each with the group flag it reads (hpZ's: a node, its default)
        one = run_json(capsys, "timeline", "--ranks", "16", "--strategy", name, *common,
                       *(("--shard-group", "4") if name == "hsdp" else ()))
        assert rows[name, 16]["step_s"] == one["step_s"]  # the same engine, recipe and hardware
        assert rows[name, 16]["inter_bytes"] == one["tiers"]["inter-node"]["bytes_per_rank"]
    # on one node (N = 4 = G) nothing crosses, and HSDP with S = N is FULL_SHARD
    assert all(rows[k, 4]["inter_bytes"] == 0 for k in ("full_shard", "hsdp", "hpz"))
    assert rows["hsdp", 4]["step_s"] == rows["full_shard", 4]["step_s"]


def test_the_strategy_sweep_prints_a_table(capsys):
    argv = ["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "8,16", "--gpus-per-node", "8",
            "--strategy", "hsdp,mics", "--shard-group", "8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "HSDP's and MiCS's shard group S = 8" in out and out.count("\nhsdp ") == 2 and out.count("\nmics ") == 2


@pytest.mark.bad_input("command line", unchanged=True)
@pytest.mark.parametrize("argv, words", [
    (["memory", "--shard-group", "8"], "--shard-group sizes a strategy's group: add --strategy"),
    (["memory", "--strategy", "zero4"], "unknown strategy 'zero4'; choose from full_shard"),
    (["memory", "--strategy", "hsdp"], "--strategy hsdp needs a group: give --gpus-per-node G"),
    (["memory", "--ranks", "12", "--gpus-per-node", "8"], "--ranks 12 does not fill nodes of --gpus-per-node 8"),
    (["memory", "--ranks", "16", "--gpus-per-node", "0"], "--gpus-per-node must be at least 1"),
    (["memory", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "hsdp", "--shard-group", "3"],
     "does not divide"),
    (["timeline", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "hsdp,mics"],
     "several strategies are compared by --sweep"),
    (["timeline", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "hsdp", "--stage", "3"],
     "--stage and --strategy both say what is sharded"),
    (["timeline", "--ranks", "16", "--inter-link", "ib_ndr"], "--inter-link is the link between nodes"),
    (["timeline", "--sweep", "--strategy", "hsdp"], "--sweep --strategy places the ranks on nodes"),
    (["timeline", "--sweep", "--sweep-ranks", "12", "--gpus-per-node", "8", "--strategy", "hsdp"],
     "--sweep-ranks 12 does not fill nodes"),
    (["timeline", "--sweep", "--gpus-per-node", "8", "--strategy", "hsdp", "--figure", "s.png"],
     "--sweep --strategy prints its table"),
    # a group flag no named strategy reads: was run, and printed the same (a walk adding each flag alone)
    (["timeline", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "hsdp", "--hpz-group", "4"],
     "--hpz-group sizes the group of reshard_to_group or hpz; --strategy hsdp names none of them"),
    (["memory", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "full_shard,hpz", "--shard-group", "4"],
     "--shard-group sizes the group of hsdp or hsdp_no_sync or mics or mics_hierarchical; --strategy full_shard,hpz"),
])
def test_bad_mesh_flags_are_named_in_one_line(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([argv[0], "--model", "gpt2-small", *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written (the figure's file included)
