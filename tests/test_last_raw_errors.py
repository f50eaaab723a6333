"""The last raw or silent answers (issue 20, item 5): each is now one clear sentence, before anything changes.

Each row is what a user passed and the words the answer must hold; the old answer is in the comment.
"""

import numpy as np
import pytest

from zerosim import MLP, Adam, Cluster, Muon, ZeroEngine
from zerosim import checkpoint as ckpt
from zerosim.cli.main import main
from zerosim.collectives import all_gather
from zerosim.models import GPT, make_regression
from zerosim.precision import DeepSpeedLossScaler, MixedPrecision, StaticLossScale, TorchGradScaler, cast
from zerosim.train import TrainConfig


@pytest.mark.bad_input("engine arguments")
def test_an_int_for_the_cluster_names_cluster():
    with pytest.raises(TypeError, match=r"cluster must be a zerosim Cluster \(e.g. Cluster\(4\)\), got 4"):
        ZeroEngine(MLP([4, 3]), 4, 2, Adam())  # was: AttributeError: 'int' object has no attribute 'backend'


@pytest.mark.bad_input("cluster and backends")
@pytest.mark.parametrize("ask, words", [
    (lambda t: t.bytes_sent(0, collective="allgather"),
     "no collective 'allgather'; the trace records reduce_scatter, all_gather"),
    (lambda t: t.bytes_sent(9), r"no rank 9: the cluster's ranks are 0..3"),  # was: 0 for both
    (lambda t: t.bytes_sent(-1), r"no rank -1"),
    (lambda t: t.bytes_received(4), r"no rank 4"),
    (lambda t: t.select(collective="all-gather"), "no collective 'all-gather'"),
])
def test_trace_questions_about_what_does_not_exist_are_refused(ask, words):
    cluster = Cluster(4)
    all_gather(cluster, [np.ones(2, np.float16)] * 4)
    assert cluster.trace.bytes_sent(0, collective="all_gather") == 6 * 2  # N-1 = 3 chunks of 2 fp16: a real answer
    with pytest.raises(ValueError, match=words):
        ask(cluster.trace)


@pytest.mark.bad_input("precision policies")
@pytest.mark.parametrize("make, words", [
    (lambda: DeepSpeedLossScaler(consecutive_hysteresis="no"),
     "consecutive_hysteresis must be True or False, got 'no'"),
    (lambda: DeepSpeedLossScaler(raise_error_at_min_scale="false"), "raise_error_at_min_scale must be True or False"),
    (lambda: MixedPrecision(loss_scale="deepspeed", loss_scale_options={"consecutive_hysteresis": "no"}),
     "consecutive_hysteresis must be True or False"),  # was: read as bool("no") == True
    (lambda: cast(np.ones(2), "fp8_e4m3", saturate="no"), "saturate must be True or False"),
    (lambda: Muon(nesterov="no"), "nesterov must be True or False"),
    (lambda: ZeroEngine(MLP([4, 3]), Cluster(2), 1, Adam(), checkpoint="no"), "checkpoint must be True, False or None"),
    (lambda: MLP([4, 3], bias="no"), "bias must be True or False, got 'no'"),
    (lambda: TrainConfig(checkpoint="no"), "checkpoint must be True or False, got 'no'"),
])
def test_yes_no_options_given_as_strings_are_refused(make, words):
    with pytest.raises((ValueError, TypeError), match=words):
        make()


@pytest.mark.bad_input("precision policies")
@pytest.mark.parametrize("make, words", [
    # fp16 has bf16's 16 bits but not its range: bf16-held gradients overflowed when accumulated in fp16
    (lambda: MixedPrecision(compute="bf16", grad_accum="fp16"), "grad_accum fp16 cannot hold every bf16 gradient"),
    (lambda: MixedPrecision(compute="fp16", grad_accum="bf16"), "grad_accum bf16 cannot hold every fp16 gradient"),
    (lambda: DeepSpeedLossScaler(init_scale=0.5), "init_scale 0.5 is below min_scale 1.0"),  # was accepted
    (lambda: StaticLossScale(1e300), "scale 1e\\+300 overflows fp32"),  # was accepted, while torch's refused 1e40
    (lambda: MixedPrecision(loss_scale=1e300), "scale 1e\\+300 overflows fp32"),
    (lambda: TorchGradScaler(init_scale=1e40), "init_scale 1e\\+40 overflows the fp32 scale tensor"),
])
def test_policies_that_cannot_work_are_refused(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_what_the_format_rules_still_allow():
    # the rule is range and precision, not width: wider formats and the format itself stay allowed
    assert MixedPrecision(compute="bf16", grad_accum="fp32").grad_accum == "fp32"
    assert MixedPrecision(compute="fp16", grad_accum="fp16").grad_accum == "fp16"
    assert StaticLossScale(2.0**127).scale == 2.0**127  # the largest power of two fp32 holds
    assert DeepSpeedLossScaler(init_scale=1.0).scale == 1.0  # = min_scale


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("flags, words", [
    (["--reduce-bucket-size", "0"], "--reduce-bucket-size 0: a bucket of 0 elements"),  # was: silently unset
    (["--max-live-parameters", "0"], "--max-live-parameters 0: no parameter could be live"),  # was: silently unlimited
    (["--allgather-bucket-size", "0", "--stage", "2"], "--allgather-bucket-size 0: a bucket of 0 elements"),
    (["--prefetch-bucket-size", "nan"],
     "--prefetch-bucket-size must be a whole number of elements, got nan"),  # was: NumPy's words about NaN
    (["--max-reuse-distance", "inf"], "--max-reuse-distance must be a whole number of elements, got inf"),
    (["--trace", "/proc/zerosim-step.json"], "/proc/zerosim-step.json: cannot write"),  # was: named a temporary file
    (["--trace", "/proc/version/step.json"], "/proc/version/step.json: /proc/version is a file, not a folder"),
    (["--figure", "/proc/version/step.png"], "/proc/version/step.png: /proc/version is a file, not a folder"),
])
def test_timeline_options_that_would_be_ignored_or_fail_late_are_refused(flags, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["timeline", "--model", "gpt2-small", "--ranks", "8", *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and ".zerosim-trace-" not in err, err
    assert not list(tmp_path.iterdir())  # nothing written


def test_prefetch_bucket_size_0_still_turns_prefetching_off(capsys):
    assert main(["timeline", "--model", "gpt2-small", "--ranks", "8", "--comm", "deepspeed",
                 "--prefetch-bucket-size", "0"]) == 0
    assert "prefetch_bucket_size" not in capsys.readouterr().out.split("schedule:")[1].splitlines()[0]


@pytest.mark.bad_input("MPI jobs")
@pytest.mark.parametrize("value, words", [
    # was: "could not convert string to float: 'abc'", naming no variable
    ("abc", "ZEROSIM_MPI_TIMEOUT='abc': the MPI watchdog's timeout must be a number of seconds >= 1"),
    ("1e-9", "ZEROSIM_MPI_TIMEOUT='1e-9': .* got 1e-09: a shorter wait names ranks that are only slow"),  # was accepted
    ("nan", "ZEROSIM_MPI_TIMEOUT='nan'"),
])
def test_the_watchdogs_timeout_names_the_variable(value, words, monkeypatch):
    from zerosim.backends.mpi import watchdog_timeout

    monkeypatch.setenv("ZEROSIM_MPI_TIMEOUT", value)
    with pytest.raises(ValueError, match=words):
        watchdog_timeout()
    monkeypatch.setenv("ZEROSIM_MPI_TIMEOUT", "inf")
    assert watchdog_timeout() == float("inf") and watchdog_timeout(120) == 120.0


@pytest.mark.bad_input("command line")
@pytest.mark.parametrize("value", ["abc", "", "nan", "-1"])
def test_the_progress_delay_names_the_variable(value, monkeypatch):
    # was: "could not convert string to float: 'abc'" from every command (read at import); nan and -1 accepted
    from zerosim.progress import delay_from_environment

    monkeypatch.setenv("ZEROSIM_PROGRESS_DELAY", value)
    with pytest.raises(ValueError, match=f"^ZEROSIM_PROGRESS_DELAY={value!r}: the seconds before a progress bar is "
                                         r"drawn must be a number >= 0 \(0: at once\)$"):
        delay_from_environment()
    for text, seconds in (("0", 0.0), ("2.5", 2.5), ("inf", float("inf"))):
        monkeypatch.setenv("ZEROSIM_PROGRESS_DELAY", text)
        assert delay_from_environment() == seconds
    monkeypatch.delenv("ZEROSIM_PROGRESS_DELAY")
    assert delay_from_environment() == 1.0


@pytest.mark.bad_input("command line", unchanged=True)
def test_more_simulated_ranks_than_the_simulator_can_run_are_refused_at_once(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # was: 99 s of work, then "Unable to allocate 195 KiB"
    assert main(["train", "--ranks", "100000", "--steps", "1", "--save", "ckpt"]) == 2
    err = capsys.readouterr().err
    assert "--ranks must be 1..4096, got 100000" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match="ranks must be at most 4096 on the numpy backend"):
        TrainConfig(ranks=100000)  # Python says the same
    assert not list(tmp_path.iterdir())


def test_a_gpt_built_with_a_checkpoint_strategy_checkpoints_without_being_told_twice():
    # was: GPT(checkpoint="block") did nothing unless the engine got checkpoint=True as well
    gpt = GPT(8, 8, 2, 2, 4, checkpoint="block")
    assert ZeroEngine(gpt, Cluster(2), 3, Adam()).checkpoint is True
    assert ZeroEngine(gpt, Cluster(2), 3, Adam(), checkpoint=False).checkpoint is False  # said explicitly: as said
    assert ZeroEngine(GPT(8, 8, 2, 2, 4), Cluster(2), 3, Adam()).checkpoint is False
    recomputed = [op.kind for op in ZeroEngine(gpt, Cluster(2), 3, Adam()).ops].count("recompute")
    assert recomputed > 0


@pytest.mark.bad_input("checkpoint files", unchanged=True)
def test_a_load_onto_the_meta_backend_is_refused_up_front(tmp_path):
    engine = ZeroEngine(MLP([4, 6, 3]), Cluster(2), 2, Adam())
    engine.step(make_regression(np.random.default_rng(0), 2, 3, [4, 6, 3]))
    ckpt.save(engine, str(tmp_path))
    meta = Cluster(2, backend="meta")
    # was: the load succeeded and the first step failed
    with pytest.raises(ValueError, match="a checkpoint holds values, which the meta backend does not keep"):
        ckpt.load(str(tmp_path), meta, MLP([4, 6, 3]))
    assert all(not r.ledger.live for r in meta.ranks)
    with pytest.raises(TypeError, match="cluster must be a zerosim Cluster"):
        ckpt.load(str(tmp_path), 2, MLP([4, 6, 3]))
