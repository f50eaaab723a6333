"""One offloaded step in time: the step window (analysis/timeline/_window.py) against the whole log, the bytes each link
carries per step against hand formulas, where the CPU step is exposed and where DPU hides it, and the figure of one
offloaded step (viz/_offload_step.py) drawn from the timeline's own intervals."""

import numpy as np
import pytest

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.planner import meta_step
from zerosim.analysis.timeline import Hardware, simulate, step_window
from zerosim.models import make_regression
from zerosim.models.meta import MetaModel
from zerosim.parallel.offload import Offload

# Seconds that must agree: sums of the same float intervals clipped in another order (a few ulps of a step of seconds)
SUMS = 1e-12


def _run(offload, steps=1, tokens=16384, host_bandwidth=256e9, params=13_000_000_000, ranks=1, stage=2):
    """A 13B model of 40 layers on a V100 with a DGX-2's PCIe 3 link, as the ZeRO-Offload paper ran it."""
    model = MetaModel.from_params(params, layers=40)
    hw = Hardware("v100", "nvlink4", "fp16", pcie="pcie3", host_bandwidth=host_bandwidth)
    return meta_step(model, ranks, stage, hw, tokens=tokens, steps=steps, parallelisms=(offload,))


def test_the_window_of_a_one_step_log_is_the_whole_log():
    result, _ = _run(Offload("cpu"))
    w = step_window(result)
    assert (w.start, w.end) == (0.0, result.step_time)
    assert w.busy["compute"] == pytest.approx(result.compute_busy[0], rel=SUMS)
    assert w.busy["cpu"] == pytest.approx(sum(iv.end - iv.start for iv in result.track(0, "cpu")), rel=SUMS)
    assert all(0 <= w.uncovered[s] <= w.busy[s] + SUMS for s in w.busy) and w.uncovered["compute"] == 0


def test_the_window_of_the_second_step_holds_its_own_work_only():
    one, _ = _run(Offload("cpu"))
    two, _ = _run(Offload("cpu"), steps=2)
    w1, w2 = step_window(two, 1), step_window(two)
    assert w2.start == pytest.approx(w1.end, rel=SUMS) and w2.step == 2
    for stream in ("compute", "pcie", "cpu"):  # without DPU every step is the first again
        assert w2.busy[stream] == pytest.approx(step_window(one).busy[stream], rel=1e-9), stream
    with pytest.raises(ValueError, match="no step 3"):
        step_window(two, 3)


def test_without_dpu_the_cpu_step_and_the_copy_back_are_exposed_and_dpu_hides_the_cpu_step():
    """DeepSpeed 0.19.8's step() is synchronous: the device waits for the CPU step and the fp16 copy back, so both
    add to the step (uncovered: busy while the device computes nothing). With DPU the next step runs on the params
    of the step before: a CPU step shorter than the GPU's work hides, the step is shorter by about the CPU step, and
    what the device still waits for is PCIe: the last gradient going down, then the params coming back (zerosim's DPU
    schedule issues that copy at the step's end, and the next forward reads the params it carries)."""
    plain, _ = _run(Offload("cpu"), steps=2)
    delayed, _ = _run(Offload("cpu", dpu=True), steps=2)
    p, d = step_window(plain), step_window(delayed)
    assert p.uncovered["cpu"] == pytest.approx(p.busy["cpu"], rel=SUMS)  # all of it while the device idled
    back = 26e9 / Hardware(pcie="pcie3").pcie.bandwidth  # 2Ψ of fp16 params over PCIe 3
    assert p.idle >= p.busy["cpu"] + back  # the device waits for the CPU step, then for the copy
    assert d.duration < p.duration and p.duration - d.duration == pytest.approx(p.busy["cpu"], rel=0.01)
    pcie = Hardware(pcie="pcie3").pcie
    last = 4 * 13e9 / 40 / pcie.bandwidth  # the last unit's fp32 gradient, still going down when backward ends
    assert d.idle == pytest.approx(last + back + 2 * pcie.alpha, rel=1e-6)  # only the PCIe copies keep it waiting


def test_a_cpu_slower_than_the_gpu_sets_the_pace_even_with_dpu():
    slow, _ = _run(Offload("cpu", dpu=True), steps=2, tokens=2048, host_bandwidth=5e9)  # the CPU step ~ 88 s
    w = step_window(slow)
    assert w.busy["cpu"] > step_window(slow, 1).busy["compute"]  # slower than the GPU's whole step
    assert w.duration >= 0.99 * w.busy["cpu"]


def test_bytes_per_link_per_step_are_the_hand_formulas():
    """ZeRO-Offload, stage 2, N ranks, one step, per rank: each unit's fp32 gradient shard down (4 B an element of the
    rank's shards: 4P over all ranks, the padding never travels) and the updated fp16 region back (2s). ZeRO-Infinity
    (params and optimizer on NVMe, stage 3): the fp16 shard read from NVMe and copied up for forward and backward
    (2 x 2P), the optimizer's region swapped in and out (2 x 12s: fp32 master, m, v), the new fp16 shard written
    out (2s). Read from the timeline's own events (result.call_bytes: what each call's time was charged for)."""
    from zerosim.cluster import TRANSFERS

    widths, n = [64, 96, 32], 4
    for offload, stage, want in (
        (Offload("cpu"), 2, lambda P, s: {"d2h": 4 * P, "h2d": n * 2 * s}),
        (Offload("nvme", "nvme"), 3, lambda P, s: {"nvme_read": 2 * 2 * P + n * 12 * s, "h2d": 2 * 2 * P,
                                                   "d2h": 4 * P, "nvme_write": n * (12 * s + 2 * s)}),
    ):
        engine = ZeroEngine(MLP(widths), Cluster(n), stage, get_optimizer("adam"), "bf16-mixed",
                            parallelisms=(offload,))
        engine.step(make_regression(np.random.default_rng(0), n, 8, widths))
        result = simulate(engine.cluster.trace, Hardware("a100", pcie="pcie4"))
        per_link = {}
        for e in engine.cluster.trace.events:
            if e.collective in TRANSFERS:
                per_link[e.collective] = per_link.get(e.collective, 0) + e.bytes
        assert per_link == want(engine.model.num_params, engine.layout.shard_size), offload
        if stage == 2:  # one copy back, charged for the busiest rank's bytes: its whole fp16 region
            back = [c.call for c in engine.cluster.trace.calls if c.collective == "h2d"]
            assert [result.call_bytes[c] for c in back] == [2 * engine.layout.shard_size]


def test_the_gradient_copies_run_beside_the_next_backward_and_the_step_waits_for_them():
    """DeepSpeed copies each partition's gradient non_blocking on the reduction stream: the next unit's backward does
    not wait for it (some of the PCIe time is covered by compute), the CPU step waits for every copy."""
    from zerosim.cluster import Call, OptimizerStep

    result, engine = _run(Offload("cpu"))
    w = step_window(result)
    assert w.uncovered["pcie"] < 0.5 * w.busy["pcie"]  # most of the 52 GB going down ran under backward
    log = engine.cluster.trace.log
    copies = {e.call for e in log if isinstance(e, Call) and e.collective == "d2h"}
    steps = [e for e in log if isinstance(e, OptimizerStep)]
    assert copies and all(copies <= set(s.needs) for s in steps)
    first_cpu = result.track(0, "cpu")[0]
    assert first_cpu.start >= max(iv.end for iv in result.track(0, "pcie") if iv.event.collective == "d2h")


# -- the figure: drawn from the timeline, never from formulas -----------------------------------------------------
def _bars(fig, prefix: str) -> float:
    """The total width of the bars whose gid starts with `prefix`, in the figure's units."""
    from matplotlib.collections import PolyCollection

    total = 0.0
    for ax in fig.axes:
        for c in ax.collections:
            if isinstance(c, PolyCollection) and (c.get_gid() or "").startswith(prefix):
                total += sum(p.vertices[:, 0].max() - p.vertices[:, 0].min() for p in c.get_paths())
    return total


def test_the_figure_of_one_offloaded_step_draws_the_timelines_intervals():
    import matplotlib

    matplotlib.use("Agg")
    from zerosim.viz import offload_step_figure

    results = {"plain": _run(Offload("cpu"), steps=2)[0], "DPU": _run(Offload("cpu", dpu=True), steps=2)[0]}
    for name, result in results.items():
        fig = offload_step_figure({name: result})
        w = step_window(result)
        # the figure's unit is seconds here (a step of ~12 s): every row's bars cover what the window says
        assert _bars(fig, "cpu:") == pytest.approx(w.busy["cpu"], rel=1e-9)
        assert _bars(fig, "pcie:") == pytest.approx(w.busy["pcie"], rel=1e-9)
        assert _bars(fig, "compute:") == pytest.approx(w.busy["compute"], rel=1e-9)
        assert _bars(fig, "idle") == pytest.approx(w.idle, rel=1e-9)
        assert "CPU step" in fig.axes[0].get_title(loc="left")
        assert fig.axes[0].get_xlim()[1] == pytest.approx(w.duration)
        matplotlib.pyplot.close(fig)
