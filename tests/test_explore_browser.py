"""The explorer's web page in a real headless browser (Chromium, driven by Playwright), at a desktop's 1280 x 800 and
a phone's 390 x 844: it loads with no console message, no horizontal scroll and nothing cut off at the window's
edge; at 50 random settings, set through its controls as a learner would, every number it shows equals `zerosim
memory --json` and `zerosim timeline --json` for the same flags; after 20 random control moves (some to a setting
the model refuses) it never shows a number of an earlier setting; the step-through steps. Screenshots at both sizes
are written for a person to look at (docs/explore.png and docs/explore-phone.png are two of them).

Needs the `web` extra (`pip install -e ".[web]"`: Playwright's Python client) and a Chromium on the machine:
Debian/Ubuntu `apt-get install chromium` (or set ZEROSIM_CHROMIUM to a Chromium/Chrome binary). Playwright's own
browser download is never used. Without either, these tests skip and say which one is missing.
"""

import contextlib
import io
import json
import os
import random
import shutil
from decimal import ROUND_HALF_UP, Decimal

import pytest

from zerosim.analysis.costs import GPUS, PRESETS
from zerosim.cli.main import main
from zerosim.explore import Settings, explore, write_page
from zerosim.explore._page import MICRO_BATCHES, RANKS, SEQ_LENS
from zerosim.explore._settings import OPTIMIZERS, PRECISIONS, config_for
from zerosim.models.gpt import STRATEGIES

sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need the `web` extra: "
                               "pip install -e '.[web]' (Playwright's client; it drives the system's Chromium)")
CHROMIUM = os.environ.get("ZEROSIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no Chromium on this machine: apt-get install chromium (or set ZEROSIM_CHROMIUM to a Chrome binary)",
                allow_module_level=True)
# headless, and nothing that talks to the network or keeps state between runs
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
pytestmark = pytest.mark.slow  # a browser of its own, and the CLI at 50 settings: a minute or two
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
MODELS = sorted(k for k, p in PRESETS.items() if p.config is not None)
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
    kinds[row.dataset.kind] = [...row.querySelectorAll("td.num")].map(
      c => [c.classList[1], c.dataset.bytes, c.textContent]);
  }
  const bars = [...document.querySelectorAll("#memory rect.bar")].map(b => [b.getAttribute("class"), b.dataset.kind,
                                                                           b.dataset.bytes]);
  const svgText = id => [...document.querySelectorAll(`#${id} text`)].map(t => t.textContent);
  const timeBars = [...document.querySelectorAll("#time rect")].map(b => [b.dataset.part, Number(b.dataset.seconds)]);
  return {settings: document.body.dataset.settings, drawn: document.body.dataset.drawn,
          error: document.getElementById("error").textContent,
          numbers: Object.fromEntries(["peak", "capacity", "verdict", "step", "compute", "hidden", "exposed",
                                       "params", "link", "sticky-peak", "sticky-verdict", "sticky-step"]
                                      .map(id => [id, num(id)])),
          kinds: kinds, bars: bars, memoryText: svgText("memory"), timeText: svgText("time"), timeBars: timeBars,
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


def expected(n: dict) -> dict:
    """What the page must show for numbers `n` ({"peak", "at_peak", "resting", "capacity", "gpu", "params",
    "step_s", "compute_s", "comm_s", "exposed_s", "device", "link"}), in SHOWN's shape."""
    hidden = n["comm_s"] - n["exposed_s"]
    kinds = {k: [["at-peak", str(n["at_peak"].get(k, 0)), gb(n["at_peak"].get(k, 0))],
                 ["resting", str(n["resting"].get(k, 0)), gb(n["resting"].get(k, 0))]]
             for k in set(n["at_peak"]) | set(n["resting"])}
    bars = sorted([["bar col0", k, str(v)] for k, v in n["at_peak"].items() if v]
                  + [["bar col1", k, str(v)] for k, v in n["resting"].items() if v])
    fits = n["peak"] <= n["capacity"]
    return {
        "numbers": {
            "peak": {"text": gb(n["peak"]), "bytes": str(n["peak"]), "seconds": None},
            "capacity": {"text": f"{n['gpu']}'s {gb(n['capacity'])}", "bytes": str(n["capacity"]), "seconds": None},
            "verdict": {"text": "fits" if fits else "does NOT fit", "bytes": None, "seconds": None},
            "step": {"text": ms(n["step_s"]), "bytes": None, "seconds": repr(n["step_s"])},
            "compute": {"text": ms(n["compute_s"]), "bytes": None, "seconds": repr(n["compute_s"])},
            "hidden": {"text": ms(hidden), "bytes": None, "seconds": repr(hidden)},
            "exposed": {"text": ms(n["exposed_s"]), "bytes": None, "seconds": repr(n["exposed_s"])},
            "params": {"text": f"{n['params']:,}", "bytes": str(n["params"]), "seconds": None},
            "link": {"text": f"{n['device']}, {n['link']}", "bytes": None, "seconds": None},
            # the phone's bar at the bottom of the screen: the same three numbers
            "sticky-peak": {"text": gb(n["peak"]), "bytes": None, "seconds": None},
            "sticky-verdict": {"text": "fits" if fits else "does NOT fit", "bytes": None, "seconds": None},
            "sticky-step": {"text": ms(n["step_s"]), "bytes": None, "seconds": None},
        },
        "kinds": kinds, "bars": bars,
        "labels": {gb(sum(n["at_peak"].values())), gb(sum(n["resting"].values())), f"{n['gpu']}: {gb(n['capacity'])}"},
        "timeText": [ms(n["compute_s"]), ms(hidden), ms(n["exposed_s"])],
    }


def same(shown: dict, n: dict) -> list:
    """Where the page (`shown`, SHOWN's answer) differs from numbers `n`: [] when every number agrees."""
    want, out = expected(n), []
    numbers = {k: {**v, "seconds": repr(float(v["seconds"])) if v["seconds"] else None}
               for k, v in shown["numbers"].items()}
    for k, v in want["numbers"].items():
        if numbers[k] != v:
            out.append(f"{k}: shows {numbers[k]}, the CLI says {v}")
    if {k: v for k, v in shown["kinds"].items()} != want["kinds"]:
        out.append(f"kinds table {shown['kinds']} != {want['kinds']}")
    if sorted(shown["bars"]) != want["bars"]:
        out.append(f"bars {sorted(shown['bars'])} != {want['bars']}")
    if not want["labels"] <= set(shown["memoryText"]):
        out.append(f"memory chart labels {shown['memoryText']} miss {want['labels'] - set(shown['memoryText'])}")
    if [t for t in shown["timeText"] if t.endswith(" ms")] != want["timeText"]:
        out.append(f"time chart {shown['timeText']} != {want['timeText']}")
    return out


def blank(shown: dict) -> list:
    """Where a page that draws nothing (a refused setting) still shows a number."""
    out = [f"{k} shows {v}" for k, v in shown["numbers"].items() if v != {"text": "—", "bytes": None, "seconds": None}]
    if shown["kinds"] or shown["bars"] or shown["timeBars"] or shown["memoryText"] or shown["timeText"]:
        out.append("a chart or the table still holds the last setting's numbers")
    return out


# -- the CLI's answer -------------------------------------------------------------------------------------------------
def cli(argv: list) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0, argv
    return json.loads(out.getvalue())


def cli_numbers(s: Settings) -> dict:
    """`zerosim memory --json` and `zerosim timeline --json` for `s`'s flags, in `expected`'s shape."""
    # the page's assumptions, said on it: zerosim's fused kernels at the datasheet's peaks (the commands' defaults are
    # eager kernels at achieved rates), ranks in nodes of 8 (NVLink inside a node, InfiniBand NDR between)
    flags = ["--model", s.model, "--ranks", str(s.ranks), "--precision", s.precision, "--optimizer", s.optimizer,
             "--seq-len", str(s.seq_len), "--batch", str(s.micro_batch), "--checkpoint", s.checkpoint,
             "--kernels", "fused", "--json"]
    row = cli(["memory", *flags])["stages"][s.stage]
    tl = cli(["timeline", *flags, "--stage", str(s.stage), "--gpu", s.gpu, "--gpus-per-node", "8", "--efficiency",
              "peak"])
    assert tl["peak"] == row["peak"]  # the two commands' own agreement
    return {"peak": row["peak"], "at_peak": row["at_peak"], "resting": row["resting"],
            "capacity": tl["fit"]["capacity"], "gpu": tl["fit"]["gpu"], "params": tl["params"],
            "step_s": tl["step_s"], "compute_s": tl["compute_s"], "comm_s": tl["comm_s"],
            "exposed_s": tl["exposed_comm_s"], "device": tl["device"],
            "link": tl["inter_link"] or tl["link"]}  # the slowest link its rings cross


# -- moving the controls --------------------------------------------------------------------------------------------
def set_control(tab, name: str, value) -> None:
    """As a learner would: pick from a drop-down, or type into a slider's box."""
    if tab.query_selector(f"#number-{name}"):
        tab.fill(f"#number-{name}", str(value))
    else:
        tab.select_option(f"#control-{name}", str(value))


def random_settings(rng: random.Random) -> Settings:
    model = rng.choice(MODELS)
    longest = config_for(model).max_positions
    return Settings(model=model, ranks=rng.choice([rng.randint(1, 8), 8 * rng.randint(2, 128), rng.choice(RANKS)]),
                    stage=rng.randrange(4), precision=rng.choice(PRECISIONS), optimizer=rng.choice(OPTIMIZERS),
                    seq_len=rng.choice([rng.randint(1, longest), *[n for n in SEQ_LENS if n <= longest]]),
                    micro_batch=rng.choice([rng.randint(1, 8), *MICRO_BATCHES[:4]]),
                    checkpoint=rng.choice(list(STRATEGIES)), gpu=rng.choice(list(GPUS)))


def show(tab, s: Settings) -> dict:
    for name in ("model", "ranks", "stage", "precision", "optimizer", "seq_len", "micro_batch", "checkpoint", "gpu"):
        set_control(tab, name, getattr(s, name))
    return tab.evaluate(SHOWN)


_CLI = {}  # settings -> the CLI's numbers, shared by both window sizes


def test_every_number_equals_the_clis_json_at_50_random_settings(page):
    rng = random.Random(20240)  # the same 50 settings at both sizes
    for i in range(50):
        s = random_settings(rng)
        shown = show(page, s)
        assert json.loads(shown["settings"]) == {k: getattr(s, k) for k in json.loads(shown["settings"])}
        assert shown["drawn"] == "yes" and shown["error"] == "", (s, shown["error"])
        if s not in _CLI:
            _CLI[s] = cli_numbers(s)
        assert same(shown, _CLI[s]) == [], (i, s)
        assert shown["scroll"][0] <= shown["scroll"][1], f"{page.size}: scrolls sideways at {s}"
        assert shown["clipped"] == [], f"{page.size}: {shown['clipped']} cut off at {s}"
    assert page.messages == []


MOVES = ("model", "ranks", "stage", "precision", "optimizer", "seq_len", "micro_batch", "checkpoint", "gpu")


def move(tab, rng: random.Random) -> str:
    """One random move of one control: a slider by the keyboard, a box typed into, a drop-down picked."""
    name = rng.choice(MOVES)
    if name in ("ranks", "seq_len", "micro_batch"):
        how = rng.choice(["ArrowRight", "ArrowLeft", "End", "Home", "type"])
        if how == "type":
            value = {"ranks": rng.randint(1, 2048), "seq_len": rng.choice([100, 3000, 20000, 40000]),
                     "micro_batch": rng.randint(1, 12)}[name]
            tab.fill(f"#number-{name}", str(value))
            return f"{name} = {value}"
        tab.focus(f"#control-{name}")
        tab.keyboard.press(how)
        return f"{name} {how}"
    options = tab.eval_on_selector(f"#control-{name}", "s => [...s.options].map(o => o.value)")
    value = rng.choice(options)
    tab.select_option(f"#control-{name}", value)
    return f"{name} -> {value}"


def test_no_number_of_an_earlier_setting_survives_20_moves(page):
    """After every move the page shows the numbers of the setting its controls now hold (the engine's, `explore`),
    or, where it is refused (a sequence longer than the model's positions, N that does not fill nodes of 8), no number
    at all: never the last ones."""
    rng = random.Random(7 if page.size == "desktop" else 8)
    refused, moves = 0, []
    for _ in range(20):
        moves.append(move(page, rng))
        shown = page.evaluate(SHOWN)
        s = Settings(**json.loads(shown["settings"]))
        if s.seq_len > config_for(s.model).max_positions or s.ranks > 8 and s.ranks % 8:
            refused += 1  # a sequence longer than the model's positions, or N that does not fill nodes of 8
            assert shown["drawn"] == "no" and ("is longer than" in shown["error"] or "do not fill nodes" in
                                               shown["error"]), moves
            assert blank(shown) == [], moves
        else:
            n = explore(s)
            assert shown["drawn"] == "yes" and shown["error"] == "", moves
            assert same(shown, n) == [], moves
        assert shown["scroll"][0] <= shown["scroll"][1] and shown["clipped"] == [], (page.size, shown["clipped"], moves)
    assert page.messages == []


def test_a_refused_setting_blanks_every_number_then_the_next_setting_draws_again(page):
    """The bug this page once had: GPT-3 175B at a sequence longer than its positions kept Llama's numbers under the
    new model's name ("fits" in 3.1 GB)."""
    set_control(page, "seq_len", 4096)
    set_control(page, "model", "gpt3-175b")  # 2,048 positions
    shown = page.evaluate(SHOWN)
    assert shown["error"] == "Not drawn: seq_len 4096 is longer than gpt3-175b's 2048 positions"
    assert blank(shown) == []
    set_control(page, "seq_len", 2048)
    shown = page.evaluate(SHOWN)
    assert same(shown, explore(Settings(model="gpt3-175b", seq_len=2048))) == []


def test_loads_without_a_message_or_sideways_scroll_and_the_screenshots_are_taken(page, tmp_path):
    shown = page.evaluate(SHOWN)
    assert same(shown, explore(Settings())) == [] and page.messages == []
    # the widest texts the page can hold: a refused setting's message, then the largest model on a phone
    for s in (Settings(model="gpt2-small", seq_len=4096), Settings(model="gpt3-175b", ranks=1024, seq_len=2048,
                                                                   gpu="rtx3090", optimizer="adan")):
        shown = show(page, s)
        assert shown["scroll"][0] <= shown["scroll"][1] and shown["clipped"] == [], (page.size, shown["clipped"], s)
    show(page, Settings())
    label = page.evaluate("document.getElementById('capacity-label').textContent")
    assert label == "H100 SXM5 80GB: 85.52 GB"  # the dashed line says what it is
    folder = SHOTS or str(tmp_path)
    shot = page.screenshot(path=os.path.join(folder, f"explore-{page.size}.png"), full_page=False)
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
