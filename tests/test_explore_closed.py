"""The explorer's numbers without the engine (explore/_compile.py, _closed.py): a model's step compiled once into
coefficients gives, at any N, B, L, stage, precision, optimizer and GPU, every number one run of the engine on the
meta backend gives (`explore`, the run `zerosim memory` / `zerosim timeline` make) — exactly, bytes and seconds.

page.js is _closed.py in JavaScript; tests/test_explore_browser.py holds it to the CLI in a real browser.
"""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zerosim.analysis.costs import GPUS, get_gpu
from zerosim.explore import Settings, closed_form, compile_model, explore, shipped_steps
from zerosim.explore._compile import TERMS, NotCompilable, candidates, fit, runs, unrun, value, width
from zerosim.explore._settings import OPTIMIZERS, PRECISIONS
from zerosim.models.gpt import STRATEGIES


def compiled(model: str, checkpoint: str, precision: str) -> dict:
    """The shipped step (steps.json) of (model, checkpoint, precision's width), with its ops unpacked."""
    step = shipped_steps()["steps"][f"{model}|{checkpoint}|{width(precision)}"]
    return {**step, "ops": unrun(step["ops"])}


def differences(s: Settings) -> dict:
    want = explore(s)
    got = closed_form(compiled(s.model, s.checkpoint, s.precision), s, get_gpu(s.gpu))
    # the host column and the device's wait for it are the notebook explorer's offload numbers: the page computes
    # on-device steps only (docs/classroom.md), so its closed form has neither
    return {k: (got.get(k), want[k]) for k in want if k not in ("model", "host", "host_wait_s")
            and got.get(k) != want[k]}


# small models, small N: each example is one engine run (~0.1 s); the shipped steps of the large ones are checked at
# their real sizes in the browser test and in the table below
SMALL = ("gpt2-small", "gpt2-medium", "llama-2-7b", "qwen2.5-7b", "mistral-7b")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(SMALL), ranks=st.sampled_from([1, 2, 3, 7, 8, 16, 64, 1000]), stage=st.integers(0, 3),
       precision=st.sampled_from(PRECISIONS), optimizer=st.sampled_from(OPTIMIZERS),
       seq_len=st.sampled_from([1, 17, 64, 333, 1024]), batch=st.integers(1, 3), checkpoint=st.sampled_from(
           list(STRATEGIES)), gpu=st.sampled_from(list(GPUS)))
def test_the_closed_form_equals_the_engine_at_any_setting(model, ranks, stage, precision, optimizer, seq_len, batch,
                                                          checkpoint, gpu):
    s = Settings(model=model, ranks=ranks, stage=stage, precision=precision, optimizer=optimizer, seq_len=seq_len,
                 micro_batch=batch, checkpoint=checkpoint, gpu=gpu)
    assert differences(s) == {}


@pytest.mark.parametrize("s", [  # the large models at their own sizes, one row each (what a lecturer shows)
    Settings(),  # Llama-2-7B, 8 H100s, ZeRO-3, one 4k sequence: 16.85 GB, as notebook 03 prints
    Settings(model="gpt3-175b", ranks=1024, stage=3, seq_len=2048, checkpoint="block"),  # IB NDR, 96 blocks
    Settings(model="llama-2-70b", ranks=64, stage=1, seq_len=4096, micro_batch=2, checkpoint="selective"),
    Settings(model="llama-3-70b", ranks=16, stage=2, precision="fp16-mixed", optimizer="adan", checkpoint="flash"),
    Settings(model="qwen2.5-7b", ranks=5, stage=0, precision="fp32", seq_len=32768, checkpoint="every-k", gpu="h200"),
], ids=["llama-2-7b", "gpt3-175b", "llama-2-70b", "llama-3-70b", "qwen-32k-fp32"])
def test_the_large_models_closed_forms_equal_their_engine_runs(s):
    assert differences(s) == {}


def test_the_shipped_steps_cover_every_model_strategy_and_width():
    from zerosim.analysis.costs import PRESETS

    steps = shipped_steps()["steps"]
    shaped = {k for k, p in PRESETS.items() if p.config is not None}
    assert set(steps) == {f"{m}|{c}|{w}" for m in shaped for c in STRATEGIES for w in ("16", "32")}


@pytest.mark.slow  # compiles 3 steps again (~2 s each)
@pytest.mark.parametrize("model, checkpoint, precision", [
    ("gpt2-small", "block", "bf16-mixed"), ("llama-3-8b", "flash", "fp32"), ("mistral-7b", "subblock", "fp16-mixed")])
def test_the_shipped_steps_are_what_the_engine_compiles_today(model, checkpoint, precision):
    """steps.json is generated (tools/compile_explorer.py): a change to what a step holds must regenerate it."""
    fresh = compile_model(model, checkpoint, precision)
    shipped = shipped_steps()["steps"][f"{model}|{checkpoint}|{width(precision)}"]
    assert json.loads(json.dumps({**fresh, "ops": runs(fresh["ops"])})) == shipped, \
        "zerosim/explore/steps.json is stale: run python tools/compile_explorer.py"


def test_a_fit_is_checked_at_three_more_points_and_a_size_no_term_describes_is_refused():
    from zerosim.explore._compile import CHECK, FIT, terms

    q = (7, 3, 0, 5, 11)  # 7·BL + 3·BL² + 5·B + 11
    assert fit([value(q, b, n) for b, n in FIT + CHECK], "q") == q
    # a size that follows the five terms up to L = 300 and then does not (a tile count of another width would):
    # the fit at FIT is exact, CHECK finds it
    jump = [value(q, b, n) + (n > 500) for b, n in FIT + CHECK]
    with pytest.raises(NotCompilable, match=r"odd: 6014022 at B = 2, L = 1000, but the fit \(7, 3, 0, 5, 11\)"):
        fit(jump, "odd")
    # a B·L·log2(L) term: no whole-number combination of the five at FIT
    with pytest.raises(NotCompilable, match="not whole numbers"):
        fit([b * n * n.bit_length() for b, n in FIT + CHECK], "log")
    assert terms(2, 65) == (130, 2 * 65 * 65, 2 * 65 * 2, 2, 1)  # T = ceil(65 / 64) = 2 flash tiles


def test_a_prefix_is_kept_only_when_it_can_be_the_first_peak():
    bl = lambda a, b=0: (a, b, 0, 0, 0)  # noqa: E731  (B·L, B·L²) coefficients
    # +3 BL, +2 BL², -3 BL: prefixes (0), (3,0), (3,2), (0,2) — (3,2) holds most of both; the empty prefix and (3,0)
    # are covered by it, later and larger; (0,2) is covered by (3,2), earlier
    assert candidates([bl(3), bl(0, 2), bl(-3)]) == [bl(3, 2)]
    # an earlier prefix that equals a later one is the first peak; the later one never is
    assert candidates([bl(2), bl(-2), bl(2)]) == [bl(2)]
    # neither covers the other: both stay, in order
    assert candidates([bl(5), bl(-5, 1)]) == [bl(5), bl(0, 1)]
    assert len(TERMS) == 5 and runs([[1, 0, 3], [2, 0, 3], [3, 0, 3], [3, 4, 5]]) == [[1, 1, 3, 0, 3], [3, 0, 1, 4, 5]]
