"""Issue 35, item 4: graders that survive any solution (zerosim/teaching/exercises/_sandbox.py, on
zerosim/teaching/sandbox/).

On main a solution that killed its parent (`os.kill(os.getppid(), signal.SIGKILL)`) took down `exercise check`,
`assignment check` and `assignment grade`: exit status 137, no results.json — a Gradescope run ended with no result.
Now the solution's parent is a keeper process in a session of its own, not the grader: every command finishes,
results.json is written, and the test's one line says what the solution did. Where Landlock scopes signals (ABI 6,
Linux 6.12: teaching/sandbox/_confine.py), or the grader is root (the solution runs as nobody), the solution cannot
signal the keeper or the grader at all: its os.kill raises PermissionError, and that is the line.

The commands run in a subprocess each, so that a grader that did die would fail the test, not take pytest with it."""

import functools
import json
import signal
import subprocess
import sys

import pytest
from helpers import HANG_TIMEOUT

from zerosim.teaching.sandbox import confinement

# the solution cannot reach a process outside its own: Landlock's signal scope, or (as root) another user
REFUSED = confinement().signals or confinement().root and confinement().writes
NOT_PERMITTED = "raised PermissionError: [Errno 1] Operation not permitted"
HOSTILE = {  # what the solution does, and words of the line the grade must say
    "kills its parent": ("os.kill(os.getppid(), signal.SIGKILL)",
                         NOT_PERMITTED if REFUSED else "process that started your code was ended (SIGKILL)"),
    "terminates its parent": ("os.kill(os.getppid(), signal.SIGTERM)",
                              NOT_PERMITTED if REFUSED else "ended (SIGTERM)"),
    "kills its parent's group": ("os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
                                 NOT_PERMITTED if REFUSED else "ended (SIGKILL)"),
    "kills its own group": ("os.killpg(0, signal.SIGKILL)", "with signal SIGKILL (exit status -9)"),
    # the child's own group: allowed; the KeyboardInterrupt it raises is the learner's (issue 56), one line
    "interrupts its group": ("os.kill(0, signal.SIGINT)", "raised KeyboardInterrupt (a grader takes"),
    "leaves its session, then kills its parent": ("os.setsid() if os.getsid(0) != os.getpid() else None; "
                                                 "os.kill(os.getppid(), signal.SIGKILL)",
                                                 NOT_PERMITTED if REFUSED else "ended (SIGKILL)"),
}


def run(*argv, cwd, **options) -> subprocess.CompletedProcess:
    """The command in a session of its own: a grader that let a solution reach its group takes only itself down."""
    return subprocess.run([sys.executable, "-m", "zerosim.cli.main", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=HANG_TIMEOUT, start_new_session=True, **options)


@functools.cache
def starter_text() -> str:
    """Assignment 1's starter as `zerosim assignment starter 1` prints it: asked once, the same for every test."""
    return subprocess.run([sys.executable, "-m", "zerosim.cli.main", "assignment", "starter", "1"],
                          capture_output=True, text=True, timeout=HANG_TIMEOUT, check=True).stdout


def solution(tmp_path, action: str, at_load: bool):
    """Assignment 1's starter with the hostile action in ring_reduce_scatter (or at the file's top level)."""
    starter = starter_text()
    body = starter.replace('    """xs: N 1-D arrays', f'    {action}\n    """xs: N 1-D arrays', 1) if not at_load \
        else starter.replace("import numpy as np\n", f"import numpy as np\nimport os, signal\n{action}\n", 1)
    body = body.replace("import numpy as np\n", "import numpy as np\nimport os, signal\n", 1)
    path = tmp_path / "a1_ring.py"
    path.write_text(body)
    return path


@pytest.mark.slow  # about 2 s a grade, 12 of them
@pytest.mark.parametrize("at_load", [False, True], ids=["in a case", "while loaded"])
@pytest.mark.parametrize("what", list(HOSTILE))
def test_assignment_grade_writes_its_results_whatever_the_solution_does(tmp_path, what, at_load):
    action, words = HOSTILE[what]
    path = solution(tmp_path, action, at_load)
    done = run("assignment", "grade", "1", "--file", str(path), "--results", "out/results.json", cwd=tmp_path)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])  # the grader ends itself: some tests failed
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    # the test whose case ran the hostile line says what it did, in one line (the starter's unwritten parts fail too,
    # each with its own line: "not written yet")
    said = [t for t in failed if words in t["output"]]
    assert said and all("\n" not in t["output"] for t in failed), [t["output"] for t in failed][:4]
    assert results["output"].startswith("assignment 1")
    assert not list((tmp_path / "out").glob("*.tmp*"))


SIGNALLED = {  # a signal a background job may start with ignored, what the solution does with it, the grade's words
    "SIGINT": ("os.kill(0, signal.SIGINT)", HOSTILE["interrupts its group"][1]),
    "SIGHUP": ("os.kill(os.getpid(), signal.SIGHUP)", "with signal SIGHUP (exit status -1)"),  # nohup ignores it
}


@pytest.mark.slow  # about 2 s a grade, 4 of them
@pytest.mark.parametrize("ignored", [False, True], ids=["default", "ignored"])
@pytest.mark.parametrize("name", list(SIGNALLED))
def test_a_solution_signalling_itself_grades_alike_however_the_grader_was_started(tmp_path, name, ignored):
    # A shell without job control starts a background job with SIGINT and SIGQUIT ignored (`cmd &` in a script, a
    # runner's own script), nohup SIGHUP too: the grader inherits that, and the learner's process would. The solution's
    # signal is the same one line either way (seen failing with SIGINT ignored before _child.py reset the signals).
    number = getattr(signal, name)
    action, words = SIGNALLED[name]
    path = solution(tmp_path, action, at_load=False)
    done = run("assignment", "grade", "1", "--file", str(path), "--results", "out/results.json", cwd=tmp_path,
               preexec_fn=lambda: signal.signal(number, signal.SIG_IGN if ignored else signal.SIG_DFL))
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    outputs = [t["output"] for t in json.loads((tmp_path / "out" / "results.json").read_text())["tests"]]
    assert any(words in output for output in outputs), outputs[:4]


@pytest.mark.parametrize("command", [["assignment", "check", "1"], ["assignment", "grade", "1"]])
def test_a_solution_that_kills_its_parent_does_not_take_the_grader_down(tmp_path, command):
    path = solution(tmp_path, HOSTILE["kills its parent"][0], at_load=False)
    done = run(*command, "--file", str(path), cwd=tmp_path)
    assert done.returncode == 1 and "FAIL" in done.stdout, (done.returncode, done.stderr[-2000:])
    assert HOSTILE["kills its parent"][1] in done.stdout


def test_exercise_check_survives_a_solution_that_kills_its_parent(tmp_path):
    stub = subprocess.run([sys.executable, "-m", "zerosim.cli.main", "exercise", "show", "ring_chunk"],
                          capture_output=True, text=True, timeout=HANG_TIMEOUT).stdout
    name = stub.split("def ", 1)[1].split("(", 1)[0]
    path = tmp_path / "mine.py"
    path.write_text(f"import os, signal\n\ndef {name}(*args):\n    os.kill(os.getppid(), signal.SIGKILL)\n")
    done = run("exercise", "check", "ring_chunk", "--file", str(path), cwd=tmp_path)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert HOSTILE["kills its parent"][1] in done.stdout + done.stderr


def test_the_child_is_not_the_graders_child(tmp_path):
    """The learner's os.getppid() is the keeper, in a session of its own; the learner is in another."""
    from zerosim.teaching.exercises import grade_file

    stub = "import os\n\ndef chunk_sent(*a):\n    raise ValueError(f'{os.getppid()} {os.getsid(0)} {os.getpgid(0)}')\n"
    path = tmp_path / "mine.py"
    path.write_text(stub)
    import os

    result = grade_file("ring_chunk", str(path), 60)
    words = result.counterexample.split("ValueError: ")[1].split()
    parent, session, group = (int(w.strip("()'")) for w in words[:3])
    assert parent != os.getpid() and session not in (os.getsid(0), parent) and group == session
