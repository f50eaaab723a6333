"""Assignment 2 (a week, ~9 h): ZeRO-1/2. Predict what a rank holds, at rest and at its peak; write the four pieces
that make data parallelism ZeRO (shard, reduce and free, average, refresh), each run inside the engine through its
extension points (`zerosim.parallel.data.Hooks`) and graded against the single-device oracle bit for bit; check
seed 001's memory table against its own formulas.

The four pieces are the exercises of zerosim/teaching/exercises (their early cases visible, the rest hidden). A failing
piece is probed on a small input first, and a result that equals what a known misconception produces (floor shards,
dividing in 16 bits, everyone sending shard 0, never freeing) is named. The memory predictions are graded against
`measure_stage` (analysis/costs/_measured.py), the run `zerosim memory` makes, with the reason for each kind.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from zerosim.teaching.assignments._assignment import Assignment
from zerosim.teaching.assignments._parts import Misconception, Part, handout_points, tests_of, wrong
from zerosim.teaching.exercises import EXERCISES, Counterexample, Exercise, LearnerRaised

STARTER = '''\
"""Assignment 2: ZeRO-1/2. See `zerosim assignment show 2`."""
import numpy as np


def predict_memory(P, N, stage):
    """{kind: bytes} one rank holds at rest after a step at ZeRO `stage` (0, 1 or 2), fp16 weights and gradients,
    fp32 master, Adam: kinds "params", "grads", "master", "optim:m", "optim:v"."""
    raise NotImplementedError


def predict_peak(P, N, stage):
    """The most bytes one rank holds at once during that step (the same model: 4 equal layers, no activations)."""
    raise NotImplementedError


def seed001_table(P, N):
    """Seed 001's formulas in bytes per GPU: [DDP, ZeRO-1, ZeRO-2, ZeRO-3] (its 2 + 2 + 12 accounting, no padding)."""
    raise NotImplementedError


def shard_bounds(length, world_size, rank):
    """(start, stop): the real (unpadded) elements rank `rank` owns of a flat buffer of `length` elements cut
    into `world_size` equal padded shards."""
    raise NotImplementedError


def reduce_layer_grads(held, reduce_scatter, add_to_shard):
    """One layer after its backward on every rank (ZeRO-2). held: one ledger Buffer per rank with the layer's
    gradients (held[r].array; held[r].free()). reduce_scatter(arrays): one array per rank in, rank r's piece of
    the sum out. add_to_shard(r, piece): add rank r's piece into its gradient shard."""
    raise NotImplementedError


def average(summed, world_size):
    """summed: this rank's shard of the gradient summed over world_size ranks (fp16). Return the average as the
    fp32 optimizer reads it."""
    raise NotImplementedError


def refresh(params, shard_size, all_gather):
    """After the update (ZeRO-1/2): params[r] is rank r's whole (N*s,) 16-bit model, of which it just updated
    params[r][r*s:(r+1)*s]; all_gather(shards) -> one (N*s,) array per rank. Write the result into params[r]."""
    raise NotImplementedError
'''

KINDS = ("params", "grads", "master", "optim:m", "optim:v")


def _ledger(P: int, N: int, stage: int) -> dict:
    """The run's row (the meta backend's ledger of rank 0): `zerosim memory --params P --ranks N`'s."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.meta import MetaModel

    return measure_stage(MetaModel.from_params(P, layers=min(4, P)), N, stage)[0]


def _kinds(bytes_per: dict, whole: float, shard: float, stage: int) -> dict:
    """{kind: bytes} from bytes per element and which kinds are sharded at `stage`."""
    sharded = {"params": stage >= 3, "grads": stage >= 2, "master": stage >= 1, "optim:m": stage >= 1,
               "optim:v": stage >= 1}
    return {k: b * (shard if sharded[k] else whole) for k, b in bytes_per.items()}


PER = {"params": 2, "grads": 2, "master": 4, "optim:m": 4, "optim:v": 4}
MEMORY_MISCONCEPTIONS = (
    Misconception("unpadded_memory", "you left out the padding: every flat buffer is padded to a multiple of N "
                  "(ceil(P / N) per shard, N·ceil(P / N) whole), and the ledger counts the padding's bytes",
                  lambda c: _kinds(PER, c["P"], c["P"] / c["N"], c["stage"])),
    Misconception("floor_shards", "you cut shards of floor(P / N): the last parameters would belong to no rank; "
                  "shards are ceil(P / N)",
                  lambda c: _kinds(PER, c["N"] * (c["P"] // c["N"]), c["P"] // c["N"], c["stage"])),
    Misconception("master_whole_at_stage_1", "you kept the fp32 master whole at stage 1; stage 1 shards the "
                  "optimizer states *and* the master (the paper's K = 12 is master + m + v)",
                  lambda c: {**_right(c), "master": 4 * -(-c["P"] // c["N"]) * c["N"]} if c["stage"] == 1 else None),
    Misconception("grads_sharded_at_stage_1", "you sharded the gradients at stage 1; that is stage 2",
                  lambda c: {**_right(c), "grads": 2 * -(-c["P"] // c["N"])} if c["stage"] == 1 else None),
)


def _right(c) -> dict:
    s = -(-c["P"] // c["N"])
    return _kinds(PER, s * c["N"], s, c["stage"])


def _memory_cases():
    yield {"what": "P = 1000, N = 4, stage 0", "P": 1000, "N": 4, "stage": 0}
    yield {"what": "P = 1000, N = 4, stage 1", "P": 1000, "N": 4, "stage": 1}
    yield {"what": "P = 1000, N = 4, stage 2", "P": 1000, "N": 4, "stage": 2}
    yield {"what": "P = 1001, N = 4, stage 2 (padded to 1004)", "P": 1001, "N": 4, "stage": 2}
    yield {"what": "P = 12345, N = 1, stage 1", "P": 12345, "N": 1, "stage": 1}
    yield {"what": "P = 1_000_003, N = 64, stage 1", "P": 1_000_003, "N": 64, "stage": 1}
    yield {"what": "P = 7, N = 8, stage 2 (fewer parameters than ranks)", "P": 7, "N": 8, "stage": 2}


def _check_memory(fn, case):
    want = _ledger(case["P"], case["N"], case["stage"])["resting"]
    got = fn(case["P"], case["N"], case["stage"])
    got = {k: v for k, v in (got or {}).items() if v} if isinstance(got, dict) else got
    if got != want:
        first = next((k for k in KINDS if not isinstance(got, dict) or got.get(k) != want.get(k)), None)
        said = got.get(first) if isinstance(got, dict) else got
        named = next((m for m in MEMORY_MISCONCEPTIONS if isinstance(got, dict) and _same_kinds(got, m, case)), None)
        raise wrong(f"you predicted {said!r} bytes of {first}; the ledger of rank 0 holds {want.get(first)} "
                    f"(all of it: {want})", named)


def _same_kinds(got: dict, m: Misconception, case) -> bool:
    try:
        theirs = m.output(case)
    except Exception:
        return False
    return theirs is not None and {k: v for k, v in theirs.items() if v} == got


def _peak_cases():
    yield {"what": "P = 1000, N = 4, stage 0", "P": 1000, "N": 4, "stage": 0}
    yield {"what": "P = 1000, N = 4, stage 2", "P": 1000, "N": 4, "stage": 2}
    yield {"what": "P = 1001, N = 4, stage 1 (padded to 1004)", "P": 1001, "N": 4, "stage": 1}
    yield {"what": "P = 4_000_000, N = 16, stage 2", "P": 4_000_000, "N": 16, "stage": 2}


def _check_peak(fn, case):
    from zerosim.teaching._predict import judge

    row = _ledger(case["P"], case["N"], case["stage"])
    rest, s = sum(row["resting"].values()), -(-case["P"] // case["N"])
    region = s * case["N"] if case["stage"] == 0 else s
    layer = 2 * -(-case["P"] // 4)  # one of the 4 layers' fresh fp16 gradients, held in backward at stage 2
    verdict = judge(fn(case["P"], case["N"], case["stage"]), row["peak"], unit="B",
                    why=f"at rest the rank holds {rest:,} B. The optimizer step adds the fp32 gradient it updates "
                    f"from (grad32: 4 B an element of the region it updates, {4 * region:,} B here: the whole padded "
                    "buffer at stage 0, its shard from stage 1); at stage 2, backward adds one layer's fresh fp16 "
                    f"gradients ({layer:,} B) until their reduce-scatter. The peak is the larger of the two moments",
                    wrong=((rest, "what the rank holds at rest: the step also makes the fp32 gradient it updates "
                            "from."),
                           (rest + 4 * s * case["N"], "the fp32 gradient counted whole: from stage 1 a rank casts only "
                            "its own shard."),
                           (rest + 4 * region if case["stage"] == 2 and layer > 4 * region else -1,
                            "the optimizer step's peak: at stage 2 backward's moment, with one layer's fresh "
                            "gradients, is larger here.")))
    if not verdict.right:
        raise Counterexample(verdict.message.replace("\n", " "))


def _table_cases():
    yield {"what": "7B on 8 GPUs (seed 001's own example)", "P": 7e9, "N": 8}
    yield {"what": "7.5B on 64 GPUs (the ZeRO paper's)", "P": 7.5e9, "N": 64}


def _check_table(fn, case):
    from zerosim.analysis.costs import seed001_formulas, seed001_printed_table

    want = seed001_formulas(case["P"], case["N"]).bytes
    got = fn(case["P"], case["N"])
    got = list(got) if isinstance(got, (list, tuple)) else got
    printed = seed001_printed_table().bytes if (case["P"], case["N"]) == (7e9, 8) else None
    if not isinstance(got, list) or len(got) != 4 or not all(math.isclose(g, w, rel_tol=1e-9) for g, w in
                                                             zip(got, want)):
        named = None
        if printed and isinstance(got, list) and len(got) == 4 and all(
                w is None or math.isclose(g, w, rel_tol=1e-3) for g, w in zip(got, printed)):
            named = Misconception("seed001_printed", "you copied seed 001's printed table (21.5 and 15.75 GB for "
                                  "ZeRO-1/2); its own formulas 4P + 12P/N and 2P + 14P/N give 38.5 and 26.25: the "
                                  "table is its erratum", None)
        raise wrong(f"you gave {got!r}; seed 001's formulas give {list(want)}", named)


# -- the four pieces: the exercises' checks, and a probe that names a known mistake before the engine's verdict ------
def _probe(probe):
    """A check that runs `probe(fn)` (-> a Misconception or None) when the exercise's own check fails."""
    def wrap(check):
        def checked(fn, case):
            try:
                check(fn, case)
            except Counterexample as e:
                try:
                    named = probe(fn)
                except Exception:
                    named = None
                raise wrong(str(e), named) from None
        return checked
    return wrap


def _shard_probe(fn):
    got = [tuple(fn(10, 4, r)) for r in range(4)]
    table = {((0, 2), (2, 4), (4, 6), (6, 8)): Misconception(
                 "floor_instead_of_ceil", "shards of floor(L / N) leave the last elements to no rank; every shard "
                 "holds ceil(L / N), the last ones padding", None),
             ((0, 3), (3, 6), (6, 9), (9, 12)): Misconception(
                 "padding_counted_as_data", "the padding is not data: a rank owns [start, stop) clipped to L (rank 3 "
                 "of L = 10 on 4 ranks owns only element 9)", None)}
    return table.get(tuple(got))


def _average_probe(fn):
    summed = np.array([1.0, 3.0, 0.1, 2.0**-20], np.float16)
    got = np.asarray(fn(summed.copy(), 3))
    variants = {"divides_in_16_bits": (summed / np.float16(3)).astype(np.float32),
                "never_divides": summed.astype(np.float32),
                "multiplies_by_the_reciprocal": summed.astype(np.float32) * np.float32(1 / 3)}
    says = {"divides_in_16_bits": "you divided in fp16 before the cast: one rounding too many, and small averages "
                                  "underflow; cast to fp32 first, then divide",
            "never_divides": "you returned the sum: the optimizer reads the average (÷ N)",
            "multiplies_by_the_reciprocal": "you multiplied by fl32(1/N), which rounds twice (DDP's way); the seeds' "
                                            "recipe divides by N once"}
    for name, v in variants.items():
        if got.dtype == v.dtype and got.shape == v.shape and np.array_equal(got, v):
            return Misconception(name, says[name], None)
    return None


def _refresh_probe(fn):
    from zerosim.cluster import Cluster
    from zerosim.collectives import all_gather

    n, s = 3, 2
    params = [np.full(n * s, -1.0, np.float16) for _ in range(n)]
    for r in range(n):
        params[r][r * s:(r + 1) * s] = 10 * r + np.arange(s)  # rank r updated its own shard only
    before = [p.copy() for p in params]
    fn(params, s, lambda shards: all_gather(Cluster(n), shards))
    shard0 = np.concatenate([b[:s] for b in before])  # what every rank holds if each sent its buffer's first shard
    if all(np.array_equal(p, shard0) for p in params):
        return Misconception("everyone_sends_shard_0", "every rank sent the first shard of its buffer; rank r must "
                             "send the shard it updated, [r·s, (r+1)·s)", None)
    if all(np.array_equal(p, b) for p, b in zip(params, before)):
        return Misconception("never_writes_back", "the gathered buffer was returned, not written into params[r]: the "
                             "engine keeps its own arrays", None)
    return None


def _reduce_named(check):
    """stage2_free's own checks say which mistake it is; name it as the misconception table does."""
    table = (("still holds", Misconception("never_frees", "the layer's gradients were never freed: every layer's "
                                           "pile up and ZeRO-2 saves nothing over stage 1", None)),
             ("already freed", Misconception("frees_too_early", "the gradients were freed before their pieces were in "
                                             "the shards (a use after free: that memory may already hold another "
                                             "buffer)", None)),
             ("freed buffer", Misconception("frees_too_early", "the gradients were freed before the reduce-scatter "
                                            "read them", None)))

    def checked(fn, case):
        try:
            check(fn, case)
        except Counterexample as e:
            raise wrong(str(e), next((m for words, m in table if words in str(e)), None)) from None
        except Exception as e:  # the ledger's own refusal (reading a freed buffer) reaches here as LedgerError
            if "freed" in str(e):  # (in the sandbox, as the LearnerRaised that carried it out of the child)
                words = e.words if isinstance(e, LearnerRaised) else f"{type(e).__name__}: {e}"
                raise wrong(f"your reduce_layer_grads raised {words}", table[2][1]) from None
            raise
    return checked


# the memory predictions are answered by the ledgers' run (`measure_stage`) and seed 001's formulas, both in analysis/
COSTS = ("zerosim.analysis", "zerosim.parallel", "zerosim.reference")
SHARD = replace(EXERCISES["shard_offset"], check=_probe(_shard_probe)(EXERCISES["shard_offset"].check))
REDUCE = replace(EXERCISES["stage2_free"], check=_reduce_named(EXERCISES["stage2_free"].check))
AVERAGE = replace(EXERCISES["average_dtype"], check=_probe(_average_probe)(EXERCISES["average_dtype"].check))
REFRESH = replace(EXERCISES["refresh_params"], check=_probe(_refresh_probe)(EXERCISES["refresh_params"].check))
MEMORY = Exercise("predict_memory", "bytes per rank at rest, stages 0-2, measured by the ledgers", "predict_memory",
                  "", STARTER, "", cases=_memory_cases, check=_check_memory, grades=COSTS)
PEAK = Exercise("predict_peak", "the step's peak per rank, measured by the ledgers", "predict_peak", "", STARTER, "",
                cases=_peak_cases, check=_check_peak, grades=COSTS)
TABLE = Exercise("seed001_table", "seed 001's memory formulas against its own printed table", "seed001_table", "",
                 STARTER, "", cases=_table_cases, check=_check_table, grades=COSTS)

V, H = "visible", "after_published"
PARTS = (
    Part("A", "Predict the memory, at rest and at the peak (checked when you submit, with the reason)", 2.0,
         tests_of(__name__, globals(), "MEMORY", MEMORY, [(slice(0, 3), 1, V), (slice(3, 5), 1, V),
                                                          (slice(5, 7), 1, V)])
         + tests_of(__name__, globals(), "PEAK", PEAK, [(slice(0, 2), 1, V), (slice(2, 4), 1, V)])),
    Part("B", "Where each rank's shard starts and stops", 1.0,
         tests_of(__name__, globals(), "SHARD", SHARD, [(slice(0, 10), 1, V), (slice(10, None), 1, H)])),
    Part("C", "Reduce a layer's gradients, keep your piece, free the rest (ZeRO-2)", 2.0,
         tests_of(__name__, globals(), "REDUCE", REDUCE, [(slice(0, 2), 1, V), (slice(2, 3), 1, H),
                                                          (slice(3, None), 1, H)])),
    Part("D", "The average the optimizer reads", 1.0,
         tests_of(__name__, globals(), "AVERAGE", AVERAGE, [(slice(0, 2), 1, V), (slice(2, None), 1, H)])),
    Part("E", "Refresh the params: the all-gather after the step", 1.0,
         tests_of(__name__, globals(), "REFRESH", REFRESH, [(slice(0, 1), 1, V), (slice(1, None), 1, H)])),
    Part("F", "Seed 001's table against its own formulas", 0.5,
         tests_of(__name__, globals(), "TABLE", TABLE, [(slice(0, 2), 1, V)])),
    Part("G", "Explain (a page, graded by hand)", 1.5, (), written=True),
)

HANDOUT = f"""\
# Assignment 2: ZeRO-1 and ZeRO-2, piece by piece

You will predict what each rank holds, then write the four pieces that make data parallelism ZeRO — where each
rank's shard starts, how a layer's gradients are reduced and freed, how the sum becomes an average, how the updated
shards are made whole again — and the engine will run with yours in place of its own, checked against a single
device bit for bit. Plan on about nine hours.

**Read first:** notebook 01 (seed 004's worked example, `notebooks/01_worked_example.ipynb`), notebook 03 (memory by
stage), `docs/explanation/architecture.md` (one step, file by file), `docs/glossary.md` (params, grads, grad32,
master, shard, padding); the seeds' claims this assignment tests are rows of `docs/seeds.md`.

{handout_points(PARTS)}

Start with `zerosim assignment starter 2 > a2_zero12.py`; `zerosim assignment check 2 --file a2_zero12.py` runs the
visible tests. `zerosim exercise show NAME` gives each piece's full task (shard_offset, stage2_free, average_dtype,
refresh_params). A wrong answer that matches a known mistake is named: "Misconception 'divides_in_16_bits': ...".

## A. Predict
For a model of P parameters on N ranks, fp16 weights and gradients, an fp32 master and Adam's m and v:
* `predict_memory(P, N, stage)`: the bytes of each kind one rank holds at rest after a step, stages 0-2. Mind the
  padding: every flat buffer is padded to a multiple of N.
* `predict_peak(P, N, stage)`: the most it holds at once during the step (this model has 4 equal layers and no
  activations). What does the optimizer step allocate, and how large is it at stage 0 against stage 1?

## B-E. The pieces (the engine calls yours)
* `shard_bounds(length, world_size, rank)` — the real [start, stop) a rank owns of a padded flat buffer.
* `reduce_layer_grads(held, reduce_scatter, add_to_shard)` — ZeRO-2: reduce-scatter one layer's fresh gradients,
  add your piece to your shard, **free** the full gradients (the ledger checks you did, and not too early).
* `average(summed, world_size)` — the summed fp16 gradient shard to the fp32 average the optimizer reads.
* `refresh(params, shard_size, all_gather)` — after the update, all-gather the shards so every rank is whole.

## F. Seed 001's table
`seed001_table(P, N)`: seed 001's formulas (16P, 4P + 12P/N, 2P + 14P/N, 16P/N) in bytes. For 7B on 8 GPUs its
printed table says 21.5 and 15.75 GB for ZeRO-1 and ZeRO-2: which is right, the table or the formulas?

## G. Explain (a page, in your write-up)
Run `zerosim memory --params 7.5e9 --ranks 64` and compare its ledger column with your formula at P = 7.5e9, N = 64.
Why does stage 1 save 12P(1 - 1/N) bytes and stage 2 another 2P(1 - 1/N)? Where does the fp32 gradient (grad32)
live, why is it not in the resting bytes, and why is it the whole buffer at stage 0? Why did stage 2 save only 2 B
of seed 004's peak (notebook 01: 48 → 46 B) when it saves 4 B at rest?
"""

ASSIGNMENT = Assignment(2, "ZeRO-1/2: predict the memory; shard, reduce, average, refresh", HANDOUT, STARTER,
                        tuple(t for p in PARTS for t in p.tests), "a2_zero12.py", parts=PARTS)
