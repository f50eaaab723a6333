"""The single-device oracle: what every ZeRO stage must equal, bit for bit.

One device runs each micro-batch's forward/backward the same way the ranks do (the same schedule of
ops, models/_schedule.py), reduces the N gradients with the naive twin in the ring's order and dtypes
(`naive_reduce(order="ring")`, which shares no code with the ring or the engines' collectives; NCCL's
all-reduce chunk map with allreduce="nccl"), accumulates, averages and unscales, skips the steps its own loss
scaler skips (an inf or NaN anywhere in the reduced gradient), clips by the global norm summed over the same N
shards in the same order, and runs the same optimizer over the whole flat vector. Because the optimizers are
elementwise and the reduction order is the ring's, the fp32 masters, optimizer states and 16-bit params equal
every stage's exactly.

Each recipe's reduction it writes again in its own plain code, the naive twin of parallel/data/recipes/: what
each framework does before the wire and after the sum, the averaging by N·K (_recipes.py); who owns each element
and so where its ring sum ends, the buckets of DDP and DeepSpeed and each call's chunk map (_chunk_maps.py);
clipping's norm and coefficient (_clip.py). A bug in the engine's recipe code is then caught, not agreed with.

What it shares with the engines, and so does not check: the arithmetic kernels (casts, the models' forward and
backward on the portable products, the optimizers' elementwise math, the loss scalers), the collectives' chunk
maps of NCCL and gloo, the configuration records it is handed (GradientRecipe's name, a strategy's plan, DDP's
caps), and the layout's shard order where copies move in it (the quantized gather, HSDP's and MiCS's second
level). What it checks: sharding, the ring and its chunk bookkeeping, the recipes, buckets and prefetch,
accumulation across micro-steps, and the step's order of events. Fidelity to the frameworks is checked against
their source and hand-derived tables (tests/test_recipes.py).

`Reference.float64(...)` is the second check: the same micro-batches in float64 end to end, no
rounding to speak of, to measure how far low precision drifts.
"""

from __future__ import annotations

import numpy as np

from zerosim.collectives import naive_reduce
from zerosim.models import forward_backward
from zerosim.optim import Optimizer, OptimizerRun, check_stored, step_by_matrix, step_in_blocks, widened
from zerosim.parallel.data import get_plan, skips_steps
from zerosim.parallel.data.layouts import layout_for
from zerosim.parallel.data.multinode import default_recipe
from zerosim.parallel.data.recipes import DDPBuckets, GradientRecipe
from zerosim.precision import cast, get_precision
from zerosim.precision.cast import ArrayNamespace
from zerosim.reference import _chunk_maps as maps
from zerosim.reference import _clip as clipping
from zerosim.reference import _recipes as recipes
from zerosim.reference._mesh_reduce import reduce_on_mesh
from zerosim.reference._wire import WireOracle

# The speed yardstick ("ring-native") steps an elementwise optimizer over the flat vector in blocks
# (optim/_base.py `step_in_blocks`, STEP_BLOCK elements): the same bits as one whole-vector step, each temporary
# in cache. The engines step each rank's shard the same way (parallel/data/_update.py).


class Reference:
    """One device, N × K micro-batches per step, the same numerics as a ZeRO engine on N ranks.

    Args:
        model, optimizer, precision: as for `ZeroEngine`.
        world_size: N, the ranks whose micro-batches one step takes (and whose padding it copies).
        params: initial fp32 weights (P,); default `model.init_params()`.
        accumulation_steps: K micro-batches per rank per step.
        reduce_every_micro_step: where the sums happen with K > 1 — False (stages 0/1): each rank's K
            gradients are accumulated locally, then reduced once; True (stages 2/3): the N gradients
            of each micro-step are reduced, and the reduced results accumulated. In 16-bit formats the
            two orders give different bits (tests/test_accumulation.py shows by how much).
        order: how the naive twin adds, in the ring's order: "ring" (default): each add formed exactly in
            float64 and rounded once to the wire format — code that shares nothing with the engines' ring;
            "ring-native": the same adds by NumPy in the wire dtype, and an elementwise optimizer stepped in
            cache-sized blocks: the same bits, as fast as NumPy can (the speed yardstick in benchmarks/engine.py).
            (Which recipe reduces is `recipe`'s.)
        clip_grad, clip_norm: clip to this global norm, summed as `ZeroEngine(clip_grad=..., clip_norm=...)`.
        recipe: the `GradientRecipe` (or its name), as `ZeroEngine(recipe=...)`; default the one the policy names.
        wire: a `zeropp.Wire`, as `ZeroEngine(wire=...)`: each unit computes with its weights quantized as the
            stage-3 gather sends them (_wire.py).
        optimizer_calls: "whole" (one optimizer call over the flat vector, as stage 0's ranks each make) or "shards"
            (one call per rank's shard, as stages 1-3 make): an optimizer whose arithmetic depends on where a call
            ends (DeepSpeed's CPU Adam: its scalar tail, optim/_cpu_adam.py) then gives the engine's bits.
        reduce_bucket_size: the engine's `CommSchedule.reduce_bucket_size`, where a bucket's bounds change bits:
            "deepspeed-zero12" all-reduces each bucket whole (the oracle forms the buckets by parameter with DeepSpeed's
            ipg rule, _chunk_maps.py, and sums each in the all-reduce's order over the bucket).
        ddp: the engine's `CommSchedule.ddp` (DDP's bucket caps) for the `ddp` recipe: the first step all-reduces one
            bucket in registration order, later steps DDP's rebuilt buckets (_chunk_maps.py), each in its own
            all-reduce's chunk map.
        strategy, shard_group: a strategy for many nodes and its group size S, as `ZeroEngine(stage=..., shard_group=)`
            (parallel/data/_plan.py STRATEGIES): HSDP and MiCS reduce in two levels (_mesh_reduce.py); the others
            reduce as stage 3 (their secondary pieces and kept units move copies, never a sum).
        device: an `ArrayNamespace` (a cupy-sim cluster's `cluster.backend.xp`) on which each micro-batch's
            forward and backward run, with the batches' arrays on that device, as an engine on that backend runs
            them; the reduction, scaler, clipping and optimizer stay on the host (they equal the device's bit for
            bit: tests/gpu/test_device_ranks.py). Default: the host.

    `decisions` lists the loss scaler's `StepDecision` of every step; `norms` the global norm of every
    clipped step.
    """

    def __init__(self, model, optimizer, precision="fp16-mixed", world_size: int = 1, params=None,
                 accumulation_steps: int = 1, reduce_every_micro_step: bool = False, order: str = "ring",
                 clip_grad: float | None = None, recipe=None, wire=None, reduce_bucket_size: int | None = None,
                 strategy=None, shard_group: int | None = None, ddp: DDPBuckets | None = None,
                 clip_norm: str = "shards", device=None, optimizer_calls: str = "whole"):
        if not hasattr(model, "layers") or not hasattr(model, "num_params"):
            raise TypeError(f"model must be a zerosim.models.Model (e.g. MLP([16, 64, 4])), got {model!r}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"optimizer must be a zerosim.optim optimizer (e.g. Adam(lr=1e-3)), got {optimizer!r}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}")
        if isinstance(accumulation_steps, bool) or not isinstance(accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be a positive integer, got {accumulation_steps!r}")
        self.model, self.optimizer = model, optimizer
        if optimizer_calls not in ("whole", "shards"):
            raise ValueError(f"optimizer_calls must be 'whole' or 'shards', got {optimizer_calls!r}")
        self.optimizer_calls = optimizer_calls
        # forward/backward on a device (an ArrayNamespace, e.g. a cupy-sim backend's `xp`) with the host's arithmetic
        # for the rest: the matmuls as the engine on that device runs them (cuBLAS is not OpenBLAS)
        if device is not None and not isinstance(device, ArrayNamespace):
            raise TypeError(f"device must be an ArrayNamespace (a cupy-sim cluster's `cluster.backend.xp`), "
                            f"got {device!r}")
        self.device = None if device is None or device.is_numpy else device
        self.precision = get_precision(precision)
        self.world_size, self.accumulation_steps = world_size, accumulation_steps
        self.reduce_every_micro_step = reduce_every_micro_step
        if order not in ("ring", "ring-native"):
            raise ValueError(f"order must be 'ring' or 'ring-native', got {order!r}")
        self.order = order
        self.clip_grad, self.clip_norm = clipping.check(clip_grad, clip_norm)
        self.reduce_bucket_size = reduce_bucket_size
        self.ddp = DDPBuckets() if ddp is None else ddp
        self.ddp_rebuilt = False  # as the engine's: DDP's buckets are rebuilt after the first reduction
        init = model.init_params() if params is None else np.asarray(params)
        # Pad like the engines so both run the optimizer over the same (N*s,) vector.
        self.padded = maps.ceil_div(model.num_params, world_size) * world_size
        self._set_recipe(strategy, recipe, shard_group)
        self._set_buffers(init, wire)

    def _set_recipe(self, strategy, recipe, shard_group) -> None:
        """The plan and gradient recipe, the shard groups, and who owns which element (the ring order of its sum)."""
        world_size = self.world_size
        self.plan = None if strategy is None else get_plan(strategy)
        if self.plan is not None:
            recipe = default_recipe(self.plan, self.precision, recipe)
        self.recipe = GradientRecipe.of(self.precision, recipe)  # the configuration: a recipe's name, a chunk map
        self.twin = recipes.TWINS[self.recipe.reduction]  # what the recipe does, in the oracle's own code
        shards = world_size
        if self.plan is not None:
            self.reduce_every_micro_step = self.plan.reduces_per_unit
            if self.plan.sharded_over != "world":
                if shard_group is None or world_size % shard_group:
                    raise ValueError(f"{self.plan.label} needs shard_group=S dividing world_size {world_size}, got "
                                     f"{shard_group!r}")
                shards = shard_group
        # who owns which element: the ring order of its sum (over each shard group's S ranks with HSDP and MiCS);
        # the engine's layout only for what moves copies in shard order (the quantized gather, HSDP's second level)
        self.owners = maps.owner_chunks(self.model.specs, shards, self.twin.partition, self.padded)
        self.layout = layout_for(self.model, shards, self.recipe)

    def _set_buffers(self, init, wire) -> None:
        """The (N*s,) params, master and optimizer states from `init`, the loss scaler, and the quantized wire."""
        wide = np.zeros(self.padded, dtype=np.float64)
        wide[: self.model.num_params] = init.astype(np.float64)
        p = self.precision
        self.params = cast(wide, p.compute_format)  # (N*s,) compute format
        self.master_buf = cast(wide, p.master_format) if p.master_format is not None else None  # (N*s,) fp32
        check_stored(self.optimizer, p.state_format, p.update_format)
        # (N*s,) per state name, in its storage format (the update format, or optim_state's 16 bits)
        self.state = {k: np.zeros(self.padded, dtype=p.state_format.dtype) for k in self.optimizer.state_names}
        self.t = 0  # optimizer steps taken (skipped steps take none)
        self.optimizer_run = OptimizerRun()  # where this oracle's run of steps began (after set_state: past 1)
        self.scaler = p.make_scaler()
        self.decisions, self.norms = [], []
        quantized = wire is not None and wire.gathers_quantized
        self.wire = WireOracle(wire, self.layout, self.world_size) if quantized else None

    @classmethod
    def float64(cls, model, optimizer, world_size: int = 1, params=None, accumulation_steps: int = 1) -> "Reference":
        """The float64 yardstick: compute, reduction and optimizer all in float64."""
        return cls(model, optimizer, "fp64", world_size, params, accumulation_steps)

    def layer_params(self, layer: int) -> dict:
        if self.wire is not None:  # the weights as the quantized gather delivers them
            fmt = self.precision.compute_format
            window = self.wire.window(self._arranged[0], self._arranged[1], layer, fmt)
            return self.model.unflatten(self.layout.from_wire(*self.layout.windows[layer], window), layer)
        params = {
            s.name: self.params[s.offset : s.offset + s.size].reshape(s.shape)
            for s in self.model.specs
            if s.layer == layer
        }
        return params if self.device is None else {k: self.device.from_host(v) for k, v in params.items()}

    def gradient(self, x, target) -> tuple:
        """(loss, flat (N*s,) gradient in the compute format) of one micro-batch."""
        grad = np.zeros(self.padded, dtype=self.precision.compute_format.dtype)

        def keep(layer, grads):
            for s in self.model.specs:
                if s.layer == layer:
                    g = grads[s.name] if self.device is None else self.device.to_host(grads[s.name])
                    grad[s.offset : s.offset + s.size] = np.asarray(g).reshape(-1)

        loss = forward_backward(self.model, x, target, self.precision.compute_format, self.layer_params,
                                on_grads=keep, loss_scale=self.scaler.scale)
        return loss, grad

    def _reduce(self, grads: list) -> np.ndarray:
        """N flat gradients -> their reduction in the ring's order and wire format, as the recipe keeps it
        (no averaging by N·K yet). With allreduce="nccl" (the all-reduce of stage 0) in NCCL's chunk map."""
        p, n, how = self.precision, len(grads), self.recipe.allreduce
        chunks, direction, real, size = None, 1, self.model.num_params, p.reduce_format.itemsize
        params = maps.registration(self.model.specs)
        if self.recipe.reduction == "ddp":  # DDP: each bucket its own all-reduce, in flat coordinates
            chunks = [(0, real, self.padded)]
            for bucket in maps.ddp_buckets(params, p.compute_format.itemsize, maps.ddp_caps(self.ddp),
                                           self.ddp_rebuilt):
                more, direction = maps.in_flat([(0, a, b) for _, a, b in bucket], n, size, how)
                chunks += more
            self.ddp_rebuilt = True
        elif self.twin.collective == "bucket all-reduce":  # DeepSpeed ZeRO-1/2: each call's own chunk map
            chunks = [(0, real, self.padded)]
            s = self.padded // n
            for bucket in self._buckets(params):
                for call in maps.calls(maps.owner_slices([(a, b) for _, a, b in bucket], s), self.reduce_bucket_size):
                    more, direction = maps.in_flat(call, n, size, how)
                    chunks += more
        elif self.twin.collective == "aligned all-reduce":  # BF16_Optimizer: the (L,) buffer in one call
            chunks, direction = maps.aligned_chunks(real, self.padded, n, size, how)
        elif how == "nccl" or (how == "gloo" and not self.reduce_every_micro_step):  # stage 0: one call over P
            chunks, direction = maps.call_chunks(real, n, size, how)
            chunks.append((0, real, self.padded))
        else:  # the owners: the flat shards, or each parameter's chunks
            chunks = self.owners
        reduced = naive_reduce(recipes.wire_inputs(grads, self.twin, p, n), op="sum", wire=p.reduce_format,
                               order=self.order, chunks=chunks, direction=direction)
        return recipes.after(reduced, self.twin, n, p)

    def _buckets(self, params: list) -> list:
        """The engine's gradient buckets of (unit, a, b) parameters in the order they joined: gradient-ready order
        by DeepSpeed's ipg rule; stage 1 without a bucket size: one bucket of every parameter in flat order."""
        if not self.reduce_every_micro_step and self.reduce_bucket_size is None:
            return [params]
        return maps.ipg_buckets(list(reversed(params)), self.reduce_bucket_size)

    def reduce(self, grads: list) -> np.ndarray:
        """N micro-batch gradients (K = 1) -> the averaged, unscaled gradient in the update format (N*s,)."""
        return recipes.finish(self._reduce(grads), self.twin, self.precision, len(grads), 1, self.scaler.scale)

    def step(self, batches) -> list:
        """One step on N micro-batches (K = 1: one (x, target) per rank), or N lists of K of them.
        Returns each rank's loss (the mean over its K micro-batches)."""
        losses = [[] for _ in range(self.world_size)]
        reduced = self.reduce_step(batches, losses)
        return self.apply_step(reduced, losses)

    def reduce_step(self, batches, losses: list) -> np.ndarray:
        """The step up to the reduced gradient (N*s,), not yet averaged: each rank's micro-batches forward and
        backward (their losses appended to `losses[r]`), reduced in the engines' order and dtypes."""
        K, N, p = self.accumulation_steps, self.world_size, self.precision
        if len(batches) != N:
            raise ValueError(f"the reference was built for {N} ranks' micro-batches per step, got {len(batches)}")
        micro = [[b] if K == 1 and len(b) == 2 and not isinstance(b[0], (list, tuple)) else list(b) for b in batches]
        if any(len(m) != K for m in micro):
            raise ValueError(f"each rank needs {K} micro-batches (accumulation_steps={K})")
        if self.wire is not None:  # shard-order copies the step's gathers cut, and its fp8 scales
            P = self.model.num_params
            high = self.master_buf if self.master_buf is not None else self.params
            self._arranged = (self.layout.arrange(self.params[:P]), self.layout.arrange(high[:P]))
            self.wire.begin_step(self._arranged[1])
        with np.errstate(over="ignore", invalid="ignore"):  # NOTE: overflow is silent, as on a GPU; found below
            if self.plan is not None and self.plan.replicate is not None:  # HSDP, MiCS: two levels
                grads = [[self._keep_loss(losses[r], self.gradient(*micro[r][k])) for r in range(N)] for k in range(K)]
                reduced = reduce_on_mesh(grads, p, self.recipe, self.layout, self.plan, self.model.num_params,
                                         self.order)
            else:
                acc = self._accumulate(micro, losses, K, N, p)
                reduced = acc if self.reduce_every_micro_step else self._reduce(acc)
        return reduced

    def apply_step(self, reduced: np.ndarray, losses: list, found: bool | None = None) -> list:
        """The rest of the step from the reduced gradient: the scaler's decision (on `found`, an inf or NaN anywhere:
        default, in `reduced`), averaging, clipping, the optimizer. Returns each rank's mean loss."""
        K, N, p = self.accumulation_steps, self.world_size, self.precision
        found = not np.all(np.isfinite(reduced.astype(np.float64))) if found is None else found
        if skips_steps(self.scaler):
            decision = self.scaler.update(found)  # the engines' flag, seen whole
            self.decisions.append(decision)
            if decision.skip:
                return [float(np.mean(np.asarray(l, dtype=np.float64))) for l in losses]
        elif found:
            raise FloatingPointError("reduced gradient contains NaN or inf; no state was changed")
        else:
            self.decisions.append(self.scaler.update(False))
        g = recipes.finish(reduced, self.twin, p, N, K, self.decisions[-1].scale_before)
        if self.clip_grad is not None and self.clip_norm == "torch":  # clip_grad_norm_ on the whole gradient
            self.norms.append(clipping.torch_norm(g, maps.registration(self.model.specs)))
        elif self.clip_grad is not None:  # the N shards' sums of squares, added in the ring's order
            self.norms.append(clipping.shard_norm(g, self.owners, self.layout.world_size))
        if self.clip_grad is not None:
            clipping.clip(g, self.norms[-1], self.clip_grad)
        self.t += 1
        first = self.optimizer_run.at(self.t)  # DeepSpeed's CPU Adam depends on it (optim/_cpu_adam.py)
        w = self.master_buf if self.master_buf is not None else self.params.astype(p.update_format.dtype)
        with widened(self.state, w.dtype) as state:  # as the engines' _update.py: 16-bit state rounded on store
            if self.optimizer.elementwise and self.optimizer_calls == "shards":  # one call per rank's shard
                for r in range(self.layout.world_size):
                    own = self.layout.own(r)
                    step_in_blocks(self.optimizer, w[own], g[own], {k: v[own] for k, v in state.items()}, self.t,
                                   first)
            elif self.optimizer.elementwise and self.order == "ring-native":
                step_in_blocks(self.optimizer, w, g, state, self.t, first)
            elif self.optimizer.elementwise:
                self.optimizer.step(w, g, state, self.t, first_step=first)
            else:  # Muon: each parameter as a whole matrix
                step_by_matrix(self.optimizer, self.model.specs, w, g, state, self.t)
        self.params = p.round_weights(w, self.t, 0)
        return [float(np.mean(np.asarray(l, dtype=np.float64))) for l in losses]

    @staticmethod
    def _keep_loss(losses: list, result: tuple):
        """Append a micro-batch's loss to its rank's list; its gradient."""
        losses.append(result[0])
        return result[1]

    def _accumulate(self, micro, losses, K: int, N: int, p):
        """The K micro-steps of N ranks: forward/backward, then each rank's own accumulation (stages 0/1) or the
        reduction of every micro-step and its accumulation (stages 2/3). Returns the accumulator."""
        acc = None
        for k in range(K):
            grads = []
            for r in range(N):
                loss, g = self.gradient(*micro[r][k])
                losses[r].append(loss)
                grads.append(g)
            if self.reduce_every_micro_step:  # stages 2/3: reduce now, accumulate the reduced gradient
                reduced = self._reduce(grads)
                acc = reduced.astype(recipes.accum_format(p, self.twin, True).dtype) if acc is None else acc
                recipes.accumulate(acc, reduced, first=k == 0)
            else:  # stages 0/1: each rank accumulates its own; one reduction at the end
                fmt = recipes.accum_format(p, self.twin, False).dtype
                if K == 1 and all(g.dtype == fmt for g in grads):
                    acc = grads  # the first micro-step assigns (recipes.accumulate): a copy would change nothing
                    continue
                acc = [np.zeros(self.padded, fmt) for _ in range(N)] if acc is None else acc
                for a, g in zip(acc, grads):
                    recipes.accumulate(a, g, first=k == 0)
        return acc

    def set_state(self, params, master, optimizer_state: dict, t: int) -> None:
        """Start from a saved state (e.g. a checkpoint's `SavedState`): (P,) 16-bit params, (P,) master (or
        None without one), {name: (P,)} optimizer state, and the step count t."""
        P = self.model.num_params

        def padded(v, dtype):
            out = np.zeros(self.padded, dtype)
            out[:P] = np.asarray(v)
            return out

        self.params = padded(params, self.precision.compute_format.dtype)
        if self.master_buf is not None:
            self.master_buf = padded(master, self.master_buf.dtype)
        if set(optimizer_state) != set(self.state):
            raise ValueError(f"optimizer state must hold {sorted(self.state)}, got {sorted(optimizer_state)}")
        self.state = {k: padded(v, self.state[k].dtype) for k, v in optimizer_state.items()}
        self.t = int(t)

    def master(self) -> np.ndarray:
        """(P,) update-format weights: the fp32 master, or the compute params widened when there is none."""
        w = self.master_buf if self.master_buf is not None else self.params.astype(self.precision.update_format.dtype)
        return w[: self.model.num_params].copy()

    def compute_params(self) -> np.ndarray:
        """(P,) compute-format weights, as every rank holds them after the step."""
        return self.params[: self.model.num_params].copy()

    def optimizer_state(self) -> dict:
        return {k: v[: self.model.num_params].copy() for k, v in self.state.items()}
