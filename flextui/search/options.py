"""Search options, and parsing the budgets and sizes people type on the command line."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from flextui.cost.optimizers import OptimizerKind
from flextui.errors import FieldError, FlextuiError
from flextui.fields import FormFields
from flextui.limits import CHAINS, MAX_INTEGER, TEXT_CHARS, integer_problem
from flextui.machine.units import parse_bytes
from flextui.sim.memory import MemoryPolicy
from flextui.strategy.pipeline import Schedule
from flextui.strategy.precision import Precision

INITS = ("auto", "data-parallel", "expert", "model-parallel", "random")
DEFAULT_BUDGET = "30s"
BETA_SCALE = 300  # the default beta is BETA_SCALE / (the initial makespan in ms)
#: the smallest memory budget: anything less is a mistake (a size typed without a unit)
MIN_MEMORY_BUDGET = 2**20


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. A budget in iterations is per chain and makes a run exactly
    reproducible (same seed, same inputs, same result, however many workers); a time
    budget bounds the wall time. With neither, the search runs until it converges or
    is stopped.

    ``beta`` is the Metropolis-Hastings inverse temperature, per millisecond of cost
    difference: a proposal ``d`` ms worse than the current strategy is accepted with
    probability ``exp(-beta * d)``. Left as None, it is ``BETA_SCALE / C0`` (300 / C0)
    where ``C0`` is the initial strategy's makespan in ms (``beta_of_makespan``; its
    cost with the memory penalty in logs from before: a start far over memory then set
    the temperature by its penalty, a GPT-2 XL-sized model starting 21 GiB over 16 GiB
    devices at 96 s where its iterations take 3-9 s, and the chain wandered at 8-12 s
    and never fit), so a proposal 0.1% of ``C0`` worse
    than the current strategy is accepted with probability 0.74, 0.33% worse with 1/e,
    1% worse with 0.05: the same behaviour whether an iteration takes 1 ms or 1 s (a
    fixed beta, such as public FlexFlow's 0.05, is a random walk on small models and
    frozen on large ones). 300 was measured (docs/speed.md, "Search quality"): against
    20 / C0 it found 2.2-3.3x instead of 1.6-2.3x over the expert strategy for RNNLM,
    RNNTC and NMT on 16 GPUs in 60 s, and RNNLM-2's optimum on 4 GPUs in 7 of 8 seeds'
    3 s runs instead of 2.

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

    ``recompute``: the chance that a step switches recomputation (activation
    checkpointing) on or off for an op and often a run of ops after it
    (``flextui.search.recompute``), trading time for memory: made only while the
    current strategy does not fit (a device over its memory or the memory budget; under
    the "ignore" memory policy nothing is short) or has ops recomputed, since otherwise
    it can only cost time. 0 turns the move off (inference never makes it).

    ``shard``: the chance that a step sets the shard stage of a run of parameters, or
    of all of them (ZeRO's stages, ``flextui.search.shard``): made, as recomputation
    is, only while the current strategy does not fit or has parameters sharded. 0 turns
    the move off (inference and one device never make it). ``top_shard_stage``: the
    highest stage it sets (3; logs from before stage 3 was built read 2).

    ``optimizer``: the update training runs (SGD with momentum, AdamW), whose state
    every device's memory holds beside its parameters and gradients.

    ``precision``: what every strategy the search makes trains in (fp32, or bf16 mixed
    precision: ``strategy.precision``); not a move: bf16 is faster and smaller in any
    simulation, and what it changes is the numbers the model trains with.

    ``pipeline``: the chance that a step sets another number of micro-batches or the
    other schedule (``flextui.search.pipeline``: a full simulation); ``stage``: the
    chance that a step puts a run of layers on one group of devices (a pipeline stage);
    ``microbatches`` and ``schedule``: the pipeline every chain starts in (its starting
    strategy's sample splits lowered where a micro-batch does not allow them). 0 turns
    a move off (inference never makes a pipeline move). ``guarded_pipeline``: a
    pipeline move is taken only when it does not raise the cost, proposes no more
    micro-batches than keep the ops' tasks under ``mcmc.MAX_PIPELINE_TASKS``, and from a
    single micro-batch draws the schedule too (1F1B's memory is then one move away), so a
    chain
    simulates under micro-batches (a delta proposal there re-times every micro-batch's
    tasks: 50x a proposal without on Inception-v3 at 64 GPUs) only when they pay; off,
    the moves as first built (taken uphill as the others are; from one micro-batch the
    schedule kept), as logs from before them ran.

    ``early_reject``: a step draws its acceptance threshold before it simulates, and
    stops simulating a proposal once its makespan provably exceeds it (the proposal is
    rejected, as it would have been; see ``mcmc``). A chain makes the same moves and
    decisions either way; early-rejected proposals are not on the frontier.
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
    recompute: float = 0.1
    shard: float = 0.1
    converge: bool = True
    min_steps: int = 1000
    training: bool = True
    memory: MemoryPolicy = MemoryPolicy.PENALIZE
    memory_budget: int | None = None
    early_reject: bool = True
    optimizer: OptimizerKind = OptimizerKind.SGD
    beta_of_makespan: bool = True
    top_shard_stage: int = 3
    precision: Precision = Precision.FP32
    pipeline: float = 0.02
    stage: float = 0.05
    microbatches: int = 1
    schedule: Schedule = Schedule.GPIPE
    guarded_pipeline: bool = True

    def __post_init__(self) -> None:
        """Every field's type and range, checked by the rules the CLI and the Setup form
        parse with (a FieldError names the field), so options built in Python or read
        from a search log are as sound as typed ones."""
        for f in fields(self):
            object.__setattr__(self, f.name, _CHECKS[f.name](f.name, getattr(self, f.name)))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> SearchOptions:
        """Options as a search log stores them; a FlextuiError names ``where`` and the
        field."""
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict):
            raise FlextuiError(f"{where}: search options must be a mapping")
        unknown = sorted(str(k)[:40] for k in set(data) - known)
        if unknown:
            raise FlextuiError(f"{where}: unknown search options {unknown}")
        try:   # logs from before early rejection, recomputation, sharding, the makespan's
            # beta or pipelines ran without them, and those from before guarded pipeline
            # moves with the moves as first built
            return cls(**{"early_reject": False, "recompute": 0.0, "shard": 0.0,
                          "beta_of_makespan": False, "top_shard_stage": 2, "pipeline": 0.0,
                          "stage": 0.0, "guarded_pipeline": False, **data})
        except FieldError as e:
            raise FlextuiError(f"{where}: options.{e.field}: {e.problem}") from None

    def with_changes(self, **changes: Any) -> SearchOptions:
        return SearchOptions(**{**asdict(self), **changes})


_TIME_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> tuple[int | None, float | None]:
    """``"5000"`` is 5000 iterations per chain; ``"30s"``, ``"2m"``, ``"1.5h"`` a time
    limit. Returns (iterations, seconds), one of them None."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or (not match[2] and "." in match[1]) or float(match[1]) <= 0:
        raise FieldError("budget", f"{text!r:.40}: give a number of iterations (5000) or a "
                         "time (30s, 2m, 1h)")
    if not match[2]:
        return parse_whole("budget", match[1], 1), None
    return None, _positive("budget", float(match[1]) * _TIME_UNITS[match[2]])


def parse_size(text: str, field: str = "memory_size", minimum: int = 1) -> int:
    """``"12GiB"``, ``"16GB"``, ``"800MiB"`` -> bytes, at least ``minimum``, read as a
    cluster file's sizes are (:func:`flextui.machine.units.parse_bytes`); a FieldError
    names ``field``."""
    try:
        nbytes = parse_bytes(text)
    except ValueError as e:
        raise FieldError(field, str(e)) from None
    if nbytes < minimum:
        raise FieldError(field, f"{text!r:.40} is {nbytes:,} bytes, less than "
                         f"{_shown(field, minimum)}; give a number and a unit, such as 12GiB, "
                         "16GB or 800MiB")
    return _whole(field, nbytes, minimum)


def parse_whole(field: str, value: int | str, minimum: int | None = None,
                maximum: int | None = None) -> int:
    """A whole number typed (``"4"``) or given (``4``), from ``minimum`` to ``maximum``."""
    text = str(value).strip() if isinstance(value, str) else None
    if text is not None and re.fullmatch(r"[+-]?\d+", text):
        digits = len(text.lstrip("+-"))
        value = int(text) if digits <= len(str(MAX_INTEGER)) else MAX_INTEGER + 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(field, f"{str(value)!r:.40}: give a whole number")
    return _whole(field, value, minimum, maximum)


def _whole(field: str, value: int, minimum: int | None = None,
           maximum: int | None = None) -> int:
    if minimum is not None and value < minimum:
        raise FieldError(field, f"must be at least {_shown(field, minimum)}")
    if maximum is not None and value > maximum:
        raise FieldError(field, f"must be at most {maximum:,}")
    if integer_problem(value):
        raise FieldError(field, f"must be at most {MAX_INTEGER:,}")
    return value


def _shown(field: str, value: int) -> str:
    return "1 MiB" if field == "memory_budget" and value == MIN_MEMORY_BUDGET else f"{value:,}"


def _positive(field: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise FieldError(field, "must be a positive, finite number")
    return value


def parse_beta(value: float | str | None) -> float | None:
    """The inverse temperature: None (or "", "auto") for the default, else a number > 0."""
    if value is None or str(value).strip().lower() in ("", "auto"):
        return None
    try:
        beta = float(value)
    except ValueError:
        raise FieldError("beta", f"{value!r:.40}: give a positive number, or leave it blank "
                         f"(auto: {BETA_SCALE} / the initial makespan in ms)") from None
    if not beta > 0 or beta == float("inf"):
        raise FieldError("beta", f"{value!r:.40}: must be a positive number")
    return beta


# -- the checks SearchOptions makes of each field (type, then range) ------------------

_FIELDS = FormFields()


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    """``check``, letting None (not set) pass."""
    return lambda field, value: None if value is None else check(field, value)


def _init(field: str, value: Any) -> str:
    value = _FIELDS.string(value, field, limit=None, empty=True)
    if not value or TEXT_CHARS.problem(len(value)):
        raise FieldError(field, f"must name a start ({', '.join(INITS)}) or a strategy "
                         f"file of at most {TEXT_CHARS.value:,} characters")
    return value


def _memory(field: str, value: Any) -> MemoryPolicy:
    return MemoryPolicy(_FIELDS.choice(value, field, tuple(MemoryPolicy)))


def _fraction(field: str, value: Any) -> float:
    return _FIELDS.number(value, field, 0.0, 1.0)


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "iterations": _optional(lambda f, v: _FIELDS.integer(v, f, 1)),
    "time_limit": _optional(lambda f, v: _positive(f, _FIELDS.number(v, f))),
    "seed": lambda f, v: _FIELDS.integer(v, f),
    "chains": lambda f, v: _FIELDS.integer(v, f, 1, CHAINS.value),
    "beta": _optional(lambda f, v: _positive(f, _FIELDS.number(v, f))),
    "init": _init,
    "restart_every": _optional(lambda f, v: _FIELDS.integer(v, f, 1)),
    "propagation": _fraction,
    "tied": _fraction,
    "recompute": _fraction,
    "shard": _fraction,
    "converge": lambda f, v: _FIELDS.boolean(v, f),
    "min_steps": lambda f, v: _FIELDS.integer(v, f, 0),
    "training": lambda f, v: _FIELDS.boolean(v, f),
    "early_reject": lambda f, v: _FIELDS.boolean(v, f),
    "memory": _memory,
    "optimizer": lambda f, v: OptimizerKind(_FIELDS.choice(v, f, tuple(OptimizerKind))),
    "beta_of_makespan": lambda f, v: _FIELDS.boolean(v, f),
    "top_shard_stage": lambda f, v: _FIELDS.integer(v, f, 1, 3),
    "precision": lambda f, v: Precision(_FIELDS.choice(v, f, tuple(Precision))),
    "pipeline": _fraction,
    "stage": _fraction,
    "microbatches": lambda f, v: _FIELDS.integer(v, f, 1, 1 << 16),
    "schedule": lambda f, v: Schedule(_FIELDS.choice(v, f, tuple(Schedule))),
    "guarded_pipeline": lambda f, v: _FIELDS.boolean(v, f),
    "memory_budget": _optional(lambda f, v: _FIELDS.integer(v, f, MIN_MEMORY_BUDGET)),
}


def search_options(budget: str = DEFAULT_BUDGET, *, seed: int | str = 0,
                   workers: int | str = 1, beta: float | str | None = None,
                   memory: MemoryPolicy | str = MemoryPolicy.PENALIZE,
                   memory_budget: str | None = None,
                   **more: Any) -> SearchOptions:
    """SearchOptions from what a person typed, in the CLI or the app's Setup form: the
    budget ("30s", "5000"), seed, workers (chains), beta, memory policy and memory
    budget ("12GiB", blank for none); ``more`` are other SearchOptions fields as they
    are. A bad value raises FieldError naming its field."""
    iterations, seconds = parse_budget(budget)
    policy = _memory("memory", memory)
    limit = parse_size(memory_budget, "memory_budget", MIN_MEMORY_BUDGET) if memory_budget \
        and memory_budget.strip() else None
    return SearchOptions(iterations=iterations, time_limit=seconds,
                         seed=parse_whole("seed", seed),
                         chains=parse_whole("workers", workers, 1, CHAINS.value),
                         beta=parse_beta(beta), memory=policy, memory_budget=limit, **more)
