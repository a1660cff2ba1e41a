"""The execution plan: what every rank computes and moves in one training step, compiled
once from (graph, strategy, cluster) with the simulator's own code.

Simulated device *i* is global rank *i*. Each op's tasks are its config's blocks
(``ParallelConfig.regions``); each edge's *pieces* are the block intersections the
simulator times as transfers (``sim.overlaps.overlap_regions``); each parameter's
replica groups are the simulator's (``sim.replicas.replica_cells``), with the atoms
the runtime all-reduces. The bytes a rank sends and receives in a step follow from the
plan alone, and equal what the simulated Timeline puts on the device's links.

Order. Every rank walks the ops in topological order for the forward pass and in
reverse for the backward pass (with micro-batches, every micro-batch's passes in the
schedule's order: ``walk``). Before an op's forward tasks run, the pieces into them
move (``pieces_into``); before its backward tasks run, the gradient pieces of its
outputs come back (``pieces_from``). Pieces are listed in one canonical order, the same
on every rank, so the point-to-point operations each pair of ranks posts match.

Micro-batches. With ``strategy.pipeline`` on, task ``k``'s block is micro-batch 0's
(``region``) and the pieces are micro-batch 0's: another micro-batch's blocks and
pieces are the same, shifted along the samples (``region_at``), so what a rank cuts
and assembles is the same in every micro-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from flextui.errors import StrategyError
from flextui.graph import Op, OpGraph, Region, region_volume
from flextui.graph.kernels import kernel_for
from flextui.graph.tensor import FLOAT_DTYPES, dtype_bytes
from flextui.sim.buckets import CPU_BUCKET_BYTES, bucket_starts, sync_order
from flextui.sim.overlaps import overlap_regions
from flextui.sim.replicas import replica_cells
from flextui.strategy import ParallelConfig, ShardStage, Strategy
from flextui.strategy.pipeline import micro_region
from flextui.strategy.precision import computed_graph


@dataclass(frozen=True, eq=False)
class Piece:
    """One block intersection on an edge: the part ``region`` (in the whole tensor's
    coordinates) of producer task ``m``'s output ``output`` that consumer task ``k``
    reads through input ``slot``; it moves from rank ``src`` to rank ``dst``. Each piece
    is one object, shared by the lists of both its ops, and compared by identity."""

    producer: int        # op index
    output: int
    m: int
    consumer: int        # op index
    slot: int
    k: int
    region: Region
    src: int
    dst: int
    nbytes: int

    @property
    def local(self) -> bool:
        return self.src == self.dst


@dataclass(frozen=True)
class ReplicaSync:
    """One replica group of a parameter: the ranks holding the atoms ``cells``, whose
    gradients are summed over them (an all-reduce of ``numel`` elements; for a sharded
    parameter, ``stage`` above NONE, a reduce-scatter and, after the update, an
    all-gather)."""

    param: str
    ranks: tuple[int, ...]
    cells: tuple[Region, ...]
    numel: int
    nbytes: int
    stage: ShardStage = ShardStage.NONE


@dataclass
class Plan:
    """The compiled step of ``graph`` under ``strategy`` on ``num_ranks`` ranks."""

    graph: OpGraph
    strategy: Strategy
    num_ranks: int
    configs: list[ParallelConfig]
    pieces_into: list[list[Piece]]        # per op: the pieces its forward tasks read
    pieces_from: list[list[Piece]]        # per op: the pieces its outputs feed
    syncs: list[ReplicaSync]              # in the order every rank issues them
    #: the syncs in the all-reduces ranks issue (``sim.buckets``: consecutive small
    #: groups of one rank set together, up to the bucket limit)
    buckets: list[tuple[ReplicaSync, ...]]
    #: per parameter and rank: the box of the parameter holding every shard it uses
    param_boxes: dict[str, dict[int, Region]] = field(default_factory=dict)
    #: per input op of an integer dtype: the values its data must stay below
    index_bounds: dict[int, int] = field(default_factory=dict)
    #: per parameter and rank: the cells of its box whose gradient the rank counts in
    #: the global gradient norm (every element once: on the lowest rank holding it; a
    #: sharded group's elements are counted by the rank whose part they are, apart)
    norm_cells: dict[str, dict[int, tuple[Region, ...]]] = field(default_factory=dict)
    #: per sharded parameter and rank: the cells of its box no other rank holds (the
    #: rank updates them itself; its replica groups' parts, by bucket)
    alone_cells: dict[str, dict[int, tuple[Region, ...]]] = field(default_factory=dict)

    def tasks_on(self, op: Op, rank: int) -> list[int]:
        """The tasks of ``op`` that run on ``rank``."""
        return [k for k, d in enumerate(self.configs[op.index].devices) if d == rank]

    @property
    def microbatches(self) -> int:
        return self.strategy.pipeline.microbatches

    def region(self, op: Op, k: int) -> Region:
        """Task ``k``'s block (of the first micro-batch, with micro-batches)."""
        return self.region_at(op, k, 0)

    def region_at(self, op: Op, k: int, micro: int) -> Region:
        """Task ``k``'s block in micro-batch ``micro``."""
        return micro_region(op, self.configs[op.index].task_region(op, k), self.microbatches,
                            micro)

    def sync_groups(self) -> list[tuple[int, ...]]:
        """Every distinct rank set that all-reduces, sorted: one process group each."""
        return sorted({s.ranks for s in self.syncs})

    def bytes_moved(self, rank: int, training: bool = True) -> tuple[int, int]:
        """(sent, received) bytes of ``rank`` in one step: its pieces to and from other
        ranks, forward and (training) the gradients back, and (training) the gradients
        of every replica group it is in, counted once each way as the simulator counts
        a group's all-reduce on a device's links (and a stage-3 group's all-gathers, each
        once); with micro-batches, each micro-batch's pieces and gathers."""
        sent = received = 0
        m = self.microbatches   # every micro-batch moves its pieces
        for pieces in self.pieces_into:
            for p in pieces:
                if p.local:
                    continue
                back = training and self.graph.ops[p.producer].type != "input"
                if p.src == rank:
                    sent += m * p.nbytes
                    received += m * p.nbytes if back else 0
                if p.dst == rank:
                    received += m * p.nbytes
                    sent += m * p.nbytes if back else 0
        passes = 2 * m if training else m   # an op's forward and its backward, each
        for s in self.syncs:                # micro-batch's
            if rank in s.ranks:
                # the sum (all-reduce or reduce-scatter), and at stage 3 an all-gather
                # before each pass of the op
                times = (1 if training else 0) + \
                    (passes if s.stage == ShardStage.PARAMETERS else 0)
                sent += times * s.nbytes
                received += times * s.nbytes
        return sent, received


def compile_plan(graph: OpGraph, strategy: Strategy, num_ranks: int,
                 bucket_bytes: int = CPU_BUCKET_BYTES) -> Plan:
    """The plan of one step, its gradients summed in buckets of up to ``bucket_bytes``
    (``sim.buckets.bucket_limit`` of the ranks' devices); StrategyError when the strategy
    does not fit the graph or needs more ranks than ``num_ranks``."""
    strategy.check(graph, num_ranks)
    configs = [strategy[op.name] for op in graph.ops]
    # pieces move in the dtype the strategy computes in (the simulator's view of it)
    computed = computed_graph(graph, strategy.precision)
    pieces_into: list[list[Piece]] = [[] for _ in graph.ops]
    pieces_from: list[list[Piece]] = [[] for _ in graph.ops]
    for consumer in graph.ops:
        cconf = configs[consumer.index]
        for producer in graph.predecessors(consumer):
            pconf = configs[producer.index]
            for slot, k, m, region in overlap_regions(producer, consumer, pconf, cconf,
                                                      strategy.pipeline.microbatches):
                tensor = computed.ops[consumer.index].inputs[slot]
                piece = Piece(producer.index, tensor.index, m, consumer.index, slot, k, region,
                              pconf.devices[m], cconf.devices[k],
                              region_volume(region) * dtype_bytes(tensor.dtype))
                pieces_into[consumer.index].append(piece)
                pieces_from[producer.index].append(piece)
        _check_tiled(consumer, cconf, pieces_into[consumer.index],
                     strategy.pipeline.microbatches)
    order = _forward_key
    for pieces in pieces_into:
        pieces.sort(key=order)
    for pieces in pieces_from:
        pieces.sort(key=order)
    syncs, boxes, norm_cells, alone_cells = _parameters(graph, configs, strategy)
    return Plan(graph, strategy, num_ranks, configs, pieces_into, pieces_from, syncs,
                _buckets(syncs, bucket_bytes), boxes, index_bounds(graph), norm_cells,
                alone_cells)


def _forward_key(p: Piece) -> tuple[int, int, int, int, int]:
    return (p.consumer, p.slot, p.k, p.producer, p.m)


def _check_tiled(op: Op, config: ParallelConfig, pieces: list[Piece], microbatches: int,
                 ) -> None:
    """Every input block a task reads is made of its pieces exactly once; anything
    else would be a producer whose blocks overlap, which the runtime cannot assemble."""
    if op.type == "input":
        return
    covered: dict[tuple[int, int], int] = {}
    for p in pieces:
        covered[(p.slot, p.k)] = covered.get((p.slot, p.k), 0) + region_volume(p.region)
    for k in range(config.num_tasks):
        block = micro_region(op, config.task_region(op, k), microbatches, 0)
        for slot, need in enumerate(op.input_regions(block)):
            if covered.get((slot, k), 0) != region_volume(need):
                raise StrategyError(f"op {op.name!r}: input {slot} of task {k} is not made of "
                                    "its producer's blocks exactly once; the runtime cannot "
                                    "assemble it")


Cells = dict[str, dict[int, tuple[Region, ...]]]


def _parameters(graph: OpGraph, configs: list[ParallelConfig], strategy: Strategy,
                ) -> tuple[list[ReplicaSync], dict[str, dict[int, Region]], Cells, Cells]:
    """Each parameter's replica groups (in the order ranks issue their all-reduces,
    ``sim.buckets.sync_order``, then by group) and, per rank, the box of the parameter
    its shards lie in, the cells it counts in the gradient norm and, of a sharded
    parameter, the cells it alone holds."""
    users: dict[str, list[tuple[Op, int]]] = {}
    for op in graph.ops:
        for i, p in enumerate(op.params):
            users.setdefault(p.name, []).append((op, i))
    syncs: dict[str, list[ReplicaSync]] = {}
    boxes: dict[str, dict[int, Region]] = {}
    norm_cells: Cells = {}
    alone_cells: Cells = {}
    for name, used_by in users.items():
        stage = strategy.shard(name)
        param = graph.parameters[name]
        blocks = tuple((op.param_region(i, region), configs[op.index].devices[k])
                       for op, i in used_by
                       for k, region in enumerate(configs[op.index].regions(op)))
        boxes[name] = {}
        for region, rank in blocks:
            old = boxes[name].get(rank)
            boxes[name][rank] = region if old is None else tuple(
                (min(a0, b0), max(a1, b1)) for (a0, a1), (b0, b1) in zip(old, region))
        norm_cells[name] = {}
        syncs[name] = []
        for ranks, cells, _ in replica_cells(blocks):
            if len(ranks) == 1 and stage:
                alone = alone_cells.setdefault(name, {})
                alone[ranks[0]] = (*alone.get(ranks[0], ()), *cells)
            if len(ranks) == 1 or not stage:
                norm_cells[name][ranks[0]] = (*norm_cells[name].get(ranks[0], ()), *cells)
            if len(ranks) > 1:
                numel = sum(math.prod(hi - lo for lo, hi in cell) for cell in cells)
                syncs[name].append(ReplicaSync(name, ranks, tuple(cells), numel,
                                               numel * dtype_bytes(param.dtype), stage))
    return ([s for name in sync_order(users) for s in syncs[name]], boxes, norm_cells,
            alone_cells)


def _buckets(syncs: list[ReplicaSync], limit: int) -> list[tuple[ReplicaSync, ...]]:
    """The syncs, in order, grouped into the buckets ``sim.buckets`` decides (a bucket
    holds groups of one rank set and one shard stage, as the simulator's do; a group at
    stage 3 is one alone)."""
    buckets: list[list[ReplicaSync]] = []
    for sync, starts in zip(syncs, bucket_starts(
            ((None if s.stage == ShardStage.PARAMETERS else (s.ranks, s.stage), s.nbytes)
             for s in syncs), limit)):
        if starts:
            buckets.append([])
        buckets[-1].append(sync)
    return [tuple(b) for b in buckets]


def index_bounds(graph: OpGraph) -> dict[int, int]:
    """For each integer input op, the largest value range all its consumers accept
    (labels below the class count, ids below the table size), through ops that pass
    its values on (a slice of the labels)."""
    below: dict[str, int] = {}   # by tensor name: the range its consumers accept
    for op in reversed(graph.ops):
        kernel = kernel_for(op.type)
        for slot, tensor in enumerate(op.inputs):
            if tensor.dtype in FLOAT_DTYPES:
                continue
            bound = below.get(op.outputs[0].name, 2) if kernel.passes_indices \
                else kernel.index_bound(op, slot)
            below[tensor.name] = min(below.get(tensor.name, bound), bound)
    return {op.index: below[op.outputs[0].name] for op in graph.ops
            if op.type == "input" and op.outputs[0].name in below}
