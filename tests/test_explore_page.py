"""`zerosim explore --html`: the page's numbers are the meta backend's, and the page needs nothing outside itself.

The browser half (the page really loads and redraws) is tests/test_explore_browser.py.
"""

import json
import re

import pytest

from zerosim.cli.main import main
from zerosim.explore import AXES, SMALL, Grid, Settings, grid_data, step_frames, write_page
from zerosim.explore._grid import key


def embedded(html: str, name: str):
    """The JSON a <script id=name> element of the page carries."""
    m = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site") / "explorer"
    assert main(["explore", "--html", str(folder), "--grid", "small"]) == 0
    return (folder / "index.html").read_text("utf-8")


@pytest.mark.slow  # the page (64 meta steps, ~3 s), then each step measured again here (~3 s)
def test_every_grid_point_is_a_fresh_meta_backend_run(page):
    from zerosim.analysis.costs import measure_stage
    from zerosim.explore import model_for

    data = embedded(page, "grid")
    assert len(data["points"]) == SMALL.size == 64
    for s in SMALL.settings():
        p = data["points"][key(s)]
        # the ledger's own answer, from measure_stage called here (not through explore's cache)
        row, _, _ = measure_stage(model_for(s), s.ranks, s.stage, s.optimizer, s.precision,
                                  micro_batch=(s.micro_batch, s.seq_len))
        assert (p["peak"], p["at_peak"], p["resting"]) == (row["peak"], row["at_peak"], row["resting"]), key(s)


@pytest.mark.slow  # the page: 64 meta steps (~3 s, once for the module)
def test_a_grid_point_equals_zerosim_memory_and_timeline(page, capsys):
    data = embedded(page, "grid")
    s = SMALL.fixed.with_(model="gpt2-medium", ranks=16, stage=2, seq_len=1024, checkpoint="none")
    p = data["points"][key(s)]
    flags = ["--model", s.model, "--ranks", "16", "--precision", s.precision, "--seq-len", "1024", "--batch", "1",
             "--checkpoint", "none", "--kernels", "fused", "--json"]
    assert main(["memory", *flags]) == 0
    row = json.loads(capsys.readouterr().out)["stages"][2]
    assert main(["timeline", *flags, "--stage", "2", "--gpu", s.gpu, "--gpus-per-node", "8", "--efficiency",
                 "peak"]) == 0
    tl = json.loads(capsys.readouterr().out)
    assert p["peak"] == row["peak"] == tl["peak"] and p["at_peak"] == row["at_peak"]
    assert (p["step_s"], p["compute_s"], p["exposed_s"]) == (tl["step_s"], tl["compute_s"], tl["exposed_comm_s"])


@pytest.mark.slow  # the page: 64 meta steps (~3 s, once for the module)
def test_the_step_through_is_seed_004s_replay_and_the_page_stands_alone(page):
    frames = embedded(page, "steps")
    assert frames == step_frames() and len(frames) >= 6
    assert any("[0, 0, 0, -4.5]" in f for f in frames) and any("[-5.5, -2.75]" in f for f in frames)
    assert any("2.099609375" in f for f in frames)  # seed 004's fp16 copy of 2.1, as DESIGN.md fixes it
    # no network: nothing loaded from anywhere (the SVG namespace is a name, never fetched)
    assert not re.search(r"\b(src|href)=", page) and "@import" not in page and "fetch(" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_the_grid_lists_its_axes_and_fixed_settings():
    g = Grid(model=("gpt2-small",), ranks=(4,), stage=(1,), seq_len=(256, 2048), checkpoint=("none",),
             fixed=Settings(model="gpt2-small", gpu="rtx3090"))
    d = grid_data(g, show_progress=False)
    assert d["axes"] == {a: list(getattr(g, a)) for a in AXES}
    # the page's grid is computed without offload (the notebook explorer's host column is not on the page yet)
    assert d["fixed"] == {"precision": "bf16-mixed", "optimizer": "adam", "micro_batch": 1, "gpu": "rtx3090",
                          "offload": "none"}
    assert list(d["points"]) == ["gpt2-small|4|1|256|none", "gpt2-small|4|1|2048|none"]
    # a point the model refuses holds the reason, which the page prints instead of a figure
    assert d["points"]["gpt2-small|4|1|2048|none"] == {"error": "seq_len 2048 is longer than gpt2-small's 1024 "
                                                                "positions"}


@pytest.mark.bad_input("explorers", unchanged=True)
def test_a_folder_that_is_a_file_or_holds_another_front_page_is_refused_before_anything_runs(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(ValueError, match="notes.txt: a file, not a folder"):
        write_page(str(f), SMALL)
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html><title>My course</title></html>")
    with pytest.raises(ValueError, match="not a zerosim explorer page"):
        write_page(str(site), SMALL)
    assert f.read_text() == "mine" and (site / "index.html").read_text().startswith("<html><title>My course")
    assert sorted(p.name for p in site.iterdir()) == ["index.html"]
