"""Choosing what to search: a model with its options, a cluster, and the default a first
launch opens on. The CLI and the app's Setup screen both call these, with what a person
typed (strings from a form, or argparse values); a bad value raises
:class:`~flextui.search.options.FieldError` naming its field, or the loader's own
ModelError / ClusterError."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from flextui.defaults import DEFAULT_CLUSTER, DEFAULT_MODEL
from flextui.errors import ClusterError, FieldError
from flextui.graph import OpGraph
from flextui.graph.library import MAX_BATCH_SIZE, load_model, model_source
from flextui.machine import Cluster, detect, load_named_cluster
from flextui.machine.library import LOCAL, split_resized
from flextui.search.options import parse_whole

#: the cluster a first launch uses when this machine has too few GPUs to split over,
#: as the Setup form shows it (a library cluster and its node count)
FIRST_CLUSTER, FIRST_CLUSTER_NODES = split_resized(DEFAULT_CLUSTER)
#: the detected machine is the default only with at least this many GPUs
MIN_LOCAL_GPUS = 2
#: the fewest CPU processes the cluster choices offer: a split needs two
MIN_CPU_RANKS = 2


def parse_model_options(items: Iterable[str] = (),
                        batch_size: int | str | None = None) -> dict[str, str]:
    """``KEY=VALUE`` items (and a batch size, blank for the model's own) as the string
    options :func:`~flextui.graph.library.load_model` converts."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise FieldError("option", f"{item!r}: write KEY=VALUE, e.g. hidden=512")
        options[key.strip()] = value.strip()
    if batch_size is not None and str(batch_size).strip():
        options["batch_size"] = str(parse_whole("batch_size", batch_size, 1))
    return options


def parse_batch_per_device(value: int | str) -> int:
    """A per-device batch as typed (the CLI's --batch-per-device, the app's field): a
    whole number, at least 1."""
    return parse_whole("batch_per_device", value, 1)


def per_device_batch(batch_per_device: int | str, devices: int) -> int:
    """The global batch of the FlexFlow paper's convention: ``batch_per_device`` samples
    (a whole number, at least 1) on each of the cluster's ``devices``. Its checks are
    the model's, on the global batch; only a product past any batch is refused here,
    naming the per-device value."""
    most = max(1, MAX_BATCH_SIZE // devices)
    per_device = parse_batch_per_device(batch_per_device)
    if per_device > most:
        raise FieldError("batch_per_device", f"{per_device:,} on {devices:,} devices is a batch "
                         f"of more than {MAX_BATCH_SIZE:,}: give at most {most:,}")
    return per_device * devices


def form_batch(batch_size: str, batch_per_device: str, devices: int | None) -> str | int:
    """The batch a form's two fields give: its batch size (blank: the model's), or its
    batch per device times ``devices``, the chosen cluster's (None: none loaded)."""
    if not batch_per_device.strip():
        return batch_size
    if batch_size.strip():
        raise FieldError("batch_per_device", "or batch size: fill one of them, not both")
    if devices is None:
        raise FieldError("batch_per_device", "counts the cluster's devices: fix the cluster "
                         "first")
    return per_device_batch(batch_per_device, devices)


def split_options(text: str) -> list[str]:
    """``"hidden=512, layers=2"`` (commas or spaces) -> ``["hidden=512", "layers=2"]``."""
    return [item for item in re.split(r"[\s,]+", text) if item]


def load_model_choice(model: str, batch_size: int | str | None = None,
                      options: str = "") -> OpGraph:
    """A library model or a model file, with a batch size and ``KEY=VALUE`` options; the
    graph carries the model's source, made here from what the user typed."""
    return load_model(model_source(model),
                      **parse_model_options(split_options(options), batch_size))


def load_cluster_choice(cluster: str, nodes: int | str | None = None) -> Cluster:
    """A library cluster (resized to ``nodes`` when given), a TOML file, or "local"."""
    if nodes is None or not str(nodes).strip():
        return load_named_cluster(cluster.strip())
    count = parse_whole("nodes", nodes, 1)
    try:
        return load_named_cluster(cluster.strip(), nodes=count)
    except ClusterError as e:
        raise FieldError("nodes", f"{count}: {e}; leave nodes blank to use the cluster "
                         "as defined") from None


def cpu_ranks_choice() -> int:
    """How many CPU processes of this machine the cluster choices offer as
    ``local-cpu-N``: one per core this process may use (at least two)."""
    return max(MIN_CPU_RANKS, detect.usable_cpus())


@dataclass(frozen=True)
class FirstChoice:
    """What a first launch opens on; ``nodes`` None leaves the cluster as it is."""

    model: str
    cluster: str
    nodes: int | None


def gpu_count(cluster: Cluster) -> int:
    return sum(not d.spec.is_cpu for d in cluster.devices)


def first_choice(local: Cluster | None = None) -> FirstChoice:
    """A built-in model on this machine when it has GPUs to split over, else on the
    paper's P100 node. ``local`` is the detected machine (detected here when None;
    that imports torch, so call it off a UI thread)."""
    local = local if local is not None else detect.detect_local()
    if gpu_count(local) >= MIN_LOCAL_GPUS:
        return FirstChoice(DEFAULT_MODEL, LOCAL, None)
    return FirstChoice(DEFAULT_MODEL, FIRST_CLUSTER, FIRST_CLUSTER_NODES)
