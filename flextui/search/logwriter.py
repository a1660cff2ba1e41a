"""Writing a search log (``.ffsearch``) as a search runs, new or resumed: records
buffered and flushed at least every ``flush_interval`` seconds, the file locked against
other writers (``logfile``), the format in ``logformat``; ``log`` reads it back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Self

from flextui.documents import pack
from flextui.errors import SearchLogError
from flextui.search.events import StepEvent, StopReason
from flextui.search.log import SearchLog
from flextui.search.logfile import LogFile
from flextui.search.logformat import (
    MAGIC,
    TAG_CHECKPOINT,
    TAG_FINAL,
    TAG_HEADER,
    TAG_RESTART,
    TAG_STEP,
    Checkpoint,
    Encoder,
    FinalRecord,
    FrontierPoint,
    SearchHeader,
    frame,
    now_iso,
)


class SearchLogWriter:
    """Appends records to a ``.ffsearch`` file. Records are buffered; :meth:`flush` writes
    them out, and adding a record flushes by itself once ``flush_interval`` seconds have
    passed since the last flush, so a killed search loses at most that much. The file is
    locked against other writers while the writer is open (``logfile`` has the rules)."""

    def __init__(self, path: str | Path, header: SearchHeader, flush_interval: float = 1.0,
                 *, _file: LogFile | None = None) -> None:
        if flush_interval < 0:
            raise ValueError("flush_interval must be >= 0")
        self.path = Path(path)
        self.header = header
        self.flush_interval = float(flush_interval)
        self._enc = Encoder(header.graph, header.cluster)
        self._buffer: list[bytes] = []
        self._closed = False
        self._last_flush = time.monotonic()
        if _file is not None:             # resume(): the file is open, locked and cut
            self._file = _file
            return
        if not header.created:
            header.created = now_iso()
        body = self._pack(self._header_body(header))
        self._file = LogFile.create(self.path)
        self._buffer.append(MAGIC + frame(body))
        try:
            self.flush()
        except BaseException:
            self._file.close(remove=True)     # ours, and not even a header in it
            raise

    @classmethod
    def resume(cls, log: SearchLog, flush_interval: float = 1.0) -> SearchLogWriter:
        """Reopen ``log.path`` to append to it; a torn last record is cut off first."""
        path = Path(log.path)
        f = LogFile.reopen(path)
        try:
            size = f.size
            expected = log._size if log._size is not None else (
                size if log.truncated else log.complete_bytes)
            if size != expected or size < log.complete_bytes:
                raise SearchLogError(f"{path} changed since it was read ({size} bytes, "
                                     f"expected {expected}); read it again before resuming")
            if size > log.complete_bytes:
                f.truncate(log.complete_bytes)
        except OSError as exc:
            f.close()
            raise SearchLogError(f"cannot resume search log {path}: "
                                 f"{exc.strerror or exc}") from None
        except BaseException:
            f.close()
            raise
        return cls(path, log.header, flush_interval, _file=f)

    # -- records --

    def _header_body(self, h: SearchHeader) -> list:
        if type(h.seed) is not int or not isinstance(h.cost_model, str):
            raise SearchLogError(f"the search seed must be an integer and the cost model a string "
                                 f"(got {h.seed!r:.40} and {h.cost_model!r:.40})")
        return [TAG_HEADER, {
            "version": int(h.version), "flextui": h.flextui_version, "created": h.created,
            "graph": h.graph.to_dict(), "graph_hash": h.graph.fingerprint,
            "cluster": h.cluster.to_dict(), "cluster_hash": h.cluster.fingerprint,
            "cost_model": h.cost_model, "seed": h.seed, "options": h.options.to_dict(),
        }]

    @staticmethod
    def _pack(record: list) -> bytes:
        try:
            return pack(record)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SearchLogError(f"cannot store a search-log record: {exc}") from None

    def _add(self, record: list) -> None:
        if self._closed:
            raise ValueError(f"search log {self.path} is closed")
        self._buffer.append(frame(self._pack(record)))
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def step(self, event: StepEvent) -> None:
        current = None if event.current == event.proposed else float(event.current)
        best = None if event.best == event.current else float(event.best)
        op = int(event.op)
        record = [TAG_STEP, int(event.chain), int(event.iteration), float(event.elapsed), op,
                  self._enc.config(op, event.config), float(event.proposed), current, best,
                  bool(event.accepted), int(event.memory)]
        if event.others or event.early or event.stages or event.pipeline:
            record.append([[int(o), self._enc.config(o, c)] for o, c in event.others])
        if event.early or event.stages or event.pipeline:
            record.append(bool(event.early))
        if event.stages or event.pipeline:
            record.append([[int(p), int(stage)] for p, stage in event.stages])
        if event.pipeline:
            record.append(self._enc.pipeline(event.pipeline))
        self._add(record)

    def restart(self, chain: int, iteration: int) -> None:
        self._add([TAG_RESTART, int(chain), int(iteration)])

    def checkpoint(self, cp: Checkpoint, frontier: list[FrontierPoint]) -> None:
        version, internal, gauss = cp.rng_state
        self._add([TAG_CHECKPOINT, int(cp.chain), int(cp.iteration), float(cp.elapsed),
                   self._enc.strategy(cp.current), float(cp.current_cost),
                   self._enc.strategy(cp.best), float(cp.best_cost),
                   [version, list(internal), gauss], self._enc.frontier(frontier)])

    def final(self, record: FinalRecord) -> None:
        if record.reason not in tuple(StopReason):
            raise ValueError(f"final reason must be one of {', '.join(StopReason)}, "
                             f"not {record.reason!r:.40}")
        self._add([TAG_FINAL, str(record.reason), int(record.iterations), float(record.elapsed),
                   float(record.best_cost), self._enc.strategy(record.best), int(record.best_chain),
                   self._enc.frontier(record.frontier)])
        self.flush()

    # -- file --

    def flush(self) -> None:
        """Write the buffered records. If the disk refuses them (full, or a size limit),
        LogWriteError says so and the file keeps the whole records it has."""
        if self._buffer:
            records = list(self._buffer)
            self._buffer.clear()
            self._file.append(records)
        self._last_flush = time.monotonic()

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
