"""Rebuilding a cost model from the identity string a search log records."""

from __future__ import annotations

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.model import CostModel
from flextui.errors import FlextuiError


def cost_model_from_identity(identity: str) -> CostModel:
    """The cost model ``identity`` names; raise FlextuiError if flextui cannot rebuild it
    (a user's own model class: re-run with that model in Python instead)."""
    model = AnalyticCostModel.from_identity(identity)
    if model is None:
        raise FlextuiError(f"cost model {identity!r} cannot be rebuilt from its name; "
                           "flextui rebuilds only its analytic model "
                           "(use the Python API with your own cost model object)")
    return model
