"""The threads a CPU profile was measured with, as part of its device name.

A task's time on the CPU depends on how many threads compute it, so CPU profiles
measured with different thread counts must not be mixed: the device name a CPU profile
records is ``"cpu: <model>, <n> thread(s)"``, and the name is part of every profile key
and names the cache file (``cpu-<model>-1-thread.msgpack``). ``flextui profile --device
cpu`` measures with the threads a rank of ``flextui launch`` computes with
(``machine.detect.rank_threads``), and ``--cost profiled`` looks up the CPU profiles of
that thread count. A name without a thread count (profiles from before thread counts
were recorded) is a CPU's, of an unknown thread count, and is not used.
"""

from __future__ import annotations

import re

from flextui.machine.cpus import is_cpu

_THREADS = re.compile(r", (\d{1,5}) threads?$")


def with_threads(cpu: str, threads: int) -> str:
    """``"cpu: <model>"`` as measured with ``threads`` threads."""
    return f"{cpu}, {threads} thread{'s' if threads != 1 else ''}"


def threads_of(device_name: str) -> int | None:
    """The threads a CPU profile's device name says it was measured with; None for a
    GPU's name or a CPU's name without a thread count."""
    if not is_cpu(device_name):
        return None
    found = _THREADS.search(device_name)
    return int(found[1]) if found else None
