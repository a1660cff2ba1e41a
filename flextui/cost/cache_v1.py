"""Reading version 1 profile caches, which stored each measured optimizer update as the
task of a made-up op type, ``sgd-momentum-update``, with the shard as its one parameter
(element count) and the update's time as the forward time. Version 2 keeps updates as
records of their own (``UpdateKey``, ``UpdateEntry``); a version 1 file reads as the
same tasks and updates, and is written as version 2 when saved.
"""

from __future__ import annotations

import msgpack

from flextui.cost.cache_records import ProfileEntry, ProfileKey, UpdateEntry, UpdateKey
from flextui.cost.optimizers import OptimizerKind
from flextui.graph.tensor import dtype_bytes

V1_UPDATE_OP = "sgd-momentum-update"
_MARK = msgpack.packb(V1_UPDATE_OP)   # in the bytes of every such key


def split_updates(entries: dict[bytes, ProfileEntry]
                  ) -> tuple[dict[bytes, ProfileEntry], dict[UpdateKey, UpdateEntry]]:
    """A version 1 file's entries as (its tasks, its updates); ValueError for an update
    entry version 1 could not have written."""
    tasks, updates = {}, {}
    for code, entry in entries.items():
        key = ProfileKey.from_encoded(code) if _MARK in code else None
        if key is None or key.op_type != V1_UPDATE_OP:
            tasks[code] = entry
            continue
        if [len(shape) for shape in key.param_shapes] != [1] or entry.forward_s is None:
            raise ValueError(f"a {V1_UPDATE_OP} entry with no shard or no time")
        shard = UpdateKey(key.param_shapes[0][0] * dtype_bytes(key.dtype), key.dtype,
                          key.device_name, key.torch_version, OptimizerKind.SGD)
        updates[shard] = UpdateEntry(entry.forward_s, entry.forward_spread_s or 0.0,
                                     entry.repeats, entry.measured_at)
    return tasks, updates
