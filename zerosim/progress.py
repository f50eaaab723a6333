"""Progress bars for long runs: on stderr in a terminal, as a widget in Jupyter, silent otherwise.

    for stage in progress(range(4), "stages"):   # shown only where someone is watching
        ...

Scripts that parse output (`--json`, a pipe, a CI log) see nothing: the bar is on when stderr is a
terminal or the code runs in a Jupyter kernel, unless `enabled` says otherwise. tqdm.auto picks the
terminal or the notebook rendering. A bar appears only once its loop has run for DELAY seconds: the sub-second
loops of the notebooks (a meta-backend step per stage) leave no bar, widget or "0%|" line in their outputs.
"""

from __future__ import annotations

import math
import os
import sys


def delay_from_environment() -> float:
    """The seconds before a bar is drawn (tqdm's `delay`): a loop that ends sooner shows nothing.
    $ZEROSIM_PROGRESS_DELAY sets it (0: every bar at once, which the tests use: whether a bar shows must not depend on
    the machine's speed), a number >= 0 (inf: never), else a clear error naming the variable; 1 s without it."""
    text = os.environ.get("ZEROSIM_PROGRESS_DELAY")
    if text is None:
        return 1.0
    try:
        delay = float(text)
    except ValueError:
        delay = math.nan
    if not delay >= 0:  # NaN too
        raise ValueError(f"ZEROSIM_PROGRESS_DELAY={text!r}: the seconds before a progress bar is drawn must be a "
                         "number >= 0 (0: at once)")
    return delay


DELAY = delay_from_environment()


def watched() -> bool:
    """True when a person is likely watching: stderr is a terminal, or this is a Jupyter kernel. A process that only
    imported ipykernel (a test runner's worker, after a test that did) is no kernel: IPython's shell there is none."""
    if sys.stderr.isatty():
        return True
    if "ipykernel" not in sys.modules:  # (no kernel can run without it: IPython is not imported for nothing)
        return False
    from IPython import get_ipython

    return getattr(get_ipython(), "kernel", None) is not None


def progress(iterable=None, desc: str = "", total: int | None = None, enabled: bool | None = None, unit: str = "it"):
    """A tqdm bar over `iterable` (or a manual one with `total`), disabled unless `enabled` or `watched()`. Where no
    bar shows, tqdm is not imported (tqdm.auto brings asyncio: ~0.03 s of a command that shows no bar, `zerosim
    replay` or `zerosim train` piped, a notebook's sub-second loop): `iterable` itself comes back (what a disabled bar
    yields), or for a manual bar a `Hidden` one."""
    show = watched() if enabled is None else enabled
    if not show:
        return iterable if iterable is not None else Hidden(total)
    return _bar_class()(iterable, desc=desc, total=total, disable=False, unit=unit, leave=False, file=sys.stderr,
                        delay=DELAY, miniters=1)


_BAR = None  # tqdm.auto's bar without its monitor thread: `_bar_class`


def _bar_class():
    """tqdm.auto's bar (the terminal's or the notebook's), made to start no thread. tqdm starts a monitor thread with
    its first bar (`tqdm.monitor_interval`, 10 s), which wakes to redraw a bar whose dynamic `miniters` has grown too
    large for its slowing loop; with `miniters=1` (ours: each update looks at the clock, a call per configuration or
    figure) nothing is left for it to do. A bar drawn before `--jobs` forks its workers (analysis/planner/_jobs.py)
    must leave the process with one thread: a fork beside another thread may deadlock in the child (a lock the other
    thread held stays held there), and Python 3.12+ warns of it. A subclass, so the user's own bars keep tqdm's
    setting; it shares tqdm's set of bars (`_instances`), so nested bars still stack."""
    global _BAR
    if _BAR is None:
        from tqdm.auto import tqdm

        _BAR = type(tqdm.__name__, (tqdm,), {"monitor_interval": 0, "__module__": __name__})
    return _BAR


class Hidden:
    """A manual bar no one sees: what a disabled tqdm bar does for the calls the commands make (nothing: it neither
    counts nor draws; `disable` is True, so a caller prints its lines itself)."""

    disable = True

    def __init__(self, total: int | None = None):
        self.total, self.n = total, 0

    def update(self, n: int = 1) -> None:
        pass

    def reset(self, total: int | None = None) -> None:
        self.n = 0
        if total is not None:
            self.total = total

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass
