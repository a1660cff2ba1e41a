"""A cost model whose communication times come from a communication calibration.

:class:`CalibratedCommModel` wraps any cost model: operator times (and anything else the
the optimizer update) are the base model's; a transfer over a link whose
kind was calibrated takes the measured point-to-point time divided by the hops of the
measured route; a gradient all-reduce whose ring uses only links of one calibrated kind
takes the measured all-reduce time, rescaled from the measured world size ``P`` to the
group's size ``p`` by the ring factor ((p-1)/p) / ((P-1)/P) — NCCL's "bus bandwidth"
convention, exact for bandwidth-bound sizes, optimistic for latency-bound sizes when
p > P. Every other all-reduce is the base model's.

The identity embeds the base identity and the calibrations themselves (not just a
hash), so ``cost_model_from_identity`` rebuilds the model in search workers and replay
with no calibration file at hand.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from flextui.cost.calibration import CommCalibration
from flextui.cost.model import CostModel, LinkTerms, OpCost, transfer_terms
from flextui.cost.optimizers import OptimizerKind
from flextui.errors import FlextuiError
from flextui.graph import Op
from flextui.limits import read_json
from flextui.machine import Cluster, Device, Link

IDENTITY_PREFIX = "calibrated-comm-v1"


class CalibratedCommModel(CostModel):
    def __init__(self, base: CostModel, calibrations: Sequence[CommCalibration]) -> None:
        if not calibrations:
            raise FlextuiError("no communication calibration to apply; measure one first "
                               "(or use the base cost model)")
        by_kind: dict[str, CommCalibration] = {}
        for calibration in calibrations:
            if calibration.link_kind in by_kind:
                raise FlextuiError(f"two communication calibrations for link kind "
                                   f"{calibration.link_kind!r}; pass one per link kind")
            by_kind[calibration.link_kind] = calibration
        self.base = base
        self.calibrations = tuple(by_kind[k] for k in sorted(by_kind))
        self._by_kind = by_kind

    @property
    def identity(self) -> str:
        """``calibrated-comm-v1`` followed by canonical JSON of the base identity and the
        calibrations; ``parse_identity`` reads it back."""
        body = {"base": self.base.identity,
                "calibrations": [c.to_dict() for c in self.calibrations]}
        return IDENTITY_PREFIX + json.dumps(body, sort_keys=True, separators=(",", ":"),
                                            allow_nan=False)

    def op_cost(self, op: Op, block_shape: tuple[int, ...], device: Device) -> OpCost:
        return self.base.op_cost(op, block_shape, device)

    def update_s(self, nbytes: float, device: Device,
                 optimizer: OptimizerKind = OptimizerKind.SGD) -> float:
        return self.base.update_s(nbytes, device, optimizer)

    def transfer_s(self, nbytes: int, link: Link) -> float:
        calibration = self._by_kind.get(link.kind)
        if calibration is None:
            return self.base.transfer_s(nbytes, link)
        return calibration.p2p_s(nbytes) / calibration.hops

    def transfer_terms(self, link: Link) -> LinkTerms | None:
        """The base model's, on links of a kind not calibrated (a measured curve is
        not taken to be affine)."""
        return transfer_terms(self.base, link) if link.kind not in self._by_kind else None

    def allreduce_s(self, nbytes: float, devices: tuple[int, ...], cluster: Cluster) -> float:
        """All-reduce time of ``nbytes`` over ``devices`` (see the module docstring)."""
        ring = zip(devices, devices[1:] + devices[:1])
        kinds = {link.kind for a, b in ring for link in cluster.route(a, b)}
        calibration = self._by_kind.get(kinds.pop()) if len(kinds) == 1 else None
        if calibration is None:
            return self.base.allreduce_s(nbytes, devices, cluster)
        p, measured = len(devices), calibration.world_size
        return calibration.allreduce_s(nbytes) * ((p - 1) / p) / ((measured - 1) / measured)

    def __repr__(self) -> str:
        kinds = ", ".join(self._by_kind)
        return f"CalibratedCommModel({self.base!r}, link kinds: {kinds})"


def parse_identity(identity: str) -> tuple[str, list[CommCalibration]] | None:
    """(base identity, calibrations) of a calibrated model's identity; None if
    ``identity`` is not one; FlextuiError if it is one but malformed."""
    if not identity.startswith(IDENTITY_PREFIX + "{"):
        return None
    try:
        body = read_json(identity[len(IDENTITY_PREFIX):], "calibrated cost model")
    except ValueError:
        body = None
    if not (isinstance(body, dict) and set(body) == {"base", "calibrations"}
            and isinstance(body["base"], str) and isinstance(body["calibrations"], list)):
        raise FlextuiError(f"cost model identity {identity[:60]!r}... is a damaged "
                           f"calibrated-model identity; re-run the search")
    try:
        calibrations = [CommCalibration.from_dict(c) for c in body["calibrations"]]
    except FlextuiError as exc:
        raise FlextuiError(f"cost model identity {identity[:60]!r}... carries a bad "
                           f"calibration ({exc}); re-run the search") from None
    return body["base"], calibrations
