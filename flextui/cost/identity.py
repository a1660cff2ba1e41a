"""Rebuilding a cost model from the identity string a search log records."""

from __future__ import annotations

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.calibrated import CalibratedCommModel, parse_identity
from flextui.cost.model import CostModel
from flextui.errors import FlextuiError


def cost_model_from_identity(identity: str) -> CostModel:
    """The cost model ``identity`` names; raise FlextuiError if flextui cannot rebuild it
    (a user's own model class: re-run with that model in Python instead)."""
    calibrated = parse_identity(identity)
    if calibrated is not None:
        base, calibrations = calibrated
        return CalibratedCommModel(cost_model_from_identity(base), calibrations)
    model = AnalyticCostModel.from_identity(identity)
    if model is None:
        shown = identity if len(identity) <= 80 else identity[:77] + "..."
        raise FlextuiError(f"cost model {shown!r} cannot be rebuilt from its name; "
                           "flextui rebuilds only its analytic and calibrated models "
                           "(use the Python API with your own cost model object)")
    return model

