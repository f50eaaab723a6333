"""Planted: every rank sends shard 0 in the refresh."""
import math

import numpy as np


def shard_bounds(length, world_size, rank):
    s = math.ceil(length / world_size)  # every shard has s elements; the last ones may be padding
    return min(rank * s, length), min((rank + 1) * s, length)


def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    pieces = reduce_scatter([h.array for h in held])
    for r, piece in enumerate(pieces):
        add_to_shard(r, piece)
        held[r].free()  # its piece is in the shard: nobody needs the layer's gradients any more


def average(summed, world_size):
    return summed.astype(np.float32) / np.float32(world_size)  # the cast is exact; one rounding, in fp32


def refresh(params, shard_size, all_gather):
    own = [p[:shard_size] for p in params]
    for p, whole in zip(params, all_gather(own)):
        p[...] = whole


def predict_memory(P, N, stage):
    padded = math.ceil(P / N) * N  # every flat buffer is padded to a multiple of N
    shard = padded // N
    return {"params": 2 * padded,  # fp16 weights: whole at stages 0-2
            "grads": 2 * (shard if stage >= 2 else padded),  # fp16 gradients: sharded from stage 2
            "master": 4 * (shard if stage >= 1 else padded),  # fp32 master, Adam m and v: sharded from stage 1
            "optim:m": 4 * (shard if stage >= 1 else padded),
            "optim:v": 4 * (shard if stage >= 1 else padded)}


def predict_peak(P, N, stage):
    shard = math.ceil(P / N)
    at_rest = sum(predict_memory(P, N, stage).values())
    region = shard * N if stage == 0 else shard  # what the rank updates: everything at stage 0, its shard after
    step = 4 * region  # the fp32 gradient the optimizer step reads (grad32), beside the resting states
    layer = 2 * math.ceil(P / 4) if stage >= 2 else 0  # stage 2: one layer's fresh fp16 gradients, in backward
    return at_rest + max(step, layer)


def seed001_table(P, N):
    return [16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 16 * P / N]
