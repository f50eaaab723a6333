"""Any mix of `memory`'s, `timeline`'s and `plan`'s parallel, precision and quantized-collective flags is run or
refused in one line: a drawn walk over them, each command line answered by exit status 0, or 2 with one
`zerosim CMD: error: ...` line, never a traceback (every value is one of its flag's choices: argparse accepts each
line, the commands judge it).

A random walk over these flags (2026-11-28) found four combinations that reached the user as a traceback: ZeRO++'s and
torchao's quantized collectives beside --tp or --cp, a DeepSpeed config's gradient_clipping beside them, train's
--clip-grad beside them (tests/hostile_cases.py holds each by name), and `plan --tp 1,2` where one degree's
data-parallel ranks do not split the global batch (tests/test_tp_plan.py). The walk stays here so that a new flag or
degree meets every other one (60 lines, a few seconds: most are refused at once, and the models are small, GPT-2
small's shapes at 64 tokens, so a line that is accepted runs well under a second); the flags that need another (--sp
needs --tp, --cp-style needs --cp) get it, so that most lines reach the engines rather than argparse.
"""

from helpers import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FLAGS = {  # flag -> its values (None: a switch)
    "--precision": ("fp16-mixed", "bf16-mixed", "fp32"),
    "--optimizer": ("adam", "sgd", "muon", "muon_adamw"),
    "--checkpoint": ("none", "block", "selective", "flash", "block-flash", "op-sac"),
    "--comm": ("seed", "deepspeed", "fsdp"),
    "--tp": ("1", "2"),
    "--sp": None,
    "--tp-layout": ("megatron", "torchtitan"),
    "--cp": ("1", "2"),
    "--cp-style": ("ring", "allgather"),
    "--cp-split": ("zigzag", "contiguous"),
    "--pp": ("1", "2"),
    "--pp-schedule": ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"),
    "--accumulation-steps": ("2", "4"),
    "--zero-quantized-weights": None,
    "--fp8-all-gather": ("torchao", "delayed", "mxfp8"),
    "--zero-quantized-gradients": None,
    "--offload-optimizer": ("cpu",),
    "--strategy": ("hsdp", "mics", "full_shard"),
    "--no-overlap": None,
    "--overlap-comm": ("on", "off"),
}
NEEDS = {"--sp": "--tp", "--tp-layout": "--tp", "--cp-style": "--cp", "--cp-split": "--cp",
         "--pp-schedule": "--pp"}  # a flag that says how a degree runs, and that degree (2)
MODEL = ("--model", "gpt2-small", "--seq-len", "64")
COMMANDS = {
    "memory": ("memory", *MODEL, "--ranks", "8", "--batch", "1"),  # nodes where a flag places ranks on them
    "timeline": ("timeline", *MODEL, "--ranks", "8", "--batch", "1", "--gpus-per-node", "4"),
    "plan": ("plan", *MODEL, "--gpus", "8", "--gpus-per-node", "4", "--gpu", "h100-80gb", "--global-batch", "16",
             "--stages", "3", "--strategies", "block"),
}
PLAN_TAKES = {"--precision", "--optimizer", "--comm", "--tp", "--sp", "--tp-layout", "--cp", "--cp-style",
              "--cp-split", "--pp", "--pp-schedule", "--overlap-comm"}  # the flags of FLAGS plan has


def line(command: str, chosen: dict) -> list:
    argv = list(COMMANDS[command])
    flags = dict(chosen)
    for flag, degree in NEEDS.items():
        if flag in flags:
            flags.setdefault(degree, "2")
    if command == "plan":
        flags = {f: v for f, v in flags.items() if f in PLAN_TAKES}
    if command == "memory" and ("--strategy" in flags or "--zero-quantized-gradients" in flags):
        flags["--gpus-per-node"] = "4"  # (memory refuses nodes that change nothing it measures)
    for flag, value in flags.items():
        argv += [flag] if value is None else [flag, value]
    return argv


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(sorted(COMMANDS)),
       chosen=st.dictionaries(st.sampled_from(sorted(FLAGS)), st.none(), min_size=1, max_size=5).flatmap(
           lambda keys: st.fixed_dictionaries({k: st.none() if FLAGS[k] is None else st.sampled_from(FLAGS[k])
                                               for k in keys})))
def test_every_mix_of_flags_runs_or_is_refused_in_one_line(command, chosen, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("walk"))  # nothing here writes a file; if one did, not in the project
    argv = line(command, chosen)
    code, _, said = run_cli(*argv)
    assert "Traceback" not in said, (argv, said)
    assert code in (0, 2), (argv, code, said)
    if code == 2:
        lines = [x for x in said.strip().splitlines() if x.strip()]
        assert lines and lines[-1].startswith(f"zerosim {command}: error: "), (argv, said)
        assert not any(x.startswith("zerosim ") for x in lines[:-1]), (argv, said)  # one error line
