"""Training runs as library code, above the engines and the checkpoints: what `zerosim train` runs.

    _trainer.py  TrainConfig, train(config) -> TrainResult: a model on a synthetic task, saved and resumed
"""

from zerosim.train._trainer import (
                                   MAX_SIMULATED_RANKS,
                                   RUN_DEFAULTS,
                                   StepInfo,
                                   TrainConfig,
                                   TrainResult,
                                   build_model,
                                   run_defaults,
                                   run_model,
                                   train,
)

__all__ = ["MAX_SIMULATED_RANKS", "RUN_DEFAULTS", "StepInfo", "TrainConfig", "TrainResult", "build_model",
           "run_defaults", "run_model", "train"]
