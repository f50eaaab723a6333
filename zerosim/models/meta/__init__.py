"""Data-less models for the meta backend: memory and communication at 7B-175B scale without allocating.

    _model.py     MetaModel: layers known only by their parameter counts (a preset's modules or blocks)
    _decoder.py   MetaUnit, MetaDecoder: a decoder's real units answered from shapes alone (activations by name);
                  the families build theirs (gpt/_meta.py: MetaGPT, llama/_meta.py: MetaLlama)
    _arrays.py    like, source_arrays: new arrays in the namespace of the arrays a model was handed
"""

from zerosim.models.meta._arrays import like, source_arrays, zeros_without_memory
from zerosim.models.meta._decoder import MetaDecoder, MetaLMLoss, MetaUnit
from zerosim.models.meta._model import UNITS, MetaLayer, MetaLoss, MetaModel

__all__ = ["MetaDecoder", "MetaLMLoss", "MetaLayer", "MetaLoss", "MetaModel", "MetaUnit", "UNITS", "like",
           "source_arrays", "zeros_without_memory"]
