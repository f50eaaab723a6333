"""Planted: gathers once per rank (N all-gathers for one layer)."""


def gather_layer(shards, start, stop, all_gather):
    return [all_gather(shards)[r][start:stop] for r in range(len(shards))]


def predict_params_peak(layer_sizes, N, prefetch):
    P = sum(layer_sizes)
    shard = -(-P // N)  # ceil: the flat buffer is padded to a multiple of N
    if prefetch == 0:
        live = max(layer_sizes)  # one gathered layer at a time
    else:  # this layer and the next (forward) or the previous (backward): the largest neighbouring pair
        live = max([layer_sizes[0]] + [a + b for a, b in zip(layer_sizes, layer_sizes[1:])])
    return 2 * (shard + live)
