"""The parity kit beyond DDP (zerosim/frameworks/torch: zero1.py, fsdp.py, kits.py; `zerosim parity --optimizer zero1 |
--fsdp ...`): real torch DDP + ZeroRedundancyOptimizer(Adam) and FSDP2 fully_shard (fp32, bf16 params with fp32 and
bf16 reduce_dtype) on N gloo processes against zerosim, with torch's local gradients and sqrt fed in: bit for bit at
N = 2, 3, 4 for 20 steps (issue 25, Must show 2). The torch runs need the optional `parity` extra and are skipped,
with the reason, without it; one launch per N serves every test of that N."""

import sys

import numpy as np
import pytest
from helpers import torch_bits

from zerosim.frameworks.torch import (
    StepParity,
    dim0_rows,
    first_difference,
    fsdp_reduce,
    local_gradients,
    step_parity,
    zero_redundancy_partition,
)

STEPS = 20
WIDTHS = (16, 32, 8)
NO_TORCH = "torch (the parity extra) is not installed: pip install -e '.[parity]'"


@pytest.fixture(scope="module")
def torch_runs():
    """{N: per-rank records of one launch running both kits}, filled on first use."""
    return {}


def _runs(torch_runs, n):
    pytest.importorskip("torch", reason=NO_TORCH)
    from zerosim.frameworks.torch import run_torch_kits

    if n not in torch_runs:
        torch_runs[n] = run_torch_kits(n, WIDTHS, STEPS)
    return torch_runs[n]


def _torch_sqrt_is_correctly_rounded(v) -> bool:
    import torch

    return np.array_equal(torch.from_numpy(v).sqrt().numpy().view(np.uint32), np.sqrt(v).view(np.uint32))


# -- with torch: bit for bit ---------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero_redundancy_optimizer_is_reproduced_bit_for_bit_for_twenty_steps(torch_runs, n):
    from zerosim.frameworks.torch import compare_zero1, ranks_of

    ranks = ranks_of(_runs(torch_runs, n), "zero1")
    sizes = [v.size for v in ranks[0]["initial"].values()]  # 512, 32, 256, 8: registration order
    names = list(ranks[0]["initial"])
    assert ranks[0]["partition"] == [[names[i] for i in owned] for owned in zero_redundancy_partition(sizes, n)]
    for partition in ("zero-redundancy", "flat"):  # Adam is elementwise: who updates an element cannot matter
        steps = compare_zero1(ranks, WIDTHS, partition=partition)
        assert [(s.equal, s.max_ulps) for s in steps] == [(1.0, 0)] * STEPS, partition
    # the comparison can fail: zerosim's ring adds in gloo's order up to N = 3 only (collectives/chunk_maps/_gloo.py)
    ring = compare_zero1(ranks, WIDTHS, reduction="ring")
    if n >= 4:
        assert ring[0].equal < 1.0 and ring[0].cause == "reduced"
    else:
        assert all(s.equal == 1.0 for s in ring)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("setting", ["fp32", "bf16-fp32", "bf16"])
def test_fsdp2_is_reproduced_bit_for_bit_for_twenty_steps(torch_runs, n, setting):
    from zerosim.frameworks.torch import compare_fsdp, ranks_of

    ranks = ranks_of(_runs(torch_runs, n), "fsdp")
    steps = compare_fsdp(ranks, WIDTHS, setting)
    assert [(s.equal, s.max_ulps) for s in steps] == [(1.0, 0)] * STEPS


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_without_torchs_sqrt_the_first_difference_is_the_update(torch_runs, n):
    """Adam's sqrt: where torch's CPU sqrt is not correctly rounded for the run's second moments, zerosim's own
    sqrt makes the first difference, at the update; where it is, nothing differs."""
    from zerosim.frameworks.torch import compare_zero1, ranks_of

    ranks = ranks_of(_runs(torch_runs, n), "zero1")
    steps = compare_zero1(ranks, WIDTHS, sqrt="zerosim")
    record = ranks[0]["records"][0]
    # Adam's second moment after step 1, (1 - b2) g^2 (up to the fma's one rounding): a probe of whether torch's
    # sqrt rounds this run's inputs correctly
    v = np.concatenate([(np.float32(1 - 0.999) * g * g).astype(np.float32) for g in record["reduced"].values()])
    if _torch_sqrt_is_correctly_rounded(v):
        assert steps[0].equal == 1.0
    else:
        assert steps[0].cause == "update" and steps[0].equal < 1.0
        assert {s.cause for s in steps[1:]} <= {"carried", "update"}


# -- without torch: the pieces, against hand tables and NumPy --------------------------------------------------------
def test_zero_redundancy_partition_is_greedy_by_size_on_whole_parameters():
    # ZeroRedundancyOptimizer._partition_parameters: largest first, each to the first rank holding the least
    assert zero_redundancy_partition([512, 32, 256, 8], 3) == [
        [0],  # 512 -> rank 0 (all empty: the first)
        [2],  # 256 -> rank 1 (0 holds 512)
        [1, 3],  # 32 -> rank 2, then 8 -> rank 2 (totals 512, 256, 32)
    ]
    assert zero_redundancy_partition([512, 32, 256, 8], 2) == [[0], [2, 1, 3]]  # 256 + 32 + 8 < 512
    assert zero_redundancy_partition([5, 5, 5], 2) == [[0, 2], [1]]  # ties keep registration order (stable sort)
    assert zero_redundancy_partition([3], 4) == [[0], [], [], []]  # a rank may own nothing


def test_dim0_rows_are_torch_chunks():
    # Shard(0): chunks of ceil(rows / N) rows; 8 rows on 3 ranks: 3, 3, 2; 2 rows on 4 ranks: 1, 1, 0, 0
    assert [dim0_rows(8, 3, r) for r in range(3)] == [(0, 3), (3, 6), (6, 8)]
    assert [dim0_rows(2, 4, r) for r in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_fsdp_reduce_averages_each_ranks_dim0_shard():
    """Two ranks, fp32: gloo's AVG is (a + b) rounded, then / 2 (exact); checked against NumPy, and each rank keeps
    its own rows of each parameter (a 3-row bias is padded to 2 + 2 rows)."""
    rng = np.random.default_rng(0)
    shapes = {"0.weight": (3, 2), "0.bias": (3,)}
    local = [{k: rng.standard_normal(s).astype(np.float32).reshape(-1) for k, s in shapes.items()} for _ in range(2)]
    out = fsdp_reduce(["0.weight", "0.bias"], shapes, local, "fp32")
    for name, shape in shapes.items():
        want = ((local[0][name] + local[1][name]) / np.float32(2)).reshape(shape[0], -1)  # fp32 NumPy
        assert np.array_equal(out[0][name], want[:2].reshape(-1)) and np.array_equal(out[1][name], want[2:].reshape(-1))


def test_fsdp_reduce_in_bf16_rounds_the_sum_to_bf16():
    """bf16 has 8 significant bits: ulp(1) = 2^-7, ulp(2) = 2^-6. Two ranks' bf16 gradients a and b; gloo's AVG
    in the reduce dtype is bf16(a + b) / 2, then .to(fp32); with reduce_dtype fp32 the sum is exact here."""
    shapes = {"0.bias": (2,)}
    local = [{"0.bias": np.float32([1 + 2.0**-7, 1 + 3 * 2.0**-7])}, {"0.bias": np.float32([1, 1])}]
    rows = [  # (a, b): bf16 reduce, fp32 reduce
        # 1 + 2^-7 and 1: 2 + 2^-7 is halfway between 2 and 2 + 2^-6: ties to even, 2; / 2 = 1 (fp32: 1 + 2^-8)
        (1.0, 1 + 2.0**-8),
        # 1 + 3*2^-7 and 1: 2 + 3*2^-7 halfway between 2 + 2^-6 (odd) and 2 + 2^-5 (even): 2 + 2^-5; / 2
        (1 + 2.0**-6, 1 + 3 * 2.0**-8),
    ]
    bf16 = fsdp_reduce(["0.bias"], shapes, local, "bf16")
    fp32 = fsdp_reduce(["0.bias"], shapes, local, "bf16-fp32")
    assert [bf16[0]["0.bias"][0], bf16[1]["0.bias"][0]] == [row[0] for row in rows]
    assert [fp32[0]["0.bias"][0], fp32[1]["0.bias"][0]] == [row[1] for row in rows]
    assert bf16[0]["0.bias"].dtype == np.float32  # .to(orig_dtype): the fp32 sharded parameter's gradient


def test_own_gradients_are_the_half_mse_gradients_on_torchs_names():
    # one Linear 2 -> 1, one sample: y = w.x + b, L = 0.5 (y - t)^2, dL/dw = (y - t) x, dL/db = y - t
    params = {"0.weight": np.float32([[2, -1]]), "0.bias": np.float32([0.5])}
    x, t = np.float32([[3, 4]]), np.float32([[1]])  # y = 6 - 4 + 0.5 = 2.5, y - t = 1.5
    g = local_gradients((2, 1), params, x, t)
    assert g["0.weight"].tolist() == [4.5, 6.0] and g["0.bias"].tolist() == [1.5]


def test_step_parity_counts_bits_and_ulps_and_names_the_first_difference():
    one = np.float32(1)
    up = np.nextafter(one, np.float32(2))
    s = step_parity(3, {"a": np.float32([1, up, -0.0])}, {"a": np.float32([1, 1, 0.0])}, "update")
    assert s == StepParity(3, 1 / 3, 1, "update") and "sqrt" in s.reason  # -0.0 and +0.0: other bits, 0 ulps
    assert step_parity(1, {"a": np.float32([1])}, {"a": np.float32([1])}, "update").cause == ""
    same, other = {"a": np.float32([1])}, {"a": np.float32([up])}
    assert first_difference([("local", same, same), ("reduced", same, other), ("update", other, same)]) == "reduced"
    assert first_difference([("local", same, same)]) == ""


# torch's CPU sqrt (MKL's vsSqrt) against the correctly rounded one: the % of 1,000,000 uniform fp32 inputs in [1, 4)
# one ulp off, with torch 2.13.0+cpu on the AMD EPYC of the measured table; pinned where its answers hash to SQRT_BITS
SQRT_BITS = "d8f6bb362ef5a600"
SQRT_OFF = 19.9


@pytest.mark.slow
def test_torch_sqrt_adam_is_torchs_default_cpu_adam_bit_for_bit():
    """zerosim's Adam(formula="torch") with torch's sqrt substituted against torch.optim.Adam's default CPU path,
    ten steps on 1,003 elements (a vector body and a scalar tail)."""
    torch = pytest.importorskip("torch", reason=NO_TORCH)
    from zerosim.frameworks.torch import TorchSqrtAdam
    from zerosim.optim import Adam

    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(1003).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch.optim.Adam([p], lr=1e-2)
    mine, plain = [(w0.copy(), {"m": np.zeros(1003, np.float32), "v": np.zeros(1003, np.float32)}) for _ in range(2)]
    torch_sqrt_differs = False
    for t in range(1, 11):
        g = (rng.standard_normal(1003) * 10.0 ** rng.integers(-6, 2, 1003)).astype(np.float32)
        p.grad = torch.from_numpy(g.copy())
        opt.step()
        TorchSqrtAdam(lr=1e-2).step(mine[0], g, mine[1], t)
        Adam(lr=1e-2, formula="torch").step(plain[0], g, plain[1], t)
        assert np.array_equal(mine[0].view(np.uint32), p.detach().numpy().view(np.uint32)), t
        torch_sqrt_differs |= not _torch_sqrt_is_correctly_rounded(mine[1]["v"])
    if not torch_sqrt_differs:  # a CPU whose torch sqrt is correctly rounded: no substitution needed
        assert np.array_equal(plain[0].view(np.uint32), p.detach().numpy().view(np.uint32))
    # the docs' and _sqrt.py's number (SQRT_OFF): torch's CPU sqrt against NumPy's, correctly rounded
    x = np.random.default_rng(0).uniform(1, 4, 1_000_000).astype(np.float32)
    theirs = torch.from_numpy(x).sqrt().numpy()
    off = theirs.view(np.int32).astype(np.int64) - np.sqrt(x).view(np.int32)
    assert set(np.unique(off).tolist()) <= {-1, 0, 1}
    if torch_bits({"sqrt": theirs}) == SQRT_BITS:
        assert round(100 * np.mean(off != 0), 1) == SQRT_OFF


def test_the_docs_quote_the_measured_sqrt_fraction():
    from pathlib import Path

    root = Path(__file__).parent.parent
    docs = (root / "docs" / "how-to" / "compare-with-torch.md").read_text()
    assert f"one ulp off (either way) for {SQRT_OFF} % of uniformly random fp32 inputs in [1, 4)" in docs
    kit = (root / "zerosim" / "frameworks" / "torch" / "_sqrt.py").read_text()
    assert f"for {SQRT_OFF} % of uniformly random fp32 inputs in [1, 4)" in kit


# -- the command line ---------------------------------------------------------------------------------------------
@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv", [["--optimizer", "zero1"], ["--fsdp", "bf16"]])
def test_the_new_comparisons_without_torch_are_one_clear_line(monkeypatch, capsys, argv):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError, as without the extra
    from zerosim.cli.main import main

    assert main(["parity", *argv, "--ranks", "2", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zerosim parity: error: the parity kit needs torch") and "\n" not in err


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("argv, message", [
    (["--fsdp", "bf16", "--optimizer", "zero1"], "--fsdp and --optimizer zero1 are two different runs"),
    (["--fsdp", "fp32", "--reduction", "ring"], "--reduction ring is for DDP's all-reduce"),
    (["--grads", "zerosim"], "--grads and --sqrt need --optimizer zero1 or --fsdp"),
])
def test_contradictory_parity_options_are_refused(capsys, argv, message):
    from zerosim.cli.main import main

    assert main(["parity", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.mark.slow
def test_the_command_prints_each_steps_fraction_ulps_and_cause(torch_runs, monkeypatch, capsys):
    from zerosim.cli.main import main
    from zerosim.frameworks.torch import _kits as kits

    runs = _runs(torch_runs, 2)  # the fixture's launch, no other: the kits' records for N = 2
    monkeypatch.setattr(kits, "run_torch_kits", lambda *a, **k: runs)
    assert main(["parity", "--optimizer", "zero1", "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    assert "every step bit for bit equal to torch's" in out and f"{STEPS:>4}   100.00%         0  -" in out
    assert main(["parity", "--fsdp", "fp32", "--ranks", "2", "--grads", "zerosim"]) == 0  # a measurement: exit 0
    out = capsys.readouterr().out
    assert "FSDP2 fully_shard fp32" in out and "local: matmul order" in out and "some steps differ" in out


# -- the measured fractions the docs quote ------------------------------------------------------------------------
# Without the substitutions: per comparison and N, over 20 steps (seed 0, MLP 16-32-8, batch 4 a rank, Adam lr 0.01):
# (zerosim's own forward/backward: % of parameters bitwise equal after step 1, after step 20, largest ulp distance;
#  zerosim's correctly rounded sqrt instead of torch's, torch's local gradients: the same three). Measured with torch
# 2.13.0+cpu on an AMD EPYC (family 25 model 1, Zen 3: AVX2, no AVX-512; MKL), one thread a rank. Every number
# follows from torch's bits and zerosim's (which hold anywhere), so the table is pinned where torch's records are
# those it was made from: TORCH_BITS, torch_bits() of one launch's records per N on that machine. Another AMD
# EPYC on which torch also reported AVX2 rounded torch's fp32 local gradients differently (zero1 at N = 2: 91.6 %
# equal after step 1 there, 90.0 % here); the sqrt columns and every bf16 number were the same on both.
TORCH_BITS = {2: "49bbae2966f64713", 3: "c67226741d60065a", 4: "3b031c282a81b6d9"}
MEASURED = {
    ("zero1", 2): (90.0, 45.3, 35840, 96.7, 86.3, 1024),
    ("zero1", 3): (89.7, 42.6, 5632, 97.3, 87.6, 1536),
    ("zero1", 4): (90.8, 41.5, 1536, 96.0, 86.6, 1024),
    ("fp32", 2): (90.0, 45.3, 35840, 96.7, 86.3, 1024),
    ("fp32", 3): (90.2, 42.6, 4864, 97.2, 87.5, 256),
    ("fp32", 4): (90.8, 43.9, 4144, 96.7, 86.8, 1024),
    ("bf16-fp32", 2): (100.0, 100.0, 0, 96.4, 84.9, 640),
    ("bf16-fp32", 3): (100.0, 100.0, 0, 95.2, 84.9, 6144),
    ("bf16-fp32", 4): (100.0, 100.0, 0, 96.9, 89.0, 3392),
    ("bf16", 2): (100.0, 100.0, 0, 95.2, 86.6, 448),
    ("bf16", 3): (100.0, 100.0, 0, 95.7, 86.1, 800),
    ("bf16", 4): (100.0, 100.0, 0, 94.4, 84.0, 4096),
}
TITLES = {"zero1": "DDP + ZeroRedundancyOptimizer", "fp32": "FSDP2 fp32", "bf16-fp32": "FSDP2 bf16, reduce fp32",
          "bf16": "FSDP2 bf16, reduce bf16"}


def readme_row(kit, n, row) -> str:
    """One row of the table of measured fractions (docs/how-to/compare-with-torch.md)."""
    own1, own20, own_ulps, sq1, sq20, sq_ulps = row
    return (f"| {TITLES[kit]} | {n} | {own1:.1f} % → {own20:.1f} % | {own_ulps:,} | {sq1:.1f} % → {sq20:.1f} % | "
            f"{sq_ulps:,} |")


def test_the_readme_quotes_the_measured_table():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "docs" / "how-to" / "compare-with-torch.md").read_text()
    for (kit, n), row in MEASURED.items():
        assert readme_row(kit, n, row) in readme


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_measured_fractions_without_substitution(torch_runs, n):
    """The docs' numbers, where torch's records are the bits they were measured from (TORCH_BITS); the causes
    hold anywhere:
    zerosim's own forward/backward differs first in the local gradients (matmul order) in fp32 and nowhere in
    bf16 here; zerosim's sqrt differs first at the update."""
    from zerosim.frameworks.torch import compare_fsdp, compare_zero1, ranks_of

    runs = _runs(torch_runs, n)
    here = torch_bits(runs) == TORCH_BITS[n]
    for kit in ("zero1", "fp32", "bf16-fp32", "bf16"):
        if kit == "zero1":
            own = compare_zero1(ranks_of(runs, "zero1"), WIDTHS, grads="zerosim")
            sqrt = compare_zero1(ranks_of(runs, "zero1"), WIDTHS, sqrt="zerosim")
        else:
            own = compare_fsdp(ranks_of(runs, "fsdp"), WIDTHS, kit, grads="zerosim")
            sqrt = compare_fsdp(ranks_of(runs, "fsdp"), WIDTHS, kit, sqrt="zerosim")
        assert own[0].cause in ("", "local") and sqrt[0].cause in ("", "update")
        assert all(s.cause in ("", "carried", own[0].cause) for s in own)
        got = (round(100 * own[0].equal, 1), round(100 * own[-1].equal, 1), max(s.max_ulps for s in own),
               round(100 * sqrt[0].equal, 1), round(100 * sqrt[-1].equal, 1), max(s.max_ulps for s in sqrt))
        if here:
            assert got == MEASURED[(kit, n)], kit
