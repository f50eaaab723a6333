"""`zerosim explore --html`: one file that needs nothing outside itself, carrying the shipped grid (every setting's
numbers as `zerosim memory --json` and `zerosim timeline --json` print them, zerosim/explore/_grid.py), the controls
with the flags each value adds to the two commands, seed 004's step and the glossary.

The grid is checked against the CLI run now, at sampled settings (a stale grid — the package's numbers moved since
tools/compile_explorer.py last ran — fails here, naming the setting); the browser half (the page draws those numbers,
and a prefetch toggle moves communication from exposed to hidden) is tests/test_explore_browser.py.
"""

import json
import random
import re
from pathlib import Path

import pytest

from zerosim.cli.explore_cmd import cli_json
from zerosim.cli.main import main
from zerosim.explore import AXES, argv, compile_grid, page_data, points, shipped_grid, step_frames, write_page
from zerosim.explore._grid import canonical, index
from zerosim.explore._page import START
from zerosim.viz import glossary


def embedded(html: str, name: str):
    """The JSON a <script id=name> element of the page carries."""
    m = re.search(rf'<script type="application/json" id="{name}">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site") / "explorer"
    assert main(["explore", "--html", str(folder)]) == 0
    return (folder / "index.html").read_text("utf-8")


def test_the_page_carries_the_whole_grid_and_the_commands_flags(page):
    data = embedded(page, "data")
    grid = shipped_grid()
    assert data["grid"] == grid
    assert [a["name"] for a in data["axes"]] == [a.name for a in AXES] == grid["axes"]
    assert {a["name"]: a["start"] for a in data["axes"]} == START
    # every canonical setting has its entry, and no other
    assert sorted(map(int, grid["points"])) == sorted(index(p) for p in points())
    # the page's command line is the flags' concatenation, as `argv` builds it for the compile
    p = dict(START, stage=1, bucket="5e7", overlap="off", gpus=64)
    words = list(data["base"]["timeline"])
    for a in data["axes"]:
        words += a["flags"][str(p[a["name"]])]["timeline"]
    assert words + ["--json"] == argv(p, "timeline")
    assert "--gpus-per-node" in words and "--no-overlap" in words and ["--reduce-bucket-size", "5e7"] == words[
        words.index("--reduce-bucket-size"):words.index("--reduce-bucket-size") + 2]


def test_the_classroom_page_quotes_the_grid_as_it_is():
    grid = shipped_grid()
    page = " ".join((Path(__file__).resolve().parent.parent / "docs" / "classroom.md").read_text().split())
    counts = re.search(r"Each of its ([\d,]+) settings", page)
    records = re.search(r"\(([\d,]+) memory and ([\d,]+) time records, each kept once, and the CLI's (\d+) "
                        r"refusals", page)
    number = lambda s: int(s.replace(",", ""))  # noqa: E731
    assert counts and number(counts[1]) == len(grid["points"])
    assert records and tuple(map(number, records.groups())) == (len(grid["memory"]), len(grid["time"]),
                                                                len(grid["errors"]))


def test_the_verdict_counts_what_no_ledger_sees_as_the_cli_does():
    """The issue's 16.85 GB against 19.04 GB: Llama-2-7B on 8 H100s at ZeRO-3, L = 4096, block checkpointing. The page's
    total is the measured peak plus the CLI's estimates (zerosim/analysis/costs/_overheads.py), by hand here."""
    grid = shipped_grid()
    m, t = grid["points"][str(index(START))]
    mem = grid["memory"][m]
    peak = mem["peak"]
    assert round(peak / 1e9, 2) == 16.85
    # CUDA context 287,047,680 B (pytorch#86509's lazy-loading measurement), NCCL buffers 1.06 GB on an 8xH100 node
    # (NVIDIA/nccl#1685), the allocator's reserve 5 % of the measured peak
    assert mem["fit"]["total"] == peak + 287_047_680 + 1_060_000_000 + peak * 5 // 100
    assert round(mem["fit"]["total"] / 1e9, 2) == 19.04 and mem["fit"]["fits"]


@pytest.mark.slow
def test_the_shipped_grid_is_the_clis_now_at_sampled_settings():
    """The grid is the CLI's numbers, not a copy that drifts: at the start, at the issue's prefetch pair, and at 8
    random settings, `zerosim memory` / `timeline --json` run now give the shipped records (python
    tools/compile_explorer.py writes them again when this fails)."""
    grid = shipped_grid()
    rng = random.Random(62)
    every = list(points())
    sample = [START, dict(START, prefetch="on"), dict(START, offload="cpu", stage=2)] + rng.sample(every, 8)
    now = compile_grid(cli_json, [canonical(p) for p in sample])
    for p in sample:
        i = index(canonical(p))
        m, t = grid["points"][str(i)]
        shipped = [grid["errors"][-1 - m] if m < 0 else grid["memory"][m],
                   grid["errors"][-1 - t] if t < 0 else grid["time"][t]]
        assert list(now[i]) == shipped, p


def test_the_page_has_the_numbers_the_issue_asks_for():
    """Prefetch moves stage 3's gathers from exposed to hidden; offload and TP are columns of the grid."""
    grid = shipped_grid()

    def time(**change):
        return grid["time"][grid["points"][str(index(canonical(dict(START, **change))))][1]]

    off, on = time(), time(prefetch="on")
    assert off["overlapped_s"] < on["overlapped_s"] and on["exposed_comm_s"] < off["exposed_comm_s"]
    assert "offload" in time(offload="cpu", stage=2) and "tensor parallel" in time(tp=8)["by_purpose"]
    below = grid["points"][str(index(canonical(dict(START, stage=2, prefetch="on"))))]
    assert below == grid["points"][str(index(dict(START, stage=2)))]  # below stage 3 prefetch is held off


def test_the_step_through_and_the_glossary_are_there_and_the_page_stands_alone(page):
    frames = embedded(page, "steps")
    assert frames == step_frames() and len(frames) >= 6
    assert any("[0, 0, 0, -4.5]" in f for f in frames) and any("2.099609375" in f for f in frames)
    assert glossary.html() in page and 'id="gloss-grad32"' in page
    # no network: nothing loaded from anywhere (the SVG namespace is a name, never fetched)
    assert not re.search(r"\b(src|href)=\"?http", page) and "@import" not in page and "fetch(" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) == {"http://www.w3.org/2000/svg"}


def test_every_kind_the_page_can_draw_has_a_label_a_colour_and_a_glossary_entry():
    kinds = page_data()["kinds"]
    assert {"params", "grads", "grad32", "master", "activations", "optim:m", "optim:v"} <= set(kinds)
    assert kinds["grad32"][0] == "fp32 gradient (for the step)"  # not a "shard": stage 0's is the whole gradient
    for label, colour, anchor in kinds.values():
        assert label and re.fullmatch(r"#[0-9a-f]{6}", colour) and f'id="{anchor}"' in glossary.html()


@pytest.mark.bad_input("explorers", unchanged=True)
def test_a_folder_that_is_a_file_or_holds_another_front_page_is_refused_before_anything_runs(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    with pytest.raises(ValueError, match="notes.txt: a file, not a folder"):
        write_page(str(f))
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html><title>My course</title></html>")
    with pytest.raises(ValueError, match="not a zerosim explorer page"):
        write_page(str(site))
    assert f.read_text() == "mine" and (site / "index.html").read_text().startswith("<html><title>My course")
    assert sorted(p.name for p in site.iterdir()) == ["index.html"]
