"""NCCL's own collectives against zerosim's ring, byte for byte, on real GPUs: the library side of
`zerosim verify-nccl` (one channel, the ring's order from an NCCL_GRAPH_FILE; NCCL's chunk map for all-reduce).

    _check.py   verify, ring_environment, ring_graph_xml, random_inputs
"""

from zerosim.frameworks.nccl._check import RING_ENV, Agreement, random_inputs, ring_environment, ring_graph_xml, verify

__all__ = ["Agreement", "RING_ENV", "random_inputs", "ring_environment", "ring_graph_xml", "verify"]
