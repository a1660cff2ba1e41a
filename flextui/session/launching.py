"""Launches as a person asks for them, for both front ends: a strategy on a cluster's
devices, here or on hosts (a ``LaunchTarget``), prepared with the defaults a person
expects (a short timed run, the backend the machine allows, a run log beside the
searches'), and the data-parallel baseline on the same devices and target."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flextui.cost.model import CostModel
from flextui.fields import FormFields
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.runtime.job import RUN_SUFFIX, Prepared, choose_backend, prepare
from flextui.runtime.spec import Training
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
    baseline: Callable[[], LiveLaunch] | None


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
                   run_log: Path | None = None, stop: threading.Event | None = None
                   ) -> LaunchRequest:
    """Prepare ``strategy`` on ``cluster`` at ``target`` (default: this machine), or
    FlextuiError if it cannot run there; its baseline runs data parallelism at the same
    target, with a run id of its own."""
    training = training or Training(steps=APP_STEPS, warmup=APP_WARMUP,
                                    backend=choose_backend(cluster))
    target = target or LaunchTarget()
    prepared = prepare(graph, strategy, cluster, training, cost_model, target,
                       run_log=run_log or default_log_path(graph, cluster, log_dir,
                                                           suffix=RUN_SUFFIX), stop=stop)

    def baseline() -> LiveLaunch:
        data_parallel = builtin_strategy("data-parallel", graph, cluster)
        run = prepare(graph, data_parallel, cluster, training, cost_model, target.again(),
                      run_log=default_log_path(graph, cluster, log_dir, suffix=RUN_SUFFIX))
        return LiveLaunch(run, "data parallel")

    return LaunchRequest(prepared, strategy.name or "strategy", title,
                         None if strategy.name == "data-parallel" else baseline)
