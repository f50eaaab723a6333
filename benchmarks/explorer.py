"""How long the memory explorer takes to redraw after a slider moves (target: 200 ms, issue 24).

A redraw is what `MemoryExplorer.redraw` does: one meta-backend step of the new setting, simulated in time
(explore/_numbers.py), then the one figure's artists moved to the new numbers and rendered as the PNG its image
widget shows (explore/_canvas.py: the axes rasterised again only when their limits or legend change; a text drawn
before at the same place pasted from its kept pixels, explore/_text_raster.py, as the explorer does all session). A
setting seen before comes from the cache and costs only the drawing. Beside it, the rebuild it replaced: a new
figure per redraw, every artist laid out and rasterised again (the same pixels; tests/test_explore.py).

    python benchmarks/explorer.py [--repeats 3]

Target (issue 41, Must show 5): every first visit within 200 ms at load 2-4 (the load is printed at the end).

For each move of a learner's path through the sliders (Llama-2-7B on 8 H100s, then stage, N, L, checkpointing,
micro-batch, model, and back), in turns: the explorer's first visit (cold: no cached numbers, and the axes
rasterised again, as when a move changes their limits or legend), its revisit (cached), the
revisit drawn the old way (a new figure), and the yardstick doing the same work the long way, `zerosim memory
--json` then `zerosim timeline --json` with the same flags, in-process. Median of --repeats each; the ratio
yardstick / first visit. Say the load (uptime) beside it: the CPU column is this process's own time.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")

from zerosim.cli.main import main  # noqa: E402
from zerosim.explore import ExplorerCanvas, Settings, explore  # noqa: E402

MOVES = [{}, {"stage": 0}, {"stage": 1}, {"stage": 2}, {"ranks": 64}, {"seq_len": 2048}, {"checkpoint": "none"},
         {"micro_batch": 4}, {"model": "llama-3-8b"}, {"model": "gpt3-6.7b", "seq_len": 2048}, {"stage": 3},
         {"stage": 1}]
TARGET = 0.2


def redraw(s: Settings, canvas: ExplorerCanvas) -> bytes:
    """The explorer's redraw: the numbers, the artists moved, the PNG its image widget shows."""
    canvas.update(explore(s))
    return canvas.png()


def rebuild(s: Settings) -> bytes:
    """The redraw it replaced: a new figure, every artist made, laid out and rasterised again."""
    canvas = ExplorerCanvas()
    canvas.update(explore(s))
    return canvas.png()


def yardstick(s: Settings) -> None:
    flags = ["--model", s.model, "--ranks", str(s.ranks), "--precision", s.precision, "--seq-len", str(s.seq_len),
             "--batch", str(s.micro_batch), "--checkpoint", s.checkpoint, "--json"]
    with contextlib.redirect_stdout(io.StringIO()):
        main(["memory", *flags])
        main(["timeline", *flags, "--stage", str(s.stage), "--gpu", s.gpu, "--gpus-per-node", "8"])


def main_():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    canvas = ExplorerCanvas()
    redraw(Settings(), canvas)  # imports and the first figure: not a slider move
    rebuild(Settings())
    s = Settings()
    print(f"{'move':38s} {'first visit':>12s} {'(CPU)':>8s} {'step only':>10s} {'revisit':>9s} {'(CPU)':>7s} "
          f"{'rebuilt':>8s} {'(CPU)':>7s} {'memory+timeline CLI':>20s} {'ratio':>6s}")
    firsts, cpus, agains, rebuilts = [], [], [], []
    for move in MOVES:
        s = s.with_(**move)
        first, cpu, step, again, again_cpu, old, old_cpu, cli = [], [], [], [], [], [], [], []
        for _ in range(a.repeats):
            explore.cache_clear()
            canvas.forget_backgrounds()  # cold: as if this move changed the axes' limits and legend (the worst case)
            t, c = time.perf_counter(), time.process_time()
            redraw(s, canvas)
            first.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)  # this process's own CPU: less at the mercy of the machine's load
            explore.cache_clear()
            t = time.perf_counter()
            explore(s)  # the engine's step and its timeline alone, without the drawing
            step.append(time.perf_counter() - t)
            t, c = time.perf_counter(), time.process_time()
            redraw(s, canvas)
            again.append(time.perf_counter() - t)
            again_cpu.append(time.process_time() - c)
            t, c = time.perf_counter(), time.process_time()
            rebuild(s)
            old.append(time.perf_counter() - t)
            old_cpu.append(time.process_time() - c)
            t = time.perf_counter()
            yardstick(s)
            cli.append(time.perf_counter() - t)
        f, u, st, g, gu, o, ou, c = map(statistics.median, (first, cpu, step, again, again_cpu, old, old_cpu, cli))
        firsts.append(f)
        cpus.append(u)
        agains.append(g)
        rebuilts.append(o)
        label = ", ".join(f"{k}={v}" for k, v in move.items()) or "start: " + s.model
        print(f"{label:38s} {f * 1e3:9.0f} ms {u * 1e3:5.0f} ms {st * 1e3:7.0f} ms {g * 1e3:6.0f} ms "
              f"{gu * 1e3:4.0f} ms {o * 1e3:5.0f} ms {ou * 1e3:4.0f} ms {c * 1e3:17.0f} ms {c / f:6.1f}")
    worst = max(firsts)
    print(f"\nslowest first-visit redraw {worst * 1e3:.0f} ms (target {TARGET * 1e3:.0f} ms): "
          f"{'met' if worst <= TARGET else 'NOT met'}; median {statistics.median(firsts) * 1e3:.0f} ms "
          f"(CPU {statistics.median(cpus) * 1e3:.0f} ms); cached revisits median {statistics.median(agains) * 1e3:.0f} "
          f"ms against {statistics.median(rebuilts) * 1e3:.0f} ms rebuilt; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main_()
