"""`ttdecode.testing.transfers.count_calls` (the mock tests count ``api.validate_decode`` with it): it
counts the calls that look the function up on its owner, `clear` restarts the count, and leaving the
block puts the original back."""

from __future__ import annotations

import types

from ttdecode.testing.transfers import count_calls


def test_count_calls_counts_restarts_and_restores() -> None:
    def double(x: int) -> int:
        return 2 * x

    owner = types.SimpleNamespace(double=double)
    with count_calls(owner, "double") as count:
        assert owner.double(3) == 6 and owner.double(4) == 8
        assert count.calls == 2
        count.clear()
        owner.double(1)
        assert count.calls == 1
    assert owner.double is double
    owner.double(5)
    assert count.calls == 1
