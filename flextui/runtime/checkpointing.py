"""What a launch saves and resumes (``Training.checkpoint``) and what a checkpoint says
of itself (``CheckpointMeta``), torch-free: the launch plan, the launcher and the app
read them. A checkpoint is a folder ``DIR/step-NNNNNNNN`` holding every rank's shards
(``runtime.checkpoint``, torch.distributed.checkpoint) and, written by rank 0 only once
the shards of every rank are complete, ``META``: a checkpoint folder without it is half
written and is never read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flextui.cost.files import atomic_write
from flextui.documents import BadDocument, DocumentFormat
from flextui.errors import FlextuiError
from flextui.fields import FieldReader, FormFields
from flextui.graph import OpGraph
from flextui.graph.region import Region
from flextui.limits import TEXT_CHARS, read_file
from flextui.strategy import Strategy

CHECKPOINT = DocumentFormat("flextui-checkpoint", 1, "checkpoint")
#: the file of a checkpoint folder that says it is whole
META = "flextui-checkpoint"
STEP_DIR = "step-{:08d}"


@dataclass(frozen=True)
class Checkpointing:
    """Save every ``every`` steps into the folder ``save`` (absolute; "" and 0: never),
    and start from the newest checkpoint in ``resume`` ("": from the start), which the
    launcher found saved after ``start`` steps (the run's steps go on from there)."""

    save: str = ""
    every: int = 0
    resume: str = ""
    start: int = 0

    def __post_init__(self) -> None:
        form = FormFields()
        form.integer(self.every, "save_every", 0)
        form.integer(self.start, "start", 0)
        if bool(self.save) != bool(self.every):
            form.fail("save_every", "--save DIR and --save-every N go together")

    def to_dict(self) -> dict[str, Any]:
        return {"save": self.save, "every": self.every, "resume": self.resume,
                "start": self.start}

    @classmethod
    def from_dict(cls, data: object, f: FieldReader, where: str = "training.checkpoint"
                  ) -> Checkpointing:
        body = f.exact_keys(data, ("save", "every", "resume", "start"), where)
        return cls(f.string(body["save"], f"{where}.save", TEXT_CHARS, empty=True),
                   f.integer(body["every"], f"{where}.every", 0),
                   f.string(body["resume"], f"{where}.resume", TEXT_CHARS, empty=True),
                   f.integer(body["start"], f"{where}.start", 0))


def strategy_fingerprint(graph: OpGraph, strategy: Strategy, num_ranks: int) -> str:
    """A stable hash of how ``strategy`` places ``graph`` on ``num_ranks`` ranks: what
    decides which boxes each rank's shards are, and which parts of them it keeps the
    optimizer's state of."""
    configs = [[op.name, list(strategy[op.name].degrees), list(strategy[op.name].devices)]
               for op in graph.ops]
    placed: list[object] = [num_ranks, configs]
    if strategy.shards:   # sharded state is saved by bucket: its stages decide those
        placed.append(sorted((name, int(stage)) for name, stage in strategy.shards.items()))
    data = json.dumps(placed, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CheckpointMeta:
    """A whole checkpoint: the steps done (``step``; the next trains step ``step``, and
    reads the items of that step's batch: the data position), the AdamW update count,
    the run's seed and dtype, the fingerprints of the graph and of the strategy, and per
    parameter its shape, its name in the user's module ("" when none) and the box each
    rank holds (``export-weights`` assembles them)."""

    step: int
    updates: int
    seed: int
    dtype: str
    graph: str
    strategy: str
    shapes: dict[str, tuple[int, ...]]
    module_names: dict[str, str]
    boxes: dict[str, dict[int, Region]]

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "updates": self.updates, "seed": self.seed,
                "dtype": self.dtype, "graph": self.graph, "strategy": self.strategy,
                "params": [[name, list(shape), self.module_names[name],
                            [[rank, [list(d) for d in box]]
                             for rank, box in self.boxes[name].items()]]
                           for name, shape in self.shapes.items()]}

    def write(self, folder: Path) -> None:
        atomic_write(folder / META, CHECKPOINT.encode(self.to_dict()))

    @classmethod
    def read(cls, folder: Path) -> CheckpointMeta:
        path = folder / META
        try:
            _, body = CHECKPOINT.decode(read_file(path, None))
        except OSError as exc:
            raise FlextuiError(f"cannot read checkpoint {path}: {exc.strerror or exc}: "
                               "give a folder --save wrote") from None
        except BadDocument as bad:
            raise FlextuiError(f"{path}: {bad.problem}: the checkpoint is damaged; resume "
                               "from an earlier one (remove this step's folder)") from None
        f = FieldReader(str(path))
        body = f.exact_keys(body, ("step", "updates", "seed", "dtype", "graph", "strategy",
                                   "params"), "checkpoint")
        shapes: dict[str, tuple[int, ...]] = {}
        names: dict[str, str] = {}
        boxes: dict[str, dict[int, Region]] = {}
        for entry in f.items(body["params"], "params"):
            name, shape, module_name, held = f.items(entry, "param", 4)
            name = f.string(name, "param name", TEXT_CHARS)
            shapes[name] = tuple(f.integer(n, "shape", 0) for n in f.items(shape, "shape"))
            names[name] = f.string(module_name, "module name", TEXT_CHARS, empty=True)
            boxes[name] = {}
            for pair in f.items(held, "boxes"):
                rank, box = f.items(pair, "box", 2)
                dims = [f.items(d, "box dim", 2) for d in f.items(box, "box", len(shape))]
                boxes[name][f.integer(rank, "rank", 0)] = tuple(
                    (f.integer(a, "box start", 0), f.integer(b, "box stop", 0))
                    for a, b in dims)
        return cls(f.integer(body["step"], "step", 1), f.integer(body["updates"], "updates", 0),
                   f.integer(body["seed"], "seed"), f.string(body["dtype"], "dtype"),
                   f.string(body["graph"], "graph"), f.string(body["strategy"], "strategy"),
                   shapes, names, boxes)


def newest(folder: str | Path) -> tuple[Path, CheckpointMeta]:
    """The newest whole checkpoint in ``folder`` (a step folder with its META), and
    what it says; FlextuiError naming the folder when there is none."""
    root = Path(folder)
    if not root.is_dir():
        raise FlextuiError(f"checkpoint folder {root} does not exist: give the folder "
                           "--save wrote")
    whole = sorted(p for p in root.glob("step-*") if (p / META).is_file())
    if not whole:
        raise FlextuiError(f"{root} holds no whole checkpoint (no step-*/{META}): give the "
                           "folder --save wrote, once a save has finished")
    return whole[-1], CheckpointMeta.read(whole[-1])


def refuse_mismatch(meta: CheckpointMeta, where: Path, graph: OpGraph, strategy: Strategy,
                    num_ranks: int, seed: int, dtype: str) -> None:
    """FlextuiError unless the checkpoint at ``where`` was saved by a run of this graph,
    strategy, seed and dtype (no resharding: the shards are the boxes of that strategy)."""
    found = {"model": (meta.graph, graph.fingerprint),
             "strategy": (meta.strategy, strategy_fingerprint(graph, strategy, num_ranks)),
             "seed": (str(meta.seed), str(seed)), "dtype": (meta.dtype, dtype)}
    for what, (saved, given) in found.items():
        if saved != given:
            raise FlextuiError(f"checkpoint {where} was saved with another {what} ({saved}, "
                               f"this launch's is {given}): resume with the model, strategy, "
                               "--seed and --precision it was saved with")


def asked(save: str | None, every: int, resume: str | None, graph: OpGraph,
          strategy: Strategy, num_ranks: int, seed: int, dtype: str) -> Checkpointing:
    """``--save``, ``--save-every`` and ``--resume`` checked before any rank starts: the
    checkpoint resumed from is whole and of this model, strategy, seed and dtype, and
    no step the launch will save is in the save folder already (never overwritten);
    FlextuiError saying what and how to fix it."""
    start = 0
    if resume is not None:
        folder, meta = newest(resume)
        refuse_mismatch(meta, folder, graph, strategy, num_ranks, seed, dtype)
        start = meta.step
    if save is None:
        if every:
            raise FlextuiError("--save-every needs --save DIR, the folder to save into")
        return Checkpointing(resume=str(Path(resume).absolute()) if resume else "",
                             start=start)
    if every < 1:
        raise FlextuiError(f"--save DIR needs --save-every N with N >= 1, found {every}")
    root = Path(save).absolute()
    later = sorted(p.name for p in root.glob("step-*")
                   if p.name[5:].isdigit() and int(p.name[5:]) > start)
    if later:
        raise FlextuiError(f"{root} already holds {', '.join(later[:3])}, which this launch "
                           "would save over: save into another folder, remove them, or "
                           f"--resume {root}")
    return Checkpointing(str(root), every, str(Path(resume).absolute()) if resume else "",
                         start)
