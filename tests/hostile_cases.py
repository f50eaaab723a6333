"""Hostile input by feature, as data: what a new user or a hostile one types, and the words a clear answer names.

    FEATURES                 the rows of docs/explanation/testing.md's table, in order
    cases()                  [Case], every attempt: a command line (in-process `zerosim ...`) or a Python call

(tests/test_hostile_table.py `classify` calls each answer "clear", "raw", "silent" or "crash".)

A case's answer is *clear* when it is the error the input deserves in one line — `zerosim CMD: error: ...` (an
argparse usage block above it is allowed), or a ValueError / TypeError / FloatingPointError from Python — naming
every word the case lists (the flag, the key, the file); *raw* when a traceback, another exception type or a message
without those words comes back; *silent* when the input is accepted (exit status 0, or no exception); *crash* when
the command exits with any other status. A grader's case ("graded") is clear when the grade fails the learner's
file with one line naming what the file did, and the grader itself exits 1. tests/test_hostile_table.py runs every
case and fails on any answer that is not clear; tests/test_bad_input_table.py turns the outcomes into the
table by feature of docs/explanation/testing.md, counting every attempt.

Files a case needs are made in its own temporary folder by `fixture(name, folder)`: the names in FILES.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

FEATURES = ("configs", "planner", "mesh", "quantized", "explorer", "assignments/exercises", "replay", "checkpoints",
            "outputs", "training")


@dataclass(frozen=True)
class Case:
    feature: str
    name: str
    argv: tuple = ()  # a command line (without "zerosim"), files named by FILES keys in braces: "{llama}"
    words: tuple = ()  # what a clear answer names (each must appear)
    expect: str = "error"  # "error" (exit 2 / an exception), "graded" (a failing grade, exit 1) or "runs" (exit 0:
    #                        the input is run, or a part of it skipped, and the output says so in `words`)
    call: object = None  # a Python case: call(folder) -> whatever; it must raise
    files: tuple = field(default=())  # FILES it needs


LLAMA = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4}
GPT2 = {"model_type": "gpt2", "vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64}


def _json(value):
    return lambda: json.dumps(value)


FILES = {  # name -> (file name, its text); "dir:" makes a folder
    "llama": ("llama.json", _json(LLAMA)),
    "ds": ("ds.json", _json({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}})),
    "notjson": ("bad.json", lambda: "{ not json"),
    "list": ("list.json", _json([1, 2])),
    "empty": ("empty.json", lambda: ""),
    "binary": ("binary.json", lambda: "\x00\xff\xfe"),
    "adir": ("dir:adir", None),
    "afile": ("afile.txt", lambda: "text"),
    "syntax": ("a1_ring.py", lambda: "def ring_reduce_scatter(xs, wire)\n    return xs\n"),
    "nofunc": ("a1_ring.py", lambda: "x = 1\n"),
    "exits": ("a1_ring.py", lambda: "import sys\nsys.exit(3)\n"),
    "loops": ("a1_ring.py", lambda: "def ring_reduce_scatter(xs, wire):\n    while True:\n        pass\n"),
    "raises": ("a1_ring.py", lambda: "def ring_reduce_scatter(xs, wire):\n    return 1 / 0\n"),
    "wrongtype": ("a1_ring.py", lambda: "def ring_reduce_scatter(xs, wire):\n    return 'no'\n"),
    "importfails": ("a1_ring.py", lambda: "import no_such_module_zerosim\n"),
    "notutf8": ("a1_ring.py", lambda: b"\xff\xfe\x00x = 1\n"),
    "killparent": ("a1_ring.py", lambda: "import os, signal\n\ndef ring_reduce_scatter(xs, wire):\n"
                                         "    os.kill(os.getppid(), signal.SIGKILL)\n"),
    "floods": ("a1_ring.py", lambda: "import sys\nsys.stdout.write('x' * 50_000_000)\n"),
    "interrupts": ("a1_ring.py", lambda: "def ring_reduce_scatter(xs, wire):\n    raise KeyboardInterrupt\n"),
    "chunk_exits": ("mine.py", lambda: "import os\n\ndef chunk_sent(rank, step, world_size):\n    os._exit(4)\n"),
    "chunk_none": ("mine.py", lambda: "def chunk_sent(rank, step, world_size):\n    return None\n"),
    "notpy": ("mine.txt", lambda: "def chunk_sent(rank, step, world_size):\n    return 0\n"),
    "bytes": ("bytes.json", lambda: b"\x00\xff\xfe\x80{}"),  # not UTF-8
    "readonly": ("ro:ro.log", lambda: "the user's log\n"),
    "linkout": ("link:out.log", "afile.txt"),  # a link to another file (afile must be made too)
    "dangling": ("link:dangling.log", "nowhere/x.log"),
    "linkedtag": ("link:C/step000002", "../ck/step000002"),  # another folder's tag, linked into C
    "linkedrun": ("link:cklink", "ck"),
    "fifo": ("fifo:pipe.json", None),
}


def _config(**changes) -> tuple:
    """A llama config.json with `changes` (None deletes a key), as a FILES entry made on the fly."""
    body = {**LLAMA, **changes}
    body = {k: v for k, v in body.items() if v is not None}
    return ("cfg.json", _json(body))


def _ds(**top) -> tuple:
    return ("dscfg.json", _json({"train_micro_batch_size_per_gpu": 1, **top}))


MEM = ("memory", "--model", "gpt2-small", "--ranks", "8")
TL = ("timeline", "--model", "gpt2-small", "--ranks", "8")
PLAN = ("plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb", "--seq-len", "128", "--global-batch",
        "16")
NODES = ("--model", "gpt2-small", "--ranks", "16", "--gpus-per-node", "8")
QG = ("--model", "llama-7b", "--ranks", "16", "--gpus-per-node", "8", "--seq-len", "64", "--batch", "1")
TRAIN = ("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2")


def _hf(name, changes, words):
    return Case("configs", f"config.json {name}", ("memory", "--config", "{cfg}", "--ranks", "8"), words,
                files=(("cfg", _config(**changes)),))


def _dscase(name, top, words):
    return Case("configs", f"ds_config {name}", ("memory", "--model", "gpt2-small", "--ranks", "8", "--ds-config",
                                                   "{dscfg}"), words, files=(("dscfg", _ds(**top)),))


def _python_output_cases() -> list:
    def chrome_into(folder, where):
        import numpy as np

        from zerosim import Cluster
        from zerosim.analysis.timeline import simulate, write_chrome_trace
        from zerosim.collectives import all_reduce

        cluster = Cluster(2)
        all_reduce(cluster, [np.ones(4, np.float32)] * 2)
        write_chrome_trace(simulate(cluster.trace), where(folder))

    def log_to(folder, where):
        from zerosim import Cluster

        Cluster(2, log_to=where(folder))

    def trainconfig_log(folder):
        from zerosim.train import TrainConfig

        TrainConfig(widths=(4, 6, 3), ranks=2, steps=1, trace_log=str(folder / "ck" / "latest"))

    return [
        Case("outputs", "write_chrome_trace into a folder", words=("a folder",),
             call=lambda folder: chrome_into(folder, lambda f: f)),
        Case("outputs", "write_chrome_trace into a checkpoint", words=("inside the checkpoint",), files=("ck",),
             call=lambda folder: chrome_into(folder, lambda f: f / "ck" / "step000002" / "manifest.json")),
        Case("outputs", "Cluster(log_to=a folder)", words=("log_to", "a folder"),
             call=lambda folder: log_to(folder, lambda f: f)),
        Case("outputs", "Cluster(log_to=a checkpoint's latest)", words=("log_to", "inside the checkpoint"),
             files=("ck",), call=lambda folder: log_to(folder, lambda f: f / "ck" / "latest")),
        Case("outputs", "TrainConfig(trace_log=a checkpoint's latest)", words=("trace_log", "inside the checkpoint"),
             files=("ck",), call=trainconfig_log),
    ]


def _python_training_cases() -> list:
    def engine(stage, optimizer, **kw):
        from zerosim import MLP, Cluster, ZeroEngine

        ZeroEngine(MLP([4, 6, 3]), Cluster(2), stage, optimizer, "bf16-mixed", **kw)

    def module(name, attr):
        return getattr(__import__(name, fromlist=[attr]), attr)

    nan = float("nan")
    return [
        Case("training", "Muon(ns_coefficients=(nan, 0, 0))", words=("ns_coefficients",),
             call=lambda folder: module("zerosim.optim", "Muon")(ns_coefficients=(nan, 0, 0))),
        Case("training", "Muon(sharding='owner') at stage 0", words=("sharding", "stage 0"),
             call=lambda folder: engine(0, module("zerosim.optim", "Muon")(sharding="owner"))),
        Case("training", "Offload(dpu_warmup=5) without dpu", words=("dpu_warmup",),
             call=lambda folder: module("zerosim.parallel.offload", "Offload")(dpu_warmup=5)),
        Case("training", "Offload(dpu='yes')", words=("dpu",),
             call=lambda folder: module("zerosim.parallel.offload", "Offload")(dpu="yes")),
        Case("training", "TensorParallel(sequence_parallel='yes')", words=("sequence_parallel",),
             call=lambda folder: module("zerosim.parallel.tensor", "TensorParallel")(
                 module("zerosim.models", "GPT")(8, 16, 2, 1, 6), 2, sequence_parallel="yes")),
        Case("training", "FSDP2's offload under DeepSpeed ZeRO-3's recipe", words=("fsdp2-cpu", "deepspeed-zero3"),
             call=lambda folder: engine(3, module("zerosim.optim", "get_optimizer")("adam"), recipe="deepspeed-zero3",
                                        parallelisms=(module("zerosim.parallel.offload", "Offload")(fsdp2=True),))),
        Case("training", "TrainConfig(sp='yes')", words=("sp",),
             call=lambda folder: module("zerosim.train", "TrainConfig")(model="gpt", tp=2, sp="yes")),
        Case("training", "train --clip-grad beside --tp", ("train", "--model", "gpt", "--ranks", "4", "--tp", "2",
                                                            "--clip-grad", "1.0", "--steps", "1"),
             ("--clip-grad", "tp 2")),
        Case("training", "compute_time(rate=0)", words=("rate",),
             call=lambda folder: module("zerosim.analysis.timeline._cost", "compute_time")(1.0, 1.0, 0, 1.0)),
        Case("training", "Link(bandwidth=nan)", words=("bandwidth",),
             call=lambda folder: module("zerosim.analysis.costs", "Link")("x", nan, 0.0, "")),
        Case("training", "Efficiency(flat=inf)", words=("flat",),
             call=lambda folder: module("zerosim.analysis.costs", "Efficiency")("x", flat=float("inf"))),
        Case("training", "comm_volume(ranks=0)", words=("ranks",),
             call=lambda folder: module("zerosim.analysis.costs", "comm_volume")(7e9, 0, 3)),
        Case("training", "comm_time(link=1.5)", words=("link",),
             call=lambda folder: module("zerosim.analysis.costs", "comm_time")(7e9, 8, 3, 1.5)),
        Case("training", "get_optimizer([])", words=("optimizer",),
             call=lambda folder: module("zerosim.optim", "get_optimizer")([])),
        Case("training", "Muon(ns_steps=10^30)", words=("ns_steps",),
             call=lambda folder: module("zerosim.optim", "Muon")(ns_steps=10**30)),
        Case("training", "TrainConfig(widths=(4, 0, 3))", words=("widths",),
             call=lambda folder: module("zerosim.train", "TrainConfig")(widths=(4, 0, 3))),
        Case("training", "TrainConfig(lr=nan)", words=("lr",),
             call=lambda folder: module("zerosim.train", "TrainConfig")(lr=nan)),
        # an MLP's run left its GPT fields, tp_layout and backend_options unread: a wrong one was accepted in silence
        # (a random walk over TrainConfig's fields), and backend_options a list was Cluster's raw TypeError at run
        Case("training", "TrainConfig(eval_every=-1) of an MLP", words=("eval_every",),
             call=lambda folder: module("zerosim.train", "TrainConfig")(eval_every=-1)),
        Case("training", "TrainConfig(d_model='x') of an MLP", words=("d_model",),
             call=lambda folder: module("zerosim.train", "TrainConfig")(d_model="x")),
        Case("training", "TrainConfig(tp_layout='nope')", words=("tp_layout", "megatron"),
             call=lambda folder: module("zerosim.train", "TrainConfig")(model="gpt", tp=2, ranks=2, tp_layout="nope")),
        Case("training", "TrainConfig(backend_options=[])", words=("backend_options",),
             call=lambda folder: module("zerosim.train", "TrainConfig")(backend_options=[])),
        Case("training", "make_regression of 10^30 micro-batches", words=("micro-batches",),
             call=lambda folder: module("zerosim.models", "make_regression")(
                 __import__("numpy").random.default_rng(0), 10**30, 3, [4, 3])),
    ]


def _python_checkpoint_cases() -> list:
    def trained(folder):
        import numpy as np

        from zerosim import MLP, Adam, Cluster, ZeroEngine
        from zerosim.models import make_regression

        e = ZeroEngine(MLP([4, 6, 3]), Cluster(2), 2, Adam(lr=1e-2), "bf16-mixed")
        e.step(make_regression(np.random.default_rng(0), 2, 3, [4, 6, 3]))
        return e

    def save_tag(folder):
        from zerosim import checkpoint

        checkpoint.save(trained(folder), str(folder / "ck"), tag="../escape")

    def save_overwrite(folder):
        from zerosim import checkpoint

        checkpoint.save(trained(folder), str(folder / "ck"), overwrite="yes")

    def save_nested(folder):
        from zerosim import checkpoint

        e = trained(folder)
        checkpoint.save(e, str(folder / "ck"))
        checkpoint.save(e, str(folder / "ck" / "step000001"))

    def save_other_run(folder):
        from zerosim import checkpoint

        checkpoint.save(trained(folder), str(folder / "ck"))
        e = trained(folder)
        e.step(e.cluster and __import__("zerosim.models", fromlist=["x"]).make_regression(
            __import__("numpy").random.default_rng(9), 2, 3, [4, 6, 3]))
        checkpoint.save(e, str(folder / "ck"))

    def load_other_model(folder):
        from zerosim import MLP, Cluster, checkpoint

        checkpoint.save(trained(folder), str(folder / "ck"))
        checkpoint.load(str(folder / "ck"), Cluster(2), MLP([4, 7, 3]))

    def load_not_folder(folder):
        from zerosim import MLP, Cluster, checkpoint

        checkpoint.load(str(folder / "nothing"), Cluster(2), MLP([4, 6, 3]))

    return [
        Case("checkpoints", "save(tag='../escape')", words=("tag",), call=save_tag),
        Case("checkpoints", "save(overwrite='yes')", words=("overwrite",), call=save_overwrite),
        Case("checkpoints", "save into a tag folder", words=("inside the checkpoint",), call=save_nested),
        Case("checkpoints", "save another run into a run's folder", words=("another run",), call=save_other_run),
        Case("checkpoints", "save(tag=1.5)", words=("tag",),
             call=lambda folder: __import__("zerosim.checkpoint", fromlist=["save"]).save(trained(folder),
                                                                                         str(folder / "ck"), tag=1.5)),
        Case("checkpoints", "load(model=1.5)", words=("model",),
             call=lambda folder: __import__("zerosim.checkpoint", fromlist=["load"]).load(
                 str(folder / "ck"), __import__("zerosim", fromlist=["Cluster"]).Cluster(2), 1.5)),
        Case("checkpoints", "save(data='x')", words=("data",),
             call=lambda folder: __import__("zerosim.checkpoint", fromlist=["save"]).save(trained(folder),
                                                                                         str(folder / "ck"), data="x")),
        Case("checkpoints", "load with another model", words=("another model",), call=load_other_model),
        Case("checkpoints", "load a missing folder", words=("no such folder",), call=load_not_folder),
    ]


def cases() -> list:
    c = []
    # ---------------------------------------------------------------------------------------------- configs
    c += [
        Case("configs", "--config missing file", ("memory", "--config", "nope.json", "--ranks", "8"), ("nope.json",)),
        Case("configs", "--config a folder", ("memory", "--config", "{adir}", "--ranks", "8"), ("adir",),
             files=("adir",)),
        Case("configs", "--config not JSON", ("memory", "--config", "{notjson}", "--ranks", "8"), ("not JSON",),
             files=("notjson",)),
        Case("configs", "--config a list", ("memory", "--config", "{list}", "--ranks", "8"), ("one JSON object",),
             files=("list",)),
        Case("configs", "--config empty", ("memory", "--config", "{empty}", "--ranks", "8"), ("not JSON",),
             files=("empty",)),
        Case("configs", "--config binary", ("memory", "--config", "{binary}", "--ranks", "8"), ("binary.json",),
             files=("binary",)),
        _hf("without hidden_size", {"hidden_size": None}, ("hidden_size missing",)),
        _hf("without num_hidden_layers", {"num_hidden_layers": None}, ("num_hidden_layers missing",)),
        _hf("without vocab_size", {"vocab_size": None}, ("vocab_size missing",)),
        _hf("without intermediate_size", {"intermediate_size": None}, ("intermediate_size missing",)),
        _hf("without model_type", {"model_type": None}, ("model_type",)),
        _hf("model_type bert", {"model_type": "bert"}, ("'bert'",)),
        _hf("hidden_size a string", {"hidden_size": "64"}, ("hidden_size",)),
        _hf("hidden_size 0", {"hidden_size": 0}, ("hidden_size",)),
        _hf("num_hidden_layers -1", {"num_hidden_layers": -1}, ("num_hidden_layers",)),
        _hf("num_hidden_layers 10^6", {"num_hidden_layers": 10**6}, ("1,000,003 units",)),
        _hf("heads that do not split hidden_size", {"num_attention_heads": 5}, ("num_attention_heads 5",)),
        _hf("num_key_value_heads 0", {"num_key_value_heads": 0}, ("num_key_value_heads",)),
        _hf("num_key_value_heads 3 of 4", {"num_key_value_heads": 3}, ("num_key_value_heads 3",)),
        _hf("rms_norm_eps 0", {"rms_norm_eps": 0}, ("rms_norm_eps",)),
        _hf("rope_theta -1", {"rope_theta": -1}, ("rope_theta",)),
        _hf("tie_word_embeddings 'yes'", {"tie_word_embeddings": "yes"}, ("tie_word_embeddings",)),
        _hf("max_position_embeddings 0", {"max_position_embeddings": 0}, ("max_position_embeddings",)),
        _hf("head_dim 0", {"head_dim": 0}, ("head_dim",)),
        _hf("hidden_act gelu", {"hidden_act": "gelu"}, ("hidden_act",)),
        _hf("a mixture of experts", {"num_local_experts": 8}, ("num_local_experts",)),
        _hf("a vision tower", {"vision_config": {}}, ("vision_config",)),
        Case("configs", "gpt2 without n_embd", ("memory", "--config", "{cfg}", "--ranks", "8"), ("n_embd missing",),
             files=(("cfg", ("cfg.json", _json({k: v for k, v in GPT2.items() if k != "n_embd"}))),)),
        Case("configs", "gpt2 n_inner 100", ("memory", "--config", "{cfg}", "--ranks", "8"), ("n_inner",),
             files=(("cfg", ("cfg.json", _json({**GPT2, "n_inner": 100}))),)),
        Case("configs", "--seq-len past max_position_embeddings", ("memory", "--config", "{cfg}", "--ranks", "8",
                                                                    "--seq-len", "100000"), ("--seq-len 100000",),
             files=(("cfg", _config()),)),
        _dscase("loss_scale -1", {"fp16": {"enabled": True, "loss_scale": -1}}, ("fp16.loss_scale",)),
        _dscase("loss_scale_window 0", {"fp16": {"enabled": True, "loss_scale_window": 0}},
                ("fp16.loss_scale_window",)),
        _dscase("hysteresis 0", {"fp16": {"enabled": True, "hysteresis": 0}}, ("fp16.hysteresis",)),
        _dscase("initial_scale_power 2000", {"fp16": {"enabled": True, "initial_scale_power": 2000}},
                ("fp16.initial_scale_power",)),
        _dscase("reduce_bucket_size -5", {"zero_optimization": {"stage": 3, "reduce_bucket_size": -5}},
                ("zero_optimization.reduce_bucket_size",)),
        _dscase("stage3_max_live_parameters -1", {"zero_optimization": {"stage": 3, "stage3_max_live_parameters": -1}},
                ("stage3_max_live_parameters",)),
        _dscase("stage '3'", {"zero_optimization": {"stage": "3"}}, ("zero_optimization.stage",)),
        _dscase("stage 4", {"zero_optimization": {"stage": 4}}, ("zero_optimization.stage",)),
        _dscase("zero_optimization a list", {"zero_optimization": [3]}, ("zero_optimization",)),
        _dscase("an unknown ZeRO key", {"zero_optimization": {"stage": 3, "stage_3_prefetch": 1}},
                ("stage_3_prefetch",)),
        _dscase("fp16 and bf16 both", {"fp16": {"enabled": True}, "bf16": {"enabled": True}}, ("fp16 and bf16",)),
        _dscase("offload at stage 0", {"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}},
                ("offload_optimizer",)),
        _dscase("offload to a gpu", {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "gpu"}}},
                ("offload_optimizer.device",)),
        _dscase("train_batch_size that does not split", {"train_batch_size": 7}, ("train_batch_size 7",)),
        _dscase("gradient_accumulation_steps 0", {"gradient_accumulation_steps": 0}, ("gradient_accumulation_steps",)),
        _dscase("communication_data_type int8", {"communication_data_type": "int8"}, ("communication_data_type",)),
        _dscase("grad_accum_dtype fp8", {"data_types": {"grad_accum_dtype": "fp8"}}, ("grad_accum_dtype",)),
        _dscase("an optimizer zerosim lacks", {"optimizer": {"type": "SGDX"}}, ("'SGDX'",)),
        _dscase("optimizer params a list", {"optimizer": {"type": "Adam", "params": [1]}}, ("optimizer.params",)),
        _dscase("lr 'fast'", {"optimizer": {"type": "Adam", "params": {"lr": "fast"}}}, ("optimizer.params.lr",)),
        _dscase("gradient_clipping -1", {"gradient_clipping": -1}, ("gradient_clipping",)),
        Case("configs", "ds_config gradient_clipping beside --tp", (*MEM, "--seq-len", "64", "--batch", "1", "--tp",
                                                                    "2", "--ds-config", "{dscfg}"),
             ("gradient_clipping", "tp 2"), files=(("dscfg", _ds(gradient_clipping=1.0)),)),
        _dscase("gradient_predivide_factor 0", {"gradient_predivide_factor": 0}, ("gradient_predivide_factor",)),
        _dscase("mics_shard_size 0", {"zero_optimization": {"stage": 3, "mics_shard_size": 0}}, ("mics_shard_size",)),
        _dscase("overlap_comm 'yes'", {"zero_optimization": {"stage": 3, "overlap_comm": "yes"}}, ("overlap_comm",)),
        _dscase("optimizer.params.momentum 'auto'", {"optimizer": {"type": "SGD", "params": {"momentum": "auto"}}},
                ("optimizer.params.momentum",)),
        Case("configs", "ds_config optimizer.params 'auto' (the HF Trainer's)", (*MEM, "--ds-config", "{dscfg}"),
             ("optimizer.params.lr: auto -> 5e-05", "TrainingArguments' default"), "runs",
             files=(("dscfg", _ds(optimizer={"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                                                          "weight_decay": "auto"}})),)),
        _hf("intermediate_size 10^15", {"intermediate_size": 10**15}, ("intermediate_size", "cfg.json")),
        _hf("hidden_size 2^40", {"hidden_size": 2**40}, ("hidden_size", "cfg.json")),
        _hf("vocab_size 2^31", {"vocab_size": 2**31}, ("vocab_size",)),
        _hf("a 7e15-parameter model", {"hidden_size": 2**20, "intermediate_size": 2**30, "num_attention_heads": 2**10},
            ("parameters", "cfg.json")),
        _hf("model_type a list", {"model_type": ["llama"]}, ("model_type",)),
        _hf("model_type an object", {"model_type": {"a": 1}}, ("model_type",)),
        Case("configs", "--config not UTF-8", ("memory", "--config", "{bytes}", "--ranks", "8"),
             ("bytes.json", "UTF-8"), files=("bytes",)),
        Case("configs", "--ds-config not UTF-8", (*MEM, "--ds-config", "{bytes}"), ("bytes.json", "UTF-8"),
             files=("bytes",)),
        Case("configs", "--config a named pipe", ("memory", "--config", "{fifo}", "--ranks", "8"),
             ("pipe.json", "not a regular file"), files=("fifo",)),
        Case("configs", "--ds-config a named pipe", (*MEM, "--ds-config", "{fifo}"),
             ("pipe.json", "not a regular file"), files=("fifo",)),
        Case("configs", "--config /dev/zero", ("memory", "--config", "/dev/zero", "--ranks", "8"),
             ("/dev/zero", "not a regular file")),
        Case("configs", "--config nested 10^5 deep", ("memory", "--config", "{cfg}", "--ranks", "8"), ("nested",),
             files=(("cfg", ("deep.json", lambda: "[" * 100_000)),)),
        Case("configs", "--ds-config not JSON", (*MEM, "--ds-config", "{notjson}"), ("not JSON",),
             files=("notjson",)),
        Case("configs", "--ds-config with --stage's flags", (*TL, "--ds-config", "{ds}", "--stage", "1"),
             ("--stage 1",), files=("ds",)),
    ]
    # ---------------------------------------------------------------------------------------------- planner
    p = list(PLAN)
    c += [
        # Muon beside a pipeline: its ranks hold whole matrices, but the sharded update over their data-parallel
        # groups is not modelled (the message once said a rank holds slices, which only TP's do)
        Case("planner", "--optimizer muon beside --pp", (*p, "--optimizer", "muon", "--pp", "2", "--stages", "3",
                                                           "--strategies", "block"),
             ("muon", "pp 2", "whole matrices, but", "not modelled")),
        Case("planner", "--gpus 0", (*p[:4], "0", *p[5:]), ("--gpus",)),
        Case("planner", "--gpus -8", (*p[:4], "-8", *p[5:]), ("--gpus",)),
        Case("planner", "--gpus 10^8", (*p[:4], "100000000", *p[5:-1], "100000000"), ("--gpus 100,000,000",)),
        Case("planner", "--gpus 12 on nodes of 8", (*p[:4], "12", *p[5:-1], "24", "--gpus-per-node", "8"),
             ("--gpus 12", "--gpus-per-node 8")),
        Case("planner", "--gpus-per-node 3", (*PLAN, "--gpus-per-node", "3"), ("--gpus-per-node 3",)),
        Case("planner", "--gpus-per-node 0", (*PLAN, "--gpus-per-node", "0"), ("--gpus-per-node",)),
        Case("planner", "--global-batch 0", (*p[:-1], "0"), ("global",)),
        Case("planner", "--global-batch 12 over 8", (*p[:-1], "12"), ("12",)),
        Case("planner", "--seq-len 0", (*p[:8], "0", *p[9:]), ("seq",)),
        Case("planner", "--seq-len past the positions", (*p[:8], "100000", *p[9:]), ("--seq-len 100000",)),
        Case("planner", "--stages 5", (*PLAN, "--stages", "5"), ("--stages",)),
        Case("planner", "--stages ''", (*PLAN, "--stages", ""), ("--stages",)),
        Case("planner", "--stages a", (*PLAN, "--stages", "a"), ("--stages",)),
        Case("planner", "--strategies bogus", (*PLAN, "--strategies", "bogus"), ("'bogus'",)),
        Case("planner", "--micro-batches 0", (*PLAN, "--micro-batches", "0"), ("--micro-batches",)),
        Case("planner", "--micro-batches 3 of 2", (*PLAN, "--micro-batches", "3"), ("micro-batch",)),
        Case("planner", "--top 0", (*PLAN, "--top", "0"), ("--top",)),
        Case("planner", "--reserve 1.5", (*PLAN, "--reserve", "1.5"), ("--reserve",)),
        Case("planner", "--reserve nan", (*PLAN, "--reserve", "nan"), ("--reserve",)),
        Case("planner", "--figure x.txt", (*PLAN, "--figure", "x.txt"), ("--figure", ".png")),
        Case("planner", "--figure a folder", (*PLAN, "--figure", "{adir}"), ("--figure",), files=("adir",)),
        Case("planner", "--figure under /proc", (*PLAN, "--figure", "/proc/zerosim/x.png"), ("--figure",)),
        Case("planner", "--gpu bogus", (*PLAN[:5], "bogus", *PLAN[6:]), ("--gpu",)),
        Case("planner", "--config without size keys", ("plan", "--config", "{cfg}", *PLAN[3:]),
             ("hidden_size missing",), files=(("cfg", _config(hidden_size=None)),)),
        Case("planner", "--config of 10^6 layers", ("plan", "--config", "{cfg}", *PLAN[3:]), ("1,000,003 units",),
             files=(("cfg", _config(num_hidden_layers=10**6)),)),
        Case("planner", "timeline --accumulation-steps 100000", (*TL, "--accumulation-steps", "100000"),
             ("unit passes",)),
        Case("planner", "timeline --accumulation-steps 0", (*TL, "--accumulation-steps", "0"),
             ("--accumulation-steps",)),
        Case("planner", "memory --gpus-per-node alone", (*MEM, "--gpus-per-node", "16"), ("--gpus-per-node",)),
        Case("planner", "memory --ranks 0", ("memory", "--model", "gpt2-small", "--ranks", "0"), ("--ranks",)),
        Case("planner", "memory --params -1", ("memory", "--params", "-1"), ("--params",)),
        Case("planner", "memory --params 1e30", ("memory", "--params", "1e30"), ("--params",)),
        Case("planner", "memory --layers 10^6", ("memory", "--params", "7e9", "--layers", "1000000"),
             ("1,000,000 units",)),
        Case("planner", "memory --reserve -0.1", (*MEM, "--gpu", "h100-80gb", "--reserve", "-0.1"), ("--reserve",)),
        Case("planner", "timeline --sweep of 2^21 ranks", ("timeline", "--model", "gpt2-small", "--sweep",
                                                          "--sweep-ranks", ",".join(str(2**k) for k in range(21))),
             ("--sweep",)),
        Case("planner", "timeline --sweep-ranks 0", ("timeline", "--model", "gpt2-small", "--sweep", "--sweep-ranks",
                                                    "0"), ("--sweep-ranks",)),
        Case("planner", "timeline --tokens 0", (*TL, "--tokens", "0"), ("--tokens",)),
        Case("planner", "train --accumulation-steps 100000", ("train", "--accumulation-steps", "100000", "--steps",
                                                             "1"), ("400,000 micro-batches",)),
        Case("planner", "timeline --efficiency 1e-300", (*TL, "--efficiency", "1e-300"), ("--efficiency",)),
        Case("planner", "memory --layers beside --model", (*MEM, "--layers", "4"), ("--layers",)),
        Case("planner", "timeline --sweep-ranks without --sweep", (*TL, "--sweep-ranks", "8,16"), ("--sweep-ranks",)),
        Case("planner", "timeline --tokens 10^20", (*TL, "--tokens", "99999999999999999999"), ("--tokens",)),
        Case("planner", "plan --efficiency eager:gemm=1e-9", (*PLAN, "--efficiency", "eager:gemm=1e-9"),
             ("--efficiency", "gemm")),
        Case("planner", "timeline --link-bandwidth 1e-300", (*TL, "--link-bandwidth", "1e-300"), ("--link-bandwidth",)),
        Case("planner", "timeline --link-bandwidth nan", (*TL, "--link-bandwidth", "nan"), ("--link-bandwidth",)),
        Case("planner", "plan --link-bandwidth inf", (*PLAN, "--link-bandwidth", "inf"), ("--link-bandwidth",)),
        Case("planner", "timeline --link-alpha 1e300", (*TL, "--link-alpha", "1e300"), ("--link-alpha",)),
        Case("planner", "memory --host-memory without offload", (*MEM, "--host-memory", "100"), ("--host-memory",)),
        Case("planner", "memory --host without offload", (*MEM, "--host", "dgx-a100"), ("--host",)),
        Case("planner", "timeline --pcie without offload", (*TL, "--pcie", "pcie4"), ("--pcie",)),
        Case("planner", "timeline --host-bandwidth without offload", (*TL, "--host-bandwidth", "10"),
             ("--host-bandwidth",)),
        Case("planner", "plan --host-nvme without offload", (*PLAN, "--host-nvme", "5"), ("--host-nvme",)),
        Case("planner", "timeline --offload-optimizer --host-bandwidth 1e-300", (
            *TL, "--offload-optimizer", "cpu", "--host-bandwidth", "1e-300"), ("--host-bandwidth",)),
        Case("planner", "memory --offload-policy with a DeepSpeed config", (*MEM, "--offload-policy", "cpu",
                                                                           "--ds-config", "{ds}"),
             ("--offload-policy", "--ds-config"), files=("ds",)),
    ]
    # ---------------------------------------------------------------------------------------------- mesh
    c += [
        Case("mesh", "--strategy bogus", ("memory", *NODES, "--strategy", "bogus"), ("'bogus'",)),
        Case("mesh", "--strategy all in timeline (one step)", ("timeline", *NODES, "--strategy", "all"),
             ("--strategy",)),
        Case("mesh", "two strategies in one timeline step", ("timeline", *NODES, "--strategy", "hsdp,mics"),
             ("--sweep",)),
        Case("mesh", "--shard-group 0", ("memory", *NODES, "--strategy", "hsdp", "--shard-group", "0"),
             ("shard",)),
        Case("mesh", "--shard-group 3 of 16", ("memory", *NODES, "--strategy", "hsdp", "--shard-group", "3"),
             ("3",)),
        Case("mesh", "--shard-group without --strategy", ("memory", *NODES[:4], "--shard-group", "8"),
             ("--shard-group",)),
        Case("mesh", "--hpz-group 0", ("memory", *NODES, "--strategy", "hpz", "--hpz-group", "0"), ("0",)),
        Case("mesh", "mics_hierarchical within one node", ("memory", *NODES, "--strategy", "mics_hierarchical"),
             ("mics_hierarchical",)),
        Case("mesh", "--gpus-per-node 0", ("memory", *NODES[:4], "--gpus-per-node", "0", "--strategy", "hsdp"),
             ("--gpus-per-node",)),
        Case("mesh", "ranks that do not fill nodes", ("memory", "--model", "gpt2-small", "--ranks", "12",
                                                     "--gpus-per-node", "8", "--strategy", "hsdp"), ("--ranks 12",)),
        Case("mesh", "--strategy and --stage", ("timeline", *NODES, "--strategy", "hsdp", "--stage", "3"),
             ("--stage",)),
        Case("mesh", "--strategy and --ds-config", ("memory", *NODES, "--strategy", "hsdp", "--ds-config", "{ds}"),
             ("--ds-config",), files=("ds",)),
        Case("mesh", "--strategy hsdp without nodes", ("memory", "--model", "gpt2-small", "--ranks", "16",
                                                      "--strategy", "hsdp"), ("--gpus-per-node",)),
        Case("mesh", "--sweep --strategy without nodes", ("timeline", "--model", "gpt2-small", "--sweep",
                                                          "--strategy", "hsdp"), ("--gpus-per-node",)),
        Case("mesh", "--inter-link without nodes", (*TL, "--inter-link", "ib_ndr"), ("--inter-link",)),
        Case("mesh", "--link bogus", (*TL, "--link", "bogus"), ("--link",)),
        Case("mesh", "timeline --ranks 10^8", ("timeline", "--model", "gpt2-small", "--ranks", "100000000"),
             ("--ranks 100,000,000",)),
        Case("mesh", "memory --ranks 10^8", ("memory", "--model", "gpt2-small", "--ranks", "100000000"),
             ("--ranks 100,000,000",)),
        Case("mesh", "timeline --ranks 0", ("timeline", "--model", "gpt2-small", "--ranks", "0"), ("--ranks",)),
        Case("mesh", "--virtual-stages 0 without --pp", (*MEM, "--virtual-stages", "0"), ("--virtual-stages",)),
        Case("mesh", "memory --strategy all where one does not apply", ("memory", "--strategy", "all", "--params",
                                                                         "7e9", "--ranks", "8", "--gpus-per-node", "4"),
             ("skipped mics_hierarchical",), "runs"),
        Case("mesh", "timeline --sweep --strategy all where one does not apply", (
            "timeline", "--sweep", "--strategy", "all", "--params", "7e9", "--gpus-per-node", "4", "--sweep-ranks",
            "8,16"), ("skipped mics_hierarchical",), "runs"),
    ]
    # ---------------------------------------------------------------------------------------------- quantized
    c += [
        Case("quantized", "qgZ on one node", ("memory", *QG[:4], "--gpus-per-node", "16", *QG[6:],
                                              "--zero-quantized-gradients"), ("qgZ",)),
        Case("quantized", "qgZ without --gpus-per-node", ("memory", "--model", "llama-7b", "--ranks", "16", "--seq-len",
                                                          "64", "--zero-quantized-gradients"), ("qgZ",)),
        Case("quantized", "qgZ in bf16", ("memory", *QG, "--precision", "bf16-mixed", "--zero-quantized-gradients"),
             ("fp16",)),
        Case("quantized", "qgZ on the layer-sized model", ("memory", *QG[:6], "--zero-quantized-gradients"),
             ("--seq-len",)),
        Case("quantized", "qgZ with a strategy", ("memory", *QG, "--zero-quantized-gradients", "--strategy", "hsdp"),
             ("--zero-quantized-gradients", "--strategy")),
        Case("quantized", "--weight-groups 0", (*MEM, "--zero-quantized-weights", "--weight-groups", "0"),
             ("--weight-groups",)),
        Case("quantized", "--weight-groups without qwZ", (*MEM, "--weight-groups", "64"), ("--weight-groups",)),
        Case("quantized", "--fp8-all-gather bogus", (*MEM, "--fp8-all-gather", "bogus"), ("--fp8-all-gather",)),
        Case("quantized", "qwZ and fp8 both", (*MEM, "--zero-quantized-weights", "--fp8-all-gather"),
             ("--fp8-all-gather",)),
        Case("quantized", "qwZ at stage 1 (DeepSpeed config)", (*MEM, "--zero-quantized-weights", "--ds-config",
                                                                "{dscfg}"), ("stage 1",),
             files=(("dscfg", _ds(zero_optimization={"stage": 1})),)),
        Case("quantized", "timeline --stage 1 with qwZ", (*TL, "--stage", "1", "--zero-quantized-weights"),
             ("stage",)),
        # ZeRO++'s and torchao's collectives run over every rank: beside --tp, --cp or --pp refused before any step
        Case("quantized", "qwZ beside --tp", (*MEM, "--seq-len", "64", "--batch", "1", "--tp", "2",
                                              "--zero-quantized-weights"), ("--zero-quantized-weights", "tp 2")),
        Case("quantized", "timeline, fp8 gathers beside --cp", (*TL, "--seq-len", "64", "--batch", "1", "--cp", "2",
                                                                 "--checkpoint", "flash", "--fp8-all-gather"),
             ("--fp8-all-gather", "cp 2")),
        Case("quantized", "qwZ beside --pp", (*MEM, "--seq-len", "64", "--batch", "1", "--pp", "2",
                                              "--zero-quantized-weights"), ("--zero-quantized-weights", "--pp")),
        Case("quantized", "Wire(fp8_all_gather='fp4')", words=("fp8_all_gather",),
             call=lambda folder: __import__("zerosim.parallel.data", fromlist=["Wire"]).Wire(fp8_all_gather="fp4")),
        Case("quantized", "LocoParams(err_beta=2)", words=("err_beta",),
             call=lambda folder: __import__("zerosim.parallel.data", fromlist=["L"]).LocoParams(err_beta=2.0)),
        Case("quantized", "loco without qgZ", words=("zero_quantized_gradients",),
             call=lambda folder: __import__("zerosim.parallel.data", fromlist=["W"]).Wire(
                 loco=__import__("zerosim.parallel.data", fromlist=["L"]).LocoParams())),
    ]
    # ---------------------------------------------------------------------------------------------- explorer
    c += [
        Case("explorer", "--html a file", ("explore", "--html", "{afile}"), ("--html",), files=("afile",)),
        Case("explorer", "--html under /proc", ("explore", "--html", "/proc/zerosim-x"), ("--html",)),
        Case("explorer", "--html inside a checkpoint", ("explore", "--html", "{ck}"), ("inside the checkpoint",),
             files=("ck",)),
        Case("explorer", "--html ''", ("explore", "--html", ""), ("--html",)),
        # the page's grid is gone (every setting is computed in the browser): an old command's --grid is refused
        Case("explorer", "--grid (gone)", ("explore", "--html", "site", "--grid", "small"), ("--grid",)),
        Case("explorer", "a page that is not the explorer's", ("explore", "--html", "{site}"), ("index.html",),
             files=(("site", ("dir:site", None)), ("page", ("site/index.html", lambda: "<html>")))),
    ]
    # ---------------------------------------------------------------------------------------------- assignments
    a1 = ("assignment", "check", "1", "--file")
    c += [
        Case("assignments/exercises", "assignment 5", ("assignment", "show", "5"), ("5",)),
        Case("assignments/exercises", "assignment -1", ("assignment", "check", "-1", "--file", "x.py"), ("-1",)),
        Case("assignments/exercises", "--file missing", (*a1, "missing.py"), ("missing.py",)),
        Case("assignments/exercises", "--file a folder", (*a1, "{adir}"), ("adir",), files=("adir",)),
        Case("assignments/exercises", "--file not .py", (*a1, "{afile}"), ("--file",), files=("afile",)),
        Case("assignments/exercises", "--time-limit 0", (*a1, "x.py", "--time-limit", "0"), ("--time-limit",)),
        Case("assignments/exercises", "--time-limit nan", (*a1, "x.py", "--time-limit", "nan"), ("--time-limit",)),
        Case("assignments/exercises", "a syntax error", (*a1, "{syntax}"), ("SyntaxError",), "graded",
             files=("syntax",)),
        Case("assignments/exercises", "no function", (*a1, "{nofunc}"), ("defines no function",), "graded",
             files=("nofunc",)),
        Case("assignments/exercises", "sys.exit while loaded", (*a1, "{exits}"), ("sys.exit(3)",), "graded",
             files=("exits",)),
        # a loop fails whatever the limit (the clock starts once the child has imported): a short one, 12 tests of it
        Case("assignments/exercises", "a loop", (*a1, "{loops}", "--time-limit", "0.25"),
             ("did not finish within 0.25 s",), "graded", files=("loops",)),
        Case("assignments/exercises", "1 / 0", (*a1, "{raises}"), ("ZeroDivisionError",), "graded",
             files=("raises",)),
        Case("assignments/exercises", "a wrong type back", (*a1, "{wrongtype}"), ("returned str",), "graded",
             files=("wrongtype",)),
        Case("assignments/exercises", "an import that fails", (*a1, "{importfails}"), ("no_such_module_zerosim",),
             "graded", files=("importfails",)),
        Case("assignments/exercises", "not UTF-8", (*a1, "{notutf8}"), ("a1_ring.py",), "graded",
             files=("notutf8",)),
        # the parent ended (its status said) or, where the sandbox scopes signals, the kill refused: either way this
        Case("assignments/exercises", "kills its parent", (*a1, "{killparent}"), ("may not signal other processes",),
             "graded", files=("killparent",)),
        Case("assignments/exercises", "prints 50 MB while loaded", (*a1, "{floods}"), ("printed more than 1 MiB",),
             "graded", files=("floods",)),
        Case("assignments/exercises", "raises KeyboardInterrupt", (*a1, "{interrupts}"),
             ("raised KeyboardInterrupt",), "graded", files=("interrupts",)),
        Case("assignments/exercises", "grade --results a folder", ("assignment", "grade", "1", "--file", "{nofunc}",
                                                                   "--results", "{adir}"), ("--results",),
             files=("nofunc", "adir")),
        Case("assignments/exercises", "grade --results inside a checkpoint", (
            "assignment", "grade", "1", "--file", "{nofunc}", "--results", "{ck}/latest"), ("inside the checkpoint",),
             files=("nofunc", "ck")),
        Case("assignments/exercises", "exercise bogus", ("exercise", "show", "bogus"), ("bogus",)),
        Case("assignments/exercises", "exercise check os._exit", ("exercise", "check", "ring_chunk", "--file",
                                                                  "{chunk_exits}"), ("exit status 4",), "graded",
             files=("chunk_exits",)),
        Case("assignments/exercises", "exercise check returns None", ("exercise", "check", "ring_chunk", "--file",
                                                                      "{chunk_none}"), ("None",), "graded",
             files=("chunk_none",)),
        Case("assignments/exercises", "exercise check --file not .py", ("exercise", "check", "ring_chunk", "--file",
                                                                        "{notpy}"), ("--file",), files=("notpy",)),
        Case("assignments/exercises", "exercise --planted bogus", ("exercise", "check", "ring_chunk", "--planted",
                                                                   "bogus"), ("bogus",)),
    ]
    # ---------------------------------------------------------------------------------------------- replay
    c += [
        Case("replay", "--mesh 3x3", ("replay", "--mesh", "3x3"), ("--mesh",)),
        Case("replay", "--strategy without --mesh", ("replay", "--strategy", "mics"), ("--mesh",)),
        Case("replay", "--mesh with --stage", ("replay", "--mesh", "2x2", "--stage", "2"), ("--stage",)),
        Case("replay", "--mesh with --steps", ("replay", "--mesh", "2x2", "--steps", "3"), ("--steps",)),
        Case("replay", "--mesh with --loss-scale", ("replay", "--mesh", "2x2", "--loss-scale", "8"), ("--loss-scale",)),
        Case("replay", "--lr -1", ("replay", "--lr", "-1"), ("--lr",)),
        Case("replay", "--lr nan", ("replay", "--lr", "nan"), ("--lr",)),
        Case("replay", "--mesh --lr inf", ("replay", "--mesh", "2x2", "--lr", "inf"), ("--lr",)),
        Case("replay", "--steps 0", ("replay", "--steps", "0"), ("--steps",)),
        Case("replay", "--steps 10^6", ("replay", "--steps", "1000000"), ("--steps",)),
        Case("replay", "--loss-scale 0", ("replay", "--loss-scale", "0"), ("--loss-scale",)),
        Case("replay", "--loss-scale nan", ("replay", "--loss-scale", "nan"), ("--loss-scale",)),
        Case("replay", "--loss-scale abc", ("replay", "--loss-scale", "abc"), ("abc",)),
        Case("replay", "--loss-scale 1e39", ("replay", "--loss-scale", "1e39"), ("fp32",)),
        Case("replay", "--precision bogus", ("replay", "--precision", "bogus"), ("--precision",)),
        Case("replay", "--exact with --json", ("replay", "--exact", "--json"), ("--exact",)),
    ]
    # ---------------------------------------------------------------------------------------------- checkpoints
    c += [
        Case("checkpoints", "inspect a missing folder", ("checkpoint", "inspect", "nope"), ("nope",)),
        Case("checkpoints", "inspect a file", ("checkpoint", "inspect", "{afile}"), ("afile.txt",), files=("afile",)),
        Case("checkpoints", "inspect an empty folder", ("checkpoint", "inspect", "{adir}"), ("no checkpoint here",),
             files=("adir",)),
        Case("checkpoints", "inspect --tag ../x", ("checkpoint", "inspect", "{ck}", "--tag", "../x"), ("tag",),
             files=("ck",)),
        Case("checkpoints", "a garbled latest", ("checkpoint", "inspect", "{ck}"), ("latest",),
             files=("ck", ("garble", ("ck/latest", lambda: "\x00\x01garbage")))),
        Case("checkpoints", "consolidate into the checkpoint", ("checkpoint", "consolidate", "{ck}", "{ck}/x.st"),
             ("inside the checkpoint",), files=("ck",)),
        Case("checkpoints", "consolidate into a folder", ("checkpoint", "consolidate", "{ck}", "{adir}"), ("folder",),
             files=("ck", "adir")),
        Case("checkpoints", "resume a missing folder", (*TRAIN, "--resume", "nope"), ("nope",)),
        Case("checkpoints", "resume an empty folder", (*TRAIN, "--resume", "{adir}"), ("no checkpoint here",),
             files=("adir",)),
        Case("checkpoints", "resume another model", ("train", "--widths", "4,7,3", "--steps", "5", "--resume", "{ck}"),
             ("another model",), files=("ck",)),
        Case("checkpoints", "resume with another precision", ("train", "--widths", "4,6,3", "--steps", "5",
                                                              "--resume", "{ck}", "--precision", "fp32"),
             ("precision",), files=("ck",)),
        Case("checkpoints", "resume at its step", ("train", "--widths", "4,6,3", "--steps", "2", "--resume", "{ck}"),
             ("asks for no more",), files=("ck",)),
        Case("checkpoints", "a truncated rank file", ("checkpoint", "inspect", "{ck}"), ("truncated",),
             files=("ck", ("cut", ("ck/step000002/rank00000.safetensors", lambda: "short")))),
        Case("checkpoints", "a manifest edited by hand", ("checkpoint", "inspect", "{ck}"), ("world_size",),
             files=("ck", ("edit", "manifest world_size 5"))),
        Case("checkpoints", "--save a file", (*TRAIN, "--save", "{afile}"), ("afile.txt",), files=("afile",)),
        Case("checkpoints", "--save into a tag folder", (*TRAIN, "--save", "{ck}/step000001"),
             ("inside the checkpoint",), files=("ck",)),
        Case("checkpoints", "--save another run's folder", ("train", "--widths", "4,6,3", "--ranks", "2", "--steps",
                                                            "2", "--seed", "7", "--save", "{ck}"), ("another run",),
             files=("ck",)),
        Case("checkpoints", "--overwrite without --save", (*TRAIN, "--overwrite"), ("overwrite",)),
        Case("checkpoints", "--save-every without --save", (*TRAIN, "--save-every", "1"), ("save",)),
        Case("checkpoints", "--save-every -1", (*TRAIN, "--save", "x", "--save-every", "-1"), ("--save-every",)),
        Case("checkpoints", "--save under /proc", (*TRAIN, "--save", "/proc/zerosim-ck"), ("cannot write",)),
        Case("checkpoints", "--overwrite through a linked tag", (*TRAIN, "--seed", "3", "--save", "{cdir}",
                                                                  "--overwrite"), ("symbolic link",),
             files=("ck", ("cdir", ("dir:C", None)), "linkedtag")),
        Case("checkpoints", "--overwrite through a linked folder", (*TRAIN, "--seed", "3", "--save", "{linkedrun}",
                                                                     "--overwrite"), ("symbolic link",),
             files=("ck", "linkedrun")),
        Case("checkpoints", "inspect a folder whose latest names a linked tag", ("checkpoint", "inspect", "{cdir}"),
             ("symbolic link",), files=("ck", ("cdir", ("dir:C", None)), "linkedtag",
                                        ("latest", ("C/latest", lambda: "step000002\n")))),
        Case("checkpoints", "resume with another --seed", ("train", "--widths", "4,6,3", "--steps", "3", "--resume",
                                                           "{ck}", "--seed", "7"), ("--seed 7", "data.seed"),
             files=("ck",)),
        Case("checkpoints", "resume with another --batch", ("train", "--widths", "4,6,3", "--steps", "3", "--resume",
                                                            "{ck}", "--batch", "8"), ("--batch 8", "data.batch"),
             files=("ck",)),
        Case("checkpoints", "resume with another --task", ("train", "--widths", "4,6,3", "--steps", "3", "--resume",
                                                           "{ck}", "--task", "classification"), ("--task",),
             files=("ck",)),
        Case("checkpoints", "a manifest's betas edited", ("train", "--widths", "4,6,3", "--steps", "3", "--resume",
                                                          "{ck}"), ("manifest.json", "optimizer.hyperparameters.betas"),
             files=("ck", ("edit", "manifest optimizer.hyperparameters.betas [0.5, 0.6]"))),
        Case("checkpoints", "a manifest's precision edited", ("checkpoint", "inspect", "{ck}"),
             ("manifest.json", "precision.compute"), files=("ck", ("edit", 'manifest precision.compute "fp16"'))),
        Case("checkpoints", "latest a named pipe", ("checkpoint", "inspect", "{ck}"), ("latest", "not a file"),
             files=("ck", ("pipe", ("fifo:ck/latest", None)))),
        Case("checkpoints", "a rank file a named pipe", ("checkpoint", "inspect", "{ck}"), ("rank00001.safetensors",),
             files=("ck", ("pipe", ("fifo:ck/step000002/rank00001.safetensors", None)))),
        Case("checkpoints", "a manifest's checksums removed", ("checkpoint", "inspect", "{ck}"),
             ("manifest.json", "checksums"), files=("ck", ("edit", "manifest checksums null"))),
        *_python_checkpoint_cases(),
    ]
    # ---------------------------------------------------------------------------------------------- outputs
    log = ("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2", "--trace-log")
    c += [
        Case("outputs", "--trace-log into another run's rank file", (*log, "{ck}/step000002/rank00000.safetensors"),
             ("--trace-log", "inside the checkpoint"), files=("ck",)),
        Case("outputs", "--trace-log onto another run's latest", (*log, "{ck}/latest"),
             ("--trace-log", "inside the checkpoint"), files=("ck",)),
        Case("outputs", "--trace-log onto another run's manifest", (*log, "{ck}/step000002/manifest.json"),
             ("--trace-log", "inside the checkpoint"), files=("ck",)),
        Case("outputs", "--trace-log into the checkpoint it resumes", (
            "train", "--widths", "4,6,3", "--steps", "4", "--resume", "{ck}", "--save", "{ck}", "--trace-log",
            "{ck}/step000002/rank00001.safetensors"), ("--trace-log", "inside the checkpoint"), files=("ck",)),
        Case("outputs", "--trace-log inside the --save folder", (*log[:-1], "--save", "N", "--trace-log", "N/t.log"),
             ("--trace-log", "--save")),
        Case("outputs", "--trace-log a folder", (*log, "{adir}"), ("--trace-log", "a folder"), files=("adir",)),
        Case("outputs", "--trace-log under /proc", (*log, "/proc/zerosim-x.log"), ("--trace-log", "cannot write")),
        Case("outputs", "--trace-log a read-only file", (*log, "{readonly}"), ("--trace-log", "read-only"),
             files=("readonly",)),
        Case("outputs", "--trace-log a link to another file", (*log, "{linkout}"), ("--trace-log", "symbolic link"),
             files=("afile", "linkout")),
        Case("outputs", "--trace-log a dangling link", (*log, "{dangling}"), ("--trace-log", "symbolic link"),
             files=("dangling",)),
        Case("outputs", "--trace-log a 300-byte name", (*log, "a" * 300 + ".log"),
             ("--trace-log", "longer than the file system takes")),
        Case("outputs", "--save a 300-byte name", (*log[:-1], "--save", "s" * 300), ("--save", "longer than")),
        Case("outputs", "timeline --trace a folder", (*TL, "--trace", "{adir}"), ("--trace", "adir"),
             files=("adir",)),
        Case("outputs", "timeline --trace onto a checkpoint's latest", (*TL, "--trace", "{ck}/latest"),
             ("--trace", "inside the checkpoint"), files=("ck",)),
        Case("outputs", "plan --figure a link", (*PLAN, "--figure", "{linkpng}"), ("--figure", "symbolic link"),
             files=(("linkpng", ("link:fig.png", "elsewhere.png")),)),
        Case("outputs", "figures --out inside a checkpoint", ("figures", "--out", "{ck}/figs"),
             ("--out", "inside the checkpoint"), files=("ck",)),
        *_python_output_cases(),
    ]
    # ---------------------------------------------------------------------------------------------- training
    c += [
        Case("training", "--muon-sharding at stage 0", (*TRAIN, "--stage", "0", "--optimizer", "muon",
                                                         "--muon-sharding", "owner"), ("--muon-sharding",)),
        # a Muon sharding with the default optimizer (Adam) was "adam has no hyperparameter(s) ['sharding']"
        Case("training", "--muon-sharding without Muon", (*TRAIN, "--stage", "2", "--muon-sharding", "owner"),
             ("--muon-sharding", "--optimizer muon")),
        Case("training", "--tp 0", (*TRAIN, "--tp", "0"), ("--tp",)),
        Case("training", "--model gpt --layers 100000", ("train", "--model", "gpt", "--ranks", "2", "--steps", "1",
                                                          "--layers", "100000"), ("--layers",)),
        Case("training", "replay --loss-scale 1e-300", ("replay", "--loss-scale", "1e-300"), ("scale", "fp32")),
        Case("training", "train --loss-scale nan", (*TRAIN, "--loss-scale", "nan"), ("--loss-scale",)),
        Case("training", "train --loss-scale -1", (*TRAIN, "--loss-scale", "-1"), ("--loss-scale",)),
        Case("training", "parity --steps 0", ("parity", "--steps", "0"), ("--steps",)),
        Case("training", "parity --widths 4", ("parity", "--widths", "4"), ("--widths",)),
        Case("training", "--offload-policy under DeepSpeed's recipe", (*TRAIN, "--stage", "3", "--offload-policy",
                                                                        "cpu", "--reduction", "deepspeed-zero3"),
             ("--offload-policy", "deepspeed-zero3")),
        Case("training", "--offload-optimizer under FSDP2's recipe", (*TRAIN, "--stage", "3", "--offload-optimizer",
                                                                       "cpu", "--reduction", "fsdp2"),
             ("--offload-optimizer", "fsdp2")),
        *_python_training_cases(),
    ]
    return c
