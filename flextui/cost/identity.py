"""Rebuilding a cost model from the identity string a search log records."""

from __future__ import annotations

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.calibrated import CalibratedCommModel, parse_identity
from flextui.cost.model import CostModel
from flextui.cost.profiled import ProfiledCostModel, parse_identity as parse_profiled
from flextui.errors import FlextuiError


def cost_model_from_identity(identity: str) -> CostModel:
    """The cost model ``identity`` names; raise FlextuiError if flextui cannot rebuild it
    (a user's own model class: re-run with that model in Python instead)."""
    model = _rebuilt(identity)
    if model is None:
        shown = identity if len(identity) <= 80 else identity[:77] + "..."
        raise FlextuiError(f"cost model {shown!r} cannot be rebuilt from its name; "
                           "flextui rebuilds only its analytic, profiled and calibrated models "
                           "(use the Python API with your own cost model object)")
    return model


def check_identity(identity: str) -> None:
    """Raise FlextuiError if ``identity`` names one of flextui's cost models but is damaged
    (a hand-edited search log); a user's own model's identity passes unread."""
    _rebuilt(identity)


def _rebuilt(identity: str) -> CostModel | None:
    """The flextui cost model ``identity`` names, None if it names none of them;
    FlextuiError if it is damaged."""
    calibrated = parse_identity(identity)
    if calibrated is not None:
        base, calibrations = calibrated
        return CalibratedCommModel(cost_model_from_identity(base), calibrations)
    return ProfiledCostModel.from_identity(identity, cost_model_from_identity) \
        or AnalyticCostModel.from_identity(identity)


def cost_model_label(identity: str) -> str:
    """A short name for an identity, for summaries (a profiled model's identity holds
    its whole table of times)."""
    profiled = parse_profiled(identity)
    if profiled is not None:
        m, times, base, updates = profiled
        return (f"profiled ({m.device_name}, {m.dtype}, {len(times):,} tasks measured"
                f"{', updates measured' if updates else ''}; otherwise "
                f"{cost_model_label(base)})")
    return identity if len(identity) <= 160 else identity[:157] + "..."
