"""Issue 56, items 4 and 5: the last raw errors are clear ones naming the file, the key or the flag; a sweep over
--strategy all skips a strategy that does not apply, saying why; a DeepSpeed config's "auto" in optimizer.params is
filled as the Hugging Face Trainer fills it, and said.

Each row's comment is what main printed.
"""

import json

import pytest
from helpers import as_version_1, files_of, run_cli

from zerosim import MLP, Cluster
from zerosim import checkpoint as ckpt
from zerosim.frameworks.deepspeed import TrainerArgs, read_ds_config
from zerosim.models.hf import read_hf_config

LLAMA = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4}
GPT2 = {"model_type": "gpt2", "vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64}


@pytest.mark.bad_input("model configs")
@pytest.mark.parametrize("base, changes, words", [
    (LLAMA, {"intermediate_size": 10**15}, "intermediate_size 1,000,000,000,000,000 is more than 2,147,483,647"),
    (LLAMA, {"hidden_size": 2**40}, "hidden_size 1,099,511,627,776 is more than 2,147,483,647"),  # was: Maximum
    (LLAMA, {"vocab_size": 2**31}, "vocab_size 2,147,483,648 is more than"),  # allowed dimension exceeded
    (LLAMA, {"max_position_embeddings": 2**33}, "max_position_embeddings 8,589,934,592 is more than"),
    (GPT2, {"n_embd": 2**40, "n_head": 2**10}, "n_embd 1,099,511,627,776 is more than"),
    # each size fits a GEMM, together 2·(2^20·2^30·3 + ...) ≈ 6.8e15 parameters: more than 1e15
    (LLAMA, {"hidden_size": 2**20, "intermediate_size": 2**30, "num_attention_heads": 2**10},
     "6.76e+15 parameters (vocab_size 128, hidden_size 1,048,576, intermediate_size 1,073,741,824"),
    (LLAMA, {"model_type": ["llama"]}, "model_type must be a string such as 'llama', got ['llama']"),  # was:
    (LLAMA, {"model_type": {"name": "llama"}}, "model_type must be a string"),  # unhashable type: 'list'
    (LLAMA, {"model_type": 7}, "model_type must be a string"),
])
def test_a_config_zerosim_cannot_size_is_refused_naming_the_file_and_the_key(tmp_path, base, changes, words):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**base, **changes}))
    with pytest.raises(ValueError) as e:
        read_hf_config(str(path))
    assert str(e.value).startswith(f"{path}: ") and words in str(e.value), str(e.value)
    code, out, err = run_cli("memory", "--config", path, "--ranks", "8")
    assert code == 2 and err.startswith(f"zerosim memory: error: {path}: ") and err.count("\n") == 1


@pytest.mark.bad_input("model configs")
@pytest.mark.parametrize("flag", ["--config", "--ds-config"])
@pytest.mark.parametrize("body", [b"\x00\xff\xfe\x80abc", b"\x89PNG\r\n\x1a\n", "{\"a\": \"\xe9\"}".encode("latin-1")],
                         ids=["binary", "png", "latin-1"])
def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path, flag, body):
    # was: zerosim memory: error: 'utf-8' codec can't decode byte 0xff in position 1: invalid start byte
    path = tmp_path / "x.json"
    path.write_bytes(body)
    argv = ("memory", "--config", path, "--ranks", "8") if flag == "--config" else (
        "memory", "--model", "gpt2-small", "--ranks", "8", "--ds-config", path)
    code, _, err = run_cli(*argv)
    assert code == 2 and f"error: {path} is not JSON: not UTF-8 text" in err and "codec" not in err


@pytest.mark.bad_input("model configs")
def test_json_nested_past_the_parsers_depth_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)  # was: RecursionError's traceback
    code, _, err = run_cli("memory", "--config", path, "--ranks", "8")
    assert code == 2 and f"{path} is not JSON zerosim reads: nested too deeply" in err


@pytest.mark.bad_input("planner")
def test_strategy_all_skips_a_strategy_that_does_not_apply_and_says_why():
    # was: zerosim memory: error: mics_hierarchical gathers across nodes ... (and nothing else printed)
    argv = ("memory", "--strategy", "all", "--params", "7e9", "--ranks", "8", "--gpus-per-node", "4")
    code, out, err = run_cli(*argv)
    assert code == 0 and err == ""
    rows = [line.split()[0] for line in out.splitlines() if line[:1].isalpha() and line.split()[0] in (
        "full_shard", "hsdp", "hsdp_no_sync", "mics", "mics_hierarchical", "hpz", "no_reshard", "reshard_to_group")]
    assert "mics_hierarchical" not in rows and {"full_shard", "hsdp", "mics", "hpz"} <= set(rows)
    last = out.rstrip().split("\nskipped ")[-1]  # what was skipped comes last, its reason wrapped under it
    assert last.startswith("mics_hierarchical: mics_hierarchical gathers across")
    assert all(x.startswith("  ") for x in last.splitlines()[1:]), last
    code, out, _ = run_cli(*argv, "--json")
    r = json.loads(out)
    assert [s["strategy"] for s in r["skipped"]] == ["mics_hierarchical"]
    assert "mics_hierarchical" not in [row["strategy"] for row in r["strategies"]]
    code, out, _ = run_cli("timeline", "--sweep", "--strategy", "all", "--params", "7e9", "--gpus-per-node", "4",
                           "--sweep-ranks", "8,16", "--json")
    r = json.loads(out)
    assert code == 0 and [s["strategy"] for s in r["skipped"]] == ["mics_hierarchical"]
    # a strategy named by hand is not skipped: its refusal is the answer
    code, _, err = run_cli("memory", "--strategy", "hsdp,mics_hierarchical", "--params", "7e9", "--ranks", "8",
                           "--gpus-per-node", "4")
    assert code == 2 and "mics_hierarchical gathers across nodes" in err


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_an_old_manifest_whose_precision_was_edited_is_refused_naming_the_file_and_the_key(tmp_path):
    # a version-1 manifest has no checksums; was: "rank 0: given state 'params' must be a (52,) float16 array, got
    # ((52,), 'bfloat16')" with no file named
    assert run_cli("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2", "--save", tmp_path / "A")[0] == 0
    path = tmp_path / "A" / "step000002" / "manifest.json"
    m = as_version_1(json.loads(path.read_text()))
    m["precision"]["compute"] = "fp16"
    path.write_text(json.dumps(m))
    before = files_of(tmp_path)
    with pytest.raises(ckpt.CheckpointError, match=f"^{path}: precision.compute says fp16, but the rank files hold "
                                                   "params as bfloat16: the manifest's precision was edited$"):
        ckpt.load(str(tmp_path / "A"), Cluster(2), MLP([4, 6, 3]))
    assert files_of(tmp_path) == before


# transformers 5.23.0, training_args.py TrainingArguments: learning_rate 5e-5, weight_decay 0.0, adam_beta1 0.9,
# adam_beta2 0.999, adam_epsilon 1e-8 — typed here from the source, as the Trainer fills "auto" with them
# (integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process, its fill_match calls)
TRAINER_DEFAULTS = {"lr": 5e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
AUTO = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3},
        "optimizer": {"type": "AdamW", "params": {k: "auto" for k in TRAINER_DEFAULTS}}}


@pytest.mark.bad_input("DeepSpeed configs")
def test_auto_in_optimizer_params_is_filled_as_the_trainer_fills_it_and_said():
    # was: "optimizer.params.lr must be a number >= 0, got 'auto'" while zero_optimization's "auto" were filled
    run = read_ds_config(AUTO, world_size=8, hidden_size=64)
    notes = {k.key: (k.status, k.note) for k in run.keys}
    for key, value in TRAINER_DEFAULTS.items():
        status, note = notes[f"optimizer.params.{key}"]
        assert status == "no effect" and note.startswith(f"auto -> {value!r} (the Trainer's ")
        assert "TrainingArguments' default" in note
    given = read_ds_config(AUTO, 8, 64, TrainerArgs(learning_rate=3e-4, adam_beta1=0.8, adam_beta2=0.95))
    notes = {k.key: k.note for k in given.keys}
    assert notes["optimizer.params.lr"].startswith("auto -> 0.0003 (the Trainer's learning_rate)")
    assert notes["optimizer.params.betas"].startswith("auto -> [0.8, 0.95] (the Trainer's adam_beta1 and adam_beta2)")


@pytest.mark.bad_input("DeepSpeed configs")
def test_auto_the_trainer_does_not_fill_is_refused_naming_the_key(tmp_path):
    body = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"momentum": "auto"}}}
    with pytest.raises(ValueError, match=r'optimizer.params.momentum is "auto", which the HF Trainer does not fill'):
        read_ds_config(body, world_size=8)
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(AUTO))
    code, out, _ = run_cli("memory", "--model", "gpt2-small", "--ranks", "8", "--ds-config", path)
    assert code == 0 and "optimizer.params.lr: auto -> 5e-05 (the Trainer's learning_rate, TrainingArguments'" in out


# ------------------------------------------------------------------ found by probing the Python faces (issue 56, 7)
@pytest.mark.bad_input("cost formulas")
@pytest.mark.parametrize("make, error, words", [
    (lambda: __import__("zerosim.analysis.costs", fromlist=["x"]).comm_volume(7e9, 0, 3), ValueError,
     "ranks must be a whole number >= 1, got 0"),  # was: ZeroDivisionError
    (lambda: __import__("zerosim.analysis.costs", fromlist=["x"]).model_state_memory(7e9, float("nan"), 3),
     ValueError, "ranks must be a whole number >= 1, got nan"),  # was: NaN bytes
    (lambda: __import__("zerosim.analysis.costs", fromlist=["x"]).model_state_memory(7e9, 1.5, 3), ValueError,
     "ranks must be a whole number"),
    (lambda: __import__("zerosim.analysis.costs", fromlist=["x"]).comm_time(7e9, 8, 3, 1.5), TypeError,
     "link must be a Link or a link's name"),  # was: AttributeError: 'float' object has no attribute 'alpha'
    (lambda: __import__("zerosim.analysis.costs", fromlist=["x"]).comm_time(7e9, 8, 3, "nvlink9"), ValueError,
     "unknown link 'nvlink9'"),  # was: KeyError
    (lambda: __import__("zerosim.optim", fromlist=["x"]).get_optimizer([]), ValueError,
     r"unknown optimizer \[\]"),  # was: TypeError: unhashable type: 'list'
    (lambda: __import__("zerosim.precision", fromlist=["x"]).get_precision({}), ValueError,
     "unknown precision preset"),
])
def test_python_faces_name_what_is_wrong(make, error, words):
    with pytest.raises(error, match=words):
        make()


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_checkpoint_faces_refuse_what_is_not_a_model_or_a_tag(tmp_path):
    from zerosim import Adam, ZeroEngine

    engine = ZeroEngine(MLP([4, 6, 3]), Cluster(2), 1, Adam())
    ckpt.save(engine, str(tmp_path / "ck"))
    before = files_of(tmp_path)
    with pytest.raises(TypeError, match="model must be a zerosim model"):  # was: AttributeError ... 'num_params'
        ckpt.load(str(tmp_path / "ck"), Cluster(2), 1.5)
    with pytest.raises(TypeError, match="tag must be a folder name"):  # was: a folder named "1.5"
        ckpt.save(engine, str(tmp_path / "ck"), tag=1.5)
    assert files_of(tmp_path) == before


@pytest.mark.bad_input("models")
def test_a_data_pool_this_machine_cannot_hold_is_refused_before_it_is_drawn():
    import numpy as np

    from zerosim.models import make_regression, make_sequence_task

    with pytest.raises(MemoryError, match="the task's data .1,000,000,000,000,000,000,000,000,000,000 micro-batches"):
        make_regression(np.random.default_rng(0), 10**30, 3, [4, 3])  # was: drew for ever
    with pytest.raises(ValueError, match="n_micro must be an integer >= 0, got 1.5"):
        make_regression(np.random.default_rng(0), 1.5, 3, [4, 3])
    with pytest.raises(MemoryError, match="the task's strings"):
        make_sequence_task(np.random.default_rng(0), 10**15, 16, 3, 6)


@pytest.mark.bad_input("command line")
def test_a_decoder_of_more_blocks_than_zerosim_steps_is_refused_before_it_is_built():
    # was: `train --model gpt --layers 100000` built blocks for minutes with nothing printed
    code, _, err = run_cli("train", "--model", "gpt", "--ranks", "2", "--steps", "2", "--layers", "100000")
    assert code == 2 and "layers 100,000 (--layers): the model would have 100,002 units" in err


@pytest.mark.bad_input("model configs")
@pytest.mark.parametrize("flag", ["--config", "--ds-config"])
def test_a_pipe_or_a_device_named_as_a_config_is_refused_not_waited_on(tmp_path, flag):
    # was: open() of a FIFO waited for a writer for ever (the command hung); /dev/zero read without end
    import os

    os.mkfifo(tmp_path / "f.json")
    for path in (tmp_path / "f.json", "/dev/zero"):
        argv = ("memory", "--config", path, "--ranks", "8") if flag == "--config" else (
            "memory", "--model", "gpt2-small", "--ranks", "8", "--ds-config", path)
        code, _, err = run_cli(*argv)
        assert code == 2 and f"{path}: not a regular file (a pipe, a device or a socket)" in err


@pytest.mark.bad_input("checkpoint files", unchanged=True)
@pytest.mark.parametrize("name, words", [
    ("latest", "latest: not a file, where the name of the newest checkpoint's tag belongs"),
    ("step000002/rank00001.safetensors", "rank00001.safetensors: not a regular file, where a rank's file belongs"),
])
def test_a_pipe_in_a_checkpoint_is_refused_not_waited_on(tmp_path, name, words):
    import os

    assert run_cli("train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2", "--save", tmp_path / "CK")[0] == 0
    os.remove(tmp_path / "CK" / name)
    os.mkfifo(tmp_path / "CK" / name)  # was: inspect and resume waited on it for ever
    before = files_of(tmp_path)
    code, _, err = run_cli("checkpoint", "inspect", tmp_path / "CK")
    assert code == 2 and words in err
    assert files_of(tmp_path) == before
