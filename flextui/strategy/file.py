"""Strategy files: human-readable JSON, validated against the graph and cluster on load.

    {
      "format": "flextui-strategy", "version": 1,
      "name": "expert", "model": "alexnet", "graph": "<fingerprint>",
      "cluster": "p100-4x4", "devices": 16,
      "ops": {
        "conv1": {"degrees": {"sample": 16}, "devices": [0, 1, ..., 15]},
        "fc1":   {"degrees": {"sample": 2, "channel": 8}, "devices": [0, ..., 15],
                  "recompute": true}
      },
      "params": {"fc1.weight": {"shard": 2}},
      "microbatches": 4, "schedule": "1f1b"
    }

``degrees`` names the dims split (others have degree 1); ``devices`` lists the device
of each task in row-major order over the dims, in the op's dim order; ``recompute``
(default false) has the op's backward tasks re-run its forward instead of keeping its
activations. ``params`` (optional) gives a parameter's shard stage (``ShardStage``:
0 none, 1 the optimizer's state, 2 and the gradient; ZeRO's stages over each replica
group of the parameter); a parameter not listed is not sharded. ``microbatches``
(default 1) cuts each batch into that many micro-batches, run in ``schedule``'s order
(``gpipe``, the default, or ``1f1b``; ``strategy.pipeline``); ``precision`` (``fp32``,
the default, or ``bf16``) is what it computes in.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import StrategyError
from flextui.fields import FieldReader
from flextui.graph import Op, OpGraph
from flextui.limits import DEVICES, FILE_BYTES, read_file, read_json
from flextui.machine import Cluster
from flextui.strategy.config import ParallelConfig
from flextui.strategy.pipeline import Pipeline, Schedule
from flextui.strategy.precision import Precision
from flextui.strategy.shards import ShardStage
from flextui.strategy.strategy import Strategy

#: JSON, not msgpack: the name and version rule only (people read and write these)
STRATEGY = DocumentFormat("flextui-strategy", 1, "strategy", checksum=False)


def config_to_json(op: Op, config: ParallelConfig) -> dict[str, Any]:
    degrees = {dim.name: n for dim, n in zip(op.space, config.degrees) if n > 1}
    entry: dict[str, Any] = {"degrees": degrees, "devices": list(config.devices)}
    if config.recompute:
        entry["recompute"] = True
    return entry


def strategy_to_json(strategy: Strategy, graph: OpGraph, cluster: Cluster) -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": STRATEGY.name, "version": STRATEGY.version, "name": strategy.name,
        "model": graph.meta.get("model", graph.name), "graph": graph.fingerprint,
        "cluster": cluster.name, "devices": cluster.num_devices,
        "ops": {op.name: config_to_json(op, strategy[op.name]) for op in graph.ops},
    }
    if strategy.shards:
        data["params"] = shards_to_json(strategy, graph)
    if strategy.precision != Precision.FP32:
        data["precision"] = strategy.precision.value
    if strategy.pipeline.on:
        data.update(pipeline_to_json(strategy.pipeline))
    return data


def pipeline_to_json(pipeline: Pipeline) -> dict[str, Any]:
    """``microbatches`` and ``schedule``, as a strategy file's top level holds them."""
    return {"microbatches": pipeline.microbatches, "schedule": pipeline.schedule.value}


def shards_to_json(strategy: Strategy, graph: OpGraph) -> dict[str, Any]:
    """The ``params`` section: each sharded parameter's stage, in the graph's order."""
    return {name: {"shard": int(strategy.shards[name])}
            for name in graph.parameters if name in strategy.shards}


def save_strategy(path: str | Path, strategy: Strategy, graph: OpGraph, cluster: Cluster) -> None:
    """Write atomically (temp file + rename), so a crash never leaves half a file."""
    path = Path(path)
    text = json.dumps(strategy_to_json(strategy, graph, cluster), indent=1)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise StrategyError(f"cannot write strategy file {path}: {exc.strerror}") from None


#: the keys of a strategy file and of each op's entry (any other is a typo, refused)
TOP_KEYS = ("format", "version", "name", "model", "graph", "cluster", "devices", "ops",
            "params", "precision", "microbatches", "schedule")
OP_KEYS = ("degrees", "devices", "recompute")
PARAM_KEYS = ("shard",)
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")


def config_from_json(op: Op, data: Any, f: FieldReader, field: str) -> ParallelConfig:
    """One op's entry, ``{"degrees": {dim: degree}, "devices": [...]}`` and optionally
    ``"recompute": true``."""
    f.check_keys(f.mapping(data, field), OP_KEYS, field)
    names = [d.name for d in op.space]
    degrees_by_name = f.mapping(data.get("degrees", {}), f"{field}.degrees")
    for dim, degree in degrees_by_name.items():
        if dim not in names:
            f.fail(f"{field}.degrees", f"op {op.name!r} has no dim {dim!r:.60}; its dims are "
                                       f"{', '.join(names)}")
        f.integer(degree, f"{field}.degrees.{dim}", 1)
    devices = f.items(f.required(data, "devices", field, '"devices": [0, 1]'),
                      f"{field}.devices")
    return ParallelConfig(tuple(degrees_by_name.get(name, 1) for name in names),
                          tuple(f.integer(d, f"{field}.devices", 0) for d in devices),
                          f.boolean(data.get("recompute", False), f"{field}.recompute"))


def shards_from_json(data: Any, graph: OpGraph, f: FieldReader) -> dict[str, ShardStage]:
    """The ``params`` section: ``{"<parameter>": {"shard": 0..3}}``."""
    stages = {}
    for param, entry in f.mapping(data, "params").items():
        field = f"params.{param}"
        if f.string(param, "params") not in graph.parameters:
            f.fail(field, f"graph {graph.name!r} has no parameter {param!r:.60}; `flextui "
                          "show --json` lists each op's params")
        f.check_keys(f.mapping(entry, field), PARAM_KEYS, field)
        stage = f.integer(f.required(entry, "shard", field, '"shard": 2'), f"{field}.shard",
                          0, max(ShardStage))
        stages[param] = ShardStage(stage)
    return stages


def precision_from_json(data: Any, f: FieldReader) -> Precision:
    """A strategy's ``precision``: ``"fp32"`` or ``"bf16"``."""
    return Precision(f.choice(data, "precision", tuple(Precision)))


def pipeline_from_json(data: dict[str, Any], f: FieldReader) -> Pipeline:
    """A strategy's ``microbatches`` (default 1) and ``schedule`` (default gpipe)."""
    return Pipeline(f.integer(data.get("microbatches", 1), "microbatches", 1, 1 << 16),
                    Schedule(f.choice(data.get("schedule", "gpipe"), "schedule",
                                      tuple(Schedule))))


def strategy_from_json(data: Any, graph: OpGraph, cluster: Cluster, source: str,
                       same_graph: bool = False) -> Strategy:
    if not isinstance(data, dict) or data.get("format") != STRATEGY.name:
        raise StrategyError(f"{source} is not a flextui strategy file (no \"format\": "
                            f"\"{STRATEGY.name}\")")
    try:
        STRATEGY.check_version(data.get("version"))
    except BadDocument as bad:
        upgrade = "; upgrade flextui to read it" if bad.newer_version else ""
        raise StrategyError(f"{source}: {bad.problem}{upgrade}") from None
    f = FieldReader(source, StrategyError)
    f.check_keys(data, TOP_KEYS, "")
    name = f.string(data.get("name", Path(source).stem), "name", empty=True)
    for key in ("model", "cluster"):
        if key in data:
            f.string(data[key], key)
    if "graph" in data and not _FINGERPRINT.fullmatch(f.string(data["graph"], "graph")):
        f.fail("graph", f"expected the fingerprint of the graph the strategy was made for "
                        f"(16 hex digits, as `flextui show --json` prints it), found "
                        f"{data['graph']!r:.60}")
    if "devices" in data:
        f.integer(data["devices"], "devices", 1, DEVICES.value)
    if same_graph:
        _check_made_for(data, graph, cluster, source)
    ops = f.mapping(f.required(data, "ops", "", '"ops": {"fc1": {"degrees": {"sample": 4}, '
                                                '"devices": [0, 1, 2, 3]}}'), "ops")
    configs = {}
    for op_name, entry in ops.items():
        if f.string(op_name, "ops") not in graph:
            f.fail(f"ops.{op_name}", f"graph {graph.name!r} has no op {op_name!r:.60}; was "
                                     "this strategy made for another model or batch size?")
        configs[op_name] = config_from_json(graph.op(op_name), entry, f, f"ops.{op_name}")
    strategy = Strategy(configs, name, shards_from_json(data.get("params", {}), graph, f),
                        precision_from_json(data.get("precision", "fp32"), f),
                        pipeline_from_json(data, f))
    try:
        strategy.check(graph, cluster.num_devices)
    except StrategyError as exc:
        raise StrategyError(f"{source}: {exc} (cluster {cluster.name!r})") from None
    return strategy


def _check_made_for(data: dict, graph: OpGraph, cluster: Cluster, source: str) -> None:
    """Refuse a strategy file made for another graph (another model, batch or options:
    its fingerprint) or for more devices than ``cluster`` has."""
    fingerprint = data.get("graph")
    if fingerprint is None:
        raise StrategyError(f"{source} does not say which graph it was made for (no "
                            f"\"graph\" field); if it was made for this one, add \"graph\": "
                            f"\"{graph.fingerprint}\" ({graph.name!r} at batch "
                            f"{graph.batch_size})")
    if fingerprint != graph.fingerprint:
        model = data.get("model")
        made_for = f" (model {model!r:.60})" if isinstance(model, str) else ""
        raise StrategyError(f"{source} was made for another graph{made_for}, fingerprint "
                            f"{fingerprint!r}; this is {graph.name!r} at batch "
                            f"{graph.batch_size} ({graph.fingerprint}): search a strategy for "
                            "this model, batch size and options")
    devices = data.get("devices")
    if isinstance(devices, int) and devices > cluster.num_devices:
        raise StrategyError(f"{source} was made for {devices} devices (cluster "
                            f"{str(data.get('cluster'))[:60]!r}); this launch has "
                            f"{cluster.num_devices} ({cluster.name}): search a strategy for "
                            f"these devices with --cluster {cluster.name}")


def load_strategy(path: str | Path, graph: OpGraph, cluster: Cluster,
                  same_graph: bool = False) -> Strategy:
    """A strategy file, checked against ``graph`` and ``cluster``; with ``same_graph``
    it must also have been made for this very graph (``flextui launch`` runs only
    that)."""
    path = Path(path)
    try:
        data = read_json(read_file(path, FILE_BYTES).decode(), str(path))
    except FileNotFoundError:
        raise StrategyError(f"strategy file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StrategyError(f"cannot read strategy file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise StrategyError(f"strategy file {path} is not valid JSON: {exc.msg} at line "
                            f"{exc.lineno}, column {exc.colno}") from None
    return strategy_from_json(data, graph, cluster, str(path), same_graph)
