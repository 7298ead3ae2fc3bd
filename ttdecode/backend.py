"""Which backend runs a call: the choice of ``backend="auto"`` and the record of the last choice.

Shared by every operator's public function (FlashDecode, rotary_kv_append, context parallelism).
"""

from __future__ import annotations

import logging
from typing import Optional

from ttdecode import ttnn_env

#: Accepted values of ``backend=``.
BACKENDS = ("auto", "device", "host", "reference")

log = logging.getLogger("ttdecode")
_last_backend: Optional[str] = None


def last_backend() -> Optional[str]:
    """The backend ("device", "host" or "reference") chosen by the last call; None before any call.
    Set once the arguments are valid, before the backend runs."""
    return _last_backend


def record(chosen: str) -> None:
    """Remember `chosen` as the last call's backend (`last_backend`)."""
    global _last_backend
    _last_backend = chosen


def on_device(x: object) -> bool:
    """True for a ttnn tensor in device storage (a torch tensor, TileTensor or host ttnn tensor: False)."""
    t = type(x)
    if t.__name__ != "Tensor" or not t.__module__.startswith("ttnn"):
        return False
    import ttnn  # a ttnn tensor came in, so ttnn is imported already

    return bool(ttnn.is_tensor_storage_on_device(x))


def select_backend(*tensors: object) -> str:
    """The choice of ``backend="auto"``, logged: "device" only when a Wormhole is usable
    (``ttdecode.ttnn_env.has_tenstorrent_device()``) and the given input tensors (None entries ignored) are all ttnn
    tensors on the device; torch / host inputs go to the host runtime (the device backend would refuse
    them). With no tensors given: "device" whenever a device is usable."""
    given = [t for t in tensors if t is not None]
    if given and not all(on_device(t) for t in given):
        log.info("ttdecode: backend 'auto' -> 'host' (the inputs are not ttnn device tensors)")
        return "host"
    if ttnn_env.has_tenstorrent_device():
        log.info("ttdecode: backend 'auto' -> 'device' (a Tenstorrent device is available)")
        return "device"
    log.info("ttdecode: backend 'auto' -> 'host' (no Tenstorrent device)")
    return "host"
