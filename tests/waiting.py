"""Waiting in tests for a state another thread or process reaches, instead of sleeping and assuming it."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], seconds: float) -> bool:
    """Whether `condition()` became true within `seconds` (looked at every 50 ms, and once more at the end)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())
