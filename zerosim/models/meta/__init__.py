"""Data-less models for the meta backend: memory and communication at 7B-175B scale without allocating.

    _model.py     MetaModel: layers known only by their parameter counts (a preset's modules or blocks)
    _decoder.py   MetaUnit, MetaDecoder: a decoder's real units answered from shapes alone (activations by name);
                  the families build theirs (gpt/_meta.py: MetaGPT, llama/_meta.py: MetaLlama)
    _arrays.py    like, source_arrays: new arrays in the namespace of the arrays a model was handed
    _eager.py     what PyTorch eager's autograd keeps, unit by unit, by name (`kernels="eager"`)
    _sac.py       torchtitan's op-level selective checkpointing: what a block keeps at its checkpoint
    _loss_peak.py the cross-entropy's real peak, by implementation (eager, chunked, fused-linear, probabilities)
"""

from zerosim.models.meta._arrays import like, source_arrays, weights_without_data
from zerosim.models.meta._decoder import KERNELS, LOSS_OF, MetaDecoder, MetaLMLoss, MetaUnit, twin_loss, twin_units
from zerosim.models.meta._eager import eager_spec
from zerosim.models.meta._loss_peak import LOSSES, fused_linear_rows, loss_spec
from zerosim.models.meta._model import UNITS, MetaLayer, MetaLoss, MetaModel
from zerosim.models.meta._sac import is_block, sac_spec, saved_weights

__all__ = ["KERNELS", "LOSSES", "LOSS_OF", "MetaDecoder", "MetaLMLoss", "MetaLayer", "MetaLoss", "MetaModel",
           "MetaUnit", "UNITS", "eager_spec", "fused_linear_rows", "is_block", "like", "loss_spec", "sac_spec",
           "saved_weights", "source_arrays", "weights_without_data", "twin_loss", "twin_units"]
