"""A launch's data from the user's model file: ``dataset(split="train")``, a map-style
``torch.utils.data.Dataset`` (``__len__`` and ``__getitem__``), run on every rank from
the model source the plan carries (code the user named; the plan names none).

Items. An item is one sample: a tuple of the module's forward arguments, in order, then
the label last when the module returns logits and flextui adds the cross-entropy (an
int, or a 0-d integer tensor); a module of one argument and no label may return the
tensor alone. Each field has the shape of one sample of its example input (without
the batch dim); a float field any float dtype (the run casts it to its own), an
integer field an integer dtype with values below what its consumers accept (the
classes, an embedding's rows). Items are checked where they enter a process
(``checked_item``); a mismatch names the item, the field, what was expected and found.

Order. Step k takes the global batch of items at positions k*B ... k*B+B-1 of its
epoch's order, B the graph's batch: the items in order, or with ``shuffle`` the
permutation ``torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed +
epoch))``; an epoch is len(ds) // B steps (a last partial batch is left out). Row p of
every data input at step k is the item at position k*B + p.

Ranks. A rank loads only the items of its tasks' sample blocks of the data inputs
(``rank_feed``), with a DataLoader (``DataFeed.workers`` forked processes, pinned
memory on a GPU); the check's referee loads whole batches (``whole_feed``).

Token files. ``--data FILE.npy`` gives a causal language model (a forward of
``input_ids`` and ``labels`` of one shape [B, T], as ``hf:gpt2`` and ``hf:llama``'s) its
token ids: a 1-D array read as consecutive windows of T tokens, or a 2-D [N, T] array a
sequence per row; item i is (window i, window i), the model shifting its labels itself.
The file is read with ``numpy.load(allow_pickle=False)`` (data, never code), on every
rank at its path.

Evaluation. With ``DataFeed.eval_every`` N, after every N-th step the ranks run the
forward pass alone over every whole batch of ``dataset("val")``, in order, and report
the mean loss (``metrics.Evaluated``). The forward is a training step's: a graph with
dropout, batch norm or opaque ops (whose eval mode differs) is refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from flextui.errors import FlextuiError
from flextui.graph import Op, OpGraph, Region
from flextui.graph.importer.module_run import ModuleCall
from flextui.graph.library import pytorch_model
from flextui.graph.tensor import FLOAT_DTYPES
from flextui.graph.usercode import user_code
from flextui.runtime.datafeed import DataFeed, DataSource
from flextui.runtime.plan import Plan, index_bounds
from flextui.runtime.spec import LaunchSpec, Training

SPLIT, VAL = "train", "val"
#: op types whose evaluation differs from their training forward
TRAINING_MODE = frozenset({"batchnorm", "opaque"})


class DataError(FlextuiError):
    """A dataset a launch cannot train on: not map-style, too short, or an item that
    does not match the graph's inputs."""


@dataclass(frozen=True)
class ItemField:
    """Field ``position`` of an item: what input op ``name`` (index ``op``) takes of one
    sample, of ``shape`` and ``dtype``, its values below ``bound`` when given."""

    position: int
    name: str
    op: int
    shape: tuple[int, ...]
    dtype: str
    bound: int | None
    label: bool

    def __str__(self) -> str:
        return f"field {self.position} ({'the label, ' if self.label else ''}input {self.name!r})"

    def expected(self) -> str:
        kind = "float" if self.dtype in FLOAT_DTYPES else "integer"
        return f"{kind} {list(self.shape)}"


def item_fields(graph: OpGraph) -> tuple[ItemField, ...]:
    """The fields of an item of ``graph``'s dataset: its module's forward arguments,
    then its labels when flextui adds the loss."""
    call = ModuleCall.of(graph)
    ops = {op.name: op for op in graph.ops}
    bounds = index_bounds(graph)
    names = [*call.inputs, *([call.labels] if call.labels is not None else [])]
    return tuple(ItemField(i, name, ops[name].index, ops[name].outputs[0].shape[1:],
                           ops[name].outputs[0].dtype, bounds.get(ops[name].index),
                           name == call.labels) for i, name in enumerate(names))


def defines_dataset(graph: OpGraph) -> bool:
    """Whether ``graph``'s model file (or factory's module) defines ``dataset``."""
    if not graph.imported or graph.source is None:
        return False
    return pytorch_model(graph.source, graph.meta.get("options")).dataset is not None


def data_feed(graph: OpGraph, shuffle: bool, workers: int, eval_every: int = 0,
              tokens: str | None = None) -> DataFeed:
    """What a launch of ``graph`` trains on: the ``tokens`` file when given, the model's
    dataset when it defines one, else the synthetic data (which neither shuffles, has
    workers nor evaluates: DataError)."""
    if tokens is not None:
        if eval_every:
            raise DataError("--eval-every reads the model file's dataset(\"val\"); a "
                            "--data file has no validation split: leave one of them out")
        if not graph.imported:
            raise DataError(f"--data gives token ids to a causal language model imported "
                            f"from PyTorch (hf:gpt2, hf:llama); model {graph.name!r} is "
                            "flextui's own, trained on data made from the seed")
        return DataFeed(DataSource.TOKENS, shuffle, workers, 0, str(Path(tokens).resolve()))
    if defines_dataset(graph):
        modes = sorted({op.name for op in graph.ops if op.type in TRAINING_MODE
                        or op.attrs.get("fn") == "dropout"})
        if eval_every and modes:
            raise DataError(f"--eval-every: the evaluation runs the forward pass of a "
                            f"training step, and {', '.join(modes[:3])} (dropout, batch norm "
                            "or an opaque op) would run in training mode; leave it out")
        return DataFeed(DataSource.DATASET, shuffle, workers, eval_every)
    if shuffle or workers or eval_every:
        raise DataError(f"--shuffle, --data-workers and --eval-every read the model's "
                        f"dataset, and model {graph.meta.get('model', graph.name)!r} defines "
                        "no dataset(split=\"train\"); define one in its model file, or leave "
                        "them out to train on data made from the seed")
    return DataFeed()


@dataclass(frozen=True)
class Bad:
    """An item that could not be read or does not fit: why."""

    message: str


class TokenWindows(Dataset):  # type: ignore[type-arg]  # of (ids, ids)
    """A token file's windows of ``length`` tokens (the module's docstring)."""

    def __init__(self, path: str, length: int) -> None:
        try:
            self.tokens = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise DataError(f"--data {path}: not a .npy array this process can read "
                            f"({type(exc).__name__}: {str(exc)[:160]})") from None
        if self.tokens.dtype.kind not in "iu" or self.tokens.ndim not in (1, 2) \
                or (self.tokens.ndim == 2 and self.tokens.shape[1] != length):
            raise DataError(f"--data {path}: expected token ids, integers in one array "
                            f"[tokens] or a sequence per row [N, {length}], found "
                            f"{self.tokens.dtype} {list(self.tokens.shape)}")
        self.length = length

    def __len__(self) -> int:
        rows = self.tokens.shape[0]
        return int(rows if self.tokens.ndim == 2 else rows // self.length)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.tokens.ndim == 2:
            window = self.tokens[index]
        else:
            window = self.tokens[index * self.length:(index + 1) * self.length]
        ids = torch.from_numpy(np.array(window, dtype=np.int64))
        return ids, ids


class UserDataset:
    """The user's ``dataset(split)`` of ``graph``'s model, or the windows of the token
    file ``tokens``, checked to be map-style, its items read and checked one by one
    (``item``)."""

    def __init__(self, graph: OpGraph, split: str = SPLIT, tokens: str = "") -> None:
        assert graph.source is not None, "an imported graph of a model the user gave"
        self.fields = item_fields(graph)
        model = pytorch_model(graph.source, graph.meta.get("options"))
        if tokens:
            self.what = f"--data {tokens}"
            self.dataset: Any = TokenWindows(tokens, _causal_length(self.fields, model.name))
        elif model.dataset is None:
            raise DataError(f"model {model.name!r} defines no dataset(split); the launch "
                            "plan asks for one (launch from the same model file)")
        else:
            self.what = f"model {model.name!r}: dataset({split!r})"
            with user_code(self.what):
                self.dataset = model.dataset(split)
        with user_code(self.what):
            mapped = not isinstance(self.dataset, IterableDataset) \
                and hasattr(self.dataset, "__getitem__") and hasattr(self.dataset, "__len__")
            length = len(self.dataset) if mapped else None
        if length is None:
            raise DataError(f"{self.what} returned {type(self.dataset).__name__}, not a "
                            "map-style Dataset: return one with __len__ and __getitem__ (its "
                            "order is flextui's, so an IterableDataset cannot be split)")
        self.length = length

    def item(self, index: int) -> tuple[torch.Tensor, ...] | Bad:
        """Item ``index``, checked; what is wrong with it (Bad) when it does not fit."""
        try:
            with user_code(f"{self.what}[{index}]"):
                item = self.dataset[index]
            return checked_item(item, index, self.fields, self.what)
        except FlextuiError as bad:
            return Bad(str(bad))


def _causal_length(fields: Sequence[ItemField], model: str) -> int:
    """The length T of a causal language model's sequences: its forward takes
    ``input_ids`` and ``labels`` of ids, both [batch, T]; DataError for any other."""
    ids = fields[0]
    if [f.name for f in fields] != ["input_ids", "labels"] or len(ids.shape) != 1 \
            or fields[1].shape != ids.shape or ids.dtype in FLOAT_DTYPES:
        raise DataError(f"--data gives token ids to a causal language model, whose forward "
                        f"takes input_ids and labels, both [batch, length] (hf:gpt2, "
                        f"hf:llama); model {model!r}'s takes "
                        f"{', '.join(f'{f.name} {f.expected()}' for f in fields)}")
    return ids.shape[0]


def checked_item(item: Any, index: int, fields: Sequence[ItemField], what: str
                 ) -> tuple[torch.Tensor, ...]:
    """``item`` as one tensor per field; DataError naming the item, the field, what was
    expected and what was found."""
    values = item if isinstance(item, (tuple, list)) else (item,)
    if len(values) != len(fields):
        raise DataError(f"{what} item {index}: expected {len(fields)} fields ("
                        f"{', '.join(f'{f.name!r} {f.expected()}' for f in fields)}), found "
                        f"{len(values)}; an item is the forward's arguments, then the label "
                        "when flextui adds the loss")
    tensors = []
    for field, value in zip(fields, values):
        where = f"{what} item {index}, {field}"
        if not isinstance(value, (torch.Tensor, int, float)) and not hasattr(value, "__array__"):
            raise DataError(f"{where}: expected a tensor ({field.expected()}), found "
                            f"{type(value).__name__}")
        tensor = torch.as_tensor(value)
        floating = field.dtype in FLOAT_DTYPES
        kind_ok = tensor.is_floating_point() if floating else \
            not (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)
        if tuple(tensor.shape) != field.shape or not kind_ok:
            raise DataError(f"{where}: expected {field.expected()}, found {tensor.dtype} "
                            f"{list(tensor.shape)}")
        if field.bound is not None and tensor.numel() and \
                not (0 <= int(tensor.min()) and int(tensor.max()) < field.bound):
            raise DataError(f"{where}: values must lie in [0, {field.bound}) (what its "
                            f"consumers take), found {int(tensor.min())} to {int(tensor.max())}")
        tensors.append(tensor)
    return tuple(tensors)


@dataclass(frozen=True)
class ItemOrder:
    """Which items each step takes (the module's docstring): ``length`` items, batches
    of ``batch``, shuffled per epoch from ``seed`` when ``shuffle``."""

    length: int
    batch: int
    shuffle: bool
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        return self.length // self.batch

    def epoch(self, epoch: int) -> torch.Tensor:
        """The order of the items in ``epoch``."""
        if not self.shuffle:
            return torch.arange(self.length)
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.length, generator=generator)

    def batches(self, steps: int, positions: Sequence[int], first: int = 0
                ) -> Iterator[list[int]]:
        """Per step from ``first`` to ``steps`` (excluded), the items at ``positions``
        of its global batch."""
        order, epoch = torch.arange(0), -1
        for step in range(first, steps):
            at, k = divmod(step, self.steps_per_epoch)
            if at != epoch:
                order, epoch = self.epoch(at), at
            yield [int(order[k * self.batch + p]) for p in positions]


def opened(graph: OpGraph, training: Training, split: str = SPLIT
           ) -> tuple[UserDataset, ItemOrder]:
    """The dataset's ``split`` and its order (the validation split's in order); DataError
    when it holds less than one batch of ``graph``'s. Steps past an epoch's last whole
    batch go on in the next epoch's order."""
    data = UserDataset(graph, split, training.data.path)
    batch = graph.batch_size
    order = ItemOrder(data.length, batch, training.data.shuffle and split == SPLIT,
                      training.seed)
    if data.length < batch:
        raise DataError(f"{data.what} has {data.length:,} items, fewer than one batch of "
                        f"{batch:,}: give more items, or a smaller --batch-size")
    return data, order


def epochs_steps(graph: OpGraph, training: Training, epochs: int) -> int:
    """``--epochs``: the timed steps of ``epochs`` passes over the training data, the
    warm-up steps counted among them; DataError without a dataset or token file, or when
    the warm-up takes every step."""
    if training.data.source == DataSource.SYNTHETIC:
        raise DataError("--epochs counts passes over your data: give the model file a "
                        "dataset() or pass --data, or give --steps")
    _, order = opened(graph, training)
    total = epochs * order.steps_per_epoch
    if total <= training.warmup:
        raise DataError(f"--epochs {epochs} is {total:,} steps of batch {order.batch:,}, "
                        f"no more than --warmup {training.warmup}: give more epochs or a "
                        "smaller --warmup")
    return total - training.warmup


def check_dataset(spec: LaunchSpec) -> None:
    """What the ranks of ``spec`` will read, tried here first: the dataset is map-style,
    long enough, and every item of the first step fits, and so of the validation split
    when the launch evaluates (DataError before a rank starts)."""
    training = spec.training
    if training.data.source == DataSource.SYNTHETIC:
        return
    opening = [opened(spec.graph, training)]
    if training.data.eval_every:
        opening.append(opened(spec.graph, training, VAL))
    for data, order in opening:
        for index in next(order.batches(1, range(order.batch))):
            item = data.item(index)
            if isinstance(item, Bad):
                raise DataError(item.message)


class _Items(Dataset):  # type: ignore[type-arg]  # of checked items or Bad
    """The DataLoader's dataset: the user's items, checked."""

    def __init__(self, data: UserDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return self.data.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, ...] | Bad:
        return self.data.item(index)


def _collate(items: list[tuple[torch.Tensor, ...] | Bad]) -> tuple[torch.Tensor, ...] | Bad:
    """One step's items as one tensor per field, a row per item; the first Bad item."""
    bad = next((item for item in items if isinstance(item, Bad)), None)
    if bad is not None:
        return bad
    return tuple(torch.stack([item[f] for item in items])  # type: ignore[index]
                 for f in range(len(items[0])))  # type: ignore[arg-type]


class _Batches:
    """The DataLoader's batch sampler: per step, the items at ``positions``."""

    def __init__(self, order: ItemOrder, steps: int, positions: Sequence[int], first: int
                 ) -> None:
        self.order, self.steps, self.positions, self.first = order, steps, positions, first

    def __len__(self) -> int:
        return self.steps - self.first

    def __iter__(self) -> Iterator[list[int]]:
        return self.order.batches(self.steps, self.positions, self.first)


class DatasetFeed:
    """The rows of the data inputs one process reads, step after step: the items at
    ``positions`` of each step's global batch, from step ``first`` (a resumed run's) to
    ``steps``; ``block`` gives a task's block of a data input (steps in order)."""

    def __init__(self, data: UserDataset, order: ItemOrder, positions: Sequence[int],
                 steps: int, dtype: torch.dtype, device: torch.device, workers: int = 0,
                 first: int = 0) -> None:
        self.fields = {f.op: f for f in data.fields}
        self.row = {p: i for i, p in enumerate(positions)}
        self.dtype, self.device, self.steps = dtype, device, steps
        loader = DataLoader(_Items(data), batch_sampler=_Batches(order, steps, positions, first),
                            num_workers=workers, collate_fn=_collate,
                            pin_memory=device.type == "cuda",
                            multiprocessing_context="fork" if workers else None)
        self._batches: Iterator[tuple[torch.Tensor, ...] | Bad] = iter(loader)
        self._step = first - 1
        self._rows: tuple[torch.Tensor, ...] = ()

    def feeds(self, op: Op) -> bool:
        return op.index in self.fields

    def block(self, op: Op, region: Region, step: int) -> torch.Tensor:
        """Block ``region`` of data input ``op`` at ``step`` (this step or the next)."""
        if step != self._step:
            assert step == self._step + 1, "a feed's steps come in order"
            batch = next(self._batches)
            if isinstance(batch, Bad):
                raise DataError(batch.message)
            self._rows, self._step = batch, step
            if step == self.steps - 1:  # the last: its workers end now, not with the rank
                self._batches = iter(())
        field = self.fields[op.index]
        (start, stop), rest = region[0], region[1:]
        at = self.row[start]
        block = self._rows[field.position][(slice(at, at + stop - start),
                                            *(slice(a, b) for a, b in rest))]
        dtype = self.dtype if field.dtype in FLOAT_DTYPES else getattr(torch, field.dtype)
        return block.to(self.device, dtype, non_blocking=True).contiguous()


def rank_feed(spec: LaunchSpec, plan: Plan, rank: int, dtype: torch.dtype,
              device: torch.device) -> DatasetFeed | None:
    """What ``rank`` reads of the training split for the run's steps (None: the launch
    trains on the synthetic data, or the rank has no task of a data input)."""
    training = spec.training
    if training.data.source == DataSource.SYNTHETIC:
        return None
    first = training.checkpoint.start
    steps = first + training.warmup + training.steps
    data, order = opened(spec.graph, training)
    return _ranks_share(data, order, plan, rank, steps, dtype, device, training.data.workers,
                        first)


def evaluation_feed(spec: LaunchSpec, plan: Plan, rank: int, dtype: torch.dtype,
                    device: torch.device) -> tuple[DatasetFeed | None, int]:
    """One pass over the validation split: what ``rank`` reads of it (None: nothing)
    and how many batches it is."""
    data, order = opened(spec.graph, spec.training, VAL)
    batches = order.steps_per_epoch
    return _ranks_share(data, order, plan, rank, batches, dtype, device,
                        spec.training.data.workers), batches


def _ranks_share(data: UserDataset, order: ItemOrder, plan: Plan, rank: int, steps: int,
                 dtype: torch.dtype, device: torch.device, workers: int, first: int = 0
                 ) -> DatasetFeed | None:
    """The feed of ``rank``'s items: the sample ranges of its tasks' blocks of the data
    inputs (None when it has no such task)."""
    ops = plan.graph.ops
    positions: set[int] = set()
    for field in data.fields:
        op = ops[field.op]
        for k in plan.tasks_on(op, rank):  # the sample range of the task's block
            positions.update(range(*op.output_regions(plan.region(op, k))[0][0]))
    if not positions:
        return None
    return DatasetFeed(data, order, sorted(positions), steps, dtype, device, workers, first)


def whole_feed(graph: OpGraph, training: Training, steps: int,
               dtype: torch.dtype) -> DatasetFeed | None:
    """Every step's whole batch, in this process: what the referee trains on (None:
    the synthetic data)."""
    if training.data.source == DataSource.SYNTHETIC:
        return None
    data, order = opened(graph, training)
    return DatasetFeed(data, order, range(order.batch), steps, dtype, torch.device("cpu"))
