"""What a launch's ranks train on, as the launch plan carries it (``Training.data``):
the synthetic data made from the seed (``graph.kernels.synthetic``), the user's dataset
(``dataset("train")`` of the model file, ``runtime.data``) or a ``.npy`` file of token
ids (``path``, read on every rank at that path, never run), in order or shuffled, read
with ``workers`` DataLoader workers. Torch-free: the app and the run log read it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flextui.fields import FieldReader, FormFields
from flextui.limits import TEXT_CHARS

#: the most DataLoader worker processes a rank starts
MAX_DATA_WORKERS = 64


class DataSource(StrEnum):
    """Where a launch's batches come from."""

    SYNTHETIC = "synthetic"  # made from the seed, element by element
    DATASET = "dataset"      # the model file's dataset("train")
    TOKENS = "tokens"        # a .npy file of token ids, for a causal language model


@dataclass(frozen=True)
class DataFeed:
    """The source of a launch's batches; with a dataset, whether each epoch's order is
    a permutation (``shuffle``), how many DataLoader workers a rank reads with, and
    every how many steps the loss over its validation split is taken (0: never); the
    token file's absolute ``path`` (TOKENS only)."""

    source: DataSource = DataSource.SYNTHETIC
    shuffle: bool = False
    workers: int = 0
    eval_every: int = 0
    path: str = ""

    def __post_init__(self) -> None:
        form = FormFields()
        form.integer(self.workers, "data_workers", 0, MAX_DATA_WORKERS)
        form.integer(self.eval_every, "eval_every", 0)
        if bool(self.path) != (self.source == DataSource.TOKENS):
            form.fail("data", "a path is given for a token file, and only for one")

    def to_dict(self) -> dict[str, Any]:
        return {"source": str(self.source), "shuffle": self.shuffle, "workers": self.workers,
                "eval_every": self.eval_every, "path": self.path}

    @classmethod
    def from_dict(cls, data: object, f: FieldReader, where: str = "training.data"
                  ) -> DataFeed:
        body = f.exact_keys(data, ("source", "shuffle", "workers", "eval_every", "path"),
                            where)
        source = DataSource(f.choice(body["source"], f"{where}.source", tuple(DataSource)))
        path = f.string(body["path"], f"{where}.path", TEXT_CHARS, empty=True)
        if bool(path) != (source == DataSource.TOKENS) or (path and not path.startswith("/")):
            f.fail(f"{where}.path", "expected a token file's absolute path for token data, "
                                    "and none for other data")
        return cls(source, f.boolean(body["shuffle"], f"{where}.shuffle"),
                   f.integer(body["workers"], f"{where}.workers", 0, MAX_DATA_WORKERS),
                   f.integer(body["eval_every"], f"{where}.eval_every", 0), path)
