"""Which producer blocks each consumer block reads, found by division, not by testing
every pair.

A config splits an op's space into an equal grid, so the blocks one producer writes of
a tensor take, in each dim of the tensor, one of a few disjoint ranges (several blocks
share a range when the producer is split along a dim the tensor does not have). A block
a consumer reads meets exactly the producer blocks whose range in every dim meets the
consumer's range there: per dim a contiguous run of the sorted ranges, found by
bisection. Finding a consumer block's overlaps costs the number of overlaps, so an
edge costs the number of its transfers, not producer tasks × consumer tasks.

Where some dim's ranges are not disjoint (no op in the library writes such blocks, but
an op type may), that tensor's blocks are tested pair by pair.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence

from flextui.graph import Op, Region, intersect, region_volume
from flextui.graph.tensor import dtype_bytes
from flextui.strategy import ParallelConfig
from flextui.strategy.pipeline import micro_region


class BlockIndex:
    """The blocks one op's tasks write of one tensor (``blocks[m]``: task ``m``'s),
    indexed by their range in each dim."""

    def __init__(self, blocks: Sequence[Region]) -> None:
        self.blocks = blocks
        columns = list(zip(*blocks))   # per dim, every block's range
        empty = {m for column in columns for m, (lo, hi) in enumerate(column) if lo >= hi}
        self.ranges = [sorted(set(column) if not empty else
                              {rng for m, rng in enumerate(column) if m not in empty})
                       for column in columns]
        self.grid = all(a[1] <= b[0] for r in self.ranges for a, b in itertools.pairwise(r))
        self.starts = [[lo for lo, _ in r] for r in self.ranges]
        self.stops = [[hi for _, hi in r] for r in self.ranges]
        self.cells: dict[tuple[int, ...], list[int]] = {}
        self.exact: dict[Region, list[tuple[int, Region]]] = {}
        if not self.grid:
            return
        positions = [{rng: i for i, rng in enumerate(r)} for r in self.ranges]
        cells: Iterable[tuple[int, ...]] = zip(*(
            [position[rng] if rng in position else -1 for rng in column]
            for column, position in zip(columns, positions)))
        if not columns:   # blocks of a scalar: one cell holds them all
            cells = [()] * len(blocks)
        for m, cell in enumerate(cells):
            if m not in empty:
                self.cells.setdefault(cell, []).append(m)
        # a region that is one of the blocks meets that block's cell only (ranges in a
        # dim are disjoint): found by one lookup, the common case of aligned configs
        self.exact = {blocks[tasks[0]]: [(m, blocks[m]) for m in tasks]
                      for tasks in self.cells.values()}

    def overlaps(self, region: Region) -> list[tuple[int, Region]]:
        """(task, overlap) for every block that meets ``region``, by task."""
        if not self.grid:
            found = ((m, intersect(region, b)) for m, b in enumerate(self.blocks))
            return [(m, overlap) for m, overlap in found if overlap is not None]
        exact = self.exact.get(region)
        if exact is not None:
            return exact
        spans = []
        for (lo, hi), starts, stops in zip(region, self.starts, self.stops, strict=True):
            if lo >= hi:
                return []
            first, end = bisect_right(stops, lo), bisect_left(starts, hi)
            if first >= end:
                return []
            spans.append(range(first, end))
        if all(len(span) == 1 for span in spans):   # the common case: one cell
            tasks = self.cells.get(tuple(span[0] for span in spans), [])
        else:
            tasks = sorted(m for cell in itertools.product(*spans)
                           for m in self.cells.get(cell, ()))
        blocks = self.blocks
        return [(m, region if region == blocks[m] else   # often: the very block
                 tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(region, blocks[m])))
                for m in tasks]


def micro_blocks(op: Op, config: ParallelConfig, microbatches: int = 1) -> list[Region]:
    """Every task's block of ``op`` in the first of ``microbatches`` micro-batches (the
    others' are the same, shifted along the samples: ``pipeline.micro_region``)."""
    return [micro_region(op, r, microbatches, 0) for r in config.regions(op)]


def overlap_regions(producer: Op, consumer: Op, pconf: ParallelConfig, cconf: ParallelConfig,
                    microbatches: int = 1) -> Iterator[tuple[int, int, int, Region]]:
    """(input slot, consumer task, producer task, region of the tensor) for every overlap
    of a block ``consumer`` reads (under ``cconf``) with a block ``producer`` writes
    (under ``pconf``), in slot, consumer-task, producer-task order: what the simulator
    times as a transfer and the runtime moves; with micro-batches, the first one's
    (each micro-batch's blocks meet only the same micro-batch's)."""
    slots = [slot for slot, tensor in enumerate(consumer.inputs) if tensor.producer is producer]
    if not slots:
        return
    out_regions = [producer.output_regions(r) for r in micro_blocks(producer, pconf, microbatches)]
    in_regions = [consumer.input_regions(r) for r in micro_blocks(consumer, cconf, microbatches)]
    for slot in slots:
        index = BlockIndex([outs[consumer.inputs[slot].index] for outs in out_regions])
        for k, needs in enumerate(in_regions):
            for m, overlap in index.overlaps(needs[slot]):
                yield slot, k, m, overlap


def block_overlaps(producer: Op, consumer: Op, pconf: ParallelConfig, cconf: ParallelConfig,
                   microbatches: int = 1) -> tuple[tuple[int, int, int, int], ...]:
    """(input slot, consumer task, producer task, bytes) of every ``overlap_regions``."""
    widths = [dtype_bytes(t.dtype) for t in consumer.inputs]
    return tuple((slot, k, m, region_volume(overlap) * widths[slot])
                 for slot, k, m, overlap in overlap_regions(producer, consumer, pconf, cconf,
                                                            microbatches))
