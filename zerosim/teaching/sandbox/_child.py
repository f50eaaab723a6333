"""The child: the process a learner's code runs in. It loads the file and calls its functions when the grader asks,
and sends back what they returned, as data; it never judges.

    python -c "from zerosim.teaching.sandbox._child import main; main()" PLAN

In order: it takes the grader's messages from its stdin (the first is the learner's source: the grader read the
file, a confined child may not be able to), moving them to a descriptor of its own and leaving /dev/null as fd 0;
imports the policy's harnesses (below); confines itself to the case folder (_confine.py); installs the policy on
what the learner's code may import and call (_policy.py), after its own imports and before any of the learner's code;
says `ready` (the grader's clock for loading starts: imports are not the learner's time); loads the file (`loaded`,
or `not runnable` with one line); then serves, one request at a time:

    grader -> child   {"call": function, "args": [...], "kwargs": {...}}
                      | {"call": function, "via": "module:function", "args": [...], "kwargs": {...}}
    child -> grader   {"event": "returned", "value": ...} | {"event": "raised", "kind", "words", "line"}
                      | {"event": "missing"} | {"event": "unsendable", "message"}
                      ... and, while the function runs, for each use of a handle the grader lent (a callback such as
                      all_gather, a ledger Buffer's .array or .free()):
    child -> grader   {"event": "callback", "handle", "op", "name", "args", "kwargs"}
    grader -> child   {"reply": value} | {"error": {"kind", "message"}}

With "via", the child calls the harness of that name (one the policy lists, imported before `arm`: _policy.py) on the
learner's function and the arguments, `harness(function, *args, **kwargs)`, and sends back what the harness returned:
for a function whose arguments cannot cross the pipe (assignment 4's torch tensors, on gloo processes the harness
forks here).

Every message the child sends carries `changes` (the grader's arrays the learner's code wrote into, _values.py),
`refused` (zerosim names the policy refused since the call began) and `noted`. What it sends is the learner's
output and nothing more: the grader compares it with its own answers, so a line the learner's code writes on this
pipe itself is, at worst, a wrong output or a broken protocol (_run.py). It ends with os._exit when the grader's
messages end: whatever the learner's code left running (threads, atexit) is moot.
"""

from __future__ import annotations

import base64
import functools
import importlib
import json
import os
import re
import signal
import sys

from zerosim.teaching.sandbox._confine import confine
from zerosim.teaching.sandbox._load import NotRunnable, learner_line, named, run_source
from zerosim.teaching.sandbox._policy import Policy, arm, calling, noted, refused
from zerosim.teaching.sandbox._values import Malformed, Unsendable, Values

MESSAGE_LIMIT = 1000  # characters of an exception's message sent back: a line, not a dump


class _Pipe:
    """The child's two ends: requests in (JSON lines), reports out (JSON lines, flushed at once)."""

    def __init__(self, report_fd: int, request_fd: int):
        self.out = os.fdopen(report_fd, "w", buffering=1)
        self.inp = os.fdopen(request_fd, "rb")

    def say(self, **event) -> None:
        self.out.write(json.dumps(event) + "\n")
        self.out.flush()

    def ask(self) -> dict:
        line = self.inp.readline()
        if not line:  # the grader is done
            _exit()
        return json.loads(line)


def _exit() -> None:
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


def _error_class(kind: str):
    """An exception class named `kind` (the grader's error in a callback, e.g. LedgerError), so that the learner's
    traceback names it as in-process grading would."""
    name = kind if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,60}", kind or "") else "GraderError"
    return type(name, (Exception,), {"__module__": "grader"})


class _Serve:
    """One call of a learner's function at a time, and the callbacks it makes while it runs."""

    def __init__(self, pipe: _Pipe, namespace: dict, path: str, harnesses: dict):
        self.pipe, self.namespace, self.path, self.harnesses = pipe, namespace, path, harnesses
        self.values = None

    def stand_in(self, rid: int, kind: str, remote):
        serve = self

        class StandIn:
            """A handle the grader lent: its methods and attributes are the grader's, asked for through the pipe."""

            __slots__ = ()

            def __call__(self, *args, **kwargs):
                return serve.callback(rid, "call", "__call__", args, kwargs)

            def __getattr__(self, name):
                if name in remote.methods:
                    return lambda *args, **kwargs: serve.callback(rid, "call", name, args, kwargs)
                if name in remote.attrs:
                    return serve.callback(rid, "get", name, (), {})
                raise AttributeError(f"{kind!r} object has no attribute {name!r}")

            def __repr__(self):
                return f"<{kind}>"

        StandIn.__name__ = StandIn.__qualname__ = kind if kind.isidentifier() else "Handle"
        return StandIn()

    def callback(self, rid, op, name, args, kwargs):
        v = self.values
        self.pipe.say(event="callback", handle=rid, op=op, name=name, args=v.dump(list(args)),
                      kwargs=v.dump(dict(kwargs)), **self._records())
        answer = self.pipe.ask()
        if "error" in answer:
            error = answer["error"]
            raise _error_class(str(error.get("kind")))(str(error.get("message")))
        return v.load(answer.get("reply"))

    def _records(self) -> dict:
        return {"changes": self.values.changes(), "refused": refused(), "noted": noted()}

    def call(self, request: dict) -> None:
        function = request.get("call")
        fn = self.namespace.get(function) if isinstance(function, str) else None
        calling(function)
        self.values = Values(proxy=self.stand_in)
        if not callable(fn):
            return self.pipe.say(event="missing", **self._records())
        try:
            args = self.values.load(request.get("args", {"list": []}))
            kwargs = self.values.load(request.get("kwargs", {"dict": []}))
        except Malformed as e:  # the grader's own message: cannot happen unless the grader is wrong
            return self.pipe.say(event="unsendable", message=f"the grader's arguments: {e}", **self._records())
        via = request.get("via")
        if via is not None:
            if not isinstance(via, str) or via not in self.harnesses:  # the grader's own request: cannot happen
                return self.pipe.say(event="unsendable", message=f"the grader's harness {via!r} is not among the "
                                     f"policy's ({', '.join(self.harnesses) or 'none'})", **self._records())
            fn = functools.partial(self.harnesses[via], fn)
        try:
            result = fn(*args, **kwargs)
        except BaseException as e:  # the learner's code failed (SystemExit and KeyboardInterrupt included)
            return self.pipe.say(event="raised", kind=type(e).__name__, words=named(e)[:MESSAGE_LIMIT],
                                 line=learner_line(e, self.path)[:MESSAGE_LIMIT],
                                 code=repr(e.code)[:MESSAGE_LIMIT] if isinstance(e, SystemExit) else None,
                                 **self._records())
        try:
            value = self.values.dump(result)
        except Unsendable as e:
            return self.pipe.say(event="unsendable", message=str(e), **self._records())
        self.pipe.say(event="returned", value=value, **self._records())


def _harnesses(policy: Policy) -> dict:
    """{"module:function": the function} for the policy's harnesses, imported now, before `arm` (machinery: what they
    import of zerosim is checked there)."""
    found = {}
    for name in policy.harnesses:
        module, _, function = name.partition(":")
        try:
            found[name] = getattr(importlib.import_module(module), function)
        except (ImportError, AttributeError) as e:
            raise RuntimeError(f"the grader's harness {name}: {e}") from None
    return found


def _signals_as_python_starts() -> None:
    """Each signal as a Python started from a terminal has it, whatever the grader inherited. A grader a shell started
    in the background (a script's `cmd &`, nohup, a runner's own script) has SIGINT and SIGQUIT (and under nohup
    SIGHUP) ignored and passes that on to this process, so a solution's os.kill(0, SIGINT) would do nothing there and
    raise KeyboardInterrupt elsewhere: one solution, two grades. Python itself ignores SIGPIPE and SIGXFSZ at start
    (its I/O raises instead), which stay so; every other ignored signal takes its default, and SIGINT Python's handler
    (KeyboardInterrupt)."""
    own = {getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)}
    for number in signal.valid_signals():
        if number not in own and signal.getsignal(number) is signal.SIG_IGN:
            signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    _signals_as_python_starts()
    plan = json.loads(sys.argv[1])
    request_fd = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # what the learner's code reads from stdin: nothing
    os.close(devnull)
    pipe = _Pipe(plan["report"], request_fd)
    first = pipe.ask()
    source = base64.b64decode(first["source"])
    policy = Policy.from_plan(plan["policy"])
    try:
        harnesses = _harnesses(policy)
        confine(plan["folder"])
        arm(policy)
    except (OSError, ValueError, RuntimeError) as e:  # the learner's code must not run unconfined or unpoliced
        pipe.say(event="unconfined", why=str(e))
        _exit()
    pipe.say(event="ready")
    path = plan["path"]
    try:
        namespace = run_source(source.decode("utf-8"), path, interruptible=False)
    except NotRunnable as e:
        pipe.say(event="not runnable", why=str(e), refused=refused(), noted=noted())
        namespace = None
    except UnicodeDecodeError as e:
        pipe.say(event="not runnable", why=f"{path}: not a text file ({e})", refused=[], noted=[])
        namespace = None
    else:
        pipe.say(event="loaded", refused=refused(), noted=noted())
    serve = _Serve(pipe, namespace or {}, path, harnesses)  # a file that did not load has no function: each says so
    while True:
        serve.call(pipe.ask())
