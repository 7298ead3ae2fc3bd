"""Suite-wide settings: reproducible property tests and quiet ttnn logging."""

from __future__ import annotations

import os

from hypothesis import settings

# CI runs must be reproducible: the same examples every run, no example database on disk.
settings.register_profile("ttdecode", derandomize=True, database=None)
settings.load_profile("ttdecode")

# ttnn logs every mock-cluster open/close at INFO; keep the test output readable.
os.environ.setdefault("TT_LOGGER_LEVEL", "error")
