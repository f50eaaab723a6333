"""Run a learner's file to define its functions, and say in one line why it could not.

    namespace = run_source(text, "my_solution.py")      # NotRunnable with one line when it cannot run
    learner_line(error, "my_solution.py")                # " (line 3: return 1 / 0)": where in the learner's file

One place for both sides: the child loads the file this way (_child.py), and a notebook's source graded in its own
process does too (zerosim/teaching/exercises/_grading.py, `load`).
"""

from __future__ import annotations

import linecache
import traceback


class NotRunnable(Exception):
    """The learner's file could not be run to define its functions: the message is one line saying why."""


def learner_line(error: BaseException, filename: str | None) -> str:
    """' (line L: code)' for the innermost frame in the learner's file `filename`, if any."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename == filename:
            return f" (line {frame.lineno}: {frame.line})" if frame.line else f" (line {frame.lineno})"
    return ""


def named(e: BaseException) -> str:
    """The exception in words; KeyboardInterrupt with why a solution may not raise it."""
    words = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if isinstance(e, KeyboardInterrupt):
        words += " (a grader takes KeyboardInterrupt for Ctrl-C, so a solution may not raise it)"
    return words


def run_source(source: str, filename: str, interruptible: bool = True) -> dict:
    """The namespace `source` defines once run as a module named "exercise_solution". NotRunnable, one line, when it
    does not compile, raises or calls sys.exit. `interruptible`: let KeyboardInterrupt through (in a notebook Ctrl-C
    is the user's; in the grader's child it is the learner's code, and fails like any other error)."""
    namespace = {"__name__": "exercise_solution"}
    # the lines a message quotes, from the source itself: the file may not be readable where it runs
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as e:  # one line: where and what, not a traceback
        text = f": {e.text.strip()}" if e.text and e.text.strip() else ""
        raise NotRunnable(f"{filename} line {e.lineno}: {type(e).__name__}: {e.msg}{text}") from None
    try:
        exec(code, namespace)  # the learner's own file: running it is the point
    except SystemExit as e:
        raise NotRunnable(f"{filename} called sys.exit({e.code!r}) while it was loaded; "
                          "define the function only") from None
    except Exception as e:  # an import that fails, a name error at the top level, ...
        raise NotRunnable(f"{filename}{learner_line(e, filename)}: loading it raised {named(e)}") from None
    except BaseException as e:  # KeyboardInterrupt and kin
        if interruptible:
            raise
        raise NotRunnable(f"{filename}{learner_line(e, filename)}: loading it raised {named(e)}") from None
    return namespace
