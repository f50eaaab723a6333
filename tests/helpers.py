"""Helpers the tests share, in one place (import as `from helpers import bits`).

    bits(a)        an array's bit patterns: equality of two is bitwise (signed zeros and NaN payloads included)
    same(a, b)     deep equality of nested dicts / lists of arrays, bitwise for arrays
    snapshot(e)    what an engine holds on every local rank (t, masters, optimizer state, 16-bit params) as bits
    HANG_TIMEOUT   the one limit a test puts on a subprocess, a thread or a notebook cell: only a hang reaches it
    engine_refusal(stage, policy)  why ZeroEngine refuses a configuration (None: it accepts it), asked of the engine
    accepted_recipes(stage, policy)  the recipes the engine runs at `stage` with `policy`
    accepted_combinations()          every (recipe, stage, grad_accum, precision preset) the engine accepts
    torch_bits(records)              XXH3-64 of every array torch recorded: a number that follows torch's bits
                                     (the kits' table, the ring's fractions, MKL's sqrt) is pinned where they match
    InProcess(path)                  a learner's file loaded in this process, judged case by case as the sandbox's
                                     Learner is (assignments.results takes either)
"""

from __future__ import annotations

import math

import numpy as np

# Seconds. No test may depend on the machine's speed: starved to a nice-19 share beside busy loops on every core
# (about 1.5 % of a CPU), a job that takes 10 s of CPU takes ~11 minutes, and pip's install in the README test
# over half an hour. Four hours stops only a job that hangs.
HANG_TIMEOUT = 4 * 3600


def bits(a) -> np.ndarray:
    """The bit patterns of `a` as unsigned integers of its width (fp16 -> uint16, fp32 -> uint32, ...)."""
    a = np.ascontiguousarray(a)
    return a.view(f"uint{a.dtype.itemsize * 8}")


def same(a, b) -> bool:
    """a == b for nested dicts and lists, arrays compared bit for bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(bits(a), bits(b))
    return a == b


def snapshot(engine) -> dict:
    """Everything a step may change on every local rank, as bit patterns (copies)."""
    return {
        "t": engine.t,
        "master": [bits(m).copy() for m in engine.master_shards()],
        "optimizer": [{k: bits(v).copy() for k, v in s.items()} for s in engine.optimizer_shards()],
        "params": [bits(engine.compute_params(i)).copy() for i in range(engine.cluster.local_size)],
    }


def by_gid(ax, gid: str) -> list:
    """The artists of a figure's axes that carry gid `gid` (figures mark what they draw with gids)."""
    return [a for a in ax.get_children() if a.get_gid() == gid]


GRAD_ACCUMS = (None, "fp32")  # MixedPrecision(grad_accum=...): the compute format, or fp32 (the CLI's --grad-accum,
#                               DeepSpeed's data_types.grad_accum_dtype as zerosim/configs/deepspeed.py reads it)


def engine_refusal(stage, policy, optimizer: str = "adamw", **engine_args) -> str | None:
    """The ValueError ZeroEngine raises for `stage` and `policy` (and `engine_args`) on a 2-parameter model and 2
    ranks, or None when it accepts them: what the engine runs is the engine's to say (its recipe table, each
    recipe's `requires`, the policy's own checks), not a list in a test."""
    from zerosim import MLP, Cluster, ZeroEngine, get_optimizer

    try:
        ZeroEngine(MLP([1, 1]), Cluster(2), stage, get_optimizer(optimizer), policy, **engine_args)
    except ValueError as e:
        return str(e)
    return None


def accepted_recipes(stage, policy, **engine_args) -> list:
    """The names of the recipes the engine runs at `stage` with `policy` (its reduction replaced by each)."""
    from zerosim.parallel.data.recipes import RECIPES

    return [name for name, r in RECIPES.items()
            if stage in r.stages and engine_refusal(stage, policy.with_(reduction=name), **engine_args) is None]


def accepted_combinations() -> list:
    """[(recipe, stage, grad_accum, precision preset)]: every combination of the recipes (at the stages their
    frameworks run them), GRAD_ACCUMS and the precision presets that the engine accepts."""
    from zerosim.parallel.data.recipes import RECIPES
    from zerosim.precision import PRESETS, get_precision

    out = []
    for name, recipe in RECIPES.items():
        for stage in recipe.stages:
            for grad_accum in GRAD_ACCUMS:
                for preset in PRESETS:
                    try:
                        policy = get_precision(preset).with_(reduction=name, grad_accum=grad_accum)
                    except ValueError:  # the policy itself refuses (grad_accum fp32 cannot hold fp64)
                        continue
                    if engine_refusal(stage, policy) is None:
                        out.append((name, stage, grad_accum, preset))
    return out


def torch_bits(records) -> str:
    """An XXH3-64 (hex) of every array in torch's records (nested dicts and lists), with its path and dtype: equal
    where torch produced the same bits. A CPU's name is too loose for numbers that follow torch's local gradients:
    two AMD EPYCs on which torch 2.13.0 reports AVX2 rounded them differently (seen: a Zen 3 against the machine the
    kits' table was first measured on), so what follows from those bits is pinned where the bits are the same."""
    import xxhash

    digest = xxhash.xxh3_64()

    def walk(x, path):
        if isinstance(x, dict):
            for key in sorted(x, key=str):
                walk(x[key], f"{path}/{key}")
        elif isinstance(x, (list, tuple)):
            for i, item in enumerate(x):
                walk(item, f"{path}/{i}")
        elif isinstance(x, np.ndarray):
            digest.update(f"{path}:{x.dtype.str}:{x.shape}".encode())
            digest.update(np.ascontiguousarray(x).tobytes())
        elif x is None or isinstance(x, (bool, int, float, str)):
            digest.update(f"{path}={x!r}".encode())
        else:  # an object's repr may hold its address: refuse rather than hash something that moves run to run
            raise TypeError(f"torch_bits: {path} holds a {type(x).__name__}, not arrays, numbers or strings")

    walk(records, "")
    return digest.hexdigest()


def as_version_1(manifest: dict) -> dict:
    """A checkpoint manifest as format version 1 wrote it, without the checksums of version 2 (checkpoint/
    _manifest.py): so a test of what the semantic checks refuse in a hand-edited manifest reaches them (a version-2
    manifest's edit is refused first by its checksum, tests/test_checkpoint_safety.py)."""
    manifest.pop("checksums", None)
    manifest["version"] = 1
    return manifest


def run_cli(*argv) -> tuple:
    """(exit status, stdout, stderr) of `zerosim *argv`, run in this process."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from zerosim.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def files_of(root) -> dict:
    """{path under `root`: its bytes, or a link's target} of every file and link under `root` (links not followed):
    what a refused command must leave as it was."""
    import os
    from pathlib import Path

    root = Path(root)
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file() or p.is_symlink()}


class InProcess:
    """A learner's file loaded here, not in the sandbox: the same `loaded()` and `judge(exercise, case)` as the
    sandbox's Learner (zerosim/teaching/exercises/_sandbox.py), so that `assignments.results` scores it the same way,
    case by case, without a process (the planted solutions' tests run many engines)."""

    def __init__(self, path):
        from zerosim.teaching.sandbox import NotRunnable, run_source

        self.path, self.why = str(path), None
        try:
            with open(path) as f:
                self.namespace = run_source(f.read(), self.path)
        except NotRunnable as e:
            self.namespace, self.why = {}, str(e)

    def loaded(self):
        return self.why

    def judge(self, exercise, case):
        from zerosim.teaching.exercises._grading import no_function
        from zerosim.teaching.exercises._sandbox import NoFunction

        fn = self.namespace.get(exercise.function)
        if not callable(fn):
            raise NoFunction(no_function(self.path, exercise.function))
        return exercise.judge(fn, case)


# A TP slice's model states by hand (seed 001's formulas with Ψ = P_local, N = dp), written apart from the
# package's plans (parallel/data/_plan.py) so that the engine's ledgers are checked against something they do not read
def tp_model_state_bytes(local_params: int, dp: int, stage: int, param_bytes: int = 2, grad_bytes: int = 2,
                         master_bytes: int = 4, state_bytes: int = 8) -> dict:
    """{kind: bytes} one rank holds at rest: its TP slice of P_local parameters, padded to dp·ceil(P_local/dp) and
    cut over the dp ranks that hold the same slice (seed 001's formulas with Ψ = P_local, N = dp):

        stage 0   everything whole        stage 1   + master, optimizer state / dp
        stage 2   + grads / dp            stage 3   + params / dp
    """
    shard = math.ceil(local_params / dp)
    padded = shard * dp
    cut = {0: (), 1: ("master", "optim"), 2: ("master", "optim", "grads"), 3: ("master", "optim", "grads", "params")}
    n = {k: shard if k in cut[stage] else padded for k in ("params", "grads", "master", "optim")}
    return {"params": param_bytes * n["params"], "grads": grad_bytes * n["grads"],
            "master": master_bytes * n["master"], "optim": state_bytes * n["optim"]}
