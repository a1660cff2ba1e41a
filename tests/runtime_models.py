"""The small models and the strategies the runtime is checked on: the issue's LeNet,
MLP, RNN (rnnlm), transformer and DLRM at a batch every strategy on up to 4 devices
divides, under data-parallel, model-parallel, expert and five random strategies, and two
of them with ops recomputed."""

from flextui.graph.library import load_model
from flextui.strategy import ParallelConfig, Strategy, builtin_strategy, random_strategy

SMALL_MODELS = {
    "lenet": {},
    "mlp": {"in_features": 16, "width": 32, "layers": 2, "num_classes": 10},
    "rnnlm": {"steps": 3, "layers": 1, "hidden": 16, "vocab": 20},
    "transformer": {"layers": 1, "width": 16, "heads": 2, "seq_len": 8, "vocab": 50},
    "dlrm": {"num_tables": 2, "rows_per_table": 20, "embed_dim": 8},
}
STRATEGIES = ["data-parallel", "model-parallel", "expert", "random-1", "random-2", "random-3",
              "random-4", "random-5", "recompute-data-parallel", "recompute-random-2"]


def small(name):
    return load_model(name, batch_size=8, **SMALL_MODELS[name])


def strategy(name, graph, cluster):
    """A test strategy by name; ``recompute-NAME``: NAME with every other op that has a
    backward pass recomputed (every one under data parallelism)."""
    if name.startswith("recompute-"):
        base = strategy(name.removeprefix("recompute-"), graph, cluster)
        step = 1 if name == "recompute-data-parallel" else 2
        chosen = [op for op in graph.ops if op.type != "input"][::step]
        return base.replace_all({op.name: base[op.name].with_recompute(True) for op in chosen})
    if name.startswith("random-"):
        return random_strategy(graph, cluster, seed=int(name.split("-")[1]))
    return builtin_strategy(name, graph, cluster)


def on_one_rank(s):
    """The same partition with every task on rank 0."""
    return Strategy({n: ParallelConfig(c.degrees, (0,) * len(c.devices), c.recompute)
                     for n, c in s.items()},
                    s.name)
