"""The campaign: cases generated per category from one seed (case ``i`` of a category
is the same on every run), run one after another, and counted."""

from __future__ import annotations

import importlib
import random
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fuzz.bases import Bases
from fuzz.oracle import Case, Verdict, run_case

#: category -> the module that makes its cases; the cost column is a relative weight
#: for the default number of cases (a launch costs a hundred times a file read)
CATEGORIES = {
    "logs": "fuzz.search_logs",
    "runlogs": "fuzz.run_logs",
    "clusters": "fuzz.clusters",
    "strategies": "fuzz.strategies",
    "caches": "fuzz.caches",
    "options": "fuzz.options",
    "hosts": "fuzz.hosts",
    "node": "fuzz.node_requests",
    "models": "fuzz.model_files",
    "signals": "fuzz.signals",
}


@dataclass
class Tally:
    cases: int = 0
    failures: list[Verdict] = field(default_factory=list)


def make_case(category: str, seed: int, index: int, bases: Bases, root: Path) -> Case:
    module = importlib.import_module(CATEGORIES[category])
    work = root / category / str(index)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = random.Random(f"{seed}:{category}:{index}")
    return module.case(rng, index, bases, work)


def campaign(seed: int, plan: Iterable[tuple[str, Iterable[int]]], bases_dir: Path, root: Path,
             on_verdict: Callable[[Verdict], None] = lambda v: None,
             **limits: float) -> dict[str, Tally]:
    """Run the cases ``plan`` names (category, case indexes); a passed case's directory
    is removed, a failed one's kept to reproduce it. ``limits`` go to ``run_case``."""
    tallies: dict[str, Tally] = {}
    bases = Bases(bases_dir)
    for category, indexes in plan:
        tally = tallies.setdefault(category, Tally())
        for index in indexes:
            case = make_case(category, seed, index, bases, root)
            verdict = run_case(case, **limits)
            tally.cases += 1
            if not verdict.ok:
                tally.failures.append(verdict)
            else:
                shutil.rmtree(case.cwd, ignore_errors=True)
            on_verdict(verdict)
    return tallies
