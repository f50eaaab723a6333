"""What `zerosim memory`, `timeline` and `plan` say, as library objects: each report is a record whose `to_dict()` is
the command's `--json` (the command itself only reads flags, calls these and prints).

    _workload.py   Workload: what a report's step runs (model, micro-batch, schedule, formats, optimizer, K, the GPU)
    _fit.py        judge: a rank's peak plus the labelled estimates against a GPU; its verdict in words and lines
    _step.py       StepReport, timeline_step: one simulated step (zerosim timeline); Report, the reports' base
    _exposure.py   exposure: why each purpose's communication is exposed or hidden, in words (the timeline's lines)
    _sweeps.py     SweepReport, stages_sweep; StrategySweepReport, strategy_sweep_report (zerosim timeline --sweep)
    _memory.py     MemoryReport, memory_report; StrategyMemoryReport, strategy_memory_report (zerosim memory)
    _plan.py       PlanReport, plan_report: the planner's rows with MFU and the commands that reproduce the top one
    _tensor.py     beside tensor parallelism: one TP rank's slice, its activations against Megatron's formulas
    _context.py    beside context parallelism: one CP rank's activations, the K/V's bytes by hand
    _pipeline.py   beside pipeline parallelism: the bytes each pipeline rank sends in a step, by hand
"""

from zerosim.analysis.reports._fit import fit_lines, judge, verdict_word
from zerosim.analysis.reports._memory import MemoryReport, StrategyMemoryReport, memory_report, strategy_memory_report
from zerosim.analysis.reports._plan import KINDS, PlanReport, kind_group, plan_report
from zerosim.analysis.reports._step import Report, StepReport, describe_comm, link_model, tier_summary, timeline_step
from zerosim.analysis.reports._sweeps import LINKS as SWEEP_LINKS
from zerosim.analysis.reports._sweeps import STAGES as SWEEP_STAGES
from zerosim.analysis.reports._sweeps import (
                                              StrategySweepReport,
                                              SweepReport,
                                              gpu_of,
                                              stages_sweep,
                                              strategy_sweep_report,
)
from zerosim.analysis.reports._tensor import tp_activations
from zerosim.analysis.reports._workload import Workload

__all__ = [
    "KINDS", "MemoryReport", "PlanReport", "Report", "SWEEP_LINKS", "SWEEP_STAGES", "StepReport",
    "StrategyMemoryReport", "StrategySweepReport",
    "SweepReport", "Workload", "describe_comm", "fit_lines", "gpu_of", "judge", "kind_group", "link_model",
    "memory_report", "plan_report", "stages_sweep", "strategy_memory_report", "strategy_sweep_report",
    "tier_summary", "timeline_step", "tp_activations", "verdict_word",
]
