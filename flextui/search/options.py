"""Search options, and parsing the budgets and sizes people type on the command line."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from flextui.errors import FlextuiError

INITS = ("auto", "data-parallel", "expert", "model-parallel", "random")


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. A budget in iterations is per chain and makes a run exactly
    reproducible (same seed, same inputs, same result, however many workers); a time
    budget bounds the wall time. With neither, the search runs until it converges or
    is stopped.

    ``beta`` is the Metropolis-Hastings inverse temperature, per millisecond of cost
    difference: a proposal ``d`` ms worse than the current strategy is accepted with
    probability ``exp(-beta * d)``. Left as None, it is ``20 / C0`` where ``C0`` is the
    initial strategy's cost in ms, so a proposal 5% worse than where the chain started
    is accepted with probability 1/e, 1% worse with 0.82, 20% worse with 0.02 — the
    same behaviour whether an iteration takes 1 ms or 1 s (a fixed beta, such as
    public FlexFlow's 0.05, is a random walk on small models and frozen on large ones).

    ``init``: where chains start: "auto" (the faster of data parallelism and the expert
    strategy), a built-in strategy's name, or "random" (a different one per chain).

    ``converge``: stop once the best has not improved for half the search so far
    (paper 6.2), counted in the budget's unit (iterations when the budget is in
    iterations, so the rule keeps runs reproducible) and never before ``min_steps``.
    ``restart_every``: every that many iterations, a chain goes back to its best
    strategy (as public FlexFlow does).

    ``propagation``: the chance that a step is a propagation move (public FlexFlow's
    ``propagate`` rewrite) instead of one random config: the picked op's config is
    copied along a walk of its neighbours, so a run of ops can move to a new
    partitioning in one step instead of climbing through the transfers each one-op
    step would add at the run's edges. 0 gives the paper's one-op proposals only.
    """

    iterations: int | None = None
    time_limit: float | None = None
    seed: int = 0
    chains: int = 1
    beta: float | None = None
    init: str = "auto"
    restart_every: int | None = None
    propagation: float = 0.25
    converge: bool = True
    min_steps: int = 1000
    training: bool = True
    memory: str = "penalize"
    memory_budget: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> SearchOptions:
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) - known:
            raise FlextuiError(f"{where}: unknown search options {sorted(set(data) - known)}")
        return cls(**data)

    def with_changes(self, **changes: Any) -> SearchOptions:
        return SearchOptions(**{**asdict(self), **changes})


_TIME_UNITS = {"s": 1, "m": 60, "h": 3600}
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``"5000"`` is 5000 iterations per chain; ``"30s"``, ``"2m"``, ``"1.5h"`` a time
    limit. Returns (iterations, seconds), one of them None."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or (not match[2] and "." in match[1]) or float(match[1]) <= 0:
        raise FlextuiError(f"budget {text!r}: give a number of iterations (5000) or a time "
                           "(30s, 2m, 1h)")
    if not match[2]:
        return int(match[1]), None
    return None, float(match[1]) * _TIME_UNITS[match[2]]


def parse_size(text: str) -> int:
    """``"12GiB"``, ``"16GB"``, ``"800MiB"`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match[2].lower() if match else ""
    if not match or unit not in _SIZE_UNITS or float(match[1]) <= 0:
        raise FlextuiError(f"memory size {text!r}: give a number and a unit, such as 12GiB, "
                           "16GB or 800MiB")
    return int(float(match[1]) * _SIZE_UNITS[unit])
