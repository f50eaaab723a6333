"""TinyNet: seed 004's four-weight network, exactly.

    h = w1*x1 + w2*x2        Linear 2->1, no bias, w = [[w1, w2]]
    a = ReLU(h)
    y = w3*a + w4            Linear 1->1, w = [[w3]], b = [w4]
    loss = 0.5 * (y - t)^2

Flat order [w1, w2, w3, w4]. One checkpoint block covers every layer, so with checkpointing h and a
are dropped in forward and recomputed from x in backward, as the seed's Stage 3 narrates.
"""

from __future__ import annotations

import numpy as np

from zerosim.models._model import Model
from zerosim.models.layers import HalfMSE, Linear, ReLU


class TinyNet(Model):
    """Seed 004's model; `weights` are [w1, w2, w3, w4] (default the seed's [2.0, -3.0, 1.0, 0.5])."""

    WEIGHTS = (2.0, -3.0, 1.0, 0.5)
    NAMES = ("w1", "w2", "w3", "w4")  # flat order, for narration

    def __init__(self, weights=WEIGHTS):
        layers = [Linear(2, 1, bias=False, name="layer1"), ReLU(name="relu"), Linear(1, 1, bias=True, name="layer2")]
        super().__init__(layers, HalfMSE(), checkpoint_blocks=[(0, 3)])
        self.weights = tuple(float(w) for w in weights)
        if len(self.weights) != 4:
            raise ValueError(f"TinyNet has 4 weights [w1, w2, w3, w4], got {len(self.weights)}")

    def init_params(self, rng=None) -> np.ndarray:
        """The (4,) float32 weights [w1, w2, w3, w4]; `rng` is ignored (the seed fixes them)."""
        return np.array(self.weights, np.float32)

    @staticmethod
    def seed_batches() -> list[tuple[np.ndarray, np.ndarray]]:
        """Seed 004's two samples, one per GPU: [(x (1, 2), t (1, 1)), ...] in float32."""
        return [
            (np.array([[1.0, 3.0]], np.float32), np.array([[5.0]], np.float32)),  # GPU 0
            (np.array([[2.0, 1.0]], np.float32), np.array([[7.0]], np.float32)),  # GPU 1
        ]
