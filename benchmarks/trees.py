"""Two source trees' contenders in one run, in turns: a worker process per tree (`--tree DIR` of
benchmarks/portable_step.py, yardstick.py and plan.py).

Why workers: one process imports one zerosim, so an A/B of two trees (main against the commit before a change) used
to be a script run twice, one tree after the other, and on a shared machine the load moved between the runs: a 5 %
change drowned. Here each tree's contenders are built and stepped in a process of their own, started with
PYTHONPATH = that tree (this file run as a script: its own folder, benchmarks/, comes first on sys.path, so the
contenders' code is this tree's benchmarks and only zerosim differs). This tree's contenders get a worker too, so
both sides pay the same way. Each worker is fed the same inputs by the script (model widths, N, parameters, batches
and seeds; plan.py's: the README's job); the script steps one contender at a time in the rounds' shuffled order
(`in_turns`), so a busy spell falls on both trees.

How the time is taken, inside the worker: first the portable kernels' memo of operands is emptied, untimed (peers.py
`forget_kept_operands`); then `time.process_time()` around the contender's step alone (the worker's CPU seconds, all
its threads; BLAS pinned to one thread there too, set before NumPy loads), plus the CPU seconds, user + system, of any
process the step started and waited for (`resource.getrusage(RUSAGE_CHILDREN)`: plan.py's command in a fresh
process, its imports and the interpreter's start included). The parent waits on a pipe while a worker steps; the
pickling of requests and answers falls outside the timed span. Each worker says which tree it imported (peers.py
`measured_tree`, asked inside it).

The protocol (`Worker` asks, `Served` answers): pickled requests on the worker's stdin, answers on a copy of its
stdout (what the contenders print goes to stderr). ("build", module, function, kwargs, drop_buffers):
`module.function(**kwargs)` returns a `Side`; the answer is the tree imported. ("names",): the contenders' names.
("step", name): the answer is the step's CPU seconds (`Side.after` runs after it, untimed). ("fact", name): a
`Side.facts` value, untimed (e.g. the masters, for a bit check). ("stop",), or the end of stdin: the worker ends. An
exception in the worker comes back as its traceback, and the parent raises it naming the tree.

A --tree path is checked by `source_tree` (the scripts' argparse `type`) while the arguments are parsed: a refusal
names the flag and the path, before any work.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads, in the worker as in the script

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import importlib  # noqa: E402
import pickle  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from typing import Callable  # noqa: E402


_CACHE = []  # this process's temporary folder of compiled bytecode (`compiled_child`), made at its first ask


def compiled_child() -> tuple:
    """(argv, env) to start a child Python with: this interpreter, reading and writing compiled bytecode in a temporary
    folder of this process's (`-X pycache_prefix`: nothing written into a source tree), with no PYTHONDONTWRITEBYTECODE
    in its environment. Where that variable is set (this project's machine sets it), a child importing a tree without
    __pycache__ (a fresh worktree of the commit before) compiled every module it imported, ~0.25-0.5 s a command that
    no change made, while a tree that had one read it (benchmarks/README.md, the twenty-fourth round); with one cache a
    run, filled by an untimed first round, both read compiled bytecode, as an installed package's users do."""
    if not _CACHE:
        import tempfile

        _CACHE.append(tempfile.mkdtemp(prefix="zerosim-pycache-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return [sys.executable, "-X", f"pycache_prefix={_CACHE[0]}"], env


def source_tree(path: str) -> str:
    """`path` where it can be a --tree (the scripts' argparse `type`: a refusal is printed as "argument --tree:
    <path>: ..." and exits 2 before any work), else argparse's error saying why."""
    import argparse

    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{path}: no such folder")
    if not os.path.isdir(os.path.join(path, "zerosim")):
        raise argparse.ArgumentTypeError(f"{path}: no zerosim/ folder there (a source tree, e.g. a checkout of the "
                                         "commit before)")
    return path


def rounds(text: str) -> int:
    """`text` as a count of timed rounds (the scripts' argparse `type` for --repeats: a refusal is printed as
    "argument --repeats: ..." and exits 2 before any work; the medians and quartiles need one round at least)."""
    import argparse

    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a whole number of rounds") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"{count}: at least 1 (the timed rounds, after one that warms up)")
    return count


@dataclasses.dataclass
class Side:
    """What a worker holds: its contenders' steps (name -> a call of no arguments, timed), what runs after each step,
    untimed (`after(name, what the step returned)`: a trace cleared, the losses checked), and facts asked by name
    between steps, untimed."""

    steps: dict
    after: Callable | None = None
    facts: dict = dataclasses.field(default_factory=dict)


class Worker:
    """A process that imports the zerosim of `tree` and steps the contenders a script's function builds there:
    `module.function(**kwargs)`, the module found in this file's folder (benchmarks/), returning a `Side`.
    `drop_buffers`: the portable kernels' scratch buffers let go before every step too (`forget_kept_operands`).
    `tree`: the zerosim it imported, as the worker says; `names`: the contenders' names."""

    def __init__(self, tree: str, module: str, function: str, drop_buffers: bool = False, **kwargs):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))  # BLAS's threads: set above, before numpy loads
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        self.given = tree
        try:
            self.tree = self._ask(("build", module, function, kwargs, drop_buffers))
            self.names = self._ask(("names",))
        except BaseException:
            self.close()  # a build that failed leaves no process behind
            raise

    def _ask(self, request):
        pickle.dump(request, self.proc.stdin)
        self.proc.stdin.flush()
        try:
            status, answer = pickle.load(self.proc.stdout)
        except EOFError:
            raise RuntimeError(f"the worker for {self.given} ended (its stderr above says why)") from None
        if status != "ok":
            raise RuntimeError(f"in the worker for {self.given}:\n{answer}")
        return answer

    def step(self, name) -> float:
        """CPU seconds of one step of contender `name`, measured in the worker (its own and its children's)."""
        return self._ask(("step", name))

    def fact(self, name):
        """The value of the Side's fact `name`, asked in the worker (untimed)."""
        return self._ask(("fact", name))

    def close(self):
        if self.proc.poll() is None:
            try:
                pickle.dump(("stop",), self.proc.stdin)
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        self.proc.wait(timeout=60)


@contextlib.contextmanager
def started(trees: dict, module: str, function: str, drop_buffers: bool = False, **kwargs):
    """{side: a Worker of that side's tree}, each building its contenders with `module.function(**kwargs)`; all of
    them closed on the way out, however it goes (a build that fails closes those already started)."""
    workers = {}
    try:
        for side, tree in trees.items():
            workers[side] = Worker(tree, module, function, drop_buffers, **kwargs)
        yield workers
    finally:
        for w in workers.values():
            w.close()


def in_turns(workers: dict, repeats: int, seed: int = 0, after_round: Callable | None = None) -> dict:
    """{(side, contender): [CPU s of each timed round]}: every worker's every contender once a round, all of them in
    one new seeded order each round; round 0 warms up, untimed. `after_round(round)` runs after each round (the
    scripts' bit checks)."""
    cpu = {(side, name): [] for side, w in workers.items() for name in w.names}
    order = random.Random(seed)
    for round_ in range(repeats + 1):
        turns = list(cpu)
        order.shuffle(turns)
        for side, name in turns:
            seconds = workers[side].step(name)
            if round_:
                cpu[side, name].append(seconds)
        if after_round is not None:
            after_round(round_)
    return cpu


def quartiles(xs) -> tuple:
    """(q1, q3) of xs (the one value twice for one)."""
    xs = sorted(xs)
    return tuple(statistics.quantiles(xs, n=4)[::2]) if len(xs) > 1 else (xs[0], xs[0])


def compared(cpu: dict, name, this: str = "this", that: str = "that") -> tuple:
    """(this tree's median s, that tree's, this ÷ that of the medians, (q1, q3) of each round's own this ÷ that)
    for contender `name`."""
    mine, theirs = cpu[this, name], cpu[that, name]
    rounds = [a / b for a, b in zip(mine, theirs)]
    return statistics.median(mine), statistics.median(theirs), statistics.median(mine) / statistics.median(theirs), \
        quartiles(rounds)


ALIKE = 0.05  # how far apart (as a fraction) two workers may read the same code before a run says so


def workers_apart(name: str, ratio: float) -> str | None:
    """A warning when contender `name`, the same code in both workers, reads more than ALIKE apart between them
    (this ÷ that of the medians `ratio`), else None. On this project's 2-core VM a worker's 10M native step read
    243-308 ms against 253 in a fresh process of its own (2026-11-26), and which worker ran slow followed neither the
    tree nor the order they started in; every ratio ÷ that worker's own yardstick then moved by up to 0.1. Read such a
    run's this ÷ that rows with care, rerun, or run each tree alone (no --tree), one after the other."""
    if 1 - ALIKE <= ratio <= 1 + ALIKE:
        return None
    return (f"note: the two workers' {name} steps, the same code in both trees, read {ratio:.3f} apart (more than "
            f"{ALIKE:.0%}): each tree's ratios ÷ {name} are taken in unlike workers; rerun, or run each tree alone")


class Served:
    """The worker's side of the protocol (module docstring): one method per request, by its name."""

    def __init__(self):
        from peers import forget_kept_operands, measured_tree

        self.forget, self.measured_tree = forget_kept_operands, measured_tree
        self.side, self.drop = None, False

    def build(self, module, function, kwargs, drop_buffers):
        self.side, self.drop = getattr(importlib.import_module(module), function)(**kwargs), drop_buffers
        return self.measured_tree()

    def names(self):
        return list(self.side.steps)

    def step(self, name):
        self.forget(self.drop)  # untimed: no contender finds what another kept
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        c = time.process_time()
        out = self.side.steps[name]()
        seconds = time.process_time() - c
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the processes the step started and waited for
        seconds += after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if self.side.after is not None:
            self.side.after(name, out)
        return seconds

    def fact(self, name):
        return self.side.facts[name]()


REQUESTS = ("build", "names", "step", "fact")  # Served's methods a request may name; ("stop",) ends the loop


def serve() -> None:
    """The worker's loop (this file run as a script): a request in, ("ok", answer) or ("error", traceback) out."""
    channel = os.fdopen(os.dup(1), "wb")  # the answers; what the contenders print goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests, served = sys.stdin.buffer, Served()
    while True:
        try:
            kind, *args = pickle.load(requests)
        except EOFError:
            return
        if kind == "stop":
            return
        try:
            if kind not in REQUESTS:
                raise ValueError(f"unknown request {kind!r}")
            reply = ("ok", getattr(served, kind)(*args))
        except Exception:
            reply = ("error", traceback.format_exc())
        pickle.dump(reply, channel)
        channel.flush()


if __name__ == "__main__":
    serve()  # this file's folder is first on sys.path: the scripts and peers.py are this tree's benchmarks
