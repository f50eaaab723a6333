"""Planted: slices each rank's own shard instead of gathering (right only inside one shard)."""
import numpy as np


def gather_layer(shards, start, stop, all_gather):
    all_gather(shards)
    s = len(shards[0])
    return [np.concatenate(shards)[start:stop] if stop <= s else shards[0][start:stop] for _ in shards]


def predict_params_peak(layer_sizes, N, prefetch):
    P = sum(layer_sizes)
    shard = -(-P // N)  # ceil: the flat buffer is padded to a multiple of N
    if prefetch == 0:
        live = max(layer_sizes)  # one gathered layer at a time
    else:  # this layer and the next (forward) or the previous (backward): the largest neighbouring pair
        live = max([layer_sizes[0]] + [a + b for a, b in zip(layer_sizes, layer_sizes[1:])])
    return 2 * (shard + live)
