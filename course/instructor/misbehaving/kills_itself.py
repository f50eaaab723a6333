"""A submission whose first call kills the interpreter (os._exit skips every handler)."""
import os


def _die(*args, **kwargs):
    os._exit(9)


ring_reduce_scatter = ring_all_gather = predict_2048 = _die
shard_bounds = reduce_layer_grads = average = refresh = predict_memory = _die
gather_layer = predict_params_peak = _die
