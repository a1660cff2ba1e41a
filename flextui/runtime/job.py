"""A launch from start to end, for the command line and the app: the strategy checked
against the graph and the launch's own devices before any process starts, its
iteration simulated (what the run is measured against), the launch plan written,
torchrun started and followed, every record in the run log, and the run summarised.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from flextui.cost.model import CostModel
from flextui.errors import FlextuiError, StrategyError
from flextui.graph import DimKind, OpGraph
from flextui.graph.library import require_source
from flextui.machine import Cluster
from flextui.machine.detect import usable_cpus
from flextui.runtime.hosts import place
from flextui.runtime.launch import Outcome, Run, Torchrun, free_port, port_is_free
from flextui.runtime.metrics import RankRecord
from flextui.runtime.nodes import Nodes, NodesRun, preflight
from flextui.runtime.runlog import RunHeader, RunLogError, RunLogWriter
from flextui.runtime.spec import Backend, LaunchSpec, RunDtype, Training
from flextui.runtime.stepfigures import ModelWork, StepJoin
from flextui.runtime.steplog import StepLog
from flextui.runtime.summary import RunSummary, Simulated, device_labels, summarize
from flextui.runtime.target import LaunchTarget, check_ranks_fit
from flextui.search.files import default_log_path
from flextui.sim import Simulator
from flextui.strategy import Strategy

RUN_SUFFIX = ".ffrun"


@dataclass(frozen=True)
class Prepared:
    """A launch ready to start: what ranks get, where they run (``target``, its port
    chosen), where the log goes, what to expect; over hosts, ``nodes`` is what their
    preflight found (for the same target)."""

    spec: LaunchSpec
    cluster: Cluster
    target: LaunchTarget
    run_log: Path
    simulated: Simulated
    nodes: Nodes | None = None  # a launch over hosts, after their preflight
    step_log: Path | None = None  # --log-dir: a row a step there (``runtime.steplog``)

    def torchrun(self, directory: Path) -> Torchrun:
        """This machine's torchrun, its plan in ``directory``."""
        assert self.target.port is not None, "prepare chose the port"
        return Torchrun(directory / "plan.msgpack", self.spec.num_ranks, self.target.port,
                        self.target.run_id, directory / "ranks")

    def commands(self) -> list[list[str]]:
        """What starts the run: torchrun here, or per host ssh with the node program
        and the torchrun it runs (the plan directory is made when the run starts)."""
        where = Path("<plan dir>")
        if self.nodes is None:
            return [self.torchrun(where).command()]
        remote = self.target.remote
        assert remote is not None, "a target over hosts has a remote"
        return [[*remote.command(host), "->", *self.nodes.request(k, b"").torchrun(where)
                 .command()] for k, host in enumerate(self.nodes.hosts)]


def choose_backend(cluster: Cluster, asked: str | None = None, on_hosts: bool = False
                   ) -> Backend:
    """NCCL when this machine has a GPU per rank of a GPU cluster, else gloo between CPU
    processes; ``asked`` ("nccl", "gloo") overrides, and NCCL without a GPU per rank is
    refused. ``on_hosts``: the launch runs on other hosts, NCCL for a GPU cluster (their
    preflight counts their GPUs)."""
    gpu_cluster = not cluster.devices[0].spec.is_cpu
    if on_hosts:
        return Backend(asked) if asked else Backend.NCCL if gpu_cluster else Backend.GLOO
    gpus = local_gpus()
    backend = Backend(asked) if asked else \
        (Backend.NCCL if gpu_cluster and gpus >= cluster.num_devices else Backend.GLOO)
    if backend == Backend.NCCL and gpus < cluster.num_devices:
        raise FlextuiError(f"--backend nccl needs a GPU per rank: this launch has "
                           f"{cluster.num_devices} ranks and this machine {gpus} GPUs; use "
                           "--backend gloo to run them as CPU processes")
    return backend


def prepare(graph: OpGraph, strategy: Strategy, cluster: Cluster, training: Training,
            cost_model: CostModel, target: LaunchTarget | None = None, *,
            run_log: Path | None = None, stop: threading.Event | None = None) -> Prepared:
    """Check everything a launch on ``target`` (default: this machine, a free port)
    needs before a rank starts; FlextuiError says what is wrong (a cluster of several
    nodes without hosts, a strategy for more devices than the launch has or whose plan
    the ranks could not compile, more ranks
    than the machine has cores or GPUs, a busy port, no torchrun, a host that fails its
    preflight: ``stop`` ends that early, an imported model with no source the user
    gave)."""
    require_source(graph)
    target = target or LaunchTarget()
    nodes = {d.node for d in cluster.devices}
    if len(nodes) > 1 and target.local:
        raise FlextuiError(f"cluster {cluster.name!r} has {len(nodes)} nodes: give their hosts "
                           "with --hosts or --hostfile (one host per node), or a one-node "
                           "cluster to run on this machine")
    used = max(strategy.devices_used(), default=0) + 1
    if used > cluster.num_devices:
        raise StrategyError(f"strategy {strategy.name!r} uses {used} devices; this launch has "
                            f"{cluster.num_devices} ({cluster.name}): search a strategy for "
                            f"these devices with flextui search --cluster {cluster.name}")
    _plannable(graph, strategy, cluster.num_devices)
    if importlib.util.find_spec("torch.distributed.run") is None:
        raise FlextuiError("torchrun (torch.distributed.run) is missing from this Python; "
                           "install a torch with distributed support")
    placed = None
    if not target.local:
        module = graph.source.module if graph.source is not None else None
        placed = preflight(target, place(target.hosts, cluster), training, stop=stop,
                           modules=(module,) if module else ())
        target = placed.target
    else:
        check_ranks_fit("this machine", cluster.num_devices, training, local_gpus(),
                        usable_cpus())
        if target.port is None:
            target = target.with_port(free_port())
        elif not port_is_free(target.port):
            raise FlextuiError(f"port {target.port} is in use on this machine; leave --port "
                               "out to use a free one")
    timeline = Simulator(graph, cluster, cost_model,
                         optimizer=training.optimizer).simulate(strategy)
    simulated = Simulated(timeline.makespan, tuple(d.busy_s for d in timeline.devices),
                          cost_model.identity)
    path = run_log or default_log_path(graph, cluster, suffix=RUN_SUFFIX)
    return Prepared(LaunchSpec(graph, strategy, cluster.num_devices, training), cluster,
                    target, path, simulated, placed)


def _plannable(graph: OpGraph, strategy: Strategy, ranks: int) -> None:
    """The plan each rank compiles, compiled here first: StrategyError before any rank
    starts (imported here: the plan's module imports torch, the app starts without)."""
    from flextui.runtime.plan import compile_plan

    compile_plan(graph, strategy, ranks)


def local_gpus() -> int:
    """The GPUs this process sees."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_batch(graph: OpGraph, strategy: Strategy) -> int:
    """The smallest batch every op's split of the sample dim divides, in each of the
    strategy's micro-batches: what a check runs at (``flextui launch --check``)."""
    m = strategy.pipeline.microbatches
    batch = m
    for op in graph.ops:
        config = strategy[op.name]
        for dim, degree in zip(op.space, config.degrees):
            if dim.kind == DimKind.SAMPLE:
                batch = math.lcm(batch, degree * m)
    return min(batch, graph.batch_size)


def as_check(prepared: Prepared, graph: OpGraph, steps: int = 3) -> Prepared:
    """The launch as a check: ``graph`` (the model at ``check_batch``), float64,
    ``steps`` steps without warm-up, each rank comparing with one process after."""
    training = replace(prepared.spec.training, steps=steps, warmup=0, dtype=RunDtype.FLOAT64,
                       check=True)
    strategy = prepared.spec.strategy
    _plannable(graph, strategy, prepared.spec.num_ranks)
    return replace(prepared, spec=LaunchSpec(graph, strategy, prepared.spec.num_ranks,
                                             training))


def execute(prepared: Prepared, stop: threading.Event,
            on_record: Callable[[RankRecord], None] = lambda r: None,
            on_output: Callable[[int, str], None] = lambda rank, line: None,
            on_start: Callable[[Run | NodesRun], None] = lambda run: None,
            ) -> tuple[Outcome, RunSummary, list[RankRecord]]:
    """Run the launch to its end (``stop`` ends it early): every record and line goes to
    the run log and to the callbacks, each step complete on every rank to the step log
    (``--log-dir``). Returns how it ended, its summary and its
    records. A run log that cannot be written (a full disk) stops the run (``stop`` is
    set) and, once every rank has ended, is the RunLogError raised; the log reads up
    to its last whole record."""
    spec = prepared.spec
    records: list[RankRecord] = []
    join = StepJoin(spec.num_ranks, ModelWork.of(spec, prepared.cluster), spec.training)
    steps = None if prepared.step_log is None else \
        StepLog(prepared.step_log, prepared.run_log.stem)
    try:
        log = RunLogWriter(prepared.run_log, _header(prepared))
    except RunLogError:
        if steps is not None:
            steps.close(discard=True)
        raise
    lock = threading.Lock()
    unwritten: list[RunLogError] = []

    @contextlib.contextmanager
    def logging() -> Iterator[None]:
        with lock:
            try:
                yield
            except RunLogError as exc:
                unwritten.append(exc)
                stop.set()

    def record(r: RankRecord) -> None:
        with logging():
            records.append(r)
            log.record(r)
            if steps is not None:
                for row in join.add(r):
                    steps.row(row)
        on_record(r)

    def output(rank: int, line: str) -> None:
        with logging():
            log.output(rank, line)
        on_output(rank, line)

    try:
        with tempfile.TemporaryDirectory(prefix="flextui-launch-") as tmp:
            run: Run | NodesRun
            if prepared.nodes is not None:
                run = NodesRun(prepared.nodes, spec.encode(), record, output)
            else:
                torchrun = prepared.torchrun(Path(tmp))
                torchrun.plan.write_bytes(spec.encode())
                run = Run(torchrun, record, output)
            run.start()
            on_start(run)
            try:
                outcome = run.wait(stop)
            except BaseException:  # the launcher itself is going: take every rank with it
                run.stop()
                raise
        summary = summary_of(prepared, records)
        with logging():
            log.final(outcome)
    finally:
        log.close()
        if steps is not None:
            steps.close()
    if unwritten:
        raise RunLogError(f"{unwritten[0]}; the run was stopped, and the log holds what "
                          "came before")
    return outcome, summary, records


def summary_of(prepared: Prepared, records: list[RankRecord]) -> RunSummary:
    """The run's summary, on the launch's cluster, against its simulated figures."""
    cluster, spec = prepared.cluster, prepared.spec
    return summarize(records, device_labels(cluster, spec.graph, spec.strategy),
                     [d.spec.memory_bytes for d in cluster.devices],
                     prepared.spec.graph.batch_size, prepared.simulated)


def _header(prepared: Prepared) -> RunHeader:
    return RunHeader(prepared.spec, prepared.cluster,
                     tuple(tuple(command) for command in prepared.commands()),
                     prepared.target, prepared.simulated)
