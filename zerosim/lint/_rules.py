"""The silent numerics traps a configuration can fall into, as a table (RULES): each rule a known trap, the test that
finds it in a Setup (_setup.py), what to expect and how large, the framework release, file and function that makes it
(read in that release's source), the user thread that hit it, and — where zerosim can run the trap and its way out —
the change that avoids it, so `lint(..., measure=S)` runs both for S steps with zerosim.diff and says how far apart
they end and how far each is from float64.

Sources read for the citations: torch 2.13.0 (the wheel), DeepSpeed 0.19.8 (its sdist), transformers 5.24.0 and
4.47.0 (their wheels); the threads through their trackers. accelerate #4030 (a loss that changes with the GPU count)
was looked for there and not found: no rule cites it.
"""

from __future__ import annotations

from collections.abc import Callable
from zerosim._dataclass import dataclass

SEVERITIES = ("error", "warning", "info")  # error: the run is not what it claims; warning: it drifts; info: a fact


@dataclass(frozen=True)
class Rule:
    """One trap: `name`, `severity`, `applies(setup)`, `says(setup)` (one sentence: what is wrong and what to expect,
    how large), `source` (framework, release, file, function), `thread` (the user report: its address and title),
    `fix` (a dict of TrainConfig or precision changes that avoid it, for measuring; None where zerosim cannot run
    it)."""

    name: str
    severity: str
    applies: Callable
    says: Callable
    source: str
    thread: str
    fix: dict | None = None


def _bits(fmt: str | None) -> int:
    return {"fp64": 64, "fp32": 32}.get(fmt, 16) if fmt else 0


def _sixteen(fmt: str) -> bool:
    return _bits(fmt) == 16


def _listed(names) -> str:
    """("m", "v", "n") -> "m, v and n"."""
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def _summed(s) -> int:
    """The ranks a gradient is summed over: the data-parallel ranks (with CP's, which ZeRO shards over), N / T; with
    one, nothing is summed and no wire format or bucket bound can round a sum."""
    return s.ranks // s.tp


UNIT = {"bf16": "2^-9", "fp16": "2^-12"}  # half an ulp at 1, relative: each rounding's largest error

RULES = (
    Rule("fp16-without-loss-scaling", "error",
         lambda s: s.compute == "fp16" and not isinstance(s.loss_scale, str) and s.loss_scale == 1,
         lambda s: "fp16 compute with no loss scaling: every gradient below 2^-24 (5.96e-08) flushes to zero and below "
                   "2^-14 (6.1e-05) loses bits, silently — nothing overflows, the loss just flattens early; scale the "
                   "loss (--loss-scale torch, or DeepSpeed's fp16.loss_scale 0) or compute in bf16",
         "torch 2.13.0 torch/amp/autocast_mode.py autocast.__init__: fast_dtype = "
         "torch.get_autocast_dtype(device_type) (fp16 on CUDA), and nothing scales the loss unless a "
         "torch.amp.GradScaler is made apart",
         "https://github.com/engichang1467/Open-Rig3R/issues/35 (autocast defaults to fp16 with no GradScaler — "
         "gradients can silently underflow to zero)",
         fix={"loss_scale": 1024.0}),  # a static power of two: exact, and no step skipped (a dynamic scaler
    #                                  starting at 2^16 skips its first steps, which a few measured steps would show)
    Rule("optimizer-state-16-bit", "warning", lambda s: _sixteen(s.state) and bool(s.kept),
         lambda s: f"the optimizer's state ({s.optimizer}'s {_listed(s.kept)}) is stored in {s.state}: every step "
                   f"rounds each element on store, up to {UNIT.get(s.state, '2^-9')} relative, and small increments "
                   f"(Adam's v) can be lost outright; a bf16 state plateaued the loss about 3x higher in the thread",
         "torch 2.13.0 torch/optim/adam.py Adam._init_group: state['exp_avg'] = torch.zeros_like(p, "
         "memory_format=torch.preserve_format) — the state takes the parameter's dtype (bf16 parameters, bf16 m and v)",
         "https://github.com/areal-project/AReaL/issues/1292 (FSDP engine: torch.optim.AdamW inherits bf16 dtype from "
         "model.parameters(), late-stage loss plateaus ~3x higher than DS-Z3 / Megatron)",
         fix={"optim_state": None}),
    Rule("master-weights-16-bit", "warning", lambda s: s.master is None and _sixteen(s.compute),
         lambda s: f"no fp32 master: the optimizer updates the {s.compute} weights in place, and an update below half "
                   f"an ulp of its weight ({UNIT.get(s.compute, '2^-9')} of it) is lost (seed 000's lost update)",
         "torch 2.13.0 torch/optim/adam.py Adam._init_group and its step: the parameters it is given are the ones it "
         "updates, in their own dtype; a model cast to bf16 has no fp32 copy unless the framework keeps one",
         "https://github.com/areal-project/AReaL/issues/1292 (the FSDP engine's AdamW on bf16 parameters)",
         fix={"master": "fp32"}),
    Rule("long-accumulation-in-16-bit", "warning", lambda s: s.K >= 3 and _sixteen(s.accumulate),
         lambda s: f"{s.K} micro-batches a step accumulate in {s.accumulate}: {s.K - 1} roundings per element, up to "
                   f"{s.K - 1} x {UNIT.get(s.accumulate, '2^-9')} relative (two micro-batches round once, as one "
                   f"fp32 sum cast back does; from three on they part); accumulate in fp32 "
                   f"(--grad-accum fp32, DeepSpeed's data_types.grad_accum_dtype)",
         "DeepSpeed 0.19.8 deepspeed/runtime/engine.py DeepSpeedEngine.get_data_types: grad_accum_dtype None (the "
         "default) is the model's dtype",
         "https://github.com/deepspeedai/DeepSpeed/issues/1488 (loss discrepancy among ZeRO-0, 1, 2, 3 when gradient "
         "accumulates multiple steps)",
         fix={"grad_accum": "fp32"}),
    Rule("reduce-dtype-below-params", "info",
         lambda s: _bits(s.reduce) < _bits(s.master or s.compute) and _summed(s) > 1,
         lambda s: f"gradients are summed in {s.reduce} while the weights they update are {s.master}: "
                   + ("the ring's one hop rounds" if _summed(s) == 2 else
                      f"each of the ring's {_summed(s) - 1} hops rounds")
                   + f" the partial sum to {s.reduce}; reduce in fp32 "
                   f"(FSDP2's MixedPrecisionPolicy(reduce_dtype=torch.float32), DeepSpeed's "
                   f"communication_data_type fp32) to keep them",
         "torch 2.13.0 torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy: reduce_dtype None "
         "reduces in the compute dtype (param_dtype); DeepSpeed 0.19.8 deepspeed/runtime/engine.py "
         "DeepSpeedEngine.communication_data_type: fp16 or bf16 when enabled, unless the config names one",
         "https://github.com/huggingface/accelerate/issues/2624 (FSDP requires larger LR to converge at similar rate "
         "as DeepSpeed: the maintainers ask whether reduce_dtype is bf16)",
         fix={"reduce": "fp32"}),
    Rule("tp-gradients-reduced-below-reduce-dtype", "warning",
         lambda s: s.tp > 1 and _bits(s.reduce) > _bits(s.compute),
         lambda s: f"tensor parallelism of degree {s.tp} with a {s.reduce} reduction: under FSDP2 the TP-replicated "
                   f"parameters' gradients (norms with sequence parallelism, row-parallel biases) are all-reduced over "
                   f"the TP ranks in {s.compute}, not {s.reduce}, whatever the policy says",
         "torch 2.13.0 torch/distributed/fsdp/_fully_shard/_fsdp_param.py FSDPParam._get_grad_inner_tensor: the "
         "Partial -> Replicate redistribute over the non-DP mesh dims runs in the gradient's own dtype",
         "https://github.com/pytorch/pytorch/issues/190626 ([FSDP2] MixedPrecisionPolicy reduce_dtype is not applied "
         "to the TP-mesh Partial -> Replicate gradient all-reduce; fix proposed in pytorch PR #190627)"),
    Rule("muon-off-under-zero3-init", "error",
         lambda s: s.deepspeed and s.optimizer.startswith("muon") and s.stage == 3,
         lambda s: "Muon at ZeRO-3 in a DeepSpeed config: with the model built under deepspeed.zero.Init (the HF "
                   "Trainer does so at stage 3) every parameter reports 1-D, none is tagged use_muon, and every one "
                   "is stepped by AdamW, silently — on DeepSpeed releases before PR #8438",
         "DeepSpeed before PR #8438: deepspeed/__init__.py set_optimizer_flags tested p.ndim >= 2 on zero.Init's flat "
         "placeholders; 0.19.8 reads the layer's shape (ds_shape, _layer_shape)",
         "https://github.com/deepspeedai/DeepSpeed/pull/8438 (Muon is silently disabled under ZeRO-3 when the model is "
         "built with zero.Init)"),
    Rule("muon-is-sgd-without-zero", "error",
         lambda s: s.deepspeed and s.optimizer.startswith("muon") and s.stage == 0,
         lambda s: "Muon in a DeepSpeed config without ZeRO (stage 0, its default): MuonWithAuxAdam.step applies the "
                   "raw gradient as if Newton-Schulz had run — plain SGD on the matrices — on DeepSpeed releases "
                   "before PR #8442",
         "DeepSpeed before PR #8442: deepspeed/runtime/zero/muon/muon_optimizer.py MuonWithAuxAdam.step added "
         "p.grad unorthogonalized (ZeRO's get_flat_partition and stage3's sub-group loop orthogonalize; nothing did at "
         "stage 0); 0.19.8 orthogonalizes a whole matrix there",
         "https://github.com/deepspeedai/DeepSpeed/pull/8442 (Muon runs no Newton-Schulz at ZeRO stage 0, the "
         "default: run it)"),
    Rule("loss-over-counted-under-tp", "warning", lambda s: s.tp > 1,
         lambda s: f"tensor parallelism of degree {s.tp}: the HF Trainer before PR #45994 multiplied each rank's loss "
                   f"by num_processes, which counts the {s.tp} TP ranks holding one batch {s.tp} times — the logged "
                   f"loss and every gradient {s.tp}x too large (clipping and the loss curve see it; Adam mostly not)",
         "transformers src/transformers/trainer.py Trainer.compute_loss before PR #45994 (merged 2026-05-15); 5.24.0 "
         "has the fix: loss_scale = self.accelerator.num_processes // self.get_tp_size()",
         "https://github.com/huggingface/transformers/pull/45994 (Trainer.compute_loss: fix loss over-counting under "
         "TP and EP-as-TP)"),
    Rule("loss-averaged-twice-under-accumulation", "info", lambda s: s.K > 1,
         lambda s: f"{s.K} accumulation steps: a trainer that divides each micro-batch's mean loss by K again, or "
                   f"averages per micro-batch instead of over the step's tokens, reports (and steps on) another "
                   f"loss than one batch of {s.K}x the size; the HF Trainer 4.47.0 doubled it at K = 2 (zerosim's "
                   f"own trainer averages once, over the N·K micro-batches)",
         "transformers 4.47.0 src/transformers/trainer.py Trainer.training_step: `if self.model_accepts_loss_kwargs: "
         "loss = self.compute_loss(model, inputs)` withholds num_items_in_batch from the models that take it, and the "
         "loss is then not divided by gradient_accumulation_steps (fixed by PR #35438)",
         "https://github.com/huggingface/transformers/pull/35438 (Pass correct num_items_in_batch value into the "
         "training_step function: the loss for gradient_accumulation_steps=2 doubled in 4.47.0)"),
    Rule("bucket-size-changes-the-sum", "info", lambda s: s.collective == "bucket all-reduce" and _summed(s) > 1,
         lambda s: f"recipe {s.recipe} all-reduces each gradient bucket whole: an element's ring chunk — the rank its "
                   f"sum starts on — follows the bucket's bounds, so two runs with another reduce_bucket_size (or "
                   f"bucket_cap_mb), rank count or stage part at step 1 in the last bits (zerosim diff shows where)",
         "DeepSpeed 0.19.8 deepspeed/runtime/zero/stage_1_and_2.py allreduce_and_scatter with "
         "use_multi_rank_bucket_allreduce=True (runtime/zero/config.py, the default); torch 2.13.0 DDP's Reducer "
         "buckets by bucket_cap_mb (reducer.cpp compute_bucket_assignment_by_size)",
         "https://github.com/deepspeedai/DeepSpeed/issues/966 (ZeRO 0, 1, 2, 3 produce different results); "
         "https://github.com/pytorch/pytorch/issues/171874 ([FSDP] bit-equal gradients on two ranks differ after the "
         "all-reduce)"),
)
