"""Search options, and parsing the budgets and sizes people type on the command line."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from flextui.errors import FlextuiError

INITS = ("auto", "data-parallel", "expert", "model-parallel", "random")
MEMORY_POLICIES = ("penalize", "reject", "ignore")
DEFAULT_BUDGET = "30s"
BETA_SCALE = 300  # the default beta is BETA_SCALE / (the initial cost in ms)


class FieldError(FlextuiError):
    """A bad value in one named input (``field``: "budget", "workers", "batch_size"...).
    The message is the field's name and then ``problem``; a form shows it next to the
    field, the CLI names the flag instead (:attr:`flag_message`)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field.replace('_', ' ')} {problem}")
        self.field, self.problem = field, problem

    @property
    def flag_message(self) -> str:
        return f"--{self.field.replace('_', '-')} {self.problem}"


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. A budget in iterations is per chain and makes a run exactly
    reproducible (same seed, same inputs, same result, however many workers); a time
    budget bounds the wall time. With neither, the search runs until it converges or
    is stopped.

    ``beta`` is the Metropolis-Hastings inverse temperature, per millisecond of cost
    difference: a proposal ``d`` ms worse than the current strategy is accepted with
    probability ``exp(-beta * d)``. Left as None, it is ``BETA_SCALE / C0`` (300 / C0)
    where ``C0`` is the initial strategy's cost in ms, so a proposal 0.1% of ``C0`` worse
    than the current strategy is accepted with probability 0.74, 0.33% worse with 1/e,
    1% worse with 0.05: the same behaviour whether an iteration takes 1 ms or 1 s (a
    fixed beta, such as public FlexFlow's 0.05, is a random walk on small models and
    frozen on large ones). 300 was measured (README, "Search quality"): against 20 / C0
    it found 2.2-3.3x instead of 1.6-2.3x over the expert strategy for RNNLM, RNNTC and
    NMT on 16 GPUs in 60 s, and RNNLM-2's optimum on 4 GPUs in 7 of 8 seeds' 3 s runs
    instead of 2.

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

    ``tied``: the chance that a random config given to an op that shares its weights
    with others (the steps of an unrolled RNN layer) goes to all of them at once (a
    tied move, ``flextui.search.tied``): their gradients are synchronised together, so
    only moving the whole layer changes what its sync costs. 0 turns tied moves off.
    """

    iterations: int | None = None
    time_limit: float | None = None
    seed: int = 0
    chains: int = 1
    beta: float | None = None
    init: str = "auto"
    restart_every: int | None = None
    propagation: float = 0.25
    tied: float = 0.5
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
        raise FieldError("budget", f"{text!r}: give a number of iterations (5000) or a time "
                         "(30s, 2m, 1h)")
    if not match[2]:
        return int(match[1]), None
    return None, float(match[1]) * _TIME_UNITS[match[2]]


def parse_size(text: str, field: str = "memory_size") -> int:
    """``"12GiB"``, ``"16GB"``, ``"800MiB"`` -> bytes; a FieldError names ``field``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match[2].lower() if match else ""
    if not match or unit not in _SIZE_UNITS or float(match[1]) <= 0:
        raise FieldError(field, f"{text!r}: give a number and a unit, such as 12GiB, "
                         "16GB or 800MiB")
    return int(float(match[1]) * _SIZE_UNITS[unit])


def parse_whole(field: str, value: int | str, minimum: int | None = None) -> int:
    """A whole number typed (``"4"``) or given (``4``), at least ``minimum``."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise FieldError(field, f"{str(value)!r}: give a whole number") from None
    if minimum is not None and number < minimum:
        raise FieldError(field, f"must be at least {minimum}")
    return number


def parse_beta(value: float | str | None) -> float | None:
    """The inverse temperature: None (or "", "auto") for the default, else a number > 0."""
    if value is None or str(value).strip().lower() in ("", "auto"):
        return None
    try:
        beta = float(value)
    except ValueError:
        raise FieldError("beta", f"{value!r}: give a positive number, or leave it blank "
                         f"(auto: {BETA_SCALE} / the initial cost in ms)") from None
    if not beta > 0 or beta == float("inf"):
        raise FieldError("beta", f"{value!r}: must be a positive number")
    return beta


def search_options(budget: str = DEFAULT_BUDGET, *, seed: int | str = 0,
                   workers: int | str = 1, beta: float | str | None = None,
                   memory: str = "penalize", memory_budget: str | None = None,
                   **more: Any) -> SearchOptions:
    """SearchOptions from what a person typed, in the CLI or the app's Setup form: the
    budget ("30s", "5000"), seed, workers (chains), beta, memory policy and memory
    budget ("12GiB", blank for none); ``more`` are other SearchOptions fields as they
    are. A bad value raises FieldError naming its field."""
    iterations, seconds = parse_budget(budget)
    if memory not in MEMORY_POLICIES:
        raise FieldError("memory", f"{memory!r}: use one of {', '.join(MEMORY_POLICIES)}")
    limit = parse_size(memory_budget, "memory_budget") if memory_budget and \
        memory_budget.strip() else None
    return SearchOptions(iterations=iterations, time_limit=seconds,
                         seed=parse_whole("seed", seed),
                         chains=parse_whole("workers", workers, 1), beta=parse_beta(beta),
                         memory=memory, memory_budget=limit, **more)
