"""The oracle of DPU (parallel/offload/_dpu.py): one device applying the same one-step stale update.

It wraps a `Reference` and, after each optimizer step past the warmup, hands the forward and backward of the next step
the 16-bit params of the step before (w_{t-1} while the master already holds w_t), exactly as the ranks' after-update
swap does: w_t = U(w_{t-1}, g_t) with g_t = grad L(w_{t-2}). Nothing is shared with the ranks' code but the
Reference's own arithmetic.
"""

from __future__ import annotations


class StaleReference:
    """`Reference` with DPU: `step(batches)` as the Reference's, the params it computes with one update late."""

    def __init__(self, reference, warmup: int = 0):
        self.reference, self.warmup = reference, warmup
        self.pending = reference.params.copy()  # (N*s,) 16-bit: what the device gets at the next delayed step

    def step(self, batches) -> list:
        ref = self.reference
        t = ref.t
        losses = ref.step(batches)
        if ref.t > t:  # it stepped (a skipped step leaves everything, the pending params too)
            fresh = ref.params
            if ref.t > self.warmup:
                ref.params = self.pending
            self.pending = fresh.copy()
        return losses

    def __getattr__(self, name):  # master(), optimizer_state(), compute_params(), t: the Reference's
        return getattr(self.reference, name)
