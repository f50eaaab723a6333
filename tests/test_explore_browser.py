"""The explorer's web page in a real headless browser (Chromium, driven by Playwright): it loads with no console
message, every control a learner moves redraws the grid's numbers, the step-through steps, and at the default
window size nothing drawn overlaps.

Needs the `web` extra (`pip install -e ".[web]"`: Playwright's Python client) and a Chromium on the machine:
Debian/Ubuntu `apt-get install chromium` (or set ZEROSIM_CHROMIUM to a Chromium/Chrome binary). Playwright's own
browser download is never used. Without either, these tests skip and say which one is missing.
"""

import json
import os
import re
import shutil

import pytest

from zerosim.explore import AXES, SMALL, write_page
from zerosim.explore._grid import key

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the `web` extra: "
                               "pip install -e '.[web]' (Playwright's client; it drives the system's Chromium)")
CHROMIUM = os.environ.get("ZEROSIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no Chromium on this machine: apt-get install chromium (or set ZEROSIM_CHROMIUM to a Chrome binary)",
                allow_module_level=True)
# headless, and nothing that talks to the network or keeps state between runs
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.slow  # a browser of its own: seconds


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    path = write_page(str(folder), SMALL)
    html = open(path, encoding="utf-8").read()
    data = json.loads(re.search(r'id="grid">(.*?)</script>', html, re.S).group(1).replace("<\\/", "</"))
    return path, data


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(str(tmp_path_factory.mktemp("profile")), headless=True,
                                                       executable_path=CHROMIUM, args=FLAGS)
        yield context
        context.close()


@pytest.fixture
def page(browser, site):
    tab = browser.new_page()  # the default viewport: 1280 x 720
    tab.messages = []
    tab.on("console", lambda m: tab.messages.append(f"{m.type}: {m.text}"))
    tab.on("pageerror", lambda e: tab.messages.append(f"error: {e}"))
    tab.on("request", lambda r: r.url.startswith("file:") or tab.messages.append(f"network: {r.url}"))
    tab.goto("file://" + site[0])
    yield tab
    tab.close()


SHOWN = """() => {
  const kinds = {};
  for (const row of document.querySelectorAll("#kinds tr[data-kind]")) {
    const cells = {};
    for (const c of row.querySelectorAll("td.num")) cells[c.classList[1]] = Number(c.dataset.bytes);
    kinds[row.dataset.kind] = cells;
  }
  const bars = [...document.querySelectorAll("#memory rect.bar")].map(
    b => [b.getAttribute("class"), b.dataset.kind, Number(b.dataset.bytes)]);
  const peak = document.getElementById("peak");
  return {key: document.body.dataset.key, peak: Number(peak.dataset.bytes), peak_text: peak.textContent,
          kinds: kinds, bars: bars, step: Number(document.getElementById("step").dataset.seconds),
          exposed: Number(document.getElementById("exposed").dataset.seconds)};
}"""


def shown(tab) -> dict:
    """The numbers the page shows now, read from the drawn elements' text and data attributes (one round trip)."""
    now = tab.evaluate(SHOWN)
    now["bars"] = {(c, k): b for c, k, b in now["bars"]}
    return now


def expect(point: dict) -> dict:
    """What the page must show for a grid point's numbers."""
    kinds = {k: {"at-peak": point["at_peak"].get(k, 0), "resting": point["resting"].get(k, 0)}
             for k in set(point["at_peak"]) | set(point["resting"])}
    bars = {("bar col0", k): v for k, v in point["at_peak"].items() if v}
    bars |= {("bar col1", k): v for k, v in point["resting"].items() if v}
    return {"peak": point["peak"], "peak_text": f"{point['peak'] / 1e9:.2f} GB", "kinds": kinds, "bars": bars,
            "step": point["step_s"], "exposed": point["exposed_s"]}


def test_loads_with_no_console_message_and_shows_the_starting_point(page, site):
    _, data = site
    now = shown(page)
    assert now["key"] == key(SMALL.fixed)  # the page starts where the grid's fixed settings are
    assert {k: v for k, v in now.items() if k != "key"} == expect(data["points"][now["key"]])
    assert page.messages == []


def test_moving_each_control_shows_the_grids_numbers_at_every_point(page, site):
    """Walk every point of the grid with the keyboard and the drop-downs, as a learner would."""
    _, data = site
    seen = set()

    def visit():
        now = shown(page)
        assert {k: v for k, v in now.items() if k != "key"} == expect(data["points"][now["key"]]), now["key"]
        seen.add(now["key"])

    selects = [a for a in AXES if isinstance(SMALL.__getattribute__(a)[0], str)]
    sliders = [a for a in AXES if a not in selects]
    import itertools

    for choice in itertools.product(*(range(len(getattr(SMALL, a))) for a in selects)):
        for a, i in zip(selects, choice):
            page.select_option(f"#control-{a}", str(i))
        for a in sliders:  # each slider to its first stop
            page.focus(f"#control-{a}")
            page.keyboard.press("Home")
        for stops in itertools.product(*(range(len(getattr(SMALL, a))) for a in sliders)):
            for a, i in zip(sliders, stops):
                page.focus(f"#control-{a}")
                page.keyboard.press("Home")
                for _ in range(i):
                    page.keyboard.press("ArrowRight")
            visit()
    assert seen == set(data["points"]) and page.messages == []


def test_the_step_through_steps_through_seed_004(page):
    frames = page.evaluate("FRAMES")
    assert page.inner_text("#frame-no") == f"part 1 of {len(frames)}" and page.is_disabled("#prev")
    grads = next(i for i, f in enumerate(frames) if "[0, 0, 0, -4.5]" in f)  # step 1: each GPU's own gradient
    for _ in range(grads):
        page.click("#next")
    assert "[-11, -5.5, -5.5, -5.5]" in page.inner_text("#frame")
    page.click("#next")  # the reduce-scatter: each GPU keeps its half of the average
    assert "[-5.5, -2.75]" in page.inner_text("#frame") and "[-2.75, -5]" in page.inner_text("#frame")
    page.click("#prev")
    assert "[0, 0, 0, -4.5]" in page.inner_text("#frame")
    for _ in range(len(frames)):
        page.click("#next", force=True)
    assert page.is_disabled("#next") and page.inner_text("#frame") == frames[-1] and page.messages == []


BOXES = """() => [...document.querySelectorAll(
    "svg text, output, select, input, #kinds td, h1, p.note, .fixed, button, #frame-no, #verdict")].map(e => {
  const r = e.getBoundingClientRect();
  return [e.tagName + ": " + (e.textContent || e.id), r.x, r.y, r.width, r.height];
}).filter(b => b[3] > 0 && b[4] > 0)"""


def test_at_the_default_size_nothing_drawn_overlaps_and_the_screenshot_is_taken(page, tmp_path):
    """Every text and control the page draws, by its box on screen: no two share a pixel (half a pixel of slack:
    neighbouring table cells and wrapped lines touch)."""
    boxes = page.evaluate(BOXES)
    clashes = [(a[0], b[0]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
               if a[1] < b[1] + b[3] - 0.5 and b[1] < a[1] + a[3] - 0.5 and a[2] < b[2] + b[4] - 0.5
               and b[2] < a[2] + a[4] - 0.5]
    assert len(boxes) > 40 and clashes == []
    assert page.viewport_size == {"width": 1280, "height": 720}
    shot = page.screenshot(path=str(tmp_path / "explorer.png"))
    assert len(shot) > 10_000  # a real picture; docs/explore.png is the same view, looked at by eye
