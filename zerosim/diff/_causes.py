"""The cause of a parting, as a table of rules (RULES): each names the kinds of logical tensor and of event it can
explain, the fact of a run it reads, and the sentence it says when the two runs' facts differ. The cause is the first
rule, in the table's order, that explains the kind of tensor where the runs part and the kind of either run's parting
event (_events.py), and whose fact differs between the runs: a difference that made no other bits (a division by 4,
exact in DeepSpeed's order and in FSDP2's) is passed over for the one that did (the ring's order). The table's order
is the order a step makes things (data, weights, forward, backward, reduction, averaging, the update). No rule matches
only when the runs differ in nothing these facts hold: then the cause is the order of the named events.
"""

from __future__ import annotations

from collections.abc import Callable
from zerosim._dataclass import dataclass

WEIGHTS, FORWARD, BACKWARD = {"params", "master"}, {"out", "loss"}, {"grad"}
REDUCED, AVERAGED, STATE = {"reduced"}, {"grad32"}, {"state", "stored"}


@dataclass(frozen=True)
class Rule:
    """One known cause: where it shows (`kinds` of tensor, `events` of parting event), the fact it reads (`fact(facts,
    record)`: a run's Facts and its StepRecord of the parting step), and what it says (`say(a, b)`: the two runs'
    facts)."""

    name: str
    kinds: frozenset
    events: frozenset
    fact: Callable
    say: Callable


def _rule(name, kinds, events, fact, say) -> Rule:
    return Rule(name, frozenset(kinds), frozenset(events), fact, say)


SUMS = {"ring hop", "accumulation", "reduction"}  # the events that add (their order is what a layout changes)


def _clip(f, record):
    """The clipping coefficient the step used, where it changed the gradient (1 or no clipping: None)."""
    c = record.clip
    return None if c is None or c.coef >= 1 else c.coef


ORDERS = {  # (layout, how a bucket travels) -> which chunk an element's ring sum is in (the sentence's words)
    ("flat", "reduce-scatter"): "its owner's shard of the flat buffer (zerosim's layout)",
    ("flat", "bucket all-reduce"): "its bucket's all-reduce, the bucket in gradient-ready order (DeepSpeed ZeRO-1/2)",
    ("flat", "aligned all-reduce"): "the whole gradient buffer's all-reduce (DeepSpeed's BF16_Optimizer)",
    ("per-parameter", "reduce-scatter"): "its owner's chunk of its parameter (DeepSpeed ZeRO-3's partitions)",
    ("per-parameter dim 0", "reduce-scatter"): "its owner's rows of its parameter (FSDP2's dim-0 shards)",
}

RULES = (
    _rule("data", {"input", "target"}, {"data"}, lambda f, r: (f.micro_batches, f.batch),
          lambda a, b: f"run A trains on {a[0]} micro-batches of {a[1]} samples a step, run B on {b[0]} of {b[1]}: "
                       f"they see other data (keep ranks × accumulation steps × batch the same, e.g. with "
                       f"--accumulation-steps, to compare the arithmetic alone)"),
    _rule("seed", {"input", "target", "params", "master"}, {"data", "init", "cast"}, lambda f, r: f.seed,
          lambda a, b: f"the runs start from other seeds ({a} and {b}): other data and other initial weights"),
    _rule("compute format", WEIGHTS | FORWARD | BACKWARD | {"new params"},
          {"cast", "forward", "backward", "tensor parallel"}, lambda f, r: f.compute,
          lambda a, b: f"run A computes in {a} and run B in {b}: the weights, activations and gradients are rounded to "
                       f"other formats from the first cast on"),
    _rule("master format", {"master", "new master"}, {"cast", "update"}, lambda f, r: f.master,
          lambda a, b: f"run A keeps its master weights in {a or 'no master (pure 16-bit)'}, run B in "
                       f"{b or 'no master (pure 16-bit)'}"),
    _rule("kernels", FORWARD | BACKWARD, {"forward", "backward"}, lambda f, r: f.arithmetic,
          lambda a, b: f"run A's products run on {a} kernels, run B's on {b}: another summation order inside each "
                       f"matrix product"),
    _rule("attention", FORWARD | BACKWARD, {"forward", "backward"}, lambda f, r: f.attention,
          lambda a, b: f"attention is computed {a} in run A and {b} in run B: another order of the softmax's sums"),
    _rule("tensor parallelism", FORWARD | BACKWARD | REDUCED, {"forward", "backward", "tensor parallel"} | SUMS,
          lambda f, r: (f.tp, f.sp),
          lambda a, b: f"tensor parallelism of degree {a[0]} in run A and {b[0]} in run B: a row-parallel layer's "
                       f"output is the sum of T partial products, added over the TP ranks in the ring's order "
                       f"(Megatron's RowParallelLinear and its all-reduce), not one product's accumulation"),
    _rule("loss scale", {"loss scale"} | BACKWARD | REDUCED | AVERAGED, {"loss scale", "backward", "averaging"} | SUMS,
          lambda f, r: r.values.get((-1, "loss scale", ""), 1.0),
          lambda a, b: f"the loss is scaled by S = {a:g} in run A and S = {b:g} in run B before backward: every "
                       f"gradient is S times larger and rounds differently in 16 bits"),
    _rule("ranks", REDUCED, SUMS | {"pre-divide", "after"}, lambda f, r: f.dp,
          lambda a, b: f"run A reduces over {a} data-parallel ranks and run B over {b}: each element's ring sum adds "
                       f"its terms in another order and groups (NCCL's ring: the sum of chunk c starts at rank c+1)"),
    _rule("accumulation placement", REDUCED, SUMS, lambda f, r: None if f.K == 1 else f.reduces_per_unit,
          lambda a, b: "one run adds each rank's micro-batch gradients locally and reduces once (ZeRO stages 0/1), "
                       "the other reduces every micro-step and adds the reduced gradients (stages 2/3, as DeepSpeed "
                       "does): the same sum in another order (DeepSpeed #1488)"),
    _rule("accumulation format", REDUCED, {"accumulation"},
          lambda f, r: None if f.K == 1 else (f.accum_local, f.accum_reduced),
          lambda a, b: f"gradients accumulate across micro-batches in {a[0]} in run A and {b[0]} in run B (reduced "
                       f"ones in {a[1]} and {b[1]})"),
    _rule("averaging variant", REDUCED | AVERAGED, {"pre-divide", "after", "averaging"},
          lambda f, r: (f.averaging, f.divides_by_n),
          lambda a, b: f"run A averages as '{a[0]}', run B as '{b[0]}': dividing by N before the sum rounds each "
                       f"rank's gradient first, dividing after rounds the sum once"),
    _rule("chunk map", REDUCED, SUMS, lambda f, r: f.allreduce,
          lambda a, b: f"run A's all-reduce cuts the buffer by the {a} chunk map, run B's by the {b} one: an element "
                       f"sits in another chunk, so its sum starts on another rank"),
    _rule("buckets", REDUCED, SUMS, lambda f, r: f.bucket if f.collective == "bucket all-reduce" else None,
          lambda a, b: f"the recipe all-reduces each bucket whole, and the buckets hold up to {a} and {b} elements: "
                       f"where a bucket's bounds fall decides an element's chunk, so its ring sum starts on another "
                       f"rank"),
    _rule("layout", REDUCED, SUMS, lambda f, r: (f.partition, f.collective),
          lambda a, b: f"run A sums each element in the chunk of {ORDERS.get(a, a)}, run B in the chunk of "
                       f"{ORDERS.get(b, b)}: another chunk, so the sum starts on another rank"),
    _rule("wire format", REDUCED, SUMS | {"after"}, lambda f, r: f.reduce,
          lambda a, b: f"gradients travel in {a} in run A and {b} in run B: every hop of the ring rounds its partial "
                       f"sum to that format"),
    _rule("recipe", REDUCED | AVERAGED, SUMS | {"pre-divide", "after", "averaging"}, lambda f, r: f.recipe,
          lambda a, b: f"run A reduces by recipe {a}, run B by {b}: their divisions and casts around the sum differ"),
    _rule("clipping", AVERAGED, {"clipping"}, _clip,
          lambda a, b: f"clipping scaled the gradient by {a if a is not None else 1} in run A and "
                       f"{b if b is not None else 1} in run B (torch's clip_grad_norm_: max_norm / (norm + 1e-6), "
                       f"clamped at 1)"),
    _rule("optimizer", STATE | {"new master"}, {"optimizer", "store", "update"}, lambda f, r: f.optimizer,
          lambda a, b: f"the optimizers differ: {a} in run A, {b} in run B"),
    _rule("optimizer state format", {"stored"}, {"store"}, lambda f, r: f.state,
          lambda a, b: f"the optimizer's state is stored in {a} in run A and {b} in run B between steps: each store "
                       f"rounds it (the next step reads the rounded value)"),
    _rule("update format", STATE | {"new master"}, {"optimizer", "update"}, lambda f, r: f.update,
          lambda a, b: f"the update is computed in {a} in run A and {b} in run B"),
    _rule("rounding", {"new params"}, {"cast"}, lambda f, r: f.rounding,
          lambda a, b: f"the new weights are rounded {a} in run A and {b} in run B"),
)


def cause(kind: str, events: set, facts_a, facts_b, record_a, record_b) -> tuple:
    """(the rule's name, its sentence) of the first rule that explains a parting in a tensor of `kind` whose parting
    events are of the kinds `events`; (None, None) when no fact differs."""
    for rule in RULES:
        if kind in rule.kinds and rule.events & events:
            a, b = rule.fact(facts_a, record_a), rule.fact(facts_b, record_b)
            if a != b:
                return rule.name, rule.say(a, b)
    return None, None
