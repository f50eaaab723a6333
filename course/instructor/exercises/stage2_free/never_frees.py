"""Planted bug 'never frees' of exercise stage2_free (withheld: assignment 2 grades it)."""
def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    pieces = reduce_scatter([h.array for h in held])
    for r, piece in enumerate(pieces):
        add_to_shard(r, piece)
