"""The grader's side: start the keeper and the child, follow the child's reports, end everything, say what happened.

    outcome = run("zerosim.teaching.exercises._sandbox:grade_in_child", ["ring_chunk"], source, path, limit=60)

    grader ──starts──> keeper (a session of its own) ──starts──> child (a session of its own, confined)
       │  ^               │ says the child's pid, then its exit status; sweeps everything when told or alone
       │  └─── reports ───┴──── the report pipe (JSON lines) and the output pipe (stdout + stderr) ──┘
       └──── the control pipe: closed when the grader is done, interrupted or dead ─────> keeper

What it guarantees, whatever the learner's code does:

- **An answer.** Every way it can end is an `Outcome`: "done" (the entry's result), "timed out" (a step ran past
  `limit` seconds, or the child or what it started printed nothing and never finished), "too much output" (more than
  `output_limit` bytes on stdout and stderr together), "ended" (the child ended without a result; its exit status),
  "parent ended" (the keeper was killed before it could say how the child ended: the learner signalled it), "broke
  the protocol" (a line on the report pipe that is not the child's).
- **A clock that cannot be stopped or fed.** The deadline is a point in time fixed when a step starts (`Reporter.step`
  in the child): printing does not move it; there is no limit before "ready" (the child's own imports are not the
  learner's time).
- **Output read as it comes, with a cap.** The child's stdout and stderr are one pipe the grader drains at every
  turn (a pipe that fills blocks its writer: that is how 50 MB printed while loading hung the grader before), passing
  it to `echo` (the grader's stdout) up to the cap; past the cap the child is stopped.
- **Nothing left running.** On every exit — a result, a timeout, an exception, Ctrl-C (KeyboardInterrupt, raised out
  of the wait at once) — the grader closes the control pipe and the keeper kills the child's group and every process
  it started (_keeper.py), then the grader waits for the keeper; if the grader itself is killed, the kernel closes
  the control pipe for it. The case folder is removed last.

The child is confined before the learner's code runs (_confine.py); as root, where it cannot be, `run` raises
CannotConfine before it starts anything.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from zerosim.teaching.sandbox._confine import CannotConfine, check_confinable

OUTPUT_LIMIT = 1 << 20  # bytes a solution may print (stdout and stderr together): pages of prints, not a flood
_KEEPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_keeper.py")
# -c, not -m: the package imports zerosim first, and runpy would warn
_CHILD = "from zerosim.teaching.sandbox._child import main; main()"
_SWEEP_WAIT = 30.0  # seconds the keeper gets to kill everything and exit before the grader kills the keeper's group


@dataclass(frozen=True)
class Outcome:
    """How a sandboxed run ended (module docstring lists `how`)."""

    how: str
    where: dict | None = None  # the last `Reporter.step` before the end (None: before any step: loading the file)
    result: dict | None = None  # the entry's `Reporter.done` (how == "done")
    status: int | None = None  # the child's exit status where known (negative: the signal that ended it)
    keeper_status: int | None = None  # "parent ended": how the keeper ended
    facts: dict = field(default_factory=dict)  # "limit" for "timed out", "output_limit" for "too much output"


def run(entry: str, args: list, source: bytes, path: str, limit: float, output_limit: int = OUTPUT_LIMIT,
        echo=None) -> Outcome:
    """Run `entry` ("module:function", called in the child as entry(reporter, source, path, *args)) on the
    learner's `source` (read from `path`) in a confined child; each step may take `limit` seconds, all the output
    `output_limit` bytes, passed to `echo(bytes)` (default: this process's stdout) as it comes."""
    check_confinable()
    folder = tempfile.mkdtemp(prefix="zerosim-case-")
    try:
        return _run_in(folder, entry, args, source, path, limit, output_limit, echo or _to_stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # links in it are removed, never followed


def _run_in(folder, entry, args, source, path, limit, output_limit, echo) -> Outcome:
    report_r, report_w = os.pipe()
    output_r, output_w = os.pipe()
    control_r, control_w = os.pipe()
    env = {**os.environ, "TMPDIR": folder, "PYTHONDONTWRITEBYTECODE": "1"}
    plan = {"entry": entry, "args": list(args), "path": path, "folder": folder, "report": report_w}
    keeper_plan = {"child": [sys.executable, "-c", _CHILD, json.dumps(plan)], "report": report_w, "output": output_w,
                   "control": control_r, "folder": folder, "env": env}
    keeper, follow = None, None
    try:
        try:
            keeper = subprocess.Popen([sys.executable, "-I", _KEEPER, json.dumps(keeper_plan)],
                                      pass_fds=(report_w, output_w, control_r), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, start_new_session=True, cwd=folder)
        finally:
            for fd in (report_w, output_w, control_r):
                os.close(fd)  # the keeper and the child hold them now
        try:
            keeper.stdin.write(source)  # the child inherits the keeper's stdin and reads the file from it
            keeper.stdin.close()
        except BrokenPipeError:
            pass  # the keeper or the child is gone already: following it says how
        follow = _Follow(keeper, report_r, output_r, limit, output_limit, echo)
        outcome = follow.outcome()
        if follow.last != b"\n":  # what the grader says next starts a line of its own
            echo(b"\n")
        return outcome
    finally:
        os.close(control_w)  # the keeper's word to end the child and everything it started
        if keeper is not None:
            _wait_for(keeper, None if follow is None else follow.child())
        for fd in (report_r, output_r):
            os.close(fd)


def _wait_for(keeper, child: int | None) -> None:
    """The keeper ends once it has swept (exit status 0); one that does not (killed by the learner where signals are
    not scoped, or stuck) has its group killed, and the child's group too where the keeper had said the child's pid."""
    try:
        swept = keeper.wait(_SWEEP_WAIT) == 0
    except (subprocess.TimeoutExpired, KeyboardInterrupt):  # a second Ctrl-C must not leave it either
        swept = False
    try:
        for group in (keeper.pid, child) if not swept else ():
            if group is not None:
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass
        keeper.wait()
    finally:
        keeper.stdout.close()


def _to_stdout(chunk: bytes) -> None:
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        sys.stdout.flush()
        out.write(chunk)
        out.flush()
    else:
        sys.stdout.write(chunk.decode("utf-8", "replace"))


class _Follow:
    """The wait: the report, output and keeper pipes read as they come, against the current step's deadline."""

    def __init__(self, keeper, report: int, output: int, limit: float, output_limit: int, echo):
        self.keeper, self.report, self.output = keeper, report, output
        self.said = keeper.stdout.fileno()  # the keeper's two words: the child's pid, its exit status
        self.limit, self.output_limit, self.echo = float(limit), output_limit, echo
        self.where, self.result, self.deadline = None, None, None
        self.lines, self.words, self.printed, self.last = b"", b"", 0, b"\n"

    def outcome(self) -> Outcome:
        watching = [self.output, self.report, self.said]
        while True:
            wait = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
            ready, _, _ = select.select(watching, [], [], wait)
            for fd in (self.output, self.report, self.said):  # output first: drained at every turn
                if fd not in ready:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    watching.remove(fd)
                ended = self._take(fd, chunk)
                if ended is not None:
                    return ended
            if self.deadline is not None and time.monotonic() >= self.deadline:
                if self.result is not None:  # the result came, the exit did not: the result stands
                    return Outcome("done", self.where, self.result)
                return Outcome("timed out", self.where, facts={"limit": self.limit})

    def child(self) -> int | None:
        """The child's pid, once the keeper has said it."""
        words = self.words.split()
        return int(words[0]) if words else None

    def _take(self, fd: int, chunk: bytes) -> Outcome | None:
        if fd == self.output:
            self.printed += len(chunk)
            if self.printed > self.output_limit:
                return Outcome("too much output", self.where, facts={"output_limit": self.output_limit})
            if chunk:
                self.echo(chunk)
                self.last = chunk[-1:]
            return None
        if fd == self.report:
            return self._reports(chunk)
        self.words += chunk
        if chunk and len(self.words.split()) < 2:
            return None
        return self._ended()  # the keeper said the child's status, or ended without saying it

    def _reports(self, chunk: bytes) -> Outcome | None:
        self.lines += chunk
        while b"\n" in self.lines:
            line, self.lines = self.lines.split(b"\n", 1)
            try:
                report = json.loads(line)
                event = report["event"]
            except (ValueError, TypeError, KeyError):
                return Outcome("broke the protocol", self.where)
            if event == "unconfined":  # the child could not confine itself: it ran none of the learner's code
                raise CannotConfine(f"the grading process could not confine itself: {report.get('why')}")
            if event in ("ready", "step"):  # the clock starts, or restarts for the next step
                self.where = report.get("where", self.where)
                self.deadline = time.monotonic() + self.limit
            elif event == "done":  # the child exits now; the keeper then says how, unless it was killed
                self.result = report.get("result")
                self.deadline = time.monotonic() + self.limit
            else:
                return Outcome("broke the protocol", self.where)
        return None

    def _ended(self) -> Outcome:
        """The child ended (the keeper said its status) or the keeper did: what the report pipe still holds (the
        child wrote its result before it exited), then the answer."""
        words = self.words.split()
        if len(words) < 2:  # the keeper ended before it could say how the child did: the learner's doing
            return Outcome("parent ended", self.where, self.result, keeper_status=self.keeper.wait())
        os.set_blocking(self.report, False)
        while True:
            try:
                chunk = os.read(self.report, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            stray = self._reports(chunk)
            if stray is not None:
                return stray
        status = int(words[1])
        if self.result is None:
            return Outcome("ended", self.where, status=status)
        return Outcome("done", self.where, self.result, status=status)
