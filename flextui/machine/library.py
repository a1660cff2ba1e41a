"""The built-in clusters (TOML files in ``flextui.library.clusters``) and name lookup."""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path

from flextui.errors import ClusterError
from flextui.machine.cluster import Cluster
from flextui.machine.toml import load_cluster, parse_cluster

__all__ = ["cluster_names", "load_named_cluster", "LOCAL"]

LOCAL = "local"
_PACKAGE = "flextui.library.clusters"


def _library():
    return files(_PACKAGE)


def cluster_names() -> list[str]:
    """The names of the built-in clusters (their file names without ``.toml``), sorted."""
    return sorted(entry.name.removesuffix(".toml") for entry in _library().iterdir()
                  if entry.name.endswith(".toml") and entry.is_file())


def load_named_cluster(name_or_path: str | Path) -> Cluster:
    """A built-in cluster by name, a cluster TOML file by path, or ``"local"`` (detected)."""
    text = str(name_or_path)
    if not isinstance(name_or_path, Path):
        if text == LOCAL:
            from flextui.machine.detect import detect_local
            return detect_local()
        if text in cluster_names():
            entry = _library().joinpath(f"{text}.toml")
            source = str(entry)
            try:
                data = tomllib.loads(entry.read_text(encoding="utf-8"))
            except tomllib.TOMLDecodeError as e:
                raise ClusterError(f"{source}: TOML syntax error: {e}") from None
            return parse_cluster(data, source)
    path = Path(text).expanduser()
    if isinstance(name_or_path, Path) or path.suffix == ".toml" or path.exists() \
            or "/" in text or "\\" in text:
        return load_cluster(path)
    known = ", ".join(cluster_names() + [LOCAL])
    raise ClusterError(f"unknown cluster {text!r}; built-in clusters: {known}; "
                       f"or give a path to a .toml file")
