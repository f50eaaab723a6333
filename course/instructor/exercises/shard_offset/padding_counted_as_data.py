"""Planted bug 'padding counted as data' of exercise shard_offset (withheld: assignment 2 grades it)."""
def shard_bounds(length, world_size, rank):
    s = -(-length // world_size)
    return rank * s, (rank + 1) * s
