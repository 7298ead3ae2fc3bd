"""Count ttnn's host <-> device data moves: one counter for the mock tests and the benchmarks.

`count_transfers()` wraps ttnn's transfer functions (`TRANSFER_FUNCTIONS`) and ``ttnn.Tensor.cpu`` /
``ttnn.Tensor.to`` for the length of a ``with`` block and records, by name, every call that moves
data between host and device; on leaving the block the originals are put back.

What counts as a move (outermost call only: ``to_torch`` of a device tensor calls ``from_device``
inside, and that is one move, named ``to_torch``):

* ``from_torch`` given a device (``device=``, keyword-only); without one it only converts on the
  host (e.g. a tensor then written by ``copy_host_to_device_tensor``, which counts);
* ``to_torch`` and ``Tensor.cpu`` of a tensor on a device; ``Tensor.to(device, ...)`` (not
  ``Tensor.to(layout)``, a conversion);
* ``to_device``, ``from_device``, ``copy_host_to_device_tensor``, ``copy_device_to_host_tensor``:
  always.

    with count_transfers() as log:
        ...            # log.moves: ["from_torch", ...] in call order
        log.clear()    # e.g. after the warm-up steps
        ...
    assert log.moves == []

`count_calls(owner, name)` counts the calls of one function the same way (e.g. how often
``ttdecode.api.validate_decode`` ran: its cached calls skip it).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Callable, Iterator, Optional

import torch

__all__ = ["TRANSFER_FUNCTIONS", "TENSOR_METHODS", "TransferLog", "count_transfers", "CallCount", "count_calls",
           "decode_steps"]

#: ttnn's module-level functions that move data between host and device.
TRANSFER_FUNCTIONS = ("from_torch", "to_torch", "to_device", "from_device", "copy_host_to_device_tensor",
                      "copy_device_to_host_tensor")
#: ttnn.Tensor's methods that move data (recorded as "Tensor.<name>").
TENSOR_METHODS = ("cpu", "to")


class TransferLog:
    """The moves recorded inside a `count_transfers` block (names in call order)."""

    def __init__(self) -> None:
        self.moves: list[str] = []
        self.counting = True  # set False to ignore moves for a while (e.g. a test's own uploads)
        self._depth = 0

    def counts(self) -> dict[str, int]:
        """{name: calls} of the moves recorded so far."""
        return dict(Counter(self.moves))

    def clear(self) -> None:
        """Forget the moves recorded so far."""
        self.moves.clear()

    def take(self) -> list[str]:
        """The moves recorded since the last take (or clear), forgotten here."""
        out = list(self.moves)
        self.moves.clear()
        return out

    def __len__(self) -> int:
        return len(self.moves)


def _is_move(ttnn: Any, name: str, args: tuple, kwargs: dict) -> bool:
    """Whether this call moves data between host and device (module doc)."""
    if name == "from_torch":
        return kwargs.get("device") is not None  # keyword-only in ttnn 0.81.1
    if name in ("to_torch", "Tensor.cpu"):
        return bool(args) and bool(ttnn.is_tensor_storage_on_device(args[0]))
    if name == "Tensor.to":  # to(device, ...) moves; to(target_layout) converts where the tensor is
        target = args[1] if len(args) > 1 else kwargs.get("device", kwargs.get("target_layout"))
        return not isinstance(target, ttnn.Layout)
    return True


def _wrap(ttnn: Any, log: TransferLog, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        if log._depth == 0 and log.counting and _is_move(ttnn, name, args, kwargs):
            log.moves.append(name)
        log._depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            log._depth -= 1

    counted.__wrapped__ = fn  # type: ignore[attr-defined]
    return counted


@contextlib.contextmanager
def count_transfers(ttnn: Optional[Any] = None) -> Iterator[TransferLog]:
    """Record ttnn's host <-> device moves inside the block (module doc); `ttnn` defaults to the
    imported ttnn module. Functions this ttnn version lacks are skipped."""
    if ttnn is None:
        import ttnn  # noqa: PLW0621 - the real module unless one is given
    log = TransferLog()
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name in TRANSFER_FUNCTIONS:
            if hasattr(ttnn, name):
                saved.append((ttnn, name, getattr(ttnn, name)))
                setattr(ttnn, name, _wrap(ttnn, log, name, getattr(ttnn, name)))
        for name in TENSOR_METHODS:
            if hasattr(ttnn.Tensor, name):
                saved.append((ttnn.Tensor, name, getattr(ttnn.Tensor, name)))
                setattr(ttnn.Tensor, name, _wrap(ttnn, log, f"Tensor.{name}", getattr(ttnn.Tensor, name)))
        yield log
    finally:
        for owner, name, fn in reversed(saved):
            setattr(owner, name, fn)


class CallCount:
    """The calls of one function counted inside a `count_calls` block."""

    def __init__(self) -> None:
        self.calls = 0

    def clear(self) -> None:
        """Count from zero again."""
        self.calls = 0


@contextlib.contextmanager
def count_calls(owner: Any, name: str) -> Iterator[CallCount]:
    """Count the calls of ``owner.<name>`` inside the block: the attribute is replaced by a counting
    wrapper (so callers that look it up on ``owner`` at call time, e.g. a module's own functions
    calling a module-level name, are counted) and put back on leaving."""
    count = CallCount()
    fn = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        count.calls += 1
        return fn(*args, **kwargs)

    counted.__wrapped__ = fn  # type: ignore[attr-defined]
    setattr(owner, name, counted)
    try:
        yield count
    finally:
        setattr(owner, name, fn)


def decode_steps(ttnn: Any, device: Any, step: Any, q: Any, k: Any, v: Any, pos: Any, table: Any,
                 steps: int = 4) -> tuple[list[str], list[int], Any]:
    """Run a planned FlashDecode step (`step.run`) `steps` times as a decode loop does, the positions tensor
    `pos` ([B] int32 on `device`) advanced on the device by ``ttnn.add`` of ones after each step (each
    output and each superseded positions tensor deallocated). Returns (the host <-> device moves after the
    first step, the device's program-cache entries after each step, the last positions tensor)."""
    ints = dict(dtype=ttnn.int32, layout=ttnn.ROW_MAJOR_LAYOUT, device=device)
    one = ttnn.from_torch(torch.ones(int(pos.shape[0]), dtype=torch.int32), **ints)
    entries = []
    with count_transfers(ttnn) as log:
        for n in range(1, steps + 1):
            if n == 2:
                log.clear()
            out = step.run(q, k, v, cur_pos_tensor=pos, page_table=table)
            ttnn.deallocate(out)
            new_pos = ttnn.add(pos, one)
            ttnn.deallocate(pos)
            pos = new_pos
            entries.append(int(device.num_program_cache_entries()))
        moves = list(log.moves)
    ttnn.deallocate(one)
    return moves, entries, pos
