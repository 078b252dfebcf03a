"""How every property-based test of hostile input is run: ``SWEPIPE_FUZZ_EXAMPLES`` examples a property (a
bounded number by default, so the test run stays fast; scripts/fuzz_replies.py --examples N runs them long), and
the ``fuzz`` marker, which is how the script finds them."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 40


def examples() -> int:
    return int(os.environ.get("SWEPIPE_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))


def fuzz(test):
    """A property-based test of hostile input: marked ``fuzz``, with the run's number of examples; derandomized
    in the default run (the same examples every time, so CI cannot flake), random in a long run."""
    count = examples()
    configured = settings(max_examples=count, deadline=None, derandomize=count <= DEFAULT_EXAMPLES,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])(test)
    return pytest.mark.fuzz(configured)
