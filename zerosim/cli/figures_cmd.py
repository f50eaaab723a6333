"""Draw the figures the README shows, from what the simulator records, into figures/.

    zerosim figures                                  # figures/memory_by_stage.png: the ZeRO paper's Fig. 1
    zerosim figures --model gpt3-175b --ranks 1024 --out /tmp/figs

memory_by_stage.png: per-rank model states by stage, stacked by kind, for Ψ = 7.5B on N = 64 ranks
with Adam (the ZeRO paper's Figure 1) unless told otherwise. The bars are the meta backend's
ledgers after one step of the real engines; the paper's printed totals stand beside them.
"""

from __future__ import annotations

import os
import sys

from zerosim.cli.memory_cmd import add_model_arguments, model_from_args
from zerosim.costs.measured import measure_by_stage

HELP = "write the ZeRO-paper-style memory-by-stage bar chart (PNG) into figures/"
PAPER_FIG1 = (120, 31.4, 16.6, 1.9)  # Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N = 64, K = 12


def add_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--out", default="figures", help="directory to write into (default figures/)")
    p.add_argument("--log", action="store_true", help="logarithmic y axis")


def run(args) -> int:
    from zerosim.viz.memory_figure import memory_by_stage_figure

    model = model_from_args(args)
    stages = measure_by_stage(model, args.ranks, args.optimizer, args.precision, show_progress=sys.stderr.isatty())
    paper = model.num_params == 7_500_000_000 and args.ranks == 64 and args.optimizer == "adam"
    title = (f"Per-rank memory by ZeRO stage: Ψ = {model.num_params / 1e9:.4g}B ({model.name}), N = {args.ranks}, "
             f"{args.optimizer}, {args.precision}\nmeasured by the meta backend's ledgers after one step")
    fig = memory_by_stage_figure(stages, title=title, printed=PAPER_FIG1 if paper else None, log=args.log)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "memory_by_stage.png")
    fig.savefig(path)
    print(f"wrote {path}")
    return 0
