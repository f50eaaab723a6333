"""The small dense models: seed 004's four-weight TinyNet and the MLP the property tests draw.

    _tinynet.py   TinyNet: seed 004's network, exactly (its weights and its two GPUs' batches)
    _mlp.py       MLP: Linear/activation pairs, half-MSE or softmax cross-entropy on top
"""

from zerosim._lazy import lazy_face, names_of

# each name of the face and the module that defines it, imported the first time it is asked for (zerosim/_lazy.py)
_NAMES = {"._mlp": ("ACTIVATIONS", "MLP"), "._tinynet": ("TinyNet",)}
__getattr__, __dir__ = lazy_face(__name__, _NAMES)

__all__ = sorted(names_of(_NAMES))
