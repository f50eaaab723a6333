"""The words zerosim's outputs use — buffer names, ledger kinds, collectives, the timeline's parts — each defined once.

docs/glossary.md is written from GLOSSARY (tests/test_glossary.py keeps the two equal); the web page carries the
same entries; figures, CLI output and notebooks link a term to its anchor (`link(term)`).

Letters: P parameters, N ranks, s = ceil(P / N) one rank's shard, Ψ = N·s the padded flat buffer.
"""

from __future__ import annotations

import re
from zerosim._dataclass import dataclass

DOC = "docs/glossary.md"  # where the entries are read as a page (a relative link from the repository's root)


@dataclass(frozen=True)
class Term:
    term: str  # as outputs print it (no two spaces in a row once punctuation goes: GitHub and MkDocs slug it alike)
    section: str  # one of SECTIONS
    text: str  # the definition, a few sentences

    @property
    def anchor(self) -> str:
        """The anchor of the heading "### {term}": lower case, punctuation dropped, spaces to hyphens (GitHub's and
        Python-Markdown's toc slug agree on these terms)."""
        return re.sub(r"[^\w\s-]", "", self.term).strip().lower().replace(" ", "-")


SECTIONS = ("Memory kinds (what a rank's ledger holds)", "Collectives", "Time", "Words of the trade")

GLOSSARY = (
    # -- ledger kinds (cluster/_ledger.py MemoryLedger kinds; viz/_palette.py colours them) --
    Term("params", SECTIONS[0],
         "W: the parameters in the compute format (fp16 or bf16; fp32 in pure fp32), what forward and backward read. "
         "Stages 0-2: every rank holds the whole padded buffer, Ψ elements; stage 3: its shard, s elements, and a "
         "unit's whole parameters while that unit runs (\"params (gathered)\", freed after)."),
    Term("grads", SECTIONS[0],
         "G: the gradients in the compute (wire) format, as backward makes them. Stages 0-1: the whole buffer, Ψ; "
         "stages 2-3: the rank's shard, s, plus one unit's whole gradients (\"layer i grads\") from its backward "
         "until they are reduce-scattered."),
    Term("grad32", SECTIONS[0],
         "The fp32 gradient the optimizer reads: the reduced gradient cast to fp32, averaged (and unscaled), made at "
         "the optimizer step and freed after it. Its size is the region the rank updates: the whole padded buffer Ψ "
         "at stage 0 (plain data parallel: no shard anywhere), the rank's shard s at stages 1-3."),
    Term("master", SECTIONS[0],
         "OS: the fp32 master copy of the parameters in mixed precision (seed 000's \"ledger in the bank\"). Whole "
         "(Ψ) at stage 0, the shard s from stage 1. Pure fp32 has none: its params are already fp32."),
    Term("optim:m and optim:v", SECTIONS[0],
         "OS: Adam's (and AdamW's) first and second moments, fp32, one element per parameter each: whole at stage 0, "
         "the shard from stage 1. Lion keeps optim:m only; Adan optim:m, optim:v, optim:n and optim:g_prev; SGD "
         "with momentum optim:b; plain SGD nothing."),
    Term("activations", SECTIONS[0],
         "What forward saves for backward (a layer's input, Q, K, V, the softmax output P, ...), per micro-batch, "
         "named block.what in the ledger. ZeRO never shards them: every rank keeps its own. Checkpointing keeps "
         "fewer and recomputes the rest in backward."),
    Term("scratch", SECTIONS[0],
         "The update's scratch buffer in pure fp32, as large as the region the rank updates, alive during the "
         "optimizer step only."),
    Term("comm", SECTIONS[0],
         "Communication staging: a buffer a collective needs beside its input and output (a bucket, a quantized "
         "payload's copy)."),
    Term("peak, at rest", SECTIONS[0],
         "A rank's peak is the most its ledger held at one moment of the step (\"at the peak\" stacks what was live "
         "at that first moment, kind by kind); \"at rest\" is what it holds between steps: the model states only."),
    # -- collectives (collectives/) --
    Term("all-reduce", SECTIONS[1],
         "Every rank ends with the sum of every rank's buffer. A ring runs it as a reduce-scatter then an all-gather: "
         "2(N-1) steps, each rank sending 2(N-1)/N of the buffer. Plain data parallel (stage 0) all-reduces the "
         "gradients."),
    Term("reduce-scatter", SECTIONS[1],
         "Every rank ends with one chunk of the sum: rank r owns chunk r. N-1 ring steps; the partial sum of chunk c "
         "starts at rank c+1 and every hop rounds to the wire format (NCCL's order). Stages 1-3 reduce-scatter the "
         "gradients."),
    Term("all-gather", SECTIONS[1],
         "Every rank ends with every rank's chunk, in rank order: N-1 ring steps of copies, no arithmetic. Stages 1-2 "
         "all-gather the updated params after the step; stage 3 gathers each unit before it runs."),
    Term("broadcast", SECTIONS[1], "One rank's buffer copied to every other rank."),
    Term("ring, phase, hop", SECTIONS[1],
         "The ranks in a directed ring, each sending to the next. A phase is one reduce-scatter or all-gather: N-1 "
         "steps; a hop is one chunk sent from one rank to its neighbour in one step."),
    Term("tree all-reduce", SECTIONS[1],
         "An all-reduce over a tree instead of a ring: log2(N) levels, so its latency grows as log N where the ring's "
         "grows as N, for about the same bytes (NCCL's double binary tree; a plain binary tree moves twice as many). "
         "NCCL picks it for small messages; it sums in another order than the ring "
         "(zerosim.collectives.tree_all_reduce; its time against the ring's: tree_all_reduce_time, "
         "ring_tree_crossover)."),
    Term("wire format", SECTIONS[1],
         "The format a collective's payload travels in (fp16, bf16, fp32, fp8, int8 with scales); every add on the "
         "way rounds to it."),
    # -- time (analysis/timeline/) --
    Term("compute, communication", SECTIONS[2],
         "Each rank has a compute stream and a communication stream, as a GPU running NCCL on a side stream: a layer's "
         "work is a roofline (FLOPs at the format's peak rate, or bytes at HBM bandwidth); a ring phase takes "
         "(n-1)·α plus the busiest rank's bytes over the link's bandwidth β."),
    Term("exposed, hidden", SECTIONS[2],
         "Exposed communication: time the communication stream is busy while compute waits. Hidden: communication "
         "that runs under compute. Step time = compute + exposed."),
    Term("prefetch", SECTIONS[2],
         "Issuing the next unit's stage-3 gather before it is needed, so it runs under the current unit's compute; "
         "it holds one more unit's parameters in memory. zerosim's default schedule (seed 004's) has none."),
    # -- words --
    Term("shard, padding", SECTIONS[3],
         "The flat buffer of P parameters is zero-padded to Ψ = N·ceil(P/N) and cut into N equal contiguous shards "
         "of s elements: rank r owns [r·s, (r+1)·s). A parameter may straddle two shards; padding never reaches a "
         "result."),
    Term("unit", SECTIONS[3],
         "What stage 3 gathers and frees at once (DeepSpeed's module, FSDP's wrapped unit): the embedding, one "
         "transformer block (or one half of it), the head."),
    Term("stage 0-3", SECTIONS[3],
         "ZeRO's stages: 0 shards nothing (plain data parallel), 1 the optimizer states and master, 2 also the "
         "gradients, 3 also the params."),
    Term("micro-batch, accumulation", SECTIONS[3],
         "A micro-batch is what one rank runs forward and backward at once (B sequences of L tokens); gradient "
         "accumulation adds K micro-batches' gradients before one optimizer step."),
    Term("loss scale", SECTIONS[3],
         "S multiplies the loss before backward so that fp16 gradients sit above fp16's underflow; the step divides "
         "by S. It prevents underflow, not overflow: a large S makes gradients overflow to inf, and a dynamic "
         "scaler then skips the step and halves S."),
    Term("ulp, spacing", SECTIONS[3],
         "The gap between a number and the next one its format can hold: 2^-10 at 1.0 in fp16, 2^-7 in bf16, 2^-23 "
         "in fp32. An update smaller than half of it is lost."),
)


def get(term: str) -> Term:
    """The entry printed as `term` (a ledger kind "optim:m" finds "optim:m / optim:v")."""
    for t in GLOSSARY:
        if term == t.term or (term.startswith("optim:") and t.term.startswith("optim:")):
            return t
    raise KeyError(f"no glossary entry for {term!r}; there are {', '.join(t.term for t in GLOSSARY)}")


def link(term: str) -> str:
    """Where `term` is defined: "docs/glossary.md#anchor"."""
    return f"{DOC}#{get(term).anchor}"


def markdown() -> str:
    """docs/glossary.md's text."""
    lines = ["# Glossary", "",
             "The words zerosim's outputs use, each defined once: the memory kinds a rank's ledger holds, the",
             "collectives, the timeline's parts. Letters: P parameters, N ranks, s = ceil(P / N) one rank's shard,",
             "Ψ = N·s the padded flat buffer. (Written from `zerosim/viz/_glossary.py`; the web page carries the",
             "same.)",
             ""]
    for section in SECTIONS:
        lines += [f"## {section}", ""]
        for t in GLOSSARY:
            if t.section == section:
                lines += [f"### {t.term}", "", t.text, ""]
    return "\n".join(lines)


def html() -> str:
    """The entries as <dt>/<dd> pairs with ids "gloss-<anchor>" (the web page's glossary)."""
    from html import escape

    return "".join(f'<dt id="gloss-{t.anchor}">{escape(t.term)}</dt><dd>{escape(t.text)}</dd>' for t in GLOSSARY)
