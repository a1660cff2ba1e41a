"""Launches as a person asks for them, for both front ends: a strategy on a cluster's
devices, here or on hosts (a ``LaunchTarget``), prepared with the defaults a person
expects (a short timed run, the backend the machine allows, a run log beside the
searches'), and the data-parallel baseline on the same devices and target."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flextui.cost.model import CostModel
from flextui.fields import FormFields
from flextui.graph import OpGraph
from flextui.graph.library import with_source
from flextui.graph.model_source import ModelSource
from flextui.machine import Cluster
from flextui.runtime.job import RUN_SUFFIX, Prepared, choose_backend, prepare
from flextui.runtime.spec import Backend, Training
from flextui.runtime.target import LaunchTarget
from flextui.search.files import default_log_path
from flextui.session.live_launch import LiveLaunch
from flextui.strategy import BUILTIN_STRATEGIES, Strategy, builtin_strategy, load_strategy

#: what a launch from the app runs: long enough to read its figures, short enough to wait
APP_STEPS, APP_WARMUP = 50, 3


@dataclass(frozen=True)
class LaunchRequest:
    """A launch ready to show: its prepared run, how the screen names it, and how to
    make the data-parallel baseline (None: there is none to run)."""

    prepared: Prepared
    label: str
    title: str
    #: the baseline prepared (over hosts: after a preflight, which the event stops)
    baseline: Callable[[threading.Event | None], LiveLaunch] | None


def launch_strategy(text: str, graph: OpGraph, cluster: Cluster) -> Strategy:
    """What a person names to launch: a built-in strategy (data-parallel, expert,
    model-parallel, random) or a strategy file made for this model (its fingerprint);
    a name that cannot name a file is a FieldError naming ``strategy``."""
    if text in BUILTIN_STRATEGIES:
        return builtin_strategy(text, graph, cluster)
    return load_strategy(FormFields().path(text, "strategy"), graph, cluster, same_graph=True)


def launch_request(graph: OpGraph, strategy: Strategy, cluster: Cluster,
                   cost_model: CostModel, title: str, log_dir: Path = Path(),
                   training: Training | None = None, target: LaunchTarget | None = None, *,
                   model: ModelSource | None = None, run_log: Path | None = None,
                   stop: threading.Event | None = None) -> LaunchRequest:
    """Prepare ``strategy`` on ``cluster`` at ``target`` (default: this machine), or
    FlextuiError if it cannot run there; its baseline runs data parallelism at the same
    target, with a run id of its own. A graph read from a file (a replayed search's)
    that needs its model's code runs only from ``model``, the model the user gave, and
    only if that builds the same graph."""
    graph = with_source(graph, model)
    training = training or Training(steps=APP_STEPS, warmup=APP_WARMUP,
                                    backend=choose_backend(cluster))
    target = target or LaunchTarget()
    prepared = prepare(graph, strategy, cluster, training, cost_model, target,
                       run_log=run_log or default_log_path(graph, cluster, log_dir,
                                                           suffix=RUN_SUFFIX), stop=stop)

    def baseline(stop: threading.Event | None = None) -> LiveLaunch:
        data_parallel = builtin_strategy("data-parallel", graph, cluster)
        run = prepare(graph, data_parallel, cluster, training, cost_model, target.again(),
                      run_log=default_log_path(graph, cluster, log_dir, suffix=RUN_SUFFIX),
                      stop=stop)
        return LiveLaunch(run, "data parallel")

    return LaunchRequest(prepared, strategy.name or "strategy", title,
                         None if strategy.name == "data-parallel" else baseline)


def stand_ins(prepared: Prepared) -> str | None:
    """What runs in place of the cluster's GPUs when the ranks are CPU processes (gloo on
    a GPU cluster: no GPU per rank here), for a person to accept before the launch
    starts; None when the ranks run on the kind of device they were planned for."""
    kinds = Counter(d.spec.kind for d in prepared.cluster.devices if not d.spec.is_cpu)
    if prepared.spec.training.backend != Backend.GLOO or not kinds:
        return None
    gpus = " and ".join(f"{count} {kind}s" for kind, count in kinds.items())
    theirs = f"the {next(iter(kinds))}s'" if len(kinds) == 1 else "theirs"
    return (f"{prepared.spec.num_ranks} CPU processes stand in for the {gpus} of "
            f"{prepared.cluster.name}: the times measured will not be {theirs}.")
