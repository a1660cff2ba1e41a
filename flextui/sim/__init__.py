"""The execution simulator: task graphs, full and delta simulation, memory, Timeline."""

from flextui.sim.delta import DeltaSimulator
from flextui.sim.memory import MemoryPolicy, MemoryUsage
from flextui.sim.simulator import Simulator
from flextui.sim.taskgraph import TaskGraph, TaskKind
from flextui.sim.timeline import DeviceStats, LinkStats, TaskTiming, Timeline

__all__ = ["DeltaSimulator", "DeviceStats", "LinkStats", "MemoryPolicy", "MemoryUsage",
           "Simulator", "TaskGraph", "TaskKind", "TaskTiming", "Timeline"]
