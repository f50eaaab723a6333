"""Assignment 3's exposed-communication prediction: a ZeRO-3 forward pass, each layer's all-gather on the one
communication stream and its compute on the compute stream, with and without prefetching the next layer's gather.

Graded against zerosim's own timeline (analysis/timeline/_simulate.py): each case is the log such a pass writes (one
all-gather `Call` per layer, the layer's `Compute` on every rank naming that call in `needs`, in the order the
prefetch depth puts them), placed in time by `simulate`, whose rank-0 exposed communication is the answer. The
seconds the student is given are the simulator's own durations for those events (analysis/timeline/_cost.py:
`compute_time` of the FLOPs, `phase_time` of the bytes), so both sides start from the same numbers.
"""

from __future__ import annotations

import math

from zerosim.teaching.assignments._parts import Misconception, wrong

HANDOUT = """
(c) How much of that communication is exposed? A forward pass over layers 0..L-1: layer i's parameters are
all-gathered (`gather_s[i]` seconds on the communication stream, which runs one gather at a time, in the order
they are issued), then layer i computes (`compute_s[i]` seconds on the compute stream, once its gather has ended
and layer i-1's compute has). Without prefetch a layer's gather is issued when the previous layer's compute ends;
with prefetch 1 the gathers of layers 0 and 1 are issued at the start and layer i+2's when layer i's compute ends.
Write `exposed_comm(compute_s, gather_s, prefetch)`: the seconds the communication stream is busy while the compute
stream is idle (zerosim's timeline calls it exposed communication).
"""

STARTER = '''

def exposed_comm(compute_s, gather_s, prefetch):
    """Seconds of a ZeRO-3 forward pass in which a gather runs and no layer computes. compute_s[i], gather_s[i]:
    layer i's compute and all-gather times; prefetch 0 (gather each layer when it is needed) or 1 (one ahead)."""
    raise NotImplementedError
'''

N = 2  # ranks: every rank takes part in every gather, and two keep each ring step's α in the times

# (what, elements gathered per layer, FLOPs per layer, prefetch): fp16 parameters over NVLink 4 on H100s, so a
# gather of E elements takes α + E bytes / β (N = 2: each rank sends its half) and a compute F / 989.4 TFLOP/s
CASES = (
    ("3 layers, gathers about as long as computes, no prefetch", (9e6, 18e6, 4.5e6), (2e10, 4e10, 1e10), 0),
    ("3 layers, gathers about as long as computes, prefetch 1", (9e6, 18e6, 4.5e6), (2e10, 4e10, 1e10), 1),
    # hidden: communication-bound, one layer, compute-bound, a big gather behind a small compute, five layers
    ("4 layers, each gather twice its compute, prefetch 1", (18e6,) * 4, (1e10,) * 4, 1),
    ("one layer, prefetch 1 (nothing to fetch ahead)", (9e6,), (5e10,), 1),
    ("4 layers, computes four times their gathers, prefetch 1", (4.5e6,) * 4, (8e10,) * 4, 1),
    ("a large gather behind a small compute, prefetch 1", (4.5e6, 36e6, 4.5e6), (1e10, 8e10, 1e10), 1),
    ("5 unequal layers, no prefetch", (2e6, 9e6, 1e6, 7e6, 3e6), (3e10, 1e10, 2e10, 5e10, 1e10), 0),
)


def _log(elements, flops, prefetch: int) -> list:
    """The pass as a timeline log: gathers 0..prefetch first, then each compute followed by the next gather."""
    from zerosim.cluster import Call, Compute

    gathers = [Call(call=i, collective="all_gather", op="gather", world_size=N, elements=int(e), dtype="fp16",
                    tag=f"layer{i} params", purpose="gather params", layers=(i,), step=1)
               for i, e in enumerate(elements)]
    computes = [[Compute(rank=r, step=1, micro=0, layer=i, name=f"layer{i}", kind="forward", flops=int(f),
                         bytes_read=0, bytes_written=0, needs=(i,)) for r in range(N)] for i, f in enumerate(flops)]
    log = gathers[: prefetch + 1]
    for i, ranks in enumerate(computes):
        log += ranks + gathers[i + prefetch + 1 : i + prefetch + 2]
    return log


def cases():
    from zerosim.analysis.timeline import Hardware, compute_time, equal_chunk_bytes, phase_time

    hw = Hardware("h100", "nvlink4", "fp16")
    rate, hbm = hw.device.rate(hw.compute), hw.device.hbm
    for what, elements, flops, prefetch in CASES:
        log = _log(elements, flops, prefetch)
        calls = [e for e in log if not hasattr(e, "rank")]
        gather_s = [phase_time(N, equal_chunk_bytes(c), hw.link) for c in sorted(calls, key=lambda c: c.call)]
        yield {"what": what, "compute_s": [compute_time(f, 0, rate, hbm) for f in flops], "gather_s": gather_s,
               "prefetch": prefetch, "log": log, "hardware": hw}


def check(fn, case) -> None:
    from zerosim.analysis.timeline import simulate

    want = float(simulate(case["log"], case["hardware"]).exposed_comm[0])
    got = fn(list(case["compute_s"]), list(case["gather_s"]), case["prefetch"])
    # The same durations on both sides, added in different orders: a right answer differs from the timeline's by a
    # few roundings of numbers ~1e-4 s (under 1e-18 s); a wrong schedule is off by a whole gather or compute (µs).
    if not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15):
        named = next((m for m in MISCONCEPTIONS if isinstance(got, (int, float))
                      and math.isclose(got, m.output(case), rel_tol=1e-9, abs_tol=1e-15)), None)
        raise wrong(f"you predicted {got!r} s of exposed communication; zerosim's timeline of this pass "
                    f"(compute_s {_us(case['compute_s'])}, gather_s {_us(case['gather_s'])}) has {want!r} s", named)


MISCONCEPTIONS = (
    Misconception("prefetch_hides_all_but_the_first", "with prefetch you counted only the first gather as exposed: "
                  "true only while every compute outlasts the gather issued beside it; a longer gather shows past it, "
                  "and the gathers queue on one stream", lambda c: c["gather_s"][0] if c["prefetch"] else -1.0),
    Misconception("prefetch_hides_nothing", "with prefetch you counted every gather as exposed, as without it: the "
                  "gather issued ahead runs while the layer before computes", lambda c: sum(c["gather_s"])
                  if c["prefetch"] and len(c["gather_s"]) > 1 else -1.0),
)


def _us(seconds) -> str:
    return "[" + ", ".join(f"{s * 1e6:.4g} µs" for s in seconds) + "]"
