"""Hypothesis profiles: derandomized by default so a test run is repeatable (CI uses the default).

HYPOTHESIS_PROFILE=thorough runs many more (random) examples for a deeper local search.
"""

import os

# One BLAS thread: OpenBLAS splits any product over M*N*K > 262,144 across threads, which on a shared
# 2-core machine made a 128x32x128 product take ~1000x longer. Set before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402


def _child_bytecode_folder() -> tuple | None:
    """Where PYTHONDONTWRITEBYTECODE is set (this project's machine sets it), every Python the suite starts (a
    `zerosim` command, an MPI rank, a notebook's kernel, an xdist worker) compiled each zerosim module it imported,
    every time: `zerosim replay` took 0.44 s instead of 0.21 s, half of it compiling, and the suite starts hundreds of
    them. Here the session's children read and write compiled bytecode in one temporary folder of the session's own
    (PYTHONPYCACHEPREFIX: nothing is written into a source tree, as the variable asks), removed when the session ends
    (`pytest_unconfigure`). Compiled bytecode is the source's own meaning: no test's outcome depends on it. The folder
    is made by the process that starts the session (a worker inherits it). Returns (the folder, the variable's value,
    put back at the end); None where the variable is unset (children write bytecode as Python does by default) or a
    prefix is already chosen."""
    if (os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("PYTHONDONTWRITEBYTECODE")
            or os.environ.get("PYTHONPYCACHEPREFIX")):
        return None
    import tempfile

    folder = tempfile.mkdtemp(prefix="zerosim-test-bytecode-")
    asked = os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    return folder, asked


_BYTECODE = _child_bytecode_folder()  # (the folder, the variable's own value) or None


def pytest_configure(config):
    # An xdist worker holds a thread of execnet's beside the one that runs the tests (the process's tasks count two,
    # threading knows one), so each `--jobs` fork in these tests meets Python 3.12+'s "This process (pid=...) is
    # multi-threaded, use of fork() may lead to deadlocks in the child": the runner's thread, not the product's. A
    # `zerosim` process forks from one thread (tests/test_progress.py checks it in a fresh process, after its bar).
    if os.environ.get("PYTEST_XDIST_WORKER"):
        config.addinivalue_line("filterwarnings",
                                r"ignore:This process \(pid=\d+\) is multi-threaded:DeprecationWarning")


def pytest_unconfigure(config):
    if _BYTECODE is not None:
        import shutil

        folder, asked = _BYTECODE
        os.environ.pop("PYTHONPYCACHEPREFIX", None)
        os.environ["PYTHONDONTWRITEBYTECODE"] = asked  # as the session found it
        shutil.rmtree(folder, ignore_errors=True)

# ZEROSIM_TEST_WORKERS=k: every `Cluster(...)` that does not name its workers gets k (issue 28: each
# bit-equality property of the suite, every stage against the oracle, the fixtures' trace bytes, MPI against
# the simulator, rerun with the ranks' compute on k threads). Unset, the library's default (1) stays.
_workers = os.environ.get("ZEROSIM_TEST_WORKERS")
if _workers:
    import inspect  # noqa: E402

    from zerosim.cluster import Cluster
    from zerosim.cluster._pool import check_workers  # noqa: E402

    _names = [p for p in inspect.signature(Cluster.__init__).parameters if p not in ("self", "world_size")]
    _defaults = list(Cluster.__init__.__defaults__)
    _defaults[_names.index("workers")] = check_workers(_workers if _workers == "auto" else int(_workers))
    Cluster.__init__.__defaults__ = tuple(_defaults)

settings.register_profile(
    "ci",
    derandomize=True,  # the same examples every run: a red CI is reproducible on any machine
    max_examples=40,
    deadline=None,  # tests must not depend on the machine being fast
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# -- the bad-input census: the table of bad-input cases by category (docs/explanation/testing.md) comes from these marks
# `@pytest.mark.bad_input("category")` marks a test whose cases feed bad input and check the clear error;
# `unchanged=True` when the test also checks that nothing changed (state, files) before the error.
# tests/test_bad_input_table.py counts every collected case per category (parametrized cases each count).
# -- heavy tests: over the 20 s a test of the README's command may take (the README's `zerosim figures`, every figure
# at once). The README's command skips them, saying so; .ci/heavy runs them in CI (`pytest --heavy -m heavy`).
def pytest_addoption(parser):
    parser.addoption("--heavy", action="store_true",
                     help="run the tests marked heavy (each over 20 s on a busy 2-core machine; CI's .ci/heavy)")


def _skip_heavy(config, items) -> None:
    if config.getoption("--heavy"):
        return
    skip = pytest.mark.skip(reason="heavy (over 20 s): .ci/heavy runs it, or pytest --heavy -m heavy")
    for item in items:
        if item.get_closest_marker("heavy") is not None:
            item.add_marker(skip)


def pytest_collection_modifyitems(config, items):
    import json

    _skip_heavy(config, items)
    _longest_first(items)
    path = os.environ.get("ZEROSIM_BAD_INPUT_CENSUS")
    if not path:
        return
    census = []
    for item in items:
        mark = item.get_closest_marker("bad_input")
        if mark is not None:
            census.append(
                {"test": item.nodeid, "category": mark.args[0], "unchanged": bool(mark.kwargs.get("unchanged"))}
            )
    with open(path, "w") as f:
        json.dump(census, f)


# -- the bad-input outcomes: with ZEROSIM_BAD_INPUT_OUTCOMES set to a path, every bad-input case that ran is classified
# as its answer was: clear (the test passed: the clear error it asserts came), silent (pytest.raises saw nothing
# raised: the input was accepted), raw (any other failure: another exception, a message without the words, a setup
# that failed), or not run (skipped). The table by what the input reaches counts them (tests/test_bad_input_table.py),
# so a hole shows in its row. Workers tag their reports; the process that prints the results (the controller under
# pytest -n) writes them when the session ends.
_BAD_INPUT_OUTCOMES = {}  # nodeid -> {"test", "category", "unchanged", "outcome"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    mark = item.get_closest_marker("bad_input")
    if mark is not None and os.environ.get("ZEROSIM_BAD_INPUT_OUTCOMES"):
        report.user_properties.append(("bad_input", [mark.args[0], bool(mark.kwargs.get("unchanged"))]))


def bad_input_outcome(report) -> str | None:
    """What one phase's report says of a bad-input case: "clear", "silent", "raw", "not run", or None (no verdict
    from this phase: a setup or teardown that passed)."""
    if report.skipped:
        return "not run"
    if report.failed:
        return "silent" if report.when == "call" and "DID NOT RAISE" in str(report.longrepr) else "raw"
    return "clear" if report.when == "call" else None


def pytest_runtest_logreport(report):
    tag = dict(report.user_properties).get("bad_input")
    verdict = bad_input_outcome(report) if tag else None
    if verdict is None:
        return
    seen = _BAD_INPUT_OUTCOMES.get(report.nodeid)
    if seen is None or seen["outcome"] == "clear":  # a teardown that fails after a clear call makes the case raw
        _BAD_INPUT_OUTCOMES[report.nodeid] = {"test": report.nodeid, "category": tag[0], "unchanged": tag[1],
                                              "outcome": verdict}


def pytest_sessionfinish(session):
    path = os.environ.get("ZEROSIM_BAD_INPUT_OUTCOMES")
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        import json

        with open(path, "w") as f:
            json.dump(list(_BAD_INPUT_OUTCOMES.values()), f)


# -- pytest -n (pytest-xdist): two workers, each test once, the longest first ------------------------------------------
# Tests that share one expensive run in a process go to one worker, as a unit: a notebook's three tests read one
# execution of it (test_notebooks.executed), the browser's tests one browser and one CLI run per setting, the hostile
# cases and their table one run of each case (test_hostile_table.OUTCOMES). file -> "file" (the whole file on one
# worker) or "param" (one unit per parameter id: per notebook). Every other test is dealt out on its own. xdist's own
# `--dist loadgroup` would read xdist_group marks, but under pytest 9.2 it silently stops grouping (pytest-xdist#1386:
# it rewrites a node id field that pytest no longer reads), so the groups are named here, by node id.
XDIST_GROUPS = {"tests/test_notebooks.py": "param", "tests/test_explore_browser.py": "file",
                "tests/test_hostile_table.py": "file"}
# The files of the longest tests, run first (their own order kept): a 2-minute test that starts last keeps the
# other worker idle for its length (measured on 2026-11-23 with --durations: 133 s, 31 s, and files of 120-130 s).
LONGEST_FIRST = ("tests/test_readme_commands.py", "tests/test_checkpoint_kill.py", "tests/test_grader_survives.py",
                 "tests/test_assignments.py")


def xdist_scope(nodeid: str) -> str:
    """The unit a test is scheduled in under pytest -n: its group (XDIST_GROUPS), else the test itself."""
    path = nodeid.split("::", 1)[0]
    how = XDIST_GROUPS.get(path)
    if how == "file":
        return path
    if how == "param" and nodeid.endswith("]"):
        return f"{path}[{nodeid.rsplit('[', 1)[1]}"
    return nodeid


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # optional: without pytest-xdist the hook does not exist
def pytest_xdist_make_scheduler(config, log):
    """`pytest -n N` (--dist load, xdist's default): xdist's scope scheduler over the units of xdist_scope."""
    if config.getvalue("dist") != "load":
        return None  # a --dist the caller chose
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return Grouped(config, log)


def pytest_ignore_collect(collection_path, config):
    """`-m pinned` alone (the pinned lanes, the before-stop hook): a test file that never names the mark cannot hold
    a pinned test, so it is not imported: 15 of ~195 files, collection 2 s instead of 8.6. ZEROSIM_COLLECT_ALL=1
    collects everything (tests/test_pinned_selection.py compares the two selections)."""
    if (config.getoption("markexpr", "") == "pinned" and not os.environ.get("ZEROSIM_COLLECT_ALL")
            and collection_path.suffix == ".py" and collection_path.name.startswith("test_")
            and "pinned" not in collection_path.read_text(encoding="utf-8").lower()):
        return True
    return None


def pytest_collection_finish(session):
    """Without pytest-xdist, the session's notebooks start running side by side now (test_notebooks.start); under
    xdist each worker takes them one at a time as they are dealt, and a worker cannot know which are its own."""
    if session.config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    notebooks = [item for item in session.items if item.nodeid.startswith("tests/test_notebooks.py::")
                 and "path" in getattr(getattr(item, "callspec", None), "params", {})]
    paths = list(dict.fromkeys(item.callspec.params["path"] for item in notebooks))
    if len(paths) > 1:
        notebooks[0].module.start(paths)


def _longest_first(items) -> None:
    first = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::", 1)[0], len(first)))  # stable: the rest as collected
