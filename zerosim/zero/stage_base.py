"""What every ZeRO stage shares: buffers born through the ledger, the shard update, layer views.

A stage declares which buffers it shards (`shards_optimizer`, `shards_grads`, `shards_params`)
and when it talks (`reduce_gradients`, `refresh_params`, and the per-layer hooks). Rank i below is
the i-th *local* rank; `rank.index` is its global number.

Per-rank resting bytes, by construction (Ψ = padded length N*s, s = Ψ/N; K = optimizer bytes/param):

    stage 0   2Ψ params + 2Ψ grads + (4 + K)Ψ master & state              (16Ψ for Adam)
    stage 1   2Ψ params + 2Ψ grads + (4 + K)s                              (4Ψ + 12Ψ/N)
    stage 2   2Ψ params + 2s grads + (4 + K)s                              (2Ψ + 14Ψ/N)
    stage 3   2s params + 2s grads + (4 + K)s                              (16Ψ/N)
"""

from __future__ import annotations

import numpy as np

from zerosim.optim.by_matrix import step_by_matrix
from zerosim.precision import cast
from zerosim.precision.cast import has_values


class Stage:
    number = -1
    shards_optimizer = shards_grads = shards_params = False

    def __init__(self, engine):
        self.engine = engine
        self.cluster, self.layout, self.model = engine.cluster, engine.layout, engine.model
        self.precision, self.optimizer = engine.precision, engine.optimizer
        self.params, self.grads, self.master_buf, self.opt_state = [], [], [], []
        self._reduced = [None] * self.cluster.local_size  # each rank's reduced gradient (a view or a buffer)
        self._transient = []  # buffers freed at the end of the step

    # -- buffers ---------------------------------------------------------------------------------
    def region(self, rank_index: int) -> slice:
        """The part of the padded flat buffer this rank updates: its shard, or all of it at stage 0."""
        return self.layout.own(rank_index) if self.shards_optimizer else slice(0, self.layout.padded)

    def init_rank(self, rank, padded64: np.ndarray) -> None:
        """Allocate rank's params, grads, master and optimizer state from the (N*s,) float64 init."""
        p, led = self.precision, rank.ledger
        fmt, upd = p.compute_format, p.update_format
        own, region = self.layout.own(rank.index), self.region(rank.index)
        size = region.stop - region.start
        src = padded64[own] if self.shards_params else padded64
        params = led.alloc("params", src.shape[0], fmt.dtype, "params")  # (s,) or (N*s,) compute format
        params.array[...] = cast(src, fmt)
        self.params.append(params)
        grad_fmt = p.reduce_format if self.shards_grads else fmt
        grad_len = self.layout.shard_size if self.shards_grads else self.layout.padded
        self.grads.append(led.alloc("grads", grad_len, grad_fmt.dtype, "grads", fill=0))  # (s,) wire / (N*s,) compute
        if p.master_format is not None:
            master = led.alloc("master", size, p.master_format.dtype, "master")  # (s,) or (N*s,) fp32
            master.array[...] = cast(padded64[region], p.master_format)
            self.master_buf.append(master)
        self.opt_state.append(self.optimizer.init_state(led, size, dtype=upd.dtype))

    def begin_step(self) -> None:
        for g in self.grads:
            g.array[...] = 0  # zero_grad

    # -- hooks the forward/backward driver calls ------------------------------------------------
    def get_params(self, i: int, layer: int) -> dict:
        return self.model.unflatten(self.params[i].array[: self.layout.num_params], layer)  # views, no copy

    def release_params(self, i: int, layer: int) -> None:
        pass

    def on_grads(self, i: int, layer: int, grads: dict) -> None:
        a, b = self.layout.windows[layer]
        if b > a:
            self.grads[i].array[a:b] = self.model.pack(layer, grads)

    def collective(self, i: int, value, fn):
        """Rank i's part of a collective called from inside forward/backward (a rendezvous of all ranks)."""
        return self.engine._lockstep.collective(i, value, fn)

    @property
    def reduce_op(self) -> str:
        """The collective's op: plain sum for "avg" (divided by N after the cast to fp32), else the variant."""
        return "sum" if self.precision.average == "avg" else self.precision.average

    # -- after backward ------------------------------------------------------------------------
    def reduce_gradients(self) -> None:
        raise NotImplementedError

    def keep_reduced(self, i: int, result: np.ndarray, place: np.ndarray) -> None:
        """Keep rank i's reduced gradient: in place, in `place` (its own part of its gradient buffer), as
        DDP and DeepSpeed do; or, when it travelled in another format, as a buffer of its own until the
        end of the step."""
        if result.dtype == place.dtype:
            place[...] = result
            self._reduced[i] = place
        else:
            buf = self.cluster.ranks[i].ledger.adopt("grads (wire format)", result, "grads")
            self._transient.append(buf)
            self._reduced[i] = buf.array

    def all_reduce_gradients(self) -> None:
        """Plain data parallel: every rank gets the whole reduced gradient."""
        reduced = self.cluster.all_reduce([g.array for g in self.grads], op=self.reduce_op, wire=self.precision.reduce_format, tag="grads")
        for i, (g, r) in enumerate(zip(self.grads, reduced)):
            self.keep_reduced(i, r, g.array)

    def finish_step(self) -> None:
        """Free what only this step needed."""
        for buf in self._transient:
            buf.free()
        self._transient = []

    def reduced_gradient(self, i: int) -> np.ndarray:
        """Rank i's reduced gradient over its region (wire dtype), read by the update."""
        return self._reduced[i]

    def master(self, i: int) -> np.ndarray:
        """Rank i's fp32 (update-format) weights over its region; without a master, its params widened."""
        if self.master_buf:
            return self.master_buf[i].array
        return self._own_params(i).astype(self.precision.update_format.dtype)

    def _own_params(self, i: int) -> np.ndarray:
        rank = self.cluster.ranks[i]
        return self.params[i].array if self.shards_params else self.params[i].array[self.region(rank.index)]

    def update_all(self, grads32: list, t: int, records: list) -> None:
        """Every local rank's update (one rank at a time; no rank needs another's data here)."""
        for i, g32 in enumerate(grads32):
            self.update(i, g32, t, records[i])

    def update(self, i: int, g32: np.ndarray, t: int, record: dict | None, step=None) -> None:
        """Optimizer step on rank i's region in fp32, then cast to the compute format (seed 004 step 3).

        `step(w, state)` replaces the optimizer's own step (ZeRO-1 Muon uses it).
        """
        state = {k: b.array for k, b in self.opt_state[i].items()}
        scratch = None
        if self.master_buf:
            w = self.master_buf[i].array  # (region,) fp32 master
        else:  # "pure": widen the 16-bit weights, update, round straight back (where updates get lost)
            scratch = self.cluster.ranks[i].ledger.adopt("update scratch", self.master(i), "scratch")
            w = scratch.array
        if step is not None:
            step(w, state)
        elif not has_values(w):
            pass  # meta backend: no values to update; every buffer the update touches is already accounted
        elif self.optimizer.elementwise:
            self.optimizer.step(w, g32, state, t, record)
        else:  # a matrix optimizer on whole parameters: only where the region is the whole model
            step_by_matrix(self.optimizer, self.model.specs, w, g32, state, t)
        start = self.region(self.cluster.ranks[i].index).start  # w's place in the flat vector (stochastic draws)
        self._own_params(i)[...] = self.precision.round_weights(w, t, start)
        if scratch is not None:
            scratch.free()
        if record is not None:
            record["compute_after"] = self._own_params(i).copy()

    def refresh_params(self) -> None:
        raise NotImplementedError

    def assemble(self, regions: list) -> np.ndarray:
        """(P,) vector from every rank's region (simulator only: all ranks must be local)."""
        if self.cluster.local_size != self.cluster.world_size:
            raise RuntimeError("assembling the whole vector needs every rank in this process (numpy backend)")
        full = regions[0] if not self.shards_optimizer else np.concatenate(regions)
        return full[: self.layout.num_params].copy()
