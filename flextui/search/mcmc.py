"""One Metropolis-Hastings chain over the SOAP space (paper section 6), driven by the
delta simulator.

A step picks an op uniformly among those with more than one valid config and either
gives it a random valid config (``random_config``) or, with probability
``options.propagation``, copies its config along a walk of its neighbours (a
propagation move, ``propagate``). A random config goes, with probability
``options.tied``, to the op's weight-sharing twins as well (a tied move, ``tied``).
With probability ``options.recompute`` (training only, and only while the current
strategy does not fit its devices' memory or has ops recomputed) a step instead switches
recomputation for the op and often a run of ops after it (``recompute``); a random
config keeps the op's recomputation as it was. With probability ``options.shard``
(likewise) a step instead sets the shard stage of a run of parameters, or of all
(``shard``). With probability ``options.pipeline`` (training only, and only while the
strategy has several stages, is short of memory or has micro-batches) a step instead
sets another number of micro-batches or schedule (``pipeline``: simulated in full,
never rejected early, and with ``options.guarded_pipeline`` taken only when it does not
raise the cost); with probability ``options.stage`` (on several nodes, or while
memory is short) a move puts a run of layers on one device group (a stage,
``pipeline.stage_run``). Under micro-batches random configs split
samples only as a micro-batch allows, and a move's configs that do not are dropped.
It simulates the result incrementally and accepts it with probability
min(1, exp(beta * (cost(S) - cost(S*)))), costs in ms. The random number that decides
is drawn before simulating, so the cost it would take to accept is known in advance:
with ``options.early_reject`` the simulation stops once the makespan provably exceeds
it (an *early-rejected* step, logged as such, whose cost is only that lower bound).
Everything random comes from the chain's own ``random.Random``, drawn in a fixed
order, so a chain is a deterministic function of its seed and inputs.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from flextui.cost.model import CostModel
from flextui.graph import Op, OpGraph
from flextui.machine import Cluster
from flextui.search.events import RestartEvent, StepEvent
from flextui.search.frontier import Frontier
from flextui.search.log import Checkpoint, FrontierPoint
from flextui.search.options import BETA_SCALE, SearchOptions
from flextui.search.pipeline import MOST_MICROBATCHES, pipeline_move, stage_run
from flextui.search.propagate import propagation
from flextui.search.recompute import recompute_run
from flextui.search.shard import shard_run
from flextui.search.tied import tied_groups
from flextui.sim import DeltaSimulator
from flextui.strategy import (
    ParallelConfig,
    ShardStage,
    Strategy,
    count_configs,
    random_config,
)
from flextui.strategy.pipeline import Pipeline, micro_refusal, stages


def chain_seed(seed: int, chain: int) -> str:
    """The seed of chain ``chain`` of a search seeded ``seed`` (strings seed
    ``random.Random`` the same way in every Python process)."""
    return f"flextui-search:{seed}:{chain}"


def default_beta(initial_s: float) -> float:
    """``BETA_SCALE`` / (the initial strategy's makespan, or cost, in ms): see
    ``SearchOptions``."""
    if not math.isfinite(initial_s) or initial_s <= 0:
        return 1.0
    return BETA_SCALE / (initial_s * 1e3)


CONTINUE_CHANCE = 0.75  # a propagation walk goes on to a further neighbour this often
STAGE_CONTINUE = 0.5    # a stage move takes the next layer too this often
#: the most forward and backward tasks a guarded pipeline move's full simulation may
#: build (transfers and syncs come on top: about 2 GB in all)
MAX_PIPELINE_TASKS = 1_000_000


@dataclass(frozen=True)
class _Proposal:
    """A frontier entry, kept as (strategy, changes) until someone needs the strategy:
    most proposals never leave the chain, so they are never copied."""

    base: Strategy
    changes: tuple[tuple[str, ParallelConfig], ...] = ()
    stages: tuple[tuple[str, ShardStage], ...] = ()
    pipeline: Pipeline | None = None

    def strategy(self) -> Strategy:
        if self.pipeline is not None:
            return self.base.with_pipeline(self.pipeline)
        if not self.changes and not self.stages:
            return self.base
        return self.base.replace_all(dict(self.changes)).with_shards(dict(self.stages))


class Chain:
    """A chain's state: the delta simulator holding its current strategy, its best
    strategy, its random state, counters and its own time/memory frontier."""

    def __init__(self, index: int, graph: OpGraph, cluster: Cluster, cost_model: CostModel,
                 options: SearchOptions, initial: Strategy) -> None:
        self.index, self.graph, self.options = index, graph, options
        self.num_devices = cluster.num_devices
        self.sim = DeltaSimulator(graph, cluster, cost_model, options.training, options.memory,
                                  options.optimizer)
        self.rng = random.Random(chain_seed(options.seed, index))
        self.current_cost = self.sim.reset(initial)
        self.recomputed = _recomputed(initial)   # ops the current strategy recomputes
        self.sharded = len(initial.shards)       # parameters it shards
        self.initial_cost = self.current_cost
        self.best, self.best_cost = initial, self.current_cost
        self.beta = options.beta if options.beta is not None else default_beta(
            self.sim.makespan if options.beta_of_makespan else self.current_cost)
        #: the chance of a recomputation move (none in inference: nothing is kept)
        self.recompute = options.recompute if options.training else 0.0
        #: the chance of a shard move (none in inference or on one device: no group)
        self.shard = options.shard if options.training and self.num_devices > 1 else 0.0
        self.top_shard_stage = options.top_shard_stage
        #: the chances of a pipeline move (training: micro-batches accumulate gradients)
        #: and of a stage move
        self.pipeline = options.pipeline if options.training else 0.0
        self.stage = options.stage if self.num_devices > 1 else 0.0
        #: stages pay across nodes; within one, only while memory is short
        self.nodes = len({d.node for d in cluster.devices})
        self.param_index = {name: i for i, name in enumerate(graph.parameters)}
        self.ops = [op for op in graph.ops if count_configs(op, self.num_devices) > 1
                    or (self.recompute and op.type != "input")]
        self.twins = tied_groups(graph)
        self.iteration = self.accepted = 0
        self.improved_iteration, self.improved_elapsed = 0, 0.0
        self.frontier = Frontier()
        self.frontier.add(self.sim.makespan, self._peak_memory(), _Proposal(initial))
        self._elapsed_before = 0.0
        self._clock = time.perf_counter()

    @classmethod
    def from_checkpoint(cls, cp: Checkpoint, graph: OpGraph, cluster: Cluster,
                        cost_model: CostModel, options: SearchOptions,
                        initial: Strategy, initial_cost: float) -> Chain:
        """The chain as it was at ``cp`` (a resumed search that started from ``initial``,
        of cost ``initial_cost``)."""
        chain = cls(cp.chain, graph, cluster, cost_model, options, cp.current)
        chain.best, chain.best_cost = cp.best, cp.best_cost
        chain.rng.setstate(cp.rng_state)
        chain.iteration = cp.iteration
        chain.initial_cost = initial_cost
        if options.beta is None:
            scale = initial_cost
            if options.beta_of_makespan:   # the initial strategy's makespan, then back
                chain.sim.reset(initial)
                scale = chain.sim.makespan
                chain.sim.reset(cp.current)
            chain.beta = default_beta(scale)
        chain.set_elapsed(cp.elapsed)
        return chain

    # -- stepping ----------------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        return self._elapsed_before + time.perf_counter() - self._clock

    def set_elapsed(self, elapsed: float) -> None:
        self._elapsed_before, self._clock = elapsed, time.perf_counter()

    def step(self, deadline: float = math.inf) -> StepEvent:
        """Propose, simulate, accept or reject; return what happened. Past ``deadline``
        (``time.monotonic()`` seconds) the proposal is abandoned with a TimeoutError,
        leaving the chain as it was but for its random state."""
        rng = self.rng
        if not self.ops:
            raise RuntimeError("no op has more than one valid config on this cluster")
        op = rng.choice(self.ops)
        base = self.sim.strategy
        stages: dict[str, ShardStage] = {}
        others: list[tuple[Op, ParallelConfig]]
        pipeline = None
        if self.pipeline and rng.random() < self.pipeline and self._may_pipeline(base):
            config, others = base[op.name], []
            pipeline = pipeline_move(self.graph, base, rng, self.options.guarded_pipeline,
                                     self._most_microbatches(base))
        elif self.shard and self._may_shard() and rng.random() < self.shard:
            config, others = base[op.name], []
            stages = shard_run(self.graph, base, rng, CONTINUE_CHANCE, self.top_shard_stage)
        else:
            config, others = self._propose(op, base, rng)
        changes = [(o.name, c) for o, c in others]
        if config != base[op.name]:
            changes.insert(0, (op.name, config))
        draw = rng.random()
        early = False
        if pipeline is not None:   # every task changes: simulated in full
            proposed = self.sim.propose_pipeline(pipeline)
            memory = self._peak_memory()
            self.frontier.add(self.sim.makespan, memory, _Proposal(base, pipeline=pipeline))
            accepted = proposed <= self.current_cost if self.options.guarded_pipeline \
                else self._accepts(proposed, draw)
            self.sim.accept() if accepted else self.sim.reject()
        elif not changes and not stages:  # no change: the same strategy, the same cost
            proposed, memory, accepted = self.current_cost, self._peak_memory(), True
        else:
            proposed = self.sim.propose_many(changes, self._limit(draw), deadline, stages)
            memory = self._peak_memory()
            early = self.sim.cut_short
            if not early:
                self.frontier.add(self.sim.makespan, memory,
                                  _Proposal(base, tuple(changes), tuple(stages.items())))
            accepted = not early and self._accepts(proposed, draw)
            self.sim.accept() if accepted else self.sim.reject()
        self.iteration += 1
        if accepted:
            self.accepted += 1
            self.current_cost = proposed
            self.recomputed += sum(c.recompute - base[name].recompute
                                   for name, c in dict(changes).items())
            self.sharded += sum(bool(stage) - bool(base.shard(name))
                                for name, stage in stages.items())
            if proposed < self.best_cost:
                self.improved_iteration, self.improved_elapsed = self.iteration, self.elapsed
            if proposed <= self.best_cost:
                self.best, self.best_cost = self.sim.strategy, proposed
        return StepEvent(self.index, self.iteration, self.elapsed, op.index, config, proposed,
                         self.current_cost, self.best_cost, accepted, memory,
                         tuple((o.index, c) for o, c in others), early,
                         tuple((self.param_index[name], stage) for name, stage in stages.items()),
                         pipeline)

    def _propose(self, op: Op, base: Strategy, rng: random.Random
                 ) -> tuple[ParallelConfig, list[tuple[Op, ParallelConfig]]]:
        """The picked op's config after the move, and the other ops it sets (each with
        a config different from the one it has in ``base``, and one that splits
        ``base``'s micro-batches)."""
        config, others = self._move(op, base, rng)
        m = base.pipeline.microbatches
        if m > 1:
            if micro_refusal(op, config, m):
                config = base[op.name]
            others = [(o, c) for o, c in others if micro_refusal(o, c, m) is None]
        return config, others

    def _move(self, op: Op, base: Strategy, rng: random.Random
              ) -> tuple[ParallelConfig, list[tuple[Op, ParallelConfig]]]:
        if self.stage and rng.random() < self.stage and self._may_stage():
            changes = stage_run(self.graph, op, base, self.num_devices, rng, STAGE_CONTINUE)
            mine = [c for o, c in changes if o is op]
            return (mine[0] if mine else base[op.name]), [(o, c) for o, c in changes
                                                           if o is not op]
        if self.options.propagation and rng.random() < self.options.propagation:
            return base[op.name], propagation(self.graph, op, base, rng, CONTINUE_CHANCE)
        if self.recompute and self._may_recompute() and rng.random() < self.recompute:
            changes = recompute_run(self.graph, op, base, rng, CONTINUE_CHANCE)
            if changes and changes[0][0] is op:
                return changes[0][1], changes[1:]
            return base[op.name], changes
        # a new split; each op keeps its own recomputation
        config = random_config(op, self.num_devices, rng, base.pipeline.microbatches
                               ).with_recompute(base[op.name].recompute)
        twins = self.twins.get(op.index, ())
        if twins and self.options.tied and rng.random() < self.options.tied:
            twin_configs = [(t, config.with_recompute(base[t.name].recompute)) for t in twins]
            return config, [(t, c) for t, c in twin_configs if base[t.name] != c]
        return config, []

    def _may_recompute(self) -> bool:
        """Whether a recomputation move is worth making: while the current strategy
        pays for memory (a device over its memory or the budget: its cost exceeds its
        makespan), or to switch off what an earlier one left recomputed. With memory to
        spare recomputing only costs time, and the moves it took cut the steps left for
        splits (RNNLM on 16 GPUs, 3,000 steps: best 36-46 ms with them, 33-37 ms
        without). Asked every step, so both are kept, not recounted."""
        return self.current_cost > self.sim.makespan or self.recomputed > 0

    def _may_shard(self) -> bool:
        """Whether a shard move is worth making: as ``_may_recompute``, while memory is
        short or to unshard what an earlier one sharded (kept, not recounted)."""
        return self.current_cost > self.sim.makespan or self.sharded > 0

    def _may_stage(self) -> bool:
        """Whether a stage move is worth making: on several nodes, where a pipeline's
        stages save the slow links data parallelism crosses, or while memory is short.
        (On one node of LeNet's 4 GPUs they only took steps from the splits: one of
        three seeds missed the optimum in 32,000 steps.)"""
        return self.nodes > 1 or self.current_cost > self.sim.makespan

    def _may_pipeline(self, base: Strategy) -> bool:
        """Whether a pipeline move is worth its full simulation: while the strategy has
        stages to pipeline, memory is short (1F1B holds fewer activations) or it has
        micro-batches already."""
        return base.pipeline.on or self.current_cost > self.sim.makespan or \
            max(stages(self.graph, base.configs_of(self.graph)), default=0) > 0

    def _most_microbatches(self, base: Strategy) -> int:
        """The most micro-batches a guarded pipeline move may propose: as many as keep
        the ops' tasks (each micro-batch's made anew) under ``MAX_PIPELINE_TASKS``, so
        a search on a large cluster does not build a task graph it cannot hold (NMT on
        64 GPUs: 881,012 tasks at one micro-batch)."""
        if not self.options.guarded_pipeline:
            return MOST_MICROBATCHES
        tg = self.sim.tg   # counted from the ops' tasks: the same with either store
        compute = sum(map(len, tg.forward.values())) + sum(map(len, tg.backward.values()))
        per_micro = compute / base.pipeline.microbatches
        return max(1, int(MAX_PIPELINE_TASKS // max(per_micro, 1.0)))

    def _accepts(self, proposed: float, draw: float) -> bool:
        if proposed <= self.current_cost:
            return True
        if not math.isfinite(self.current_cost):
            return math.isfinite(proposed)
        return draw < math.exp(-self.beta * (proposed - self.current_cost) * 1e3)

    def _limit(self, draw: float) -> float:
        """A makespan (s) past which ``_accepts`` rejects whatever the memory penalty:
        cost ``c`` is accepted iff ``draw < exp(-beta * (c - current) * 1e3)``, i.e. iff
        ``c < current - ln(draw) / (beta * 1e3)``; the limit sits a relative 1e-9 (and
        1e-6 of the exponent) above that, so rounding in ``exp`` and ``log`` cannot make
        it reject what ``_accepts`` would accept. Infinite (no early rejection) when it
        is off or cannot apply."""
        if (not self.options.early_reject or draw <= 0 or self.beta <= 0
                or not math.isfinite(self.current_cost)):
            return math.inf
        scale = self.beta * 1e3
        threshold = self.current_cost - math.log(draw) / scale
        return threshold + 1e-9 * abs(threshold) + 1e-6 / scale

    def _peak_memory(self) -> int:
        return max(u.total for u in self.sim.memory.usage())

    def restart_due(self) -> bool:
        every = self.options.restart_every
        return bool(every and self.iteration % every == 0 and self.current_cost > self.best_cost)

    def restart(self) -> RestartEvent:
        """Go back to the best strategy (public FlexFlow restarts chains this way)."""
        self.current_cost = self.sim.reset(self.best)
        self.recomputed = _recomputed(self.best)
        self.sharded = len(self.best.shards)
        return RestartEvent(self.index, self.iteration)

    def converged(self, by_time: bool) -> bool:
        """The best has not improved for half of the chain's run (paper 6.2)."""
        if not self.options.converge or self.iteration < self.options.min_steps:
            return False
        if by_time:
            elapsed = self.elapsed
            return elapsed - self.improved_elapsed > elapsed / 2
        return self.iteration - self.improved_iteration > self.iteration / 2

    # -- reporting ---------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.index, self.iteration, self.elapsed, self.sim.strategy,
                          self.current_cost, self.best, self.best_cost, self.rng.getstate())

    def frontier_points(self) -> list[FrontierPoint]:
        return [FrontierPoint(p.time, p.memory, p.item.strategy()) for p in self.frontier.points]


def _recomputed(strategy: Strategy) -> int:
    return sum(config.recompute for config in strategy.values())
