"""``--log-dir DIR``: each step of a run (``stepfigures.StepRow``) as it completes, one
CSV row a step in ``DIR/<run log's name>.csv`` (a new file, never an existing one), and
TensorBoard scalars under ``DIR/<run log's name>/`` where ``torch.utils.tensorboard``
imports (it needs the ``tensorboard`` package, which flextui does not require).

CSV columns: ``ROW_FIELDS`` (step, warmup, loss, lr, step_s, samples_per_s,
tokens_per_s, mfu); a value there is none of is empty, a number is written as Python's
``repr`` (it reads back as the same float). Each row is flushed as it is written, so a
run that ends early keeps every step it completed. A row that cannot be written (a full
disk) is a RunLogError, as the run log's own: the launch stops.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from typing import Any

from flextui.runtime.runlog import RunLogError, create_new
from flextui.runtime.stepfigures import ROW_FIELDS, StepRow

#: the scalars a TensorBoard log gets, by tag
SCALARS = ("loss", "lr", "samples_per_s", "tokens_per_s", "mfu")


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` can import (its ``tensorboard`` package is
    installed)."""
    return importlib.util.find_spec("tensorboard") is not None


class StepLog:
    """Writes each row to the CSV file (and TensorBoard where it imports)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"{name}.csv"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunLogError(f"cannot write step log {self.path}: "
                              f"{exc.strerror or exc}") from None
        self._file = create_new(self.path, "step log", "--log-dir", "x", newline="")
        self._csv = csv.writer(self._file)
        self._board: Any = None
        if tensorboard_available():
            from torch.utils.tensorboard import SummaryWriter
            self._board = SummaryWriter(log_dir=str(directory / name))
        self._write(ROW_FIELDS)

    def row(self, row: StepRow) -> None:
        values = row.to_dict()
        self._write([_cell(values[name]) for name in ROW_FIELDS])
        if self._board is not None:
            for tag in SCALARS:
                if values[tag] is not None:
                    self._board.add_scalar(tag, values[tag], row.step)

    def close(self, discard: bool = False) -> None:
        """Close the log; ``discard``: remove the CSV file too (the run never started)."""
        self._file.close()
        if self._board is not None:
            self._board.close()
        if discard:
            self.path.unlink(missing_ok=True)

    def _write(self, cells: Any) -> None:
        try:
            self._csv.writerow(cells)
            self._file.flush()
        except OSError as exc:
            raise RunLogError(f"cannot write step log {self.path}: "
                              f"{exc.strerror or exc}") from None


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
