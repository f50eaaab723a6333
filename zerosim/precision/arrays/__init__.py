"""Where rank arrays live and how their formats are stored: NumPy on the host, CuPy on a GPU (bf16 as uint16),
or a NumPy stand-in that refuses what CuPy refuses, so the device path is checked without a GPU.

    _namespace.py   ArrayNamespace: an array module and how it stores each format; NUMPY, device_namespace
    _standin.py     StandinArray: a NumPy array dressed as a CuPy array
"""

from zerosim.precision.arrays._namespace import NUMPY, ArrayNamespace, device_namespace, namespace_of, numpy_standin

__all__ = ["NUMPY", "ArrayNamespace", "device_namespace", "namespace_of", "numpy_standin"]
