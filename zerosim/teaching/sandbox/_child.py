"""The child: the process a learner's code runs in, confined before that code runs.

    python -c "from zerosim.teaching.sandbox._child import main; main()" PLAN

It reads the learner's source from its stdin (the grader read the file: a confined child may not be able to), confines
itself to the case folder (_confine.py; issue 62's rule on what the learner's code may import and call goes there
too, before the file is loaded), and calls the entry the plan names ("module:function") with a `Reporter`, the
source, the file's path and the plan's arguments. The entry imports what it needs, says `ready` (the grader's clock
starts: imports are not the learner's time), loads and runs the learner's code, saying `step` before each part the
grader times, and `done` with its result. It ends with os._exit: whatever the learner's code left running (threads,
atexit) is moot.
"""

from __future__ import annotations

import importlib
import json
import os
import sys

from zerosim.teaching.sandbox._confine import confine


class Reporter:
    """The child's side of the report pipe: one JSON line an event, flushed at once."""

    def __init__(self, fd: int):
        self._out = os.fdopen(fd, "w", buffering=1)

    def say(self, **event) -> None:
        self._out.write(json.dumps(event) + "\n")
        self._out.flush()

    def ready(self) -> None:
        """The entry has imported what it needs: the grader's clock starts (the learner's code runs from here)."""
        self.say(event="ready")

    def step(self, **where) -> None:
        """A new part starts (the grader gives each its own time limit); `where` comes back in the Outcome."""
        self.say(event="step", where=where)

    def done(self, **result) -> None:
        """The entry's result (JSON values), which the grader returns as the Outcome's payload."""
        self.say(event="done", result=result)


def main() -> None:
    plan = json.loads(sys.argv[1])
    report = Reporter(plan["report"])
    source = sys.stdin.buffer.read()
    try:
        confine(plan["folder"])
    except (OSError, ValueError) as e:  # CannotConfine included: the learner's code must not run unconfined
        report.say(event="unconfined", why=str(e))
        os._exit(0)
    module, name = plan["entry"].split(":")
    entry = getattr(importlib.import_module(module), name)
    entry(report, source, plan["path"], *plan["args"])
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)
