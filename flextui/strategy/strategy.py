"""Strategy: a parallel config for every op of a graph, the shard stage of the
parameters whose training state is sharded (``shards``), the precision it trains in
(``precision``) and the micro-batches it cuts the batch into (``pipeline``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from flextui.errors import StrategyError
from flextui.graph import OpGraph
from flextui.strategy.config import ParallelConfig
from flextui.strategy.pipeline import NO_PIPELINE, Pipeline, check_pipeline
from flextui.strategy.precision import Precision
from flextui.strategy.shards import ShardStage, stage_refusal


class Strategy(Mapping[str, ParallelConfig]):
    """An immutable map from op name to its ParallelConfig, with a display name and, per
    parameter whose training state is sharded, its stage (``shards``: stages above
    NONE only), its ``precision`` and its ``pipeline``; made from another Strategy, it
    keeps that one's stages, precision and pipeline unless given. Two strategies are
    equal when their configs, stages, precision and pipeline are (the name does not
    count)."""

    def __init__(self, configs: Mapping[str, ParallelConfig], name: str = "",
                 shards: Mapping[str, ShardStage] | None = None,
                 precision: Precision | None = None,
                 pipeline: Pipeline | None = None) -> None:
        self._items = dict(configs)
        self.name = name
        if shards is None:
            shards = configs.shards if isinstance(configs, Strategy) else {}
        self.shards: dict[str, ShardStage] = {
            param: ShardStage(stage) for param, stage in shards.items() if stage}
        if precision is None:
            precision = configs.precision if isinstance(configs, Strategy) else Precision.FP32
        self.precision: Precision = Precision(precision)
        if pipeline is None:
            pipeline = configs.pipeline if isinstance(configs, Strategy) else NO_PIPELINE
        self.pipeline: Pipeline = pipeline

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Strategy):
            return self._items == other._items and self.shards == other.shards \
                and self.precision == other.precision and self.pipeline == other.pipeline
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def shard(self, param: str) -> ShardStage:
        """The shard stage of parameter ``param``."""
        return self.shards.get(param, ShardStage.NONE)

    def __getitem__(self, op_name: str) -> ParallelConfig:
        return self._items[op_name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Strategy({self.name!r}, {len(self)} ops)"

    def replace(self, op_name: str, config: ParallelConfig, name: str | None = None) -> Strategy:
        """A copy with ``op_name``'s config changed."""
        return Strategy({**self._items, op_name: config}, self.name if name is None else name,
                        self.shards, self.precision, self.pipeline)

    def replace_all(self, changes: Mapping[str, ParallelConfig]) -> Strategy:
        """A copy with the configs of every op named in ``changes`` changed."""
        return Strategy({**self._items, **changes}, self.name, self.shards, self.precision,
                        self.pipeline)

    def with_shards(self, stages: Mapping[str, ShardStage]) -> Strategy:
        """A copy with the shard stage of every parameter named in ``stages`` changed."""
        return Strategy(self._items, self.name, {**self.shards, **stages}, self.precision,
                        self.pipeline)

    def with_precision(self, precision: Precision) -> Strategy:
        """A copy that trains in ``precision``."""
        return Strategy(self._items, self.name, self.shards, precision, self.pipeline)

    def with_pipeline(self, pipeline: Pipeline) -> Strategy:
        """A copy that cuts the batch as ``pipeline`` says."""
        return Strategy(self._items, self.name, self.shards, self.precision, pipeline)

    def configs_of(self, graph: OpGraph) -> list[ParallelConfig]:
        """The config of each op of ``graph``, by op index."""
        return [self._items[op.name] for op in graph.ops]

    def devices_used(self) -> set[int]:
        return {d for c in self._items.values() for d in c.devices}

    def check(self, graph: OpGraph, num_devices: int) -> None:
        """Raise StrategyError unless every op of ``graph`` has a config that fits."""
        unknown = [name for name in self._items if name not in graph]
        if unknown:
            raise StrategyError(f"strategy names ops that graph {graph.name!r} does not have: "
                                f"{', '.join(unknown[:5])}" + (" ..." if len(unknown) > 5 else ""))
        missing = [op.name for op in graph.ops if op.name not in self._items]
        if missing:
            raise StrategyError(f"strategy has no config for {len(missing)} ops of graph "
                                f"{graph.name!r}: {', '.join(missing[:5])}"
                                + (" ..." if len(missing) > 5 else ""))
        for op in graph.ops:
            self._items[op.name].check(op, num_devices)
        for param, stage in self.shards.items():
            if param not in graph.parameters:
                raise StrategyError(f"strategy shards parameter {param!r:.80}, which graph "
                                    f"{graph.name!r} does not have (`flextui show --json` "
                                    "lists each op's params)")
            refusal = stage_refusal(param, stage, param in graph.shared_parameters)
            if refusal:
                raise StrategyError(f"{refusal}; set it to 1 or 2 in the strategy's params")
        check_pipeline(graph, self.configs_of(graph), self.pipeline)
