"""Run logs (``.ffrun``): a finished launch's log, damaged (``logmutations``), then
shown with ``flextui runs show``; the log is left as it was."""

from __future__ import annotations

import random
from pathlib import Path

from flextui.graph.builder import graph_from_dict
from flextui.runtime.runlog import MAGIC, TAG_FINAL
from fuzz.bases import Bases
from fuzz.logmutations import LogFormat, damaged
from fuzz.oracle import FLEXTUI, Case

CATEGORY = "runlogs"
FORMAT = LogFormat(MAGIC, TAG_FINAL, {"graph": ("graph_hash", graph_from_dict)})


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    log = work / "run.ffrun"
    new, what = damaged(rng, FORMAT, bases.run_log.read_bytes())
    log.write_bytes(new)
    as_json = rng.random() < 0.4
    argv = [FLEXTUI, "runs", "show", *(["--json"] if as_json else []), log.name]
    return Case(CATEGORY, index, what, argv, work, json=as_json,
                check=lambda: None if log.read_bytes() == new else
                "runs show changed the run log")
