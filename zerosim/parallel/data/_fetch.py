"""ZeRO-3's parameter fetcher: which units are gathered when, what is prefetched, what stays live.

One micro-step visits the units in a fixed order (the schedule's ops that read weights: its "uses").
Before a use, the unit is gathered unless it is still live; then, by the `CommSchedule`, upcoming units
are prefetched; after the use the unit is freed unless it is needed again soon. Prefetching only
moves a gather earlier in the log, where the timeline lets it overlap the compute before its use, and
keeps more gathered units live, which the ledger shows as a higher "params" peak. Values never change:
a gathered unit is the same bits whenever it is gathered.

    policy                    prefetch                                      free after a use
    seed 004 (default)        none                                          always
    DeepSpeed (bucket size)   upcoming uses, until prefetch_bucket_size     unless used again within
                              elements are on the way and while fewer than  max_reuse_distance elements
                              max_live_parameters elements are gathered     of upcoming uses
    FSDP (units ahead)        the next k units of this pass, before the     always (reshard after
                              compute (or after it: BACKWARD_POST)          forward)

A unit prefetched for a later use is not freed before that use (DeepSpeed v0.19.5,
deepspeed/runtime/zero/partitioned_param_coordinator.py: `PartitionedParameterCoordinator.__params_to_release`
checks `__most_recent_step_id_param_fetched_for`). Everything still gathered is freed when the micro-step ends
(the same file's `release_and_reset_all`).

After its forward use the plan decides (`plan.after_forward`): "free" (FSDP2's reshard_after_forward=True),
"keep" it gathered until its backward use (reshard_after_forward=False: FSDP2's `post_forward` skips the
reshard, and backward needs no all-gather), or keep a secondary piece (_gather.py: hpZ, reshard_after_forward=S)
from which later gathers run within a group of S. A plan that keeps units for the step ("keep for the step": FSDP2
beside a pipeline, _plan.py) hands every micro-step the same `live` map (`KeptForStep`): a unit is gathered once, at its
first use in the step, and freed after its backward in the last micro-step.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.cluster import Handle
from zerosim.models import needs_params
from zerosim.parallel.data._gather import gather, keep_secondary, release, secondary_name


class KeptForStep(dict):
    """layer -> its gather's handle, held over one step's `micro_steps` (a plan that keeps units for the step: FSDP2
    beside a pipeline): a unit gathered at its first use of the step, freed after its backward in the last micro-step
    (torch's `perform_reduce_grad` reshards then, _plan.py)."""

    def __init__(self, micro_steps: int):
        super().__init__()
        self.last = micro_steps - 1


class ParamFetcher:
    """ZeRO-3's gathers and frees for one micro-step's `ops` of `model`, by a `CommSchedule` (`comm`)."""

    def __init__(self, ctx, comm, model, ops, kept: KeptForStep | None = None, k: int = 0):
        self.ctx, self.comm = ctx, comm
        self.keeping = kept is not None and ctx.plan.reshard.keeps_for_step  # the step's map, micro-step k of it
        self.final = self.keeping and k == kept.last
        windows = ctx.layout.windows
        # the uses: (op index, layer, pass) of every op that reads a unit that has weights
        self.uses = [(i, op.layer, "forward" if op.kind == "forward" else "backward") for i, op in enumerate(ops)
                     if needs_params(model, op) and windows[op.layer][1] > windows[op.layer][0]]
        self.use_of = {i: u for u, (i, _, _) in enumerate(self.uses)}
        self.size = {layer: windows[layer][1] - windows[layer][0] for _, layer, _ in self.uses}
        self.live = kept if self.keeping else {}  # layer -> its gather's handle (its computes wait for it)
        self.needed_at = {}  # layer -> the last use it was prefetched for: not freed before it
        self.runs, self.run_of = _runs(self.uses, ops, model, comm)
        self.unit = {self.uses[u][1]: self.runs[r].unit for u, r in enumerate(self.run_of)}  # layer -> its FSDP unit
        self.queue = 0  # DeepSpeed's trace queue: uses before this one were already considered for prefetch

    def gather(self, op_index: int) -> Handle:
        """Before op `op_index`: all-gather the unit it reads unless it is live, then prefetch (unless after
        compute). Returns the handle its compute waits for; empty when the op reads no gathered unit."""
        if op_index not in self.use_of:
            return Handle()
        u = self.use_of[op_index]
        _, layer, kind = self.uses[u]
        if layer not in self.live:
            self.live[layer] = gather(self.ctx, layer)
            run = self.runs[self.run_of[u]]
            for v in range(u + 1, run.last + 1):  # FSDP's unit of several layers: the rest of it too, as one
                other = self.uses[v][1]
                self.needed_at[other] = max(self.needed_at.get(other, -1), v)
                if other not in self.live:
                    self.live[other] = gather(self.ctx, other)
        if not (kind == "backward" and self.comm.prefetch_after_compute):
            self._prefetch(u)
        return self.live[layer]

    def release(self, op_index: int) -> None:
        """After op `op_index`'s use: prefetch (FSDP's BACKWARD_POST), then free the unit unless needed again soon
        (or, after forward, unless the plan keeps it; with a secondary piece, keep that piece first)."""
        u = self.use_of[op_index]
        _, layer, kind = self.uses[u]
        if kind == "backward" and self.comm.prefetch_after_compute:
            self._prefetch(u)
        after = self.ctx.plan.reshard
        if after.keeps_for_step:  # held until the step's last backward: the engine frees it (ZeroEngine.reduce)
            return
        if kind == "forward" and after.keeps_whole:  # reshard_after_forward=False: gathered until its backward use
            backward = [v for v in range(u + 1, len(self.uses)) if self.uses[v][1:] == (layer, "backward")]
            self.needed_at[layer] = max(self.needed_at.get(layer, -1), backward[0] if backward else u)
        if self.needed_at.get(layer, -1) > u or self._reused_soon(u, layer):
            return
        if kind == "forward" and after.keeps_piece and secondary_name(layer) not in self.ctx.ranks[0].ledger.live:
            keep_secondary(self.ctx, layer)  # hpZ / FSDP2's int: the piece later gathers come from
        release(self.ctx, layer)
        del self.live[layer]

    def release_all(self) -> None:
        """End of the micro-step (or of its part a pipeline runs): free every unit still gathered; a unit kept for the
        step only after its backward in the last micro-step."""
        self.needed_at.clear()
        if self.keeping:
            done = {layer for _, layer, kind in self.uses if kind == "backward"} if self.final else ()
            for layer in list(self.live):
                if layer in done:
                    release(self.ctx, layer)
                    del self.live[layer]
                else:  # gathered before: a later use waits for nothing (its compute stream ran this one's)
                    self.live[layer] = Handle()
            return
        for layer in list(self.live):
            release(self.ctx, layer)
        self.live.clear()

    # -- the two policies ------------------------------------------------------------------------------
    def _prefetch(self, u: int) -> None:
        comm = self.comm
        if comm.prefetch_bucket_size:
            self._prefetch_by_elements(u)
        else:
            depth = comm.prefetch_forward if self.uses[u][2] == "forward" else comm.prefetch_backward
            if depth:
                self._prefetch_by_units(u, depth)

    def _prefetch_by_elements(self, u: int) -> None:
        """DeepSpeed (v0.19.5, deepspeed/runtime/zero/partitioned_param_coordinator.py, `_fetch_sub_module_impl`): walk
        the trace queue from the use after this one, gathering units not yet live, until min(max_live - live,
        prefetch_bucket) elements are on the way (the unit that crosses the limit is still gathered); live units
        passed on the way are marked needed for that use. The queue is consumed: no use is considered twice."""
        comm = self.comm
        live = sum(self.size[layer] for layer in self.live)
        budget = (
            comm.prefetch_bucket_size
            if comm.max_live_parameters is None
            else min(comm.max_live_parameters - live, comm.prefetch_bucket_size)
        )
        self.queue = max(self.queue, u + 1)
        fetching = 0
        while self.queue < len(self.uses) and fetching < budget:
            _, layer, _ = self.uses[self.queue]
            self.needed_at[layer] = max(self.needed_at.get(layer, -1), self.queue)
            if layer not in self.live:
                self.live[layer] = gather(self.ctx, layer)
                fetching += self.size[layer]
            self.queue += 1

    def _prefetch_by_units(self, u: int, depth: int) -> None:
        """FSDP: gather the next `depth` units this pass will use, if not live and under the gathered-units cap. A
        unit is what one fully_shard wraps (`_runs`): a layer, or beside tensor parallelism a transformer block's
        five units, as torchtitan's apply_fsdp wraps each TransformerBlock with TP inside it."""
        kind, cap = self.uses[u][2], self.comm.max_gathered_units
        ahead = [run for run in self.runs[self.run_of[u] + 1:] if run.kind == kind]
        for unit in dict.fromkeys(run.unit for run in ahead):  # distinct, in use order
            if depth == 0:
                break
            depth -= 1
            nxt = next(run for run in ahead if run.unit == unit)
            layers = [self.uses[v][1] for v in range(nxt.first, nxt.last + 1)]
            for v, layer in zip(range(nxt.first, nxt.last + 1), layers):
                self.needed_at[layer] = max(self.needed_at.get(layer, -1), v)
            if all(layer in self.live for layer in layers):
                continue
            if cap is not None and len({self.unit[x] for x in self.live}) >= cap:
                break
            for layer in layers:
                if layer not in self.live:
                    self.live[layer] = gather(self.ctx, layer)

    def _reused_soon(self, u: int, layer: int) -> bool:
        """DeepSpeed's `__params_to_release` (v0.19.5, partitioned_param_coordinator.py): keep the unit if it is used
        again before max_reuse_distance elements of upcoming uses have been passed. None: never kept (FSDP, seed
        004)."""
        limit = self.comm.max_reuse_distance
        if limit is None:
            return False
        passed = 0
        for _, other, _ in self.uses[u + 1 :]:
            if passed >= limit:
                return False
            if other == layer:
                return True
            passed += self.size[other]
        return False


@dataclass(frozen=True)
class Run:
    """Consecutive uses of one FSDP unit in one kind of op: what FSDP gathers, prefetches and counts as one."""

    unit: int  # the unit's first layer
    kind: str  # "forward" or "backward" (the pass: a recompute is part of backward)
    op: str  # the ops' kind: "forward", "recompute" or "backward"
    first: int  # its first use
    last: int  # its last use


def _runs(uses: list, ops: list, model, comm) -> tuple:
    """([Run], the run of every use). FSDP's unit is the layers one fully_shard wraps: the model's `wrap_units`
    (a TP block's five units) under FSDP's knobs (prefetch by units, the gathered-units cap); each layer otherwise
    (DeepSpeed's coordinator and seed 004 fetch sub-module by sub-module). With one layer a unit, every use is a
    run of its own: the schedule is the one-layer one, unchanged."""
    fsdp = comm.prefetch_bucket_size is None and bool(comm.prefetch_forward or comm.prefetch_backward
                                                      or comm.max_gathered_units is not None)
    unit_of = {}
    for a, b in getattr(model, "wrap_units", ()) if fsdp else ():
        unit_of |= {layer: a for layer in range(a, b)} if b - a > 1 else {}
    runs, run_of = [], []
    for u, (i, layer, kind) in enumerate(uses):
        unit, op = unit_of.get(layer, layer), ops[i].kind
        if runs and layer in unit_of and runs[-1].unit == unit and runs[-1].op == op and runs[-1].kind == kind:
            runs[-1] = Run(unit, kind, op, runs[-1].first, u)
        else:
            runs.append(Run(unit, kind, op, u, u))
        run_of.append(len(runs) - 1)
    return runs, run_of
