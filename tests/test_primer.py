"""The primer (docs/tutorials/primer.md): every number it quotes is computed here from zerosim (a replay, the ledgers'
formulas, the ring, the formats), every figure it shows is one `zerosim figures` draws from a run, and the way in —
the README's first lines, the learning path's table, session 1 — leads to it.
"""

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
PRIMER = ROOT / "docs" / "tutorials" / "primer.md"
TEXT = PRIMER.read_text()
FLAT = " ".join(TEXT.split())  # the prose with its line breaks as spaces


def _local_and_averaged():
    from zerosim.replay import replay

    step = replay()["steps"][0]
    local = [[float(x) for x in g["local_grads"]] for g in step["gpus"]]
    averaged = [float(x) for g in step["gpus"] for x in g["averaged_shard"]]
    return local, averaged


def _fmt(values) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def _ring_2048():
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter

    xs = [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16) for _ in range(3)]
    return [float(c[0]) for c in reduce_scatter(Cluster(4), xs)]


def _stage_gb(stage: int) -> float:
    from zerosim.analysis.costs import model_state_memory

    return model_state_memory(7_500_000_000, 64, stage).total / 1e9


def _ring_share(n: int) -> float:
    """Bytes one rank sends in a ring reduce-scatter and all-gather, over the buffer's bytes (the trace's count)."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather, reduce_scatter

    c = Cluster(n)
    all_gather(c, reduce_scatter(c, [np.zeros(12 * n, np.float32) for _ in range(n)]))
    return c.trace.sent_totals(n)[0] / (12 * n * 4)


def test_seed_004s_gradients_and_their_average_are_the_replays():
    local, averaged = _local_and_averaged()
    for g in local + [averaged]:
        assert f"`{_fmt(g)}`" in FLAT, _fmt(g)
    assert averaged == [-5.5, -2.75, -2.75, -5.0]


def test_the_bytes_a_parameter_costs_and_the_memory_by_stage():
    from zerosim.analysis.costs import GPUS, model_state_memory

    per = model_state_memory(1_000_000, 1, 0)  # one GPU: 16 bytes a parameter with Adam in mixed precision
    assert per.total == 16 * 1_000_000 and "**16 bytes a parameter**" in FLAT
    # the table's rows: 2 + 2 + 4 + 8
    assert re.findall(r"\| (\d+) \|\n", TEXT) == ["2", "2", "4", "8"]
    gbs = [_stage_gb(s) for s in range(4)]
    assert [round(gbs[0]), round(gbs[1], 1), round(gbs[2], 1), round(gbs[3], 1)] == [120, 31.4, 16.6, 1.9]
    assert "**120 GB on every GPU**" in FLAT and "31.4 GB at stage 1, 16.6 GB at stage 2 and 1.9 GB at stage 3" in FLAT
    assert GPUS["h100-80gb"].datasheet.startswith("80 GB") and "the 80 GB an H100 has" in FLAT
    readme = " ".join((ROOT / "README.md").read_text().split())  # its first lines say the same, and 120 = 1.5 x 80
    assert "7.5 billion parameters that is 120 GB on every GPU, half again the 80 GB an H100 has" in readme


def test_the_ring_and_what_it_sends():
    assert _ring_2048() == [2052.0, 2052.0, 2048.0, 2048.0]
    assert "The true sum is 2051" in FLAT and "end at 2052" in FLAT and "end at 2048" in FLAT
    for n in (2, 4, 8):
        assert _ring_share(n) == pytest.approx(2 * (n - 1) / n, rel=1e-12)
    assert "Each GPU sends 2(N − 1)/N of the buffer" in FLAT


def test_the_formats_steps_and_the_lost_update():
    from zerosim.precision import cast, ulp

    steps = {f: float(ulp(1.0, f)) for f in ("fp16", "bf16", "fp32")}
    assert steps == {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7, "fp32": 2.0 ** -23}
    assert "about 0.001 (2⁻¹⁰)" in FLAT and "about 0.008 (2⁻⁷)" in FLAT and "about 0.0000001 (2⁻²³)" in FLAT
    assert round(steps["fp16"], 3) == 0.001 and round(steps["bf16"], 3) == 0.008 and round(steps["fp32"], 7) == 1e-7
    assert float(cast(np.float64([1.0 + 1e-5]), "fp16")[0]) == 1.0  # lost
    assert float(cast(np.float64([1.0 + 1e-5]), "fp32")[0]) != 1.0  # kept
    assert "stays exactly 1.0 in fp16" in FLAT
    from zerosim.analysis.timeline import DEVICES

    h100 = DEVICES["h100"]  # the datasheet's dense peaks (analysis/timeline: the roofline's rates)
    assert (round(h100.rate("bf16") / 1e12), round(h100.rate("fp32") / 1e12)) == (989, 67)
    assert "989 TFLOPS in bf16 against 67 in plain fp32" in FLAT


def test_every_figure_is_one_zerosim_draws_and_is_there():
    from zerosim.cli.figures_cmd import FIGURES

    shown = re.findall(r"!\[[^\]]+\]\(\.\./figures/(\w+)\.png\)", TEXT)
    assert len(shown) >= 4
    for name in shown:
        assert name in FIGURES and (ROOT / "figures" / f"{name}.png").is_file(), name


def test_the_way_in_leads_to_the_primer():
    readme = (ROOT / "README.md").read_text().split("## Quick start")[0]
    assert "docs/tutorials/primer.md" in readme and "seed" not in readme.split("docs/tutorials/primer.md")[0]
    assert "primer.md" in (ROOT / "docs" / "tutorials" / "README.md").read_text()
    assert "primer.md" in (ROOT / "docs" / "tutorials" / "01-lost-update-and-the-ring.md").read_text()
    assert "tutorials/primer.md" in (ROOT / "mkdocs.yml").read_text()
