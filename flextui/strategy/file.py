"""Strategy files: human-readable JSON, validated against the graph and cluster on load.

    {
      "format": "flextui-strategy", "version": 1,
      "name": "expert", "model": "alexnet", "graph": "<fingerprint>",
      "cluster": "p100-4x4", "devices": 16,
      "ops": {
        "conv1": {"degrees": {"sample": 16}, "devices": [0, 1, ..., 15]},
        "fc1":   {"degrees": {"sample": 2, "channel": 8}, "devices": [0, ..., 15]}
      }
    }

``degrees`` names the dims split (others have degree 1); ``devices`` lists the device
of each task in row-major order over the dims, in the op's dim order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import StrategyError
from flextui.graph import Op, OpGraph
from flextui.limits import FILE_BYTES, NAME_CHARS, read_file, read_json
from flextui.machine import Cluster
from flextui.strategy.config import ParallelConfig
from flextui.strategy.strategy import Strategy

#: JSON, not msgpack: the name and version rule only (people read and write these)
STRATEGY = DocumentFormat("flextui-strategy", 1, "strategy", checksum=False)


def config_to_json(op: Op, config: ParallelConfig) -> dict[str, Any]:
    degrees = {dim.name: n for dim, n in zip(op.space, config.degrees) if n > 1}
    return {"degrees": degrees, "devices": list(config.devices)}


def strategy_to_json(strategy: Strategy, graph: OpGraph, cluster: Cluster) -> dict[str, Any]:
    return {
        "format": STRATEGY.name, "version": STRATEGY.version, "name": strategy.name,
        "model": graph.meta.get("model", graph.name), "graph": graph.fingerprint,
        "cluster": cluster.name, "devices": cluster.num_devices,
        "ops": {op.name: config_to_json(op, strategy[op.name]) for op in graph.ops},
    }


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


def config_from_json(op: Op, data: Any, where: str) -> ParallelConfig:
    if not isinstance(data, dict) or set(data) - {"degrees", "devices"}:
        raise StrategyError(f"{where}: expected {{\"degrees\": {{...}}, \"devices\": [...]}}, "
                            f"got {data!r:.80}")
    degrees_by_name = data.get("degrees", {})
    names = [d.name for d in op.space]
    if not isinstance(degrees_by_name, dict):
        raise StrategyError(f"{where}.degrees: expected an object of dim name -> degree")
    unknown = set(degrees_by_name) - set(names)
    if unknown:
        raise StrategyError(f"{where}.degrees: op {op.name!r} has no dim "
                            f"{sorted(unknown)[0]!r:.60}; its dims are {', '.join(names)}")
    degrees = tuple(degrees_by_name.get(name, 1) for name in names)
    devices = data.get("devices")
    if not isinstance(devices, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in (*degrees, *devices)):
        raise StrategyError(f"{where}: degrees and devices must be integers (devices a list)")
    return ParallelConfig(degrees, tuple(devices))


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
    if same_graph:
        _check_made_for(data, graph, cluster, source)
    ops = data.get("ops")
    if not isinstance(ops, dict):
        raise StrategyError(f"{source}: field \"ops\" must be an object of op name -> config")
    configs = {}
    for name, entry in ops.items():
        if name not in graph:
            raise StrategyError(f"{source}: ops.{name:.60}: graph {graph.name!r} has no op "
                                f"{name!r:.60}; was this strategy made for another model or "
                                "batch size?")
        configs[name] = config_from_json(graph.op(name), entry, f"{source}: ops.{name}")
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str) or NAME_CHARS.problem(len(name)):
        raise StrategyError(f"{source}: field \"name\" must be a string of at most "
                            f"{NAME_CHARS.value} characters")
    strategy = Strategy(configs, name)
    try:
        strategy.check(graph, cluster.num_devices)
    except StrategyError as exc:
        raise StrategyError(f"{source}: {exc} (cluster {cluster.name!r})") from None
    return strategy


def _check_made_for(data: dict, graph: OpGraph, cluster: Cluster, source: str) -> None:
    """Refuse a strategy file made for another graph (another model, batch or options:
    its fingerprint) or for more devices than ``cluster`` has."""
    fingerprint = data.get("graph")
    if fingerprint != graph.fingerprint:
        model = data.get("model")
        made_for = f" (model {model!r:.60})" if isinstance(model, str) else ""
        raise StrategyError(f"{source} was made for another graph{made_for}, fingerprint "
                            f"{str(fingerprint)[:40]!r}; this is {graph.name!r} at batch "
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
