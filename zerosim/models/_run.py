"""One micro-batch through a model, op by op: the forward/backward driver engines and the oracle share.

Letters: B batch, D widths, P parameters.

A `Pass` is one micro-batch in flight on one worker (a rank, or the single device): the activation
going forward, the gradient coming back, and the tensors saved for backward. `Pass.run(op, params)`
does one op of `schedule(model, checkpoint)` (_schedule.py) and returns what it made: the layer's
gradients (backward) and what the op cost (FLOPs, bytes read and written). A ZeRO engine calls it
for every rank, layer by layer, with whatever weights its stage provides (stage 3: the gathered
window); `forward_backward` calls it alone, for one device.

Memory: with a `ledger`, every tensor saved for backward (a layer's cache, a checkpointed block
input, the loss's cache) is adopted as kind "activations", named f"{layer.name}.{what}" (what the
layer calls it: "input", "Q", "P", ...), and freed the moment backward consumes it. The tensor in
flight (the current activation going forward, the current gradient going backward) is not saved
and not counted.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.cluster import adopt_ranks, free_ranks
from zerosim.models._schedule import Op, needs_params, schedule
from zerosim.models._spaces import zeros_like_space
from zerosim.precision import cast, get_format

KIND = "activations"


@dataclass(frozen=True)
class Done:
    """What one op made and cost: the layer's gradients (backward only) and its FLOPs and bytes."""

    grads: dict | None
    flops: int
    bytes_read: int
    bytes_written: int
    values: dict | None = None  # copies of what it computed, when the pass keeps values


def done(grads, flops: int, bytes_read: int, bytes_written: int, values=None) -> Done:
    """`Done(...)` without the frozen dataclass's `__init__` (one `object.__setattr__` per field): every op of every
    rank makes one."""
    made = _new(Done)
    made.__dict__.update(grads=grads, flops=flops, bytes_read=bytes_read, bytes_written=bytes_written, values=values)
    return made


_new = object.__new__


def _kept(a):
    """A copy of what an op made, for narration: an array's, or a bundle's parts by name (tensor parallelism hands
    the residual stream on beside the value: parallel/tensor/_bundle.py)."""
    return a.snapshot() if hasattr(a, "snapshot") else np.array(a)


def backward_shape(cache: dict, dy) -> tuple:
    """The shape a unit's backward computes on, which its `flops` reads: the input a parallelism gathered again for it
    (sequence parallelism's column GEMMs, which save no input of their own: `dy.input`, parallel/tensor's Bundle),
    else the first tensor its forward saved, else its gradient's."""
    again = getattr(dy, "input", None)
    if again is not None:
        return again.shape
    return next(iter(cache.values())).shape if cache else dy.shape


def _nbytes(*arrays) -> int:
    total = 0
    for a in arrays:
        if a is not None:
            total += int(a.nbytes)
    return total


def _as_dict(cache) -> dict:
    """A layer's cache by name: {what: array}, as layers and losses return it."""
    if not isinstance(cache, dict):
        raise TypeError(f"a layer's cache must be a dict {{name: array}}, got {type(cache).__name__}")
    return cache


class _Saved:
    """Tensors saved for backward, keyed; each one a ledger buffer when there is a ledger."""

    def __init__(self, ledger, tag: str = ""):
        self.ledger, self.items, self.tag = ledger, {}, tag

    def put(self, key, prefix: str, cache) -> None:
        named = cache if type(cache) is dict else _as_dict(cache)
        ledger = self.ledger
        if ledger is not None:
            adopt, tag = ledger.adopt, self.tag
            named = {k: adopt(f"{tag}{prefix}.{k}", a, KIND) for k, a in named.items()}
        self.items[key] = named

    def peek(self, key) -> dict:
        """The arrays `pop(key)` will give, not freed yet (a freed buffer raises, as in `pop`)."""
        held = self.items[key]
        if self.ledger is None:
            return held
        if len(held) == 1:  # one tensor: its dict made as it is, no comprehension
            ((what, buf),) = held.items()
            return {what: buf.array}
        return {k: buf.array for k, buf in held.items()}

    def pop(self, key) -> dict:
        held = self.items.pop(key)
        if self.ledger is None:
            return held
        arrays = {k: buf.array for k, buf in held.items()}  # reading a freed buffer raises: a use-after-free check
        free = self.ledger.free  # each buffer's own ledger's: `Buffer.free`, one call fewer
        for buf in held.values():
            free(buf)
        return arrays

    def nbytes(self, key) -> int:
        return sum(int(a.nbytes) for a in self.items[key].values())


def put_ranks(saves: list, key, prefix: str, whats: tuple, arrays: list) -> list:
    """`saves[i].put(key, prefix, dict(zip(whats, [a[i] for a in arrays])))` for every pass's `_Saved` in one go (n
    passes: the ranks' stacked landing, models/_stacked.py; `arrays`: per what, the n passes' arrays): each ledger as
    its own `put` leaves it. Returns the ledger events, a list of n per what (cluster/_ledger.py `adopt_ranks`), for
    the caller to record in rank order (`Trace.record_ranks`): a rank's `put` adopts its whats in order. Every pass
    has a ledger, or none does (nothing is recorded then: [])."""
    if saves[0].ledger is None:
        for i, saved in enumerate(saves):
            saved.items[key] = {what: a[i] for what, a in zip(whats, arrays)}
        return []
    ledgers, columns, held = [saved.ledger for saved in saves], [], []
    for what, column in zip(whats, arrays):
        # each name made afresh, as `put` makes it: one string object per rank (a log pickles the same bytes)
        names = [f"{saved.tag}{prefix}.{what}" for saved in saves]
        buffers, events = adopt_ranks(ledgers, names, column, KIND)
        held.append(buffers)
        columns.append(events)
    if len(whats) == 1:  # one tensor (a Linear's input, a ReLU's): its dict made as it is
        what = whats[0]
        for saved, buf in zip(saves, held[0]):
            saved.items[key] = {what: buf}
    else:
        for saved, bufs in zip(saves, zip(*held)):
            saved.items[key] = dict(zip(whats, bufs))
    return columns


def drop_ranks(saves: list, key) -> list:
    """`saves[i].pop(key)` for every pass's `_Saved` in one go, where its arrays were read already (`peek`) and are
    not wanted again, as `put_ranks` puts them: each what's buffers freed, in `pop`'s order, the events returned, a
    list of n per what (cluster/_ledger.py `free_ranks`), for the caller to record in rank order. Every pass kept the
    same whats under `key` (the ranks' landing of one op put them)."""
    held = [saved.items.pop(key) for saved in saves]
    if saves[0].ledger is None:
        return []
    first = held[0]
    if any(h.keys() != first.keys() for h in held):
        raise ValueError(f"the passes kept different tensors under {key!r}: they cannot be freed together")
    return [free_ranks([h[what] for h in held]) for what in first]


class Pass:
    """One micro-batch (x, target) going forward and backward through `model` in compute format `fmt`.

    Args:
        x: (B, D_in) inputs, cast to fmt here (integer inputs, such as token ids, pass unchanged).
        ledger: a MemoryLedger; saved tensors are allocated and freed in it as kind "activations".
        loss_scale: dy = cast(loss_scale * dL/dy, fmt), so every gradient is scaled by it.
        keep_values: copy each op's output (and gradients) into `Done.values`, for narration.
        tag: put before the name of everything it keeps in the ledger, where several micro-batches are in flight on
            one rank at once (a pipeline stage's: "micro 3: fc0.input"); "" (default) for one at a time.
    """

    def __init__(self, model, x, target, fmt, *, ledger=None, loss_scale: float = 1.0, keep_values: bool = False,
                 tag: str = "", _cast: bool = True):
        self.model, self.target, self.fmt = model, target, get_format(fmt)
        self.loss_scale, self.keep_values = loss_scale, keep_values
        self.saved = _Saved(ledger, tag)
        self.waiting = {}  # layer -> (its weight gradients, their FLOPs): a backward-input's, until its backward-weight
        # _cast=False: x is in the compute format already (`passes_of` cast every rank's at once)
        integer = not _cast or getattr(x, "dtype", None) is not None and np.dtype(x.dtype).kind in "iub"
        self.a = x if integer else cast(x, self.fmt)  # (B, D_in) the micro-batch in the compute format
        self.dy = None  # (B, D) the gradient coming back, once the loss has run
        self.loss = None  # the unscaled loss, a Python float
        # on a stacked run's first pass: the stacked arrays the ranks' rows were cut from, by what they are ("a",
        # "dy", ("saved", layer)), for the next op that would stack them again (models/_stacked.py `_stack`)
        self.stacks = {}

    def _selective(self, layer, x) -> dict:
        """What an op-level selective checkpoint keeps besides the block input (models/meta/_sac.py), when the model's
        strategy is "op-sac"; {} otherwise."""
        if getattr(self.model, "checkpoint", None) != "op-sac":
            return {}
        return getattr(layer, "checkpoint_keep", lambda x, fmt: _no_selective(layer, x, fmt))(x, self.fmt)

    def multiplied(self, op: Op):
        """The tensor in flight that `op` multiplies by its layer's weights as it comes (`Layer.multiplies_input`):
        the activation going forward (a forward or recompute that starts from it), the gradient coming back (a
        backward); None for any other op or layer."""
        if op.layer < 0 or not getattr(self.model.layers[op.layer], "multiplies_input", False):
            return None
        if op.kind == "backward":
            return self.dy
        return self.a if op.kind in ("forward", "recompute") and not op.from_checkpoint else None

    def run(self, op: Op, params: dict) -> Done:
        """Do `op` with layer weights `params` (by name, in fmt; {} when the op needs none)."""
        f, model = self.fmt, self.model
        if op.kind == "loss":
            y = self.a
            self.loss, cache = model.loss.forward(y, self.target, f)
            self.saved.put("loss", "loss", cache)
            self.dy = model.loss.backward(self.saved.pop("loss"), f, scale=self.loss_scale)  # (B, D_out) fmt
            values = {"loss": self.loss, "out": y.copy()} if self.keep_values else None
            return done(None, model.loss.flops(y.shape), _nbytes(y), _nbytes(self.dy), values)
        layer = model.layers[op.layer]
        if op.from_checkpoint:
            self.a = self.saved.pop(("checkpoint", op.layer))["block input"]
        if op.kind == "keep input":  # the block's last layer needs only its input, which is already here
            self.saved.put(op.layer, layer.name, {"input": self.a})
            return done(None, 0, 0, 0)
        read = _nbytes(*params.values())
        if op.kind in ("backward-input", "backward-weight"):
            return self._split(op, layer, params, read)
        if op.kind == "backward":
            cache = self.saved.pop(op.layer)
            read += _nbytes(self.dy, *cache.values())
            x_shape = backward_shape(cache, self.dy)
            self.dy, grads = layer.backward(params, self.dy, cache, f)
            values = (
                {"grads": {k: np.array(v) for k, v in grads.items()}, "dx": _kept(self.dy)}
                if self.keep_values
                else None
            )
            return done(grads, layer.flops(x_shape, "backward"), read, _nbytes(self.dy, *grads.values()), values)
        x = self.a  # forward or recompute
        if op.checkpoint:
            self.saved.put(("checkpoint", op.layer), layer.name, {"block input": x, **self._selective(layer, x)})
        out, cache = layer.forward(params, x, f)
        if op.save:
            self.saved.put(op.layer, layer.name, cache)
        self.a = out
        values = {"out": _kept(out)} if self.keep_values else None
        return done(None, layer.flops(x.shape, "forward"), read + _nbytes(x), _nbytes(out), values)


    def _split(self, op: Op, layer, params: dict, read: int) -> Done:
        """Zero bubble's backward in two (models/_schedule.py `split_backward`). "backward-input" runs the layer's
        backward whole (the same bits as one backward: dW = dyᵀ·x is the same product made now or later), hands dx on
        and keeps the weights' gradients, in the ledger as "grads" named "<layer>.<param> (waiting for W)", until its
        "backward-weight" hands them on. FLOPs: half the backward's to each for a layer with weights (the paper's
        T_B = T_W; exactly so for a Linear, whose dx and dW are products of one size), all to the input's otherwise.
        NOTE: a split backward keeps the layer's input and dy until W instead (what dW is made from); zerosim keeps
        dW itself, which the ledger shows."""
        if op.kind == "backward-weight":
            grads, weight = self.waiting.pop(op.layer)
            held = grads if self.saved.ledger is None else {k: b.array for k, b in grads.items()}
            for b in (grads.values() if self.saved.ledger is not None else ()):
                b.free()
            return done(held, weight, _nbytes(*held.values()), _nbytes(*held.values()))
        cache = self.saved.pop(op.layer)
        read += _nbytes(self.dy, *cache.values())
        x_shape = backward_shape(cache, self.dy)
        self.dy, grads = layer.backward(params, self.dy, cache, self.fmt)
        flops = layer.flops(x_shape, "backward")
        weight = flops // 2 if grads else 0
        if grads:
            ledger = self.saved.ledger
            self.waiting[op.layer] = ({k: ledger.adopt(f"{self.saved.tag}{layer.name}.{k} (waiting for W)", g, "grads")
                                       for k, g in grads.items()} if ledger is not None else grads), weight
        return done(None, flops - weight, read, _nbytes(self.dy))


def passes_of(model, batches: list, fmt, ledgers: list, *, loss_scale: float = 1.0, keep_values: bool = False,
              tag: str = "") -> list:
    """[Pass(model, x, target, fmt, ledger=ledgers[i], ...) for i, (x, target) in enumerate(batches)]: a `Pass` per
    rank's micro-batch, their inputs cast to `fmt` in one go where every x is a float NumPy array of one 2-D shape
    and dtype: a cast rounds each element alone, so rank i's rows of the cast stack are the bits its own cast gives
    (tests/test_stacked_ranks.py). Each pass's input is then a view of that stack, remembered on the first pass for
    the first op that would stack them again (models/_stacked.py `_stack`)."""
    f = get_format(fmt)
    xs = [x for x, _ in batches]
    first = xs[0] if xs else None
    if (len(xs) < 2 or type(first) is not np.ndarray or first.ndim != 2 or first.dtype.kind in "iub"
            or any(type(x) is not np.ndarray or x.shape != first.shape or x.dtype != first.dtype for x in xs)):
        return [Pass(model, x, target, f, ledger=ledger, loss_scale=loss_scale, keep_values=keep_values, tag=tag)
                for ledger, (x, target) in zip(ledgers, batches)]
    stack = cast(np.concatenate(xs), f)  # (n·B, D_in) every rank's rows, rank by rank
    inputs = list(stack.reshape(len(xs), *first.shape))  # rank i's (B, D_in), a view of the stack
    passes = [Pass(model, a, target, f, ledger=ledger, loss_scale=loss_scale, keep_values=keep_values, tag=tag,
                   _cast=False) for ledger, a, (_, target) in zip(ledgers, inputs, batches)]
    if stack.flags.c_contiguous:
        passes[0].stacks["a"] = (inputs, stack)
    return passes


def _no_selective(layer, x, fmt):
    raise ValueError(f"op-level selective checkpointing ('op-sac') is modelled on the data-less twins (zerosim memory, "
                     f"timeline and plan), not run with values: unit {layer.name!r} cannot keep its products' outputs")


def forward_backward(model, x, target, fmt, get_params, *, on_grads=None, checkpoint: bool = False, ledger=None,
                     loss_scale: float = 1.0, events: list | None = None) -> float:
    """Run one micro-batch forward and backward through `model` on one device, in compute format `fmt`.

    Args:
        get_params(i): layer i's params by name, arrays in fmt; called before every op that reads them.
        on_grads(i, grads): called in backward order once layer i's grads exist (in fmt, times loss_scale).
        checkpoint: keep only block inputs in forward and recompute (_schedule.py).
        ledger: a MemoryLedger; saved tensors are allocated and freed in it as kind "activations".
        events: a list to append (op, Done) pairs to, with values kept (for tests and narration).
    Returns: the unscaled loss as a Python float.
    """
    f = get_format(fmt)
    work = Pass(model, x, target, f, ledger=ledger, loss_scale=loss_scale, keep_values=events is not None)
    for op in schedule(model, checkpoint):
        params = get_params(op.layer) if needs_params(model, op) else {}
        if params:
            _check_params(model, op.layer, params, f)
        done = work.run(op, params)
        if events is not None:
            events.append((op, done))
        if done.grads and on_grads is not None:
            on_grads(op.layer, done.grads)
    return work.loss


def _check_params(model, i: int, p: dict, f) -> None:
    for name, shape in model.layers[i].param_shapes.items():
        if p[name].dtype != f.dtype or p[name].shape != tuple(shape):
            raise TypeError(f"get_params({i}) gave {name} as {p[name].dtype}{p[name].shape}; "
                            f"layer {model.layers[i].name!r} computes in {f.name} with shape {tuple(shape)}")


def loss_and_grad(model, params, x, target, fmt, *, checkpoint=False, ledger=None, loss_scale=1.0,
                  events=None) -> tuple[float, np.ndarray]:
    """One device's loss and flat (P,) gradient in fmt, from flat params (cast once to fmt)."""
    f = get_format(fmt)
    w = cast(params, f)  # (P,) compute copy
    grads = zeros_like_space(w, (model.num_params,), f.dtype)  # (P,) in fmt, where the params live

    def collect(i, g):
        start, stop = model.layer_window(i)
        grads[start:stop] = model.pack(i, g)

    loss = forward_backward(model, x, target, f, lambda i: model.unflatten(w, i), on_grads=collect,
                            checkpoint=checkpoint, ledger=ledger, loss_scale=loss_scale, events=events)
    return loss, grads


def predict(model, params, x, fmt) -> np.ndarray:
    """Forward only, nothing saved: the model's (B, D_out) output in fmt, from flat params."""
    f = get_format(fmt)
    w = cast(params, f)  # (P,)
    work = Pass(model, x, None, f)
    for i, layer in enumerate(model.layers):
        work.run(Op("forward", i, save=False), model.unflatten(w, i) if layer.param_shapes else {})
    return work.a
