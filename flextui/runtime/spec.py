"""What a launch hands its ranks: the graph, the strategy, the number of ranks, how
to train and the model source the user gave, as one versioned msgpack document
(``flextui.documents``) that every rank reads and compiles into the same plan
(``runtime.plan``). No pickle: a rank rebuilds the graph from data
(``graph_from_dict``), as a search log's reader does, and gives it the source the plan
carries (``graph.model_source``: a model file travels as its bytes and their sha256,
so no host needs it at a path); that is the only source a rank runs a module from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError
from flextui.fields import FieldReader, FormFields
from flextui.graph import OpGraph, graph_from_dict
from flextui.graph.model_source import ModelSource
from flextui.limits import read_file
from flextui.runtime.datafeed import DataFeed
from flextui.strategy import ParallelConfig, Strategy

LAUNCH = DocumentFormat("flextui-launch", 2, "launch plan")
#: The environment variable that gives every rank its launcher's PID (a rank whose
#: launcher is gone ends itself; see ``worker``).
LAUNCHER_PID = "FLEXTUI_LAUNCHER_PID"
#: the largest float32, the largest learning rate a rank's optimizer can take
FLOAT32_MAX = 3.4028234663852886e38


class Backend(StrEnum):
    """How ranks talk: NCCL between GPUs, gloo between CPU processes."""

    NCCL = "nccl"
    GLOO = "gloo"


class RunDtype(StrEnum):
    """The dtype ranks train in: the graph's (float32), or float64 for checks."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"


@dataclass(frozen=True)
class Training:
    """How the ranks train: ``warmup`` untimed steps then ``steps`` timed ones, from
    parameters and data made from ``seed``, with SGD (``lr``, ``momentum``); with
    ``check`` the ranks compare their result with one process's afterwards; with
    ``record_tasks`` they time every task and report the times (``tasks`` records);
    ``data`` is what they train on (the seed's data, or the model file's dataset)."""

    steps: int = 20
    warmup: int = 2
    seed: int = 0
    lr: float = 0.01
    momentum: float = 0.9
    dtype: RunDtype = RunDtype.FLOAT32
    backend: Backend = Backend.GLOO
    check: bool = False
    record_tasks: bool = False
    data: DataFeed = field(default_factory=DataFeed)

    def __post_init__(self) -> None:
        """Every number in range (a FieldError names the field, ``--steps`` on the command
        line), so a Training that exists can be written to a plan and trained: no
        step count past flextui's integers, no NaN learning rate, none a float32 cannot
        hold (the ranks' optimizer failed on one)."""
        f = FormFields()
        f.integer(self.steps, "steps", 1)
        f.integer(self.warmup, "warmup", 0)
        f.integer(self.seed, "seed")
        f.number(self.lr, "lr", 0.0, FLOAT32_MAX)
        f.number(self.momentum, "momentum", 0.0, 1.0)


@dataclass(frozen=True)
class LaunchSpec:
    graph: OpGraph
    strategy: Strategy
    num_ranks: int
    training: Training

    def to_dict(self, *, code: bool = False) -> dict[str, Any]:
        """The spec as plain data: what a run log's header holds, and with ``code`` (a
        model file's bytes) what ``encode`` stores."""
        t = self.training
        source = self.graph.source
        configs = [[list(self.strategy[op.name].degrees), list(self.strategy[op.name].devices)]
                   for op in self.graph.ops]
        return {"graph": self.graph.to_dict(), "strategy": [self.strategy.name, configs],
                "num_ranks": self.num_ranks,
                "training": {"steps": t.steps, "warmup": t.warmup, "seed": t.seed, "lr": t.lr,
                             "momentum": t.momentum, "dtype": str(t.dtype),
                             "backend": str(t.backend), "check": t.check,
                             "record_tasks": t.record_tasks, "data": t.data.to_dict()},
                "model": None if source is None else source.to_dict(code=code)}

    def encode(self) -> bytes:
        return LAUNCH.encode(self.to_dict(code=True))

    @classmethod
    def decode(cls, data: bytes, where: str) -> LaunchSpec:
        """The spec ``data`` holds; FlextuiError naming ``where`` if it is damaged."""
        try:
            _, body = LAUNCH.decode(data)
        except BadDocument as bad:
            raise FlextuiError(f"{where}: {bad.problem}") from None
        return cls.from_dict(body, where)

    @classmethod
    def from_dict(cls, body: object, where: str, *, record: bool = False) -> LaunchSpec:
        """The spec ``to_dict`` gave (a plan's body; with ``record``, a run log's header,
        whose model names what ran and gives its graph no source), every field checked;
        FlextuiError naming ``where`` and the field."""
        f = FieldReader(where)
        body = f.exact_keys(body, ("graph", "strategy", "num_ranks", "training", "model"),
                            "plan")
        try:
            graph = graph_from_dict(body["graph"])
        except FlextuiError as exc:
            raise FlextuiError(f"{where}: graph: {exc}") from None
        if record:
            if body["model"] is not None:
                ModelSource.from_dict(body["model"], f, code=False)
        elif body["model"] is not None:
            graph.source = ModelSource.from_dict(body["model"], f)
        elif graph.imported:
            f.fail("model", f"graph {graph.name!r} is imported from a PyTorch module and the "
                            "plan carries no model source")
        name, configs = f.items(body["strategy"], "strategy", 2)
        configs = f.items(configs, "strategy configs", len(graph.ops))
        strategy = Strategy({op.name: ParallelConfig(
            tuple(f.integer(d, "degree", 1) for d in f.items(c[0], "degrees")),
            tuple(f.integer(d, "device", 0) for d in f.items(c[1], "devices")))
            for op, c in zip(graph.ops, (f.items(c, "config", 2) for c in configs))},
            f.string(name, "strategy name", empty=True))
        t = f.mapping(body["training"], "training")
        data = DataFeed.from_dict(t["data"], f) if "data" in t else DataFeed()  # a run log
        # written before launches read datasets has none
        t = f.exact_keys({k: v for k, v in t.items() if k != "data"},
                         ("steps", "warmup", "seed", "lr", "momentum", "dtype", "backend",
                          "check", "record_tasks"), "training")
        training = Training(
            f.integer(t["steps"], "steps", 1), f.integer(t["warmup"], "warmup", 0),
            f.integer(t["seed"], "seed"), f.number(t["lr"], "lr", 0.0, FLOAT32_MAX),
            f.number(t["momentum"], "momentum", 0.0, 1.0),
            RunDtype(f.choice(t["dtype"], "dtype", tuple(RunDtype))),
            Backend(f.choice(t["backend"], "backend", tuple(Backend))),
            f.boolean(t["check"], "check"), f.boolean(t["record_tasks"], "record_tasks"),
            data)
        return cls(graph, strategy, f.integer(body["num_ranks"], "num_ranks", 1), training)

    @classmethod
    def read(cls, path: str | Path) -> LaunchSpec:
        """The plan in the file at ``path``: a regular file (a FIFO or a device is
        refused before it is read), decoded and checked."""
        try:
            data = read_file(path, None)
        except OSError as exc:
            raise FlextuiError(f"cannot read launch plan {path}: "
                               f"{exc.strerror or exc}") from None
        return cls.decode(data, str(path))
