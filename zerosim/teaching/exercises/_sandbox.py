"""Grade a learner's file in a process of its own, each case under a time limit.

    result = grade_file("ring_chunk", "my_solution.py", time_limit=60)

A learner's file may loop forever, call `sys.exit`, crash the interpreter or fail to compile: none of that
may take the grader down or leave it hanging. The file is loaded and graded in a child Python
(`CHILD NAME FILE FD`), which reports on its own pipe (FD) as it goes: one
JSON line when the file is loaded, one before each case, one with the result. The parent waits on that
pipe with a deadline that restarts at every line: a case (or the loading) that runs past `time_limit`
seconds has its child killed and becomes the failing case (the clock starts once the child has imported
what it needs, so a slow machine's start-up is not the learner's time); a child that dies without a result is
named with its exit status. Either way the answer is a `Result` with one line saying what happened.

The learner's prints still reach the terminal (the child shares stdout and stderr); the protocol has a pipe
of its own so that nothing they print can be mistaken for it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from zerosim.teaching.exercises._grading import NotRunnable, Result, describe, load

TIME_LIMIT = 60.0  # seconds per case (and for loading the file): generous, since the grader's own cases take < 2 s


def grade_file(name: str, path: str, time_limit: float = TIME_LIMIT, where: str | None = None) -> Result:
    """Grade the file at `path` for exercise `name` in a child process; each case may take `time_limit` seconds.

    `where`: "module:attribute" of an `Exercise` outside this package's list (an assignment's tests,
    zerosim/teaching/assignments); the child imports it from there instead of looking `name` up."""
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise ValueError(f"time_limit must be a number of seconds > 0, got {time_limit!r}")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    read, write = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD, where or name, path, str(write)],
                                 pass_fds=(write,), stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(write)
    try:
        return _follow(child, read, name, path, float(time_limit))
    finally:
        os.close(read)
        if child.poll() is None:  # timed out, or the grader itself was interrupted: the child goes too
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def _follow(child, fd: int, name: str, path: str, limit: float) -> Result:
    """Read the child's reports until its result; a silence longer than `limit` ends it."""
    buffer, doing, case, started = b"", "loading it", 0, False
    while True:
        # no limit until the child has started (its own imports are not the learner's time), then `limit` per step
        ready, _, _ = select.select([fd], [], [], limit if started else None)
        if not ready:  # the deadline passed with no word from the child
            where = "loading your file" if case == 0 else f"case {case} ({doing})"
            return Result(name, False, case, f"{where} did not finish within {limit:g} s: does your code loop forever? "
                                             "(zerosim exercise check --time-limit S allows more)")
        chunk = os.read(fd, 65536)
        if not chunk:  # the child closed its pipe: it ended
            status = child.wait()
            where = "while your file was loaded" if case == 0 else f"during case {case} ({doing})"
            return Result(name, False, case, f"the grading process ended {where}, with exit status {status} "
                                             "(os._exit, a crash or a signal) and no result")
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            report = json.loads(line)
            if report["event"] == "ready":
                started = True
            elif report["event"] == "case":
                case, doing = report["n"], report["what"]
            elif report["event"] == "usage":  # the file defines no such function: the learner's own mistake of usage
                raise ValueError(report["message"])
            elif report["event"] == "result":
                return Result(name, report["passed"], report["cases"], report["counterexample"])


def _child(name: str, path: str, fd: int) -> None:
    """In the child: load the learner's file, grade it case by case, report on `fd`."""
    import importlib

    from zerosim.teaching import exercises

    out = os.fdopen(fd, "w", buffering=1)

    def say(**report):
        out.write(json.dumps(report) + "\n")
        out.flush()

    if ":" in name:  # "module:attribute": an assignment's exercise
        module, attribute = name.split(":")
        ex = getattr(importlib.import_module(module), attribute)
    else:
        ex = exercises.get(name)
    say(event="ready")  # from here on the clock runs: loading the learner's file, then each case
    try:
        with open(path) as f:
            source = f.read()
        fn = load(source, ex.function, path)
    except NotRunnable as e:
        say(event="result", passed=False, cases=0, counterexample=str(e))
        return
    except UnicodeDecodeError as e:
        say(event="result", passed=False, cases=0, counterexample=f"{path}: not a text file ({e})")
        return
    except ValueError as e:
        say(event="usage", message=str(e))
        return
    result = ex.grade(fn, on_case=lambda n, case: say(event="case", n=n, what=describe(case)))
    say(event="result", passed=result.passed, cases=result.cases, counterexample=result.counterexample)


# The child's program. (Not `-m zerosim.teaching.exercises._sandbox`: the package imports this module first, and runpy
# warns.)
# It ends with os._exit once the result is sent: whatever the learner's code left running (threads, atexit) is moot.
CHILD = ("import os, sys\nfrom zerosim.teaching.exercises._sandbox import _child\n"
         "_child(sys.argv[1], sys.argv[2], int(sys.argv[3]))\nsys.stdout.flush(); sys.stderr.flush()\nos._exit(0)\n")
