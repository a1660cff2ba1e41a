"""A Gantt chart of a Timeline as plain data: lanes, a view window, rasterised cells,
time-axis ticks and task details. The app's Gantt widget draws exactly what these
functions return; nothing here knows about terminals.

A lane is one resource: every device, and every link that carries a task. A task that
holds several resources (a ring all-reduce holds every link of its ring) appears in
each of their lanes. Tasks on one resource never overlap, so a lane's tasks sorted by
start are also sorted by end.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from flextui.graph import Op, OpGraph, Region, intersect
from flextui.machine.units import format_bytes
from flextui.sim.taskgraph import TaskKind
from flextui.sim.timeline import TaskTiming, Timeline
from flextui.strategy import ShardStage, Strategy
from flextui.strategy.pipeline import micro_region

#: one glyph per kind, so kinds read apart without colour (NO_COLOR, 16 colours)
KIND_GLYPHS: dict[TaskKind, str] = {
    TaskKind.FORWARD: "█", TaskKind.BACKWARD: "▓", TaskKind.TRANSFER: "░",
    TaskKind.SYNC: "≡", TaskKind.UPDATE: "▪", TaskKind.GATHER: "⇣",
}
IDLE_GLYPH = " "
SELECTED_GLYPH = "◆"
#: the narrowest window, as a fraction of the widest: zooming stops there
MIN_SPAN_FRACTION = 1 / 4096


@dataclass(frozen=True)
class Lane:
    name: str
    kind: str                          # "device" or "link"
    tasks: tuple[TaskTiming, ...]      # sorted by start
    busy: float                        # fraction of the iteration the resource works
    ends: tuple[float, ...] = field(default=(), repr=False)  # tasks' ends, for bisect


@dataclass(frozen=True)
class Cell:
    """One column of a rasterised lane: the kind that covers most of it and the index
    (in the lane's tasks) of that kind's longest task there; None and -1 when idle."""

    kind: TaskKind | None
    task: int


IDLE_CELL = Cell(None, -1)


def build_lanes(timeline: Timeline) -> list[Lane]:
    """A lane per device, then a lane per link that carries anything, in cluster order."""
    held: dict[str, list[TaskTiming]] = {}
    for task in timeline.tasks:
        for resource in task.resources:
            held.setdefault(resource, []).append(task)
    lanes = [_lane(d.name, "device", held.get(d.name, []), timeline.makespan)
             for d in timeline.devices]
    lanes += [_lane(link.name, "link", held[link.name], timeline.makespan)
              for link in timeline.links if link.name in held]
    return lanes


def short_names(names: list[str]) -> list[str]:
    """The names without the node prefix they all share ("n0.gpu0->n0.gpu1" becomes
    "gpu0->gpu1" when every endpoint is on node "n0"); unchanged otherwise."""
    parts = [part for name in names for part in name.split("->")]
    nodes = {part.split(".", 1)[0] for part in parts}
    if len(nodes) != 1 or not all("." in part for part in parts):
        return list(names)
    prefix = f"{nodes.pop()}."
    return ["->".join(p.removeprefix(prefix) for p in name.split("->")) for name in names]


def _lane(name: str, kind: str, tasks: list[TaskTiming], makespan: float) -> Lane:
    tasks = sorted(tasks, key=lambda t: (t.start, t.end, t.key))
    busy = sum(t.end - t.start for t in tasks) / makespan if makespan > 0 else 0.0
    return Lane(name, kind, tuple(tasks), busy, tuple(t.end for t in tasks))


def rasterize(lane: Lane, t0: float, t1: float, width: int) -> list[Cell]:
    """The lane over the window [t0, t1) in ``width`` equal cells. Zero-length tasks
    cover nothing (the widget marks a selected one at its start)."""
    if width <= 0 or t1 <= t0:
        return [IDLE_CELL] * max(width, 0)
    dt = (t1 - t0) / width
    covered: list[dict[TaskKind, _Cover]] = [{} for _ in range(width)]
    for i in range(bisect_right(lane.ends, t0), len(lane.tasks)):
        task = lane.tasks[i]
        if task.start >= t1:
            break
        first = max(0, int((task.start - t0) / dt))
        last = min(width - 1, math.ceil((task.end - t0) / dt) - 1)
        for c in range(first, last + 1):
            overlap = min(task.end, t0 + (c + 1) * dt) - max(task.start, t0 + c * dt)
            if overlap <= 0:
                continue
            entry = covered[c].get(task.kind)
            if entry is None:
                covered[c][task.kind] = _Cover(overlap, overlap, i)
                continue
            entry.time += overlap
            if overlap > entry.longest:
                entry.longest, entry.task = overlap, i
    return [_cell(kinds) for kinds in covered]


@dataclass(slots=True)
class _Cover:
    """One kind's share of a cell: the time it covers, its longest overlap and the index
    of the task with that overlap."""

    time: float
    longest: float
    task: int


def _cell(kinds: dict[TaskKind, _Cover]) -> Cell:
    if not kinds:
        return IDLE_CELL
    kind = max(kinds, key=lambda k: kinds[k].time)  # ties: the kind seen first
    return Cell(kind, kinds[kind].task)


def nearest_task(lane: Lane, t: float) -> int:
    """The index of the lane's task running at time ``t``, else the one nearest to it;
    -1 for an empty lane."""
    if not lane.tasks:
        return -1
    i = bisect_left(lane.ends, t)
    if i == len(lane.tasks):
        return i - 1
    if lane.tasks[i].start <= t or i == 0:
        return i
    before, after = lane.tasks[i - 1], lane.tasks[i]
    return i - 1 if t - before.end <= after.start - t else i


@dataclass(frozen=True)
class View:
    """The visible time window [t0, t1) of a chart whose tasks end by ``limit``."""

    t0: float
    t1: float
    limit: float

    @classmethod
    def whole(cls, limit: float) -> View:
        limit = limit if limit > 0 else 1e-9
        return cls(0.0, limit, limit)

    @classmethod
    def first(cls, makespan: float, limit: float) -> View:
        """The window [0, makespan) of a chart reaching ``limit`` (at least the makespan):
        one timeline whole, on the scale of a longer one it is compared with."""
        return cls.whole(max(limit, makespan))._moved(0.0, makespan)

    @property
    def span(self) -> float:
        return self.t1 - self.t0

    def _moved(self, t0: float, span: float) -> View:
        span = min(max(span, self.limit * MIN_SPAN_FRACTION), self.limit)
        t0 = min(max(t0, 0.0), self.limit - span)
        return View(t0, t0 + span, self.limit)

    def zoom(self, factor: float, centre: float | None = None) -> View:
        """Divide the span by ``factor`` (> 1 zooms in), keeping ``centre`` (default:
        the window's middle) at the same place on screen."""
        centre = (self.t0 + self.t1) / 2 if centre is None else centre
        span = self.span / factor
        return self._moved(centre - (centre - self.t0) / factor, span)

    def pan(self, fraction: float) -> View:
        """Move by ``fraction`` of the span (negative: earlier)."""
        return self._moved(self.t0 + fraction * self.span, self.span)

    def start(self) -> View:
        return self._moved(0.0, self.span)

    def end(self) -> View:
        return self._moved(self.limit, self.span)

    def reveal(self, task: TaskTiming) -> View:
        """The smallest move that brings ``task`` into view (its start, when it is
        longer than the window)."""
        if self.t0 <= task.start and task.end <= self.t1:
            return self
        if task.start < self.t0 or task.end - task.start > self.span:
            return self._moved(task.start, self.span)
        return self._moved(task.end - self.span, self.span)

    def with_limit(self, limit: float) -> View:
        """The same window over a chart ending at ``limit`` (clamped into it)."""
        return View(self.t0, self.t1, limit if limit > 0 else 1e-9)._moved(self.t0, self.span)

    def cells(self, start: float, end: float, width: int) -> range:
        """The cells of a ``width``-cell drawing that [start, end) covers: at least the
        one it starts in, when that is in view."""
        first = math.floor((start - self.t0) / self.span * width)
        last = max(first + 1, math.ceil((end - self.t0) / self.span * width))
        return range(max(first, 0), min(last, width))


def ticks(t0: float, t1: float, width: int, gap: int = 12) -> list[tuple[int, str]]:
    """Time-axis ticks for a window drawn ``width`` cells wide: (cell, label in ms) at a
    round step (1, 2 or 5 times a power of ten) leaving at least ``gap`` cells between."""
    if width <= 0 or t1 <= t0:
        return []
    wanted = (t1 - t0) * gap / width * 1e3
    power = 10.0 ** math.floor(math.log10(wanted))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= wanted)
    decimals = max(0, -math.floor(math.log10(step)))
    out = []
    for n in range(math.ceil(t0 * 1e3 / step - 1e-9), math.floor(t1 * 1e3 / step) + 1):
        cell = round((n * step / 1e3 - t0) / (t1 - t0) * width)
        if cell < width:
            out.append((cell, f"{n * step:.{decimals}f}"))
    return out


def format_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4f} ms"


def format_window(t0: float, t1: float) -> str:
    """A window in ms, to about four significant digits of its span."""
    span_ms = max((t1 - t0) * 1e3, 1e-12)
    decimals = max(0, 3 - math.floor(math.log10(span_ms)))
    return f"{t0 * 1e3:.{decimals}f}–{t1 * 1e3:.{decimals}f} ms"


@dataclass(frozen=True)
class TaskDetails:
    """A title, and (label, value) pairs in groups that read best on one line each."""

    title: str
    groups: list[list[tuple[str, str]]]

    @property
    def rows(self) -> list[tuple[str, str]]:
        return [pair for group in self.groups for pair in group]


def task_details(task: TaskTiming, graph: OpGraph | None = None,
                 strategy: Strategy | None = None,
                 bucket_params: Mapping[tuple[int, ...], tuple[str, ...]] | None = None,
                 ) -> TaskDetails:
    """What a task is and when it ran. With the graph, syncs and updates name their
    parameter (a sync of a bucket its first, and with the timeline's ``bucket_params``
    every parameter it sums); with the strategy too, tasks give their block's shape (the
    op's block for forward/backward, the overlap carried for transfers), a recomputed
    op's backward says so, and a sharded parameter's sync says it is a reduce-scatter
    and an all-gather."""
    shape, of, dims = (_block(task, graph, strategy) if graph and strategy else None) or ("",) * 3
    groups = [[("block", shape), ("of", of)]] if shape else []
    groups += [[("start", format_ms(task.start)), ("end", format_ms(task.end)),
                ("duration", format_ms(task.end - task.start)), ("ready", format_ms(task.ready))],
               ([("bytes", format_bytes(task.nbytes))] if task.nbytes else [])
               + [("on", ", ".join(task.resources))]]
    if dims:
        groups.append([("dims", dims)])
    if strategy is not None and task.kind == TaskKind.BACKWARD and strategy[task.op].recompute:
        groups.append([("recomputes", "its forward first (no activation kept)")])
    bucket = (bucket_params or {}).get(task.key, ()) if task.kind == TaskKind.SYNC else ()
    if bucket:
        groups.append([("sums", ", ".join(bucket))])
    stage = strategy.shard(_parameter(task, graph)) if strategy and graph and \
        task.kind == TaskKind.SYNC else None
    if stage:
        groups.append([("sharded", f"stage {int(stage)}: each device keeps its part of the "
                                   f"{stage.label}"),
                       ("collectives", "a reduce-scatter, and an all-gather after the update"
                        if stage < ShardStage.PARAMETERS else
                        "a reduce-scatter (the parameter is gathered before each pass of its "
                        "op)")])
    if task.kind == TaskKind.GATHER:
        groups.append([("gathers", "the group's parameter, freed after the op's tasks use "
                                   "it (stage 3)")])
    if strategy is not None and strategy.pipeline.on and task.kind not in (TaskKind.SYNC,
                                                                           TaskKind.UPDATE):
        groups.append([("micro-batch", f"{task.micro} of {strategy.pipeline.microbatches} "
                                       f"({strategy.pipeline.schedule.value})")])
    return TaskDetails(_title(task, graph, len(bucket)), groups)


def _title(task: TaskTiming, graph: OpGraph | None, bucket: int = 0) -> str:
    if task.kind == TaskKind.TRANSFER:
        return f"transfer to {task.op} · part {task.part}"
    if task.kind in (TaskKind.FORWARD, TaskKind.BACKWARD):
        return f"{task.kind.name.lower()} {task.op} · part {task.part}"
    if task.kind == TaskKind.GATHER:   # key (pass, ±op, 0, -1, parameter index, group)
        name = graph.op(task.op).params[task.key[4]].name if graph else "parameter"
        stage = "forward" if task.key[0] == 0 else "backward"
        return f"gather {name} for {task.op}'s {stage} · group {task.part}"
    what = (_parameter(task, graph) if graph else "") or "parameter"
    if bucket > 1:
        what += f" and {bucket - 1} more"
    where = "group" if task.kind == TaskKind.SYNC else "device"
    return f"{task.kind.name.lower()} {what} · {where} {task.part}"


def _parameter(task: TaskTiming, graph: OpGraph) -> str:
    """A sync's or an update's parameter (of a unit of several, the first): their keys
    are (2 or 3, parameter order, _)."""
    names = list(graph.parameters)
    if task.kind in (TaskKind.SYNC, TaskKind.UPDATE) and 0 <= task.key[1] < len(names):
        return names[task.key[1]]
    return ""


def _block(task: TaskTiming, graph: OpGraph, strategy: Strategy) -> tuple[str, str, str] | None:
    """(shape, what it is a block of, the names of its dims) for forward, backward and
    transfer tasks (a tensor's dims have no names)."""
    if task.kind in (TaskKind.FORWARD, TaskKind.BACKWARD):
        op = graph.op(task.op)
        region = _region(op, task.part, strategy, task.micro)
        return _shape(region), op.name, "×".join(d.name for d in op.space)
    if task.kind == TaskKind.TRANSFER:
        tensor, overlap = _transfer_region(task, graph, strategy)
        return (_shape(overlap) if overlap else "?"), f"tensor {tensor}", ""
    return None


def _region(op: Op, k: int, strategy: Strategy, micro: int) -> Region:
    """Task ``k``'s block of ``op`` in micro-batch ``micro``."""
    return micro_region(op, strategy[op.name].task_region(op, k),
                        strategy.pipeline.microbatches, micro)


def _transfer_region(task: TaskTiming, graph: OpGraph,
                     strategy: Strategy) -> tuple[str, Region | None]:
    """The tensor a transfer carries and the region of it: the consumer task's input
    overlapped with the producer task's output. Keys (see taskgraph): forward
    (0, consumer, 0, k, slot, m, hop), backward (1, -producer, 0, m, consumer, slot, k, hop),
    where k is the consumer's task and m the producer's (the forward key's consumer, in
    a micro-batch, shifted: its op is the task's)."""
    key = task.key
    if key[0] == 0:
        consumer, k, slot, m = graph.op(task.op), key[3], key[4], key[5]
    else:
        consumer, slot, k, m = graph.ops[key[4]], key[5], key[6], key[3]
    tensor = consumer.inputs[slot]
    producer = tensor.producer
    assert producer is not None  # every tensor of a graph has one (GraphBuilder sets it)
    needed = consumer.input_regions(_region(consumer, k, strategy, task.micro))[slot]
    made = producer.output_regions(_region(producer, m, strategy, task.micro))[tensor.index]
    return tensor.name, intersect(needed, made)


def _shape(region: Region) -> str:
    return "×".join(str(stop - start) for start, stop in region)
