"""The execution simulator: strategy in, Timeline out (paper section 5)."""

from __future__ import annotations

from flextui.cost.model import CostModel, checked_cost_model
from flextui.cost.optimizers import OptimizerKind
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.sim.memory import MemoryPolicy, memory_penalty_s, memory_usage
from flextui.sim.schedule import schedule
from flextui.sim.taskgraph import TaskGraph
from flextui.sim.timeline import Timeline, build_timeline
from flextui.strategy import Strategy
from flextui.strategy.precision import computed_graph


class Simulator:
    """Simulates one training (or, with ``training=False``, inference) iteration of
    ``graph`` on ``cluster``. ``memory`` says what a strategy over a device's capacity
    costs: "penalize" (+1 ms per MB over), "reject" (infinite cost) or "ignore" (a
    :class:`MemoryPolicy` or its name); ``optimizer`` what state training keeps per
    parameter. A strategy in bf16 (``strategy.precision``) is simulated on the graph as
    it computes in bfloat16 (``graph.precision.in_dtype``), its parameters' training
    state kept in the graph's own dtype (the master weights)."""

    def __init__(self, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 training: bool = True, memory: MemoryPolicy | str = MemoryPolicy.PENALIZE,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> None:
        try:
            self.memory = MemoryPolicy(memory)
        except ValueError:
            raise FlextuiError(f"memory policy {str(memory)!r:.40}: use one of "
                               f"{', '.join(MemoryPolicy)}") from None
        self.graph, self.cluster = graph, cluster
        self.cost_model = checked_cost_model(cost_model)
        self.training = training
        self.optimizer = OptimizerKind(optimizer)

    def task_graph(self, strategy: Strategy) -> TaskGraph:
        strategy.check(self.graph, self.cluster.num_devices)
        return TaskGraph(computed_graph(self.graph, strategy.precision), self.cluster,
                         self.cost_model, strategy, self.training,
                         master_dtype=self.graph.dtype, optimizer=self.optimizer)

    def simulate(self, strategy: Strategy) -> Timeline:
        tg = self.task_graph(strategy)
        usage = memory_usage(tg, self.optimizer)
        return build_timeline(tg, schedule(tg), usage, memory_penalty_s(usage, self.memory),
                              copy_times=False)
