"""A submission whose first call kills the interpreter (os._exit skips every handler)."""
import os


def _die(*args, **kwargs):
    os._exit(9)


# every function any of the three assignments asks for
ring_reduce_scatter = ring_all_gather = ring_all_reduce = tree_all_reduce = predict_2048 = _die
predict_ring_bytes = predict_allreduce_ms = _die
shard_bounds = reduce_layer_grads = average = refresh = predict_memory = predict_peak = seed001_table = _die
gather_layer = predict_params_peak = predict_gathers = exposed_comm = _die
