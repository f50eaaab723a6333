"""The exercises grade fairly: every reference solution passes, every planted bug is caught with a
counterexample a learner can read, a correct solution written differently passes too, and the package's
own pieces are back in place after any grading."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zerosim.cli.main import main
from zerosim.parallel.data import Hooks
from zerosim.parallel.data import _gather as gather
from zerosim.parallel.data import _reduce as reduce
from zerosim.parallel.data.recipes import _averaging as averaging
from zerosim.teaching import exercises

# exercise -> planted bug -> (the case it must fail on, words its counterexample must say)
CAUGHT = {
    "ring_chunk": {
        "off by one": (1, "rank 0 ends holding the sum of chunk 1"),  # (r - k) mod N: everything lands one rank early
        "the wrong way round": (2, "at step 1 rank 0 would send chunk 2"),  # same as NCCL's at N = 2; N = 3 shows it
    },
    "shard_offset": {
        # lengths 0 and 1 on 1 rank pass (cases 1-6 are L = 0 on 1..5 ranks, then L = 1 on 1 rank); L = 1 on 2 fails
        "floor instead of ceil": (7, "rank 0's shard is [0, 0), but the ring reduce-scatter gives rank 0 the elements "
                                     "[0, 1)"),
        "padding counted as data": (7, "rank 1's shard is [1, 2)"),
    },
    "stage2_free": {
        "never frees": (1, "rank 0 still holds 'layer 2 grads' (20 B)"),  # fc1 of [3, 4, 2]: 4*2 + 2 fp16 values
        "frees before sending": (1, "LedgerError: rank 0: buffer 'layer 2 grads' (grads) was freed"),
        # the arrays taken before the free pass the ledger; the harness sees their memory is a freed buffer's
        "sends after freeing": (1, "reduce_scatter's input[0] reads rank 0's 'layer 2 grads', which you had "
                                   "already freed (a use after free"),
    },
    "refresh_params": {
        # 26 params: rank 1's shard starts at 13
        "everyone sends shard 0": (1, "after step 1, rank 0's 16-bit params[13]"),
        "never writes back": (1, "(element 13 is in rank 1's shard)"),
    },
    "average_dtype": {
        # halving is exact in fp16; thirds are not
        "divides in 16 bits": (2, "(float16, N = 3): your answer[0] is -0.09515380859375; the oracle's is "
                                  "-0.0951334610581398. You divided by 3 in float16, then cast"),
        "sums, never divides": (1, "(float16, N = 2): your answer[0] is 0.0615234375; the oracle's is 0.03076171875. "
                                   "You never divided by N = 2"),
    },
    "unscale_once": {
        # 1024 times too small
        "unscales twice": (1, "your answer[0] is 0.0002818107604980469; the oracle's is 0.28857421875"),
        # below fp16's 6.1e-5: subnormal spacing 6e-8
        "unscales in fp16": (1, "your answer[2] is 3.5762786865234375e-07"),
        "forgets the micro-steps": (2, "K = 2"),  # with K = 1 the mistake cannot show
    },
}

# The exercises assignment 2 grades ship no reference: the instructor's (one file defines all four functions)
A2_REFERENCE = Path(__file__).resolve().parent.parent / "course" / "instructor" / "a2" / "solution.py"


def reference(name: str) -> str:
    """The exercise's reference solution: the shipped one, or the instructor's from course/ when it is withheld."""
    return exercises.get(name).solution or A2_REFERENCE.read_text()


def planted(name: str, bug: str) -> str:
    """A planted bug's source: the shipped one, or the instructor kit's when it is withheld with the reference."""
    import re

    slug = re.sub(r"[^a-z0-9]+", "_", bug.lower()).strip("_")
    return exercises.get(name).planted[bug] or (A2_REFERENCE.parent.parent / "exercises" / name / f"{slug}.py"
                                                ).read_text()


RIGHT_BUT_DIFFERENT = {  # correct solutions not written like the reference: the grader checks behaviour, not text
    "ring_chunk": "def chunk_sent(rank, step, world_size):\n    return (rank + world_size - 1 - step) % world_size\n",
    "shard_offset": "import math\n\ndef shard_bounds(length, world_size, rank):\n    s = math.ceil(length / "
                    "world_size)\n"
                    "    start = min(length, rank * s)\n    return start, min(length, start + s)\n",
    "average_dtype": "import numpy as np\n\ndef average(summed, world_size):\n"
                     # 53 >= 2*24 + 2: one rounding's worth
                     "    return (summed.astype(np.float64) / world_size).astype(np.float32)\n",
    "unscale_once": "import numpy as np\n\ndef finish(summed, world_size, micro_steps, loss_scale):\n"
                    "    return summed.astype(np.float32) / np.float32(loss_scale) / np.float32(world_size * "
                    "micro_steps)\n",
}


def test_there_are_at_least_six_exercises_each_with_a_planted_bug():
    assert len(exercises.EXERCISES) >= 6
    assert set(CAUGHT) == set(exercises.EXERCISES)
    for name, ex in exercises.EXERCISES.items():
        assert ex.planted and set(ex.planted) == set(CAUGHT[name]), name


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_reference_solution_passes_every_case(name):
    result = exercises.check(name, reference(name))
    assert result.passed and result.counterexample is None, str(result)
    assert result.cases == len(list(exercises.get(name).cases()))


@pytest.mark.parametrize("name, bug", [(n, b) for n, bugs in CAUGHT.items() for b in bugs])
def test_every_planted_bug_is_caught_with_a_readable_counterexample(name, bug):
    ex = exercises.get(name)
    result = exercises.check(name, planted(name, bug))
    case, words = CAUGHT[name][bug]
    assert not result.passed
    assert result.cases == case, str(result)
    assert words in result.counterexample, str(result)
    described = list(ex.cases())[case - 1]["what"]
    assert result.counterexample.startswith(described)  # it says which case: sizes, ranks, stage, format


@pytest.mark.parametrize("name", list(exercises.EXERCISES))
def test_the_stub_says_it_is_not_written_yet(name):
    result = exercises.check(name, exercises.get(name).stub)
    assert not result.passed and result.cases == 1 and "is not written yet" in result.counterexample


def test_ddps_multiply_by_the_reciprocal_is_rejected_with_the_reason():
    # DDP multiplies by fl32(1/N) (parallel/data/recipes/_averaging.py, recipe ddp); at N = 3 that rounds twice. The
    # numbers, from
    # float64: the first reduced element of case 2 is fp16 -0.285400390625; its fp32 quotient by 3 is one rounding
    # of the exact quotient, DDP's answer the rounding of the exact product with fl32(1/3) = 0.3333333432674408.
    x, third = -0.285400390625, float(np.float32(1 / 3))
    want, ddp = float(np.float32(x / 3)), float(np.float32(x * third))  # x * third is exact in float64 (11 + 24 bits)
    assert want != ddp
    source = "import numpy as np\n\ndef average(summed, world_size):\n" \
             "    return summed.astype(np.float32) * np.float32(1 / world_size)\n"
    result = exercises.check("average_dtype", source)
    assert not result.passed and result.cases == 2
    assert (f"element 0 is {x!r} (float16, N = 3): your answer[0] is {ddp!r}; the oracle's is {want!r}. You multiplied "
            f"by fp32(1/3) = {third!r}, as DDP does before its all-reduce" in result.counterexample), str(result)
    assert "divides by 3 in fp32" in result.counterexample


@pytest.mark.parametrize("name", sorted(RIGHT_BUT_DIFFERENT))
def test_a_correct_solution_written_differently_passes(name):
    assert exercises.check(name, RIGHT_BUT_DIFFERENT[name]).passed


def test_grading_patches_nothing_in_the_package():
    # the learner's function reaches one engine through its Hooks: the package's own pieces never change
    own = (reduce.reduce_unit, gather.refresh, averaging.finish)
    for name in ("stage2_free", "refresh_params", "average_dtype", "unscale_once"):
        for bug in exercises.get(name).planted:
            exercises.check(name, planted(name, bug))  # some of these raise deep inside an engine step
    assert (reduce.reduce_unit, gather.refresh, averaging.finish) == own
    assert (Hooks().reduce_unit, Hooks().refresh, Hooks().finish) == own


@pytest.mark.slow
def test_a_learner_checks_their_own_file(tmp_path, capsys):
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(reference("refresh_params"))
    bad.write_text(planted("refresh_params", "never writes back"))
    assert main(["exercise", "check", "refresh_params", "--file", str(good)]) == 0
    assert "refresh_params: passed all 3 cases" in capsys.readouterr().out
    assert main(["exercise", "check", "refresh_params", "--file", str(bad)]) == 1
    assert "counterexample" in capsys.readouterr().out


@pytest.mark.slow
def test_show_gives_a_file_to_start_from_and_list_names_them_all(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "zerosim.cli.main", "exercise", "show", "ring_chunk"], capture_output=True, text=True
    )
    start = tmp_path / "my_solution.py"
    start.write_text(out.stdout)
    checked = subprocess.run(
        [sys.executable, "-m", "zerosim.cli.main", "exercise", "check", "ring_chunk", "--file", str(start)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 1 and "chunk_sent is not written yet" in checked.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "zerosim.cli.main", "exercise", "list"], capture_output=True, text=True
    ).stdout
    assert all(name in listed for name in exercises.EXERCISES)


@pytest.mark.bad_input("exercises")
@pytest.mark.parametrize("argv, message", [
    (["exercise", "check", "ring_chunk", "--planted", "nope"], "ring_chunk has no planted bug 'nope'"),
    (["exercise", "check", "ring_chunk", "--file", "notes.txt"], "--file must name a .py file"),
])
def test_bad_exercise_arguments_are_clear_errors(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.bad_input("exercises")
def test_a_file_without_the_function_is_a_clear_error(tmp_path):
    f = tmp_path / "empty.py"
    f.write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"defines no function chunk_sent\(\.\.\.\)"):
        exercises.check("ring_chunk", str(f))
    with pytest.raises(ValueError, match="no exercise 'nope'; there are: ring_chunk"):
        exercises.get("nope")


# -- a learner's file never takes the grader down (issue 20, item 4) ------------------------------------
WAYWARD = {  # file -> (the one line the grade must hold, the case it fails on; 0: before any case)
    "loops.py": ("def chunk_sent(rank, step, world_size):\n    while True:\n        pass\n",
                 "N = 2 ranks, one fp16 element per chunk: rank 0 holds 2048, the others 1: this case did not finish "
                 "within 1 s", 1),
    "exits_on_load.py": ("import sys\nsys.exit(3)\n", "exits_on_load.py called sys.exit(3) while it was loaded", 0),
    "exits_in_a_case.py": ("import sys\n\ndef chunk_sent(rank, step, world_size):\n    sys.exit(3)\n",
                           "your chunk_sent called sys.exit(3); return a value instead", 1),
    "syntax.py": ("def chunk_sent(rank, step, world_size)\n    return 0\n",
                  "syntax.py line 1: SyntaxError: expected ':': def chunk_sent(rank, step, world_size)", 0),
    "imports.py": ("import no_such_module_here\n", "imports.py (line 1: import no_such_module_here): loading it raised "
                   "ModuleNotFoundError: No module named 'no_such_module_here'", 0),
    "dies.py": ("import os\n\ndef chunk_sent(rank, step, world_size):\n    os._exit(4)\n",
                "the grading process ended during this case", 1),
}


@pytest.mark.slow
@pytest.mark.bad_input("exercises")
@pytest.mark.parametrize("filename", sorted(WAYWARD))
def test_a_wayward_file_is_one_clear_line_and_a_failing_grade(filename, tmp_path, capfd):
    source, words, case = WAYWARD[filename]
    f = tmp_path / filename
    f.write_text(source)
    # the command, as a learner runs it: exit 1 (a failing grade), the line, no traceback, nothing on stderr
    # (the grading child writes to the same file descriptors: capfd sees what the terminal would)
    # only the loop needs a short limit (it never ends, on any machine); the others keep the default, so that a
    # busy machine cannot make their first case look like a loop
    limit = 1 if filename == "loops.py" else exercises.TIME_LIMIT
    assert main(["exercise", "check", "ring_chunk", "--file", str(f), "--time-limit", str(limit)]) == 1
    out, err = capfd.readouterr()
    assert words in out and "Traceback" not in out + err and err == "", (out, err)
    graded = exercises.check("ring_chunk", str(f), time_limit=limit)  # the Python API says the same
    assert not graded.passed and graded.cases == case and words in str(graded)


@pytest.mark.bad_input("exercises")
@pytest.mark.parametrize("filename", ["exits_on_load.py", "exits_in_a_case.py", "syntax.py", "imports.py"])
def test_wayward_source_is_a_failing_grade_in_process_too(filename):
    source, words, case = WAYWARD[filename]
    graded = exercises.check("ring_chunk", source)  # a notebook's source string, graded in this process
    assert not graded.passed and graded.cases == case and words.replace(filename, "<exercise>") in str(graded)
