"""The planner on several worker processes (analysis/planner/_jobs.py): the same plan, byte for byte, as one process.

`plan(..., jobs=k)` measures each stage beside each combination of degrees in one of k forked workers and takes their
rows back in order. Whatever ran where, the Plan (every row, the fitting ones' order, the pruned stages, the
pipeline's refused micro-batches, what was left out), the progress it reports and the CLI's text and JSON are the ones
a single process makes; an exception a piece raises is the one the loop would raise.
"""

import io
import json
import os
import threading
import time
from contextlib import redirect_stdout

import pytest
from helpers import HANG_TIMEOUT

from zerosim.analysis.costs import get_preset
from zerosim.analysis.planner import check_jobs, plan
from zerosim.analysis.planner._jobs import in_order
from zerosim.analysis.planner._plan import _Trial
from zerosim.cli.main import main
from zerosim.models.hf import read_hf_config
from zerosim.parallel import ParallelSpec
from zerosim.parallel.offload import Offload

SMALL = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 768, "num_hidden_layers": 4, "vocab_size": 8000, "max_position_embeddings": 4096}


def _cpu_offload(stage: int) -> tuple:
    """The optimizer on the host where DeepSpeed runs it (stages 1-3), as the CLI's --offload says it (`plan`)."""
    if stage == 0:
        raise ValueError("DeepSpeed offloads through its ZeRO optimizers, stages 1-3")
    return "optimizer-cpu", (Offload("cpu"),)


def test_a_plan_on_two_workers_is_the_plan_of_one(tmp_path):
    # A small Llama on 8 RTX 3090s: stages 0 and 3, TP 1 and 2 beside pipelines of 1 and 2 (1F1B refuses K < 2:
    # micro-batches left out with the reason, once per combination), an offload beside TP 1, the whole search in
    # twelve pieces; every field of the Plan and every configuration reported, in order
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    config = read_hf_config(str(path))
    specs = tuple((ParallelSpec(tp=t, pp=p), None) for t in (1, 2) for p in (1, 2))
    offloads = (("cpu", _cpu_offload),)
    made, told = {}, {}
    for jobs in (1, 2):
        told[jobs] = []
        made[jobs] = plan(config, 8, 8, "rtx3090", 2048, 32, stages=(0, 3), strategies=("none", "block"),
                          specs=specs, offloads=offloads, progress=told[jobs].append, jobs=jobs)
    one, two = made[1], made[2]
    assert two == one and told[2] == told[1]
    assert repr(two) == repr(one)  # the fitting rows in the same order, the floats to the last bit
    assert one.settings["stages"] == (0, 3) and one.settings["strategies"] == ("none", "block")  # as asked
    assert {(r.tp, r.pp) for r in one.rows} == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert any(r.offload == "optimizer-cpu" for r in one.rows)
    assert any(degrees.get("pp") == 2 and "K = " in why for degrees, _, why in one.left_out)
    assert len(told[1]) == len(one.rows) + len(one.pruned) + len(one.pruned_offload) > 20


def test_stages_pruned_on_their_model_states_are_told_in_their_turn_on_any_number_of_workers():
    # Llama 2 7B on 8 RTX 3090s (24 GB): ZeRO-0 and ZeRO-1's model states alone exceed the GPU (read before any step,
    # one configuration told each); ZeRO-2 and ZeRO-3 run, a strategy a piece. By hand: 16Ψ = 108 GB at ZeRO-0, and
    # 4Ψ + 12Ψ/8 = 37 GB at ZeRO-1, over 24 GB; 2Ψ + 14Ψ/8 = 25.3 GB at ZeRO-2, under the 3090's 25.8 GB (24,576 MiB)
    made, told = {}, {}
    for jobs in (1, 2):
        told[jobs] = []
        made[jobs] = plan(get_preset("llama-2-7b").config, 8, 8, "rtx3090", 2048, 32, strategies=("block", "flash"),
                          micro_batches=(1, 2), progress=told[jobs].append, jobs=jobs)
    assert made[2] == made[1] and told[2] == told[1]
    P = 6_738_415_616  # Llama 2 7B's parameters (the Hub's safetensors metadata)
    assert made[1].pruned == ((0, 16 * P), (1, 4 * P + 12 * P // 8))
    assert {r.resting for r in made[1].rows if r.stage == 2} == {2 * P + 14 * P // 8}
    assert told[1][:3] == ["ZeRO-0 block B=1", "ZeRO-1 block B=1", "ZeRO-2 block B=1"]


def _pp_plan(jobs: int, told: list):
    """Llama 2 7B on 8 RTX 3090s as two pipeline stages: ZeRO-0's states on a stage, 16Ψ / 2 = 54 GB, exceed the
    GPU, which only the first strategy's step finds (a pipeline's stage has no read before a step); ZeRO-3 fits. On
    seed 004's schedule: DeepSpeed's (plan's default) runs no ZeRO-3 beside a pipeline."""
    return plan(get_preset("llama-2-7b").config, 8, 8, "rtx3090", 2048, 32, stages=(0, 3),
                strategies=("block", "flash"), micro_batches=(1, 2), specs=((ParallelSpec(pp=2), None),),
                progress=told.append, jobs=jobs, comm="seed")


def test_a_pipeline_stage_pruned_by_its_first_strategy_drops_the_others_run_on_workers(monkeypatch):
    # on two workers each strategy of a pipeline's stage is a piece; where the first one's step prunes the stage, the
    # second one's rows, its progress and even its exception (flash at ZeRO-0, raised here on purpose) are dropped,
    # as one process, which stops at the first, never made them
    real = _Trial.rows

    def rows(self, stage, strategies, *args, **kwargs):
        if strategies == ("flash",) and stage == 0:
            raise ValueError("flash at ZeRO-0 was run")
        return real(self, stage, strategies, *args, **kwargs)

    monkeypatch.setattr(_Trial, "rows", rows)
    made, told = {}, {1: [], 2: []}
    for jobs in (1, 2):
        made[jobs] = _pp_plan(jobs, told[jobs])
    assert made[2] == made[1] and repr(made[2]) == repr(made[1]) and told[2] == told[1]
    P = 6_738_415_616  # Llama 2 7B's parameters; a stage holds half the layers, one of them the embedding
    assert [(stage, degrees) for stage, _, degrees in made[1].pruned] == [(0, {"pp": 2})]
    assert 16 * P / 2 < made[1].pruned[0][1] < 16 * P * 0.6
    assert told[1][0] == "ZeRO-0 block B=1 pp 2" and not any(t.startswith("ZeRO-0 flash") for t in told[1])
    assert {r.strategy for r in made[1].rows if r.stage == 3} == {"block", "flash"}


def test_an_exception_of_a_pipeline_stage_that_runs_is_raised_on_workers_as_in_one_process(monkeypatch):
    real = _Trial.rows

    def rows(self, stage, strategies, *args, **kwargs):
        if "flash" in strategies and stage == 3:
            raise ValueError("flash at ZeRO-3 refused")
        return real(self, stage, strategies, *args, **kwargs)

    monkeypatch.setattr(_Trial, "rows", rows)
    for jobs in (1, 2):
        with pytest.raises(ValueError, match="flash at ZeRO-3 refused"):
            _pp_plan(jobs, [])


def printed_on_one_and_two(argv: list) -> tuple:
    """(what `zerosim argv --jobs 1` prints, what `--jobs 2` prints), as text and as --json."""
    out = []
    for extra in ([], ["--json"]):
        for jobs in ("1", "2"):
            buf = io.StringIO()
            with redirect_stdout(buf):
                assert main([*argv, *extra, "--jobs", jobs]) == 0
            out.append(buf.getvalue())
    return out[0::2], out[1::2]


def test_the_cli_prints_the_same_bytes_on_two_workers():
    one, two = printed_on_one_and_two(["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb",
                                       "--seq-len", "1024", "--global-batch", "16", "--stages", "1,3",
                                       "--strategies", "block", "--pp", "1,2"])
    assert two == one and "PP" in one[0]


def test_validate_prints_the_same_bytes_on_two_workers():
    # three published points (eager and compiled, one beside TP 8 + SP), predicted one a worker
    one, two = printed_on_one_and_two(["validate", "--only", "tt-h100-8-eager,foundry-h100-7b-8,tt-h100-256-70b-2d"])
    assert two == one and "tt-h100-256-70b-2d" in one[0]


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("command", [["validate", "--only", "tt-h100-8-eager"], ["figures", "--only", "spacing"],
                                     ["plan", "--model", "gpt2-small", "--gpus", "8", "--gpu", "h100-80gb",
                                      "--seq-len", "1024", "--global-batch", "8"]])
@pytest.mark.parametrize("jobs", ["0", "two"])
def test_a_bad_jobs_flag_is_named_before_anything_runs(capsys, command, jobs):
    assert main([*command, "--jobs", jobs]) == 2
    err = capsys.readouterr()
    assert "--jobs is the worker processes to run on" in err.err and err.out == ""


def _piece(i):
    if i == 3:
        raise ValueError(f"piece {i} refused")
    return i * i


def test_pieces_come_back_in_order_and_the_first_failure_is_raised_in_its_turn():
    assert list(in_order(lambda i: i * i, 7, 3)) == [i * i for i in range(7)]
    got = []
    with pytest.raises(ValueError, match="piece 3 refused"):
        for x in in_order(_piece, 7, 2):
            got.append(x)
    assert got == [0, 1, 4]  # the pieces before it, as the loop hands them on


def _started(i):
    return i, os.getpid(), time.monotonic()  # which worker ran piece i, and when it began


def test_the_pieces_named_first_are_handed_out_first_and_still_yielded_in_order():
    # on two workers the pieces handed out first are 4 and 3, one to each worker: the first each worker ran
    got = list(in_order(_started, 6, 2, first=[4, 3]))
    assert [i for i, _, _ in got] == list(range(6))
    by_worker = {}
    for i, pid, began in got:
        by_worker.setdefault(pid, []).append((began, i))
    assert len(by_worker) == 2 and {min(ran)[1] for ran in by_worker.values()} == {3, 4}
    assert [i for i, _, _ in in_order(_started, 6, 1, first=[4, 3])] == list(range(6))  # one job: in order, here
    with pytest.raises(ValueError, match="first names pieces 0 .. 5"):
        list(in_order(_started, 6, 2, first=[6]))


def _dies(i):
    if i == 2:
        os._exit(3)  # as a worker the kernel kills (out of memory) ends: without a word
    return i


def _unsendable(i):
    return (lambda: i) if i == 1 else i  # a function: it does not pickle


def test_a_worker_that_dies_or_cannot_answer_is_an_error_naming_its_piece_not_a_wait():
    raised = []

    def run():  # on a thread, so that a wait for ever (multiprocessing.Pool's, for a dead worker) fails, not hangs
        try:
            list(in_order(_dies, 5, 2))
        except ChildProcessError as e:
            raised.append(str(e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_TIMEOUT)
    assert not thread.is_alive() and len(raised) == 1 and "exit status 3) while it ran piece 3 of 5" in raised[0]
    with pytest.raises(RuntimeError, match="piece 2's result could not be sent back from its worker"):
        list(in_order(_unsendable, 4, 2))


@pytest.mark.bad_input("planner")
@pytest.mark.parametrize("jobs", [0, -2, 1.5, True, "many"])
def test_jobs_must_be_a_count_of_workers_or_auto(jobs):
    with pytest.raises(ValueError, match="jobs is the worker processes to run on"):
        plan(get_preset("gpt2-small").config, 8, 8, "h100-80gb", 1024, 8, stages=(3,), strategies=("block",),
             jobs=jobs)
    assert check_jobs("auto") >= 1 and check_jobs(3) == 3


@pytest.mark.bad_input("planner")
def test_where_no_worker_may_be_forked_one_job_runs_and_more_are_refused(monkeypatch):
    # Windows has no fork, and macOS's system libraries are not safe in a forked child: auto is one job there, and
    # more than one is refused, by the flag's name, before anything runs
    from zerosim.analysis.planner import _jobs

    monkeypatch.setattr(_jobs, "_forks", lambda: False)
    assert check_jobs("auto", "--jobs") == 1 and check_jobs(1, "--jobs") == 1
    with pytest.raises(ValueError, match="--jobs 2: more than one job forks worker processes, which this platform"):
        check_jobs(2, "--jobs")


def test_auto_is_one_job_beside_the_callers_own_threads(monkeypatch):
    # A notebook's kernel runs threads of its own (its heartbeat, its output's): a worker forked beside them may
    # deadlock (a lock one held stays held in the child), so `auto` takes one job there; asked for two, it forks two.
    # Four cores, whatever this machine has (one core would make auto one job either way)
    from zerosim.analysis.planner import _jobs

    if not _jobs._forks():
        pytest.skip("no worker is forked on this platform: auto is one job anyway")
    monkeypatch.setattr(_jobs, "cores", lambda: 4)
    alone = threading.active_count() == 1  # (a pool another test left running counts too)
    assert check_jobs("auto") == (4 if alone else 1)
    release = threading.Event()
    beside = threading.Thread(target=release.wait, daemon=True)
    beside.start()
    try:
        assert check_jobs("auto") == 1 and check_jobs(2) == 2
    finally:
        release.set()
        beside.join(HANG_TIMEOUT)
    assert check_jobs("auto") == (4 if alone else 1)
