"""The golden record: a digest of everything a user reads from zerosim, to show that a change meant to change no
bit (a move of files, a speed-up) changed none.

    python tools/golden_record.py > before.json      # on the commit before the change
    python tools/golden_record.py > after.json       # after it
    python tools/golden_record.py --compare before.json after.json

It records, per case: the losses, the fp32 masters, the 16-bit params and the optimizer state (XXH3-64 of
their bytes), every rank's ledger peaks by kind, the trace's log (the repr of every event, in order), its bytes
by tier and by collective, the timeline's summary on two machines; the error message where a case is refused
(what a user reads then); the replay's text in its variants; and the stdout of a list of CLI commands.
Cases come from a seeded draw over models x stages and strategies x recipes x precisions x K x N x schedules x
wires x clipping, so the record covers the combinations the engine accepts and the refusals of the others.

It imports only names that every layout keeps reachable (the package's faces and, through the compatibility
finder, the old module paths), so the same script runs on both sides of a move.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import xxhash

warnings.simplefilter("ignore", DeprecationWarning)  # old paths, on purpose: the record must run before and after

CLI = [  # (argv) whose stdout is part of the record: the README's commands that print numbers, and friends
    ["replay"],
    ["replay", "--stage", "3"],
    ["replay", "--precision", "bf16-mixed"],
    ["memory", "--params", "7.5e9", "--ranks", "64"],
    ["memory", "--params", "7.5e9", "--ranks", "64", "--json"],
    ["memory", "--model", "gpt3-6.7b", "--ranks", "8", "--seq-len", "2048", "--batch", "4", "--checkpoint", "block"],
    ["memory", "--model", "llama-3-8b", "--ranks", "8", "--seq-len", "8192", "--batch", "1", "--gpu", "h100-80gb",
     "--json"],
    ["memory", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy",
     "full_shard,hsdp,mics,hpz", "--shard-group", "64"],
    ["memory", "--model", "gpt2-small", "--ranks", "8", "--zero-quantized-weights", "--weight-groups", "64"],
    ["timeline", "--model", "gpt3-175b", "--ranks", "1024", "--link", "ib_ndr", "--json"],
    ["timeline", "--model", "gpt3-175b", "--ranks", "1024", "--link", "ib_ndr", "--fp8-all-gather"],
    ["timeline", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy", "hpz"],
    ["plan", "--model", "llama-3-8b", "--gpus", "16", "--gpus-per-node", "8", "--gpu", "h100-80gb", "--seq-len",
     "4096", "--global-batch", "256", "--json"],
    ["train", "--model", "gpt", "--stage", "3", "--ranks", "2", "--steps", "6", "--print-every", "3"],
    ["train", "--model", "mlp", "--stage", "2", "--ranks", "3", "--steps", "4", "--print-every", "2"],
    ["exercise", "list"],
    ["assignment", "list"],
    # issue 34's thin CLI: each command's text and JSON, the strategies, the sweeps, the plan's text, the refusals
    ["timeline", "--model", "gpt3-175b", "--ranks", "1024", "--link", "ib_ndr"],
    ["timeline", "--model", "llama-3-8b", "--ranks", "16", "--gpus-per-node", "8", "--gpu", "h100-80gb", "--seq-len",
     "2048", "--batch", "2", "--checkpoint", "block", "--accumulation-steps", "2", "--comm", "fsdp", "--json"],
    ["timeline", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy", "hsdp",
     "--shard-group", "64", "--json"],
    ["timeline", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy", "mics_hierarchical",
     "--shard-group", "16"],
    ["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "8,64", "--tokens", "4096"],
    ["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "8,64", "--json"],
    ["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "16,64", "--gpus-per-node", "8", "--strategy",
     "full_shard,hsdp,mics,hpz"],
    ["timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks", "16,64", "--gpus-per-node", "8", "--strategy",
     "all", "--shard-group", "16", "--json"],
    ["memory", "--model", "gpt3-175b", "--ranks", "4096", "--gpus-per-node", "8", "--strategy", "all", "--json"],
    ["memory", "--model", "llama-7b", "--ranks", "16", "--gpus-per-node", "8", "--seq-len", "2048", "--batch", "1",
     "--zero-quantized-gradients"],
    ["memory", "--model", "gpt2-small", "--ranks", "8", "--no-step"],
    ["plan", "--model", "llama-3-8b", "--gpus", "16", "--gpus-per-node", "8", "--gpu", "h100-80gb", "--seq-len",
     "4096", "--global-batch", "256"],
    ["train", "--model", "mlp", "--stage", "1", "--ranks", "2", "--steps", "2", "--reduction", "deepspeed-zero12"],
    # refusals: the message a user reads
    ["memory", "--params", "7e9", "--ranks", "12", "--gpus-per-node", "8", "--strategy", "hsdp"],
    ["memory", "--params", "7e9", "--ranks", "16", "--strategy", "hsdp"],
    ["memory", "--params", "7e9", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "hsdp", "--shard-group", "3"],
    ["memory", "--params", "7e9", "--ranks", "16", "--gpus-per-node", "0"],
    ["memory", "--params", "7e9", "--ranks", "16", "--shard-group", "4"],
    ["timeline", "--params", "7e9", "--ranks", "12", "--gpus-per-node", "8"],
    ["timeline", "--params", "7e9", "--ranks", "16", "--inter-link", "ib_hdr"],
    ["timeline", "--params", "7e9", "--ranks", "16", "--gpus-per-node", "8", "--strategy", "mics_hierarchical",
     "--shard-group", "4"],
    ["timeline", "--params", "7e9", "--ranks", "16", "--stage", "2", "--strategy", "hsdp"],
    ["plan", "--model", "llama-3-8b", "--gpus", "12", "--gpus-per-node", "8", "--gpu", "h100-80gb", "--seq-len",
     "4096", "--global-batch", "240"],
    ["plan", "--model", "llama-3-8b", "--gpus", "16", "--gpus-per-node", "8", "--gpu", "h100-80gb", "--seq-len",
     "4096", "--global-batch", "250"],
    ["train", "--model", "mlp", "--stage", "5", "--steps", "1"],
    ["train", "--model", "mlp", "--stage", "0", "--ranks", "2", "--steps", "1", "--reduction", "fsdp2"],
    ["train", "--model", "mlp", "--stage", "1", "--ranks", "2", "--steps", "1", "--allreduce", "nccl"],
]


def digest(x) -> str:
    """XXH3-64 of an array's dtype, shape and bytes (or of a string)."""
    if isinstance(x, str):
        return xxhash.xxh3_64_hexdigest(x.encode())
    a = np.ascontiguousarray(np.asarray(x))
    return xxhash.xxh3_64_hexdigest(f"{a.dtype}{a.shape}".encode() + a.tobytes())


def make_model(kind: str, rng):
    """A small model and its data maker: (model, batches(n, steps) -> list of per-rank micro-batch lists)."""
    from zerosim import MLP, TinyNet
    from zerosim.models import GPT, Llama, make_regression, make_sequence_task

    if kind == "tinynet":
        model = TinyNet()
        widths = [1, 1, 1]
    elif kind in ("mlp", "mlp-gelu"):
        widths = [int(w) for w in rng.integers(1, 7, size=int(rng.integers(2, 5)))]
        model = MLP(widths, activation="gelu" if kind == "mlp-gelu" else "relu")
    elif kind == "gpt":
        model = GPT(7, 8, 2, 2, 6, unit=str(rng.choice(["block", "sublayer"])))
    else:
        model = Llama(7, 8, 2, 1, 6, n_kv_heads=1)

    def batches(n: int, k: int, seed: int):
        r = np.random.default_rng(seed)
        if kind in ("gpt", "llama"):
            return [make_sequence_task(r, k, 2, 3, 7) for _ in range(n)]
        if kind == "tinynet":
            return [[(r.normal(size=(2, 2)), r.normal(size=(2, 1))) for _ in range(k)] for _ in range(n)]
        return [make_regression(r, k, 3, widths) for _ in range(n)]

    return model, batches


# the strategies of the seeded draw, as they were when the record was first made: a strategy added later does not
# move the draw (every case before it would differ); it gets LATER cases of its own, appended after the draw
DRAWN_STRATEGIES = ("full_shard", "no_reshard", "reshard_to_group", "hpz", "hsdp", "hsdp_no_sync", "mics",
                    "mics_hierarchical")
LATER = 12  # cases for each strategy added since


def engine_case(i: int, rng, only=None) -> dict:
    """One seeded configuration: its settings and what the engine made of it (or the error it raised); `only`: that
    stage or strategy instead of the drawn one."""
    from zerosim import Cluster, ZeroEngine, get_optimizer
    from zerosim.analysis.timeline import Hardware, simulate
    from zerosim.parallel.data.recipes._recipes import RECIPES
    from zerosim.parallel.data.zeropp._wire import Wire
    from zerosim.precision import get_precision

    kind = str(rng.choice(["tinynet", "mlp", "mlp-gelu", "gpt", "llama"], p=[0.1, 0.35, 0.2, 0.2, 0.15]))
    model, batches = make_model(kind, rng)
    stages = [0, 1, 2, 3] * 3 + list(DRAWN_STRATEGIES)
    stage = stages[int(rng.integers(len(stages)))] if only is None else only
    n = int(rng.choice([1, 2, 3, 4, 5, 8]))
    gpn = None
    if isinstance(stage, str):
        n = int(rng.choice([4, 8]))
        gpn = 2
    precision = str(rng.choice(["fp32", "fp16-mixed", "bf16-mixed", "fp16-pure", "bf16-pure", "bf16-pure-sr"]))
    stage_number = 3 if isinstance(stage, str) else stage
    fits = [name for name, r in RECIPES.items() if stage_number in r.stages]
    recipe = str(rng.choice(fits if rng.random() < 0.9 or not fits else list(RECIPES)))  # a few refusals too
    grad_accum = str(rng.choice(["none", "fp32"]))
    reduce = str(rng.choice(["none", "none", "fp32"]))
    loss_scale = rng.choice(["1", "1024", "dynamic-torch", "dynamic-deepspeed"])
    k = int(rng.choice([1, 1, 2, 3]))
    opt = str(rng.choice(["adam", "adamw", "sgd", "lion", "adan", "muon"], p=[0.4, 0.15, 0.15, 0.1, 0.1, 0.1]))
    comm = rng.choice(["none", "deepspeed", "fsdp"])
    clip = rng.choice(["none", "0.5", "100"])
    wire_kind = str(rng.choice(["none"] * 6 + ["qwz", "fp8", "qgz"])) if stage_number == 3 else "none"
    if wire_kind == "qgz":
        recipe, n, gpn, stage = "deepspeed-zero3", 4, 2, 3
    if wire_kind == "fp8" and np.random.default_rng(10_000 + i).integers(2):  # its own draw: the others' stay put
        wire_kind = "mxfp8"  # half the fp8 gathers in MXFP8's blocks of 32
    checkpoint = bool(rng.integers(2))
    workers = int(rng.choice([1, 1, 2]))
    settings = dict(i=i, model=kind, repr=repr(model), stage=stage, n=n, gpus_per_node=gpn, precision=precision,
                    recipe=recipe, grad_accum=grad_accum, reduce=reduce, loss_scale=str(loss_scale), k=k, opt=opt,
                    comm=str(comm), clip=str(clip), wire=wire_kind, checkpoint=checkpoint, workers=workers)
    out = dict(settings=settings)
    try:
        policy = get_precision(precision).with_(
            grad_accum=None if grad_accum == "none" else grad_accum, reduce=None if reduce == "none" else reduce,
            loss_scale={"1": 1.0, "1024": 1024.0}.get(str(loss_scale), str(loss_scale).split("-")[-1]
                                                        if "dynamic" in str(loss_scale) else loss_scale))
        hyper = {"muon": dict(lr=0.02)}.get(opt, dict(lr=1e-2))
        wire = {"none": None, "qwz": Wire(zero_quantized_weights=True, weight_groups=2),
                "fp8": Wire(fp8_all_gather="torchao"), "mxfp8": Wire(fp8_all_gather="mxfp8"),
                "qgz": Wire(zero_quantized_gradients=True)}[wire_kind]
        cluster = Cluster(n, gpus_per_node=gpn, workers=workers)
        engine = ZeroEngine(model, cluster, stage, get_optimizer(opt, **hyper), policy, checkpoint=checkpoint,
                            params=model.init_params(np.random.default_rng(i)), accumulation_steps=k,
                            comm=None if comm == "none" else str(comm), clip_grad=None if clip == "none" else
                            float(clip), recipe=recipe, wire=wire)
        losses = []
        for s in range(2):
            b = batches(n, k, 1000 * i + s)
            try:
                losses.append([repr(x) for x in engine.step(b if k > 1 else [m[0] for m in b])])
            except FloatingPointError as e:
                losses.append(f"FloatingPointError: {e}")
        out["losses"] = losses
        out["t"] = engine.t
        out["master"] = digest(engine.full_master())
        out["params"] = digest(engine.full_params())
        out["optim"] = {name: digest(v) for name, v in sorted(engine.full_optimizer_state().items())}
        out["peaks"] = [sorted(r.ledger.peak_by_kind().items()) for r in cluster.ranks]
        out["current"] = [sorted(r.ledger.by_kind().items()) for r in cluster.ranks]
        trace = cluster.trace
        out["log"] = digest("\n".join(repr(e) for e in trace.log))
        out["log_len"] = len(trace.log)
        out["events"] = digest("\n".join(repr(e) for e in trace.events))
        out["bytes_by_tier"] = sorted(trace.bytes_by_tier().items())
        out["volume"] = sorted((str(key), v) for key, v in trace.volume_by_collective().items())
        for name, hw in (("h100", Hardware("h100", "nvlink4", "fp16", inter_link="ib_ndr")),
                         ("a100", Hardware("a100", "pcie5", "bf16"))):
            result = simulate(trace, hw)
            out[f"timeline_{name}"] = json.loads(json.dumps(result.summary(), default=repr))
    except Exception as e:  # a refused configuration: the message is what the user reads
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def replay_texts() -> dict:
    """The replay's text in its variants (what `zerosim replay` prints)."""
    from zerosim.reference import narrate, replay

    out = {}
    for stage in (0, 1, 2, 3):
        for precision in ("fp16-mixed", "bf16-mixed"):
            try:
                out[f"{stage}/{precision}"] = narrate(replay(stage=stage, precision=precision))
            except TypeError:
                out[f"{stage}/{precision}"] = "signature"
    return out


def cli_outputs(zerosim: str) -> dict:
    """stdout and return code of each CLI command (run in a scratch folder)."""
    out = {}
    env = dict(os.environ, COLUMNS="120", TQDM_DISABLE="1")
    for argv in CLI:
        p = subprocess.run([zerosim, *argv], capture_output=True, text=True, env=env,
                           cwd=os.environ.get("TMPDIR", "/tmp"))
        out[" ".join(argv)] = dict(rc=p.returncode, stdout=p.stdout, stderr=p.stderr)
    return out


def record(cases: int, zerosim: str) -> dict:
    rng = np.random.default_rng(2026)
    runs = []
    for i in range(cases):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runs.append(engine_case(i, np.random.default_rng(rng.integers(2**32))))
    from zerosim.parallel.data import STRATEGIES

    for name in [s for s in STRATEGIES if s not in DRAWN_STRATEGIES]:  # each with a seed of its own name's
        later = np.random.default_rng(int.from_bytes(name.encode(), "little") % 2**32)
        for _ in range(LATER):  # numbered on after the draw's cases
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                runs.append(engine_case(len(runs), np.random.default_rng(later.integers(2**32)), only=name))
    return dict(engine=runs, replay=replay_texts(), cli=cli_outputs(zerosim))


def compare(a: dict, b: dict) -> int:
    """Print every difference; 0 if none."""
    diffs = 0
    for key in sorted(set(a) | set(b)):
        if key == "engine":
            for x, y in itertools.zip_longest(a[key], b[key]):
                if x != y:
                    diffs += 1
                    if diffs <= 20:
                        fields = sorted(k for k in set(x or {}) | set(y or {}) if (x or {}).get(k) != (y or {}).get(k))
                        print(f"engine case {(x or y)['settings']['i']}: {fields}")
                        for f in fields[:3]:
                            print(f"   before: {str((x or {}).get(f))[:300]}\n   after:  {str((y or {}).get(f))[:300]}")
        else:
            for sub in sorted(set(a.get(key, {})) | set(b.get(key, {}))):
                if a.get(key, {}).get(sub) != b.get(key, {}).get(sub):
                    diffs += 1
                    print(f"{key} {sub!r} differs")
    n_err = sum("error" in r for r in a["engine"])
    print(f"{len(a['engine'])} engine cases ({len(a['engine']) - n_err} ran, {n_err} refused), "
          f"{len(a['replay'])} replay texts, {len(a['cli'])} commands: {diffs} difference(s)")
    return 1 if diffs else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=800)
    p.add_argument("--zerosim", default=os.path.join(os.path.dirname(sys.executable), "zerosim"))
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = p.parse_args()
    if args.compare:
        with open(args.compare[0]) as f, open(args.compare[1]) as g:
            return compare(json.load(f), json.load(g))
    json.dump(record(args.cases, args.zerosim), sys.stdout, indent=0, default=repr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
