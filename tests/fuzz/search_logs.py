"""Search logs (``.ffsearch``): a finished search's log, damaged (``logmutations``),
then replayed, exported from, or resumed; a log a command only reads is left as it
was, a resumed one stays readable with every record it had."""

from __future__ import annotations

import random
from pathlib import Path

from flextui.errors import FlextuiError
from flextui.graph.builder import graph_from_dict
from flextui.machine import Cluster
from flextui.search.log import read_search_log
from flextui.search.logfile import scan_frames
from flextui.search.logformat import MAGIC, TAG_FINAL
from fuzz.bases import Bases
from fuzz.logmutations import LogFormat, damaged, without_final
from fuzz.oracle import FLEXTUI, Case

CATEGORY = "logs"
FORMAT = LogFormat(MAGIC, TAG_FINAL, {"graph": ("graph_hash", graph_from_dict),
                                        "cluster": ("cluster_hash", Cluster.from_dict)})


def case(rng: random.Random, index: int, bases: Bases, work: Path) -> Case:
    data = bases.search_log.read_bytes()
    command = rng.choice(["replay", "replay-json", "step", "trace", "resume", "resume"])
    if command == "resume" and rng.random() < 0.8:  # a finished search is never resumed
        data = without_final(FORMAT, data)
    log = work / "log.ffsearch"
    new, what = damaged(rng, FORMAT, data)
    log.write_bytes(new)
    argv = {
        "replay": ["replay", "--headless", log.name],
        "replay-json": ["replay", "--headless", "--json", log.name],
        "step": ["replay", "--headless", "--chain", str(rng.choice([0, 1, 2, -1])), "--step",
                 str(rng.choice([0, 1, 50, 299, 300, 301, -1])), "--export-strategy",
                 "at.json", log.name],
        "trace": ["replay", "--headless", "--trace", "trace.json", log.name],
        "resume": ["search", "--resume", log.name, "--budget", str(rng.choice([5, 20, 60])),
                   "--export-strategy", "best.json"],
    }[command]
    was_readable = readable(log)
    return Case(CATEGORY, index, f"{what}; {command}", [FLEXTUI, *argv], work,
                json=command == "replay-json", long=command == "resume",
                codes=frozenset({0, 2, 130}),
                check=lambda: kept(log, new, command == "resume", was_readable))


def readable(path: Path) -> bool:
    try:
        read_search_log(path)
    except FlextuiError:
        return False
    return True


def kept(path: Path, before: bytes, writes: bool, was_readable: bool) -> str | None:
    """The saved work is still there: a command that only reads a log left it as it was;
    a resume left a readable log holding every record it had."""
    after = path.read_bytes()
    if after == before:
        return None
    if not writes:
        return "a command that only reads the log changed it"
    if not was_readable:
        return "a resume changed a log it could not read"
    try:
        read_search_log(path)
    except FlextuiError as exc:
        return f"the resumed log can no longer be read: {exc}"[:300]
    if not after.startswith(before[:scan_frames(before, len(MAGIC), path).end]):
        return "the resume lost records the log had"
    return None
