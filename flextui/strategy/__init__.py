"""Parallelization strategies: configs, the valid-config space, built-ins, files."""

from flextui.strategy.builtins import (
    BUILTIN_STRATEGIES,
    builtin_strategy,
    data_parallel,
    expert,
    model_parallel,
    random_strategy,
)
from flextui.strategy.config import ParallelConfig, replicated
from flextui.strategy.enumerate import count_configs, degree_choices, random_config, valid_configs
from flextui.strategy.file import load_strategy, save_strategy, strategy_from_json, strategy_to_json
from flextui.strategy.shards import ShardStage
from flextui.strategy.strategy import Strategy

__all__ = ["BUILTIN_STRATEGIES", "builtin_strategy", "data_parallel", "expert", "model_parallel",
           "random_strategy", "ParallelConfig", "replicated", "count_configs", "degree_choices",
           "random_config", "valid_configs", "load_strategy", "save_strategy",
           "strategy_from_json", "strategy_to_json", "ShardStage", "Strategy"]
