"""Which parameters share a gradient bucket: DDP's rule and DeepSpeed's, parameter by parameter (the rules only).

A parameter here is (unit, a, b): its unit (zerosim's layer) and its range [a, b) of the flat buffer, listed in
registration order (the model's specs: `nn.Module.parameters()` order, each layer's weight before its bias). Both
frameworks fill buckets in **gradient-ready order**, the order autograd runs the parameters' AccumulateGrad hooks.
zerosim takes that order to be the reverse of registration order (`ready_order`): the units in backward's order,
within a unit its parameters last-registered first. torch 2.13 produces exactly that order for a chain of
`nn.Linear` layers (DDP's `rebuilt_per_bucket_param_indices` of `Linear(8,16), ReLU, Linear(16,4)` is
`3 2 1 | 0`: bias before weight; tests/test_param_buckets.py checks it against torch where installed); for a block
with branches (attention) autograd's order follows the graph and can differ.

**DDP** (torch 2.13.0, find_unused_parameters=False, static_graph either, no comm hook):

    torch/nn/parallel/distributed.py  _BucketCapacityConfig.create: bucket_bytes_cap = bucket_cap_mb MiB (25 by
                                      default: _DEFAULT_BUCKET_CAP_MB); first_bucket_bytes_cap = 1 MiB
                                      (dist._DEFAULT_FIRST_BUCKET_BYTES) only when bucket_cap_mb is not given, else
                                      the cap itself.  compute_bucket_size_limits: [sys.maxsize] for the initial
                                      assignment when find_unused_parameters is False (or static_graph)
    DistributedDataParallel._ddp_init_helper
                                      iteration 1: _compute_bucket_assignment_by_size over the parameters in
                                      registration order with [sys.maxsize]: ONE bucket, parameters in registration
                                      order (then `reversed(bucket_indices)`, a no-op for one bucket)
    torch/csrc/distributed/c10d/reducer.cpp  Reducer::rebuild_buckets (called from DDP's forward from iteration 2 on,
                                      once): compute_bucket_assignment_by_size over the parameters in the order their
                                      gradients became ready in iteration 1 (`rebuilt_params_`), limits
                                      [first_bucket_bytes_cap, bucket_bytes_cap], no sort
    compute_bucket_assignment_by_size a parameter joins its dtype's open bucket; the bucket closes once its bytes
                                      reach (>=) the current limit, and the limit advances to the next one (the last
                                      repeats); so the parameter that crosses a limit ends its bucket

**DeepSpeed ZeRO-1/2** (0.19, stage_1_and_2.py: reduce_independent_p_g_buckets_and_remove_grads): each parameter's
gradient, as its hook fires, is copied behind the ones before it in the ipg bucket; the bucket is reduced first
when `elements_in_ipg_bucket + param.numel() > reduce_bucket_size` (an empty bucket is sent as nothing), so a
bucket passes the limit only when one parameter alone does (`ipg_buckets`). Without a reduce_bucket_size zerosim
sends each unit's parameters as one bucket (seed 004's schedule).

All of zerosim's parameters share one dtype and device (DDP keys buckets by both: one key here).
"""

from __future__ import annotations

from zerosim._dataclass import dataclass

MIB = 1024 * 1024  # torch/nn/parallel/distributed.py: _MB_TO_BYTES
DDP_BUCKET_CAP_MB = 25  # torch/nn/parallel/distributed.py: _DEFAULT_BUCKET_CAP_MB
DDP_FIRST_BUCKET_BYTES = MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES (c10d: kDefaultFirstBucketBytes)


def registration(specs) -> list:
    """[(unit, a, b)]: the model's parameters in registration order (its specs), empty ones left out."""
    return [(s.layer, s.offset, s.offset + s.size) for s in specs if s.size > 0]


def ready_order(params: list) -> list:
    """The order their gradients become ready: the reverse of registration order (module docstring)."""
    return list(reversed(params))


def ipg_buckets(ready: list, limit: int | None) -> list:
    """DeepSpeed's ipg bucket over `ready` parameters in gradient-ready order: a parameter joins unless the bucket
    is not empty and it would pass `limit` elements, which is then sent first. None: each unit's parameters alone."""
    buckets, bucket, filled = [], [], 0
    for p in ready:
        size = p[2] - p[1]
        full = filled + size > limit if limit is not None else bucket and bucket[-1][0] != p[0]
        if bucket and full:
            buckets.append(bucket)
            bucket, filled = [], 0
        bucket.append(p)
        filled += size
    return buckets + ([bucket] if bucket else [])


def bucket_assignment_by_size(nbytes: list, limits: list, indices: list | None = None) -> list:
    """torch's compute_bucket_assignment_by_size (reducer.cpp) for tensors of one dtype and device, visited in the
    order given: `nbytes[i]` the bytes of the i-th, `indices[i]` its parameter index (None: i; the buckets are then
    sorted by their smallest index, as torch sorts them when it has no indices). Returns lists of indices."""
    labels = list(range(len(nbytes))) if indices is None else list(indices)
    result, bucket, size, at = [], [], 0, 0
    for label, n in zip(labels, nbytes):
        bucket.append(label)
        size += n
        if size >= limits[at]:  # `bucket.size >= bucket_size_limit`: this tensor closes the bucket
            result.append(bucket)
            bucket, size, at = [], 0, min(at + 1, len(limits) - 1)
    if bucket:
        result.append(bucket)
    return sorted(result, key=min) if indices is None else result


@dataclass(frozen=True)
class DDPBuckets:
    """DDP's bucket caps. `bucket_cap_mb`: DDP's argument (MiB, a fraction allowed: torch takes
    `int(bucket_cap_mb * 2**20)` bytes); None: 25 MiB with a 1 MiB first bucket. `first_bucket_mb`: the first
    rebuilt bucket's cap (MiB); None: torch's rule (1 MiB when bucket_cap_mb is None, else bucket_cap_mb). torch
    has no argument for it: setting it models a changed `torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`, which torch
    reads only when bucket_cap_mb is None."""

    bucket_cap_mb: float | None = None
    first_bucket_mb: float | None = None

    def __post_init__(self):
        for name in ("bucket_cap_mb", "first_bucket_mb"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v * MIB >= 1
                                  or v != v or v == float("inf")):
                raise ValueError(f"DDP's {name} must be a finite number of MiB worth at least one byte, or None; "
                                 f"got {v!r}")

    @property
    def caps(self) -> tuple:
        """(first bucket's bytes, every later bucket's bytes): _BucketCapacityConfig.create's rule."""
        cap = int((DDP_BUCKET_CAP_MB if self.bucket_cap_mb is None else self.bucket_cap_mb) * MIB)
        if self.first_bucket_mb is not None:
            return int(self.first_bucket_mb * MIB), cap
        return (DDP_FIRST_BUCKET_BYTES if self.bucket_cap_mb is None else cap), cap


def ddp_buckets(params: list, itemsize: int, caps: tuple, rebuilt: bool) -> list:
    """DDP's buckets over `params` (registration order), each a list of parameters in its bucket's order:
    iteration 1 one bucket in registration order ([sys.maxsize]); once rebuilt, by bytes in gradient-ready order
    with [first cap, cap] (module docstring)."""
    if not rebuilt:
        return [list(params)] if params else []
    ready = ready_order(params)
    nbytes = [(b - a) * itemsize for _, a, b in ready]
    return [[ready[i] for i in bucket] for bucket in bucket_assignment_by_size(nbytes, list(caps), range(len(ready)))]
