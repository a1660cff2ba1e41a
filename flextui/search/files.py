"""Where a search's files go by default and what they are called: the log and the
exported strategy, named after the model and cluster (shared by ``flextui search``,
``flextui replay`` and the app)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from flextui.graph import OpGraph
from flextui.machine import Cluster


def run_name(graph: OpGraph, cluster: Cluster) -> str:
    """The stem of a run's files: model and cluster, with characters a file name should
    not hold (``torchvision:resnet50``'s colon, a path's slashes) as dashes."""
    name = f"{graph.meta.get('model', graph.name)}-{cluster.name}"
    return re.sub(r"[^A-Za-z0-9_.@+-]", "-", name)


def default_log_path(graph: OpGraph, cluster: Cluster, directory: Path = Path(),
                     suffix: str = ".ffsearch") -> Path:
    """A new log name in ``directory``, stamped with the local time (and numbered when
    a log of that name exists already: logs are created exclusively, never reused);
    ``suffix`` says which log (a search's, or a launch's ``.ffrun``)."""
    stem = f"{run_name(graph, cluster)}-{time.strftime('%Y%m%d-%H%M%S')}"
    path, n = directory / f"{stem}{suffix}", 1
    while path.exists():
        n += 1
        path = directory / f"{stem}-{n}{suffix}"
    return path


def default_export_path(log_path: str | Path | None, graph: OpGraph, cluster: Cluster) -> Path:
    """Next to the log (``run.best.json`` for ``run.ffsearch``), else in the current
    directory."""
    if log_path is not None:
        return Path(log_path).with_suffix(".best.json")
    return Path(f"{run_name(graph, cluster)}.best.json")


def searched_strategy_name(seed: int, chain: int | None = None, step: int | None = None) -> str:
    """The name of a strategy a search found, as exported: what it is ("searched (seed 3)",
    or "searched (seed 3, chain 1, step 200)" for a chain's strategy after a given step),
    never the name of the strategy the chain started from."""
    where = "".join(f", {what} {n}" for what, n in (("chain", chain or None), ("step", step))
                    if n is not None)
    return f"searched (seed {seed}{where})"
