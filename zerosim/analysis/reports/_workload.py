"""What a report's step runs, read once: the model, its micro-batch and schedule, the formats, the optimizer, K,
clipping, and the GPU its memory is judged against. `zerosim memory`, `timeline` and `plan` read their flags into one
(cli/model_args.py `setup`); Python builds one directly:

    work = Workload(MetaModel.from_params(7_000_000_000), None, get_comm_schedule("deepspeed"), "bf16-mixed",
                    "bf16-mixed", "adam")
"""

from __future__ import annotations

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class Workload:
    """One step's work (every field as the engine takes it)."""

    model: object  # MetaModel, MetaGPT or MetaLlama: a data-less twin
    micro: tuple | None  # (B, L) per rank per micro-step, or None (activations not counted)
    comm: object  # CommSchedule
    precision: object  # a preset name or a MixedPrecision (a DeepSpeed config's scaler and wire format)
    precision_name: str  # the preset whose byte sizes the formulas use
    optimizer: str
    accumulation: int = 1  # K: micro-steps per step
    clip_grad: float | None = None
    config: object = None  # the DecoderConfig the model was read from (a --config, a preset), or None
    ds: object = None  # the DeepSpeedRun a DeepSpeed config described, or None
    gpu: object = None  # a costs.GPU to judge a rank's memory against, or None
    reserve: float = 0.05  # the caching allocator's reserve, a fraction of the measured peak
    checkpointing: str | None = None  # with `micro`: the activation checkpointing strategy's name ("none", "block")

    @property
    def buckets(self):
        """DeepSpeed's gradient bucket buffers a rank holds beside the ledger: the DeepSpeed config's, else those of
        DeepSpeed's schedule (costs.deepspeed_buckets), else None (every report judges memory with these)."""
        from zerosim.analysis.costs import deepspeed_buckets

        return self.ds.buckets if self.ds is not None else deepspeed_buckets(self.comm, self.precision_name)

    @property
    def tokens_per_micro_step(self) -> int | None:
        """B·L per rank per micro-step (None without a micro-batch)."""
        return None if self.micro is None else self.micro[0] * self.micro[1]
