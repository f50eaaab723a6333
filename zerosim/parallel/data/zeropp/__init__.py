"""Fewer bits on the wire at ZeRO-3: DeepSpeed's ZeRO++ (qwZ: int8 weight gathers; qgZ: int4 gradient all-to-alls,
with LoCo's error feedback) and torchao's fp8 all-gather. The quantized collectives themselves are
`zerosim.collectives.quantized`'s; here is what the step does with them.

    _wire.py         Wire (what travels in fewer bits), WireState, LocoParams; a unit's quantized gather
    _qgz_reduce.py   qgZ in the engine: stage 3's gradient reduction through the int4 all-to-alls
"""

from zerosim.parallel.data.zeropp._qgz_reduce import LOCO, check_qgz_engine, reduce_params_qgz
from zerosim.parallel.data.zeropp._wire import LocoParams, Wire, WireState, gather_quantized

__all__ = ["LOCO", "LocoParams", "Wire", "WireState", "check_qgz_engine", "gather_quantized", "reduce_params_qgz"]
