"""Planted: the peak without the padding (P / N, floored)."""


def gather_layer(shards, start, stop, all_gather):
    whole = all_gather(shards)  # every rank: the whole padded flat buffer (the engine gathers only the layer's window)
    return [w[start:stop] for w in whole]


def predict_params_peak(layer_sizes, N, prefetch):
    P = sum(layer_sizes)
    shard = P // N
    if prefetch == 0:
        live = max(layer_sizes)  # one gathered layer at a time
    else:  # this layer and the next (forward) or the previous (backward): the largest neighbouring pair
        live = max([layer_sizes[0]] + [a + b for a, b in zip(layer_sizes, layer_sizes[1:])])
    return 2 * (shard + live)
