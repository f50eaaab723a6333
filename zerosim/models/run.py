"""The forward/backward driver the engines call, with activation checkpointing and per-layer hooks.

Letters: B batch, D widths, P parameters.

Hooks let an engine decide where parameters come from and where gradients go, layer by layer:
`get_params(i)` right before each use of layer i's weights (stage 3 all-gathers them here),
`release_params(i)` right after (stage 3 frees the gathered copy), `on_grads(i, grads)` as soon as layer
i's gradients exist (stage 2 reduce-scatters them at once). Parameter-free layers (ReLU, GELU) need no
weights and make no gradients, so no hook is called for them.

Checkpointing (seed 001 §5, seed 004 Stage 3): forward keeps only each block's input. Backward, block by
block from the last, re-runs the block's layers from that input to rebuild their caches — calling
`get_params` again, the extra all-gather seed 004 narrates — then backpropagates through the block. The
block's last layer is not re-run: its cache is its input, which the layer before it has just rebuilt,
and its output is not needed (seed 004 recomputes h and a, not y). A layer whose cache is more than its
input (`saves_input_only = False`) is re-run.

Memory: with a `ledger`, every array saved for backward (layer caches, block inputs, the loss's cache) is
adopted as kind "activations" and freed the moment backward consumes it. The tensor in flight (the
current activation going forward, the current gradient going backward) is not saved and not counted.
"""

from __future__ import annotations

import numpy as np

from zerosim.precision import cast, get_format

KIND = "activations"


class _Saved:
    """Tensors saved for backward, keyed; accounted in the ledger when there is one."""

    def __init__(self, ledger):
        self.ledger, self.items = ledger, {}

    def put(self, key: str, arrays: tuple) -> None:
        if self.ledger is not None:
            arrays = tuple(self.ledger.adopt(f"act:{key}:{k}", a, KIND) for k, a in enumerate(arrays))
        self.items[key] = arrays

    def pop(self, key: str) -> tuple:
        held = self.items.pop(key)
        if self.ledger is None:
            return held
        arrays = tuple(buf.array for buf in held)  # reading a freed buffer would raise: a use-after-free check
        for buf in held:
            buf.free()
        return arrays


def forward_backward(model, x, target, fmt, get_params, *, release_params=None, on_grads=None,
                     checkpoint: bool = False, ledger=None, loss_scale: float = 1.0, record=None) -> float:
    """Run one micro-batch forward and backward through `model` in compute format `fmt`.

    Args:
        x: (B, D_in) inputs (cast to fmt here); target: what `model.loss` expects.
        get_params(i): layer i's params by name, arrays in fmt; called before every use, recomputation included.
        release_params(i): called right after each use of layer i's params.
        on_grads(i, grads): called in backward order once layer i's grads exist (in fmt, times loss_scale).
        checkpoint: keep only block inputs in forward and recompute (see module doc).
        ledger: a MemoryLedger; saved tensors are allocated and freed in it as kind "activations".
        loss_scale: dy = cast(loss_scale * dL/dy, fmt), so every gradient is scaled by it.
        record: a list to append event dicts to ("forward", "checkpoint", "loss", "recompute", "backward").
    Returns: the unscaled loss as a Python float.
    """
    f = get_format(fmt)
    layers = model.layers
    saved = _Saved(ledger)
    emit = record.append if record is not None else (lambda event: None)

    def fetch(i: int) -> dict:
        if not layers[i].param_shapes:
            return {}
        p = get_params(i)
        for name, shape in layers[i].param_shapes.items():
            if p[name].dtype != f.dtype or p[name].shape != tuple(shape):
                raise TypeError(f"get_params({i}) gave {name} as {p[name].dtype}{p[name].shape}; "
                                f"layer {layers[i].name!r} computes in {f.name} with shape {tuple(shape)}")
        return p

    def release(i: int) -> None:
        if layers[i].param_shapes and release_params is not None:
            release_params(i)

    def run(i: int, a: np.ndarray, event: str) -> tuple[np.ndarray, tuple]:
        p = fetch(i)
        out, cache = layers[i].forward(p, a, f)
        release(i)
        emit({"event": event, "layer": i, "name": layers[i].name, "out": out})
        return out, cache

    a = cast(x, f)  # (B, D_in) the micro-batch in the compute format
    for start, stop in model.checkpoint_blocks:
        if checkpoint:
            saved.put(f"ckpt{start}", (a,))  # the block input: all that survives the forward pass
            emit({"event": "checkpoint", "layer": start, "block": (start, stop), "out": a})
        for i in range(start, stop):
            a, cache = run(i, a, "forward")
            if not checkpoint:
                saved.put(f"L{i}", cache)

    loss, loss_cache = model.loss.forward(a, target)
    saved.put("loss", loss_cache)
    emit({"event": "loss", "value": loss, "out": a})
    dy = model.loss.backward(saved.pop("loss"), f, scale=loss_scale)  # (B, D_out) in fmt

    for start, stop in reversed(model.checkpoint_blocks):
        if checkpoint:
            (a,) = saved.pop(f"ckpt{start}")  # ownership moves to the first layer's cache: no double count
            for i in range(start, stop - 1):
                out, cache = run(i, a, "recompute")
                saved.put(f"L{i}", cache)
                a = out
            if layers[stop - 1].saves_input_only:
                saved.put(f"L{stop - 1}", (a,))
            else:
                saved.put(f"L{stop - 1}", run(stop - 1, a, "recompute")[1])
        for i in reversed(range(start, stop)):
            p = fetch(i)
            dy, grads = layers[i].backward(p, dy, saved.pop(f"L{i}"), f)
            release(i)
            emit({"event": "backward", "layer": i, "name": layers[i].name, "grads": grads, "dx": dy})
            if grads and on_grads is not None:
                on_grads(i, grads)
    return loss


def loss_and_grad(model, params, x, target, fmt, *, checkpoint=False, ledger=None, loss_scale=1.0,
                  record=None) -> tuple[float, np.ndarray]:
    """One device's loss and flat (P,) gradient in fmt, from flat params (cast once to fmt)."""
    f = get_format(fmt)
    w = cast(params, f)  # (P,) compute copy
    grads = np.zeros(model.num_params, f.dtype)  # (P,) in fmt

    def collect(i, g):
        start, stop = model.layer_window(i)
        grads[start:stop] = model.pack(i, g)

    loss = forward_backward(model, x, target, f, lambda i: model.unflatten(w, i), on_grads=collect,
                            checkpoint=checkpoint, ledger=ledger, loss_scale=loss_scale, record=record)
    return loss, grads


def predict(model, params, x, fmt) -> np.ndarray:
    """Forward only, nothing saved: the model's (B, D_out) output in fmt, from flat params."""
    f = get_format(fmt)
    w = cast(params, f)  # (P,)
    a = cast(x, f)
    for i, layer in enumerate(model.layers):
        a, _ = layer.forward(model.unflatten(w, i), a, f)
    return a
