"""A cost model of measured task times, with the analytic model where none was measured.

``ProfiledCostModel`` answers ``op_cost`` for a simulated device of the kind that was
profiled (the same GPU model, or the CPU for CPU devices) from a table of measured
forward and backward times, and from its base model (the roofline) for every other
device, every task the table lacks and every block that ran out of memory when it was
measured; ``fallbacks`` counts the distinct tasks that fell back. The optimizer update
of a profiled device's shard is timed from the measured updates of the run's optimizer
(``cost.update``) when the profile has them.

The table is fixed when the model is built (``from_cache``: the profiles of every task
the search may visit), and the identity carries it, compressed, so a search log holds
the times its search used: workers and replays rebuild the model with no profile file.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any

import msgpack

from flextui.cost.cache import ProfileCache
from flextui.cost.cache_records import FIELDS, ProfileEntry, ProfileKey
from flextui.cost.calibration import interpolate
from flextui.cost.model import CostModel, LinkTerms, OpCost, transfer_terms
from flextui.cost.optimizers import OptimizerKind
from flextui.cost.signatures import Measurement, task_signatures
from flextui.cost.update import Table as UpdateTable, cached_updates, update_sizes
from flextui.errors import FlextuiError
from flextui.graph import FLOAT_DTYPES, Op, OpGraph
from flextui.limits import decompress, read_json
from flextui.machine import Cluster, Device, Link
from flextui.machine.gpus import same_device_kind

IDENTITY_PREFIX = "profiled-v1"
Times = tuple[float, float]


class ProfiledCostModel(CostModel):
    def __init__(self, measurement: Measurement, times: dict[bytes, Times], base: CostModel,
                 wanted: int | None = None,
                 updates: Mapping[OptimizerKind, UpdateTable] | None = None) -> None:
        self.measurement, self.base = measurement, base
        self.times = times              # encoded profile key -> (forward_s, backward_s)
        #: per optimizer, (shard bytes, seconds) of its measured updates (none: no table)
        self.updates = {kind: table for kind, table in (updates or {}).items() if table}
        #: by the op's identity (and the op itself, kept alive so its id is not reused)
        self._memo: dict[tuple[int, tuple[int, ...], str], tuple[Op, OpCost]] = {}
        self._fallbacks: set[tuple[int, tuple[int, ...]]] = set()
        self._kinds: dict[str, bool] = {}
        #: the tasks a search may visit, measured or not (as many as measured if unknown)
        self.wanted = len(times) if wanted is None else wanted

    @classmethod
    def from_cache(cls, graph: OpGraph, num_devices: int, cache: ProfileCache,
                   measurement: Measurement, base: CostModel) -> ProfiledCostModel:
        """The measured times of every task a search of ``graph`` over ``num_devices``
        devices may visit that ``cache`` holds (out-of-memory entries left out): making
        the graph's inputs among them."""
        times = {}
        signatures = task_signatures(graph, measurement, num_devices=num_devices)
        for key in (s.key for s in signatures):
            entry = cache.get(key)
            if entry is not None and entry.forward_s is not None:  # not out of memory
                times[key.encoded] = (entry.forward_s, entry.backward_s or 0.0)
        sizes = update_sizes(graph, measurement.dtype)
        updates = {kind: cached_updates(cache, measurement, sizes, kind) for kind in OptimizerKind}
        return cls(measurement, times, base, wanted=len(signatures), updates=updates)

    # -- CostModel -------------------------------------------------------------------

    def op_cost(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost:
        memo = (id(op), block_shape, device.spec.kind)
        found = self._memo.get(memo)
        if found is None:
            found = self._memo[memo] = (op, self._cost(op, block_shape, device))
        return found[1]

    def transfer_s(self, nbytes: int, link: Link) -> float:
        return self.base.transfer_s(nbytes, link)

    def transfer_terms(self, link: Link) -> LinkTerms | None:
        return transfer_terms(self.base, link)

    def update_s(self, nbytes: float, device: Device,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> float:
        """``optimizer``'s update of an ``nbytes`` shard: measured on a profiled device
        when the profile has that optimizer's updates, else the base model's."""
        table = self.updates.get(optimizer)
        if table and self._profiled(device.spec.kind):
            return interpolate(table, nbytes)
        return self.base.update_s(nbytes, device, optimizer)

    def allreduce_s(self, nbytes: float, devices: tuple[int, ...], cluster: Cluster) -> float:
        return self.base.allreduce_s(nbytes, devices, cluster)

    def _cost(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost:
        base = self.base.op_cost(op, block_shape, device)
        if not self._profiled(device.spec.kind):
            return base
        found = self.times.get(self.measurement.key(op, block_shape).encoded)
        if found is None:
            self._fallbacks.add((op.index, block_shape))
            return base
        forward, backward = found
        return OpCost(forward, backward, base.workspace_bytes)

    def _profiled(self, kind: str) -> bool:
        if kind not in self._kinds:
            self._kinds[kind] = same_device_kind(kind, self.measurement.device_name)
        return self._kinds[kind]

    @property
    def fallbacks(self) -> int:
        """Distinct tasks of a profiled device kind simulated so far without a measured
        time (the base model's time was used)."""
        return len(self._fallbacks)

    # -- identity --------------------------------------------------------------------

    @property
    def identity(self) -> str:
        m = self.measurement
        table = [[msgpack.unpackb(k, raw=False), f, b] for k, (f, b) in sorted(self.times.items())]
        packed = base64.b64encode(zlib.compress(msgpack.packb(table, use_bin_type=True), 9))
        body = {"base": self.base.identity, "device": m.device_name, "dtype": m.dtype,
                "training": m.training, "torch": m.torch_version, "times": packed.decode()}
        if self.updates:
            body["optimizer_updates"] = {str(kind): [list(row) for row in table]
                                         for kind, table in sorted(self.updates.items())}
        if m.math:
            body["math"] = m.math
        return IDENTITY_PREFIX + json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_identity(cls, identity: str, rebuild_base) -> ProfiledCostModel | None:
        """The model an identity names (``rebuild_base`` rebuilds its base from the base's
        identity), None if it is not this model's; FlextuiError if it is damaged."""
        parsed = parse_identity(identity)
        if parsed is None:
            return None
        measurement, times, base, updates = parsed
        return cls(measurement, times, rebuild_base(base), updates=updates)

    def describe(self) -> str:
        m = self.measurement
        updates = "".join(f"; {kind} updates measured at {len(table)} sizes"
                          for kind, table in sorted(self.updates.items()))
        return (f"measured on {m.device_name} ({m.dtype}): {len(self.times):,} of the "
                f"{self.wanted:,} tasks a search may visit; the analytic model for the "
                f"rest{updates}")


def parse_identity(identity: str) -> tuple[Measurement, dict[bytes, Times], str,
                                          dict[OptimizerKind, UpdateTable]] | None:
    """What a profiled model's identity holds: its measurement, its times, its base's
    identity and its measured updates per optimizer (an identity from before updates
    named their optimizer holds SGD's, as ``updates``); None if it is not a profiled
    model's identity; FlextuiError if damaged."""
    if not identity.startswith(IDENTITY_PREFIX):
        return None
    where = "profiled cost model"
    try:
        body = read_json(identity[len(IDENTITY_PREFIX):], where)
        packed = decompress(base64.b64decode(body["times"], validate=True), f"{where}: times")
        table = msgpack.unpackb(packed, raw=False)
        times = {}
        for k, f, b in table:
            entry = ProfileEntry(f, b, measured_at=0.0)   # finite times >= 0
            if entry.forward_s is None or entry.backward_s is None:
                raise ValueError("a task has no forward or backward time")
            times[ProfileKey.from_map(k).encoded] = (entry.forward_s, entry.backward_s)
        math = body.get("math", "")   # float32 on a GPU only (``cost.mathmode``)
        measurement = Measurement(FIELDS.choice(body["dtype"], "dtype", FLOAT_DTYPES),
                                  FIELDS.boolean(body["training"], "training"),
                                  FIELDS.string(body["device"], "device"),
                                  FIELDS.string(body["torch"], "torch"),
                                  FIELDS.string(math, "math") if math else "")
        if "updates" in body:
            updates = {OptimizerKind.SGD: _updates(body["updates"])}
        else:
            tables = FIELDS.mapping(body.get("optimizer_updates", {}), "optimizer_updates")
            updates = {OptimizerKind(FIELDS.choice(kind, "optimizer", tuple(OptimizerKind))):
                       _updates(rows) for kind, rows in tables.items()}
        return (measurement, times, FIELDS.string(body["base"], "base", limit=None, raw=False),
                updates)
    except (ValueError, KeyError, TypeError, zlib.error, msgpack.UnpackException) as exc:
        raise FlextuiError(f"{where}: its recorded times cannot be read "
                           f"({str(exc)[:200]}); the search log is damaged") from None


def _updates(rows: Any) -> UpdateTable:
    """Measured updates read back from an identity (ValueError if malformed)."""
    table = []
    for row in FIELDS.items(rows, "updates"):
        nbytes, seconds = FIELDS.items(row, "an update", 2)
        table.append((FIELDS.integer(nbytes, "update bytes", 1),
                      FIELDS.number(seconds, "update seconds", minimum=0)))
    if [n for n, _ in table] != sorted({n for n, _ in table}):
        raise ValueError("update sizes must increase")
    return tuple(table)
