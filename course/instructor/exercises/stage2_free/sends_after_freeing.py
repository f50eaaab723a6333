"""Planted bug 'sends after freeing' of exercise stage2_free (withheld: assignment 2 grades it)."""
def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    arrays = [h.array for h in held]
    for h in held:
        h.free()
    pieces = reduce_scatter(arrays)
    for r, piece in enumerate(pieces):
        add_to_shard(r, piece)
