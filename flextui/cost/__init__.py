"""Cost models: the protocol the simulator uses and the analytic (roofline) model."""

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.model import CostModel, OpCost

__all__ = ["AnalyticCostModel", "CostModel", "OpCost"]
