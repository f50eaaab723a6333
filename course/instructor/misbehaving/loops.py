"""A submission that never returns (every function loops): the grader gives 0 and says so in one line."""


def _forever(*args, **kwargs):
    while True:
        pass


ring_reduce_scatter = ring_all_gather = predict_2048 = _forever
shard_bounds = reduce_layer_grads = average = refresh = predict_memory = _forever
gather_layer = predict_params_peak = _forever
