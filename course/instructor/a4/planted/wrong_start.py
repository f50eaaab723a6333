"""Assignment 4, planted: rank i sends its own chunk i first, so chunk c's sum starts at rank c (misconception
'wrong_start'). Scores partial credit: the all-gather and the prediction are right."""
import torch
import torch.distributed as dist


def predict_zero1_bytes(P, N):
    s = -(-P // N)  # the padded buffer's chunk
    return 2 * (N - 1) * s * 4  # N - 1 chunks a phase, two phases, fp32


def ring_reduce_scatter(x):
    n, i = dist.get_world_size(), dist.get_rank()
    s = x.numel() // n
    chunks = [x[c * s:(c + 1) * s].clone() for c in range(n)]
    for k in range(n - 1):
        out, back = (i - k) % n, (i - k - 1) % n  # its own chunk first
        sent = dist.isend(chunks[out], (i + 1) % n)
        got = torch.empty_like(chunks[back])
        dist.recv(got, (i - 1) % n)
        sent.wait()
        chunks[back] = got + chunks[back]  # in x's dtype: the hop rounds
    return chunks[(i + 1) % n]


def ring_all_gather(shard):
    n, i = dist.get_world_size(), dist.get_rank()
    shards = [None] * n
    shards[i] = shard.clone()
    for k in range(n - 1):
        out, back = (i - k) % n, (i - k - 1) % n
        sent = dist.isend(shards[out], (i + 1) % n)
        got = torch.empty_like(shard)
        dist.recv(got, (i - 1) % n)
        sent.wait()
        shards[back] = got
    return torch.cat(shards)


def zero1_step(model, x, t, state, lr):
    n, i = dist.get_world_size(), dist.get_rank()
    params = list(model.parameters())
    if not state:
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        size = flat.numel()
        s = -(-size // n)
        flat = torch.cat([flat, flat.new_zeros(n * s - size)])
        shard = torch.nn.Parameter(flat[i * s:(i + 1) * s].clone())
        state.update(size=size, s=s, shard=shard, adam=torch.optim.Adam([shard], lr=lr))
    model.zero_grad(set_to_none=True)
    y = model(x)
    loss = ((y - t) ** 2).sum() * (0.5 / len(x))
    loss.backward()
    size, s = state["size"], state["s"]
    g = torch.cat([p.grad.reshape(-1) for p in params])
    g = torch.cat([g, g.new_zeros(n * s - size)])
    state["shard"].grad = ring_reduce_scatter(g) / n  # sum first, then divide once, in fp32
    state["adam"].step()
    flat = ring_all_gather(state["shard"].detach())[:size]
    with torch.no_grad():
        at = 0
        for p in params:
            p.copy_(flat[at:at + p.numel()].reshape(p.shape))
            at += p.numel()
