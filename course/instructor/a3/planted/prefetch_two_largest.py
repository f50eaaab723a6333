"""Planted: prefetch holds the two largest layers (not the largest neighbouring pair)."""


def gather_layer(shards, start, stop, all_gather):
    whole = all_gather(shards)  # every rank: the whole padded flat buffer (the engine gathers only the layer's window)
    return [w[start:stop] for w in whole]


def predict_params_peak(layer_sizes, N, prefetch):
    P = sum(layer_sizes)
    shard = -(-P // N)  # ceil: the flat buffer is padded to a multiple of N
    if prefetch == 0:
        live = max(layer_sizes)  # one gathered layer at a time
    else:  # this layer and the next (forward) or the previous (backward): the largest neighbouring pair
        live = sum(sorted(layer_sizes)[-2:])
    return 2 * (shard + live)
