"""A submission that never returns (every function loops): the grader gives 0 and says so in one line."""


def _forever(*args, **kwargs):
    while True:
        pass


# every function any of the three assignments asks for
ring_reduce_scatter = ring_all_gather = ring_all_reduce = tree_all_reduce = predict_2048 = _forever
predict_ring_bytes = predict_allreduce_ms = _forever
shard_bounds = reduce_layer_grads = average = refresh = predict_memory = predict_peak = seed001_table = _forever
gather_layer = predict_params_peak = predict_gathers = exposed_comm = _forever
