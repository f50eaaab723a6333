"""`zerosim explore --html`: one file that needs nothing outside itself, carrying the shipped compiled steps and what
page.js needs besides (the GPUs' rates and capacities, the links, the controls), seed 004's step and the glossary.

The browser half (the page computes every setting and equals the CLI) is tests/test_explore_browser.py; the Python
twin of its arithmetic is tests/test_explore_closed.py.
"""

import json
import re

import pytest

from zerosim.analysis.costs import GPUS, LINKS
from zerosim.cli.main import main
from zerosim.explore import Settings, page_data, shipped_steps, step_frames, write_page
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


def test_the_page_carries_the_shipped_steps_and_the_hardware_as_the_timeline_has_it(page):
    data = embedded(page, "data")
    assert data["steps"] == shipped_steps()["steps"] and data["tile"] == 64
    h100 = data["gpus"]["h100-80gb"]
    rates = {"fp16": 989.4 * 1e12, "bf16": 989.4 * 1e12, "fp32": 66.9 * 1e12}
    assert (h100["capacity"], h100["hbm"], h100["rate"]) == (GPUS["h100-80gb"].capacity, 3.35e12, rates)
    assert data["links"]["intra"]["bandwidth"] == LINKS["nvlink4"].bandwidth
    assert data["links"]["inter"]["alpha"] == LINKS["ib_ndr"].alpha
    assert [c["name"] for c in data["controls"]] == ["model", "ranks", "stage", "precision", "optimizer", "seq_len",
                                                    "micro_batch", "checkpoint", "gpu"]
    # every setting but offload: the page's compiled steps run on the device (the notebook explorer has the host
    # column; docs/classroom.md says the page does not)
    assert {c["name"]: c["start"] for c in data["controls"]} == {k: v for k, v in vars(Settings()).items()
                                                                 if k != "offload"}
    assert data["models"]["gpt3-175b"]["max_positions"] == 2048


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
    assert {"params", "grads", "grad32", "master", "activations", "scratch", "optim:m", "optim:g_prev"} <= set(kinds)
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
