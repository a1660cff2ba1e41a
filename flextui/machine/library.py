"""The built-in clusters (TOML files in ``flextui.library.clusters``) and name lookup."""

from __future__ import annotations

import re
import tomllib
from importlib.resources import files
from pathlib import Path

from flextui.errors import ClusterError
from flextui.limits import RANKS_PER_HOST, path_problem
from flextui.machine.cluster import Cluster
from flextui.machine.toml import load_cluster, parse_cluster

__all__ = ["LOCAL", "cluster_names", "cpu_ranks_name", "load_named_cluster", "resized_name",
           "split_resized"]

LOCAL = "local"
#: N CPU processes of this machine (``machine.detect.cpu_ranks``): ``local-cpu-4``
_CPU_RANKS = re.compile(r"local-cpu-(?P<ranks>\d{1,5})")
MAX_CPU_RANKS = RANKS_PER_HOST.value


def cpu_ranks_name(ranks: int) -> str:
    return f"local-cpu-{ranks}"
_PACKAGE = "flextui.library.clusters"


def _library():
    return files(_PACKAGE)


def cluster_names() -> list[str]:
    """The names of the built-in clusters (their file names without ``.toml``), sorted."""
    return sorted(entry.name.removesuffix(".toml") for entry in _library().iterdir()
                  if entry.name.endswith(".toml") and entry.is_file())


_RESIZED = re.compile(r"(?P<name>[\w.-]+)@(?P<nodes>\d{1,6})nodes?")


def resized_name(name: str, nodes: int) -> str:
    """The name of built-in cluster ``name`` resized to ``nodes`` nodes: ``p100-4x4@1node``
    (what a resized cluster is called, and a name ``load_named_cluster`` takes)."""
    return f"{name}@{nodes}node{'s' if nodes > 1 else ''}"


def split_resized(name: str) -> tuple[str, int | None]:
    """``"p100-4x4@1node"`` -> ``("p100-4x4", 1)``; any other name -> ``(name, None)``."""
    resized = _RESIZED.fullmatch(name)
    return (resized["name"], int(resized["nodes"])) if resized else (name, None)


def load_named_cluster(name_or_path: str | Path, nodes: int | None = None) -> Cluster:
    """A built-in cluster by name, a cluster TOML file by path, or ``"local"`` (detected).
    ``nodes`` resizes a built-in cluster described by node count (``[nodes]``), e.g. the
    paper's P100 cluster at 4 GPUs is ``load_named_cluster("p100-4x4", nodes=1)``, which
    is also ``load_named_cluster("p100-4x4@1node")``: a resized cluster's own name."""
    text = str(name_or_path)
    problem = path_problem(text)
    if problem is not None:  # before any file is looked at
        raise ClusterError(f"cluster {problem}")
    if nodes is not None:
        return _resized(text, nodes)
    base, count = split_resized(text)
    if count is not None and not isinstance(name_or_path, Path) and base in cluster_names():
        return _resized(base, count)
    if not isinstance(name_or_path, Path):
        if text == LOCAL:
            from flextui.machine.detect import detect_local
            return detect_local()
        cpu = _CPU_RANKS.fullmatch(text)
        if cpu:
            from flextui.machine.detect import cpu_ranks
            ranks = int(cpu["ranks"])
            if not 1 <= ranks <= MAX_CPU_RANKS:
                raise ClusterError(f"cluster {text!r}: give from 1 to {MAX_CPU_RANKS} CPU "
                                   "processes")
            return cpu_ranks(ranks)
        if text in cluster_names():
            entry = _library().joinpath(f"{text}.toml")
            return parse_cluster(_library_data(text), str(entry))
    path = Path(text).expanduser()
    if isinstance(name_or_path, Path) or path.suffix == ".toml" or path.exists() \
            or "/" in text or "\\" in text:
        return load_cluster(path)
    known = ", ".join([*cluster_names(), LOCAL, cpu_ranks_name(4) + " (N CPU processes)"])
    raise ClusterError(f"unknown cluster {text!r}; built-in clusters: {known}; "
                       f"or give a path to a .toml file")


def _library_data(name: str) -> dict:
    entry = _library().joinpath(f"{name}.toml")
    try:
        return tomllib.loads(entry.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ClusterError(f"{entry}: TOML syntax error: {e}") from None


def _resized(name: str, nodes: int) -> Cluster:
    if name not in cluster_names():
        raise ClusterError(f"only a built-in cluster can be resized, not {name!r}")
    data = _library_data(name)
    if "nodes" not in data or not isinstance(nodes, int) or nodes < 1:
        raise ClusterError(f"cluster {name!r} cannot be resized to {nodes!r} nodes "
                           "(it needs a [nodes] table, and nodes must be at least 1)")
    data["nodes"]["count"] = nodes
    data["name"] = resized_name(name, nodes)
    return parse_cluster(data, f"{_library().joinpath(name + '.toml')} resized to {nodes} nodes")
