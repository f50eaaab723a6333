"""Grade a learner's file in a process of its own, each case under a time limit, out of reach of the grader.

    result = grade_file("ring_chunk", "my_solution.py", time_limit=60)

A learner's file may loop forever, call `sys.exit`, crash the interpreter, fail to compile — or kill the process
that started it (`os.kill(os.getppid(), signal.SIGKILL)`) or signal its group: none of that may take the grader
down or leave it hanging, and the grade (`zerosim assignment grade`'s results.json) is always written. So:

    grader ──starts──> keeper (a session of its own) ──starts──> child (a session of its own)
       ^                  │ tells the grader the child's pid, then its exit status
       └──── reports ─────┴───────────── the child's own pipe ──────┘

The child (`CHILD NAME PATH FD`) reads the learner's source from its stdin (the grader read the file), loads and
grades it, and reports on its own pipe (FD) as it goes: one JSON line when it is ready, one before each case, one
with the result. Its parent is the keeper, not the grader: `os.getppid()` names the keeper, whose death the grader
sees and reports as the learner's doing; the child's own session and process group hold nothing of the grader's
(`os.killpg(0, ...)`, Ctrl-C in a terminal). Where the grader runs as root (Gradescope's containers) the child runs
as the unprivileged user `nobody`, which cannot signal the grader at all, when that user can start this Python
(`unprivileged()` checks once; elsewhere, e.g. an interpreter under a private home folder, it runs as the grader's
user). The grader waits on the child's pipe with a deadline that restarts at every line: a case (or the loading)
that runs past `time_limit` seconds has the child's group killed and becomes the failing case (the clock starts
once the child has imported what it needs, so a slow machine's start-up is not the learner's time); a child that
dies without a result is named with its exit status. Either way the answer is a `Result` with one line saying what
happened.

The learner's prints still reach the terminal (the child shares stdout and stderr); the protocol has a pipe
of its own so that nothing they print can be mistaken for it.
"""

from __future__ import annotations

import functools
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
    with open(path, "rb") as f:  # the grader reads it: an unprivileged child need not be able to
        source = f.read()
    read, write = os.pipe()
    user, pids = unprivileged(), set()  # the child's pid, once the keeper or the child has said it
    child = [sys.executable, "-c", CHILD, where or name, path, str(write)]
    try:
        plan = json.dumps({"child": child, "fd": write, "user": user})
        keeper = subprocess.Popen([sys.executable, "-c", KEEPER, plan], pass_fds=(write,), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, start_new_session=True, cwd=_cwd(user))
    finally:
        os.close(write)
    try:
        try:
            keeper.stdin.write(source)  # the child inherits the keeper's stdin and reads the file from it
            keeper.stdin.close()
        except BrokenPipeError:
            pass  # the keeper is gone already: _follow says so
        return _follow(keeper, read, name, float(time_limit), pids)
    finally:
        os.close(read)
        for pid in {keeper.pid, *pids}:  # done, timed out, or the grader interrupted: each session goes whole
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        keeper.wait()
        keeper.stdout.close()


@functools.lru_cache(maxsize=1)
def unprivileged():
    """[uid, gid] of `nobody` when this process is root and that user can start this Python and import zerosim
    (asked once, in a throw-away process); else None, and the child runs as the grader's user."""
    if os.geteuid() != 0:
        return None
    try:
        import pwd

        pw = pwd.getpwnam("nobody")
        probe = subprocess.run([sys.executable, "-c", "import zerosim.teaching.exercises"], user=pw.pw_uid,
                               group=pw.pw_gid, extra_groups=[], cwd="/", capture_output=True, timeout=600)
    except (KeyError, OSError, subprocess.SubprocessError):
        return None
    return [pw.pw_uid, pw.pw_gid] if probe.returncode == 0 else None


def _cwd(user) -> str | None:
    return None if user is None else "/"


def _follow(keeper, fd: int, name: str, limit: float, pids: set) -> Result:
    """Read the child's reports until its result; a silence longer than `limit` ends it. The keeper's own pipe says
    the child's pid (added to `pids`) and, at the end, its exit status; the keeper's death before that is the
    learner's doing (module docstring)."""
    buffer, doing, case, started, told = b"", "loading it", 0, False, b""
    watching = [fd, keeper.stdout.fileno()]
    while True:
        # no limit until the child has started (its own imports are not the learner's time), then `limit` per step
        ready, _, _ = select.select(watching, [], [], limit if started else None)
        where = "while your file was loaded" if case == 0 else f"during case {case} ({doing})"
        if not ready:  # the deadline passed with no word from the child
            at = "loading your file" if case == 0 else f"case {case} ({doing})"
            return Result(name, False, case, f"{at} did not finish within {limit:g} s: does your code loop forever? "
                                             "(zerosim exercise check --time-limit S allows more)")
        if keeper.stdout.fileno() in ready:
            chunk = os.read(keeper.stdout.fileno(), 4096)
            told += chunk
            pids.update(int(w) for w in told.split()[:1])
            if not chunk:  # the keeper ended: after the child (its status said), or killed before that
                watching.remove(keeper.stdout.fileno())
                if len(told.split()) < 2:
                    return _signalled(keeper, name, case, where)
        if fd not in ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:  # the child closed its pipe: it ended
            told += keeper.stdout.read() if keeper.stdout.fileno() in watching else b""  # the keeper's last word
            words = told.split()
            status = int(words[1]) if len(words) >= 2 else None
            how = ("an unknown status" if status is None else f"signal {signal.Signals(-status).name} (exit status "
                   f"{status})" if status < 0 else f"exit status {status}")
            return Result(name, False, case, f"the grading process ended {where}, with {how} (os._exit, a crash or "
                                             "a signal) and no result")
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            report = json.loads(line)
            if report["event"] == "ready":
                started = True
                pids.add(report["pid"])
            elif report["event"] == "case":
                case, doing = report["n"], report["what"]
            elif report["event"] == "usage":  # the file defines no such function: the learner's own mistake of usage
                raise ValueError(report["message"])
            elif report["event"] == "result":  # the child exits now; the keeper then says how, unless it was killed
                told += _rest(keeper, watching, limit)
                if len(told.split()) < 2:
                    return _signalled(keeper, name, case, where)
                return Result(name, report["passed"], report["cases"], report["counterexample"])


def _rest(keeper, watching: list, limit: float) -> bytes:
    """What the keeper still has to say, up to its end (it ends right after the child, which exits after its
    result; `limit` bounds the wait)."""
    out, fd = b"", keeper.stdout.fileno()
    while fd in watching and select.select([fd], [], [], limit)[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        out += chunk
    return out


def _signalled(keeper, name: str, case: int, where: str) -> Result:
    """The keeper (the learner's parent) ended before it could report the child's end: the learner's doing."""
    status = keeper.wait()
    how = signal.Signals(-status).name if status < 0 else f"exit status {status}"
    return Result(name, False, case, f"the process that started your code was ended ({how}) {where}: did your code "
                                     "signal its parent (os.getppid())? A solution may not signal other processes")


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
    source = sys.stdin.buffer.read()  # the grader read the file; this process may not be able to
    say(event="ready", pid=os.getpid())  # from here on the clock runs: loading the learner's file, then each case
    try:
        fn = load(source.decode("utf-8"), ex.function, path)
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


# The keeper's program: start the child in a session of its own (as `user` when given), say its pid, wait for it,
# say its exit status. It holds no end of the child's report pipe, so the grader sees that pipe close when the child
# ends; it imports nothing of zerosim (it starts in milliseconds and has nothing a learner could reach).
KEEPER = ("import json, os, subprocess, sys\n"
          "a = json.loads(sys.argv[1])\n"
          "u = a['user']\n"
          "c = subprocess.Popen(a['child'], pass_fds=(a['fd'],), start_new_session=True,\n"
          "                     **({} if u is None else {'user': u[0], 'group': u[1], 'extra_groups': []}))\n"
          "os.close(a['fd'])\n"
          "print(c.pid, flush=True)\n"
          "print(c.wait(), flush=True)\n")

# The child's program. (Not `-m zerosim.teaching.exercises._sandbox`: the package imports this module first, and runpy
# warns.)
# It ends with os._exit once the result is sent: whatever the learner's code left running (threads, atexit) is moot.
CHILD = ("import os, sys\nfrom zerosim.teaching.exercises._sandbox import _child\n"
         "_child(sys.argv[1], sys.argv[2], int(sys.argv[3]))\nsys.stdout.flush(); sys.stderr.flush()\nos._exit(0)\n")
