"""The simulator's stages look at the clock now and then, so a search keeps its budget."""

from __future__ import annotations

import math
import time

#: how many tasks a stage of the simulator handles between looks at the clock
CLOCK_EVERY = 4096


def check_deadline(deadline: float, what: str) -> None:
    """TimeoutError (``what`` ran past its deadline) once ``time.monotonic()`` has passed
    ``deadline``. The simulator's stages look every ``CLOCK_EVERY`` tasks, or between
    edges and parameters of a graph edit."""
    if deadline < math.inf and time.monotonic() > deadline:
        raise TimeoutError(f"{what} ran past its deadline")
