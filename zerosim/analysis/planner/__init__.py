"""The planner: which stage, checkpointing strategy, micro-batch and many-node strategy fit the GPUs, and how long a
step of each takes — one meta-backend step per configuration, placed in time by the timeline.

    _plan.py             plan: stage × checkpointing strategy × micro-batch, what fits, ranked by step time
    _jobs.py             its stages (validate's points, the figures) made on several worker processes, results in order
    _sweep.py            one meta step per (N, stage, link); a step of K micro-steps (step_time); the crossover
    _strategy_sweep.py   FULL_SHARD against HSDP, MiCS and hpZ over N, on nodes of G GPUs
    _validate.py         zerosim against published runs: predicted vs measured, the error (zerosim validate)
    _tensor_validation.py torchtitan's Llama 3.1 70B FSDP 32 x TP 8 run beside zerosim's prediction, with the error
"""

from zerosim.analysis.planner._jobs import check_jobs, in_order
from zerosim.analysis.planner._plan import Plan, PlanRow, divisors, plan
from zerosim.analysis.planner._strategy_sweep import (
                                                      StrategyRow,
                                                      fitting_shard_group,
                                                      hsdp_bound_ranks,
                                                      recipe_of,
                                                      strategy_step,
                                                      strategy_sweep,
                                                      strategy_timeline,
)
from zerosim.analysis.planner._strategy_sweep import crossover as strategy_crossover
from zerosim.analysis.planner._sweep import (
                                                      StepTime,
                                                      SweepRow,
                                                      crossover,
                                                      latency_bound_ranks,
                                                      meta_step,
                                                      step_time,
                                                      sweep,
)
from zerosim.analysis.planner._tensor_validation import TORCHTITAN_70B, PublishedRun
from zerosim.analysis.planner._tensor_validation import predict as predict_published_run
from zerosim.analysis.planner._validate import Prediction, predict, summary, validate
from zerosim.analysis.planner._validate import fit as fit_framework

__all__ = [
    "Prediction", "predict", "summary", "validate", "fit_framework",
    "Plan", "PlanRow", "PublishedRun", "StepTime", "StrategyRow", "SweepRow", "TORCHTITAN_70B", "check_jobs",
    "crossover", "in_order",
    "divisors", "fitting_shard_group", "hsdp_bound_ranks", "latency_bound_ranks", "meta_step", "plan",
    "predict_published_run", "recipe_of", "step_time", "strategy_crossover", "strategy_step", "strategy_sweep",
    "strategy_timeline", "sweep",
]
