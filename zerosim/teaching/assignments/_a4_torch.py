"""Assignment 4 (a week, ~9 h): DDP with ZeRO-1 on real torch.distributed — N CPU processes on gloo. Predict the bytes a
ZeRO-1 step sends; write the ring reduce-scatter and all-gather with torch's point-to-point sends in NCCL's order; then
one ZeRO-1 training step of a torch MLP (local backward, flat gradient reduce-scattered, Adam on each rank's shard,
parameters all-gathered); explain.

Graded bit for bit against zerosim's own recipe for the same model and data (the parity kit's MLP and batches,
zerosim/frameworks/torch): each rank's output against `zerosim.collectives.reduce_scatter` / `all_gather` (the ring in
NCCL's order, every hop rounded to the wire's dtype), and the step's parameters against the same ring, sum-then-divide
in fp32, and Adam with torch's own formula and sqrt (TorchSqrtAdam) on each rank's flat shard. Every tensor a rank
sends is recorded (zerosim/teaching/_gloo_ranks.py), so a wrong answer names the first hop that differs — ring step,
sender, receiver, chunk, both values — and, where a known mistake gives exactly the student's numbers (rounding once,
the ring starting one rank early, dividing before the sum, shards in the wrong order), that misconception.

Where each part runs. The learner's function runs on the gloo ranks through a harness (_gloo_ranks.py, `through`):
under the grader's sandbox the harness runs in the sandbox's child beside the learner's code and returns plain data
(each rank's output, the parameters after each step, every send); in a notebook it runs in this process. Everything
the verdict compares against is the grader's own: the inputs it sends, the model and batches it builds, each rank's
local gradient (autograd here, on zerosim's parameters of that step), zerosim's ring and Adam — nothing the child
reports feeds the expected answer.

Needs torch (the `parity` extra; a CPU build is enough): without it every case fails saying so.
"""

from __future__ import annotations

import io

import numpy as np

from zerosim.teaching.assignments._assignment import Assignment
from zerosim.teaching.assignments._parts import Misconception, Part, handout_points, tests_of, wrong
from zerosim.teaching.exercises import Counterexample, Exercise, first_difference, through

LR = 0.01  # the handout's learning rate for torch.optim.Adam (its other defaults: betas (0.9, 0.999), eps 1e-8)
SEED = 4  # the parity kit's seed for the MLP's initial weights and each rank's batches
BATCH = 3  # samples per rank per step
# The harnesses the learner's functions run through (in the sandbox, in its child): zerosim/teaching/_gloo_ranks.py
RING = "zerosim.teaching._gloo_ranks:ring_on_gloo"
ZERO1 = "zerosim.teaching._gloo_ranks:zero1_on_gloo"

STARTER = '''\
"""Assignment 4: DDP with ZeRO-1 on torch.distributed. See `zerosim assignment show 4`."""
try:
    import torch
    import torch.distributed as dist
except ImportError:  # real torch.distributed, on gloo CPU processes: a CPU build of torch is enough
    raise ImportError("assignment 4 needs torch: pip install 'zerosim[parity]'") from None


def predict_zero1_bytes(P, N):
    """Bytes one rank sends in one ZeRO-1 step of a P-parameter fp32 model on N ranks: the ring reduce-scatter of
    the flat gradient, then the ring all-gather of the updated parameters (the buffer padded to a multiple of N)."""
    raise NotImplementedError


def ring_reduce_scatter(x):
    """x: this rank's 1-D tensor (fp32 or fp16), its length a multiple of the world size N. Sum it over every rank
    with a ring of point-to-point sends in NCCL's order, every add in x's dtype; return this rank's chunk r of the
    sum (len(x) / N values, x's dtype). Use dist.get_rank(), dist.get_world_size(), dist.isend, dist.recv."""
    raise NotImplementedError


def ring_all_gather(shard):
    """shard: this rank's 1-D tensor. Return every rank's shard, in rank order, concatenated (N * len(shard)
    values), forwarded around the ring with point-to-point sends."""
    raise NotImplementedError


def zero1_step(model, x, t, state, lr):
    """One ZeRO-1 training step of `model` (the same torch MLP on every rank) on this rank's batch (x, t):
    loss = ((model(x) - t) ** 2).sum() * (0.5 / len(x)); backward; the gradients flattened in
    model.parameters() order and padded with zeros to a multiple of N; your ring_reduce_scatter; divide by N (fp32);
    torch.optim.Adam(lr=lr) on this rank's shard of the flat parameters; your ring_all_gather; the model's
    parameters set from the result. `state`: a dict of yours, kept between steps (the shard, the optimizer)."""
    raise NotImplementedError
'''


def _torch():
    try:
        import torch
    except ImportError:
        raise Counterexample("assignment 4 runs real torch.distributed: install torch (a CPU build is enough) and "
                             "zerosim's parity extra, pip install 'zerosim[parity]'") from None
    torch.set_num_threads(1)  # the local gradients computed here take the ranks' one-thread path
    return torch


def _ranks(fn, harness: str, *args) -> list:
    """[(result, sends)] per rank: the learner's `fn` run through `harness` on the gloo ranks (in the sandbox's
    child, or here); a Counterexample with the harness's line when a rank failed."""
    got = through(fn, harness, *args)
    if isinstance(got, dict) and "failed" in got:
        raise Counterexample(str(got["failed"]))
    return got["ranks"]


def _wire(case):
    return np.float16 if case["dtype"] == "fp16" else np.float32


# --------------------------------------------------------------------------------------- the ring, hop by hop -----
def _expected(collective: str, arrays: list):
    """zerosim's ring on `arrays` (one per rank): (its results, its sends: {(rank, i): (dst, chunk, values)}, rank's
    i-th send in ring-step order)."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather, reduce_scatter

    cluster = Cluster(len(arrays), keep_values=True)
    out = (reduce_scatter if collective == "reduce-scatter" else all_gather)(cluster, arrays)
    sends = {}
    for e in sorted(cluster.trace.events, key=lambda e: (e.call, e.step, e.src)):
        sends[(e.src, sum(1 for k in sends if k[0] == e.src))] = (collective, e.step, e.dst, e.chunk, e.values)
    return out, sends


def _first_hop(got_sends: list, want: dict) -> str | None:
    """The first send (in ring-step order, then by rank) that is not zerosim's: in words, or None when all agree."""
    n = len(got_sends)
    steps = max((i for _, i in want), default=-1) + 1
    for i in range(steps):
        for r in range(n):
            collective, step, dst, chunk, values = want[(r, i)]
            where = f"the {collective}'s ring step {step}, rank {r} → rank {dst} (chunk {chunk})"
            if i >= len(got_sends[r]):
                return f"{where}: rank {r} made only {len(got_sends[r])} send(s); the ring makes {steps} a rank"
            to, sent = got_sends[r][i]
            if to != dst:
                return f"{where}: rank {r}'s send number {i} went to rank {to}; the ring sends to rank {dst}"
            problem = first_difference(sent, np.asarray(values), f"{where}: what rank {r} sent")
            if problem:
                return _theirs(problem, "zerosim's ring sends")
    extra = [r for r in range(n) if len(got_sends[r]) > steps]
    if extra:
        return f"rank {extra[0]} made {len(got_sends[extra[0]])} sends; the ring makes {steps} a rank"
    return None


def _theirs(problem: str, whose: str) -> str:
    """first_difference's line with the oracle named for what it is here."""
    return problem.replace(", the oracle's is ", f", {whose} ").replace("; the oracle's is ", f"; {whose} ")


def _inputs(case) -> list:
    return [np.asarray(x, _wire(case)) for x in case["xs"]]


def _ring_cases(kind):
    rng = np.random.default_rng(44)
    rs = kind == "reduce-scatter"

    def rand(n, size, dtype, scale=1.0):
        return [(rng.standard_normal(size) * scale).astype(np.float32).astype(np.float16 if dtype == "fp16"
                                                                               else np.float32) for _ in range(n)]
    yield {"what": f"2 ranks, fp32, {4 if rs else 3} values a rank", "n": 2, "dtype": "fp32",
           "xs": rand(2, 4 if rs else 3, "fp32")}
    if rs:
        yield {"what": "4 ranks, fp16: rank 0 holds 2048 in each of 4 elements, ranks 1-3 hold 1", "n": 4,
               "dtype": "fp16", "xs": [np.full(4, 2048, np.float16)] + [np.ones(4, np.float16)] * 3}
    else:
        yield {"what": "4 ranks, fp16, 2 values a rank", "n": 4, "dtype": "fp16", "xs": rand(4, 2, "fp16")}
    # hidden: three ranks, values of many magnitudes in fp16 (where the order of the adds shows), one rank
    yield {"what": f"3 ranks, fp32, {12 if rs else 5} values a rank", "n": 3, "dtype": "fp32",
           "xs": rand(3, 12 if rs else 5, "fp32")}
    yield {"what": "4 ranks, fp16, 16 values a rank of magnitudes 2**-8 to 2**8", "n": 4, "dtype": "fp16",
           "xs": [(rng.standard_normal(16) * 2.0 ** rng.integers(-8, 9, 16)).astype(np.float16) for _ in range(4)]}
    yield {"what": "1 rank: nothing to send", "n": 1, "dtype": "fp32", "xs": rand(1, 3, "fp32")}


def _run_ring(fn, case):
    _torch()
    return _ranks(fn, RING, _inputs(case))


def _check_ring(kind, misconceptions):
    def check(fn, case):
        got = _run_ring(fn, case)
        want, sends = _expected(kind, _inputs(case))
        for r, (out, _) in enumerate(got):
            problem = first_difference(out, want[r], f"rank {r}'s {'chunk' if kind == 'reduce-scatter' else 'result'}")
            if problem:
                hop = _first_hop([s for _, s in got], sends)
                said = _theirs(problem, "zerosim's ring gives") + (f"; the first hop that differs: {hop}" if hop
                                                                   else "")
                named = next((m for m in misconceptions
                              if _same([o for o, _ in got], m.output(case))), None)
                raise wrong(said, named)
        hop = _first_hop([s for _, s in got], sends)
        if hop:  # the right results by another route (a dist collective, or another order): the ring is the task
            raise Counterexample(f"every rank's result is right, but not by the ring in NCCL's order: {hop}")
    return check


def _same(got: list, theirs) -> bool:
    if theirs is None or len(got) != len(theirs):
        return False
    return all(np.asarray(g).shape == np.asarray(t).shape and np.array_equal(np.asarray(g).view(np.uint8),
                                                                             np.asarray(t).view(np.uint8))
               for g, t in zip(got, theirs))


def _round_once(case):
    """Partial sums kept in fp32 and rounded to the wire's dtype once, at the end."""
    if case["dtype"] != "fp16":
        return None
    want, _ = _expected("reduce-scatter", [x.astype(np.float32) for x in _inputs(case)])
    return [w.astype(np.float16) for w in want]


def _wrong_start(case):
    """Rank i sends its own chunk i first: chunk c's sum starts at rank c and ends at rank c − 1, which owns it."""
    n = case["n"]
    rolled = [np.roll(x, -(len(x) // n)) for x in _inputs(case)]  # chunk c where chunk c − 1 was
    want, _ = _expected("reduce-scatter", rolled)
    return want


def _rank_order(case):
    """Every rank's shards in the order they arrived (its own first) instead of in rank order."""
    n = case["n"]
    xs = _inputs(case)
    return [np.concatenate([xs[(r - k) % n] for k in range(n)]) for r in range(n)]


RS_MISCONCEPTIONS = (
    Misconception("round_once", "you kept the partial sums in fp32 and rounded to fp16 once, at the end; NCCL's "
                  "kernels round every partial sum to the wire's dtype at every hop (2048 + 1 rounds to 2048 in fp16 "
                  "before the next 1 arrives)", _round_once),
    Misconception("wrong_start", "rank i sent its own chunk i first, so chunk c's sum started at rank c and "
                  "ended on rank c − 1: in NCCL's ring rank i first sends chunk i − 1, so that rank r ends owning "
                  "chunk r, summed ((x[r+1] + x[r+2]) + …) + x[r]", _wrong_start),
)
AG_MISCONCEPTIONS = (
    Misconception("rank_order", "each rank concatenated the shards in the order they arrived, its own first: the "
                  "result is the shards in rank order, shard k at offset k·s on every rank", _rank_order),
)


# ------------------------------------------------------------------------------------------ one ZeRO-1 step -------
def _z1_cases():
    yield {"what": "2 ranks, MLP widths (4, 8, 3) (P = 67), 2 steps", "n": 2, "widths": (4, 8, 3), "steps": 2}
    yield {"what": "4 ranks, MLP widths (4, 8, 3) (P = 67: shards of 17, the last padded), 2 steps", "n": 4,
           "widths": (4, 8, 3), "steps": 2}
    # hidden: three ranks (dividing by 3 rounds; a parameter straddles two shards), a wider MLP
    yield {"what": "3 ranks, MLP widths (4, 8, 3) (P = 67: shards of 23, one padding element), 3 steps", "n": 3,
           "widths": (4, 8, 3), "steps": 3}
    yield {"what": "3 ranks, MLP widths (6, 10, 5) (P = 125: shards of 42), 2 steps", "n": 3, "widths": (6, 10, 5),
           "steps": 2}


def _run_z1(fn, case):
    """Each rank's parameters after each step of the learner's `fn`, and its sends, from the grader's model (torch's
    bytes) and batches."""
    torch = _torch()
    from zerosim.frameworks.torch import torch_batch, torch_model

    widths, buffer = case["widths"], io.BytesIO()
    torch.save(torch_model(torch, widths, SEED), buffer)
    batches = [[tuple(a.numpy() for a in torch_batch(torch, widths, SEED, step, rank, BATCH))
                for rank in range(case["n"])] for step in range(case["steps"])]
    return _ranks(fn, ZERO1, np.frombuffer(buffer.getvalue(), np.uint8).copy(), batches, LR)


def _gradients(case):
    """(the MLP's initial flat fp32 parameters, gradients(step, params) -> each rank's local gradient (P,) fp32 at
    the flat `params`): autograd on the handout's loss and each rank's batch, computed here — what the ring sums."""
    torch = _torch()
    from zerosim.frameworks.torch import torch_batch, torch_half_mse, torch_model

    widths = case["widths"]
    model = torch_model(torch, widths, SEED)
    weights = list(model.parameters())

    def flat(tensors):
        return np.concatenate([p.detach().reshape(-1).numpy() for p in tensors]).astype(np.float32)

    def gradients(step: int, values: np.ndarray) -> list:
        with torch.no_grad():
            at = 0
            for p in weights:
                p.copy_(torch.from_numpy(values[at:at + p.numel()].copy()).reshape(p.shape))
                at += p.numel()
        out = []
        for rank in range(case["n"]):
            for p in weights:
                p.grad = None  # each rank's gradient on its own batch alone
            x, t = torch_batch(torch, widths, SEED, step, rank, BATCH)
            torch_half_mse(model(x), t).backward()
            out.append(flat(p.grad for p in weights))
        return out

    return flat(weights), gradients


def zero1_recipe(initial: np.ndarray, gradients, steps: int, n: int, lr: float, divide_first: bool = False):
    """zerosim's ZeRO-1 steps on `n` ranks from `initial` (P,) fp32 parameters, `gradients(step, params)` giving each
    rank's (P,) fp32 local gradient at the step's parameters: per step, (each rank's expected sends ({(rank, i): ...},
    as _expected), the local gradients, the parameters after it). The flat gradient padded to N·s, zerosim's ring
    reduce-scatter (fp32, NCCL's order), ÷ N in fp32 (before the ring with `divide_first`), Adam(formula="torch") with
    torch's own sqrt on each rank's shard, zerosim's ring all-gather."""
    from zerosim.frameworks.torch import TorchSqrtAdam

    size = initial.size
    s = -(-size // n)
    adam = TorchSqrtAdam(lr=lr)
    params = np.zeros(n * s, np.float32)
    params[:size] = initial
    m, v = np.zeros_like(params), np.zeros_like(params)
    out = []
    for t in range(1, steps + 1):
        local = gradients(t - 1, params[:size].copy())
        padded = [np.concatenate([g, np.zeros(n * s - size, np.float32)]) for g in local]
        if divide_first:
            padded = [g / np.float32(n) for g in padded]
        shards, sent = _expected("reduce-scatter", padded)
        for r in range(n):
            g = shards[r] if divide_first else shards[r] / np.float32(n)
            a, b = r * s, (r + 1) * s
            w, state = params[a:b].copy(), {"m": m[a:b].copy(), "v": v[a:b].copy()}
            adam.step(w, g, state, t)
            params[a:b], m[a:b], v[a:b] = w, state["m"], state["v"]
        gathered, more = _expected("all-gather", [params[r * s:(r + 1) * s].copy() for r in range(n)])
        params = gathered[0].copy()
        steps_sent = max(i for _, i in sent) + 1 if sent else 0
        sent.update({(r, steps_sent + i): h for (r, i), h in more.items()})
        out.append((sent, local, params[:size].copy()))
    return out


def _param_at(names_sizes, i: int) -> str:
    at = 0
    for name, size in names_sizes:
        if i < at + size:
            return f"{name}[{i - at}]"
        at += size
    return f"element {i}"


def _check_z1(fn, case):
    got = _run_z1(fn, case)
    n = case["n"]
    initial, gradients = _gradients(case)
    want = zero1_recipe(initial, gradients, case["steps"], n, LR)
    sizes = [(name, int(np.prod(shape))) for name, shape in _shapes(case["widths"])]
    for k, (sent, local, params) in enumerate(want, 1):
        for r in range(n):
            mine = got[r][0]["steps"][k - 1]["params"]
            problem = first_difference(mine, params, f"after step {k}, rank {r}'s parameters",
                                       lambda i: f" ({_param_at(sizes, i)})")
            if problem:
                hops = [got[q][1][slice(*got[q][0]["steps"][k - 1]["sends"])] for q in range(n)]
                hop = _first_hop(hops, sent) if all(hops) else None
                said = _theirs(problem, "zerosim's recipe gives")
                named = None
                if hop:
                    said += f"; in step {k} the first hop that differs: {hop}"
                    own = _own_chunk_sent_first(hops, local, n)
                    if own is not None and " ring step 0," in hop and "reduce-scatter" in hop:
                        named = own
                    elif " ring step 0," in hop and "reduce-scatter" in hop:
                        said += (" (a rank's first send is a chunk of its own local gradient: flatten in "
                                 "model.parameters() order, pad with zeros at the end, and compute the handout's loss)")
                elif not all(hops):
                    said += " (no point-to-point send was recorded: use your ring_reduce_scatter and ring_all_gather)"
                theirs = zero1_recipe(initial, gradients, k, n, LR, divide_first=True)[k - 1][2]
                if named is None and np.array_equal(mine.view(np.uint32), theirs.view(np.uint32)):
                    named = Z1_MISCONCEPTIONS[0]
                raise wrong(said, named)


def _own_chunk_sent_first(hops: list, local: list, n: int):
    """RS_MISCONCEPTIONS' wrong_start when every rank's first send was its own chunk r of its padded local gradient
    (the ring's first send is chunk r − 1), else None."""
    size = local[0].size
    s = -(-size // n)
    for r in range(n):
        g = np.concatenate([local[r], np.zeros(n * s - size, np.float32)])
        if not hops[r] or not np.array_equal(np.asarray(hops[r][0][1]).view(np.uint8), g[r * s:(r + 1) * s].view(
                np.uint8)):
            return None
    return RS_MISCONCEPTIONS[1]


def _shapes(widths) -> list:
    """The MLP's parameters in registration order: torch's names and shapes (nn.Linear: weight (out, in), bias)."""
    out = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        out += [(f"{2 * i}.weight", (b, a)), (f"{2 * i}.bias", (b,))]
    return out


Z1_MISCONCEPTIONS = (
    Misconception("divides_first", "you divided each rank's gradient by N before the ring and summed the quotients "
                  "(what NCCL's avg and FSDP's pre-divide do); the recipe sums first and divides the sum once, in "
                  "fp32: x/3 + y/3 and (x + y)/3 differ in the last bit (at N = 2 or 4, dividing by a power of two "
                  "is exact, and the two agree)", lambda case: None),
)


# ------------------------------------------------------------------------------------------ the prediction --------
def _bytes_cases():
    yield {"what": "P = 67 on 3 ranks", "P": 67, "N": 3}
    yield {"what": "P = 1,000 on 4 ranks", "P": 1000, "N": 4}
    # hidden: fewer parameters than ranks, one rank
    yield {"what": "P = 5 on 8 ranks", "P": 5, "N": 8}
    yield {"what": "P = 1,000 on 1 rank", "P": 1000, "N": 1}


def _zero1_sent(P: int, N: int) -> int:
    """The bytes rank 0 sends in zerosim's ring reduce-scatter and all-gather of a P-element fp32 buffer (trace)."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather, reduce_scatter

    cluster = Cluster(N)
    shards = reduce_scatter(cluster, [np.zeros(P, np.float32) for _ in range(N)])
    all_gather(cluster, shards)
    return int(cluster.trace.sent_totals(N)[0])


def _check_bytes(fn, case):
    from zerosim.teaching._predict import judge

    P, N = case["P"], case["N"]
    s = -(-P // N)
    verdict = judge(fn(P, N), _zero1_sent(P, N), unit="B", why="each phase of the ring sends N − 1 chunks of "
                    "s = ceil(P / N) elements, 4 bytes each: the reduce-scatter sends partial sums, the all-gather "
                    "the updated shards: 2·(N − 1)·s·4 (the padding travels too)",
                    wrong=((2 * (N - 1) * P / N * 4, "2·(N − 1)/N·P·4 without the padding: the ring sends whole "
                            "chunks of ceil(P / N)"),
                           (4 * (N - 1) * s * 4, "twice the reduce-scatter and twice the all-gather: an all-reduce "
                            "is already a reduce-scatter and an all-gather"),
                           (2 * (N - 1) * P * 4, "the whole buffer at every ring step: each step sends one chunk")))
    if not verdict.right:
        raise Counterexample(verdict.message.replace("\n", " "))


# What answers each part's cases in zerosim, refused to a submission (the sandbox's policy): the ring (and the
# oracle's twins of it) for the collectives; for the step also the engine, zerosim's Adam and the parity kit (its
# torch-sqrt Adam, its ZeRO-1 beside torch's); the trace and the cost models for the prediction
COLLECTIVES = ("zerosim.collectives", "zerosim.reference")
STEP = ("zerosim.collectives", "zerosim.reference", "zerosim.parallel", "zerosim.optim", "zerosim.frameworks")
COSTS = ("zerosim.analysis", "zerosim.collectives")

RS = Exercise("ring_reduce_scatter", "the ring reduce-scatter with torch's point-to-point sends, NCCL's order",
              "ring_reduce_scatter", "", STARTER, "", cases=lambda: _ring_cases("reduce-scatter"),
              check=_check_ring("reduce-scatter", RS_MISCONCEPTIONS), grades=COLLECTIVES, harnesses=(RING,))
AG = Exercise("ring_all_gather", "the ring all-gather with torch's point-to-point sends", "ring_all_gather", "",
              STARTER, "", cases=lambda: _ring_cases("all-gather"), check=_check_ring("all-gather", AG_MISCONCEPTIONS),
              grades=COLLECTIVES, harnesses=(RING,))
Z1 = Exercise("zero1_step", "one ZeRO-1 step of a torch MLP on gloo, against zerosim's recipe", "zero1_step", "",
              STARTER, "", cases=_z1_cases, check=_check_z1, grades=STEP, harnesses=(ZERO1,))
BYTES = Exercise("predict_zero1_bytes", "the bytes one rank sends in a ZeRO-1 step, counted in the trace",
                 "predict_zero1_bytes", "", STARTER, "", cases=_bytes_cases, check=_check_bytes, grades=COSTS)

V, H = "visible", "after_published"
PARTS = (
    Part("A", "Predict the bytes a ZeRO-1 step sends (checked when you submit)", 1.0,
         tests_of(__name__, globals(), "BYTES", BYTES, [(slice(0, 2), 1, V), (slice(2, None), 1, H)])),
    Part("B", "The ring reduce-scatter on torch.distributed", 2.5,
         tests_of(__name__, globals(), "RS", RS, [(slice(0, 1), 1, V), (slice(1, 2), 1, V), (slice(2, 3), 1, H),
                                                  (slice(3, 4), 1, H), (slice(4, None), 0.5, H)])),
    Part("C", "The ring all-gather on torch.distributed", 1.0,
         tests_of(__name__, globals(), "AG", AG, [(slice(0, 2), 1, V), (slice(2, None), 1, H)])),
    Part("D", "One ZeRO-1 training step: DDP's gradients, sharded Adam", 3.0,
         tests_of(__name__, globals(), "Z1", Z1, [(slice(0, 1), 1, V), (slice(1, 2), 1, V), (slice(2, 3), 1.5, H),
                                                  (slice(3, None), 1, H)])),
    Part("E", "Explain (a page, graded by hand)", 1.5, (), written=True),
)

HANDOUT = f"""\
# Assignment 4: DDP with ZeRO-1 on real torch.distributed

Until now zerosim ran every rank in one process. Here each rank is a process of its own, joined by
`torch.distributed` over gloo (CPU processes: no GPU needed), and the only way a rank learns anything of another's
gradient is a message. You will write the ring's two halves with torch's point-to-point sends, in NCCL's order, and
then one ZeRO-1 training step of a torch MLP — each rank's local backward, the flat gradient reduce-scattered, Adam
on this rank's shard only, the parameters all-gathered. Everything is graded bit for bit against zerosim's recipe for
the same model and the same batches, and a wrong answer names the first message that differs. Plan on about nine
hours. It needs torch: `pip install 'zerosim[parity]'` (a CPU build of torch is enough).

**Read first:** notebook 15 (`notebooks/15_torch_parity_lab.ipynb`: torch's DDP and ZeroRedundancyOptimizer beside
zerosim, step by step), notebook 02 (the ring, hop by hop: `notebooks/02_ring_and_rounding.ipynb`), and
`zerosim/nano.py`, ZeRO's step in one file (`python -m inspect zerosim.nano` prints it).

{handout_points(PARTS)}

Start with `zerosim assignment starter 4 --out a4`; `zerosim assignment check 4 --file a4/a4_torch.py` runs the
visible tests, each on 2 to 4 gloo processes. Every tensor your ranks send is recorded, so a failing test says which
message first differs from zerosim's ring: "the reduce-scatter's ring step 1, rank 2 → rank 3 (chunk 0): what rank 2
sent[0] is ...; zerosim's ring sends ...". A wrong answer that matches a known mistake is named.

## A. Predict
`predict_zero1_bytes(P, N)`: how many bytes does one rank send in one ZeRO-1 step of a P-parameter fp32 model — the
ring reduce-scatter of the gradient, then the ring all-gather of the updated parameters? (The flat buffer is padded
with zeros to a multiple of N and cut into N chunks of s = ceil(P / N).) How does that compare with DDP's all-reduce?

## B. The ring reduce-scatter
`ring_reduce_scatter(x)`: `x` is this rank's 1-D tensor (fp32 or fp16), its length a multiple of N. Cut it into N
chunks of s values. At ring step k (k = 0 .. N − 2), rank i sends its partial sum of chunk (i − k − 1) mod N to rank
i + 1 (`dist.isend`), receives rank i − 1's partial of chunk (i − k − 2) mod N (`dist.recv`), and adds its own copy of
that chunk to it, **in x's dtype** (every hop rounds, as NCCL's kernels do). After N − 1 steps rank r holds chunk r:
`((x[r+1] + x[r+2]) + …) + x[r]`. Return it. (A blocking `dist.send` on every rank at once waits forever: send with
`dist.isend`, receive, then `wait()` the send.)

## C. The ring all-gather
`ring_all_gather(shard)`: rank r starts with shard r; at step k it sends the shard it got last (its own at step 0) to
rank r + 1 and receives one from rank r − 1. Return the N shards in rank order, concatenated.

## D. One ZeRO-1 step
`zero1_step(model, x, t, state, lr)`, called once per training step on every rank with the same model and this rank's
batch: (1) the loss `((model(x) - t) ** 2).sum() * (0.5 / len(x))` and its backward: this rank's local gradient;
(2) the gradients flattened in `model.parameters()` order into one fp32 vector of P values, padded with zeros to N·s;
(3) your `ring_reduce_scatter`, then the chunk divided by N (fp32: sum first, divide once); (4) on the first call,
this rank's shard of the flat parameters as one tensor and a `torch.optim.Adam([shard], lr=lr)` over it, kept in
`state`; set the shard's `.grad` and step; (5) your `ring_all_gather` of the updated shards; the first P values back
into the model's parameters. Every rank then holds the same model, bit for bit equal to zerosim's. Adam's state lives
on one rank only: that is ZeRO-1's saving. (Optional, ungraded: gather the parameters layer by layer before each
forward instead of keeping them whole — FSDP's all-gather — and free them after.)

## E. Explain (a page, in your write-up)
Why do your parameters equal zerosim's to the last bit, when Adam on rank 0 never sees rank 1's half of the model? Where
would they stop agreeing if you divided each gradient by N before the ring, or used `dist.all_reduce` (gloo's own
algorithm: `zerosim.collectives.gloo_all_reduce`, and notebook 15)? How much Adam state does a rank hold, against
DDP's? And which of your part A predictions held?
"""

ASSIGNMENT = Assignment(4, "DDP with ZeRO-1 on torch.distributed (gloo): the ring by messages, one sharded Adam step",
                        HANDOUT, STARTER, tuple(t for p in PARTS for t in p.tests), "a4_torch.py", parts=PARTS)
