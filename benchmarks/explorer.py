"""How long the memory explorer takes to redraw after a slider moves (target: 200 ms, issue 24).

A redraw is what `MemoryExplorer.redraw` does: one meta-backend step of the new setting, simulated in time
(explore/numbers.py), then the figure drawn and encoded as the PNG a notebook shows (IPython's display does that). A
setting seen before comes from the cache and costs only the drawing.

    python benchmarks/explorer.py [--repeats 3]

For each move of a learner's path through the sliders (Llama-2-7B on 8 H100s, then stage, N, L, checkpointing,
micro-batch, model), in turns: the explorer's first visit (cache cleared), its revisit (cached), and the
yardstick doing the same work the long way, `zerosim memory --json` then `zerosim timeline --json` with the same
flags, in-process. Median of --repeats each; the ratio yardstick / first visit. Say the load (uptime) beside it.
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
from zerosim.explore import Settings, explore, explorer_figure  # noqa: E402

MOVES = [{}, {"stage": 0}, {"stage": 1}, {"stage": 2}, {"ranks": 64}, {"seq_len": 2048}, {"checkpoint": "none"},
         {"micro_batch": 4}, {"model": "llama-3-8b"}, {"model": "gpt3-6.7b", "seq_len": 2048}]
TARGET = 0.2


def redraw(s: Settings, fig):
    fig = explorer_figure(explore(s), fig)
    fig.savefig(io.BytesIO(), format="png")  # what showing it in a notebook costs: IPython's display makes this PNG
    return fig


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
    fig = redraw(Settings(), None)  # imports and the first figure: not a slider move
    s = Settings()
    print(f"{'move':38s} {'first visit':>12s} {'(CPU)':>8s} {'step only':>10s} {'revisit':>9s} "
          f"{'memory+timeline CLI':>20s} {'ratio':>6s}")
    firsts = []
    for move in MOVES:
        s = s.with_(**move)
        first, cpu, step, again, cli = [], [], [], [], []
        for _ in range(a.repeats):
            explore.cache_clear()
            t, c = time.perf_counter(), time.process_time()
            redraw(s, fig)
            first.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)  # this process's own CPU: less at the mercy of the machine's load
            explore.cache_clear()
            t = time.perf_counter()
            explore(s)  # the engine's step and its timeline alone, without the drawing
            step.append(time.perf_counter() - t)
            t = time.perf_counter()
            redraw(s, fig)
            again.append(time.perf_counter() - t)
            t = time.perf_counter()
            yardstick(s)
            cli.append(time.perf_counter() - t)
        f, u, st, g, c = map(statistics.median, (first, cpu, step, again, cli))
        firsts.append(f)
        label = ", ".join(f"{k}={v}" for k, v in move.items()) or "start: " + s.model
        print(f"{label:38s} {f * 1e3:9.0f} ms {u * 1e3:5.0f} ms {st * 1e3:7.0f} ms {g * 1e3:6.0f} ms "
              f"{c * 1e3:17.0f} ms {c / f:6.1f}")
    worst = max(firsts)
    print(f"\nslowest first-visit redraw {worst * 1e3:.0f} ms (target {TARGET * 1e3:.0f} ms): "
          f"{'met' if worst <= TARGET else 'NOT met'}; median {statistics.median(firsts) * 1e3:.0f} ms; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main_()
