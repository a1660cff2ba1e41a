"""The small models and the strategies the runtime is checked on: the issue's LeNet,
MLP, RNN (rnnlm), transformer and DLRM at a batch every strategy on up to 4 devices
divides, under data-parallel, model-parallel, expert and five random strategies, two
of them with ops recomputed, five with parameters' training state sharded, two in
bf16 mixed precision and six in micro-batches (GPipe and 1F1B, 2 and 4 of them)."""

from flextui.graph.library import load_model
from flextui.strategy import (
    ParallelConfig,
    ShardStage,
    Strategy,
    builtin_strategy,
    random_strategy,
)
from flextui.strategy.pipeline import Pipeline, Schedule
from flextui.strategy.precision import Precision

SMALL_MODELS = {
    "lenet": {},
    "mlp": {"in_features": 16, "width": 32, "layers": 2, "num_classes": 10},
    "rnnlm": {"steps": 3, "layers": 1, "hidden": 16, "vocab": 20},
    "transformer": {"layers": 1, "width": 16, "heads": 2, "seq_len": 8, "vocab": 50},
    "dlrm": {"num_tables": 2, "rows_per_table": 20, "embed_dim": 8},
}
STRATEGIES = ["data-parallel", "model-parallel", "expert", "random-1", "random-2", "random-3",
              "random-4", "random-5", "recompute-data-parallel", "recompute-random-2",
              "zero1-data-parallel", "zero2-random-3", "zero2-recompute-random-2",
              "zero3-random-3", "zero3-recompute-data-parallel", "bf16-model-parallel",
              "bf16-random-3", "gpipe-2-model-parallel", "gpipe-4-model-parallel",
              "1f1b-2-model-parallel", "1f1b-4-model-parallel", "1f1b-2-data-parallel",
              "gpipe-2-zero3-recompute-data-parallel"]


def small(name):
    return load_model(name, batch_size=8, **SMALL_MODELS[name])


def strategy(name, graph, cluster):
    """A test strategy by name; ``recompute-NAME``: NAME with every other op that has a
    backward pass recomputed (every one under data parallelism); ``zero1-NAME``: NAME
    with every parameter's training state sharded at stage 1; ``zero2-NAME``: every
    other parameter's at stage 2 (in the graph's order), the rest at stage 1;
    ``zero3-NAME``: every parameter at stage 3 but those several ops share, at 2;
    ``bf16-NAME``: NAME in bf16 mixed precision; ``gpipe-M-NAME``, ``1f1b-M-NAME``:
    NAME in M micro-batches under that schedule."""
    if name.startswith(("gpipe-", "1f1b-")):
        schedule, m, base = name.split("-", 2)
        return strategy(base, graph, cluster).with_pipeline(Pipeline(int(m), Schedule(schedule)))
    if name.startswith("bf16-"):
        return strategy(name.removeprefix("bf16-"), graph, cluster).with_precision(
            Precision.BF16)
    if name.startswith(("zero1-", "zero2-", "zero3-")):
        base = strategy(name[len("zero1-"):], graph, cluster)
        names = list(graph.parameters)
        if name.startswith("zero1-"):
            return base.with_shards(dict.fromkeys(names, ShardStage.OPTIMIZER))
        if name.startswith("zero3-"):
            return base.with_shards({n: ShardStage.GRADIENTS if n in graph.shared_parameters
                                     else ShardStage.PARAMETERS for n in names})
        return base.with_shards({n: ShardStage.GRADIENTS if i % 2 == 0 else
                                 ShardStage.OPTIMIZER for i, n in enumerate(names)})
    if name.startswith("recompute-"):
        base = strategy(name.removeprefix("recompute-"), graph, cluster)
        step = 1 if name == "recompute-data-parallel" else 2
        chosen = [op for op in graph.ops if op.type != "input"][::step]
        return base.replace_all({op.name: base[op.name].with_recompute(True) for op in chosen})
    if name.startswith("random-"):
        return random_strategy(graph, cluster, seed=int(name.split("-")[1]))
    return builtin_strategy(name, graph, cluster)


def on_one_rank(s):
    """The same partition with every task on rank 0 (in float32: the precision is not
    kept), in the same micro-batches."""
    return Strategy({n: ParallelConfig(c.degrees, (0,) * len(c.devices), c.recompute)
                     for n, c in s.items()},
                    s.name, s.shards, pipeline=s.pipeline)
