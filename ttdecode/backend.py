"""Which backend runs a call: the choice of ``backend="auto"`` and the record of the last choice.

Shared by every operator's public function (FlashDecode, rotary_kv_append, context parallelism).
"""

from __future__ import annotations

import importlib
import logging
from typing import Optional

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


def select_backend() -> str:
    """"device" when a Wormhole is usable (``ttdecode.device.available()``), else "host"; logged."""
    try:
        device = importlib.import_module("ttdecode.device")
    except ModuleNotFoundError as e:
        if e.name != "ttdecode.device":
            raise
        log.info("ttdecode: backend 'auto' -> 'host' (ttdecode.device is not built)")
        return "host"
    if device.available():
        log.info("ttdecode: backend 'auto' -> 'device' (a Tenstorrent device is available)")
        return "device"
    log.info("ttdecode: backend 'auto' -> 'host' (no Tenstorrent device)")
    return "host"
