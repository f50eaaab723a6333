"""Assignment 3, reference solution (instructors only: not shipped in the package)."""


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
    L = len(compute_s)
    order = [("gather", i) for i in range(min(prefetch + 1, L))]  # issued at the start
    for i in range(L):
        order.append(("compute", i))
        if i + prefetch + 1 < L:
            order.append(("gather", i + prefetch + 1))  # issued when layer i's compute ends
    ready = comm_free = 0.0  # when the compute stream and the communication stream are next free
    gathered, computes, gathers = {}, [], []
    for what, i in order:
        if what == "gather":  # issued once the computes before it have ended; one gather at a time
            start = max(ready, comm_free)
            comm_free = gathered[i] = start + gather_s[i]
            gathers.append((start, comm_free))
        else:  # after the previous compute and this layer's own gather
            start = max(ready, gathered[i])
            ready = start + compute_s[i]
            computes.append((start, ready))
    hidden = sum(max(0.0, min(ge, ce) - max(gs, cs)) for gs, ge in gathers for cs, ce in computes)
    return sum(ge - gs for gs, ge in gathers) - hidden
