"""Hypothesis profiles: derandomized by default so a test run is repeatable (CI uses the default).

HYPOTHESIS_PROFILE=thorough runs many more (random) examples for a deeper local search.
"""

import os

# One BLAS thread: OpenBLAS splits any product over M*N*K > 262,144 across threads, which on a shared
# 2-core machine made a 128x32x128 product take ~1000x longer. Set before numpy is first imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from hypothesis import HealthCheck, settings  # noqa: E402

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
def pytest_collection_modifyitems(config, items):
    import json

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
