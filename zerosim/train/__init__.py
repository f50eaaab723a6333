"""Training runs as library code, above the engines and the checkpoints: what `zerosim train` runs.

    trainer.py   TrainConfig, train(config) -> TrainResult: a model on a synthetic task, saved and resumed
"""

from zerosim.train.trainer import StepInfo, TrainConfig, TrainResult, build_model, train

__all__ = ["StepInfo", "TrainConfig", "TrainResult", "build_model", "train"]
