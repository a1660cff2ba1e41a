"""What the task store builds an op's, an edge's and a parameter's tasks from: plain
arrays, computed once per op and config (and memoised, as a search proposes the same
configs again and again), so that building tasks is a call into the store, not a Python
loop over them (see ``taskgraph`` for the rules the tasks follow).

- ``OpPlan``: an op's block devices and forward/backward times under a config (a
  recomputed op's backward time includes its forward's; it keeps no activation).
- ``EdgePlan``: the block overlaps of a producer/consumer pair of configs (by division,
  ``overlaps``) with, per overlap, the route's hops there and back: resource sets and
  transfer times.
- ``ParamPlan`` (``unit_plan``): a parameter's replica groups under its users' configs
  (``replicas``) and its shard stage with each group's all-reduce, and the shard each
  device holds, keeps the gradient of and updates;
  ``Planner.unit`` merges the plans of parameters whose gradients share buckets
  (``buckets``) into one.

Costs come from the cost model, which times a block by its device's spec: ops and
updates are timed once per kind of device, not once per device.

Edge and parameter plans are shared by ops alike (``geometry``): the layers of a deep
model split, read and write alike, so a plan made for one layer's edge serves the
others under the same configs.

With the C store, and a cost model whose transfer time over a link is latency + bytes
/ bandwidth (``CostModel.transfer_terms``), an edge's overlaps and hops are found in C
(``csrc/plan.c``: every consumer region against every producer block, routes from a
table filled once per device pair); otherwise, and as the reference they are tested
against, in Python (``overlaps.block_overlaps``, a route and a ``transfer_s`` a hop).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass

from flextui.cost.model import CostModel, allgather_s, transfer_terms
from flextui.cost.optimizers import OptimizerKind
from flextui.errors import ClusterError
from flextui.graph import Op, OpGraph, region_volume
from flextui.graph.tensor import dtype_bytes
from flextui.machine import Cluster, Device, Link
from flextui.sim import taskstore
from flextui.sim.buckets import cluster_bucket_limit
from flextui.sim.overlaps import block_overlaps, micro_blocks
from flextui.sim.replicas import replica_plan
from flextui.sim.taskstore import TaskStore
from flextui.sim.unit_plan import ParamPlan, merge_unit, shards_of
from flextui.strategy import ParallelConfig, ShardStage
from flextui.strategy.pipeline import micro_block_shape, micro_region
from flextui.strategy.shards import shard_numel

#: entries a plan memo keeps before it starts over (bounds memory on long searches)
PLAN_MEMO_LIMIT = 200_000


@dataclass(frozen=True)
class OpPlan:
    devices: array            # 'i', per task of the config
    forward: array            # 'd'
    backward: array | None    # 'd'; None in inference
    kept: int                 # bytes each forward task keeps (its outputs)
    workspace: int


@dataclass(frozen=True)
class EdgePlan:
    """Per overlap ``i``: input ``slot[i]`` of consumer task ``k[i]`` reads ``nbytes[i]``
    of producer task ``m[i]``, over the hops ``fhops[i]..fhops[i+1]`` of ``frsets`` and
    ``fdurations``; its gradient goes back over ``bhops`` (the reverse route)."""

    slot: array
    k: array
    m: array
    nbytes: array
    fhops: array
    frsets: array
    fdurations: array
    bhops: array
    brsets: array
    bdurations: array


def geometry(op: Op) -> tuple:
    """What an op's blocks depend on: its type, attributes, space, and the shapes and
    dtypes of its inputs, outputs and parameters, with how each parameter is split. Ops
    with equal geometry read, write and update the same regions under the same config
    (attributes are compared by their repr, so ops holding objects without a value's
    repr are never taken as alike)."""
    return (op.type, repr(sorted(op.attrs.items())), op.space,
            tuple((t.shape, t.dtype) for t in op.inputs),
            tuple((t.shape, t.dtype) for t in op.outputs),
            tuple((p.shape, p.dtype) for p in op.params),
            tuple((spec.shape, spec.dim_map) for spec in op.param_specs))


def _memo_put(memo: dict, key: object, value: object) -> None:
    if len(memo) >= PLAN_MEMO_LIMIT:
        memo.clear()
    memo[key] = value


class Planner:
    """Makes (and memoises) the plans of one task graph; owns the resource sets it
    interns in the graph's store."""

    def __init__(self, graph: OpGraph, cluster: Cluster, cost: CostModel, store: TaskStore,
                 training: bool, master_dtype: str | None = None, microbatches: int = 1,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> None:
        self.graph, self.cluster, self.cost, self.store = graph, cluster, cost, store
        self.training, self.optimizer = training, optimizer
        #: ops and edges are planned for one micro-batch (each runs this many)
        self.microbatches = microbatches
        #: the dtype of the parameters' training state (None: each parameter's own)
        self.master_dtype = master_dtype
        self.num_devices = cluster.num_devices
        self._rsets: dict[tuple[int, ...], int] = {}
        #: per device, the index of its spec among the cluster's distinct specs
        specs: dict[object, int] = {}
        self._spec_of = [specs.setdefault(d.spec, len(specs)) for d in cluster.devices]
        self._geometry: dict[int, int] = {}   # op index -> id of its geometry
        self._geometries: dict[tuple, int] = {}
        #: the resource set a transfer over each link holds: the link, and on a cluster
        #: whose devices drive their communication, the devices at its ends
        self.hop_rset = [self._hop_rset(link) for link in cluster.links]
        self._ops: dict[tuple[int, ParallelConfig], OpPlan] = {}
        self._edges: dict[tuple, EdgePlan] = {}
        self._hop_memo: dict[tuple[int, int, int], tuple[list[int], list[float]]] = {}
        self._route_memo: dict[tuple[int, int], tuple[list[int], tuple[Link, ...]]] = {}
        self._transfer_memo: dict[tuple[int, int], float] = {}
        self._params: dict[tuple, ParamPlan] = {}
        self._rings: dict[tuple[int, ...], int] = {}
        self._device_sets: dict[tuple[tuple[int, ...], ShardStage], int] = {}
        #: the most bytes one all-reduce sums (``buckets``), as the runtime's ranks do
        self.bucket_bytes = cluster_bucket_limit(cluster)
        self._bulk = _BulkEdges.for_cluster(cluster, cost, self.hop_rset, microbatches)
        self._param_regions: dict[tuple, tuple] = {}
        self._updates: dict[tuple, float] = {}

    def resource_set(self, resources: tuple[int, ...]) -> int:
        """The store's id of a set of resources (a single resource is its own set)."""
        if len(resources) == 1:
            return resources[0]
        r = self._rsets.get(resources)
        if r is None:
            r = self._rsets[resources] = self.store.add_resource_set(resources)
        return r

    def _hop_rset(self, link: Link) -> int:
        held = [self.num_devices + link.id]
        if self.cluster.host_driven_comm:
            ids = {d.name: d.id for d in self.cluster.devices}
            held += [ids[end] for end in (link.src, link.dst) if end in ids]
        return self.resource_set(tuple(sorted(held)))

    def _by_spec(self, devices: tuple[int, ...], cost: Callable[[Device], object]) -> list:
        """``cost(device)`` for each of ``devices``, asked once per kind of device."""
        spec_of = self._spec_of
        kinds = [spec_of[d] for d in devices]
        one_of_kind = {k: d for d, k in zip(devices, kinds)}
        value = {k: cost(self.cluster.device(d)) for k, d in one_of_kind.items()}
        return [value[k] for k in kinds]

    def geometry_id(self, op: Op) -> int:
        """A small int standing for ``geometry(op)``, equal for ops alike."""
        gid = self._geometry.get(op.index)
        if gid is None:
            gid = self._geometry[op.index] = self._geometries.setdefault(geometry(op),
                                                                         len(self._geometries))
        return gid

    # -- ops ----------------------------------------------------------------------------

    def op(self, op: Op, config: ParallelConfig) -> OpPlan:
        key = (op.index, config)
        plan = self._ops.get(key)
        if plan is None:
            shape = micro_block_shape(op, config, self.microbatches)
            costs = self._by_spec(config.devices,
                                  lambda device: self.cost.op_cost(op, shape, device))
            first = micro_region(op, config.task_region(op, 0), self.microbatches, 0)
            kept = sum(region_volume(r) * dtype_bytes(t.dtype)
                       for r, t in zip(op.output_regions(first), op.outputs))
            backward = None
            if self.training and op.type != "input":
                # recomputed: nothing kept, and each backward task re-runs its forward first
                recompute = config.recompute
                kept = 0 if recompute else kept
                backward = array("d", [c.backward_s + c.forward_s * recompute for c in costs])
            # the workspace is a block's: the first task's stands for all (a cost model
            # that gives one per kind of device would need a column of them)
            plan = OpPlan(array("i", config.devices), array("d", [c.forward_s for c in costs]),
                          backward, kept, costs[0].workspace_bytes if costs else 0)
            _memo_put(self._ops, key, plan)
        return plan

    # -- edges --------------------------------------------------------------------------

    def _route(self, src: int, dst: int, why: Callable[[], str]) -> tuple[Link, ...]:
        """The route from device ``src`` to ``dst``; without one, a ClusterError saying
        ``why()`` it was needed (worded only then: routes are asked for on a hot path)."""
        try:
            return self.cluster.route(src, dst)
        except ClusterError as exc:
            raise ClusterError(f"{why()}: {exc}") from None

    def _hops(self, src: int, dst: int, nbytes: int, why: Callable[[], str],
              ) -> tuple[list[int], list[float]]:
        """The resource sets and transfer times of ``nbytes`` moved from ``src`` to
        ``dst``, hop by hop (memoised: by the pair and size, and each link's time by the
        link and size, as random configs move many sizes between many pairs)."""
        key = (src, dst, nbytes)
        hops = self._hop_memo.get(key)
        if hops is None:
            route = self._route_memo.get((src, dst))
            if route is None:
                links = self._route(src, dst, why)
                route = self._route_memo[(src, dst)] = (
                    [self.hop_rset[link.id] for link in links], links)
            rsets, links = route
            durations = []
            for link in links:
                dkey = (link.id, nbytes)
                seconds = self._transfer_memo.get(dkey)
                if seconds is None:
                    seconds = self.cost.transfer_s(nbytes, link)
                    _memo_put(self._transfer_memo, dkey, seconds)
                durations.append(seconds)
            hops = (rsets, durations)
            _memo_put(self._hop_memo, key, hops)
        return hops

    def edge(self, producer: Op, consumer: Op, pconf: ParallelConfig, cconf: ParallelConfig,
             ) -> EdgePlan:
        slots = tuple((slot, t.index) for slot, t in enumerate(consumer.inputs)
                      if t.producer is producer)
        key = (self.geometry_id(producer), self.geometry_id(consumer), slots, pconf.split,
               cconf.split)
        plan = self._edges.get(key)
        if plan is None:
            plan = self._edge(producer, consumer, pconf, cconf)
            _memo_put(self._edges, key, plan)
        return plan

    def _edge(self, producer: Op, consumer: Op, pconf: ParallelConfig, cconf: ParallelConfig,
              ) -> EdgePlan:
        if self._bulk is not None and all(
                t.shape for t in consumer.inputs if t.producer is producer):
            return self._bulk.edge(producer, consumer, pconf, cconf,
                                   self.training and producer.type != "input",
                                   lambda: f"op {consumer.name!r} needs data from op "
                                           f"{producer.name!r}")
        return self._edge_by_pair(producer, consumer, pconf, cconf)

    def _edge_by_pair(self, producer: Op, consumer: Op, pconf: ParallelConfig,
                      cconf: ParallelConfig) -> EdgePlan:
        backward = self.training and producer.type != "input"
        columns: tuple[array, ...] = (array("i"), array("i"), array("i"), array("q"))
        slots, ks, ms, sizes = columns
        fhops, frsets, fdurations = array("i", [0]), array("i"), array("d")
        bhops, brsets, bdurations = array("i", [0]), array("i"), array("d")

        def why() -> str:
            return f"op {consumer.name!r} needs data from op {producer.name!r}"

        for slot, k, m, nbytes in block_overlaps(producer, consumer, pconf, cconf,
                                                 self.microbatches):
            slots.append(slot)
            ks.append(k)
            ms.append(m)
            sizes.append(nbytes)
            src, dst = pconf.devices[m], cconf.devices[k]
            if src != dst:
                rsets, durations = self._hops(src, dst, nbytes, why)
                frsets.extend(rsets)
                fdurations.extend(durations)
                if backward:
                    rsets, durations = self._hops(dst, src, nbytes, why)
                    brsets.extend(rsets)
                    bdurations.extend(durations)
            fhops.append(len(frsets))
            bhops.append(len(brsets))
        return EdgePlan(slots, ks, ms, sizes, fhops, frsets, fdurations, bhops, brsets,
                        bdurations)

    # -- parameters ---------------------------------------------------------------------

    def param(self, name: str, users: list[tuple[Op, int]],
              configs: tuple[ParallelConfig, ...], stage: ShardStage = ShardStage.NONE,
              ) -> ParamPlan:
        key = (tuple((self.geometry_id(op), i) for op, i in users),
               tuple(config.split for config in configs), stage)
        plan = self._params.get(key)
        if plan is None:
            plan = self._param(name, users, configs, stage)
            _memo_put(self._params, key, plan)
        return plan

    def _param(self, name: str, users: list[tuple[Op, int]],
               configs: tuple[ParallelConfig, ...], stage: ShardStage) -> ParamPlan:
        """The parameter's replica groups; a group on several devices sums its gradients
        (an all-reduce, or for stages 1 and 2 a reduce-scatter and an all-gather of the
        same bytes: the same time; for stage 3 the reduce-scatter alone, and an
        all-gather before each pass of the op), and each of its devices keeps a shard's
        gradient (stage 2 and up) and updates and keeps the state of a shard (stage 1
        and up), and at stage 3 keeps only that shard of the parameter."""
        blocks = tuple((region, config.devices[k])
                       for (op, i), config in zip(users, configs)
                       for k, region in enumerate(self._param_blocks(op, i, config)))
        param = users[0][0].params[users[0][1]]
        width = dtype_bytes(self.master_dtype or param.dtype)
        gdevs, gdevices, gblocks, gblockids = array("i", [0]), array("i"), array("i", [0]), \
            array("i")
        grsets, gdurations, gnbytes = array("i"), array("d"), array("q")
        gathers = array("d")
        syncs: list[tuple[int | None, int]] = []
        held: dict[int, list[int]] = {}   # device -> [bytes, gradient bytes, state bytes]
        for devices, numel, block_ids in replica_plan(blocks):
            nbytes = numel * width
            gdevices.extend(devices)
            gdevs.append(len(gdevices))
            gblockids.extend(block_ids)
            gblocks.append(len(gblockids))
            gnbytes.append(nbytes)
            sharded = stage if len(devices) > 1 else ShardStage.NONE
            part = shard_numel(numel, len(devices)) * width if sharded else nbytes
            full = sharded == ShardStage.PARAMETERS
            for d in devices:
                sums = held.setdefault(d, [0, 0, 0])
                sums[0] += part if full else nbytes
                sums[1] += part if sharded >= ShardStage.GRADIENTS else nbytes
                sums[2] += part
            # a ring for the group's all-reduce (training) or its gathers (stage 3)
            grsets.append(self._ring(name, devices)
                          if len(devices) > 1 and (self.training or full) else -1)
            gathers.append(allgather_s(self.cost, nbytes, devices, self.cluster)
                           if full else 0.0)
            if len(devices) > 1 and self.training:
                gdurations.append(gathers[-1] if full else
                                  self.cost.allreduce_s(nbytes, devices, self.cluster))
                # buckets hold groups of one device set and one stage; at stage 3 a
                # group is summed alone
                syncs.append((None if full else self._device_sets.setdefault(
                    (devices, sharded), len(self._device_sets)), nbytes))
            else:
                gdurations.append(0.0)
        shards = shards_of(held)
        udurations = array("d")
        if self.training:
            for d, states in zip(shards.devices, shards.states):
                # timed once per kind of device and shard size
                udurations.append(self._update_s(states, d))
        return ParamPlan(gdevs, gdevices, gblocks, gblockids, grsets, gdurations, gnbytes,
                         shards, udurations, tuple(syncs), gathers)

    def unit(self, plans: list[ParamPlan], blocks: list[int],
             ) -> tuple[ParamPlan, list[list[int]]]:
        """``unit_plan.merge_unit`` of ``plans``, its buckets timed by the cost model."""
        return merge_unit(plans, blocks, self.bucket_bytes,
                          lambda nbytes, devices: self.cost.allreduce_s(nbytes, devices,
                                                                        self.cluster))

    def _update_s(self, nbytes: int, d: int) -> float:
        device = self.cluster.device(d)
        key = (nbytes, device.spec)
        seconds = self._updates.get(key)
        if seconds is None:
            seconds = self._updates[key] = self.cost.update_s(nbytes, device, self.optimizer)
        return seconds

    def _param_blocks(self, op: Op, i: int, config: ParallelConfig) -> tuple:
        """The shard of ``op``'s parameter ``i`` each task of ``config`` uses."""
        key = (self.geometry_id(op), i, config.degrees)   # regions: the degrees alone
        regions = self._param_regions.get(key)
        if regions is None:
            regions = tuple(op.param_region(i, r) for r in config.regions(op))
            _memo_put(self._param_regions, key, regions)
        return regions

    def _ring(self, name: str, devices: tuple[int, ...]) -> int:
        """The resource set an all-reduce over ``devices`` holds: the links of its ring
        (and, on a cluster whose devices drive their communication, the devices);
        memoised, as every parameter of a data-parallel op rings the same devices."""
        r = self._rings.get(devices)
        if r is None:
            ring = list(zip(devices, devices[1:] + devices[:1]))
            links = sorted({self.num_devices + link.id for a, b in ring
                            for link in self._route(a, b, lambda: f"the gradients of "
                                                    f"parameter {name!r} are all-reduced")})
            if self.cluster.host_driven_comm:
                links = sorted(devices) + links
            r = self._rings[devices] = self.resource_set(tuple(links))
        return r


class _BulkEdges:
    """Edge plans made in C (``csrc/plan.c``), for a cluster whose links the cost model
    times as latency + bytes / bandwidth; owns the route table it fills as device pairs
    are first needed (a slot per pair: -1, or where the pair's link count and link ids
    start in ``links``)."""

    def __init__(self, cluster: Cluster, terms: list, hop_rset: list[int],
                 microbatches: int) -> None:
        from flextui.sim import _ctaskstore

        self.c = _ctaskstore
        self.cluster = cluster
        self.microbatches = microbatches
        self.devices = cluster.num_devices
        self.route_at = array("i", [-1]) * (self.devices * self.devices)
        self.links = array("i")
        self.hop_rset = array("i", hop_rset)
        self.latency = array("d", [t.latency for t in terms])
        self.bandwidth = array("d", [t.bandwidth for t in terms])

    @classmethod
    def for_cluster(cls, cluster: Cluster, cost: CostModel, hop_rset: list[int],
                    microbatches: int = 1) -> _BulkEdges | None:
        """The bulk planner, if the C store serves and every link's time is affine."""
        if taskstore.backend() != "C":
            return None
        terms = [transfer_terms(cost, link) for link in cluster.links]
        if any(t is None for t in terms):
            return None
        return cls(cluster, terms, hop_rset, microbatches)

    def _route(self, k: array, m: array, pdev: array, cdev: array, reverse: bool,
               why: Callable[[], str]) -> None:
        """Put the routes the pairs need, and the table lacks, into the table."""
        for code in self.c.unrouted(k, m, pdev, cdev, self.route_at, self.devices, reverse):
            src, dst = divmod(code, self.devices)
            try:
                ids = self.cluster.route_link_ids(src, dst)
            except ClusterError as exc:
                raise ClusterError(f"{why()}: {exc}") from None
            self.route_at[code] = len(self.links)
            self.links.append(len(ids))
            self.links.extend(ids)

    def edge(self, producer: Op, consumer: Op, pconf: ParallelConfig, cconf: ParallelConfig,
             backward: bool, why: Callable[[], str]) -> EdgePlan:
        micro = self.microbatches
        out_regions = [producer.output_regions(r) for r in micro_blocks(producer, pconf, micro)]
        in_regions = [consumer.input_regions(r) for r in micro_blocks(consumer, cconf, micro)]
        slots, ks, ms, sizes = array("i"), array("i"), array("i"), array("q")
        for slot, tensor in enumerate(consumer.inputs):
            if tensor.producer is not producer:
                continue
            blocks = array("q", [x for outs in out_regions for rng in outs[tensor.index]
                                 for x in rng])
            needs = array("q", [x for ins in in_regions for rng in ins[slot] for x in rng])
            k, m, nbytes = self.c.overlaps(blocks, needs, len(tensor.shape),
                                           dtype_bytes(tensor.dtype))
            slots.extend(array("i", [slot]) * len(k))
            ks.extend(k)
            ms.extend(m)
            sizes.extend(nbytes)
        pdev, cdev = array("i", pconf.devices), array("i", cconf.devices)
        hops = []
        for reverse in (False, True) if backward else (False,):
            self._route(ks, ms, pdev, cdev, reverse, why)
            hops.append(self.c.hops(ks, ms, sizes, pdev, cdev, self.route_at, self.links,
                                    self.devices, reverse, self.hop_rset, self.latency,
                                    self.bandwidth))
        if not backward:
            hops.append((array("i", [0]) * (len(ks) + 1), array("i"), array("d")))
        (fhops, frsets, fdurations), (bhops, brsets, bdurations) = hops
        return EdgePlan(slots, ks, ms, sizes, fhops, frsets, fdurations, bhops, brsets,
                        bdurations)
