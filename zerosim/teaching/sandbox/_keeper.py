"""The keeper: the learner's process's parent, in a session of its own, and the one that ends everything it started.

Run as a script (`python -I _keeper.py PLAN`), it imports nothing of zerosim: it starts in milliseconds and holds
nothing a learner could reach. It starts the child (_child.py) in a session of its own, its stdout and stderr on the
grader's output pipe, the report pipe passed on, its stdin the keeper's own (the learner's source); says the child's
pid on its stdout; then waits for whichever comes first:

- the child's end: it says the child's exit status (negative: the signal), or
- the grader's word: the control pipe, whose only writer is the grader, closes — the grader is done, timed out, was
  interrupted, or died (even by SIGKILL: the kernel closes its end).

Either way it then ends the child's process group and every process the learner's code started, wherever it went
(`sweep`), removes the case folder (the grader, if it was killed, cannot), and exits. On Linux the keeper is a child
subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux 3.4): a process the learner's code leaves behind (a double fork,
os.setsid) is reparented to the keeper, not to init, so the sweep finds it among the keeper's children (their
/proc/PID/stat) and kills it, until the keeper has no child left. Elsewhere only the child's group is killed. Where the
learner's code could signal the keeper (no Landlock signal scope: _confine.py) and kills it, the grader sees the keeper
end without the child's status and says so.
"""

import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

_PR_SET_CHILD_SUBREAPER = 36


def main(plan: dict) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = None
    try:
        child = subprocess.Popen(plan["child"], pass_fds=(plan["report"],), stdout=plan["output"],
                                 stderr=plan["output"], start_new_session=True, cwd=plan["folder"], env=plan["env"])
        for fd in (plan["report"], plan["output"]):
            os.close(fd)  # the grader sees these pipes close when the child and all it started have ended
        _say(child.pid)
        ended, tell = os.pipe()
        threading.Thread(target=lambda: (child.wait(), os.write(tell, b".")), daemon=True).start()
        ready, _, _ = select.select([plan["control"], ended], [], [])
        if ended in ready:
            _say(child.returncode)
    finally:
        sweep(None if child is None else child.pid)
        shutil.rmtree(plan["folder"], ignore_errors=True)  # the grader may be gone: the case folder goes with its child


def _say(value: int) -> None:
    try:
        print(value, flush=True)
    except OSError:  # the grader is gone: nobody to tell, the sweep still runs
        pass


def sweep(first) -> None:
    """Kill the child's group, then every child of this process (what the subreaper inherited included) until
    none is left."""
    if first is not None:
        try:
            os.killpg(first, signal.SIGKILL)
        except OSError:
            pass
    while True:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no child left
        if pid == 0:  # killed, not yet gone
            time.sleep(0.005)


def _children() -> list:
    """The pids whose parent is this process (Linux's /proc; elsewhere none: the group's kill is all there is)."""
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after the command's name, which may hold anything
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == me:  # state, ppid, ...
            found.append(int(entry))
    return found


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
