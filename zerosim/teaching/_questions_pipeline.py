"""The prediction questions of notebook 17 (pipeline parallelism: the bubble, virtual stages, the activations in
flight, ZeRO beside a pipeline): one a section, each computing its answer from a run of zerosim's pipeline, as
_questions.py's do. docs/pipeline-parallelism.md is the page they follow.

Letters: P pipeline ranks, M micro-batches a step, V virtual stages a rank, L a stage's Linear layers. The bubbles are
read off a run of the schedule's table on the timeline with every stage costing the same (zerosim.viz
`measure_schedule`: a forward 1 unit, a backward 2, the links free), so each is an exact rational.
"""

from __future__ import annotations

from functools import lru_cache

from zerosim.teaching._predict import Question

P, M = 4, 8  # the pipeline page's example: 4 ranks, 8 micro-batches
# a fraction typed to three digits (0.273 for 3/11) reads the schedule right; the run prints the exact rational
FRACTION_TOLERANCE = 0.005


def _bubble(schedule: str, virtual: int) -> float:
    """Rank 0's idle fraction of the step, measured on the timeline (every rank idles the same with equal stages)."""
    from zerosim.viz import measure_schedule

    return float(measure_schedule(schedule, P, M, virtual)["bubbles"][0])


def _stage_activations(schedule: str, micro_batches: int) -> list:
    """Each pipeline rank's activation peak in bytes, from its ledger: an MLP of two Linear layers a stage (4 ranks,
    fp32, a micro-batch of 3 samples) trained one step through `schedule`."""
    import numpy as np

    from zerosim import Adam, Cluster
    from zerosim.models import MLP
    from zerosim.parallel.pipeline import PipelineEngine

    widths = [8] * (2 * P + 1)
    cluster = Cluster(P)
    engine = PipelineEngine(MLP(widths), cluster, 1, Adam(), "fp32", pp=P, schedule=schedule,
                            micro_batches=micro_batches)
    rng = np.random.default_rng(0)
    engine.step([[(rng.normal(size=(3, 8)).astype(np.float32), rng.normal(size=(3, 8)).astype(np.float32))
                  for _ in range(micro_batches)]])
    return [r.ledger.peak("activations") for r in cluster.ranks]


@lru_cache(maxsize=1)
def _first_stage_in_flight() -> float:
    """1F1B, P = 4, M = 8: rank 0's activation peak over one micro-batch's (its peak when the step has one)."""
    return _stage_activations("1f1b", M)[0] / _stage_activations("gpipe", 1)[0]


def _zero_beside_pipeline(stage: int, pp: int = 2, micro_batches: int = 4, per_stage: int = 2) -> dict:
    """One step of an MLP of `per_stage` Linear layers a stage, `pp` stages of 2 data-parallel GPUs each, 1F1B,
    ZeRO `stage` in each stage: {collective: calls only stage 0's GPUs (ranks 0 and 1) sent in}, from the trace
    (their own collectives, and the activations they hand on)."""
    import numpy as np

    from zerosim import Adam, Cluster
    from zerosim.models import MLP, make_regression
    from zerosim.parallel.pipeline import PipelineEngine

    widths = [8] * (per_stage * pp + 1)
    cluster = Cluster(2 * pp)
    engine = PipelineEngine(MLP(widths), cluster, stage, Adam(lr=1e-2), "fp32", pp=pp, micro_batches=micro_batches)
    engine.step([[make_regression(np.random.default_rng(k + 10 * d), 1, 2, widths)[0] for k in range(micro_batches)]
                 for d in range(2)])
    counts = {}
    for call in cluster.trace.calls:
        if set(cluster.trace.sent_by_rank(call.call)) <= {0, 1}:
            counts[call.collective] = counts.get(call.collective, 0) + 1
    return counts


QUESTIONS_PIPELINE = (
    Question("pp-bubble-1f1b", f"1F1B on P = {P} pipeline ranks with M = {M} micro-batches, every stage's forward "
             "taking 1 unit and its backward 2, the links free: what fraction of the step does each rank idle? (A "
             "fraction: you may type it as one, e.g. 1/4.)", "", lambda: _bubble("1f1b", 1),
             "(P − 1)/(M + P − 1) = 3/11 ≈ 0.273: each rank idles P − 1 of a stage's forward-and-backward times "
             "(waiting for the first micro-batch on the way in, for the last gradient on the way out) beside its own "
             "M, whatever a forward and a backward cost. GPipe idles exactly as long: 1F1B changes the order of the "
             "work, not the bubble; it caps the activations held (section 3).",
             tolerance=FRACTION_TOLERANCE,
             wrong=((3 / 8, "(P − 1)/M, the bubble against the ideal time (Narayanan et al. 2021's \"(p − 1)/m\"): "
                            "as a fraction of the step the idle time counts in the step too."),
                    (3 / 4, "(P − 1)/P, one micro-batch's bubble (M = 1): only one rank works at a time then."))),
    Question("pp-bubble-interleaved", f"The same pipeline (P = {P}, M = {M}) with interleaved 1F1B, V = 2 stages a "
             "rank, each half as long: what fraction of the step does a rank idle now?", "",
             lambda: _bubble("interleaved-1f1b", 2),
             "(P − 1)/(V·M + P − 1) = 3/19 ≈ 0.158: the pipeline still fills and drains in P − 1 steps, but each "
             "step is now a chunk's forward and backward, half a stage's, so the idle time halves while the work "
             "stays the same; the fraction falls from 3/11 to 3/19, by less than half. The price: a micro-batch "
             "crosses P·V − 1 = 7 boundaries each way instead of 3, and rank 0 holds more chunks in flight.",
             tolerance=FRACTION_TOLERANCE,
             wrong=((3 / 22, "half of 1F1B's 3/11: the idle time halves, but the step shrinks with it, so the "
                             "fraction falls by less."),
                    (3 / 11, "1F1B's bubble: interleaving makes each fill-and-drain step a chunk's, not a stage's."))),
    Question("pp-1f1b-in-flight", f"1F1B, P = {P}, M = {M}: at its peak, how many micro-batches' activations does "
             "rank 0 (the first stage) hold at once?", "micro-batches", _first_stage_in_flight,
             "P − r = 4 on rank r = 0: it runs P forwards before the first backward comes back to it (torch's "
             "`warmup_chunks = min(M, P - stage)`; DeepSpeed's `num_pipe_buffers`), then one forward for each "
             "backward, so it never holds more, whatever M. GPipe runs all M forwards first and holds 8; 1F1B's last "
             "rank holds 1. So the first stage peaks highest, and it also holds the embedding.",
             wrong=((8, "M, GPipe's: every forward before any backward."),
                    (1, "the last rank's: its backward follows each forward at once, while the first rank waits "
                        "P − 1 steps for its first gradient."))),
    Question("pp-zero3-gathers", "ZeRO-3 beside a 1F1B pipeline: 2 stages of 2 Linear layers each, 2 data-parallel "
             "GPUs a stage, M = 4 micro-batches. How many parameter all-gathers do stage 0's GPUs run in one step, "
             "as zerosim runs ZeRO-3?", "", lambda: _zero_beside_pipeline(3).get("all_gather", 0),
             "2·L·M = 16: zerosim's ZeRO-3 gathers each layer before its forward and again before its backward, for "
             "every micro-batch, and a pipeline step has M of them (its reduce-scatters too: L·M = 8, as at ZeRO-2, "
             "where each micro-batch's gradient is sharded at once). Megatron's distributed optimizer (ZeRO-1) "
             "reduce-scatters once a step; DeepSpeed's pipeline engine refuses ZeRO-2 and ZeRO-3; torchtitan's FSDP2 "
             "under torch's pipelining keeps a stage's parameters gathered over the step and reduce-scatters once "
             "after the last backward, which zerosim does not model yet (docs/pipeline-parallelism.md).",
             wrong=((2, "L, a gather a layer a step: what keeping the stage's parameters gathered over the step "
                        "gives (torchtitan's FSDP2 under torch's pipelining, not modelled by zerosim yet)."),
                    (4, "2L, one micro-batch's: a gather before each layer's forward and its backward, but the step "
                        "runs M = 4 micro-batches."))),
)
