"""What a payload is called on the wire, and how many bytes an element takes — for payloads that are not floats.

The ring and the trace read a wire's `name`, `dtype` and `itemsize`; zerosim's float formats have them
(`precision.Format`). Quantized collectives also send integers: int8 (qwZ's weights) and int4 packed two to a
byte, carried as uint8 and named "int4x2" so the trace says what its bytes hold. Scales travel as fp32 floats.
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass
from zerosim.precision import get_format


@dataclass(frozen=True)
class IntWire:
    """An integer payload: its name in the trace, the numpy dtype that carries it, bytes per carried element."""

    name: str
    dtype: np.dtype
    itemsize: int


INT_WIRES = {
    "int8": IntWire("int8", np.dtype(np.int8), 1),
    "int4x2": IntWire("int4x2", np.dtype(np.uint8), 1),  # two int4 a byte (DeepSpeed's PackedInt4)
    "uint8": IntWire("uint8", np.dtype(np.uint8), 1),  # raw bytes: E8M0 block scales, say
}


def wire_of(dtype, name: str | None = None):
    """The wire for arrays of `dtype`, by `name` when given ("int4x2" for packed int4)."""
    if name is not None:
        if name in INT_WIRES:
            if INT_WIRES[name].dtype != np.dtype(dtype):
                raise ValueError(f"wire {name!r} carries {INT_WIRES[name].dtype}, got {np.dtype(dtype)}")
            return INT_WIRES[name]
        return get_format(name)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        key = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8"}.get(dt)
        if key is None:
            raise ValueError(f"no wire carries {dt}: quantized payloads are int8 or bytes")
        return INT_WIRES[key]
    return get_format(dt)


def wire_itemsize(name: str) -> float:
    """Bytes one element of a named wire takes (a trace's dtype string): an int wire's, or a float format's."""
    if name in INT_WIRES:
        return INT_WIRES[name].itemsize
    return get_format(name).bits / 8
