"""`StepCache`: the per-shape steps an operator keeps (plan once, run per step), least recently used dropped first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Hashable


class StepCache(OrderedDict):
    """The steps an operator keeps, one per shape (plan once, run per step): a dict bounded to `size`
    entries, the least recently used dropped first (a dropped step's ttnn program stays in the
    device's program cache)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_or_make(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The step of `key`, made by ``make()`` and kept on a miss; the most recently used either way."""
        step = self.get(key)
        if step is None:
            step = make()
            self[key] = step
            while len(self) > self.size:
                self.popitem(last=False)
        else:
            self.move_to_end(key)
        return step
