"""Export a Timeline as Chrome trace-event JSON (opens in Perfetto or chrome://tracing).

Devices and links are two processes; every device and every link is a thread of its
own; each task is a complete ("X") event in microseconds. An all-reduce appears once on
every link it holds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flextui.errors import FlextuiError
from flextui.sim.timeline import Timeline

DEVICES_PID, LINKS_PID = 0, 1


def trace_events(timeline: Timeline) -> dict[str, Any]:
    lanes = {d.name: (DEVICES_PID, i) for i, d in enumerate(timeline.devices)}
    lanes.update({link.name: (LINKS_PID, i) for i, link in enumerate(timeline.links)})
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": DEVICES_PID, "args": {"name": "devices"}},
        {"ph": "M", "name": "process_name", "pid": LINKS_PID, "args": {"name": "links"}},
    ]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}
                for name, (pid, tid) in lanes.items()]
    for task in timeline.tasks:
        label = task.op or task.kind.name.lower()
        for resource in task.resources:
            pid, tid = lanes[resource]
            events.append({
                "name": f"{label}[{task.part}]", "cat": task.kind.name.lower(), "ph": "X",
                "pid": pid, "tid": tid, "ts": task.start * 1e6,
                "dur": (task.end - task.start) * 1e6,
                "args": {"op": task.op, "ready_us": task.ready * 1e6, "bytes": task.nbytes},
            })
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"makespan_s": timeline.makespan}}


def write_trace(path: str | Path, timeline: Timeline) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(trace_events(timeline)))
        os.replace(tmp, path)
    except OSError as exc:
        raise FlextuiError(f"cannot write trace file {path}: {exc.strerror}") from None
