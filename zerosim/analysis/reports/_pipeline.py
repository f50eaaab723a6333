"""What the reports say beside pipeline parallelism (`--pp P`): the bytes each pipeline rank sends in a step, by hand.

    pp_sent(model, micro, spec, width, M, plan, dp, params)   each pipeline rank's bytes in one step of M micro-batches

A pipeline rank r sends, in a step of M micro-batches a data-parallel rank:

    ZeRO      its stages' parameters Ψ_r (one TP rank's slice) over the dp ranks holding them, the collectives of
              the stage's plan, what each micro-step runs M times (analysis/costs comm_volume: stage 2 (M + 1)Ψ_r,
              stage 3 3MΨ_r, stages 0 and 1 and FSDP2 beside a pipeline 2Ψ_r, each times (dp − 1)/dp)
    TP        M times its blocks' activations over the TP group (a CP rank's L / C tokens), the embedding's where
              it holds the first stage, the head's and the loss's where it holds the last (_tensor.py tp_sent)
    CP        M times its blocks' K and V round the CP group (_context.py cp_sent)
    stages    each micro-batch's hidden states on and their gradient back, one message a stage boundary it sits at
              (parallel/pipeline stage_messages), B·L/C·d elements (/ T under sequence parallelism) of the
              compute format

As in the data-parallel report's formula, ZeRO's part is the textbook volume: a ZeRO-3 unit's gathers for forward and
backward, not the one more a checkpointed unit makes for its recompute (the trace's `sent` holds it too).
"""

from __future__ import annotations

from zerosim.analysis.reports._context import cp_sent
from zerosim.analysis.reports._tensor import tp_sent


def pp_sent(model, micro: tuple, spec, width: int, micro_batches: int, plan, dp: int, params: list) -> list:
    """Each pipeline rank's bytes sent in one step of M = `micro_batches`, by hand (the module docstring): `model` the
    whole model's twin, `micro` (B, L) a micro-batch's whole sequences (None: a model of layer sizes, no activations),
    `spec` the ParallelSpec (pp, its schedule, virtual stages and split, tp, sp, cp), `width` the compute format's
    bytes, `plan` the ZeRO plan a stage runs, `dp` the ranks it shards over, `params[r]` pipeline rank r's parameters
    (one TP rank's slice)."""
    from zerosim.analysis.costs import comm_volume
    from zerosim.parallel.pipeline import get_schedule, split, stage_messages

    P, M = spec.pp, micro_batches
    V = spec.virtual_stages or get_schedule(spec.pp_schedule).default_virtual
    cut = split(model, P, V, spec.pp_split)
    blocks = cut.layers_per_stage(model)
    if micro is None:  # a model of layer sizes: its activations left out, nothing between its stages (MetaModel)
        message = 0
    else:  # a micro-batch's hidden states
        B, L = micro
        message = B * L // spec.cp // (spec.tp if spec.sp else 1) * model.d_model * width
    out = []
    for r in range(P):
        stages = cut.chunks(r)
        layers = sum(blocks[j] for j in stages)
        sent = comm_volume(params[r], dp, plan, grad_wire_bytes=width, param_wire_bytes=width, micro_steps=M)
        if spec.tp > 1:
            sent += M * tp_sent(model, spec.micro(*micro), spec.tp, spec.sp, width, layers, embedding=0 in stages,
                                head=cut.stages - 1 in stages)
        if spec.cp > 1:
            sent += M * cp_sent(model, micro, spec, width, layers)
        forward, backward = stage_messages(P, V, M, r)
        out.append(sent + (forward + backward) * message)
    return out
