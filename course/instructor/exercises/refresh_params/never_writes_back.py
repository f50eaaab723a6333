"""Planted bug 'never writes back' of exercise refresh_params (withheld: assignment 2 grades it)."""
def refresh(params, shard_size, all_gather):
    own = [p[r * shard_size:(r + 1) * shard_size] for r, p in enumerate(params)]
    return all_gather(own)
