"""The explorer's web page in a real headless browser (Chromium, driven by Playwright), at a desktop's 1280 x 800 and
a phone's 390 x 844: it loads with no console message, no horizontal scroll and nothing cut off at the window's edge;
the prefetch toggle moves stage 3's communication from exposed to hidden, drawn and said; at random settings, set
through its controls as a learner would, every number it shows equals `zerosim memory --json` and `zerosim timeline
--json` run now for the same flags (the two commands the page itself prints), and a setting the CLI refuses shows the
CLI's own reason and no number. Screenshots at both sizes are written for a person to look at (docs/explore.png and
docs/explore-phone.png are two of them: ZEROSIM_SCREENSHOTS=docs).

Needs the `web` extra (`pip install -e ".[web]"`: Playwright's Python client) and a Chromium on the machine:
Debian/Ubuntu `apt-get install chromium` (or set ZEROSIM_CHROMIUM to a Chromium/Chrome binary). Playwright's own
browser download is never used. Without either, these tests skip and say which one is missing.
"""

import json
import os
import random
import shutil
from decimal import ROUND_HALF_UP, Decimal

import pytest

from zerosim.cli.explore_cmd import cli_json
from zerosim.explore import AXES, argv, points, write_page
from zerosim.explore._grid import canonical, memory_numbers, time_numbers
from zerosim.explore._page import START

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the `web` extra: "
                               "pip install -e '.[web]' (Playwright's client; it drives the system's Chromium)")
CHROMIUM = os.environ.get("ZEROSIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no Chromium on this machine: apt-get install chromium (or set ZEROSIM_CHROMIUM to a Chrome binary)",
                allow_module_level=True)
# headless, and nothing that talks to the network or keeps state between runs
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.slow  # a browser of its own, and the CLI at a dozen settings
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
SHOTS = os.environ.get("ZEROSIM_SCREENSHOTS")  # a folder to keep the screenshots in (default: the test's tmp_path)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return write_page(str(tmp_path_factory.mktemp("site")))


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture(params=list(SIZES))
def page(request, browser, site):
    w, h = SIZES[request.param]
    tab = browser.new_page(viewport={"width": w, "height": h})
    tab.size = request.param
    tab.messages = []
    tab.on("console", lambda m: tab.messages.append(f"{m.type}: {m.text}"))
    tab.on("pageerror", lambda e: tab.messages.append(f"error: {e}"))
    tab.on("request", lambda r: r.url.startswith("file:") or tab.messages.append(f"network: {r.url}"))
    tab.goto("file://" + site)
    yield tab
    tab.close()


# -- what the page shows, read back from the drawn elements ---------------------------------------------------------
SHOWN = """() => {
  const num = id => {
    const e = document.getElementById(id);
    return {text: e.textContent, bytes: e.dataset.bytes ?? null, seconds: e.dataset.seconds ?? null};
  };
  const kinds = {};
  for (const row of document.querySelectorAll("#kinds tr[data-kind]")) {
    kinds[row.dataset.kind] = Object.fromEntries([...row.querySelectorAll("td.num")].map(
      c => [c.classList[1], c.dataset.bytes]));
  }
  const purposes = Object.fromEntries([...document.querySelectorAll("#purposes tr[data-purpose]")].map(
    r => [r.dataset.purpose, r.querySelector("td.num").dataset.seconds]));
  const timeBars = [...document.querySelectorAll("#time rect")].map(b => [b.dataset.part, Number(b.dataset.seconds)]);
  return {settings: document.body.dataset.settings, drawn: document.body.dataset.drawn,
          error: document.getElementById("error").textContent,
          commands: document.getElementById("commands").textContent,
          numbers: Object.fromEntries(["peak", "extra", "total", "capacity", "verdict", "step", "compute", "comm",
                                       "hidden", "exposed", "params", "sticky-total", "sticky-verdict", "sticky-step"]
                                      .map(id => [id, num(id)])),
          kinds: kinds, purposes: purposes, timeBars: timeBars,
          memoryBars: document.querySelectorAll("#memory rect.bar").length,
          scroll: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
          // what reaches past the window's right edge: cut off where a parent hides its overflow (no scroll bar
          // shows it), or scrolled sideways where none does
          clipped: [...document.querySelectorAll("body *")].filter(e => {
            const r = e.getBoundingClientRect();
            return r.width > 0 && (r.left < -0.5 || r.right > document.documentElement.clientWidth + 0.5);
          }).map(e => e.id || e.tagName)};
}"""


def fixed(x: float, digits: int) -> str:
    """JavaScript's x.toFixed(digits): the exact binary value, a tie rounded up (not Python's half to even)."""
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def gb(b: int) -> str:
    return fixed(b / 1e9, 2) + " GB"


def ms(s: float) -> str:
    return fixed(s * 1e3, 1) + " ms"


def cli(point: dict):
    """The CLI's numbers for `point` now, as the page draws them: (memory, time), or its one-line refusal."""
    try:
        mem = cli_json(argv(point, "memory"))
        stages = [r["stage"] for r in mem["stages"]]
        if point["stage"] not in stages:
            return "offload", None
        m = memory_numbers(mem, point["stage"])
        return m, time_numbers(cli_json(argv(point, "timeline")))
    except ValueError as e:
        return str(e), None


def differences(shown: dict, m: dict, t: dict) -> list:
    """Where the page (`shown`, SHOWN's answer) differs from the CLI's numbers: [] when every one agrees."""
    fit = m["fit"]
    want = {
        "peak": {"text": gb(m["peak"]), "bytes": str(m["peak"]), "seconds": None},
        "extra": {"text": gb(fit["overheads_total"]), "bytes": str(fit["overheads_total"]), "seconds": None},
        "total": {"text": gb(fit["total"]), "bytes": str(fit["total"]), "seconds": None},
        "capacity": {"text": gb(fit["capacity"]), "bytes": str(fit["capacity"]), "seconds": None},
        "verdict": {"text": "fits" if fit["fits"] else "does NOT fit", "bytes": None, "seconds": None},
        "params": {"text": f"{m['params']:,}", "bytes": str(m["params"]), "seconds": None},
        "sticky-total": {"text": gb(fit["total"]), "bytes": None, "seconds": None},
        "sticky-verdict": {"text": "fits" if fit["fits"] else "does NOT fit", "bytes": None, "seconds": None},
        "sticky-step": {"text": ms(t["step_s"]), "bytes": None, "seconds": None},
    }
    numbers = dict(shown["numbers"])
    for key, field in (("step", "step_s"), ("compute", "compute_s"), ("comm", "comm_s"), ("hidden", "overlapped_s"),
                       ("exposed", "exposed_comm_s")):
        want[key] = {"text": ms(t[field]), "bytes": None, "seconds": t[field]}
        # the page's data-seconds is JavaScript's shortest form of the same double ("0" for 0.0): read it back
        numbers[key] = dict(numbers[key], seconds=float(numbers[key]["seconds"]))
    out = [f"{k}: shows {numbers[k]}, the CLI says {v}" for k, v in want.items() if numbers[k] != v]
    kinds = {k: {"at-peak": str(m["at_peak"].get(k, 0)), "resting": str(m["resting"].get(k, 0)),
                 **({"host": str(m["host"]["resting"].get(k, 0))} if "host" in m else {})}
             for k in set(m["at_peak"]) | set(m["resting"]) | set(m.get("host", {}).get("resting", {}))}
    shown_kinds = {k: v for k, v in shown["kinds"].items() if k != "estimates"}
    if shown_kinds != kinds:
        out.append(f"kinds table {shown_kinds} != the CLI's {kinds}")
    if shown["kinds"].get("estimates", {}).get("at-peak") != str(fit["overheads_total"]):
        out.append(f"the estimates' row {shown['kinds'].get('estimates')} != {fit['overheads_total']}")
    if {k: float(v) for k, v in shown["purposes"].items()} != t["by_purpose"]:
        out.append(f"by purpose {shown['purposes']} != {t['by_purpose']}")
    return out


def blank(shown: dict) -> list:
    """Where a page that draws nothing (a refused setting) still shows a number."""
    out = [f"{k} shows {v}" for k, v in shown["numbers"].items() if v != {"text": "—", "bytes": None, "seconds": None}]
    if shown["kinds"] or shown["purposes"] or shown["timeBars"] or shown["memoryBars"]:
        out.append("a chart or a table still holds the last setting's numbers")
    return out


def show(tab, point: dict) -> dict:
    for a in AXES:  # as a learner would: pick from each drop-down (a greyed one is left as it is)
        if not tab.is_disabled(f"#control-{a.name}"):
            tab.select_option(f"#control-{a.name}", str(point[a.name]))
    for a in AXES:  # an axis that applies only after a later one moved (prefetch, once stage 3 is picked)
        if not tab.is_disabled(f"#control-{a.name}"):
            tab.select_option(f"#control-{a.name}", str(point[a.name]))
    return tab.evaluate(SHOWN)


def check(shown: dict, point: dict) -> None:
    assert json.loads(shown["settings"]) == canonical(point)
    m, t = cli(point)
    commands = [" ".join(["zerosim"] + argv(canonical(point), c)[:-1]) for c in ("memory", "timeline")]
    assert shown["commands"] == "\n".join(commands)  # the page says which commands print these numbers
    if t is None:  # refused: the CLI's own reason, and no number
        assert shown["drawn"] == "no" and (m in shown["error"] or m == "offload"), (point, shown["error"], m)
        assert blank(shown) == [], point
    else:
        assert shown["drawn"] == "yes" and shown["error"] == "", (point, shown["error"])
        assert differences(shown, m, t) == [], point


def test_the_prefetch_toggle_moves_communication_from_exposed_to_hidden_and_equals_the_cli(page):
    """Must show 3: at ZeRO-3 (Llama-2-7B, 8 H100s) the hidden communication the page shows changes when prefetch is
    turned on, and both settings' numbers are the CLI's."""
    off = page.evaluate(SHOWN)
    check(off, START)
    page.select_option("#control-prefetch", "on")
    on = page.evaluate(SHOWN)
    check(on, dict(START, prefetch="on"))
    hidden = [float(s["numbers"]["hidden"]["seconds"]) for s in (off, on)]
    exposed = [float(s["numbers"]["exposed"]["seconds"]) for s in (off, on)]
    assert hidden[1] > hidden[0] and exposed[1] < exposed[0], (hidden, exposed)
    drawn = [sum(sec for part, sec in s["timeBars"] if part == "hidden") for s in (off, on)]
    assert drawn[1] > drawn[0]  # the drawn hidden bar grew with it
    page.select_option("#control-stage", "2")  # below stage 3 the toggle does not apply: greyed, with the reason
    assert page.is_disabled("#control-prefetch") and "no layer is gathered" in page.inner_text("#hint-prefetch")
    assert page.messages == []


def test_every_number_equals_the_clis_at_random_settings(page):
    rng = random.Random(62)  # the same settings at both sizes
    every = list(points())
    for point in [dict(START, offload="cpu", stage=1), dict(START, tp=8, gpus=64)] + rng.sample(every, 6):
        shown = show(page, point)
        check(shown, point)
        assert shown["scroll"][0] <= shown["scroll"][1], f"{page.size}: scrolls sideways at {point}"
        assert shown["clipped"] == [], f"{page.size}: {shown['clipped']} cut off at {point}"
    assert page.messages == []


def test_a_refused_setting_blanks_every_number_then_the_next_setting_draws_again(page):
    point = dict(START, model="gpt2-xl")  # 1,024 positions, and L = 4096
    shown = show(page, point)
    assert "is longer than gpt2-xl's position table" in shown["error"]
    check(shown, point)
    page.select_option("#control-seq_len", "1024")
    check(page.evaluate(SHOWN), dict(point, seq_len=1024))


def test_the_tp_and_offload_columns_set_the_controls(page):
    page.click("#compare th:nth-child(3) button")  # TP 2
    shown = page.evaluate(SHOWN)
    assert json.loads(shown["settings"])["tp"] == 2 and page.input_value("#control-tp") == "2"
    check(shown, dict(START, tp=2))
    page.click("#compare th:nth-child(5) button")  # offload to CPU
    assert json.loads(page.evaluate(SHOWN)["settings"])["offload"] == "cpu"
    assert page.messages == []


def test_loads_without_a_message_or_sideways_scroll_and_the_screenshots_are_taken(page, tmp_path):
    shown = page.evaluate(SHOWN)
    assert page.messages == [] and shown["scroll"][0] <= shown["scroll"][1] and shown["clipped"] == []
    # the pictures in docs/classroom.md: ZeRO-3 with prefetch on, the memory and the step on a desktop, the step and
    # its hidden communication on a phone
    page.select_option("#control-prefetch", "on")
    top = "memory" if page.size == "desktop" else "time"
    page.evaluate(f"window.scrollTo(0, document.getElementById('{top}').getBoundingClientRect().top + scrollY - 60)")
    folder = SHOTS or str(tmp_path)
    name = "explore.png" if page.size == "desktop" else "explore-phone.png"
    shot = page.screenshot(path=os.path.join(folder, name))
    assert len(shot) > 10_000  # a real picture; docs/explore.png and docs/explore-phone.png were looked at by eye


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
