"""Tensor and sequence parallelism beside ZeRO: Megatron's column- and row-parallel layers, their collectives on the
TP groups of the mesh, a vocabulary-parallel embedding, head and cross-entropy — composed with every ZeRO stage and
strategy, which shards each TP rank's slice over the data-parallel ranks that hold it.

    from zerosim.parallel.tensor import TensorParallel
    tp = TensorParallel(gpt, tp=2, sequence_parallel=True)       # gpt: a zerosim GPT or Llama (or its meta twin)
    engine = ZeroEngine(tp.model, Cluster(8, gpus_per_node=4), 3, Adam(), "bf16-mixed", parallelisms=(tp,))
    tp.whole_params(engine.ctx)                                  # the whole model's (P,) weights, joined back

Its files, the algorithm apart from its communication:

    _parallelism.py     TensorParallel: the step's points (the contract), what runs where
    _plan.py            where Megatron's operators sit around each unit, as data (the engine's and the oracle's)
    _communication.py   the operators f, g and SP's all-gather / reduce-scatter on the TP groups; the loss's
                        all-reduces
    _model.py           TensorParallelModel: one TP rank's units of a GPT or a Llama, checked as Megatron checks
    _layers.py          the column-to-row region: attention on H/T heads (GQA's G/T), the MLP on F/T columns
    _replicated.py      the units between collectives: norms, bias + residual (on sequence shards with SP)
    _vocab.py           the vocabulary's rows: the embedding, the LM head; Megatron's padding rule
    _cross_entropy.py   the vocabulary-parallel cross-entropy (max, predicted logit and sum of exp all-reduced)
    _bundle.py          the residual stream beside the value, between units
    _slicing.py         which part of each parameter a TP rank holds: the whole model cut and joined back
    _meta.py            the data-less twin of a TP rank's model, for the meta backend
    _eager.py           what torch's eager autograd keeps on a TP rank under torchtitan's DTensor TP + SP plan (the
                        "torchtitan" layout; _model.py LAYOUTS names the two layouts)
    _costs.py           by hand: Megatron's activation formulas, TP's bytes a step

The oracle is zerosim.reference's TensorReference; docs/tensor-parallelism.md is the user's page.
"""

from zerosim.parallel.tensor._bundle import Bundle
from zerosim.parallel.tensor._communication import CONJUGATES, Conjugate, fp8_wire, run_side
from zerosim.parallel.tensor._costs import (
    MEGATRON_TERMS,
    Term,
    llama_layer_bytes,
    megatron_formula,
    megatron_layer_bytes,
    term_bytes,
    torchtitan_eager_layer_bytes,
    tp_bytes_per_micro_step,
    zerosim_layer_bytes,
)
from zerosim.parallel.tensor._cross_entropy import VocabParallelCrossEntropy, VocabTarget
from zerosim.parallel.tensor._meta import MetaTensorParallelModel, MetaTensorParallelUnit
from zerosim.parallel.tensor._model import (
    DEFAULT_LAYOUT,
    LAYOUTS,
    REFUSED_CHECKPOINTS,
    Layout,
    TensorParallelModel,
    check_checkpoint,
    check_splits,
    padded_model,
)
from zerosim.parallel.tensor._parallelism import TensorParallel
from zerosim.parallel.tensor._plan import PLACEMENTS, Placement, placement
from zerosim.parallel.tensor._slicing import RULES, local_flat, whole_flat
from zerosim.parallel.tensor._vocab import MEGATRON_VOCAB_MULTIPLE, padded_vocab

__all__ = [
    "Bundle", "CONJUGATES", "Conjugate", "DEFAULT_LAYOUT", "LAYOUTS", "Layout", "MEGATRON_TERMS",
    "MEGATRON_VOCAB_MULTIPLE", "MetaTensorParallelModel", "PLACEMENTS", "Placement", "REFUSED_CHECKPOINTS", "RULES",
    "Term", "TensorParallel", "TensorParallelModel", "VocabParallelCrossEntropy", "VocabTarget", "check_checkpoint",
    "check_splits", "fp8_wire", "llama_layer_bytes", "local_flat", "megatron_formula", "megatron_layer_bytes",
    "padded_model", "padded_vocab", "placement", "term_bytes", "torchtitan_eager_layer_bytes",
    "tp_bytes_per_micro_step", "whole_flat", "zerosim_layer_bytes",
    "MetaTensorParallelUnit", "run_side",
]
