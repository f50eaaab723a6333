"""Pipeline parallelism: the model's layers cut into stages over the pipeline ranks, micro-batches driven through a
schedule that is data (a table of actions), activations and their gradients sent between neighbouring stages, and
each stage's ranks a data-parallel job of their own.

    from zerosim.parallel.pipeline import PipelineEngine
    pipe = PipelineEngine(gpt, Cluster(8, gpus_per_node=4), 1, Adam(), "bf16-mixed", pp=2, schedule="1f1b",
                          micro_batches=4)
    losses = pipe.step(batches)           # batches[d]: data-parallel rank d's 4 (x, target) micro-batches

Its files, the algorithm apart from its communication:

    _table.py           Action, Table: a schedule as rows (rank, time step, action, micro-batch, stage), what each
                        action waits for, the order the engine runs them in, the activations held
    _schedules.py       gpipe, 1f1b, interleaved-1f1b, zero-bubble: each table made by torch 2.13's rule, cited
    _stages.py          where the layers are cut (torchtitan's even split, Megatron's, or the user's) and the model
                        each pipeline rank holds (StageModel)
    _views.py           StageCluster: one stage's ranks as the data-parallel step sees a cluster
    _communication.py   a stage's activations or gradients handed to the neighbouring stage, point to point
    _engine.py          PipelineEngine: a ZeroEngine per pipeline rank, driven action by action through the table
    _repeat.py          on the meta backend, alike actions written again from a record instead of run
    _beside.py          what a framework's data parallelism becomes beside a pipeline (torchtitan's FSDP2: gathered
                        once a step, reduce-scattered once)
    _costs.py           by hand: the activations each schedule holds in flight (GPipe M, 1F1B P - r, ...), the bubble,
                        the messages a rank sends between stages

The oracle is zerosim.reference's PipelineReference; docs/explanation/adding-a-parallelism.md says why the pipeline
drives the data-parallel step's phases instead of being one more set of its hooks.
"""

from zerosim.parallel.pipeline._beside import BESIDE_PIPELINE, PIPELINE_STRATEGIES, plan_beside_pipeline
from zerosim.parallel.pipeline._costs import BUBBLE_FORMULA, bubble_fraction, in_flight, stage_messages
from zerosim.parallel.pipeline._engine import PipelineEngine, check_beside, refused_beside
from zerosim.parallel.pipeline._schedules import DEFAULT_SCHEDULE, SCHEDULES, Schedule, get_schedule, make_table
from zerosim.parallel.pipeline._stages import RULES, Pieces, StageModel, StageSplit, pieces, split
from zerosim.parallel.pipeline._table import ACTION_KINDS, Action, Table
from zerosim.parallel.pipeline._views import StageCluster

__all__ = ["ACTION_KINDS", "Action", "BESIDE_PIPELINE", "BUBBLE_FORMULA", "DEFAULT_SCHEDULE", "PIPELINE_STRATEGIES",
           "PipelineEngine", "Pieces", "RULES", "SCHEDULES", "Schedule", "StageCluster", "StageModel", "StageSplit",
           "Table", "bubble_fraction", "check_beside", "get_schedule", "in_flight", "make_table", "pieces",
           "plan_beside_pipeline", "refused_beside", "split", "stage_messages"]
