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

from flextui.cost.optimizers import OptimizerKind
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FieldError, FlextuiError
from flextui.fields import FieldReader, FormFields
from flextui.graph import OpGraph, graph_from_dict
from flextui.graph.model_source import ModelSource
from flextui.limits import read_file
from flextui.runtime.checkpointing import Checkpointing
from flextui.runtime.datafeed import DataFeed
from flextui.runtime.optimizer import LrSchedule, Optimizer
from flextui.strategy import ParallelConfig, Strategy
from flextui.strategy.file import (
    pipeline_from_json,
    pipeline_to_json,
    precision_from_json,
    shards_from_json,
    shards_to_json,
)
from flextui.strategy.precision import Precision

#: version 3: the training's optimizer, schedule and clipping, and what it trains on;
#: version 4: an op's config may be recomputed; version 5: the strategy may shard
#: parameters' training state (a third item, the strategy file's ``params`` section);
#: version 6: it may train in bf16 (a fourth item, its precision); version 7: it may
#: cut the batch into micro-batches (a fifth item, ``{"microbatches", "schedule"}``)
LAUNCH = DocumentFormat("flextui-launch", 7, "launch plan")
#: The environment variable that gives every rank its launcher's PID (a rank whose
#: launcher is gone ends itself; see ``worker``).
LAUNCHER_PID = "FLEXTUI_LAUNCHER_PID"


class Backend(StrEnum):
    """How ranks talk: NCCL between GPUs, gloo between CPU processes."""

    NCCL = "nccl"
    GLOO = "gloo"


class RunDtype(StrEnum):
    """The dtype ranks train in: the graph's (float32), or float64 (checks, and
    ``--precision fp64``)."""

    FLOAT32 = "float32"
    FLOAT64 = "float64"


#: ``--precision``'s names: the dtype ranks keep their parameters in, and the precision
#: the strategy computes in (bf16: mixed, float32 master weights)
PRECISIONS = {"fp32": (RunDtype.FLOAT32, Precision.FP32),
              "fp64": (RunDtype.FLOAT64, Precision.FP32),
              "bf16": (RunDtype.FLOAT32, Precision.BF16)}


@dataclass(frozen=True)
class Training:
    """How the ranks train: ``warmup`` untimed steps then ``steps`` timed ones, from
    parameters and data made from ``seed``, in ``dtype``, every step updating the
    parameters with ``optimizer`` (SGD: ``lr``, ``momentum``, ``weight_decay``; AdamW:
    ``lr``, ``betas``, ``eps``, ``weight_decay``), the learning rate following
    ``lr_schedule`` after ``warmup_steps`` steps of linear warm-up (the schedule runs over
    all ``warmup + steps`` steps), the gradients' global norm clipped to ``grad_clip``;
    all of it ``update``. With ``check`` the ranks compare their result with one
    process's afterwards; with ``record_tasks`` they time every task and report the
    times (``tasks`` records); ``data`` is what they train on (data made from the seed,
    the model file's dataset or a token file); ``checkpoint`` where they save and from
    which step they resume (the schedule's horizon counts the steps before it)."""

    steps: int = 20
    warmup: int = 2
    seed: int = 0
    lr: float = 0.01
    momentum: float = 0.9
    dtype: RunDtype = RunDtype.FLOAT32
    backend: Backend = Backend.GLOO
    check: bool = False
    record_tasks: bool = False
    optimizer: OptimizerKind = OptimizerKind.SGD
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    lr_schedule: LrSchedule = LrSchedule.CONSTANT
    warmup_steps: int = 0
    grad_clip: float | None = None
    data: DataFeed = field(default_factory=DataFeed)
    checkpoint: Checkpointing = field(default_factory=Checkpointing)

    def __post_init__(self) -> None:
        """Every number in range (a FieldError names the field, ``--steps`` on the command
        line), so a Training that exists can be written to a plan and trained: no
        step count past flextui's integers, no NaN learning rate, none a float32 cannot
        hold (the ranks' optimizer failed on one); the update's in ``Optimizer``."""
        f = FormFields()
        f.integer(self.steps, "steps", 1)
        f.integer(self.warmup, "warmup", 0)
        f.integer(self.seed, "seed")
        _ = self.update  # made, so checked

    @property
    def update(self) -> Optimizer:
        """The ranks' update at every step, over the run's ``warmup + steps`` steps (after
        the steps of the checkpoint it resumes from)."""
        return Optimizer(kind=self.optimizer, lr=self.lr, momentum=self.momentum,
                         weight_decay=self.weight_decay, betas=self.betas, eps=self.eps,
                         schedule=self.lr_schedule, warmup_steps=self.warmup_steps,
                         total_steps=self.checkpoint.start + self.warmup + self.steps,
                         grad_clip=self.grad_clip)


def lr_at(training: Training, step: int) -> float:
    """The learning rate step ``step`` of the launch (from 0, warm-up steps counted;
    a resumed launch's steps go on from its checkpoint's) updates with."""
    return training.update.lr_at(training.checkpoint.start + step)


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
        configs = [config_to_list(self.strategy[op.name]) for op in self.graph.ops]
        strategy: list[object] = [self.strategy.name, configs]
        pipeline = self.strategy.pipeline.on
        precision = self.strategy.precision != Precision.FP32 or pipeline
        if self.strategy.shards or precision:
            strategy.append(shards_to_json(self.strategy, self.graph))
        if precision:
            strategy.append(self.strategy.precision.value)
        if pipeline:
            strategy.append(pipeline_to_json(self.strategy.pipeline))
        return {"graph": self.graph.to_dict(), "strategy": strategy,
                "num_ranks": self.num_ranks,
                "training": {"steps": t.steps, "warmup": t.warmup, "seed": t.seed, "lr": t.lr,
                             "momentum": t.momentum, "dtype": str(t.dtype),
                             "backend": str(t.backend), "check": t.check,
                             "record_tasks": t.record_tasks, "optimizer": str(t.optimizer),
                             "weight_decay": t.weight_decay, "betas": list(t.betas),
                             "eps": t.eps, "lr_schedule": str(t.lr_schedule),
                             "warmup_steps": t.warmup_steps, "grad_clip": t.grad_clip,
                             "data": t.data.to_dict(),
                             "checkpoint": t.checkpoint.to_dict()},
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
        listed = f.items(body["strategy"], "strategy")
        if len(listed) not in (2, 3, 4, 5):
            f.fail("strategy", f"expected [name, configs], the sharded parameters, the "
                               f"precision and the micro-batches, found {len(listed)} items")
        name, configs, *more = listed
        configs = f.items(configs, "strategy configs", len(graph.ops))
        strategy = Strategy({op.name: _config(f, c) for op, c in zip(graph.ops, configs)},
                            f.string(name, "strategy name", empty=True),
                            shards_from_json(more[0], graph, f) if more else {},
                            precision_from_json(more[1], f) if len(more) > 1 else None,
                            pipeline_from_json(f.exact_keys(more[2], ("microbatches", "schedule"),
                                                            "strategy pipeline"), f)
                            if len(more) > 2 else None)
        return cls(graph, strategy, f.integer(body["num_ranks"], "num_ranks", 1),
                   _training(f, body["training"]))

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


def config_to_list(config: ParallelConfig) -> list[object]:
    """An op's config as a plan carries it: [degrees, devices], and a third item, true,
    when the op is recomputed."""
    listed: list[object] = [list(config.degrees), list(config.devices)]
    return [*listed, True] if config.recompute else listed


def _config(f: FieldReader, data: object) -> ParallelConfig:
    items = f.items(data, "config")
    if len(items) not in (2, 3):
        f.fail("config", f"expected [degrees, devices] or [degrees, devices, true], found "
                         f"{len(items)} items")
    return ParallelConfig(tuple(f.integer(d, "degree", 1) for d in f.items(items[0], "degrees")),
                          tuple(f.integer(d, "device", 0) for d in f.items(items[1], "devices")),
                          len(items) == 3 and f.boolean(items[2], "recompute"))


_TRAINING_KEYS = ("steps", "warmup", "seed", "lr", "momentum", "dtype", "backend", "check",
                  "record_tasks")
#: what a run log written before the optimizer's settings were kept may lack: its run
#: trained as the defaults say (SGD, a constant learning rate, no clipping)
_UPDATE_KEYS = ("optimizer", "weight_decay", "betas", "eps", "lr_schedule", "warmup_steps",
                "grad_clip")


def _training(f: FieldReader, value: object) -> Training:
    """``to_dict``'s training, every field checked (the update's may be missing: the
    defaults, what the runs of older logs did)."""
    t = f.mapping(value, "training")
    f.check_keys(t, (*_TRAINING_KEYS, *_UPDATE_KEYS, "data", "checkpoint"), "training")
    f.exact_keys({k: v for k, v in t.items() if k in _TRAINING_KEYS}, _TRAINING_KEYS,
                 "training")
    given = {k: t[k] for k in _UPDATE_KEYS if k in t}
    if "optimizer" in given:
        given["optimizer"] = OptimizerKind(f.choice(given["optimizer"], "optimizer",
                                                    tuple(OptimizerKind)))
    if "lr_schedule" in given:
        given["lr_schedule"] = LrSchedule(f.choice(given["lr_schedule"], "lr_schedule",
                                                   tuple(LrSchedule)))
    if "betas" in given:
        given["betas"] = tuple(f.number(b, "betas") for b in f.items(given["betas"], "betas", 2))
    for name in ("weight_decay", "eps"):
        if name in given:
            given[name] = f.number(given[name], name)
    if given.get("grad_clip") is not None:
        given["grad_clip"] = f.number(given["grad_clip"], "grad_clip")
    if "warmup_steps" in given:
        given["warmup_steps"] = f.integer(given["warmup_steps"], "warmup_steps", 0)
    if "data" in t:  # a run log written before launches read datasets has none
        given["data"] = DataFeed.from_dict(t["data"], f)
    if "checkpoint" in t:  # nor one written before launches saved
        given["checkpoint"] = Checkpointing.from_dict(t["checkpoint"], f)
    try:
        return Training(
            f.integer(t["steps"], "steps", 1), f.integer(t["warmup"], "warmup", 0),
            f.integer(t["seed"], "seed"), f.number(t["lr"], "lr"),
            f.number(t["momentum"], "momentum"),
            RunDtype(f.choice(t["dtype"], "dtype", tuple(RunDtype))),
            Backend(f.choice(t["backend"], "backend", tuple(Backend))),
            f.boolean(t["check"], "check"), f.boolean(t["record_tasks"], "record_tasks"),
            **given)
    except FieldError as bad:  # a value out of its range
        f.fail(f"training: {bad.field}", bad.problem)
