"""Planted bug 'everyone sends shard 0' of exercise refresh_params (withheld: assignment 2 grades it)."""
def refresh(params, shard_size, all_gather):
    own = [p[:shard_size] for p in params]
    for p, whole in zip(params, all_gather(own)):
        p[...] = whole
