"""Suite-wide settings: reproducible property tests and quiet ttnn logging."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs must be reproducible: the same examples every run, no example database on disk.
# TTDECODE_HYPOTHESIS_SEARCH=1 draws fresh examples instead (to hunt for bugs locally).
settings.register_profile("ttdecode", derandomize=True, database=None)
settings.register_profile("search", derandomize=False, database=None)
settings.load_profile("search" if os.environ.get("TTDECODE_HYPOTHESIS_SEARCH") == "1" else "ttdecode")

# ttnn logs every mock-cluster open/close at INFO; keep the test output readable.
os.environ.setdefault("TT_LOGGER_LEVEL", "error")


import pytest


@pytest.fixture(scope="session")
def ttnn():
    """The real ttnn module (with the mock cluster descriptor when no device is present).

    Skips, with the reason, where ttnn cannot be imported; `make test` sets
    TTDECODE_REQUIRE_TTNN=1 (it installs ttnn), and then a failed import fails the test instead.
    """
    from ttdecode.ttnn_env import import_ttnn, ttnn_unavailable_reason

    mod = import_ttnn()
    if mod is None:
        reason = f"ttnn cannot be imported here: {ttnn_unavailable_reason()}"
        if os.environ.get("TTDECODE_REQUIRE_TTNN") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return mod
