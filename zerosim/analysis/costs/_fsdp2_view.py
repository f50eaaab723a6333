"""A ZeRO-3 step's ledger as FSDP2 would hold the same tensors: its peak, kind by kind.

zerosim's ZeRO-3 engine keeps DeepSpeed's model states between steps: a 16-bit shard of the parameters beside the
fp32 master, and a gradient shard. FSDP2 with a MixedPrecisionPolicy keeps neither:

  * its sharded parameter *is* the fp32 one: the all-gather's copy-in casts the fp32 shard to param_dtype on the
    way (torch 2.13, torch/distributed/fsdp/_fully_shard/_fsdp_param.py, `FSDPParam.all_gather_inputs`:
    `_to_dtype_if_needed(sharded_param_data, self.param_dtype)`), so there is no 16-bit shard at rest;
  * its sharded gradient exists from the unit's first reduce-scatter of the step until the optimizer's
    `zero_grad()`, whose default `set_to_none=True` frees it (torch/optim/optimizer.py, `Optimizer.zero_grad`), so
    before a step's backward no gradient shard is held.

`fsdp2_peak` replays a ledger's timeline with those two differences (the buffer named "params", the 16-bit shard,
left out; the one named "grads", the gradient shard, grown unit by unit as each unit's gradients are reduced, its
share in proportion to the unit's size) and returns its peak and what was live then. Everything else — gathered
units, activations, the loss, communication buffers — is the same events at the same moments.
tests/test_eager_activations.py checks the result against torch's FSDPMemTracker on the same step (parity lane).
"""

from __future__ import annotations

SHARD, GRAD_SHARD = "params", "grads"  # the ledger names of ZeRO-3's resting 16-bit shard and gradient shard


def fsdp2_peak(ledger) -> tuple[int, dict]:
    """(peak bytes, {kind: bytes} live at that moment) of `ledger`'s timeline as FSDP2 holds model states."""
    units = {}  # "layer i grads" -> its bytes (first allocation): each unit's share of the gradient shard
    for e in ledger.timeline:
        if e.action == "alloc" and e.kind == "grads" and e.name.endswith(" grads") and e.name not in units:
            units[e.name] = e.nbytes
    shard = next((e.nbytes for e in ledger.timeline if e.name == GRAD_SHARD and e.action == "alloc"), 0)
    whole = sum(units.values()) or 1
    by_kind, total, best, at, reduced = {}, 0, -1, {}, set()
    for e in ledger.timeline:
        if e.name in (SHARD, GRAD_SHARD):
            continue  # no 16-bit shard; the gradient shard grows unit by unit below
        sign = 1 if e.action == "alloc" else -1
        by_kind[e.kind] = by_kind.get(e.kind, 0) + sign * e.nbytes
        total += sign * e.nbytes
        if e.action == "free" and e.name in units and e.name not in reduced:  # the unit's reduce-scatter is done:
            reduced.add(e.name)  # its piece of the sharded gradient exists from now on
            piece = shard * units[e.name] // whole
            by_kind["grads"] = by_kind.get("grads", 0) + piece
            total += piece
        if total > best:
            best, at = total, {k: v for k, v in by_kind.items() if v}
    return best, at
