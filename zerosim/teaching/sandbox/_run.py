"""The grader's side: start the keeper and the child, load the learner's file there, call its functions one at a time
and answer their callbacks, end everything, say what happened.

    with Session(source, path, policy) as s:
        s.load(Budget(60))                            # a Reply: "loaded", or "not runnable" with one line
        reply = s.call("chunk_sent", (1, 0, 4), {}, Budget(60))   # "returned" with the value, "raised", ...

    grader ──starts──> keeper (a session of its own) ──starts──> child (a session of its own, confined, policed)
       │  ^               │ says the child's pid, then its exit status; sweeps everything when told or alone
       │  └── replies ────┴─── the report pipe (JSON lines) and the output pipe (stdout + stderr) ──┘
       ├──── requests (JSON lines: the source, calls, callback answers) ─> the keeper's stdin, the child's ──>
       └──── the control pipe: closed when the grader is done, interrupted or dead ─────> keeper

Where the judgement is, and why. The child sends only what the learner's functions returned (values and arrays, as
data: _values.py); the checks that decide whether that is right run here, in the grader, on the grader's own
answers (zerosim/teaching/exercises). Before, the child ran the checks and sent "passed": anything in that process
is the learner's to change (the pipe's descriptor was in sys.argv, the checks were objects the learner's code could
patch), and a file that wrote `{"event": "done", "result": {"passed": true}}` on it, or replaced the grading
function, scored full marks. Authenticating the child's messages would not help: a key in the child's memory is the
learner's to read. Now a message the learner's code forges is just another output: it can only claim that its
function returned some value, and a value is right only if it equals the grader's answer, which the child never
sees (the cases' inputs go there; their expected outputs do not). So a forged line earns what computing that value
would have earned, and computing it with zerosim's own code is what the policy refuses (_policy.py). A line that is
not the protocol is "broke the protocol": the case fails. A call made `via` a harness (_policy.py) gets back what the
harness returned, run in the child beside the learner's code: a claim like any returned value, judged the same way
(what it leaves open is in docs/how-to/teach-a-course.md).

What it guarantees, whatever the learner's code does:

- **An answer.** A call returns a `Reply` or raises `Ended` with an `Outcome`: "timed out" (the step's `Budget` ran
  out while the grader waited on the child), "too much output" (more than `output_limit` bytes on stdout and stderr
  together), "ended" (the child ended without answering; its exit status), "parent ended" (the keeper was killed
  before it could say how the child ended: the learner signalled it), "broke the protocol" (a line on the report pipe
  that is not a reply the grader was waiting for, or one larger than REPLY_LIMIT). After `Ended` the session is
  over; a new one loads the file again.
- **A clock that cannot be stopped or fed.** A step's budget is charged for every moment the grader waits on the
  child, printing or not; the grader's own time (answering a callback, checking a value) is not the learner's. There
  is no limit before "ready" (the child's own imports are not the learner's time).
- **Output read as it comes, with a cap.** The child's stdout and stderr are one pipe the grader drains at every
  turn, requests included (a pipe that fills blocks its writer: that is how 50 MB printed while loading hung the
  grader before), passing it to `echo` (the grader's stdout) up to the cap; past the cap the child is stopped.
- **Nothing left running.** On every exit — a result, a timeout, an exception, Ctrl-C (KeyboardInterrupt, raised out
  of the wait at once) — the grader closes the control pipe and the keeper kills the child's group and every process
  it started (_keeper.py), then the grader waits for the keeper; if the grader itself is killed, the kernel closes
  the control pipe for it. The case folder is removed last.

The child is confined before the learner's code runs (_confine.py); as root, where it cannot be, `Session` raises
CannotConfine before it starts anything.
"""

from __future__ import annotations

import base64
import errno
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
from zerosim.teaching.sandbox._policy import Policy
from zerosim.teaching.sandbox._values import Malformed, Values

OUTPUT_LIMIT = 1 << 20  # bytes a solution may print (stdout and stderr together): pages of prints, not a flood
REPLY_LIMIT = 64 << 20  # bytes of one reply: the largest value a case gets back is a few kB
TEXT_LIMIT = 1000  # characters of any text the child sends that the grader repeats (a message, a line of code)
_KEEPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_keeper.py")
# -c, not -m: the package imports zerosim first, and runpy would warn
_CHILD = "from zerosim.teaching.sandbox._child import main; main()"
_SWEEP_WAIT = 30.0  # seconds the keeper gets to kill everything and exit before the grader kills the keeper's group
_REPLIES = {"loaded", "not runnable", "returned", "raised", "missing", "unsendable"}


@dataclass(frozen=True)
class Outcome:
    """How a session ended before it answered (module docstring lists `how`)."""

    how: str
    status: int | None = None  # the child's exit status where known (negative: the signal that ended it)
    keeper_status: int | None = None  # "parent ended": how the keeper ended
    facts: dict = field(default_factory=dict)  # "limit" for "timed out", "output_limit" for "too much output"


class Ended(BaseException):
    """The session ended before it answered: `outcome` says how. A BaseException, so that a check's own `except
    Exception` (around a probe of the learner's function) cannot swallow it."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome.how)
        self.outcome = outcome


class Budget:
    """Seconds the learner's code may take in one step (loading the file, or one case), charged while the grader
    waits on the child."""

    def __init__(self, limit: float):
        self.limit, self.left = float(limit), float(limit)


@dataclass
class Reply:
    """What the child answered: `event` ("loaded", "not runnable", "returned", "raised", "missing", "unsendable"),
    its fields (`value` for "returned", `kind`/`words`/`line`/`code` for "raised", `why` for "not runnable",
    `message` for "unsendable"), what the policy refused and noted meanwhile, and the first error a callback raised
    in the grader (the case's verdict: a check inside a callback failed)."""

    event: str
    fields: dict
    refused: list
    noted: list
    error: BaseException | None = None


class Session:
    """The learner's file loaded in a confined, policed child, for as long as it answers (module docstring)."""

    def __init__(self, source: bytes, path: str, policy: Policy, output_limit: int = OUTPUT_LIMIT, echo=None,
                 handles: dict | None = None):
        check_confinable()
        self.source, self.path, self.policy = source, path, policy
        self.output_limit, self.echo, self.handles = output_limit, echo or _to_stdout, handles or {}
        self.keeper, self.folder, self.wire, self.over, self.control = None, None, None, None, None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def load(self, budget: Budget) -> Reply:
        """Start the child and load the file: "loaded", or "not runnable" with one line; Ended otherwise."""
        self.folder = tempfile.mkdtemp(prefix="zerosim-case-")
        report_r, report_w = os.pipe()
        output_r, output_w = os.pipe()
        control_r, self.control = os.pipe()
        # bytecode only beside the sources, where the policy's closed files are (_policy.py `_closed_paths`): a
        # PYTHONPYCACHEPREFIX of the grader's would let the child load zerosim's compiled modules from a folder the
        # audit hook does not know, past the finder
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
        env.update(TMPDIR=self.folder, PYTHONDONTWRITEBYTECODE="1")
        plan = {"path": self.path, "folder": self.folder, "report": report_w, "policy": self.policy.to_plan()}
        keeper_plan = {"child": [sys.executable, "-c", _CHILD, json.dumps(plan)], "report": report_w,
                       "output": output_w, "control": control_r, "folder": self.folder, "env": env}
        self.wire = _Wire(report_r, output_r, self.output_limit, self.echo)
        try:
            self.keeper = subprocess.Popen([sys.executable, "-I", _KEEPER, json.dumps(keeper_plan)],
                                           pass_fds=(report_w, output_w, control_r), stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, start_new_session=True, cwd=self.folder)
        finally:
            for fd in (report_w, output_w, control_r):
                os.close(fd)  # the keeper and the child hold them now
        self.wire.attach(self.keeper)
        self.wire.send({"source": base64.b64encode(self.source).decode("ascii")})
        ready = self._next(None)  # no clock before "ready": the child's imports are not the learner's
        if ready.get("event") != "ready":
            raise self._over(Outcome("broke the protocol"))
        return self._reply(self._next(budget), None)

    def call(self, function: str, args, kwargs, budget: Budget, via: str | None = None) -> Reply:
        """Call the learner's `function` on `args` (lent handles and arrays as _values.py says), answering its
        callbacks; the step may take `budget`'s seconds of the learner's time. `via`: one of the policy's harnesses
        ("module:function"), which the child calls on the learner's function and `args` instead (_child.py)."""
        if self.over is not None:
            raise Ended(self.over)
        values = Values(self.handles)
        request = {"call": function, "args": values.dump(list(args)), "kwargs": values.dump(dict(kwargs))}
        self.wire.send(request if via is None else {**request, "via": via})
        error = None
        while True:
            message = self._next(budget)
            try:
                values.apply(message.get("changes", {}))
                if message.get("event") != "callback":
                    return self._reply(message, values, error)
                answer, failed = self._callback(values, message)
            except Malformed:
                raise self._over(Outcome("broke the protocol")) from None
            error = error or failed
            self.wire.send(answer)

    def _callback(self, values: Values, message: dict) -> tuple:
        """Answer one callback: ({"reply": value} or {"error": ...}, the grader's exception or None)."""
        op, name = message.get("op"), message.get("name")
        target = values.handle(message.get("handle"), op, name)
        args, kwargs = values.load(message.get("args")), values.load(message.get("kwargs"))
        if not (isinstance(args, list) and isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs)):
            raise Malformed("a callback's arguments are a list and a dict")
        try:
            if op == "get":
                result = getattr(target, name)
            else:
                result = target(*args, **kwargs) if name == "__call__" else getattr(target, name)(*args, **kwargs)
            return {"reply": values.dump(result)}, None
        except Exception as e:  # the grader's check failed inside the callback (or the ledger refused a read)
            return {"error": {"kind": type(e).__name__, "message": str(e)}}, e

    def _reply(self, message: dict, values: Values | None, error=None) -> Reply:
        event = message.get("event")
        if event not in _REPLIES:
            raise self._over(Outcome("broke the protocol"))
        fields = {k: text(v) if v is not None else None for k, v in message.items()
                  if k not in ("event", "value", "changes", "refused", "noted")}
        if event == "returned":
            try:
                fields["value"] = values.load(message.get("value"))
            except Malformed:
                raise self._over(Outcome("broke the protocol")) from None
        return Reply(event, fields, _strings(message.get("refused")), _strings(message.get("noted")), error)

    def _next(self, budget: Budget | None) -> dict:
        try:
            return self.wire.next(budget)
        except Ended as e:
            self.over = e.outcome
            raise

    def _over(self, outcome: Outcome) -> Ended:
        self.over = outcome
        return Ended(outcome)

    def close(self) -> None:
        """End the child and everything it started, and remove the case folder (every way out, Ctrl-C included)."""
        try:
            if self.control is not None:
                os.close(self.control)  # the keeper's word to end the child and everything it started
                self.control = None
            if self.keeper is not None:
                _wait_for(self.keeper, self.wire.child())
                if self.wire.last != b"\n":  # what the grader says next starts a line of its own
                    self.echo(b"\n")
        finally:
            if self.wire is not None:
                self.wire.close()
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)  # links in it are removed, never followed
            self.keeper, self.wire, self.folder = None, None, None


def _strings(value) -> list:
    """A list of the child's strings, each cut to TEXT_LIMIT and at most 16 of them (they reach results.json)."""
    return [text(v) for v in value[:16]] if isinstance(value, list) else []


def text(value) -> str:
    """One of the child's strings as the grader repeats it: a str, cut to TEXT_LIMIT characters."""
    words = value if isinstance(value, str) else str(value) if isinstance(value, (int, float)) else repr(type(value))
    return words if len(words) <= TEXT_LIMIT else words[:TEXT_LIMIT] + "..."


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
        if keeper.stdin is not None:
            try:
                keeper.stdin.close()
            except OSError:
                pass


def _to_stdout(chunk: bytes) -> None:
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        sys.stdout.flush()
        out.write(chunk)
        out.flush()
    else:
        sys.stdout.write(chunk.decode("utf-8", "replace"))


class _Wire:
    """The pipes to and from the child, read and written as they are ready, against the step's budget."""

    def __init__(self, report: int, output: int, output_limit: int, echo):
        self.report, self.output, self.output_limit, self.echo = report, output, output_limit, echo
        self.keeper, self.said, self.requests = None, None, None
        self.lines, self.words, self.printed, self.last = b"", b"", 0, b"\n"
        self.pending, self.messages, self.gone = b"", [], None  # gone: how the child ended, once it has
        self.watching = [report, output]

    def attach(self, keeper) -> None:
        self.keeper, self.said, self.requests = keeper, keeper.stdout.fileno(), keeper.stdin.fileno()
        os.set_blocking(self.requests, False)
        self.watching.append(self.said)

    def send(self, message: dict) -> None:
        self.pending += json.dumps(message).encode() + b"\n"  # written as the child reads: never blocks the grader

    def child(self) -> int | None:
        """The child's pid, once the keeper has said it."""
        words = self.words.split()
        return int(words[0]) if words else None

    def close(self) -> None:
        for fd in (self.report, self.output):
            os.close(fd)

    def next(self, budget: Budget | None) -> dict:
        """The child's next message; Ended when the budget runs out, the output passes its cap, the child ends
        without one, or a line is not JSON."""
        while not self.messages:
            if self.gone is not None:
                raise Ended(self.gone)
            started = time.monotonic()
            wait = None if budget is None else max(0.0, budget.left)
            writing = [self.requests] if self.pending and self.requests is not None else []
            ready, writable, _ = select.select(self.watching, writing, [], wait)
            if budget is not None:
                budget.left -= time.monotonic() - started
            if writable:
                self._write()
            for fd in (self.output, self.report, self.said):  # output first: drained at every turn
                if fd in ready:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        self.watching.remove(fd)
                    self._take(fd, chunk)
            if self.messages or self.gone is not None:
                continue
            if budget is not None and budget.left <= 0:
                raise Ended(Outcome("timed out", facts={"limit": budget.limit}))
        return self.messages.pop(0)

    def _write(self) -> None:
        try:
            n = os.write(self.requests, self.pending[: 1 << 16])
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.EPIPE:
                raise
            self.pending, self.requests = b"", None  # the child is gone: how it ended is what the wait says
            return
        self.pending = self.pending[n:]

    def _take(self, fd: int, chunk: bytes) -> None:
        if fd == self.output:
            self.printed += len(chunk)
            if self.printed > self.output_limit:
                raise Ended(Outcome("too much output", facts={"output_limit": self.output_limit}))
            if chunk:
                self.echo(chunk)
                self.last = chunk[-1:]
        elif fd == self.report:
            self._lines(chunk)
        else:
            self.words += chunk
            if not chunk or len(self.words.split()) >= 2:
                self._ended()  # the keeper said the child's status, or ended without saying it

    def _lines(self, chunk: bytes) -> None:
        self.lines += chunk
        while b"\n" in self.lines:
            line, self.lines = self.lines.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                raise Ended(Outcome("broke the protocol")) from None
            if not isinstance(message, dict) or not isinstance(message.get("event"), str):
                raise Ended(Outcome("broke the protocol"))
            if message["event"] == "unconfined":  # the child could not confine itself: it ran none of the learner's
                raise CannotConfine(f"the grading process could not confine itself: {message.get('why')}")
            self.messages.append(message)
        if len(self.lines) > REPLY_LIMIT:
            raise Ended(Outcome("broke the protocol"))

    def _ended(self) -> None:
        """The child ended (the keeper said its status) or the keeper did: what the report pipe still holds (the
        child wrote its last reply before it exited) is read first, then the next wait says how it ended."""
        words = self.words.split()
        if len(words) < 2:  # the keeper ended before it could say how the child did: the learner's doing
            self.gone = Outcome("parent ended", keeper_status=self.keeper.wait())
            return
        self.gone = Outcome("ended", status=int(words[1]))
        os.set_blocking(self.report, False)
        while True:
            try:
                chunk = os.read(self.report, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._lines(chunk)
