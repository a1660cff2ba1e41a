"""A stand-in for torch.cuda's timing and memory calls, so the CUDA paths of the
profiler and of the communication calibration are walked on the CPU: its events say how
long the runs between them took by counting the runs logged between them (``ms``: the
milliseconds a run of each name takes), with no clock."""

import torch


class FakeCuda:
    """Logs, in order, events recorded (the event objects), the names of runs the test
    logs itself, and synchronizations ("synchronize", "event synchronize")."""

    def __init__(self, monkeypatch, ms: dict[str, float]):
        self.log: list = []
        log = self.log

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing

            def record(self, stream):
                assert stream == "current stream"
                log.append(self)

            def synchronize(self):
                log.append("event synchronize")

            def elapsed_time(self, end):
                between = log[log.index(self) + 1:log.index(end)]
                return sum(ms.get(item, 0.0) for item in between if isinstance(item, str))

        for name, value in (("Event", Event), ("current_stream", lambda d: "current stream"),
                            ("synchronize", lambda d=None: log.append("synchronize")),
                            ("reset_peak_memory_stats", lambda d: None),
                            ("memory_allocated", lambda d: 1000),
                            ("max_memory_allocated", lambda d: 5096),
                            ("empty_cache", lambda: log.append("empty_cache"))):
            monkeypatch.setattr(torch.cuda, name, value)

    def samples(self) -> list[list]:
        """What happened between each pair of events."""
        marks = [i for i, item in enumerate(self.log) if not isinstance(item, str)]
        return [self.log[a + 1:b] for a, b in zip(marks[::2], marks[1::2])]
