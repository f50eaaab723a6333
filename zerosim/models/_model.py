"""Model: a list of layers, a loss, checkpoint blocks, and one flat parameter vector.

Letters: P parameters in the whole model. Flat order is layer order, then the order a layer declares
its parameters in (`Layer.param_shapes`). ZeRO shards this flat vector; `specs` says which slice of it
is which tensor, so a parameter that straddles two shards is still found by offset.
"""

from __future__ import annotations

import math

import numpy as np

from zerosim._dataclass import dataclass
from zerosim.models.layers import Layer, Loss


def all_finite(x: np.ndarray) -> bool:
    """No NaN or inf in `x` (any of zerosim's formats, or integers): NumPy's own floats tested as they are (finite
    in float32 is finite in float64), the others widened to float64 first (exact)."""
    if x.dtype in _NATIVE_FLOATS:
        return bool(np.isfinite(x).all())
    return bool(np.all(np.isfinite(x.astype(np.float64))))


_NATIVE_FLOATS = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16))


@dataclass(frozen=True)
class ParamSpec:
    """One parameter tensor's place in the flat vector: flat[offset : offset + size].reshape(shape)."""

    layer: int  # index into Model.layers
    name: str  # key in the layer's param dict ("w", "b")
    shape: tuple
    offset: int
    size: int


class Model:
    """Layers in order, a loss, and checkpoint blocks.

    `checkpoint_blocks` are [start, stop) layer ranges that tile the layers in order. With activation
    checkpointing only each block's input is kept through the forward pass; backward recomputes a
    block's activations from it, one block at a time (default: one block holding every layer).
    `saved_blocks` are the checkpoint blocks that checkpointing leaves alone, as a module torch's checkpoint
    does not wrap: their layers keep their caches in forward and are not recomputed (a decoder's embedding and
    head, models/_decoder.py `saved_blocks`).
    """

    def __init__(self, layers: list[Layer], loss: Loss, checkpoint_blocks: list[tuple[int, int]] | None = None,
                 saved_blocks=()):
        self.layers = list(layers)
        self.loss = loss
        n = len(self.layers)
        self.checkpoint_blocks = [tuple(b) for b in (checkpoint_blocks or [(0, n)])]
        self.saved_blocks = frozenset(tuple(b) for b in saved_blocks)
        if not self.saved_blocks <= set(self.checkpoint_blocks):
            raise ValueError(f"saved_blocks {sorted(self.saved_blocks)} must be checkpoint blocks "
                             f"({self.checkpoint_blocks})")
        starts = [s for s, _ in self.checkpoint_blocks]
        stops = [e for _, e in self.checkpoint_blocks]
        if (
            n == 0
            or starts[0] != 0
            or stops[-1] != n
            or starts[1:] != stops[:-1]
            or any(e <= s for s, e in self.checkpoint_blocks)
        ):
            raise ValueError(f"checkpoint_blocks {self.checkpoint_blocks} must tile layers 0..{n} in order, none empty")
        self.specs: list[ParamSpec] = []
        self._windows: list[tuple[int, int]] = []
        offset = 0
        for i, layer in enumerate(self.layers):
            start = offset
            for name, shape in layer.param_shapes.items():
                size = math.prod(shape)
                self.specs.append(ParamSpec(i, name, tuple(shape), offset, size))
                offset += size
            self._windows.append((start, offset))
        self.num_params = offset

    @property
    def input_width(self) -> int | None:
        """D_in of the first layer that has a weight matrix (None if there is none)."""
        ws = [s.shape for s in self.specs if s.name == "w" and len(s.shape) == 2]
        return ws[0][1] if ws else None

    @property
    def output_width(self) -> int | None:
        """D_out of the last layer that has a weight matrix (None if there is none)."""
        ws = [s.shape for s in self.specs if s.name == "w" and len(s.shape) == 2]
        return ws[-1][0] if ws else None

    def check_batch(self, x, target) -> None:
        """Raise ValueError saying what is wrong with a micro-batch (x (B, D_in), target) for this model."""
        x = np.asarray(x)
        if x.ndim != 2 or (self.input_width is not None and x.shape[1] != self.input_width):
            raise ValueError(f"the input must have shape (batch, {self.input_width}), got {x.shape}")
        if x.shape[0] < 1:
            raise ValueError("a micro-batch needs at least one sample, got an empty one (its loss would be NaN)")
        if x.dtype.kind not in "iuf" and x.dtype.name != "bfloat16":
            raise ValueError(f"the input must be numeric, got dtype {x.dtype}")
        if not all_finite(x):
            raise ValueError("the micro-batch input contains NaN or inf")
        self.loss.check_target(target, x.shape[0], self.output_width)

    def layer_window(self, i: int) -> tuple[int, int]:
        """[start, stop) of layer i's parameters in the flat vector (start == stop for parameter-free layers)."""
        return self._windows[i]

    def layer_specs(self, i: int) -> list[ParamSpec]:
        return list(self._layer_specs()[i])

    def _layer_specs(self) -> tuple:
        """Each layer's specs, found once (every op of every rank unflattens its layer's weights)."""
        if getattr(self, "_by_layer", None) is None:
            by_layer = [[] for _ in self.layers]
            for s in self.specs:
                by_layer[s.layer].append(s)
            self._by_layer = tuple(tuple(x) for x in by_layer)
        return self._by_layer

    def unflatten(self, flat: np.ndarray, i: int) -> dict[str, np.ndarray]:
        """Views of layer i's parameters, by name, inside `flat`.

        `flat` is the whole (P,) vector, or just layer i's own window (stop - start,) — what a ZeRO-3
        all-gather of that layer produces. Writing to a view writes to `flat`.
        """
        start, stop = self._windows[i]
        if flat.ndim != 1 or len(flat) not in (self.num_params, stop - start):
            raise ValueError(f"layer {i}: expected a flat vector of {self.num_params} or {stop - start} elements, got "
                             f"shape {flat.shape}")
        base = 0 if len(flat) == self.num_params else start  # offsets are absolute in the whole vector
        return {s.name: flat[s.offset - base : s.offset - base + s.size].reshape(s.shape)
                for s in self._layer_specs()[i]}

    def pack(self, i: int, tensors: dict[str, np.ndarray]) -> np.ndarray:
        """Layer i's tensors by name (say, its grads) as one (stop - start,) vector in flat order; dtype kept."""
        parts = [tensors[s.name].reshape(-1) for s in self._layer_specs()[i]]  # numpy or a device's arrays: kept there
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def pack_ranks(self, i: int, tensors: dict, n: int):
        """`pack` of n ranks' tensors at once, each tensor {name: (n, ...)} holding rank r's at [r]: an (n, stop -
        start) array whose row r is `pack` of rank r's (the same elements in the same order, dtype kept: one
        concatenate for every rank, not one each; the layout `packed_ranks` gives a backward to write into, as
        `unflatten` is `pack`'s); None where a tensor is not such a host array (a list per rank).

        NOTE: a concatenate, not a copy into `packed_ranks`' array: the same bytes, but in portable_step.py's turns
        the copy moved the heap so that the native engine's 10M bf16 step met ~9,000 more page faults."""
        parts = []
        for s in self._layer_specs()[i]:
            t = tensors[s.name]
            if type(t) is not np.ndarray or t.ndim < 1 or t.shape[0] != n:
                return None
            parts.append(t.reshape(n, -1))
        return np.concatenate(parts, axis=1) if parts else None

    def packed_ranks(self, i: int, n: int, dtype) -> tuple:
        """(packed, views): an uninitialised (n, stop - start) array of `dtype` for n ranks' tensors of layer i, and
        its views by name, each (n, *shape), rank r's at [r] a C-contiguous view into row r where `pack` puts it.
        Each tensor at its offset in the layer's window, as `unflatten` finds it in one rank's (tests pin it to
        `pack_ranks`' concatenate, element for element): a backward writes its gradients there itself
        (parallel/data/_reduce.py `grads_room`)."""
        start, stop = self._windows[i]
        packed = np.empty((n, stop - start), dtype)  # (n, stop - start)
        return packed, {s.name: packed[:, s.offset - start:s.offset - start + s.size].reshape(n, *s.shape)
                        for s in self._layer_specs()[i]}

    def init_params(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Initial weights as a float32 (P,) vector; `rng` defaults to default_rng(0), so runs repeat."""
        rng = np.random.default_rng(0) if rng is None else rng
        flat = np.zeros(self.num_params, np.float32)  # (P,) fp32
        for i, layer in enumerate(self.layers):
            for name, value in layer.init(rng).items():
                self.unflatten(flat, i)[name][...] = value
        return flat

    def __repr__(self) -> str:
        body = ", ".join(map(repr, self.layers))
        return f"{type(self).__name__}([{body}], loss={self.loss!r}, P={self.num_params})"
