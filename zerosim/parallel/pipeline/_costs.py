"""What a schedule costs, by hand: the activations a rank holds in flight, and the bubble.

Letters: P pipeline ranks, r a rank (0..P-1), V virtual stages a rank, M micro-batches, m = M // max(1, M // P) the
micro-batches of a round (torch's microbatches_per_round; Megatron's microbatch_group_size_per_vp_stage, P by
default). A chunk is 1/V of a rank's layers: the activations of one micro-batch through one chunk.

Activations in flight: the most micro-batch chunks whose activations rank r holds at once (forwards run, their
backwards not yet; `Table.in_flight` counts them in the table itself, the ledgers in a run):

    gpipe              M                                   every forward before any backward (GPipe)
    1f1b               min(P - r, M)                       torch Schedule1F1B `warmup_chunks = min(M, P - stage)`;
                                                           DeepSpeed 0.19.8 schedule.py TrainSchedule.num_pipe_buffers
                                                           `min(self.stages - self.stage_id, self.micro_batches)`;
                                                           Megatron's P - r - 1 warmup forwards, then one more
    interleaved-1f1b   min(2(P - 1 - r) + (V - 1)·m + 1,   Megatron-Core core_v0.19.0 schedules.py
                           M·V)                            `get_pp_rank_microbatches`: (P - r - 1)·2 + (V - 1)·m warmup
                                                           forwards, then the steady state's first forward; torch's
                                                           `_get_warmup_ops(multiply_factor=2)` the same
    zero-bubble        min((P - 1 - r) + (V - 1)·m + 1,    torch `_get_warmup_ops(multiply_factor=1)`, then one more;
                           M·V)                            zerosim's backward-input frees a chunk's activations (it
                                                           keeps the weight gradients for the backward-weight instead)

So rank 0 holds the most: P chunks of a stage in 1F1B (its whole stage P times over, whatever M), and the first
stage also holds the embedding's input; the last holds the head and the loss (the embedding and head imbalance, in
each stage's ledger).

The bubble, with every stage's forward taking T_F, backward T_B (zero bubble: backward-input T_B, backward-weight
T_W), communication free. The ideal time is M·(T_F + T_B [+ T_W]); a rank idles at the start and end:

    gpipe, 1f1b        (P - 1)·(T_F + T_B)                 fraction (P - 1) / (M + P - 1) (GPipe, Huang et al. 2019;
                                                           1F1B the same bubble with less memory: Narayanan et al.
                                                           2021 §2.2, "(p − 1)/m" of the ideal time)
    interleaved-1f1b   (P - 1)·(T_F + T_B) / V             fraction (P - 1) / (V·M + P - 1): each chunk's forward and
                                                           backward take 1/V of a stage's (Narayanan et al. 2021 §2.2:
                                                           the bubble "(1/v)·(p − 1)/m" of the ideal time)
    zero-bubble        (P - 1)·(T_F + T_B - T_W) / V       Qi et al. 2023 §3.1: ZB-H1's (p − 1)(T_F + T_B − T_W),
                                                           the weight gradients filling the cooldown; torch's ZB1P
                                                           with V chunks a rank divides it by V (where T_W ≤ T_B)

tests/test_pipeline_timeline.py places a run's events on the timeline and finds these exact fractions.

The bytes between stages: stage j = v·P + r (rank r's chunk v) sends each micro-batch's activation on to stage j + 1
unless it is the last, and its gradient back to stage j − 1 unless it is the first: one message each (torch 2.13
distributed/pipelining/stage.py `get_fwd_send_ops`, `get_bwd_send_ops`; Megatron-Core core_v0.19.0
pipeline_parallel/p2p_communication.py `P2PCommunicator.send_forward`, `send_backward`). So rank r sends

    forward    M·#{v < V : v·P + r < P·V − 1}     (M·V, but the last rank M·(V − 1))
    backward   M·#{v < V : v·P + r > 0}           (M·V, but the first rank M·(V − 1))

messages of a micro-batch's hidden states, B·L'·d elements of the compute format: L' = L / C, a context-parallel
rank's tokens, and / T again under sequence parallelism; without it every TP rank sends the whole B·L/C·d
(Megatron-Core core_v0.19.0 pipeline_parallel/schedules.py `get_tensor_shapes`: seq_length // cp_group.size(), then
// tp_group.size() only with `sequence_parallel`).
"""

from __future__ import annotations

from fractions import Fraction


def per_round(P: int, M: int) -> int:
    """m: torch's `microbatches_per_round = M // max(1, M // P)`."""
    return M // max(1, M // P)


IN_FLIGHT = {  # (P, M, V, r) -> the most chunks rank r holds in flight (the module docstring cites each)
    "gpipe": lambda P, M, V, r: M,
    "1f1b": lambda P, M, V, r: min(P - r, M),
    "interleaved-1f1b": lambda P, M, V, r: min(2 * (P - 1 - r) + (V - 1) * per_round(P, M) + 1, M * V),
    "zero-bubble": lambda P, M, V, r: min((P - 1 - r) + (V - 1) * per_round(P, M) + 1, M * V),
}


def in_flight(schedule: str, P: int, M: int, V: int, r: int) -> int:
    """The most micro-batch chunks rank r holds the activations of, by hand (the module docstring)."""
    return IN_FLIGHT[schedule](P, M, V, r)


BUBBLE_FORMULA = {  # the closed forms of bubble_fraction, in words (the module docstring cites each)
    "gpipe": "(P − 1) / (M + P − 1)",
    "1f1b": "(P − 1) / (M + P − 1)",
    "interleaved-1f1b": "(P − 1) / (V·M + P − 1)",
    "zero-bubble": "idle (P − 1)(T_F + T_B − 2·T_W) / V of M·(T_F + T_B) + idle",
}


def bubble_fraction(schedule: str, P: int, M: int, V: int, t_f, t_b, t_w=0) -> Fraction:
    """The fraction of the step a rank idles, by hand, as an exact rational (times as ints or Fractions; t_b the
    whole backward's, t_w the part a zero-bubble schedule runs as backward-weight)."""
    t_f, t_b, t_w = Fraction(t_f), Fraction(t_b), Fraction(t_w)
    fill = {"gpipe": t_f + t_b, "1f1b": t_f + t_b, "interleaved-1f1b": t_f + t_b, "zero-bubble": t_f + t_b - 2 * t_w}
    idle = (P - 1) * fill[schedule] / V
    return idle / (M * (t_f + t_b) + idle)


def stage_messages(P: int, V: int, M: int, r: int) -> tuple:
    """(forward, backward): the activations rank r sends on and the gradients it sends back in a step of M
    micro-batches, by hand (the module docstring)."""
    last = P * V - 1
    chunks = [v * P + r for v in range(V)]
    return M * sum(j < last for j in chunks), M * sum(j > 0 for j in chunks)

