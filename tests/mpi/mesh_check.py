"""The strategies for many nodes on the MPI backend equal the numpy simulator bit for bit, on a 2 × 2 mesh.

    mpiexec -n 4 python tests/mpi/mesh_check.py

Four processes, two per node (`Cluster(4, backend="mpi", gpus_per_node=2)`): HSDP (with and without all-reduce
until the last micro-step), hpZ, MiCS (flat and hierarchical gathers), FSDP2's reshard_after_forward=False and
=2 — each a step after step of its groups' rings over MPI point-to-point messages, compared on every rank with
the in-process simulator running all four: the loss, the rank's fp32 master, optimizer state and 16-bit
params, the step count and the scaler, every collective call and every send of this rank (its group and link
tier included), its ledger timeline and report (see training_check.py, whose comparison this reuses).
"""

from __future__ import annotations

import numpy as np
from harness import main
from training_check import _decisions

from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
from zerosim.models import make_regression
from zerosim.precision import get_precision

STEPS, BATCH = 3, 4
CONFIGS = [  # (strategy, recipe, precision, K micro-steps, loss scale, clip, S)
    ("hsdp", "fsdp2", "bf16-mixed", 1, 1.0, None, 2),
    ("hsdp", "fsdp2", "fp16-mixed", 2, "torch", 0.05, 2),
    ("hsdp_no_sync", "fsdp2", "bf16-mixed", 3, 1.0, None, 2),
    ("hpz", "deepspeed-zero3", "fp16-mixed", 2, "deepspeed", 0.05, 2),
    ("hpz", "seeds", "bf16-mixed", 1, 1.0, None, 2),
    ("mics", "deepspeed-zero3", "fp16-mixed", 2, 1.0, None, 2),
    ("mics_hierarchical", "deepspeed-zero3", "bf16-mixed", 2, 1.0, 0.5, 4),
    ("reshard_to_group", "fsdp2", "fp16-mixed", 1, 1.0, None, 2),
    ("no_reshard", "seeds", "fp32", 2, 1.0, None, None),
]


def engine_on(cluster, model, params, strategy, recipe, precision, K, scale, clip, S):
    policy = get_precision(precision)
    if scale != 1.0:
        policy = policy.with_(loss_scale=scale, loss_scale_options={"init_scale": 2.0**10} if scale == "torch" else {})
    options = {} if S is None else {"shard_group": S}
    return ZeroEngine(model, cluster, strategy, get_optimizer("adam", lr=1e-2), policy, params=params, recipe=recipe,
                      accumulation_steps=K, clip_grad=clip, **options)


def run(h, seed: int, strategy, recipe, precision, K, scale, clip, S) -> None:
    n, r = h.world_size, h.rank
    name = f"{strategy} {recipe} {precision} K={K} scale={scale} clip={clip} S={S}"
    model = MLP([6, 5, 3])  # P = 53: never a multiple of 2 or 4
    params = model.init_params(np.random.default_rng([seed, n, 1]))
    data = make_regression(np.random.default_rng([seed, n]), STEPS * n * K, BATCH, [6, 5, 3])
    mpi, sim = Cluster(n, backend="mpi", gpus_per_node=2), Cluster(n, gpus_per_node=2)
    got, want = (engine_on(c, model, params, strategy, recipe, precision, K, scale, clip, S) for c in (mpi, sim))
    for step in range(STEPS):
        mine = data[step * n * K:(step + 1) * n * K]
        batches = [mine[q * K:(q + 1) * K] for q in range(n)]  # K micro-batches per rank
        (loss,) = got.step([batches[r] if K > 1 else batches[r][0]])
        losses = want.step(batches if K > 1 else [b[0] for b in batches])
        label = f"{name}: step {step + 1}"
        h.check(f"{label}: loss", np.asarray(loss), np.asarray(losses[r]))
        h.check(f"{label}: fp32 master shard", got.master_shards()[0], want.master_shards()[r])
        h.check(f"{label}: optimizer state shard", got.optimizer_shards()[0], want.optimizer_shards()[r])
        h.check(f"{label}: compute-format params", got.compute_params(0), want.compute_params(r))
        h.check(f"{label}: step count", got.t, want.t)
        h.check(f"{label}: scaler decisions and clipped norms", _decisions(mpi), _decisions(sim))
        h.check_same_rank_state(label, mpi, sim)
    tiers = {e.tier for e in sim.trace.events}  # every rank's sends (the simulator's), by the tier they crossed
    h.check(f"{name}: the ranks sent over both link tiers", tiers == {"intra-node", "inter-node"}, True)


def body(h) -> None:
    if h.world_size != 4:
        raise SystemExit("mesh_check runs a 2 × 2 mesh: mpiexec -n 4")
    for seed, config in enumerate(CONFIGS):
        run(h, seed, *config)


if __name__ == "__main__":
    main(body, "mesh_check")
