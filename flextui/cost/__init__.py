"""Cost models: the protocol the simulator uses and the analytic (roofline) model."""

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.identity import cost_model_from_identity
from flextui.cost.model import CostModel, OpCost

__all__ = ["AnalyticCostModel", "CostModel", "OpCost", "cost_model_from_identity"]
