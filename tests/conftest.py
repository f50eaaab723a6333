"""Hypothesis profiles: derandomized by default so a test run is repeatable (CI uses the default).

HYPOTHESIS_PROFILE=thorough runs many more (random) examples for a deeper local search.
"""

import os

from hypothesis import HealthCheck, settings

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
