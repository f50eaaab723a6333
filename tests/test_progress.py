"""zerosim.progress.watched: whether someone is likely watching, so that a bar is drawn (`progress`, and
zerosim.train's bar). A terminal or a Jupyter kernel is; a pipe is not, nor a process that only imported ipykernel (a
test runner's worker, once a test before imported it: CI drew bars into captured stderr then)."""

import os
import sys
import types

import pytest
from helpers import HANG_TIMEOUT

from zerosim import progress


class _Pipe:
    """A stderr that is no terminal."""

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class _Terminal(_Pipe):
    def isatty(self) -> bool:
        return True


def test_a_pipe_is_not_watched_and_a_terminal_is(monkeypatch):
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(sys, "stderr", _Pipe())
    assert progress.watched() is False
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert progress.watched() is True


def test_a_process_that_only_imported_ipykernel_is_not_watched(monkeypatch):
    pytest.importorskip("ipykernel")  # the notebooks extra
    monkeypatch.setattr(sys, "stderr", _Pipe())
    assert "ipykernel" in sys.modules
    assert progress.watched() is False  # IPython's shell: none in this process


def test_a_kernel_is_watched(monkeypatch):
    ipython = pytest.importorskip("IPython")
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setattr(sys, "stderr", _Pipe())
    monkeypatch.setattr(ipython, "get_ipython", lambda: types.SimpleNamespace(kernel=object()))  # a kernel's shell
    assert progress.watched() is True
    monkeypatch.setattr(ipython, "get_ipython", lambda: types.SimpleNamespace())  # IPython in a terminal, piped
    assert progress.watched() is False


def test_a_bar_no_one_sees_hands_the_loop_back_and_loads_no_tqdm(monkeypatch):
    """Where no bar shows, `progress` returns the iterable itself (what a disabled tqdm yields), and a manual bar
    (`total`) is a Hidden one that does what a disabled tqdm bar does, without importing tqdm (tqdm.auto brings
    asyncio: ~0.03 s of a command that shows none); a bar that shows is still tqdm's."""
    import subprocess

    steps = range(3)
    assert progress.progress(steps, "steps", enabled=False) is steps
    code = ("import sys\nfrom zerosim.progress import progress\nassert list(progress(range(3), 'x')) == [0, 1, 2]\n"
            "bar = progress(total=4, desc='y')\nbar.reset(total=5)\nbar.update(2)\nbar.set_postfix(loss='1')\n"
            "bar.close()\nprint('tqdm' in sys.modules, bar.n, bar.total, bar.disable)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)  # stderr: a pipe
    assert out.stdout.split() == ["False", "0", "5", "True"], out.stdout + out.stderr
    from tqdm import tqdm

    disabled = tqdm(total=4, disable=True)  # what the Hidden bar stands for, as tqdm itself counts it
    disabled.reset(total=5)
    disabled.update(2)
    assert (disabled.n, disabled.total, disabled.disable) == (0, 5, True)  # a disabled bar does not count
    monkeypatch.setattr(sys, "stderr", _Pipe())
    bar = progress.progress(total=3, desc="manual", enabled=True)
    bar.update(3)
    bar.close()
    assert isinstance(bar, tqdm)


def test_a_bar_that_shows_starts_no_thread():
    """A bar leaves the process with the one thread it had: `plan --jobs N` in a terminal draws its bar, then forks its
    workers (analysis/planner/_jobs.py), and a fork beside another thread may deadlock in the child (Python 3.12+
    warns "This process is multi-threaded, use of fork() may lead to deadlocks"). tqdm starts a monitor thread with
    its first bar unless told not to; in a fresh process, so that no bar drawn before (by tqdm's own setting) hides
    it. Counted by the system (the process's tasks) beside Python's own count, after a fork, as Python counts: BLAS's
    threads aside (OpenBLAS stops its pool before a fork, in its pthread_atfork handler)."""
    import subprocess

    code = ("import os, sys, threading\nfrom zerosim.progress import progress\n"
            "shown = list(progress(range(3), 'x', enabled=True))\nbar = progress(total=2, desc='y', enabled=True)\n"
            "bar.update(2)\nbar.close()\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\n"
            "print(shown == [0, 1, 2], threading.active_count(), len(os.listdir('/proc/self/task')))")
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("the process's tasks are counted in Linux's /proc")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=HANG_TIMEOUT)  # reached only by a child that hangs
    assert out.stdout.split() == ["True", "1", "1"], out.stdout + out.stderr
