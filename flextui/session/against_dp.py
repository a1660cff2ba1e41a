"""A strategy against data parallelism, as predicted and as measured: the comparison a
user launches a searched strategy for (``flextui launch --against-dp``, the Launch
screen's ``b``)."""

from __future__ import annotations

from dataclasses import dataclass

#: what a predicted gain measured as a loss is called, wherever it is shown
CONTRADICTED = "predicted faster, measured slower"


def _ratio(data_parallel_s: float | None, strategy_s: float | None) -> float | None:
    return data_parallel_s / strategy_s if data_parallel_s and strategy_s else None


@dataclass(frozen=True)
class AgainstDataParallel:
    """How many times faster than data parallelism the strategy's iteration is: as the
    simulator predicted it (``predicted``) and as the two runs measured it
    (``measured``), each data parallelism's iteration over the strategy's; None where a
    figure is missing."""

    predicted: float | None
    measured: float | None

    @classmethod
    def of(cls, strategy_simulated_s: float | None, strategy_measured_s: float | None,
           data_parallel_simulated_s: float | None,
           data_parallel_measured_s: float | None) -> AgainstDataParallel:
        return cls(_ratio(data_parallel_simulated_s, strategy_simulated_s),
                   _ratio(data_parallel_measured_s, strategy_measured_s))

    @property
    def contradicted(self) -> bool:
        """A predicted gain that measured as a loss."""
        return (self.predicted is not None and self.measured is not None
                and self.predicted > 1.0 > self.measured)

    def describe(self) -> str:
        predicted = "n/a" if self.predicted is None else f"{self.predicted:.2f}x"
        measured = "n/a" if self.measured is None else f"{self.measured:.2f}x"
        line = f"against data parallelism: predicted {predicted}, measured {measured}"
        if self.contradicted:
            line += f" ({CONTRADICTED})"
        return line

    def to_dict(self) -> dict[str, float | bool | None]:
        return {"predicted_speedup": self.predicted, "measured_speedup": self.measured,
                "contradicted": self.contradicted}
