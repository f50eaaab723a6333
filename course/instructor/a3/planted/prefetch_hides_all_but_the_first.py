"""Planted: prefetch hides every gather but the first (true only while each compute outlasts the next gather)."""


def predict_gathers(layers, checkpoint):
    # forward and backward gather every linear layer (ReLUs have no parameters); checkpointing re-runs every layer's
    # forward but the last one's (its input is kept) before its backward, and gathers it again for that
    return 3 * layers - 1 if checkpoint and layers > 1 else 2 * layers


def gather_layer(shards, start, stop, all_gather):
    whole = all_gather(shards)  # every rank: the whole padded flat buffer (the engine gathers only the layer's window)
    return [w[start:stop] for w in whole]


def predict_params_peak(layer_sizes, N, prefetch):
    P = sum(layer_sizes)
    shard = -(-P // N)  # ceil: the flat buffer is padded to a multiple of N
    if prefetch == 0:
        live = max(layer_sizes)  # one gathered layer at a time
    else:  # this layer and the next (forward) or the previous (backward): the largest neighbouring pair
        live = max([layer_sizes[0]] + [a + b for a, b in zip(layer_sizes, layer_sizes[1:])])
    return 2 * (shard + live)


def exposed_comm(compute_s, gather_s, prefetch):
    if prefetch == 0:
        return sum(gather_s)
    return gather_s[0]
